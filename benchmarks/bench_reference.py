"""Emitted tokens per second: the NumPy reference decoder against the seed's loop and
against the bare Generator.

The baseline is the seed text's ``speculative_step`` / ``one_round`` loop, reimplemented
here as it is written (one token at a time, ``rng.choice`` for the draft and for the
residual, γ = 4, the six-token p and q). The reference verifies a batch of rows of the
same pair; its draft tokens are drawn inside the timed call too (inverse CDF, as the
harness draws them), so both sides pay for drafting. A second reference benchmark times
``verify`` alone. The generator's limit: NumPy's Generator drawing only the uniforms a
round of ``verify`` needs (γ acceptance uniforms and one for the final token, in the same
shapes), turned into tokens at the reference's measured tokens a round. Only the calls
are timed: the emitted tokens are counted after the clock stops. The last test
prints the ratios from the one run (targets: the reference with drafting ≥ 150× the seed
loop; ``verify`` ≥ a third of the generator's limit).

Run with ``pytest benchmarks/bench_reference.py --benchmark-enable``.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from specgauge.stattests.core.reference import NumpyDecoder

TARGET = np.array([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
DRAFT = np.array([0.35, 0.30, 0.20, 0.10, 0.03, 0.02])
GAMMA = 4
SEED_ROUNDS = 2_000
BATCH = 100_000
TARGET_RATIO = 150.0
#: ``verify``'s tokens a second over the generator's limit.
GENERATOR_SHARE = 1 / 3

_RATES: dict[str, float] = {}


# ---------------------------------------------------------------- the seed's loop, as written


def speculative_step(p, q, rng):
    x = rng.choice(len(q), p=q)
    if rng.random() < min(1.0, p[x] / q[x]):
        return x, True
    residual = np.maximum(p - q, 0.0)
    residual /= residual.sum()
    return rng.choice(len(p), p=residual), False


def one_round(rng):
    for i in range(GAMMA):
        _, ok = speculative_step(TARGET, DRAFT, rng)
        if not ok:
            return i + 1
    return GAMMA + 1


# ---------------------------------------------------------------- timing helpers


def _timed(fn, walls: list[float], count=None):
    """``fn`` timed in CPU seconds of this process: other users' load on a shared machine
    preempts a long call more often than a short one, which wall time would charge.
    ``count``, when given, turns ``fn``'s output into tokens after the clock stops."""
    def run():
        start = time.process_time()
        out = fn()
        walls.append(time.process_time() - start)
        return out if count is None else count(out)
    return run


def _emitted(out: np.ndarray) -> int:
    return int(np.count_nonzero(out != -1))


def _record(benchmark, key: str, tokens: int, walls: list[float]) -> float:
    rate = tokens / min(walls)
    _RATES[key] = rate
    benchmark.extra_info["emitted_tokens_per_s"] = rate
    print(f"\n{key}: {rate:,.0f} emitted tokens/s ({tokens:,} tokens, best of {len(walls)} calls)")
    return rate


# ---------------------------------------------------------------- benchmarks


@pytest.mark.benchmark(group="emitted tokens per second")
def test_seed_loop(benchmark):
    rng = np.random.default_rng(42)
    walls: list[float] = []
    tokens = benchmark.pedantic(_timed(lambda: sum(one_round(rng) for _ in range(SEED_ROUNDS)), walls),
                                rounds=3, iterations=1)
    _record(benchmark, "seed loop", tokens, walls)


def _reference_batch():
    target = np.broadcast_to(np.tile(TARGET, (GAMMA + 1, 1)), (BATCH, GAMMA + 1, TARGET.size))
    draft = np.broadcast_to(np.tile(DRAFT, (GAMMA, 1)), (BATCH, GAMMA, DRAFT.size))
    return target, draft, np.cumsum(DRAFT)


@pytest.mark.benchmark(group="emitted tokens per second")
def test_reference_with_drafting(benchmark):
    decoder, rng = NumpyDecoder(), np.random.default_rng(42)
    target, draft, cdf = _reference_batch()

    def draft_and_verify():
        tokens = np.searchsorted(cdf, rng.random((BATCH, GAMMA)) * cdf[-1], side="right").astype(np.int64)
        return decoder.verify(target, draft, tokens, rng)

    walls: list[float] = []
    tokens = benchmark.pedantic(_timed(draft_and_verify, walls, _emitted), rounds=15, iterations=1, warmup_rounds=1)
    _record(benchmark, "reference (drafting + verify)", tokens, walls)


@pytest.mark.benchmark(group="emitted tokens per second")
def test_reference_verify_only(benchmark):
    decoder, rng = NumpyDecoder(), np.random.default_rng(42)
    target, draft, cdf = _reference_batch()
    drafts = np.searchsorted(cdf, rng.random((BATCH, GAMMA)) * cdf[-1], side="right").astype(np.int64)
    walls: list[float] = []
    tokens = benchmark.pedantic(_timed(lambda: decoder.verify(target, draft, drafts, rng), walls, _emitted),
                                rounds=15, iterations=1, warmup_rounds=1)
    _record(benchmark, "reference (verify only)", tokens, walls)
    _RATES["tokens a round"] = tokens / BATCH


@pytest.mark.benchmark(group="emitted tokens per second")
def test_generator_limit(benchmark):
    """The uniforms a batch of rounds needs, and nothing else: the most tokens a second any
    NumPy implementation drawing them from a Generator could emit."""
    rng = np.random.default_rng(42)

    def uniforms():
        rng.random((BATCH, GAMMA))
        rng.random(BATCH)
        return BATCH

    walls: list[float] = []
    benchmark.pedantic(_timed(uniforms, walls), rounds=15, iterations=1, warmup_rounds=1)
    rate = BATCH * (GAMMA + 1) / min(walls)
    _RATES["generator uniforms"] = rate
    benchmark.extra_info["uniforms_per_s"] = rate
    print(f"\ngenerator: {rate:,.0f} uniforms/s ({GAMMA + 1} a round)")


def test_speedup_over_the_seed_loop(speed_target):
    """Side by side, from the same run: the ratios of emitted tokens per second."""
    needed = ("seed loop", "reference (drafting + verify)", "reference (verify only)", "generator uniforms")
    if not all(k in _RATES for k in needed):
        pytest.skip("run the whole file: the ratios need the four benchmarks above")
    base = _RATES["seed loop"]
    limit = _RATES["generator uniforms"] / (GAMMA + 1) * _RATES["tokens a round"]
    lines = [f"{k}: {_RATES[k]:,.0f} tokens/s = {_RATES[k] / base:,.0f}x the seed loop" for k in needed[:3]]
    lines.append(f"generator's limit: {limit:,.0f} tokens/s ({_RATES['tokens a round']:.2f} tokens a round); "
                 f"verify reaches {_RATES['reference (verify only)'] / limit:.2f} of it")
    print("\n" + "\n".join(lines))
    ratio = _RATES["reference (drafting + verify)"] / base
    speed_target(ratio >= TARGET_RATIO, f"reference only {ratio:.0f}x the seed loop (target {TARGET_RATIO:.0f}x)")
    share = _RATES["reference (verify only)"] / limit
    speed_target(share >= GENERATOR_SHARE,
                 f"verify at {share:.2f} of the generator's limit (target {GENERATOR_SHARE:.2f})")
