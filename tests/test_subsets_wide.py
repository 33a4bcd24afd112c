"""The subset test past 50 tokens, where its set counts pass 2^53 and are kept as floats.

* the float counts, raised for their rounding, hold the exact counts (binomial coefficients
  on a uniform law, a power of two for a token lighter than the grid);
* fresh null draws exceed its critical value, and each threshold t, no more often than the
  proven bound U(t) says (51, 60 and, in the slow tier, 120 and 200 tokens);
* at its stated TV it catches ε moved into every set size of a 60-token uniform law (every
  split, by symmetry), Paninski's pairs and, in the slow tier, the hardest sets of Zipf and
  Dirichlet laws, with power 0.999;
* the identity row states on 60 uniform tokens a figure within 10 % of the 50-token one
  (at 15,000 draws and a sized run's rate), and a token of mass 1e-12 costs next to nothing;
* the null bound by negative association (no union over sets) holds the exact null tail of a
  three-token law and the simulated one of SmolLM2 chat's position 2 (2,678 tokens), where
  the test catches ε moved into its heads, its tail, the set at the binding mass and
  Paninski's pairs at the stated TV; on chat's position 2 and prose's position 0 the rows for
  TV 0.05 are within 12 times the certified lower bound (slow tier).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from specgauge.stattests.identity.lower_bound import min_num_samples_lower_bound
from specgauge.stattests.identity.tail_bounds import positive_part_bound

from specgauge.fixtures.pairs import zipf
from specgauge.stattests.identity.instance import (identity_test, min_discrepancy_of_identity_test,
                                               min_num_samples_for_identity_test)
from specgauge.stattests.identity.subsets import GRID_BITS, _fine_masses, subset_test_plan

META_RATE = 1e-6
BETA = 1e-3


def _uniform(v: int) -> np.ndarray:
    return np.full(v, 1.0 / v)


def _with_a_crumb(v: int, crumb: float = 1e-12) -> np.ndarray:
    """A uniform law on v tokens and one more token of mass ``crumb``, sorted ascending."""
    return np.sort(np.append(np.full(v, (1 - crumb) / v), crumb))


def test_float_counts_hold_the_exact_counts():
    # 60 uniform tokens: every set of k tokens on one grid count, C(60, k) of them (up to 1.2e17)
    sets = _fine_masses(_uniform(60).tobytes())
    exact = np.array([float(math.comb(60, k)) for k in range(1, 60)])
    assert sets.count.size == 59 and (sets.count >= exact).all() and (sets.count <= exact * (1 + 1e-13)).all()
    # a token lighter than the grid doubles every count: C(50, k) (two ways) plus the end sets
    sets = _fine_masses(_with_a_crumb(50).tobytes())
    assert 50 * 2.0 ** -GRID_BITS > 1e-12
    expected = np.array([2.0 * math.comb(50, k) for k in range(51)])
    expected[0] -= 1.0  # the empty set
    expected[-1] -= 1.0  # the whole support
    assert (sets.count >= expected).all() and (sets.count <= expected * (1 + 1e-13)).all()


def _null_check(p: np.ndarray, n: int, rate: float, draws: int, seed: int) -> None:
    """Fresh null draws beyond the critical value, and beyond each of a few thresholds t,
    no more often than the union bound U(t) allows (a one-sided binomial test at 1e-6)."""
    plan = subset_test_plan(n, p, rate, BETA)
    d = np.maximum(np.random.default_rng(seed).multinomial(n, p, size=draws) - n * p, 0.0).sum(axis=1)
    for t in np.quantile(d, [0.5, 0.9, 0.99, 0.999]).tolist() + [plan.critical]:
        bound = min(plan.pvalue(t), 1.0)
        over = int((d >= t).sum())
        assert stats.binom.sf(over - 1, draws, bound) > META_RATE, (p.size, t, over, bound)


@pytest.mark.parametrize("p", [_uniform(60), _with_a_crumb(50)], ids=["uniform-60", "uniform-50-and-1e-12"])
def test_null_draws_stay_inside_the_proven_bound(p):
    _null_check(p, 2_000, 1e-3, 60_000, 11)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["uniform-60", "zipf-60", "dirichlet-120", "uniform-200", "uniform-50-and-1e-12"])
def test_null_draws_stay_inside_the_proven_bound_more_laws(name):
    p = {"uniform-60": _uniform(60), "zipf-60": np.sort(zipf(60)), "uniform-200": _uniform(200),
         "dirichlet-120": np.sort(np.random.default_rng(7).dirichlet(np.full(120, 0.7))),
         "uniform-50-and-1e-12": _with_a_crumb(50)}[name]
    for n, rate in ((500, 1e-2), (3_000, 1e-3)):
        _null_check(p, n, rate, 400_000, 13)


def _move(p: np.ndarray, mask: np.ndarray, eps: float) -> np.ndarray:
    """ε moved into the set ``mask`` (scaled inside it and outside it): TV exactly ε."""
    pi = p[mask].sum()
    q = np.where(mask, p * (pi + eps) / pi, p * (1 - pi - eps) / (1 - pi))
    assert 0.5 * np.abs(q - p).sum() == pytest.approx(eps, rel=1e-9)
    return q


def _pairs(p: np.ndarray, eps: float) -> np.ndarray:
    """Paninski's pairs: neighbours by mass, ± the lighter's mass scaled to TV ε."""
    h = np.minimum(p[0::2][: p.size // 2], p[1::2][: p.size // 2])
    h = h / h.sum() * eps
    q = p.copy()
    q[0:2 * h.size:2] += h
    q[1:2 * h.size:2] -= h
    return q


def _misses(p: np.ndarray, q: np.ndarray, n: int, critical: float, draws: int, rng: np.random.Generator) -> int:
    assert (q >= 0).all() and q.sum() == pytest.approx(1.0)
    d = np.maximum(rng.multinomial(n, q, size=draws) - n * p, 0.0).sum(axis=1)
    return int((d < critical).sum())


def _assert_power(misses: int, draws: int, name: str) -> None:
    assert stats.binom.sf(misses - 1, draws, BETA) > META_RATE, (name, misses, draws)


def test_the_stated_tv_catches_every_split_of_sixty_uniform_tokens():
    p, n, rate = _uniform(60), 2_000, 1e-4
    plan = subset_test_plan(n, p, rate, BETA)
    eps = plan.proven_tv
    assert 0.1 < eps < 0.2
    rng = np.random.default_rng(5)
    total = 0
    for k in range(1, 60):  # on a uniform law every set of k tokens is alike: this is every split
        mask = np.arange(60) < k
        if k / 60 + eps < 1:
            misses = _misses(p, _move(p, mask, eps), n, plan.critical, 3_000, rng)
            _assert_power(misses, 3_000, f"into {k} tokens")
            total += misses
    _assert_power(_misses(p, _pairs(p, eps), n, plan.critical, 3_000, rng), 3_000, "pairs")
    # the figure is near tight: at the binding set size, 0.8 of it is missed in 7 % of draws (measured)
    k = round(plan.binding_mass(BETA) * 60)
    assert _misses(p, _move(p, np.arange(60) < k, 0.8 * eps), n, plan.critical, 1_000, rng) > 20


@pytest.mark.slow
@pytest.mark.parametrize("name", ["zipf-60", "dirichlet-120", "uniform-50-and-1e-12"])
def test_the_stated_tv_catches_the_hardest_sets_of_skewed_laws(name):
    """Sets of every mass: prefixes and suffixes by p, the set nearest the binding mass
    (greedy), and 60 random sets; ε moved into each, 4,000 draws each."""
    p = {"zipf-60": np.sort(zipf(60)), "dirichlet-120": np.sort(np.random.default_rng(7).dirichlet(np.full(120, 0.7))),
         "uniform-50-and-1e-12": _with_a_crumb(50)}[name]
    n, rate = 3_000, 1e-4
    plan = subset_test_plan(n, p, rate, BETA)
    eps = plan.proven_tv
    rng = np.random.default_rng(17)
    masks = [np.arange(p.size) < k for k in range(1, p.size)] + [np.arange(p.size) >= k for k in range(1, p.size)]
    target, greedy = plan.binding_mass(BETA), np.zeros(p.size, dtype=bool)
    for i in np.argsort(-p):  # the heaviest first, each kept while the mass stays below the target
        if p[greedy].sum() + p[i] <= target:
            greedy[i] = True
    masks.append(greedy)
    masks += [rng.random(p.size) < rng.random() for _ in range(60)]
    for mask in masks:
        if mask.any() and not mask.all() and p[mask].sum() + eps < 1:
            _assert_power(_misses(p, _move(p, mask, eps), n, plan.critical, 4_000, rng), 4_000, mask.sum())
    _assert_power(_misses(p, _pairs(p, eps), n, plan.critical, 4_000, rng), 4_000, "pairs")


def test_sixty_tokens_state_a_figure_within_ten_percent_of_fifty():
    n, rate = 15_000, 1e-4 / 39
    at = {v: min_discrepancy_of_identity_test(n, _uniform(v), false_fail_rate=rate) for v in (50, 51, 60)}
    assert at[60] <= 1.1 * at[50] and at[51] <= 1.02 * at[50], at
    crumb = min_discrepancy_of_identity_test(n, _with_a_crumb(50), false_fail_rate=rate)
    assert crumb <= 1.01 * at[50], (crumb, at[50])
    # the row itself runs both tests and states the subset test's figure
    p = _uniform(60)
    r = identity_test(np.random.default_rng(3).multinomial(n, p), p, false_fail_rate=rate)
    assert r.details["plan"] == "subsets and split" and r.min_detectable_tv == pytest.approx(at[60])
    assert r.passed
    q = _move(p, np.arange(60) < 20, 1.2 * at[60])
    assert not identity_test(np.random.default_rng(4).multinomial(n, q), p, false_fail_rate=rate).passed


@pytest.mark.slow
@pytest.mark.parametrize("name", ["uniform-60", "chat-position-2"])
def test_identity_row_pvalues_beyond_fifty_tokens_are_conservative(name):
    """2,000 identity rows under p (60 uniform tokens; SmolLM2 chat's position 2, 2,678
    tokens): p-values below 1e-2 and 5e-2 no more often than declared (both tests run, the
    p-value twice the smaller)."""
    p = _uniform(60) if name == "uniform-60" else _real("smollm2-chat-t1", 2)
    n, rng = 2_000, np.random.default_rng(19)
    rows = [identity_test(c, p, false_fail_rate=1e-2) for c in rng.multinomial(n, p, size=2_000)]
    assert all(r.details["plan"] == "subsets and split" for r in rows)
    pvalues = np.array([r.pvalue for r in rows])
    for level in (1e-2, 5e-2):
        assert stats.binom.sf(int((pvalues <= level).sum()) - 1, pvalues.size, level) > META_RATE


# ---------------------------------------------------------------- wide laws: the bound by negative association


def _real(name: str, k: int) -> np.ndarray:
    from specgauge.fixtures.real_laws import fixtures

    p = next(f for f in fixtures() if f.name == name).target[k]
    return np.sort(p[p > 0])


def test_the_negative_association_bound_holds_the_exact_null_tail():
    p, n = np.array([0.15, 0.25, 0.6]), 40
    bound = positive_part_bound(n, p, 0.05)
    pmf, d = [], []
    for a in range(n + 1):
        for b in range(n + 1 - a):
            c = np.array([a, b, n - a - b])
            pmf.append(stats.multinomial.pmf(c, n, p))
            d.append(np.maximum(c - n * p, 0.0).sum())
    pmf, d = np.array(pmf), np.array(d)
    # the step negative association gives: E e^{sD} under the multinomial ≤ the product of the
    # binomial factors, at every s the bound keeps; and with the heaviest token (0.6) split off,
    # the same for A = Σ_{i≠h} (N_i − n p_i)⁺ and B = Σ_{i≠h} (n p_i − N_i)⁺, whose larger is D
    counts = np.array([(a, b, n - a - b) for a in range(n + 1) for b in range(n + 1 - a)], dtype=np.float64)
    above = np.maximum(counts[:, :2] - n * p[:2], 0.0).sum(axis=1)
    below = np.maximum(n * p[:2] - counts[:, :2], 0.0).sum(axis=1)
    assert bound.log_above is not None and np.allclose(np.maximum(above, below), d)
    for s_value, log_mgf in zip(bound.s, bound.log_mgf):
        assert math.log((pmf * np.exp(s_value * d)).sum()) <= log_mgf + 1e-12, s_value
    for k, s_value in enumerate(bound.s_split):
        assert math.log((pmf * np.exp(s_value * above)).sum()) <= bound.log_above[k] + 1e-12, s_value
        assert math.log((pmf * np.exp(s_value * below)).sum()) <= bound.log_below[k] + 1e-12, s_value
    for t in np.linspace(0.5, 14, 28):
        assert pmf[d >= t].sum() <= bound.sf(t) + 1e-12, t
    assert pmf[d >= bound.critical(0.05)].sum() <= 0.05


def _draws_d(p: np.ndarray, q: np.ndarray, n: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """D of ``draws`` samples of n draws from q, in chunks (wide laws)."""
    step = max(1, 2_000_000 // p.size)
    return np.concatenate([np.maximum(rng.multinomial(n, q, size=min(step, draws - a)) - n * p, 0.0).sum(axis=1)
                           for a in range(0, draws, step)])


@pytest.mark.parametrize("name, k, n, draws", [
    ("smollm2-chat-t1", 2, 2_000, 4_000),
    pytest.param("smollm2-chat-t1", 2, 20_000, 20_000, marks=pytest.mark.slow),
    pytest.param("smollm2-prose-t1", 0, 20_000, 20_000, marks=pytest.mark.slow),
    pytest.param("smollm2-prose-t1", 2, 5_000, 20_000, marks=pytest.mark.slow),
])
def test_the_wide_null_bound_holds_the_simulated_tail(name, k, n, draws):
    p, rate = _real(name, k), 1e-2
    plan = subset_test_plan(n, p, rate, BETA)
    assert plan.chernoff is not None and not plan.union
    d = _draws_d(p, p, n, draws, np.random.default_rng(23))
    for t in np.quantile(d, [0.5, 0.9, 0.99]).tolist() + [plan.critical]:
        over = int((d >= t).sum())
        assert stats.binom.sf(over - 1, draws, min(plan.pvalue(t), 1.0)) > META_RATE, (t, over)


def _heads(p: np.ndarray, k: int) -> np.ndarray:
    return np.arange(p.size) >= p.size - k


def _wide_directions(p: np.ndarray, plan, eps: float, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """ε moved into the heaviest 1, 2, 5 and 20 tokens, into the lightest tokens holding a
    third of the mass, into the set nearest the binding mass (heaviest first, greedy) and into
    20 random sets; Paninski's pairs."""
    masks = {f"heads {k}": _heads(p, k) for k in (1, 2, 5, 20)}
    masks["light third"] = np.cumsum(p) <= 1 / 3
    target, greedy = plan.binding_mass(BETA), np.zeros(p.size, dtype=bool)
    for i in np.argsort(-p):
        if p[greedy].sum() + p[i] <= target:
            greedy[i] = True
    masks["binding"] = greedy
    masks.update({f"random {j}": rng.random(p.size) < 0.5 for j in range(20)})
    out = {name: _move(p, m, eps) for name, m in masks.items() if m.any() and not m.all() and p[m].sum() + eps < 1}
    out["pairs"] = _pairs(p, eps)
    return out


