"""The identity test on wide laws: the coarse scan beside Z (identity.CoarsePlan).

* under p it fails no more often than its rate (at a rate simulation can see);
* at its stated worst-case TV it fails every alternative tried in the hardest directions:
  one move of ε between two halves of p (up and down), the two-point mixture of both,
  Paninski's paired ± perturbations, and a move inside M that keeps every
  coarse group's mass, which the coarse scan cannot see (Z catches it);
* on the real chat law at position 2 it states a smaller proven figure than the split test
  alone at the same draws.
"""

from __future__ import annotations

import numpy as np
import pytest

from specgauge.fixtures.pairs import zipf
from specgauge.stattests.identity.instance import _coarse_plan, _coarse_result, _plan

BETA = 1e-3


def _law() -> np.ndarray:
    return np.sort(zipf(300))


def _coarse_row(counts: np.ndarray, p: np.ndarray, rate: float):
    """The identity row as the coarse plan makes it (on Zipf 300 the row itself now runs the
    subset test, whose figure there is the smaller; the coarse plan runs where it is not)."""
    n = int(counts.sum())
    return _coarse_result(_plan_for(n, p, rate), counts.astype(np.float64), p, n, 0.0, 0.0, rate)


def _plan_for(n: int, p: np.ndarray, rate: float):
    plan = _coarse_plan(n, p.tobytes(), rate, BETA)
    assert plan is not None
    return plan


def test_false_fail_rate_under_p_is_below_the_rate():
    p, n, rate = _law(), 4000, 0.05
    rng = np.random.default_rng(11)
    results = [_coarse_row(rng.multinomial(n, p), p, rate) for _ in range(300)]
    assert all(r.details["plan"] == "coarse scan and Z" for r in results)
    fails = sum(not r.passed for r in results)
    assert fails <= 0.05 * 300  # proven ≤ 5 %; the bounds are conservative, so far fewer
    assert min(r.pvalue for r in results) > 0


def _halves(p: np.ndarray, eps: float, up: bool) -> np.ndarray:
    """p with eps moved into (or out of) the heaviest tokens holding about half the mass."""
    order = np.argsort(-p, kind="stable")
    inside = np.zeros(p.size, dtype=bool)
    inside[order[np.cumsum(p[order]) <= 0.5]] = True
    sign = 1.0 if up else -1.0
    q = p.copy()
    q[inside] *= 1 + sign * eps / p[inside].sum()
    q[~inside] *= 1 - sign * eps / p[~inside].sum()
    return q


def _paired(p: np.ndarray, eps: float, rng: np.random.Generator) -> np.ndarray:
    """Paninski's prior: consecutive tokens (by p) paired, each pair shifted by ±c of the
    lighter one's mass with a random sign, c set so that TV = eps."""
    idx = np.arange(p.size)[::-1]
    idx = idx[: 2 * (idx.size // 2)].reshape(-1, 2)
    d = np.minimum(p[idx[:, 0]], p[idx[:, 1]]) * rng.choice([-1.0, 1.0], size=idx.shape[0])
    c = eps / np.abs(d).sum()
    assert c <= 1
    q = p.copy()
    q[idx[:, 0]] += c * d
    q[idx[:, 1]] -= c * d
    return q


def _inside_middle(p: np.ndarray, plan, eps: float) -> np.ndarray:
    """eps moved from M's lightest tokens (holding 1.2 eps) to the rest of M: every coarse
    group keeps its mass."""
    idx = np.flatnonzero(plan.split.weights > 0)
    cut = int(np.searchsorted(np.cumsum(p[idx]), 1.2 * eps)) + 1
    low, high = idx[:cut], idx[cut:]
    assert high.size and p[high].sum() > 0.2 * eps
    q = p.copy()
    q[high] *= 1 + eps / p[high].sum()
    q[low] *= 1 - eps / p[low].sum()
    assert np.allclose(np.bincount(plan.groups, weights=q), np.bincount(plan.groups, weights=p))
    return q


def test_the_stated_figure_is_reached_in_the_hardest_directions():
    p, n, rate = _law(), 20_000, 1e-4
    plan = _plan_for(n, p, rate)
    eps = plan.proven_tv
    assert eps < min(0.3, _plan(n, p.tobytes(), rate, BETA)[0].proven_tv)
    rng = np.random.default_rng(5)
    alternatives = {"up": _halves(p, eps, True), "down": _halves(p, eps, False),
                    "paired": _paired(p, eps, rng), "inside M": _inside_middle(p, plan, eps)}
    for name, q in alternatives.items():
        assert 0.5 * np.abs(q - p).sum() == pytest.approx(eps, rel=1e-9), name
        assert (q >= 0).all()
        results = [_coarse_row(rng.multinomial(n, q), p, rate) for _ in range(40)]
        assert sum(r.passed for r in results) <= 1, name  # power ≥ 0.999 proven
        if name == "inside M":  # the coarse law is p's: only Z sees it
            assert all(r.details["message"].endswith("middle") for r in results if not r.passed)
    # the two-point mixture: each replicate's q one of the two moves, at random
    mixed = [_coarse_row(rng.multinomial(n, alternatives["up" if rng.random() < 0.5 else "down"]), p, rate)
             for _ in range(40)]
    assert sum(r.passed for r in mixed) <= 1
    # the reference passes at this rate
    assert sum(_coarse_row(rng.multinomial(n, p), p, rate).passed for _ in range(40)) >= 39


def test_the_chat_law_at_position_two_states_a_smaller_figure():
    from specgauge.fixtures.real_laws import fixtures

    p = next(f for f in fixtures() if f.name == "smollm2-chat-t1").target[2]
    p = np.sort(p[p > 0])
    n, rate = 112_989, 1e-4 / 39
    coarse = _plan_for(n, p, rate)
    split = _plan(n, p.tobytes(), rate, BETA)[0]
    assert coarse.proven_tv <= 0.05 < split.proven_tv
