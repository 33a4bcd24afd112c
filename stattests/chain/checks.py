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
from scipy import stats

from specgauge.fixtures.pairs import PairFixture

from specgauge.stattests.core.band_dispersion import two_sided
from specgauge.stattests.core.certificate import Rates, failure  # noqa: F401  (failure: re-exported)
from specgauge.stattests.core.contract import PAD
from specgauge.stattests.chain.harness import FixtureRun
from specgauge.stattests.chain.sequences import SequenceRun, sequence_counts
from specgauge.stattests.identity.instance import identity_test
from specgauge.stattests.core.statistics import (MIN_EXPECTED, TestResult, acceptance_rate_test, combine_bonferroni, goodness_of_fit,
                         independence_test, ks_uniformity, tail_collision_test, tokens_per_pass_mean_test,
                         tokens_per_pass_test)

#: Vocabularies at least this wide get the unpooled look at their rare tokens.
TAIL_VOCAB = 64

#: Up to this many rows per call, every pair of a call's rows is tested; above it, the
#: call's whole block of rows at once (a calls × tokens table).
PAIRWISE_CALL_ROWS = 12


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
    kind: str = "pair"  # the kind of fixture it runs on: "pair" or "sequence"


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


#: Worst-case TVs the identity rows say the cost of, where their own figure is coarser.
GUARANTEE_LADDER = (0.3, 0.1, 0.05, 0.01, 0.005)
#: Decoder input the harness and the NumPy reference get through per CPU-second on the 152k
#: fixture (0.95 GB measured on the project's 2-core machine: 160 rows, 2.14 GB, 2.25 CPU-s;
#: benchmarks/bench_sample_complexity.py measures it again): what the rows a finer
#: guarantee needs would take in time. A constant, so a certificate never depends on the clock.
REFERENCE_BYTES_PER_SECOND = 0.95e9


def _emissions_for(target: float, p: np.ndarray, n: int, stated: float, rates: Rates) -> int:
    """Emissions at which the identity figure reaches ``target``, from the n it has: the
    figure falls about as 1/√n, so n (figure / target)², corrected by the planning figure
    there until within 10 % (at most four evaluations: a certificate line, not a search)."""
    from specgauge.stattests.identity.instance import min_discrepancy_of_identity_test

    m, figure = max(n, 2), stated if math.isfinite(stated) else 4.0
    for _ in range(4):
        m = max(2, math.ceil(m * min(figure / target, 100.0) ** 2))
        figure = min_discrepancy_of_identity_test(m, p, false_fail_rate=rates.false_fail,
                                                  false_pass_rate=rates.false_pass, fast=True)
        if target * 0.9 <= figure <= target:
            break
        figure = figure if math.isfinite(figure) else 4 * target
    return m


def guarantee_cost(fixture: PairFixture, k: int, stated: float, rates: Rates, n: int = 0) -> str:
    """What the next finer rung of :data:`GUARANTEE_LADDER` below ``stated`` would take at
    position k: emissions, rows (at that position's emission probability), bytes of decoder
    input (8 (2γ + 1) V a row) and the NumPy reference's time (context-free laws taken as
    views: shards.reference_seconds); '' when the figure is already at the finest rung."""
    from specgauge.stattests.chain.harness import RunConfig, emission_probability
    from specgauge.stattests.chain.shards import reference_seconds

    target = next((t for t in GUARANTEE_LADDER if t < stated), None)
    reach = float(emission_probability(fixture)[k])
    if target is None or reach <= 0:
        return ""
    needed = _emissions_for(target, fixture.target[k], n or 2, stated, rates)
    rows = math.ceil(needed / reach)
    size = rows * 8.0 * (2 * fixture.gamma + 1) * fixture.vocab_size
    minutes = reference_seconds(fixture, rows, RunConfig(rows).chunk_bytes, broadcast=True) / 60
    return (f"; TV {target:g} here needs about {needed:,} emissions: {rows:,} rows, {size / 1e9:,.3g} GB of decoder "
            f"input, about {minutes:,.2g} CPU-minutes for the NumPy reference")


