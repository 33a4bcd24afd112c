"""Teacher forcing's speed on CPU for the tiny models, against running speculative decoding itself.

Three timings over the same requests (given continuations, so only the forward passes and
α are timed): the toy bigram pair (NumPy tables), the two-layer tiny Llama as target and as
a flatter draft (transformers on one CPU thread), and ``run_speculative`` on the tiny Llama
pair at γ = 4 (what ``--run`` does). The target is a ratio: teacher forcing measures a
position at least 5x faster than the run generates one, since it needs one forward pass
per request and model rather than γ + 1 per round. The last test prints the rates and an
estimate, from the simulator's profiles, of what an 8B target with a 1B draft on one H200
would take (an estimate: no GPU run backs it).

Run with ``pytest benchmarks/bench_acceptance.py --benchmark-enable -s``.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from specgauge.measurement.models import NextTokenLaw, Sampling
from specgauge.measurement.prompts import Request
from specgauge.measurement.forcing import measure, run_speculative

REQUESTS, PROMPT, LENGTH = 16, 16, 64
TARGET_RATIO = 5.0
_RATES: dict[str, float] = {}


def _requests(vocab: int, seed: int = 0) -> list[Request]:
    rng = np.random.default_rng(seed)
    return [Request(rng.integers(1, vocab, PROMPT), rng.integers(1, vocab, LENGTH)) for _ in range(REQUESTS)]


def _bench(benchmark, key: str, fn, positions: int) -> None:
    walls: list[float] = []

    def run():
        start = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - start)

    benchmark.pedantic(run, rounds=3, iterations=1)
    _RATES[key] = positions / min(walls)
    benchmark.extra_info["positions_per_s"] = _RATES[key]
    print(f"\n{key}: {_RATES[key]:,.0f} positions/s (best of {len(walls)})")


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    pytest.importorskip("transformers")
    from specgauge.fixtures.tiny_llama import build_tiny_llama
    from specgauge.measurement.models import HFLaw

    root = tmp_path_factory.mktemp("bench")
    load = [HFLaw.load(str(build_tiny_llama(root / name, seed=0, sharpness=s)), Sampling(), name, "cpu", "float32", 8,
                       threads=1) for name, s in (("target", 20.0), ("draft", 10.0))]
    return load[0], load[1]


@pytest.mark.benchmark(group="acceptance positions per second")
def test_teacher_forcing_toy(benchmark):
    from specgauge.fixtures.toy_lm import load_toy_lm

    pair = load_toy_lm("bigram-v6-mid")
    target, draft = NextTokenLaw(pair.target, Sampling(), "t"), NextTokenLaw(pair.draft, Sampling(), "d")
    requests = _requests(pair.vocab_size)
    _bench(benchmark, "teacher forcing, toy bigram pair", lambda: measure(target, [draft], requests, length=LENGTH,
                                                                          seed=0, k=4), REQUESTS * LENGTH)


@pytest.mark.benchmark(group="acceptance positions per second")
def test_teacher_forcing_tiny_llama(benchmark, tiny_pair):
    target, draft = tiny_pair
    requests = _requests(target.vocab_size)
    _bench(benchmark, "teacher forcing, tiny Llama pair", lambda: measure(target, [draft], requests, length=LENGTH,
                                                                          seed=0, k=4, batch=8), REQUESTS * LENGTH)


@pytest.mark.benchmark(group="acceptance positions per second")
def test_run_tiny_llama(benchmark, tiny_pair):
    target, draft = tiny_pair
    prompts = [r.prompt for r in _requests(target.vocab_size)]
    _bench(benchmark, "run through the reference rule, tiny Llama pair, γ=4",
           lambda: run_speculative(target, draft, prompts, length=LENGTH, gamma=4, seed=0), REQUESTS * LENGTH)


def real_pair_estimate(target: str = "llama-3.1-8b", draft: str = "llama-3.2-1b", gpu: str = "h200",
                       requests: int = 1000, prompt: int = 512, length: int = 256, batch: int = 64) -> dict[str, float]:
    """Seconds for ``specgauge acceptance`` on a real pair, from the simulator's profiles (an estimate).

    Teacher forcing: 2 FLOPs per linear parameter per token, for each model, over every
    prompt + continuation token, at the GPU's peak × MFU. The target's own continuations:
    ``length`` decode steps per batch, each streaming the target's weights at the GPU's
    bandwidth × efficiency, plus 25 ms of transformers' eager per-step overhead (32 layers'
    launches; a guess, the largest term). The laws themselves: V float64 values written and
    read about four times per position and model (softmax, warp, min, sum) at the bandwidth.
    """
    from specgauge.simulator.profiles import load_gpu, load_model

    g, t, d = load_gpu(gpu), load_model(target), load_model(draft)
    tokens = requests * (prompt + length)
    forward = 2 * (t.linear_params + d.linear_params) * tokens / (g.peak_flops * g.mfu)
    steps = -(-requests // batch) * length
    decode = steps * (t.weight_bytes / (g.bandwidth * g.efficiency) + 0.025)
    laws = 2 * 4 * 8 * t.vocab * requests * length / g.bandwidth
    return {"teacher_forcing_s": forward, "continuations_s": decode, "laws_s": laws,
            "total_s": forward + decode + laws}


def test_summary_and_real_pair_estimate(speed_target):
    """Rates side by side, the ratio target, and the 8B + 1B estimate."""
    if len(_RATES) < 3:
        pytest.skip("run the whole file: the summary needs the three benchmarks above")
    print("\n" + "\n".join(f"{k}: {v:,.0f} positions/s" for k, v in _RATES.items()))
    est = real_pair_estimate()
    print("ESTIMATE (not measured), llama-3.1-8b target + llama-3.2-1b draft on one H200, 1,000 requests of "
          "512 + 256 tokens, batch 64: " + ", ".join(f"{k} {v:.0f}" for k, v in est.items()))
    ratio = _RATES["teacher forcing, tiny Llama pair"] / _RATES["run through the reference rule, tiny Llama pair, γ=4"]
    speed_target(ratio >= TARGET_RATIO, f"teacher forcing is only {ratio:.1f}x the run's rate (target {TARGET_RATIO:g}x)")
