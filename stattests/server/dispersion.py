"""Dispersion of per-request counts: herding spread over all the choices of a request.

A request of n choices, at one position, puts c of them in a band (the heaviest labels of the
position holding about half the pooled draws). Under independence the requests of a prompt
are exchangeable draws, so given the pooled count K of a group (one prompt, requests of n
choices, R of them) the counts are multivariate hypergeometric:

    P(c_1, ..., c_R | K) = Π_r C(n, c_r) / C(nR, K).

The statistic is S = Σ_r c_r²: too large when the choices are herded together (shared
uniforms), too small when they are spread apart (stratified uniforms). Its tails are bounded
by Chernoff's inequality on that exact conditional law,

    P(S ≥ s | K) ≤ min_{θ ≥ 0, t} f_θ(e^t)^R e^{−θ s − t K} / C(nR, K),
    f_θ(x) = Σ_c C(n, c) e^{θ c²} x^c,

(and θ ≤ 0 for the lower tail), so the level holds at any rate, however small, with no
replicates: the bound is conservative, never anticipating. Pair tests see one distance at
a time; a herding whose correlation is −1/(n − 1) between every two choices is below their
reach and plain here.

The figure is named for what it bounds: the smallest intra-request correlation ρ of the band
indicator detected at power ``1 − false_pass_rate``, over-dispersed (beta-binomial counts,
ρ > 0) and under-dispersed (a share of requests with stratified counts, ρ < 0), each power
*calibrated by simulation* of R requests against the critical variance ratios at the
observed K. It bounds those two families, not every dependence: a dependence that leaves
the band's count binomial escapes it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

from specgauge.stattests.core.band_dispersion import critical_sums, log_tail, variance_ratio
from specgauge.stattests.core.statistics import DEFAULT_FALSE_PASS, TestResult

#: What a dispersion figure bounds (the certificate's ``detectable`` column).
FIGURE = ("smallest intra-request correlation |rho| of a band indicator (the heaviest labels, about half the draws) "
          "detected at power 0.999: over-dispersed (beta-binomial counts) and under-dispersed (stratified counts) "
          "requests, power calibrated by simulation; not a TV, and not every dependence")


@dataclass(frozen=True)
class Dispersion:
    """One group's dispersion test (R requests of n choices, K of the nR draws in the band)."""

    statistic: float      # variance ratio: the counts' variance over the binomial one, 1 under independence
    pvalue: float         # two-sided, from the Chernoff bounds (each side at half the rate)
    requests: int
    choices: int
    in_band: int
    critical: tuple[float, float]   # the variance ratios at or below / at or above which it fails
    figure: tuple[float, float]     # smallest rho detected above and below 0 (inf: none)


def over_law(n: int, p: float, rho: float) -> np.ndarray:
    """Beta-binomial counts of mean n p and intra-request correlation ``rho`` > 0."""
    a, b = p * (1 / rho - 1), (1 - p) * (1 / rho - 1)
    return stats.betabinom.pmf(np.arange(n + 1), n, a, b)


def under_law(n: int, p: float, share: float) -> np.ndarray:
    """A ``share`` of requests whose count is stratified (⌊np⌋ or ⌈np⌉, mean n p), the rest binomial."""
    mean = n * p
    low = math.floor(mean)
    stratified = np.zeros(n + 1)
    stratified[low] += 1 - (mean - low)
    if low < n:
        stratified[low + 1] += mean - low
    return share * stratified + (1 - share) * stats.binom.pmf(np.arange(n + 1), n, p)


def under_rho(n: int, p: float, share: float) -> float:
    """The intra-request correlation of :func:`under_law` (negative)."""
    mean = n * p
    f = mean - math.floor(mean)
    var = n * p * (1 - p)
    return -share * (1 - f * (1 - f) / var) / (n - 1)


#: Simulated sets of R requests per alternative and correlation in the figure's search.
POWER_SIMULATIONS = 1_000