def identity(run: FixtureRun, rates: Rates) -> dict[int | None, TestResult]:
    """Tokens at position k, given it is emitted, are p_k's: an identity test whose
    detectable TV holds against every alternative with independent rows (the certificate's
    guarantee; ``independence-calls`` tests the independence). At the rarest position (the
    bonus) the message also says what the next finer guarantee would take."""
    fx = run.fixture
    out = {}
    for k in range(fx.gamma + 1):
        counts = np.bincount(_emitted_at(run, k), minlength=fx.vocab_size)
        r = identity_test(counts, fx.target[k], false_fail_rate=rates.false_fail,
                          false_pass_rate=rates.false_pass, seed=run.seed)
        if k == fx.gamma and r.n and "message" in r.details:
            cost = guarantee_cost(fx, k, r.min_detectable_tv, rates, r.n)
            r = TestResult(r.test, r.statistic, r.pvalue, r.n, r.false_fail_rate, r.min_detectable_tv, r.df,
                           {**r.details, "message": r.details["message"] + cost})
        out[k] = r
    return out


def tail_collisions(run: FixtureRun, rates: Rates) -> dict[int | None, TestResult]:
    """The rare tokens pooled by the chi-square collide as often as p says (an unpooled tail test)."""
    fx = run.fixture
    out = {}
    for k in range(fx.gamma + 1):
        counts = np.bincount(_emitted_at(run, k), minlength=fx.vocab_size)
        out[k] = tail_collision_test(counts, fx.target[k], false_fail_rate=rates.false_fail,
                                     false_pass_rate=rates.false_pass, seed=run.seed + k)
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


def _pairs_tests(pairs: list[tuple[np.ndarray, np.ndarray]], rate: float, rates: Rates,
                 y_law: np.ndarray | None = None) -> list[TestResult]:
    """Independence sub-tests of one assertion, each at ``rate`` (its Bonferroni share); y's bins
    from ``y_law`` (the law a pair's second token is certified to follow), fixed before the draws."""
    return [independence_test(x, y, false_fail_rate=rate, false_pass_rate=rates.false_pass, y_law=y_law)
            for x, y in pairs]


def _call_block_test(grid: np.ndarray, band: np.ndarray, rate: float, false_pass_rate: float) -> TestResult:
    """Rows of one call are independent draws: each call's count in the band (the heaviest tokens
    of the position's p, about half its mass) against its exact law given the pooled count,
    two-sided (:mod:`~specgauge.stattests.core.band_dispersion`, proven at any rate).

    ``grid[calls, B]`` holds the position's token per row, PAD where the row did not reach it.
    Which rows reach a position depends on their earlier positions only, so given that pattern
    the tokens there are independent draws from p under the null: each call keeps its first m
    reaching rows (m chosen from the pattern alone, to keep the most pairs of rows; calls with
    fewer are left out), and the m-row counts are exchangeable. Dependence between any two rows
    of a call, at any lag, makes the counts over-dispersed (rows that share a draw, paired at
    random or not) or under-dispersed (stratified uniforms across the call). States no TV:
    ``details["detectable_dispersion"]`` is the over-dispersion φ* it catches with power about
    1 − false_pass_rate (the scaled chi-square's power step, an estimate; the level is proven).
    """
    emitted = grid != PAD
    per_call = emitted.sum(axis=1)
    sizes = np.arange(2, grid.shape[1] + 1)
    kept_calls = (per_call[None, :] >= sizes[:, None]).sum(axis=1)
    value = np.where(kept_calls >= 2, kept_calls * sizes * (sizes - 1), 0)
    if not value.size or value.max() == 0:
        return TestResult("independence", 1.0, 1.0, 0, rate, math.nan, 0,
                          {"reason": "fewer than two calls with two rows reaching the position",
                           "false_fail_basis": "exact"})
    m = int(sizes[int(np.argmax(value))])
    calls = per_call >= m
    first = emitted & (np.cumsum(emitted, axis=1) <= m)
    inside = band[np.where(first, grid, 0)] & first
    counts = inside[calls].sum(axis=1)
    ratio, pvalue, (lo, hi) = two_sided(counts, m, rate)
    r = int(calls.sum())
    if not math.isfinite(hi):  # the band took every draw or none (a one-token law): nothing to split
        return TestResult("independence", 1.0, 1.0, 0, rate, math.nan, 0,
                          {"reason": "the band holds every draw or none", "false_fail_basis": "exact"})
    phi = float(hi * (r - 1) / stats.chi2.ppf(false_pass_rate, r - 1))
    return TestResult("independence", ratio, pvalue, r * m, rate, math.nan, max(r - 1, 0),
                      {"variance_ratio": ratio, "critical_low": lo, "critical_high": hi, "calls": float(r),
                       "rows_a_call": float(m), "detectable_dispersion": phi, "false_fail_basis": "proven"})


