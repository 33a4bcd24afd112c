"""Hypothesis tests with declared error rates, in the manner of TFP's ``statistical_testing``.

Every test returns a frozen :class:`TestResult` that carries, besides the statistic and
the p-value, the smallest total-variation (TV) discrepancy it detects with probability
``1 - false_pass_rate`` at its sample size. Each has a ``min_num_samples_for_*``
companion that inverts that relation: sample sizes grow as O(1/tv²) and as
O(log(1/false_fail_rate)).

Public functions validate their input and raise :class:`InvalidDistributionError`
with the offending value; the private helpers behind them assume clean arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Mapping

import numpy as np
from scipy import optimize, stats

from specgauge.errors import InvalidDistributionError
from specgauge.laws import expected_tokens_per_pass, tokens_per_pass_pmf  # noqa: F401  (re-exported)

DEFAULT_FALSE_FAIL = 1e-6
DEFAULT_FALSE_PASS = 1e-3
MIN_EXPECTED = 10.0


@dataclass(frozen=True)
class TestResult:
    """The outcome of one assertion: fails only on evidence at ``false_fail_rate``."""

    __test__ = False  # not a pytest test class

    test: str
    statistic: float
    pvalue: float
    n: int
    false_fail_rate: float
    min_detectable_tv: float
    df: float | None = None
    details: Mapping[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return bool(self.pvalue >= self.false_fail_rate)

    def describe(self) -> str:
        verdict = "pass" if self.passed else "FAIL"
        return (
            f"{self.test}: {verdict} (statistic {self.statistic:.4g}, p-value {self.pvalue:.3g} "
            f"vs false-fail rate {self.false_fail_rate:.1g}, n {self.n}, "
            f"detects TV >= {self.min_detectable_tv:.3g})"
        )


# ---------------------------------------------------------------- validation


def validate_probs(probs: np.ndarray, name: str = "probs", atol: float = 1e-6) -> np.ndarray:
    """Return ``probs`` as float64 after checking it is a distribution along the last axis."""
    arr = np.asarray(probs, dtype=np.float64)
    if arr.size == 0:
        raise InvalidDistributionError(f"{name} is empty")
    if not np.isfinite(arr).all():
        raise InvalidDistributionError(f"{name} contains NaN or infinity")
    if (arr < 0).any():
        raise InvalidDistributionError(f"{name} has a negative entry ({arr.min():.3g})")
    sums = np.atleast_1d(arr.sum(axis=-1))
    worst = int(np.argmax(np.abs(sums - 1.0)))
    if abs(sums[worst] - 1.0) > atol:
        raise InvalidDistributionError(
            f"{name} is not normalised: a row sums to {sums[worst]:.9g} (tolerance {atol:g})")
    return arr


def _validate_rates(false_fail_rate: float, false_pass_rate: float) -> None:
    for label, rate in (("false_fail_rate", false_fail_rate), ("false_pass_rate", false_pass_rate)):
        if not 0.0 < rate < 1.0:
            raise InvalidDistributionError(f"{label} must lie in (0, 1), got {rate!r}")


def itemwise_error_rate(total_rate: float, num_tests: int) -> float:
    """The per-assertion false-fail rate that keeps ``num_tests`` assertions' family-wise
    rate at ``total_rate`` whatever their dependence (Bonferroni, as TFP's
    ``_itemwise_error_rate``)."""
    if not 0.0 < total_rate < 1.0:
        raise InvalidDistributionError(f"total_rate must lie in (0, 1), got {total_rate!r}")
    return total_rate / max(int(num_tests), 1)


def total_variation(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """TV(p, q) = ½ Σ |p − q| along the last axis."""
    return 0.5 * np.abs(np.asarray(p) - np.asarray(q)).sum(axis=-1)


# ---------------------------------------------------------------- chi-square power


def multinomial_kl_tail(x: float, categories: int) -> float:
    """A proven bound on P(n KL(p̂ ‖ p) ≥ x) for the empirical law p̂ of n iid draws from any
    p on ``categories`` outcomes: e^{−x} (e x / s)^s with s = categories − 1, for x > s (1
    below). Agrawal (2020) shows E exp(λ n KL) ≤ (1 − λ)^{−s} for λ ∈ [0, 1), the moment
    generating function of a gamma law of shape s; Chernoff at λ = 1 − s/x gives the bound."""
    s = categories - 1
    if s <= 0:
        return 0.0 if x > 0 else 1.0
    if x <= s:
        return 1.0
    return float(math.exp(min(0.0, -x + s + s * math.log(x / s))))


@lru_cache(maxsize=4096)
def _kl_critical(df: int, false_fail_rate: float) -> float:
    """The G = 2 n KL at which :func:`multinomial_kl_tail` (df + 1 categories) falls to the rate."""
    target = math.log(false_fail_rate)
    hi = 2.0 * df + 2.0
    while -hi + df + df * math.log(hi / df) > target:
        hi *= 2.0
    x = optimize.brentq(lambda v: -v + df + df * math.log(v / df) - target, float(df), hi, xtol=1e-10, rtol=1e-12)
    return 2.0 * float(x)


@lru_cache(maxsize=4096)
def _noncentrality_for_power(df: int, false_fail_rate: float, false_pass_rate: float, proven: bool = False,
                             shape: int = 0) -> float:
    """The non-centrality λ at which a chi-square test on ``df`` degrees of freedom,
    rejecting at ``false_fail_rate``, rejects with probability ``1 - false_pass_rate``;
    ``proven``: the rejection also needs G past the proven bound's critical value (of a
    gamma law of shape ``shape``, by default ``df``)."""
    critical = stats.chi2.isf(false_fail_rate, df)
    if proven:
        critical = max(critical, _kl_critical(shape or df, false_fail_rate))

    def shortfall(lam: float) -> float:
        return stats.ncx2.sf(critical, df, lam) - (1.0 - false_pass_rate)

    hi = max(1.0, critical)
    while shortfall(hi) < 0:
        hi *= 2.0
    return float(optimize.brentq(shortfall, 0.0, hi, xtol=1e-6))


def _chi2_min_tv(n: int, df: int, false_fail_rate: float, false_pass_rate: float, proven: bool = False,
                 shape: int = 0) -> float:
    """Smallest TV a chi-square test detects: λ = n Σ δ²/p ≥ 4 n TV² (Cauchy–Schwarz)."""
    if n <= 0:
        return math.inf
    if df <= 0:
        # Nothing left to compare but impossible categories: one hit is enough.
        return _occurrence_min_tv(n, false_pass_rate)
    return math.sqrt(_noncentrality_for_power(df, false_fail_rate, false_pass_rate, proven, shape) / (4.0 * n))


def _proven_gof(false_fail_rate: float) -> bool:
    """Goodness of fit reads its p-value from the proven bound wherever a verdict can."""
    return false_fail_rate <= KS_PROVEN_BELOW


def _occurrence_min_tv(n: int, false_pass_rate: float) -> float:
    """Mass ε on impossible outcomes is seen at least once in n draws w.p. 1 − (1 − ε)^n."""
    return float(-math.expm1(math.log(false_pass_rate) / n)) if n > 0 else math.inf


# ---------------------------------------------------------------- goodness of fit


def _pool(expected: np.ndarray, min_expected: float) -> np.ndarray:
    """Category → bin map: categories expected fewer than ``min_expected`` times share one bin."""
    rare = expected < min_expected
    bins = np.cumsum(~rare) - 1
    n_common = int((~rare).sum())
    bins[rare] = n_common
    if rare.any() and expected[rare].sum() < min_expected and n_common > 0:
        smallest = int(np.argmin(np.where(rare, np.inf, expected)))
        bins[rare] = bins[smallest]
    return bins


def goodness_of_fit(
    counts: np.ndarray,
    probs: np.ndarray,
    *,
    false_fail_rate: float = DEFAULT_FALSE_FAIL,
    false_pass_rate: float = DEFAULT_FALSE_PASS,
    min_expected: float = MIN_EXPECTED,
) -> TestResult:
    """Pearson chi-square of observed ``counts`` against ``probs``, rare categories pooled.

    Wherever a verdict can read the p-value (≤ :data:`KS_PROVEN_BELOW`) it is never below
    the proven bound on the likelihood-ratio statistic G = 2 n KL over the pooled bins
    (:func:`multinomial_kl_tail`), so at those rates the false-fail rate is proven for iid
    draws; above, the chi-square law's. Any count on a category of probability zero is an
    immediate failure (p-value 0).
    ``min_detectable_tv`` is the TV between distributions over the pooled bins that the
    test detects with power ``1 - false_pass_rate``; a discrepancy that only moves mass
    inside the pooled bin is invisible to it (the PIT test covers that case).
    """
    _validate_rates(false_fail_rate, false_pass_rate)
    probs = validate_probs(probs)
    counts = np.asarray(counts)
    if counts.shape != probs.shape:
        raise InvalidDistributionError(f"counts has shape {counts.shape}, probs {probs.shape}")
    if (counts < 0).any():
        raise InvalidDistributionError("counts has a negative entry")
    return _goodness_of_fit(counts.astype(np.float64), probs, false_fail_rate, false_pass_rate, min_expected)


def _goodness_of_fit(counts, probs, false_fail_rate, false_pass_rate, min_expected, iid: bool = True) -> TestResult:
    """``iid``: the counts are a multinomial sample (the proven bound applies); False for
    independent draws from laws that differ (their rate stays the chi-square's, estimated)."""
    n = int(round(counts.sum()))
    impossible = probs <= 0.0
    hits = float(counts[impossible].sum())
    measured_tv = float(total_variation(counts / max(n, 1), probs))
    if n == 0:  # nothing drawn: the row cannot fail, whatever the law
        return TestResult("goodness_of_fit", 0.0, 1.0, 0, false_fail_rate, math.inf, 0,
                          {"measured_tv": 0.0, "false_fail_basis": "exact"})
    possible = ~impossible
    expected = n * probs[possible]
    bins = _pool(expected, min_expected)
    n_bins = int(bins.max()) + 1
    obs = np.bincount(bins, weights=counts[possible], minlength=n_bins)
    exp = np.bincount(bins, weights=expected, minlength=n_bins)
    df = n_bins - 1
    proven = iid and _proven_gof(false_fail_rate)
    statistic, pvalue, g = 0.0, 1.0, 0.0
    if df > 0:
        result = stats.chisquare(obs, exp)
        statistic, pvalue = float(result.statistic), float(result.pvalue)
        seen = obs > 0  # G = 2 Σ o log(o/e), the likelihood-ratio statistic the proven tail bounds
        g = 2.0 * float((obs[seen] * np.log(obs[seen] / exp[seen])).sum())
        if proven and pvalue <= KS_PROVEN_BELOW:  # never below the chi-square law's
            pvalue = max(pvalue, multinomial_kl_tail(g / 2.0, n_bins))
    if hits > 0:
        statistic, pvalue = math.inf, 0.0
    details = {"measured_tv": measured_tv, "bins": float(n_bins), "impossible_hits": hits,
               "pooled_mass": float(probs[possible][bins == n_bins - 1].sum()) if n_bins < possible.sum() else 0.0,
               "g_statistic": g, "false_fail_basis": "proven" if proven else "estimated"}
    return TestResult("goodness_of_fit", statistic, pvalue, n, false_fail_rate,
                      _chi2_min_tv(n, df, false_fail_rate, false_pass_rate, proven), df, details)


def min_discrepancy_of_goodness_of_fit(
    n: int, probs: np.ndarray, *, false_fail_rate: float = DEFAULT_FALSE_FAIL,
    false_pass_rate: float = DEFAULT_FALSE_PASS, min_expected: float = MIN_EXPECTED, proven: bool | None = None,
) -> float:
    """Smallest TV :func:`goodness_of_fit` detects from ``n`` draws of ``probs`` (``proven``:
    False for a plain chi-square test; by default, as :func:`goodness_of_fit` at this rate)."""
    probs = validate_probs(probs)
    expected = n * probs[probs > 0]
    df = int(_pool(expected, min_expected).max()) if expected.size else 0
    return _chi2_min_tv(n, df, false_fail_rate, false_pass_rate,
                        _proven_gof(false_fail_rate) if proven is None else proven)


def min_num_samples_for_goodness_of_fit(
    tv: float, probs: np.ndarray, *, false_fail_rate: float = DEFAULT_FALSE_FAIL,
    false_pass_rate: float = DEFAULT_FALSE_PASS, min_expected: float = MIN_EXPECTED,
) -> int:
    """Draws :func:`goodness_of_fit` needs to detect a discrepancy of ``tv``: O(df / tv²)."""
    if not tv > 0:
        raise InvalidDistributionError(f"tv must be positive, got {tv!r}")
    probs = validate_probs(probs)
    positive = probs[probs > 0]
    df = max(int(positive.size) - 1, 0)
    n = 1
    for _ in range(8):  # pooling depends on n: iterate to a fixed point
        if df == 0:
            return max(n, math.ceil(math.log(false_pass_rate) / math.log1p(-min(tv, 1 - 1e-12))))
        n_new = math.ceil(_noncentrality_for_power(df, false_fail_rate, false_pass_rate,
                                                   _proven_gof(false_fail_rate)) / (4 * tv * tv))
        df_new = int(_pool(n_new * positive, min_expected).max())
        if n_new == n and df_new == df:
            break
        n, df = n_new, df_new
    return n


MIN_COLLISIONS = 10.0  # a band of rare tokens is tested when it expects this many equal pairs
MAX_SHARE = 0.02  # ... and no token holds more than this share of its mass (C is then a sum of many small parts)


def _collisions(counts: np.ndarray, probs: np.ndarray) -> tuple[float, float, float]:
    """Ordered pairs of equal draws C = Σ c(c − 1), its mean and variance given m = Σ c draws
    from probs renormalised to r: m₂ Σr² and m₄ (Σr²)² + 4 m₃ Σr³ + 2 m₂ Σr² − (m₂ Σr²)²."""
    m = float(counts.sum())
    r = probs / probs.sum()
    s2, s3 = float((r * r).sum()), float((r ** 3).sum())
    m2, m3, m4 = m * (m - 1), m * (m - 1) * (m - 2), m * (m - 1) * (m - 2) * (m - 3)
    mean = m2 * s2
    return float((counts * (counts - 1)).sum()), mean, max(m4 * s2 * s2 + 4 * m3 * s3 + 2 * m2 * s2 - mean * mean, 1e-300)


def _gamma_two_sided(x: float, mean: float, variance: float) -> float:
    """Two-sided p-value of x under the gamma law with this mean and variance: skewed
    right like a count of collisions, and heavier-tailed than the Poisson, so conservative."""
    shape, scale = mean * mean / variance, variance / mean
    return float(min(1.0, 2 * min(stats.gamma.cdf(x, shape, scale=scale), stats.gamma.sf(x, shape, scale=scale))))


#: Tilts λ of the collision test's exponential martingales, each sign (any λ gives a valid bound;
#: the rate is split over all of them).
TILTS = np.geomspace(1e-3, 3.0, 30)


def _collision_martingale(counts: np.ndarray, probs: np.ndarray, rng: np.random.Generator) -> tuple[float, float, float, float]:
    """One band's collision martingale: (M, Σ μ_j, Σ of the conditional variances, p-value).

    The band's m draws in a random order (a uniform shuffle of the counts, so under p an iid
    sequence from r, the band's law renormalised): D_j = earlier draws equal to the j-th, so
    Σ D_j = C/2, the unordered equal pairs. Given the first j − 1 draws (counts c_t), D_j is
    c_T with T ~ r: mean μ_j = Σ_t c_t r_t, cumulant ψ_j(λ) = log Σ_t r_t e^{λ c_t} − λ μ_j,
    both known before the draw. So exp(λ M_j − Σ_{i≤j} ψ_i(λ)), M = Σ (D_j − μ_j), is a
    non-negative martingale of mean 1 for every λ, and Markov's inequality gives
    P(λ M − Σ ψ(λ) ≥ log(2 |TILTS| / α)) ≤ α / (2 |TILTS|) for each λ = ±TILTS: the p-value
    min_λ 2 |TILTS| e^{−(λ M − Σ ψ(λ))} is valid at every rate, no asymptotics, no truncation."""
    r = probs / probs.sum()
    order = rng.permutation(np.repeat(np.arange(counts.size), counts.astype(np.int64)))
    first = np.argsort(order, kind="stable")  # draws grouped by token, in their order
    group = order[first]
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    seen = np.empty(order.size, dtype=np.int64)  # D_j: the draw's earlier copies
    seen[first] = np.arange(order.size) - np.repeat(starts, np.diff(np.r_[starts, order.size]))
    rt = r[order]
    mu = np.cumsum(rt) - rt  # Σ_t c_t r_t before the draw
    grow = (2 * seen + 1) * rt
    square = np.cumsum(grow) - grow  # Σ_t c_t² r_t before it
    martingale = float((seen - mu).sum())
    lam = np.r_[TILTS, -TILTS][:, None]
    # Σ_t r_t e^{λ c_t} before each draw: 1 at the start, each draw adding r_T e^{λ D}(e^λ − 1)
    step = rt * np.exp(lam * seen) * np.expm1(lam)
    mgf = 1.0 + np.cumsum(step, axis=1) - step
    log_martingale = lam[:, 0] * martingale - (np.log(mgf).sum(axis=1) - lam[:, 0] * mu.sum())
    pvalue = float(min(1.0, lam.size * math.exp(-float(log_martingale.max()))))
    return martingale, float(mu.sum()), float(np.maximum(square - mu * mu, 0.0).sum()), pvalue


def tail_collision_test(
    counts: np.ndarray, probs: np.ndarray, *, false_fail_rate: float = DEFAULT_FALSE_FAIL,
    false_pass_rate: float = DEFAULT_FALSE_PASS, min_expected: float = MIN_EXPECTED, seed: int = 0,
) -> TestResult:
    """Collisions among the rare categories that :func:`goodness_of_fit` pools into one bin.

    The rare categories (expected fewer than ``min_expected`` times) are split into decade
    bands of expected count; a band is tested where its m draws expect at least
    2 MIN_COLLISIONS equal ordered pairs and no token holds more than MAX_SHARE of it. A
    bias that moves mass between rare tokens of similar probability (the pooled bin cannot
    see it, nor any prefix of a vocabulary order when it alternates) changes Σr²: merging
    neighbours pairwise doubles it. The band's draws, shuffled (``seed`` fixes the order),
    count their equal pairs one draw at a time, and the count's exponential martingales
    (:func:`_collision_martingale`) bound both tails at any rate: the false-fail rate is
    proven, the bands sharing it (Bonferroni). This is not a TV bound (a bias that keeps
    Σr² escapes it), so ``min_detectable_tv`` is NaN and
    ``details["detectable_relative_shift"]`` is the relative change of Σr² the least
    sensitive tested band detects (past a Bennett critical value, with the normal power
    step: an estimate).
    """
    _validate_rates(false_fail_rate, false_pass_rate)
    probs = validate_probs(probs)
    counts = np.asarray(counts, dtype=np.float64)
    n = float(counts.sum())
    expected = n * probs
    tail = (probs > 0) & (expected < min_expected)
    band = np.floor(np.log10(np.where(tail, expected, min_expected) / min_expected)).astype(int)
    rng = np.random.default_rng([seed, 7919])
    chosen = []
    for b in np.unique(band[tail]):
        inside = tail & (band == b)
        if probs[inside].max() <= MAX_SHARE * probs[inside].sum() and counts[inside].sum() >= 2:
            _, mean, _ = _collisions(counts[inside], probs[inside])
            if mean >= 2 * MIN_COLLISIONS:
                chosen.append(inside)
    each = false_fail_rate / max(len(chosen), 1)
    bands = [(*_collision_martingale(counts[inside], probs[inside], rng), inside) for inside in chosen]
    m = int(counts[tail].sum())
    if not bands:  # untested (n = 0): say why, the position itself may well be reached
        reason = (f"untested at {int(n):,} draws: no band of rare tokens (expected fewer than {min_expected:g} "
                  f"times each, none holding more than {MAX_SHARE:.0%} of its band) expects "
                  f"{2 * MIN_COLLISIONS:g} equal pairs; {m:,} draws fell on rare tokens")
        if not tail.any():
            reason = f"untested at {int(n):,} draws: no token is rare at this size (each expected {min_expected:g}+ times)"
        return TestResult("tail_collisions", 0.0, 1.0, 0, false_fail_rate, math.nan, None,
                          {"message": reason, "reason": reason, "false_fail_basis": "exact"})
    pvalues = [band_[3] for band_ in bands]
    worst = int(np.argmin(pvalues))
    z_pass = stats.norm.isf(false_pass_rate)
    log_rate = math.log(2 * TILTS.size / each)
    shifts = []
    for *_, inside in bands:  # the mean shift (C/2) × δ past the critical value (Bennett's, increments near
        r = probs[inside] / probs[inside].sum()  # Poisson: range 1), with the normal power step: an estimate
        m = float(counts[inside].sum())
        half_pairs = m * (m - 1) / 2 * float((r * r).sum())
        v = half_pairs * (1.0 - float((r * r).sum()))
        critical = log_rate / 3 + math.sqrt((log_rate / 3) ** 2 + 2 * v * log_rate)
        shifts.append((critical + z_pass * math.sqrt(v)) / max(half_pairs, 1e-300))
    martingale, compensator, variance = bands[worst][:3]
    details = {"observed_collisions": compensator + martingale, "expected_collisions": compensator,
               "tail_draws": float(m), "bands": float(len(bands)), "detectable_relative_shift": max(shifts),
               "false_fail_basis": "proven"}
    return TestResult("tail_collisions", martingale / math.sqrt(max(variance, 1e-300)),
                      min(1.0, len(bands) * pvalues[worst]), m, false_fail_rate, math.nan, None, details)


# ---------------------------------------------------------------- KS and the randomized PIT


def pit_values(
    tokens: np.ndarray,
    probs: np.ndarray,
    uniforms: np.ndarray,
    sort_key: np.ndarray | None = None,
) -> np.ndarray:
    """Randomized probability integral transform of categorical draws.

    ``u = F(x⁻) + v · p(x)`` with ``v ~ U(0, 1)``: Uniform(0, 1) exactly when x ~ probs,
    so rows with different distributions can be pooled into one KS test. The vocabulary
    is ordered by ``sort_key`` (ties by id) when given, by id otherwise.
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    rows = np.arange(tokens.shape[0])
    p_x = probs[rows, tokens]
    ids = np.arange(probs.shape[1])[None, :]
    if sort_key is None:
        before = ids < tokens[:, None]
    else:
        key_x = sort_key[rows, tokens][:, None]
        before = (sort_key < key_x) | ((sort_key == key_x) & (ids < tokens[:, None]))
    lower = np.where(before, probs, 0.0).sum(axis=1)
    return np.clip(lower + uniforms * p_x, 0.0, 1.0)


def _dkw_massart(n: int, rate: float) -> float:
    """The d with 2 exp(−2 n d²) = rate: Massart's bound puts P(D_n > d) at most there."""
    return math.sqrt(math.log(2.0 / rate) / (2.0 * n))


# scipy's kolmogni clamps √n·d at √18, where the Kolmogorov tail is 2e^{-36} ≈ 4.6e-16: below
# that rate ``kstwo.isf`` returns a quantile whose tail is several times the rate asked, and
# near it whether its root finder brackets the quantile depends on the last bits of floating
# point (it raises on some processors at 1.5e-15, not on others). Rates under this edge take
# Massart's bound instead.
KOLMOGOROV_ISF_EDGE = 1e-13


@lru_cache(maxsize=4096)
def kolmogorov_critical(n: int, false_fail_rate: float) -> float:
    """A d with P(D_n > d) ≤ ``false_fail_rate`` for the two-sided KS statistic of ``n`` values.

    scipy's exact quantile (``kstwo.isf``) from the default rate down to
    :data:`KOLMOGOROV_ISF_EDGE`; below it, or wherever scipy cannot invert, Massart's DKW
    bound 2 e^{−2 n d²} = rate, which holds for every n (Massart 1990) and is within 0.1 % of
    the exact quantile at such rates for n ≥ 1,000 (the tail is 2 e^{−2λ²} to first order).
    So the test's false-fail rate is never above the rate asked, on every processor.
    """
    if n <= 0:
        raise InvalidDistributionError(f"n must be positive, got {n!r}")
    bound = min(1.0, _dkw_massart(n, false_fail_rate))
    if false_fail_rate < KOLMOGOROV_ISF_EDGE:
        return bound
    with np.errstate(all="ignore"):
        try:
            critical = float(stats.kstwo.isf(false_fail_rate, n))
        except (ValueError, RuntimeError, ArithmeticError):
            return bound
    return critical if 0.0 < critical <= bound else bound


def pearson3_isf(rate: float, skew: float, loc: float, scale: float) -> float:
    """Pearson III upper quantile, exact to the smallest rates.

    scipy's ``pearson3.isf`` goes through 1 − rate, so it loses digits below about 1e-12
    (at 1.5e-15 its quantile's tail is above the rate) and returns inf below 1e-17. The
    law is a shifted, scaled gamma (reflected for negative skew), whose own ``isf`` and
    ``ppf`` are accurate there.
    """
    if abs(skew) < 1e-8:
        return float(loc + scale * stats.norm.isf(rate))
    shape, gamma_scale = 4.0 / skew**2, scale * abs(skew) / 2.0
    if skew > 0:
        return float(loc - 2.0 * scale / skew + stats.gamma.isf(rate, shape, scale=gamma_scale))
    return float(loc - 2.0 * scale / skew - stats.gamma.ppf(rate, shape, scale=gamma_scale))


#: At false-fail rates up to this, the KS p-value is Massart's bound (proven); above it,
#: scipy's (exact or asymptotic Kolmogorov law), which no verdict at these rates reads.
KS_PROVEN_BELOW = 1e-3


def _ks_min_sup(n: int, false_fail_rate: float, false_pass_rate: float) -> float:
    """Smallest sup|F − U| the KS test detects: its critical value plus the DKW band of F_n."""
    if n <= 0:
        return math.inf
    critical = _dkw_massart(n, false_fail_rate) if false_fail_rate <= KS_PROVEN_BELOW else \
        kolmogorov_critical(n, false_fail_rate)
    return min(1.0, critical + _dkw_massart(n, false_pass_rate))


def _ks_statistic(values: np.ndarray) -> float:
    """sup |F_n − u| against Uniform(0, 1), as scipy's ``kstest`` computes it."""
    u = np.sort(np.clip(values, 0.0, 1.0))
    n = u.size
    plus = (np.arange(1.0, n + 1) / n - u).max()
    minus = (u - np.arange(0.0, n) / n).max()
    return float(max(plus, minus))


def ks_uniformity(
    values: np.ndarray, *, false_fail_rate: float = DEFAULT_FALSE_FAIL,
    false_pass_rate: float = DEFAULT_FALSE_PASS, test: str = "ks_uniformity",
) -> TestResult:
    """Kolmogorov–Smirnov test that ``values`` are Uniform(0, 1), at a proven false-fail rate.

    Wherever the p-value could decide a verdict (≤ :data:`KS_PROVEN_BELOW`) it is Massart's
    DKW bound 2 e^{−2 n D²}, which holds for every n (Massart 1990); above, scipy's.

    Used on PIT values (then ``min_detectable_tv`` is the TV of a discrepancy that the
    vocabulary order puts in one prefix set, as bias ordered by p/q does) and on p-values
    of independent runs (the suite's second-level check of its own calibration).
    """
    _validate_rates(false_fail_rate, false_pass_rate)
    values = np.asarray(values, dtype=np.float64)
    if not np.isfinite(values).all() or (values < 0).any() or (values > 1).any():
        raise InvalidDistributionError("values for a uniformity test must lie in [0, 1]")
    n = values.size
    if n == 0:
        return TestResult(test, 0.0, 1.0, 0, false_fail_rate, math.inf)
    statistic = _ks_statistic(values)
    massart = min(1.0, 2.0 * math.exp(-2.0 * n * statistic ** 2))
    if massart <= KS_PROVEN_BELOW:  # the exact tail lies below Massart's bound: the p-value is the bound
        pvalue = massart
    else:
        pvalue = float(np.clip(stats.kstwo.sf(statistic, n), 0.0, 1.0))  # scipy's kstest: its exact law
        if pvalue <= KS_PROVEN_BELOW:  # Massart (1990): P(D_n ≥ d) ≤ 2 e^{−2 n d²}, never below the exact tail
            pvalue = max(pvalue, massart)
    basis = "proven" if false_fail_rate <= KS_PROVEN_BELOW else "estimated"
    return TestResult(test, statistic, pvalue, n, false_fail_rate,
                      _ks_min_sup(n, false_fail_rate, false_pass_rate), None, {"false_fail_basis": basis})


def min_discrepancy_of_ks_uniformity(n: int, *, false_fail_rate: float = DEFAULT_FALSE_FAIL,
                                     false_pass_rate: float = DEFAULT_FALSE_PASS) -> float:
    """Smallest sup-CDF discrepancy :func:`ks_uniformity` detects from ``n`` values: O(1/√n)."""
    return _ks_min_sup(n, false_fail_rate, false_pass_rate)


def min_num_samples_for_ks_uniformity(tv: float, *, false_fail_rate: float = DEFAULT_FALSE_FAIL,
                                      false_pass_rate: float = DEFAULT_FALSE_PASS) -> int:
    """Values :func:`ks_uniformity` needs to detect ``tv``: O(log(1/false_fail_rate) / tv²)."""
    if not tv > 0:
        raise InvalidDistributionError(f"tv must be positive, got {tv!r}")
    root = math.sqrt(math.log(2.0 / false_fail_rate) / 2.0) + math.sqrt(math.log(2.0 / false_pass_rate) / 2.0)
    n = math.ceil((root / tv) ** 2)
    while n > 1 and _ks_min_sup(n - 1, false_fail_rate, false_pass_rate) <= tv:  # DKW is loose: tighten
        n = max(1, int(n * 0.95))
    while _ks_min_sup(n, false_fail_rate, false_pass_rate) > tv:
        n = math.ceil(n * 1.01) + 1
    return n


# ---------------------------------------------------------------- acceptance rate


def acceptance_rate_test(
    accepted: np.ndarray, expected: np.ndarray | float, *,
    false_fail_rate: float = DEFAULT_FALSE_FAIL, false_pass_rate: float = DEFAULT_FALSE_PASS,
) -> TestResult:
    """Two-sided test that Bernoulli trials ``accepted`` succeed with probabilities ``expected``.

    One common probability (α = 1 − TV(p, q)): the exact binomial test. Trials with
    their own probabilities (heterogeneous contexts): the Poisson-binomial sum, its p-value
    Bernstein's bound 2 exp(−t² / (2 (v + t/3))) wherever a verdict can read it (proven). ``min_detectable_tv`` is the shift of the acceptance rate detected with power
    ``1 - false_pass_rate``; the rate moves one for one with TV.
    """
    _validate_rates(false_fail_rate, false_pass_rate)
    accepted = np.asarray(accepted, dtype=bool).ravel()
    expected_arr = np.broadcast_to(np.asarray(expected, dtype=np.float64), accepted.shape)
    if not np.isfinite(expected_arr).all() or (expected_arr < -1e-12).any() or (expected_arr > 1 + 1e-12).any():
        raise InvalidDistributionError("expected acceptance probabilities must lie in [0, 1]")
    expected_arr = np.clip(expected_arr, 0.0, 1.0)
    n = accepted.size
    successes = int(accepted.sum())
    if n == 0:
        return TestResult("acceptance_rate", 0.0, 1.0, 0, false_fail_rate, math.inf)
    mean = float(expected_arr.sum())
    variance = float((expected_arr * (1 - expected_arr)).sum())
    rate = mean / n
    details = {"observed_rate": successes / n, "expected_rate": rate}
    impossible = int(accepted[expected_arr == 0.0].sum()) + int((~accepted)[expected_arr == 1.0].sum())
    if impossible:
        return TestResult("acceptance_rate", math.inf, 0.0, n, false_fail_rate, 0.0, None, details)
    if variance <= 0.0:  # every trial certain, and none went the impossible way
        pvalue, statistic = 1.0, 0.0
    elif np.ptp(expected_arr) < 1e-12:
        pvalue = float(stats.binomtest(successes, n, rate).pvalue) if 0 < rate < 1 else 1.0
        statistic = float(successes)
    else:  # Poisson-binomial: normal where no verdict reads it, Bernstein's bound where one can
        statistic = (successes - mean) / math.sqrt(variance)
        pvalue = float(2 * stats.norm.sf(abs(statistic)))
        if pvalue <= KS_PROVEN_BELOW:
            t = abs(successes - mean)
            pvalue = max(pvalue, min(1.0, 2 * math.exp(-t * t / (2 * (variance + t / 3)))))
        details["false_fail_basis"] = "proven" if false_fail_rate <= KS_PROVEN_BELOW else "estimated"
    if variance > 0 and "false_fail_basis" in details:  # the shift past Bernstein's critical value
        log_rate = math.log(2 / false_fail_rate)
        critical = log_rate / 3 + math.sqrt((log_rate / 3) ** 2 + 2 * variance * log_rate)
        min_tv = (critical + stats.norm.isf(false_pass_rate) * math.sqrt(variance)) / n
    elif variance > 0:
        z = stats.norm.isf(false_fail_rate / 2) + stats.norm.isf(false_pass_rate)
        min_tv = z * math.sqrt(variance) / n
    else:
        min_tv = _occurrence_min_tv(n, false_pass_rate)
    return TestResult("acceptance_rate", statistic, pvalue, n, false_fail_rate, min_tv, None, details)


def min_num_samples_for_acceptance_rate_test(tv: float, alpha: float = 0.5, *,
                                             false_fail_rate: float = DEFAULT_FALSE_FAIL,
                                             false_pass_rate: float = DEFAULT_FALSE_PASS) -> int:
    """Trials needed to detect a shift ``tv`` of an acceptance rate near ``alpha``: O(α(1−α)/tv²)."""
    z = stats.norm.isf(false_fail_rate / 2) + stats.norm.isf(false_pass_rate)
    return max(1, math.ceil((z / tv) ** 2 * max(alpha * (1 - alpha), 1e-12)))


# ---------------------------------------------------------------- tokens per pass


def tokens_per_pass_test(
    lengths: np.ndarray, alphas: np.ndarray, *,
    false_fail_rate: float = DEFAULT_FALSE_FAIL, false_pass_rate: float = DEFAULT_FALSE_PASS,
) -> TestResult:
    """Goodness of fit of tokens per pass (1 … γ+1) to the truncated-geometric law."""
    alphas = np.atleast_2d(np.asarray(alphas, dtype=np.float64))
    gamma = alphas.shape[1]
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.size and (lengths.min() < 1 or lengths.max() > gamma + 1):
        raise InvalidDistributionError(f"tokens per pass must lie in 1..{gamma + 1}")
    counts = np.bincount(lengths - 1, minlength=gamma + 1)
    pmf = tokens_per_pass_pmf(alphas)
    iid = alphas.shape[0] == 1 or bool((np.ptp(alphas, axis=0) < 1e-12).all())
    result = _goodness_of_fit(counts.astype(float), pmf / pmf.sum(), false_fail_rate, false_pass_rate, MIN_EXPECTED, iid)
    pvalue, detectable, details = result.pvalue, result.min_detectable_tv, dict(result.details)
    if not iid and lengths.size == alphas.shape[0]:  # each row its own law (one pass a row)
        reach = np.concatenate([np.ones((alphas.shape[0], 1)), np.cumprod(alphas, axis=1)], axis=1)
        own = reach * np.concatenate([1.0 - alphas, np.ones((alphas.shape[0], 1))], axis=1)  # [rows, γ+1]
        expected, variance = own.sum(axis=0), (own * (1.0 - own)).sum(axis=0)
        if (variance <= 1e-12).all():  # every row's length certain: the counts are too, no randomness
            pvalue = 1.0 if np.abs(counts - expected).max() < 0.5 else 0.0
            details["false_fail_basis"] = "exact"
        elif false_fail_rate <= KS_PROVEN_BELOW:
            pvalue, detectable = _bernstein_counts(counts, expected, variance, pvalue, detectable, false_fail_rate,
                                                   false_pass_rate)
            details["false_fail_basis"] = "proven"
    return TestResult("tokens_per_pass", result.statistic, pvalue, result.n, false_fail_rate, detectable, result.df,
                      details)


def _bernstein_counts(counts: np.ndarray, expected: np.ndarray, variance: np.ndarray, pvalue: float,
                      detectable: float, false_fail_rate: float, false_pass_rate: float) -> tuple[float, float]:
    """Counts of independent draws from laws of their own (a Poisson-binomial count per
    category): each category's count against Bernstein's two-sided bound
    2 exp(−t² / (2 (v + t/3))), Bonferroni over the categories. Where the chi-square p-value
    is at most :data:`KS_PROVEN_BELOW` the p-value is never below that, so the row's rate is
    proven; the detectable TV is the larger of the chi-square's and ½ Σ (Bernstein's
    critical distance + the power step) / n, a bias spread over every category."""
    cats = counts.size
    t = np.abs(counts - expected)
    bound = float(min(1.0, cats * (2 * np.exp(-t * t / (2 * (variance + t / 3)))).min()))
    if pvalue <= KS_PROVEN_BELOW:
        pvalue = max(pvalue, bound)
    log_rate = math.log(2 * cats / false_fail_rate)
    critical = log_rate / 3 + np.sqrt((log_rate / 3) ** 2 + 2 * variance * log_rate)
    n = max(float(expected.sum()), 1.0)
    spread = 0.5 * float((critical + stats.norm.isf(false_pass_rate) * np.sqrt(variance)).sum()) / n
    return pvalue, max(detectable, spread)


def tokens_per_pass_mean_test(
    lengths: np.ndarray, alphas: np.ndarray, *,
    false_fail_rate: float = DEFAULT_FALSE_FAIL, false_pass_rate: float = DEFAULT_FALSE_PASS,
) -> TestResult:
    """z-test of mean tokens per pass against E[N] = 1 + Σ_k Π_{i≤k} α_i.

    Wherever a verdict can read the p-value (≤ :data:`KS_PROVEN_BELOW`) it is never below
    Bernstein's bound 2 exp(−t² / (2 (v + γ t/3))) on the sum of the n independent passes
    (each within γ of its mean; v = n σ² of the pooled law bounds the sum's variance, rows
    with their own laws included), so at those rates the false-fail rate is proven.
    ``min_detectable_tv`` here is the detectable shift of the mean, in tokens.
    """
    lengths = np.asarray(lengths, dtype=np.float64)
    n = lengths.size
    pmf = tokens_per_pass_pmf(alphas)
    support = np.arange(1, pmf.size + 1)
    mean = float((pmf * support).sum())
    variance = float((pmf * (support - mean) ** 2).sum())
    if n == 0:
        return TestResult("tokens_per_pass_mean", 0.0, 1.0, 0, false_fail_rate, math.inf)
    observed = float(lengths.mean())
    details = {"observed_mean": observed, "expected_mean": mean}
    if variance <= 0:  # every pass's length certain: no randomness to err on
        ok = bool(np.all(lengths == mean))
        return TestResult("tokens_per_pass_mean", observed - mean, 1.0 if ok else 0.0, n,
                          false_fail_rate, _occurrence_min_tv(n, false_pass_rate), None,
                          {**details, "false_fail_basis": "exact"})
    z = (observed - mean) / math.sqrt(variance / n)
    pvalue = float(2 * stats.norm.sf(abs(z)))
    reach = float(pmf.size - 1)  # γ: a pass's count lies within γ of its mean
    total_variance = n * variance  # ≥ Σ of the passes' own variances (law of total variance)
    if false_fail_rate <= KS_PROVEN_BELOW:
        if pvalue <= KS_PROVEN_BELOW:
            t = abs(observed - mean) * n
            pvalue = max(pvalue, min(1.0, 2 * math.exp(-t * t / (2 * (total_variance + reach * t / 3)))))
        details["false_fail_basis"] = "proven"
        log_rate = math.log(2 / false_fail_rate)  # the sum's shift past Bernstein's critical value
        critical = reach * log_rate / 3 + math.sqrt((reach * log_rate / 3) ** 2 + 2 * total_variance * log_rate)
        detectable = (critical + stats.norm.isf(false_pass_rate) * math.sqrt(total_variance)) / n
    else:
        details["false_fail_basis"] = "estimated"
        detectable = (stats.norm.isf(false_fail_rate / 2) + stats.norm.isf(false_pass_rate)) * math.sqrt(variance / n)
    return TestResult("tokens_per_pass_mean", z, pvalue, n, false_fail_rate, detectable, None, details)


# ---------------------------------------------------------------- independence


def independence_test(
    x: np.ndarray, y: np.ndarray, *,
    false_fail_rate: float = DEFAULT_FALSE_FAIL, false_pass_rate: float = DEFAULT_FALSE_PASS,
    min_expected: float = MIN_EXPECTED, y_law: np.ndarray | None = None,
) -> TestResult:
    """Test that paired categorical draws ``x`` and ``y`` are independent; its false-fail rate
    is proven wherever a verdict reads it (at rates up to :data:`KS_PROVEN_BELOW`).

    A decoder that shares random numbers between rows, or between positions, has correct
    marginals and moves the joint away from the product of its margins. Two forms:

    * ``y_law`` given (a law over y's categories fixed before the draws: the fixture's p):
      the likelihood-ratio (G) test of an R × C table whose y bins come from ``y_law`` alone
      (categories expected ≥ √(min_expected · n) times kept, the rest pooled) and whose x bins
      come from x's observed margin. Given every x, independent pairs make each row of the
      table an independent multinomial over the C bins, so G/2 ≤ Σ_i r_i KL(row_i ‖ π)
      (π: y's binned law; the pooled column law minimises the sum) and Agrawal's bound
      multiplies over the rows: P(G/2 ≥ x) ≤ the gamma tail of shape R(C − 1)
      (:func:`multinomial_kl_tail`). ``min_detectable_tv``: the pooled joint's TV from the
      product of its margins at that critical value (the power step is the non-central
      chi-square's).
    * no law: the same G test with y's bins from x's observed margin (y's categories seen
      among the x draws often enough keep a bin, the rest share one). Given every x that
      binning is fixed, and independent pairs drawn alike make each row of the table an
      independent multinomial over it whatever y's law, so the same bound holds.

    The statistic is Pearson's X² of the table in both forms (``chi2_contingency``); above
    :data:`KS_PROVEN_BELOW` the p-value is its chi-square law's (upper tail), so calibration
    sweeps still see p-values near uniform, and at or below it never below the proven bound.
    Only the upper tail is tested: a table closer to the product than chance is no dependence
    between x and y (the dispersion tests see stratified or herded streams).
    """
    _validate_rates(false_fail_rate, false_pass_rate)
    x = np.asarray(x, dtype=np.int64)
    y = np.asarray(y, dtype=np.int64)
    if x.shape != y.shape:
        raise InvalidDistributionError(f"x and y differ in shape: {x.shape} vs {y.shape}")
    n = x.size
    proven = false_fail_rate <= KS_PROVEN_BELOW
    basis = {"false_fail_basis": "proven" if proven else "estimated"}
    if n == 0:
        return TestResult("independence", 0.0, 1.0, 0, false_fail_rate, math.inf, 0, basis)
    if y_law is None:  # y binned by x's observed margin: fixed given x, as a law fixed in advance is
        _, codes = np.unique(np.concatenate([x, y]), return_inverse=True)
        x, y = codes[:n], codes[n:]
        y_law = np.bincount(x, minlength=int(codes.max()) + 1).astype(np.float64)
    return _independence_given_law(x, y, np.asarray(y_law, dtype=np.float64), false_fail_rate, false_pass_rate,
                                   min_expected, proven)


def _independence_given_law(x: np.ndarray, y: np.ndarray, law: np.ndarray, false_fail_rate: float,
                            false_pass_rate: float, min_expected: float, proven: bool) -> TestResult:
    """The G test of :func:`independence_test` with y's bins fixed by ``law``."""
    n = x.size
    if y.min() < 0 or y.max() >= law.size:
        raise InvalidDistributionError(f"y has a category outside its law's {law.size}")
    possible = law > 0
    ybin = np.zeros(law.size, dtype=np.int64)
    ybin[possible] = _pool(n * law[possible] / law.sum(), math.sqrt(min_expected * n))
    columns = int(ybin[possible].max()) + 1 if possible.any() else 0
    if (~possible).any():  # categories the law rules out: a bin of their own (counted, so conservative)
        ybin[~possible] = columns
        columns += 1
    xbin = margin_bins(*_codes(x), n, min_expected)
    rows = int(xbin.max()) + 1
    table = np.bincount(xbin * columns + ybin[y], minlength=rows * columns).reshape(rows, columns).astype(np.float64)
    seen = table[:, table.sum(axis=0) > 0]
    df = (seen.shape[0] - 1) * (seen.shape[1] - 1)
    shape = rows * (columns - 1)
    details = {"rows": float(rows), "columns": float(columns), "gamma_shape": float(shape),
               "false_fail_basis": "proven" if proven else "estimated"}
    if df == 0:
        return TestResult("independence", 0.0, 1.0, n, false_fail_rate, math.inf, 0, details)
    statistic = float(stats.chi2_contingency(seen, correction=False).statistic)
    expected = seen.sum(axis=1, keepdims=True) * seen.sum(axis=0, keepdims=True) / n
    hit = seen > 0
    g = 2.0 * float((seen[hit] * np.log(seen[hit] / expected[hit])).sum())
    pvalue = float(stats.chi2.sf(g, df))
    if proven and pvalue <= KS_PROVEN_BELOW:
        pvalue = max(pvalue, multinomial_kl_tail(g / 2.0, shape + 1))
    details["g_statistic"] = g
    return TestResult("independence", statistic, pvalue, n, false_fail_rate,
                      _chi2_min_tv(n, df, false_fail_rate, false_pass_rate, proven, shape), df, details)


def contingency_table(x: np.ndarray, y: np.ndarray, min_expected: float = MIN_EXPECTED) -> np.ndarray:
    """The pooled table of :func:`independence_test`: every cell expected ≥ ``min_expected``."""
    n = x.size
    bx = margin_bins(*_codes(x), n, min_expected)
    by = margin_bins(*_codes(y), n, min_expected)
    cols = int(by.max()) + 1
    table = np.bincount(bx * cols + by, minlength=(int(bx.max()) + 1) * cols).reshape(-1, cols).astype(np.float64)
    return table[table.sum(axis=1) > 0][:, table.sum(axis=0) > 0]


def _codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(counts per category, each value's category): a bincount for small non-negative
    integers such as token ids, a sort otherwise."""
    if values.min() >= 0 and values.max() <= 4 * values.size + 65_536:
        return np.bincount(values), values
    _, codes = np.unique(values, return_inverse=True)
    return np.bincount(codes), codes


def margin_bins(counts: np.ndarray, codes: np.ndarray | None, n: int, min_expected: float = MIN_EXPECTED) -> np.ndarray:
    """The bin of each value of one margin of an n-pair table (of each category when ``codes``
    is None): each bin seen ≥ √(min_expected · n) times, so every cell's expected count
    (product of margins over n) is ≥ ``min_expected``. Unseen categories never form a bin."""
    counts = np.asarray(counts, dtype=np.float64)
    seen = counts > 0
    bins = np.zeros(counts.size, dtype=np.int64)
    bins[seen] = _pool(counts[seen], math.sqrt(min_expected * n))
    return bins if codes is None else bins[codes]


def combine_bonferroni(results: list[TestResult], test: str, false_fail_rate: float) -> TestResult:
    """One assertion from several sub-tests each run at ``false_fail_rate / len(results)``:
    the Bonferroni-adjusted smallest p-value, the worst detectable TV."""
    if not results:
        return TestResult(test, 0.0, 1.0, 0, false_fail_rate, math.inf)
    worst = min(results, key=lambda r: r.pvalue)
    pvalue = min(1.0, len(results) * worst.pvalue)
    tested = [r for r in results if r.n > 0 and not math.isnan(r.min_detectable_tv)]  # NaN: states no TV
    detectable = max((r.min_detectable_tv for r in tested), default=math.inf)
    return TestResult(test, worst.statistic, pvalue, max((r.n for r in results), default=0), false_fail_rate,
                      detectable, worst.df, {"subtests": float(len(results)), **dict(worst.details)})


# ---------------------------------------------------------------- second level


def pvalue_uniformity(pvalues: np.ndarray, *, false_fail_rate: float = DEFAULT_FALSE_FAIL,
                      false_pass_rate: float = DEFAULT_FALSE_PASS) -> TestResult:
    """KS test that p-values of independent runs are Uniform(0, 1): the suite's own calibration."""
    return ks_uniformity(pvalues, false_fail_rate=false_fail_rate, false_pass_rate=false_pass_rate,
                         test="pvalue_uniformity")
