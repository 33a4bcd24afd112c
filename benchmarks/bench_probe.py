"""Probe throughput against an in-process server that answers at once, and the sample budget.

The server is the fake of ``specgauge.fixtures.fake_openai`` behind httpx2's
ASGITransport, so what is timed is the probe itself: request building, the async client,
JSON parsing, the append-only journal. Three ways to draw the same 4 × 1,000 samples of
L = 3 tokens: the probe with ``n`` = 16 and 4 requests in flight, the probe falling back
to one sample per request, and a naive baseline (one request at a time, no journal). The
last test prints the rates side by side (target: ≥ 500 samples/s for the probe) and the
samples a test needs to detect TV 0.05 and 0.1 at false-fail 1e-6, two-sample against
one-sample, so that GPU time can be budgeted.

Run with ``pytest benchmarks/bench_probe.py --benchmark-enable -s``.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

httpx2 = pytest.importorskip("httpx2")

from specgauge.fixtures.fake_openai import FakeOpenAI  # noqa: E402
from specgauge.stattests.server.probe import ClientConfig, ProbeConfig, probe  # noqa: E402
from specgauge.stattests.server.stats import min_num_samples_for_homogeneity  # noqa: E402
from specgauge.stattests.core.statistics import min_num_samples_for_ks_uniformity  # noqa: E402

PROMPTS = ["one", "two", "three", "four"]
SAMPLES = 1_000
LENGTH = 3
TARGET = 500.0
_RATES: dict[str, float] = {}


def _probe_once(tmp_path, app: FakeOpenAI, n: int) -> int:
    out = tmp_path / f"run-{time.perf_counter_ns()}.jsonl"
    cfg = ProbeConfig("http://fake", max_tokens=LENGTH, samples_per_prompt=SAMPLES, n=n)
    return probe(cfg, PROMPTS, out, client_config=ClientConfig(concurrency=4),
                 transport=httpx2.ASGITransport(app=app)).drawn


async def _naive(app: FakeOpenAI) -> int:
    async with httpx2.AsyncClient(base_url="http://fake/v1", transport=httpx2.ASGITransport(app=app)) as client:
        count = 0
        for prompt in PROMPTS:
            for _ in range(SAMPLES):
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
def test_probe_with_n(benchmark, tmp_path):
    _bench(benchmark, "probe, n=16", lambda: _probe_once(tmp_path, FakeOpenAI(), 16))


@pytest.mark.benchmark(group="probe samples per second")
def test_probe_one_sample_per_request(benchmark, tmp_path):
    _bench(benchmark, "probe, one sample a request", lambda: _probe_once(tmp_path, FakeOpenAI(honour_n=False), 16))


@pytest.mark.benchmark(group="probe samples per second")
def test_naive_loop(benchmark):
    _bench(benchmark, "naive loop, one request at a time", lambda: asyncio.run(_naive(FakeOpenAI())))


def test_summary_and_sample_budget():
    """Rates side by side, then samples per prompt for TV 0.05 and 0.1 at false-fail 1e-6."""
    if len(_RATES) < 3:
        pytest.skip("run the whole file: the summary needs the three benchmarks above")
    base = _RATES["naive loop, one request at a time"]
    print("\n" + "\n".join(f"{k}: {v:,.0f} samples/s = {v / base:.1f}x the naive loop" for k, v in _RATES.items()))
    # a typical concentrated law of the first L tokens: 50 sequences, geometric weights
    law = 0.8 ** np.arange(50)
    law /= law.sum()
    for prompts in (1, 8):
        for tv in (0.1, 0.05):
            two = min_num_samples_for_homogeneity(tv, law, groups=prompts)
            one = -(-min_num_samples_for_ks_uniformity(tv) // (LENGTH * prompts))
            print(f"{prompts} prompt(s), TV {tv}: two-sample {two:,} per prompt per arm ({2 * two * prompts:,} in all); "
                  f"one-sample {one:,} per prompt ({one * prompts:,} in all)")
    assert _RATES["probe, n=16"] >= TARGET, f"probe draws {_RATES['probe, n=16']:.0f} samples/s (target {TARGET:.0f})"