@pytest.mark.parametrize("name, k, n, draws", [
    ("smollm2-chat-t1", 2, 2_000, 600),
    pytest.param("smollm2-chat-t1", 2, 20_000, 4_000, marks=pytest.mark.slow),
    pytest.param("smollm2-prose-t1", 0, 10_000, 4_000, marks=pytest.mark.slow),
])
def test_the_wide_subset_test_catches_the_hard_directions_at_its_stated_tv(name, k, n, draws):
    p, rate = _real(name, k), 1e-4
    plan = subset_test_plan(n, p, rate, BETA)
    eps = plan.proven_tv
    rng = np.random.default_rng(29)
    for direction, q in _wide_directions(p, plan, eps, rng).items():
        misses = int((_draws_d(p, q, n, draws, rng) < plan.critical).sum())
        _assert_power(misses, draws, direction)


@pytest.mark.slow
@pytest.mark.parametrize("name, k, tv, rate, ratio", [
    ("smollm2-chat-t1", 2, 0.05, 1e-4 / 39, 12.0),
    ("smollm2-prose-t1", 0, 0.05, 1e-4 / 39, 12.0),
])
def test_wide_real_laws_within_twelve_times_the_lower_bound(name, k, tv, rate, ratio):
    """Rows for a proven TV against the certified lower bound (measured 5.3 and 7.7 times;
    the split test and the coarse plan needed 18.8 and 29.4): the identity row at those rows
    runs the subset test and states at most ``tv``."""
    p = _real(name, k)
    rows = min_num_samples_for_identity_test(tv, p, false_fail_rate=rate)
    low = min_num_samples_lower_bound(tv, p, false_fail_rate=rate).draws
    assert rows <= ratio * low, (rows, low)
    r = identity_test(np.random.default_rng(31).multinomial(rows, p), p, false_fail_rate=rate)
    assert r.details["plan"] == "subsets and split" and r.min_detectable_tv <= tv and r.passed
