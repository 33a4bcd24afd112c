"""The proven false-fail rates of the independence and tail-collision rows, checked by simulation.

The bounds are theorems (docs/gate.md, "The independence rows, proven"): the pair tests'
G against Agrawal's gamma tail multiplied over the table's rows given x (y binned by its law, or
by x's margin without one), the band counts' Chernoff bounds on their exact conditional
law (``independence-calls`` and the call-block sub-test of ``independence-rows``), and the
rare tokens' collision count under its exponential martingales (``tail-collisions``). Here each
is held, at a rate large enough for a simulation to see (0.05), to its simulated null at
the shapes the gate uses, small samples included; and the rows fail known dependences
(shared uniforms, a herded stream, stratified calls, merged rare tokens) while independent
draws pass. Every comparison is a one-sided binomial test at ``META_RATE``, never a guessed
tolerance.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from specgauge.fixtures.pairs import SEED_TARGET, zipf
from specgauge.stattests.chain.checks import _call_block_test, dispersion_test, heavy_band
from specgauge.stattests.core.band_dispersion import critical_sums
from specgauge.stattests.core.statistics import (_collision_martingale, _kl_critical, _pool, independence_test,
                                                 margin_bins, multinomial_kl_tail, tail_collision_test)

META_RATE = 1e-6
RATE = 0.05
GATE_RATE = 1.2e-7  # the default certification's per-assertion rate
REPLICATES = 4_000


def _not_above(hits: int, runs: int, bound: float) -> bool:
    """hits of runs is consistent with a rate at most ``bound`` (one-sided binomial test)."""
    return stats.binomtest(hits, runs, min(bound, 1.0), alternative="greater").pvalue >= META_RATE


def _draw(p: np.ndarray, size: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    return np.minimum(np.searchsorted(np.cumsum(p), rng.random(size) * p.sum(), side="right"), p.size - 1)


def _half_g(x: np.ndarray, y: np.ndarray, law: np.ndarray, n: int) -> tuple[np.ndarray, int]:
    """G/2 of each replicate's table (rows: x's observed bins; columns: y's bins from ``law``),
    vectorised over the replicates, and the gamma shape R(C − 1) of its proven tail."""
    reps = x.shape[0]
    ybin = _pool(n * law, math.sqrt(10.0 * n))
    columns = int(ybin.max()) + 1
    xbins = np.stack([margin_bins(np.bincount(row, minlength=law.size), None, n)[row] for row in x])
    rows = xbins.max(axis=1) + 1
    cells = xbins * columns + ybin[y]
    table = np.zeros((reps, int(rows.max()) * columns))
    np.add.at(table, (np.repeat(np.arange(reps), n), cells.ravel()), 1.0)
    table = table.reshape(reps, -1, columns)
    expected = table.sum(axis=2, keepdims=True) * table.sum(axis=1, keepdims=True) / n
    with np.errstate(divide="ignore", invalid="ignore"):
        half_g = np.where(table > 0, table * np.log(table / expected), 0.0).sum(axis=(1, 2))
    return half_g, rows * (columns - 1)


#: (law, pairs): the seed's six tokens at a small batch's calls and at a long run's, a pooled
#: Zipf tail, and 48 pairs, where no asymptotic law holds.
G_SHAPES = [("seed", 48), ("seed", 1_400), ("zipf-200", 400), ("two", 60)]


@pytest.mark.parametrize("shape, n", G_SHAPES, ids=[f"{s}-{n}" for s, n in G_SHAPES])
def test_the_g_bound_holds_for_independent_pairs(shape, n):
    """P(G/2 ≥ x) ≤ e^{−x} (e x/s)^s with s = R(C − 1): at the critical value of rate 0.05
    independent pairs exceed it no more often than that."""
    law = {"seed": SEED_TARGET, "zipf-200": zipf(200), "two": np.array([0.8, 0.2])}[shape]
    rng = np.random.default_rng([17, n])
    x, y = _draw(law, (REPLICATES, n), rng), _draw(law, (REPLICATES, n), rng)
    half_g, shapes = _half_g(x, y, law, n)
    critical = np.array([_kl_critical(int(s), RATE) / 2 if s > 0 else np.inf for s in shapes])
    hits = int((half_g >= critical - 1e-9).sum())
    assert _not_above(hits, REPLICATES, RATE), f"{shape} n {n}: {hits} of {REPLICATES} past the 0.05 critical value"
    # the bound itself at every threshold where the simulation sees it
    s = int(np.median(shapes))
    mine = half_g[shapes == s]
    for threshold in np.linspace(s, 2 * s + 10, 8):
        bound = multinomial_kl_tail(float(threshold), s + 1)
        assert _not_above(int((mine >= threshold).sum()), mine.size, bound)


@pytest.mark.parametrize("n", [48, 400, pytest.param(2_000, marks=pytest.mark.slow)])
def test_without_a_law_the_bound_holds_for_independent_pairs(n):
    """No law given (the server's pairs): y binned by x's observed margin, the G test's proven bound
    fails independent pairs at rate 0.05 no more often than that."""
    rng = np.random.default_rng([19, n])
    runs = 300
    results = [independence_test(_draw(SEED_TARGET, (n,), rng), _draw(SEED_TARGET, (n,), rng), false_fail_rate=RATE)
               for _ in range(runs)]  # at 0.05 the row reads the chi-square law: hold the proven bound itself
    fails = sum(multinomial_kl_tail(r.details["g_statistic"] / 2, r.details["gamma_shape"] + 1) < RATE
                for r in results if "g_statistic" in r.details)
    assert _not_above(fails, runs, RATE), f"n {n}: {fails} of {runs} failed at {RATE}"


def test_without_a_law_shared_randomness_is_caught():
    """The known-bad case: pairs sharing a uniform, no law given, fail at 1.2e-7."""
    u = np.random.default_rng(23).random(4_000)
    assert not independence_test((u * 4).astype(int), (u * 3).astype(int), false_fail_rate=1.2e-7).passed


#: (block size, blocks, band mass): the two scales of ``independence-calls`` (pairs of neighbours,
#: blocks of 25 at the seed's band of 0.4) and whole calls (the call-block sub-test: 16 calls of 300).
BAND_SHAPES = [(2, 3_000, 0.5), (25, 400, 0.4), (21, 11, 0.51), (300, 16, 0.5), (2, 60, 0.1)]


@pytest.mark.parametrize("m, blocks, mass", BAND_SHAPES, ids=[f"{m}x{b}" for m, b, _ in BAND_SHAPES])
def test_the_band_bounds_hold_on_the_exact_conditional_law(m, blocks, mass):
    """Given the band's pooled count K, the blocks' counts are a uniform permutation of K ones
    over the blocks' slots: S = Σ c² falls at or beyond the critical sums of rate 0.05 (each
    tail at 0.025) no more often than that."""
    rng = np.random.default_rng([23, m, blocks])
    k = int(round(mass * m * blocks))
    slots = np.zeros((REPLICATES, m * blocks), dtype=np.int8)
    slots[:, :k] = 1
    counts = rng.permuted(slots, axis=1).reshape(REPLICATES, blocks, m).sum(axis=2, dtype=np.int64)
    s = (counts.astype(np.float64) ** 2).sum(axis=1)
    lo, hi = critical_sums(m, blocks, k, RATE)
    for label, hits in (("lower", int((s <= lo).sum())), ("upper", int((s >= hi).sum()))):
        assert _not_above(hits, REPLICATES, RATE / 2), f"{label} tail: {hits} of {REPLICATES}"


@pytest.mark.parametrize("p, n", [(SEED_TARGET, 20_000), pytest.param(zipf(1000), 5_000, marks=pytest.mark.slow),
                                  pytest.param(np.array([0.95, 0.05]), 2_000, marks=pytest.mark.slow)],
                         ids=["seed", "zipf-1k", "skewed"])
def test_dispersion_fails_independent_draws_no_more_than_its_rate(p, n):
    """End to end at rate 0.05: iid draws from p, both scales and their Bonferroni."""
    rng = np.random.default_rng([29, n])
    runs = 300
    fails = sum(not dispersion_test(_draw(p, (n,), rng), p, false_fail_rate=RATE, false_pass_rate=1e-3).passed
                for _ in range(runs))
    assert _not_above(fails, runs, RATE), f"{fails} of {runs} failed at {RATE}"


# ---------------------------------------------------------------- known dependences fail, independence passes


def test_shared_uniforms_fail_the_pair_test_and_independent_pairs_pass():
    """Rows that share a uniform one time in five (the rest fresh): the G test fails them at
    the gate's rate at 20,000 pairs; independent pairs pass at every seed."""
    rng = np.random.default_rng(31)
    n = 20_000
    u, v = rng.random(n), rng.random(n)
    shared = rng.random(n) < 0.2
    cdf = np.cumsum(SEED_TARGET)
    x = np.searchsorted(cdf, u * cdf[-1], side="right")
    y = np.searchsorted(cdf, np.where(shared, u, v) * cdf[-1], side="right")
    bad = independence_test(x, y, false_fail_rate=GATE_RATE, y_law=SEED_TARGET)
    assert not bad.passed and bad.details["false_fail_basis"] == "proven"
    assert not independence_test(x, y, false_fail_rate=GATE_RATE).passed  # the cell-by-cell form too
    for seed in range(5):
        r = np.random.default_rng(seed)
        assert independence_test(_draw(SEED_TARGET, (n,), r), _draw(SEED_TARGET, (n,), r), false_fail_rate=GATE_RATE,
                                 y_law=SEED_TARGET).passed