#: Above this vocabulary the row tests see each token's probability band, not the token.
COARSE_VOCAB = 4096
BANDS = 16


def _coarse(tokens: np.ndarray, p: np.ndarray, fixture: PairFixture, pairs: int) -> tuple[np.ndarray, np.ndarray]:
    """(each token's category, PAD kept; the categories' law under p): on large vocabularies its
    band of p (bands of equal mass, by rank: at most BANDS, and few enough that each fills
    √(MIN_EXPECTED · pairs) of a sub-test's ``pairs``): a function of the token, so independence
    of the bands is still an exact test of independence, and a few hundred rows fill its table
    (tokens would not); the token itself elsewhere."""
    if fixture.vocab_size <= COARSE_VOCAB or not fixture.context_free:
        return tokens, p
    bands = int(np.clip(math.sqrt(max(pairs, 1) / MIN_EXPECTED), 2, BANDS))
    order = np.argsort(-p, kind="stable")
    band = np.empty(p.size, dtype=np.int64)
    band[order] = np.minimum((np.cumsum(p[order]) - p[order]) * bands, bands - 1).astype(np.int64)
    return np.where(tokens == PAD, PAD, band[np.where(tokens == PAD, 0, tokens)]), np.bincount(band, weights=p,
                                                                                              minlength=bands)