def _power(pmf: np.ndarray, n: int, r: int, lo: float, hi: float, rng: np.random.Generator,
           sims: int = POWER_SIMULATIONS) -> float:
    """Simulated rate at which R counts of law ``pmf`` give a variance ratio at or past the critical ones."""
    pmf = np.clip(np.nan_to_num(pmf), 0.0, None)
    c = np.arange(n + 1, dtype=np.float64)
    tally = rng.multinomial(r, pmf / pmf.sum(), size=sims)  # requests per count value: all S needs
    k, s = tally @ c, tally @ (c * c)
    p = k / (n * r)
    var = n * p * (1 - p)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(var > 0, (s / r - (k / r) ** 2) / var, 1.0)
    return float(np.mean((ratio <= lo) | (ratio >= hi)))


@functools.lru_cache(maxsize=4096)
def figures(n: int, r: int, p: float, lo: float, hi: float, *, false_pass_rate: float = DEFAULT_FALSE_PASS,
            steps: int = 7) -> tuple[float, float]:
    """(smallest ρ > 0, smallest |ρ| for ρ < 0) detected at simulated power ``1 − false_pass_rate``
    (bisection to 2⁻⁷ of the range), with ``lo``, ``hi`` the critical variance ratios; inf where
    the strongest alternative of a side is not detected. The simulation is seeded from the
    arguments, so a figure is a function of them (and callers that round them share one)."""
    rng = np.random.default_rng([n, r] + [round(x * 100) % 2 ** 32 for x in (p, lo, hi)])
    power = 1 - false_pass_rate
    out = []
    for law, top in ((lambda x: over_law(n, p, x), 0.99), (lambda x: under_law(n, p, x), 1.0)):
        if _power(law(top), n, r, lo, hi, rng) < power:
            out.append(math.inf)
            continue
        a, b = 0.0, top
        for _ in range(steps):
            mid = 0.5 * (a + b)
            a, b = (a, mid) if _power(law(mid), n, r, lo, hi, rng) >= power else (mid, b)
        out.append(b)
    return out[0], abs(under_rho(n, p, out[1])) if math.isfinite(out[1]) else math.inf


def dispersion(counts: np.ndarray, n: int, rate: float, *, false_pass_rate: float = DEFAULT_FALSE_PASS,
               figure: bool = True) -> Dispersion:
    """Test the band counts ``counts[R]`` of R requests of ``n`` choices each at false-fail ``rate``."""
    counts = np.asarray(counts, np.int64)
    r, k = counts.size, int(counts.sum())
    if r < 2 or n < 2 or k in (0, n * r):
        return Dispersion(1.0, 1.0, r, n, k, (-math.inf, math.inf), (math.inf, math.inf))
    s = float((counts.astype(np.float64) ** 2).sum())
    lo, hi = critical_sums(n, r, k, rate)
    pvalue = min(1.0, 2 * math.exp(min(log_tail(s, n, r, k, True), log_tail(s, n, r, k, False))))
    critical = (variance_ratio(lo, n, r, k), variance_ratio(hi, n, r, k))
    # the figure at the band's mass to 0.05 and the critical ratios widened to a 0.02 grid (a stricter
    # test, so a figure that holds for this one): groups alike share one simulation
    mass = min(max(round(k / (n * r) * 20) / 20, 0.05), 0.95)
    fig = (figures(n, r, mass, math.floor(critical[0] * 50) / 50, math.ceil(critical[1] * 50) / 50,
                   false_pass_rate=false_pass_rate) if figure else (math.inf, math.inf))
    return Dispersion(variance_ratio(s, n, r, k), pvalue, r, n, k, critical, fig)


def band(labels: np.ndarray) -> np.ndarray:
    """Whether each label is in the band: the heaviest labels (by pooled count, ties by label) whose
    share is nearest one half, at least one label and never all. A function of the pooled counts,
    which every permutation of the draws keeps, so the conditional level holds."""
    values, counts = np.unique(labels, return_counts=True)
    if values.size < 2:
        return np.zeros(labels.shape, bool)
    order = np.lexsort((values, -counts))
    cum = np.cumsum(counts[order])[:-1]
    m = int(np.argmin(np.abs(cum - labels.size / 2))) + 1
    return np.isin(labels, values[order[:m]])


