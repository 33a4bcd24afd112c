"""Probe throughput against a local ASGI server (uvicorn on 127.0.0.1), and the sample budget.

The server is the fake of ``specgauge.fixtures.fake_openai`` served by uvicorn in its own
process over real TCP, answering at once or after 50 ms a request (``latency_s``: a stand-in for a GPU's
time per request), so what is timed is the probe itself: request building, the async
client and its connection pool, JSON parsing, the append-only journal. One sample a
request (the server ignores ``n``, as `transformers serve` does) at 64 requests in
flight; the probe with ``n`` = 16; and a naive baseline (one request at a time, no
journal). The target is ≥ 500 samples/s at one sample a request and concurrency 64, with
the 50 ms latency. The last test prints the rates side by side and the samples the
one-sample and two-sample tests need for TV 0.05 and 0.1 at false-fail 1e-6.

Run with ``pytest benchmarks/bench_probe.py --benchmark-enable -s``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

httpx2 = pytest.importorskip("httpx2")
uvicorn = pytest.importorskip("uvicorn")

from specgauge.fixtures.serve import free_port  # noqa: E402
from specgauge.stattests.server.probe import ClientConfig, ProbeConfig, probe  # noqa: E402
from specgauge.stattests.server.stats import min_num_samples_for_conditional_fit, min_num_samples_for_homogeneity  # noqa: E402

PROMPTS = ["one", "two", "three", "four"]
SAMPLES = 500
LENGTH = 3
CONCURRENCY = 64
LATENCY_S = 0.05
TARGET = 500.0
_RATES: dict[str, float] = {}


class _Server:
    """The fake served by uvicorn in its own process on a free port, for a ``with`` block."""

    def __init__(self, latency_s: float, honour_n: bool) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.command = [sys.executable, "-m", "specgauge.fixtures.fake_openai", str(port), str(latency_s)] \
            + ([] if honour_n else ["--no-n"])

    def __enter__(self) -> str:
        self.process = subprocess.Popen(self.command)
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(self.url + "/v1/models", timeout=1):
                    return self.url
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.__exit__()
                    raise RuntimeError("the fake server did not start")
                time.sleep(0.1)

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def _probe_once(tmp_path, url: str, n: int) -> int:
    out = tmp_path / f"run-{time.perf_counter_ns()}.jsonl"
    cfg = ProbeConfig(url, max_tokens=LENGTH, samples_per_prompt=SAMPLES, n=n)
    return probe(cfg, PROMPTS, out, client_config=ClientConfig(concurrency=CONCURRENCY)).drawn


async def _naive(url: str, samples: int) -> int:
    async with httpx2.AsyncClient(base_url=url + "/v1") as client:
        count = 0
        for prompt in PROMPTS:
            for _ in range(samples):
                reply = await client.post("/completions", json={"model": "m", "prompt": prompt, "max_tokens": LENGTH})
                count += len(reply.json()["choices"])
        return count


def _bench(benchmark, key: str, fn) -> None:
    walls: list[float] = []

    def run():
        start = time.perf_counter()
        drawn = fn()
        walls.append(time.perf_counter() - start)
        return drawn

    drawn = benchmark.pedantic(run, rounds=3, iterations=1)
    _RATES[key] = drawn / min(walls)
    benchmark.extra_info["samples_per_s"] = _RATES[key]
    print(f"\n{key}: {_RATES[key]:,.0f} samples/s ({drawn:,} samples, best of {len(walls)})")


@pytest.mark.benchmark(group="probe samples per second")
@pytest.mark.parametrize("latency", [0.0, LATENCY_S], ids=["no-latency", "50ms"])
def test_probe_one_sample_per_request(benchmark, tmp_path, latency):
    with _Server(latency, honour_n=False) as url:
        _bench(benchmark, f"probe, one sample a request, {latency * 1000:.0f} ms, concurrency {CONCURRENCY}",
               lambda: _probe_once(tmp_path, url, 16))


@pytest.mark.benchmark(group="probe samples per second")
@pytest.mark.parametrize("latency", [0.0, LATENCY_S], ids=["no-latency", "50ms"])
def test_probe_with_n(benchmark, tmp_path, latency):
    with _Server(latency, honour_n=True) as url:
        _bench(benchmark, f"probe, n=16, {latency * 1000:.0f} ms, concurrency {CONCURRENCY}",
               lambda: _probe_once(tmp_path, url, 16))


@pytest.mark.benchmark(group="probe samples per second")
def test_naive_loop(benchmark):
    with _Server(LATENCY_S, honour_n=False) as url:
        _bench(benchmark, "naive loop, one request at a time, 50 ms", lambda: asyncio.run(_naive(url, 10)))


def test_summary_and_sample_budget(speed_target):
    """Rates side by side, then samples per prompt for TV 0.05 and 0.1 at false-fail 1e-6."""
    key = f"probe, one sample a request, {LATENCY_S * 1000:.0f} ms, concurrency {CONCURRENCY}"
    if key not in _RATES or len(_RATES) < 5:
        pytest.skip("run the whole file: the summary needs the benchmarks above")
    base = _RATES["naive loop, one request at a time, 50 ms"]
    print("\n" + "\n".join(f"{k}: {v:,.0f} samples/s = {v / base:.1f}x the naive loop" for k, v in _RATES.items()))
    law = 0.8 ** np.arange(50)  # a typical concentrated law of the first L tokens: 50 sequences
    law /= law.sum()
    rate = 1e-6 / (LENGTH + 2)
    for prompts in (1, 8):
        for tv in (0.1, 0.05):
            two = min_num_samples_for_homogeneity(tv, law, groups=prompts)
            one = min_num_samples_for_conditional_fit(tv, 6, contexts=prompts, false_fail_rate=rate)
            print(f"{prompts} prompt(s), TV {tv}: two-sample {two:,} per prompt per arm ({2 * two * prompts:,} in all); "
                  f"one-sample, top-5 logprobs {one:,} per prompt ({one * prompts:,} in all)")
    speed_target(_RATES[key] >= TARGET, f"probe draws {_RATES[key]:.0f} samples/s (target {TARGET:.0f})")
