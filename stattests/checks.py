"""The certification checks: each turns one fixture run into assertions, one per position.

A check is a pure function of a :class:`FixtureRun` and the error rates. Families:
``exactness`` checks must pass for every exact rule; ``optimality`` checks (acceptance
equal to 1 − TV, the tokens-per-pass law) hold only for Leviathan's rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from specgauge.fixtures.pairs import PairFixture

from .contract import PAD
from .harness import FixtureRun
from .statistics import (TestResult, acceptance_rate_test, goodness_of_fit, independence_test,
                         ks_uniformity, tokens_per_pass_mean_test, tokens_per_pass_test)


@dataclass(frozen=True)
class Rates:
    false_fail: float
    false_pass: float


CheckFn = Callable[[FixtureRun, Rates], dict[int | None, TestResult]]


@dataclass(frozen=True)
class Check:
    """A named check, its family, the fixtures it applies to and its positions there."""

    name: str
    family: str  # "exactness" | "optimality"
    run: CheckFn
    applies: Callable[[PairFixture], bool]
    positions: Callable[[PairFixture], list[int | None]]
    meaning: str


def failure(test: str, run: FixtureRun, rates: Rates, message: str) -> TestResult:
    return TestResult(test, math.inf, 0.0, run.n, rates.false_fail, math.nan, None, {"error": message})


def _emitted_at(run: FixtureRun, k: int) -> np.ndarray:
    return run.tokens[:, k][run.tokens[:, k] != PAD]


# ---------------------------------------------------------------- exactness


def contract(run: FixtureRun, rates: Rates) -> dict[int | None, TestResult]:
    if run.error or run.reproducibility_error:
        return {None: failure("contract", run, rates, run.error or run.reproducibility_error)}
    return {None: TestResult("contract", 0.0, 1.0, run.n, rates.false_fail, math.nan)}


def exactness(run: FixtureRun, rates: Rates) -> dict[int | None, TestResult]:
    """Tokens at position k, given position k is emitted, are distributed as p_k (bonus: p_γ)."""
    fx = run.fixture
    out = {}
    for k in range(fx.gamma + 1):
        if fx.context_free:
            counts = np.bincount(_emitted_at(run, k), minlength=fx.vocab_size)
            out[k] = goodness_of_fit(counts, fx.target[k], false_fail_rate=rates.false_fail,
                                     false_pass_rate=rates.false_pass)
        else:
            values = run.pit_id[:, k]
            out[k] = ks_uniformity(values[~np.isnan(values)], false_fail_rate=rates.false_fail,
                                   false_pass_rate=rates.false_pass, test="pit_ks")
    return out


def _pit(column: str) -> CheckFn:
    def check(run: FixtureRun, rates: Rates) -> dict[int | None, TestResult]:
        values = getattr(run, column)
        out = {}
        for k in range(values.shape[1]):
            v = values[:, k]
            out[k] = ks_uniformity(v[~np.isnan(v)], false_fail_rate=rates.false_fail,
                                   false_pass_rate=rates.false_pass, test="pit_ks")
        return out
    return check


def independence_rows(run: FixtureRun, rates: Rates) -> dict[int | None, TestResult]:
    """First tokens of rows (same p and q) are independent: neighbours (2i, 2i+1) and
    (2i+1, 2i+2), and rows half a run apart; the false-fail rate is split over the three."""
    first = run.tokens[:, 0]
    half = run.n // 2
    pairs = [(first[0:2 * half:2], first[1:2 * half:2]),
             (first[1:-1:2], first[2::2]),
             (first[:half], first[half:2 * half])]
    results = [independence_test(x[: y.size], y[: x.size], false_fail_rate=rates.false_fail / len(pairs),
                                 false_pass_rate=rates.false_pass) for x, y in pairs]
    worst = min(results, key=lambda r: r.pvalue)
    pvalue = min(1.0, len(pairs) * worst.pvalue)
    return {None: TestResult("independence", worst.statistic, pvalue, run.n, rates.false_fail,
                             max(r.min_detectable_tv for r in results), worst.df)}


def independence_positions(run: FixtureRun, rates: Rates) -> dict[int | None, TestResult]:
    """Given position 1 is emitted, its token is independent of the token at position 0."""
    both = run.tokens[:, 1] != PAD
    return {None: independence_test(run.tokens[both, 0], run.tokens[both, 1],
                                    false_fail_rate=rates.false_fail, false_pass_rate=rates.false_pass)}


def greedy(run: FixtureRun, rates: Rates) -> dict[int | None, TestResult]:
    """At temperature zero the output is exactly the target's argmax prefix, row by row."""
    if run.error:
        return {None: failure("greedy", run, rates, run.error)}
    ok = run.greedy_mismatches == 0
    details = {} if ok else {"error": f"{run.greedy_mismatches} rows differ from greedy; {run.greedy_example}"}
    return {None: TestResult("greedy", float(run.greedy_mismatches), 1.0 if ok else 0.0, run.n,
                             rates.false_fail, 0.0, None, details)}