def dispersion_test(label: np.ndarray, members: list[np.ndarray], prompt: np.ndarray, false_fail_rate: float, *,
                    false_pass_rate: float = DEFAULT_FALSE_PASS, test: str = "dispersion") -> TestResult:
    """One position's dispersion test over every (prompt, request size) group, Bonferroni.

    ``label[N]``: each sample's label at the position; ``members``: per request size m ≥ 2, the
    sample rows ``[R, m]`` of its requests in choice order; ``prompt[N]``: each sample's prompt.
    Groups too small to detect either side's strongest alternative are left out and counted (their
    figure would be inf, and the row's with it); the row's figure is the worst tested group's larger
    |ρ|; ``details`` carry both sides."""
    groups = []
    for rows in members:
        for p in np.unique(prompt[rows[:, 0]]):
            mine = rows[prompt[rows[:, 0]] == p]
            if mine.shape[0] >= 2:
                groups.append(mine)
    if not groups:
        return TestResult(test, 1.0, 1.0, 0, false_fail_rate, math.inf, 0,
                          {"message": "no prompt with two requests of two choices or more: nothing to test"})
    bands = [band(label[rows].ravel()).reshape(rows.shape).sum(axis=1) for rows in groups]
    # groups too small to test: no alternative of either side detected at power 1 − false_pass_rate, at the
    # rate all the groups would share (a function of each group's size and pooled count only, on which the
    # test conditions, so leaving them out keeps the level); the rest share the rate
    size = false_fail_rate / len(groups)
    small = [not any(map(math.isfinite, dispersion(counts, rows.shape[1], size, false_pass_rate=false_pass_rate).figure))
             for counts, rows in zip(bands, groups)]
    kept = [(counts, rows) for counts, rows, few in zip(bands, groups, small) if not few]
    left = _left_out(groups, small)
    if not kept:
        return TestResult(test, 1.0, 1.0, 0, false_fail_rate, math.inf, 0,
                          {"groups": 0.0, "message": f"no figure: every group is too small to detect any herding or "
                                                     f"spreading at power {1 - false_pass_rate:g} ({left})"})
    each = false_fail_rate / len(kept)
    results = [dispersion(counts, rows.shape[1], each, false_pass_rate=false_pass_rate) for counts, rows in kept]
    worst = min(results, key=lambda d: d.pvalue)
    pvalue = min(1.0, len(results) * worst.pvalue)
    over = max(d.figure[0] for d in results)
    under = max(d.figure[1] for d in results)
    figure = max((x for x in (over, under) if math.isfinite(x)), default=math.inf)  # a side out of reach: see message
    message = (f"{len(results)} groups (prompt, choices a request) tested, each at false-fail {each:.2g}"
               f"{'; ' + left if left else ''}: per-request counts in the band against the binomial (Chernoff bounds "
               f"on the exact conditional law given the pooled count); worst variance ratio {worst.statistic:.3g} "
               f"(fails at or below {worst.critical[0]:.3g} or at or above {worst.critical[1]:.3g}); detects a "
               f"correlation between choices of rho >= {over:.3g} (herded) or rho <= -{under:.3g} (spread) with power "
               f"{1 - false_pass_rate:g}")
    n = int(sum(d.requests * d.choices for d in results))
    return TestResult(test, worst.statistic, pvalue, n, false_fail_rate, figure, 0,
                      {"rho_over": over, "rho_under": under, "groups": float(len(results)),
                       "left_out": float(sum(small)), "message": message})


def _left_out(groups: list[np.ndarray], small: list[bool]) -> str:
    """The groups left out as too small, counted with their requests and choices, in words."""
    few = [rows for rows, s in zip(groups, small) if s]
    if not few:
        return ""
    sizes = ", ".join(f"{rows.shape[0]} of {rows.shape[1]}" for rows in few[:4]) + (" ..." if len(few) > 4 else "")
    return (f"{len(few)} groups too small to detect any herding or spreading left out untested "
            f"({sum(rows.size for rows in few)} draws; requests of choices: {sizes})")