def test_a_herded_stream_fails_dispersion_and_iid_draws_pass():
    """A Weyl stream u_r = frac(φ + r √2) through p's inverse CDF: every marginal exact, the
    draws under-dispersed; at 5,000 emissions the proven test fails it, and iid draws pass."""
    p = zipf(1000)
    cdf = np.cumsum(p)
    u = (0.3 + np.arange(1, 5_001) * math.sqrt(2.0)) % 1.0
    herded = np.minimum(np.searchsorted(cdf, u * cdf[-1], side="right"), p.size - 1)
    r = dispersion_test(herded, p, false_fail_rate=GATE_RATE, false_pass_rate=1e-3)
    assert not r.passed and r.details["variance_ratio"] < r.details["critical_low"]
    iid = _draw(p, (5_000,), np.random.default_rng(37))
    assert dispersion_test(iid, p, false_fail_rate=GATE_RATE, false_pass_rate=1e-3).passed


def test_stratified_calls_fail_the_call_block_test():
    """16 calls of 300 rows whose uniforms are stratified across the call: each call's band
    count sits within one of its mean, far below the binomial spread."""
    rng = np.random.default_rng(41)
    calls, b = 16, 300
    u = (rng.permuted(np.tile(np.arange(b), (calls, 1)), axis=1) + rng.random((calls, b))) / b
    cdf = np.cumsum(SEED_TARGET)
    tokens = np.searchsorted(cdf, u.ravel() * cdf[-1], side="right").reshape(calls, b)
    inside = heavy_band(SEED_TARGET)
    assert not _call_block_test(tokens, inside, GATE_RATE, 1e-3).passed
    fresh = _draw(SEED_TARGET, (calls, b), rng)
    assert _call_block_test(fresh, inside, GATE_RATE, 1e-3).passed