# ---------------------------------------------------------------- optimality


def _trials(run: FixtureRun, k: int) -> tuple[np.ndarray, np.ndarray]:
    accepted = run.lengths - 1
    reached = accepted >= k
    return accepted[reached] > k, run.alpha[reached, k]


def acceptance(run: FixtureRun, rates: Rates) -> dict[int | None, TestResult]:
    """At each drafted position the acceptance rate is 1 − TV(p_k, q_k)."""
    out = {}
    for k in range(run.fixture.gamma):
        hits, alpha = _trials(run, k)
        out[k] = acceptance_rate_test(hits, alpha, false_fail_rate=rates.false_fail,
                                      false_pass_rate=rates.false_pass)
    return out


def acceptance_rate(run: FixtureRun, rates: Rates) -> dict[int | None, TestResult]:
    """Over all drafted positions the acceptance rate is the mean of 1 − TV(p, q)."""
    pairs = [_trials(run, k) for k in range(run.fixture.gamma)]
    hits = np.concatenate([h for h, _ in pairs])
    alpha = np.concatenate([a for _, a in pairs])
    return {None: acceptance_rate_test(hits, alpha, false_fail_rate=rates.false_fail,
                                       false_pass_rate=rates.false_pass)}


def tokens_per_pass(run: FixtureRun, rates: Rates) -> dict[int | None, TestResult]:
    """Tokens per pass follow the truncated geometric with per-position α."""
    return {None: tokens_per_pass_test(run.lengths, run.alpha, false_fail_rate=rates.false_fail,
                                       false_pass_rate=rates.false_pass)}


def law(run: FixtureRun, rates: Rates) -> dict[int | None, TestResult]:
    """Mean tokens per pass equals 1 + Σ_k Π_{i≤k} α_i."""
    return {None: tokens_per_pass_mean_test(run.lengths, run.alpha, false_fail_rate=rates.false_fail,
                                            false_pass_rate=rates.false_pass)}


def _always(_: PairFixture) -> bool:
    return True


def _context_free(f: PairFixture) -> bool:
    return f.context_free


def _single(_: PairFixture) -> list[int | None]:
    return [None]


def _drafted(f: PairFixture) -> list[int | None]:
    return list(range(f.gamma))


def _all_positions(f: PairFixture) -> list[int | None]:
    return list(range(f.gamma + 1))


CHECKS: dict[str, Check] = {c.name: c for c in [
    Check("contract", "exactness", contract, _always, _single,
          "shape, dtype, -1 padding, tokens in range and possible under p, prefix = drafts, inputs untouched, "
          "same seed same output, no exception"),
    Check("exactness", "exactness", exactness, lambda f: not f.greedy, _all_positions,
          "tokens at each position (and the bonus) are distributed as p, given the position is emitted"),
    Check("pit-id", "exactness", _pit("pit_id"), lambda f: not f.greedy, _all_positions,
          "randomized PIT of every emitted token is uniform (vocabulary ordered by id)"),
    Check("pit-ratio", "exactness", _pit("pit_ratio"), lambda f: not f.greedy and f.gamma > 0, _drafted,
          "randomized PIT is uniform with the vocabulary ordered by p/q, where bias concentrates"),
    Check("independence-rows", "exactness", independence_rows, _context_free, _single,
          "rows of a batch do not share random numbers"),
    Check("independence-positions", "exactness", independence_positions,
          lambda f: f.context_free and f.gamma >= 1, _single,
          "the token at position 1 is independent of the token at position 0"),
    Check("greedy", "exactness", greedy, lambda f: f.greedy, _single,
          "at temperature zero the output is exactly the target's argmax prefix"),
    Check("acceptance", "optimality", acceptance, lambda f: f.gamma > 0, _drafted,
          "acceptance at each position is 1 - TV(p, q)"),
    Check("acceptance-rate", "optimality", acceptance_rate, lambda f: f.gamma > 0, _single,
          "overall acceptance is 1 - TV(p, q)"),
    Check("tokens-per-pass", "optimality", tokens_per_pass, lambda f: f.gamma > 0, _single,
          "tokens per pass follow the truncated geometric law"),
    Check("law", "optimality", law, lambda f: f.gamma > 0, _single,
          "mean tokens per pass is 1 + sum_k prod_{i<=k} alpha_i"),
]}


def position_label(check: Check, fixture: PairFixture, position: int | None) -> str:
    if position is None:
        return ""
    if position == fixture.gamma and check.positions(fixture) == _all_positions(fixture):
        return "bonus"
    return f"pos{position}"