def _row_pairs(grid: np.ndarray) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(what the pairs detect, x, y) of one position's ``grid[calls, B]``: every pair of a call's
    rows (B ≤ PAIRWISE_CALL_ROWS), else rows 2i and 2i + 1 (lag 1) and rows i and i + B/2 (a
    batch split in halves); and row i of call c against row i of call c + 1, for c even and for c
    odd (state carried to the next call, a generator reseeded without advancing). Each list of
    pairs is disjoint, so under the null its pairs are independent; pairs with a PAD (a row that
    did not reach the position) are dropped later."""
    calls, b = grid.shape
    if b <= PAIRWISE_CALL_ROWS:
        pairs = [(f"rows {i} and {j} of a call", grid[:, i], grid[:, j]) for i in range(b) for j in range(i + 1, b)]
    else:
        h = b // 2
        pairs = [("lag 1 (rows 2i and 2i + 1 of a call)", grid[:, 0:2 * h:2].ravel(), grid[:, 1:2 * h:2].ravel()),
                 ("lag B/2 (rows i and i + B/2 of a call)", grid[:, :h].ravel(), grid[:, h:2 * h].ravel())]
    for start in (0, 1):
        half = (calls - start) // 2
        if half:
            pairs.append((f"row i of calls c and c + 1, c {'even' if start == 0 else 'odd'}",
                          grid[start:start + 2 * half:2].ravel(), grid[start + 1:start + 2 * half:2].ravel()))
    return pairs


def _row_subtests(fixture: PairFixture, call_rows: int, calls: int) -> int:
    """Sub-tests of :func:`independence_rows`, fixed by the run's shape before any token is seen:
    the rate is split over them (Bonferroni)."""
    b = call_rows
    within = b * (b - 1) // 2 if b <= PAIRWISE_CALL_ROWS else 2
    across = int(calls >= 2) + int(calls >= 3)
    block = int(calls >= 2 and b >= 2)
    return (fixture.gamma + 1) * (within + across + block)


def independence_rows(run: FixtureRun, rates: Rates) -> dict[int | None, TestResult]:
    """Rows (same p and q) are independent at every position, the bonus included, within a
    call and across calls.

    At each position, among the rows that reach it: within a call, every pair of rows
    (B ≤ PAIRWISE_CALL_ROWS), else lags 1 and B/2; the call's whole count in the band of the
    position's p (every lag at once, rows paired at random included: over-dispersed; stratified
    rows: under-dispersed); across calls, row i of call c against row i of call c + 1 (a
    decoder that reseeds from the caller's generator without advancing it repeats itself). The
    pair tests are G tests with y's bins from the position's p (proven, upper tail). On
    vocabularies above COARSE_VOCAB the tokens are replaced by their band of p. The false-fail
    rate is split evenly over every sub-test of every position; the message names the worst
    one and what each kind detects.
    """
    fx = run.fixture
    b = run.call_rows
    calls = run.tokens.shape[0] // b
    count = _row_subtests(fx, b, calls)
    rate = rates.false_fail / max(count, 1)
    results, labels, blocks = [], [], []
    for k in range(fx.gamma + 1):
        grid = run.tokens[: calls * b, k].reshape(calls, b)
        where = "bonus" if k == fx.gamma else f"pos{k}"
        reach = float(np.mean(grid != PAD)) if grid.size else 0.0
        expected_pairs = calls * reach * reach * (1 if b <= PAIRWISE_CALL_ROWS else b // 2)
        coarse, law = _coarse(grid, fx.target[k], fx, int(expected_pairs))
        for what, x, y in _row_pairs(coarse):
            both = (x != PAD) & (y != PAD)
            results.append(independence_test(x[both], y[both], false_fail_rate=rate,
                                             false_pass_rate=rates.false_pass, y_law=law))
            labels.append(f"{where}, {what}")
        if calls >= 2 and b >= 2:
            block = _call_block_test(grid, heavy_band(fx.target[k]), rate, rates.false_pass)
            results.append(block)
            labels.append(f"{where}, the whole call's count in the band")
            blocks.append((where, block))
    if not results:
        return {None: TestResult("independence", 0.0, 1.0, 0, rates.false_fail, math.nan, 0,
                                 {"message": "one call of one row: no two rows to compare"})}
    combined = combine_bonferroni(results, "independence", rates.false_fail)
    worst = int(np.argmin([r.pvalue for r in results]))
    pairs = [r for r, label in zip(results, labels) if "band" not in label and r.n > 0]
    figures = [r.min_detectable_tv for r in pairs]
    blind = sorted({label.split(",")[0] for r, label in zip(results, labels)
                    if "band" not in label and r.n > 0 and not (r.df and math.isfinite(r.min_detectable_tv) and
                                                              r.min_detectable_tv < 1)})
    finite = [f for f in figures if math.isfinite(f) and f < 1]
    figure = max(finite) if finite else math.inf
    phis = [blk.details["detectable_dispersion"] for _, blk in blocks if blk.n]
    phi = max(phis) if phis else math.inf
    said = (f"a dependence between two rows at a tested lag of TV {figure:.3g} (the pooled joint from the product of "
            f"its margins) is caught with power {1 - rates.false_pass:g}" if finite else
            "no pair of rows holds enough pairs for a TV figure")
    if blind:
        said += f" (no figure at {', '.join(blind)}: too few pairs reach it)"
    if phis:
        said += (f"; whole-call counts catch rows that share draws (any lag, paired at random included) once the "
                 f"counts' variance is {phi:.3g} times an independent sample's (worst position)")
    message = (f"{count} sub-tests at every position, each at false-fail {rate:.2g}: "
               + ("every pair of a call's rows" if b <= PAIRWISE_CALL_ROWS else "rows at lags 1 and B/2 of a call")
               + ", the same row of consecutive calls" + (", each call's count in the band" if blocks else "")
               + f"; worst {labels[worst]} (p-value {results[worst].pvalue:.3g}); {said}")
    details = {**dict(combined.details), "message": message, "detectable_dispersion": phi,
               "worst_subtest": labels[worst]}
    return {None: TestResult(combined.test, combined.statistic, combined.pvalue, combined.n, rates.false_fail,
                             figure, combined.df, details)}


#: A dispersion block expects at least this many emissions in the band and out of it.
DISPERSION_CELL = 10.0


def heavy_band(p: np.ndarray) -> np.ndarray:
    """The band of a dispersion test: the heaviest tokens of p (ties by id) whose mass is nearest
    one half, at least one token and never every possible one. A function of p alone, fixed
    before any count is seen, so the conditional law given the band's pooled count holds."""
    order = np.lexsort((np.arange(p.size), -p))
    order = order[p[order] > 0]
    inside = np.zeros(p.size, dtype=bool)
    if order.size < 2:
        return inside
    cum = np.cumsum(p[order])
    prefix = cum[:-1]  # the mass of the heaviest 1, 2, …, L − 1 tokens
    inside[order[: int(np.argmin(np.abs(prefix - 0.5 * cum[-1]))) + 1]] = True
    return inside


def _block_dispersion(inside: np.ndarray, m: int, rate: float, false_pass_rate: float) -> dict[str, float]:
    """One scale of :func:`dispersion_test`: blocks of m consecutive emissions (``inside``: each
    emission in the band or not), the remainder at the end left out."""
    blocks = inside.size // m
    if blocks < 2:
        return {}
    counts = inside[: blocks * m].reshape(blocks, m).sum(axis=1)
    ratio, pvalue, (lo, hi) = two_sided(counts, m, rate)
    if not math.isfinite(lo):  # the band took every emission or none
        return {}
    phi = float(max(lo, 0.0) * (blocks - 1) / stats.chi2.isf(false_pass_rate, blocks - 1))
    return {"pvalue": pvalue, "ratio": ratio, "lo": lo, "hi": hi, "phi": phi, "blocks": float(blocks), "m": float(m)}


def dispersion_test(tokens: np.ndarray, p: np.ndarray, *, false_fail_rate: float,
                    false_pass_rate: float) -> TestResult:
    """Emissions in row order are independent draws: consecutive blocks hold the band's draws
    as a random split would (two-sided, proven: :mod:`~specgauge.stattests.core.band_dispersion`).

    Rows come in calls, so a block of consecutive emissions spans parts of calls and call
    boundaries: a decoder that carries state from row to row or call to call (a remainder, a
    herded or low-discrepancy stream) keeps every block's count in the band (the heaviest
    tokens of p, about half its mass) too close to its expectation, S = Σ c² too small (lower
    tail); one that shares randomness spreads them, S too large (upper tail). Two scales, each
    at half the rate: blocks of two neighbouring emissions (a stream's step), and of the fewest
    that expect DISPERSION_CELL draws in the band and out of it (a stream's drift). Given the band's pooled count the blocks' counts are multivariate
    hypergeometric under independence, and Chernoff's bound on that exact law gives the
    p-value at any rate. ``details["detectable_dispersion"]`` is φ*: counts that vary φ ≤ φ*
    times as much as independent draws' (at either scale) fail with power about
    1 − false_pass_rate (the power step is the scaled chi-square's, an estimate; the
    false-fail rate is proven).
    """
    n = tokens.size
    inside_p = heavy_band(p)
    mass = float(p[inside_p].sum() / p.sum()) if inside_p.any() else 0.0
    if not 0 < mass < 1:
        return TestResult("dispersion", 0.0, 1.0, 0, false_fail_rate, math.nan, None,
                          {"reason": "p has one token: nothing to band", "false_fail_basis": "exact"})
    inside = inside_p[tokens]
    least = min(mass, 1.0 - mass)
    scales = sorted({2, max(2, math.ceil(DISPERSION_CELL / least))})
    rate = false_fail_rate / len(scales)
    tested = [r for r in (_block_dispersion(inside, m, rate, false_pass_rate) for m in scales) if r]
    if not tested:
        reason = (f"a resolution needs at least {2 * scales[0]} emissions (two blocks of {scales[0]}) with the band "
                  f"of p (the heaviest tokens, mass {mass:.2f}) neither empty nor full")
        return TestResult("dispersion", 0.0, 1.0, 0, false_fail_rate, math.nan, None,
                          {"reason": reason, "false_fail_basis": "exact"})
    worst = min(tested, key=lambda r: r["pvalue"])
    pvalue = min(1.0, len(scales) * worst["pvalue"])
    phi = max(r["phi"] for r in tested)
    scale_text = "; ".join(f"{r['ratio']:.3g} in {int(r['blocks']):,} blocks of {int(r['m'])} (fails at or below "
                           f"{r['lo']:.3g} or at or above {r['hi']:.3g})" for r in tested)
    details = {"blocks": worst["blocks"], "block_size": worst["m"], "band_mass": mass, "variance_ratio": worst["ratio"],
               "critical_low": worst["lo"], "critical_high": worst["hi"], "detectable_dispersion": phi,
               "false_fail_basis": "proven",
               "message": (f"dispersion of an independent sample's: {scale_text} (the band: the heaviest tokens of p, "
                           f"mass {mass:.2f}; Chernoff bounds on the exact conditional law, proven); detects "
                           f"under-dispersion below {phi:.3g} with power {1 - false_pass_rate:g}")}
    return TestResult("dispersion", worst["ratio"], pvalue, n, false_fail_rate, math.nan, int(worst["blocks"]) - 1,
                      details)


def tv_phrase(tv: float, prefix: str = "TV ") -> str:
    """A TV bound as a person reads it: a bound of 1 or more bounds nothing, so it is "none"."""
    return f"{prefix}{tv:.3g}" if math.isfinite(tv) and tv < 1 else "no TV bound (none below 1)"


def hidden_tv(n: int, p: np.ndarray, phi: float, rates: Rates, seed: int) -> float:
    """The largest TV an under-dispersion φ (each token's count variance φ times an
    independent sample's) could hide from the identity row at ``p``: it lowers the
    middle's Z by (1 − φ) Σ_M w q(1 − q) on average, which offsets n(n − 1) D of bias, so
    D ≤ (1 − φ) Σ_M w p(1 − p) / (n − 1), TV ≤ ½ √(D Σ_M 1/w) (Cauchy–Schwarz, as the
    guarantee's own step)."""
    from specgauge.stattests.identity.instance import proven_split

    if n < 2 or np.count_nonzero(p) < 2 or not phi < 1:
        return 0.0
    split, _ = proven_split(n, p, false_fail_rate=rates.false_fail, false_pass_rate=rates.false_pass)
    ps = np.sort(p[p > 0])
    w = split.weights
    on = w > 0
    d = (1 - phi) * float((w * ps * (1 - ps)).sum()) / (n - 1)
    return 0.5 * math.sqrt(d * float((1 / w[on]).sum())) if on.any() else 0.0


def independence_calls(run: FixtureRun, rates: Rates) -> dict[int | None, TestResult]:
    """At every position (the bonus included), the emissions in row order are independent:
    no state carried from call to call or row to row (:func:`dispersion_test`). The
    identity rows' worst case assumes exactly this; the message says how much TV an
    under-dispersion the test misses could hide from the identity row."""
    fx = run.fixture
    out = {}
    for k in range(fx.gamma + 1):
        tokens = _emitted_at(run, k)
        r = dispersion_test(tokens, fx.target[k], false_fail_rate=rates.false_fail, false_pass_rate=rates.false_pass)
        if r.n:
            hidden = hidden_tv(r.n, fx.target[k], r.details["detectable_dispersion"], rates, run.seed)
            details = {**r.details, "hidden_tv": hidden,
                       "message": f"{r.details['message']}; what it misses hides "
                                  f"{tv_phrase(hidden, 'at most TV ')} from the identity row"}
            r = TestResult(r.test, r.statistic, r.pvalue, r.n, r.false_fail_rate, r.min_detectable_tv, r.df, details)
        elif tokens.size:  # too few emissions, or too few bands reached, to split: say what resolution needs
            details = {**r.details, "message": f"untested at {tokens.size:,} emissions: {r.details['reason']}"}
            r = TestResult(r.test, r.statistic, r.pvalue, r.n, r.false_fail_rate, r.min_detectable_tv, r.df, details)
        out[k] = r
    return out


def independence_positions(run: FixtureRun, rates: Rates) -> dict[int | None, TestResult]:
    """Given position k is emitted, its token is independent of the token at every j < k."""
    fx = run.fixture
    count = fx.gamma * (fx.gamma + 1) // 2
    rate = rates.false_fail / max(count, 1)
    results = []
    for k in range(1, fx.gamma + 1):
        both = run.tokens[:, k] != PAD
        results.extend(_pairs_tests([(run.tokens[both, j], run.tokens[both, k]) for j in range(k)], rate, rates,
                                    fx.target[k]))
    return {None: combine_bonferroni(results, "independence", rates.false_fail)}


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


def sequence_exactness(run: SequenceRun, rates: Rates) -> dict[int | None, TestResult]:
    """Whole sequences: the joint law of the first L new tokens is the target's (rare ones pooled)."""
    if run.error:
        return {None: failure("sequence-exactness", run, rates, run.error)}
    counts = sequence_counts(run.tokens, run.vocab_size)
    return {None: goodness_of_fit(counts, run.exact, false_fail_rate=rates.false_fail,
                                  false_pass_rate=rates.false_pass)}


def sequence_tokens_per_pass(run: SequenceRun, rates: Rates) -> dict[int | None, TestResult]:
    """The first round emits N tokens with P(N > k) = Σ_paths Π min(p, q) (position-dependent α)."""
    if run.error:
        return {None: failure("sequence-tokens-per-pass", run, rates, run.error)}
    return {None: tokens_per_pass_test(run.first_round_lengths, run.alphas, false_fail_rate=rates.false_fail,
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
    Check("identity", "exactness", identity, lambda f: f.context_free and not f.greedy, _all_positions,
          "tokens at each position (and the bonus) are distributed as p, given the position is emitted: "
          "an instance-optimal identity test (the heaviest token and the light tail on their counts, the rest "
          "by a p^(-2/3)-weighted U-statistic; null simulated from p) whose detectable TV is the worst case "
          "over every alternative with independent rows"),
    Check("tail-collisions", "exactness", tail_collisions,
          lambda f: f.context_free and not f.greedy and f.vocab_size >= TAIL_VOCAB, _all_positions,
          "the rare tokens the chi-square pools collide as often as p says: a bias that alternates among "
          "them escapes the pooled bin and every prefix of a vocabulary order"),
    Check("pit-id", "exactness", _pit("pit_id"), lambda f: f.context_free and not f.greedy, _all_positions,
          "randomized PIT of every emitted token is uniform (vocabulary ordered by id); on heterogeneous "
          "fixtures this is the exactness check itself, so it is not counted twice"),
    Check("pit-ratio", "exactness", _pit("pit_ratio"), lambda f: not f.greedy and f.gamma > 0, _drafted,
          "randomized PIT is uniform with the vocabulary ordered by p/q, where bias concentrates"),
    Check("independence-rows", "exactness", independence_rows, _context_free, _single,
          "at every position (and the bonus), rows do not share random numbers and are not negatively "
          "dependent: every pair of rows of a call (or lags 1 and B/2), the same row of consecutive calls, and "
          "each call's count in a band (two-sided: rows paired at random share draws, stratified rows spread "
          "them); on vocabularies above 4,096 the tokens' probability bands"),
    Check("independence-calls", "exactness", independence_calls, lambda f: f.context_free and not f.greedy,
          _all_positions,
          "at every position (and the bonus) the emissions, in row order, are independent draws: consecutive "
          "blocks split them as chance would (two-sided: a remainder or a herded stream carried from call to call "
          "makes the counts under-dispersed; shared randomness, over-dispersed); the identity rows' worst case "
          "assumes it"),
    Check("independence-positions", "exactness", independence_positions,
          lambda f: f.context_free and f.gamma >= 1, _single,
          "the token at every position is independent of the token at every earlier position"),
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
    Check("sequence-exactness", "exactness", sequence_exactness, _always, _single,
          "the first L generated tokens follow the target model's exact sequence distribution", "sequence"),
    Check("sequence-tokens-per-pass", "optimality", sequence_tokens_per_pass, _always, _single,
          "the first round's tokens per pass follow the law with position-dependent acceptance", "sequence"),
]}


def position_label(check: Check, fixture: PairFixture, position: int | None) -> str:
    if position is None:
        return ""
    if position == fixture.gamma and check.positions(fixture) == _all_positions(fixture):
        return "bonus"
    return f"pos{position}"