def _reaching(p: np.ndarray, calls: int, b: int, reach: float, rng: np.random.Generator,
              paired: bool = False) -> np.ndarray:
    """A position's grid [calls, B]: each row reaches it with probability ``reach`` (PAD
    otherwise) and draws from p there; ``paired``: rows paired at random within each call, a
    pair that both reach it emitting the same token (every row's law still p)."""
    grid = _draw(p, (calls, b), rng)
    if paired:
        order = rng.permuted(np.tile(np.arange(b), (calls, 1)), axis=1)
        h = b // 2
        rows = np.arange(calls)[:, None]
        grid[rows, order[:, h:2 * h]] = grid[rows, order[:, :h]]
    return np.where(rng.random((calls, b)) < reach, grid, -1)


#: (calls, rows a call, reach): batch8-g8's bonus and batch12-g5's at the default tier's calls,
#: a large call's bonus (seed-six-token's reach), and a position few rows reach.
CALL_SHAPES = [(2_810, 8, 0.43), pytest.param(1_586, 12, 0.59, marks=pytest.mark.slow),
               pytest.param(34, 3_000, 0.66, marks=pytest.mark.slow), (200, 8, 0.1)]


@pytest.mark.parametrize("calls, b, reach", CALL_SHAPES, ids=["2810x8", "1586x12", "34x3000", "200x8-rare"])
def test_the_whole_call_test_holds_its_rate_on_rows_that_reach_a_position(calls, b, reach):
    """The whole-call count test reads the first m reaching rows of each call (m from the
    pattern of rows that reach the position, which the null makes independent of the tokens
    there): at rate 0.05 it fails independent rows no more often than that, whatever that
    pattern. (Large calls are the slow tier's: every replicate's exact law is a new one, 0.5 s.)"""
    rng = np.random.default_rng([59, calls, b])
    inside = heavy_band(SEED_TARGET)
    runs = 200
    fails = sum(not _call_block_test(_reaching(SEED_TARGET, calls, b, reach, rng), inside, RATE, 1e-3).passed
                for _ in range(runs))
    assert _not_above(fails, runs, RATE), f"{fails} of {runs} failed at {RATE}"


def test_rows_paired_at_random_fail_the_whole_call_test_where_calls_are_many():
    """Rows paired at random within 8-row calls, a pair that both reach the bonus sharing its
    token (batch8-g8's shape at the default tier: 2,810 calls, bonus reached by 43 %): every
    pair of rows shares only one time in seven, but each call's band count is over-dispersed,
    and the test fails them at the gate's rate in 20 of 20 runs, by the upper tail."""
    rng = np.random.default_rng(61)
    inside = heavy_band(SEED_TARGET)
    results = [_call_block_test(_reaching(SEED_TARGET, 2_810, 8, 0.43, rng, paired=True), inside, GATE_RATE, 1e-3)
               for _ in range(20)]
    assert not any(r.passed for r in results), [r.pvalue for r in results]
    assert all(r.statistic > r.details["critical_high"] for r in results)


# ---------------------------------------------------------------- the rare tokens' collisions

#: (law, draws at the position): zipf-1k's and the 32k fixture's sizes in the default tier, and
#: wide-70000's (the three shapes whose tail-collisions rows test a band).
TAIL_SHAPES = [(1000, 3_300), (32_000, 1_415), pytest.param(70_000, 754, marks=pytest.mark.slow)]


@pytest.mark.parametrize("vocab, n", TAIL_SHAPES, ids=["zipf-1k", "zipf-32k", "wide-70000"])
def test_tail_collisions_fail_iid_draws_no_more_than_their_rate(vocab, n):
    """Multinomial draws from p at rate 0.05: the exponential-martingale p-value (every band,
    Bonferroni) falls below 0.05 no more often than that."""
    p = zipf(vocab)
    rng = np.random.default_rng([43, vocab])
    runs = 400
    results = [tail_collision_test(rng.multinomial(n, p), p, false_fail_rate=RATE, seed=i) for i in range(runs)]
    tested = [r for r in results if r.n]
    assert tested and {r.details["false_fail_basis"] for r in tested} == {"proven"}
    fails = sum(not r.passed for r in results)
    assert _not_above(fails, runs, RATE), f"{fails} of {runs} failed at {RATE}"


def test_the_collision_martingale_bound_holds_at_every_threshold():
    """One band of 2,000 equally likely tokens, 600 draws: P(p-value ≤ a) ≤ a for a from 0.3
    to 0.01 (the p-value itself is valid, not only the verdict at one rate)."""
    p = np.full(2_000, 1 / 2_000)
    rng = np.random.default_rng(47)
    pvalues = np.array([_collision_martingale(rng.multinomial(600, p).astype(np.float64), p, rng)[3]
                        for _ in range(REPLICATES // 4)])
    for a in (0.3, 0.1, 0.03, 0.01):
        assert _not_above(int((pvalues <= a).sum()), pvalues.size, a), f"P(p <= {a}) ~ {np.mean(pvalues <= a)}"


def test_merged_rare_neighbours_fail_the_collision_test_and_p_passes():
    """Rare tokens of zipf-1k merged pairwise (odd ids emitted as their even neighbour: Σr²
    doubles) at 3,300 draws fail at the gate's rate; draws from p pass."""
    p = zipf(1000)
    n = 3_300
    rare = np.flatnonzero(n * p < 10)
    q = p.copy()
    even, odd = rare[0:-1:2], rare[1::2][: rare[0:-1:2].size]
    q[even] += q[odd]
    q[odd] = 0.0
    rng = np.random.default_rng(53)
    assert not tail_collision_test(rng.multinomial(n, q), p, false_fail_rate=GATE_RATE).passed
    assert tail_collision_test(rng.multinomial(n, p), p, false_fail_rate=GATE_RATE).passed
