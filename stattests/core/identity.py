"""Identity testing against a known p with a worst-case (minimax) detectable TV.

The statistic is Acharya, Daskalakis & Kamath's (NeurIPS 2015) chi-square-type sum with
its bias removed, Z = Σ_i w_i ((N_i − λ_i)² − N_i), λ_i = n p_i, weighted by
w_i = 1 / max(λ_i, 1): tokens expected at least once get ADK's 1/λ_i, rarer ones weight 1
(the light tokens, handled by their collisions rather than by 1/λ_i, whose single hits
would otherwise dominate). Under the null E[Z] ≈ 0; under any alternative q at TV ε,
E[Z] = n² Σ w_i (q_i − p_i)² ≥ 4 n² ε² / Σ_i max(λ_i, 1) by Cauchy–Schwarz, with equality
in the least-favourable direction δ_i ∝ ±max(λ_i, 1), Paninski's paired perturbations of
many small masses generalised to a non-uniform p. So the test reaches the √V/ε² order of
Paninski (2008) and Valiant & Valiant (2014) rather than the V/ε² of learning p.

The null law is simulated exactly (p is known: Multinomial(n, p) counts, vectorised,
from a generator seeded by the caller), and its critical value at the false-fail rate
comes from the Pearson type III law with Z's exact mean and variance (from the
multinomial's factorial moments) and the simulated skewness (raised by two of its
standard errors: a heavier right tail). No asymptotic χ² is involved. The p-value of an observed Z is that law's upper tail.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import optimize, stats

from specgauge.errors import InvalidDistributionError
from specgauge.stattests.core.statistics import (DEFAULT_FALSE_FAIL, DEFAULT_FALSE_PASS, TestResult,
                                                 _occurrence_min_tv, _validate_rates, validate_probs)

#: Tokens expected fewer times than this are weighted as if expected this often.
LAMBDA_FLOOR = 1.0
#: Null replicates simulated per (n, p).
NULL_REPLICATES = 1000


@dataclass(frozen=True)
class NullLaw:
    """The simulated null law of Z for one (n, p): its first three moments, and the
    Pearson III law matched to them that gives tails beyond the simulation's reach."""

    mean: float
    sd: float
    skew: float
    replicates: int

    def sf(self, z: float) -> float:
        if self.sd <= 0:
            return 1.0 if z <= self.mean + 1e-9 else 0.0
        return float(stats.pearson3.sf(z, self.skew, loc=self.mean, scale=self.sd))

    def critical(self, rate: float) -> float:
        if self.sd <= 0:
            return self.mean
        return float(stats.pearson3.isf(rate, self.skew, loc=self.mean, scale=self.sd))


def _weights(n: int, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lam = n * p
    return lam, 1.0 / np.maximum(lam, LAMBDA_FLOOR)


def identity_statistic(counts: np.ndarray, p: np.ndarray) -> float:
    """Z = Σ w ((N − λ)² − N) over the tokens p allows (``p`` > 0, ``counts`` aligned)."""
    n = float(counts.sum())
    lam, w = _weights(n, p)
    return float((w * ((counts - lam) ** 2 - counts)).sum())


def _simulate(n: int, p: np.ndarray, replicates: int, rng: np.random.Generator) -> np.ndarray:
    """Z of ``replicates`` Multinomial(n, p) draws, vectorised: a matrix of counts when the
    vocabulary is small, else the draws themselves (only tokens drawn matter)."""
    lam, w = _weights(n, p)
    if p.size * replicates <= 4_000_000 or n >= p.size:
        out = np.empty(replicates)
        step = max(1, 4_000_000 // p.size)
        for start in range(0, replicates, step):
            c = rng.multinomial(n, p, size=min(step, replicates - start)).astype(np.float64)
            out[start:start + c.shape[0]] = (w * ((c - lam) ** 2 - c)).sum(axis=1)
        return out
    # Z = Σ_t w_t N_t (N_t − 1) − 2 Σ_draws w λ + Σ w λ²; with each replicate's draws sorted,
    # Σ_t N_t (N_t − 1) / 2 counts, for every draw, the equal draws sorted before it
    cdf = np.cumsum(p)
    constant = float((w * lam * lam).sum())
    out = np.empty(replicates)
    step = max(1, 4_000_000 // max(n, 1))
    index = np.arange(n)
    for start in range(0, replicates, step):
        r = min(step, replicates - start)
        tokens = np.sort(np.minimum(np.searchsorted(cdf, rng.random((r, n)) * cdf[-1], side="right"), p.size - 1),
                         axis=1)
        new_run = np.ones((r, n), dtype=bool)
        new_run[:, 1:] = tokens[:, 1:] != tokens[:, :-1]
        run_start = np.maximum.accumulate(np.where(new_run, index, 0), axis=1)
        wt = w[tokens]
        out[start:start + r] = (2 * (wt * (index - run_start)).sum(axis=1) - 2 * (wt * lam[tokens]).sum(axis=1)
                                + constant)
    return out


def exact_moments(n: int, p: np.ndarray) -> tuple[float, float]:
    """Mean and variance of Z under Multinomial(n, p), exactly, from factorial moments.

    Z = A − B + Σ w λ² with A = Σ w N(N − 1), B = Σ c N, c = 2 w λ; the multinomial's
    E[N_i^(a) N_j^(b)] = n^(a+b) p_i^a p_j^b (i ≠ j) and N^(2)·N^(2) = N^(4) + 4 N^(3) + 2 N^(2).
    """
    lam, w = _weights(n, p)
    c = 2 * w * lam
    n2, n3, n4 = n * (n - 1.0), n * (n - 1.0) * (n - 2.0), n * (n - 1.0) * (n - 2.0) * (n - 3.0)
    wp2, cp = float((w * p * p).sum()), float((c * p).sum())
    mean_a, mean_b = n2 * wp2, n * cp
    var_a = n4 * wp2 ** 2 + 4 * n3 * float((w * w * p ** 3).sum()) + 2 * n2 * float((w * w * p * p).sum()) - mean_a ** 2
    var_b = n2 * cp ** 2 + n * float((c * c * p).sum()) - mean_b ** 2
    cov = n3 * wp2 * cp + 2 * n2 * float((w * c * p * p).sum()) - mean_a * mean_b
    return mean_a - mean_b + float((w * lam * lam).sum()), max(var_a + var_b - 2 * cov, 0.0)


def replicates_for(n: int, size: int, replicates: int = NULL_REPLICATES) -> int:
    """Replicates to simulate: at least ``replicates``, more (up to 20,000) where a draw is cheap."""
    return int(min(20_000, max(replicates, 200_000 // max(min(n, size), 1))))


@lru_cache(maxsize=256)
def _null_cached(n: int, key: bytes, seed: int, replicates: int) -> NullLaw:
    p = np.frombuffer(key, dtype=np.float64)
    replicates = replicates_for(n, p.size, replicates)
    z = _simulate(n, p, replicates, np.random.default_rng([seed, n, zlib.crc32(key)]))
    mean, variance = exact_moments(n, p)
    sd = math.sqrt(variance)
    skew = float(((z - mean) ** 3).mean() / variance ** 1.5) if variance > 0 else 0.0
    return NullLaw(mean, sd, skew + 2.0 * math.sqrt(6.0 / replicates), replicates)


def null_law(n: int, p: np.ndarray, seed: int = 0, replicates: int = NULL_REPLICATES) -> NullLaw:
    """The simulated null law of Z for n draws of ``p`` (positive entries only), cached
    per (n, p, seed): positions and fixtures that share a distribution share the draws."""
    p = np.ascontiguousarray(p[p > 0], dtype=np.float64)
    return _null_cached(int(n), p.tobytes(), int(seed), int(replicates))


def _poisson_variance(n: int, p: np.ndarray, q: np.ndarray) -> float:
    """Var Z when the n draws come from q (Poissonized): Σ w² (2 n² q² + 4 n³ q δ²)."""
    _, w = _weights(n, p)
    d = q - p
    return float((w * w * (2 * n * n * q * q + 4 * n ** 3 * q * d * d)).sum())


def _least_favourable(n: int, p: np.ndarray, tv: float) -> tuple[float, np.ndarray]:
    """E[Z]'s lower bound at TV ``tv`` (the Cauchy–Schwarz direction) and that direction's
    |δ|: δ_i ∝ max(λ_i, 1), the masses raised or lowered by a random sign."""
    lam, _ = _weights(n, p)
    a = np.maximum(lam, LAMBDA_FLOOR)
    return 4.0 * n * n * tv * tv / a.sum(), 2.0 * tv * a / a.sum()


def _min_tv(n: int, p: np.ndarray, critical: float, null_sd: float, false_pass_rate: float) -> float:
    """Smallest TV whose least-favourable alternative has E[Z] − z_β sd_alt above the critical value."""
    if n <= 0:
        return math.inf
    z_beta = stats.norm.isf(false_pass_rate)

    def margin(tv: float) -> float:
        mean, delta = _least_favourable(n, p, tv)
        sd = math.sqrt(max(_poisson_variance(n, p, p + delta), null_sd * null_sd))
        return mean - z_beta * sd - critical

    if margin(1.0) < 0:
        return math.inf
    return float(optimize.brentq(margin, 1e-9, 1.0, xtol=1e-7))


@lru_cache(maxsize=1024)
def _figure(n: int, key: bytes, seed: int, replicates: int, false_fail_rate: float,
            false_pass_rate: float) -> tuple[float, float]:
    """(critical value, worst-case detectable TV) of one null law at one pair of rates."""
    law = _null_cached(n, key, seed, replicates)
    critical = law.critical(false_fail_rate)
    return critical, _min_tv(n, np.frombuffer(key, dtype=np.float64), critical, law.sd, false_pass_rate)


def _analytic_null(n: int, p: np.ndarray) -> NullLaw:
    """Poissonized cumulants of Z (κ₂ = Σ 2 (wλ)², κ₃ = Σ w³ (4λ² + 8λ³)): for sizing only."""
    lam, w = _weights(n, p)
    k2 = float((2 * (w * lam) ** 2).sum())
    k3 = float((w ** 3 * (4 * lam ** 2 + 8 * lam ** 3)).sum())
    return NullLaw(0.0, math.sqrt(k2), k3 / k2 ** 1.5 if k2 > 0 else 0.0, 0)


def identity_test(
    counts: np.ndarray, probs: np.ndarray, *, false_fail_rate: float = DEFAULT_FALSE_FAIL,
    false_pass_rate: float = DEFAULT_FALSE_PASS, seed: int = 0, replicates: int = NULL_REPLICATES,
) -> TestResult:
    """Identity test of ``counts`` against the known ``probs``, calibrated by simulation.

    Any count on a token of probability zero fails at once. ``min_detectable_tv`` is the
    worst case: the smallest TV at which EVERY alternative is detected with power
    1 − ``false_pass_rate`` (the least-favourable direction of the Cauchy–Schwarz bound,
    with the alternative's variance); it scales as √V/n^½ ... √V/ε² samples, O(log 1/rate).
    ``details["null_replicates"]`` records the simulation behind the critical value.

    Examples
    --------
    >>> import numpy as np
    >>> p = np.full(6, 1 / 6)
    >>> r = identity_test(np.random.default_rng(0).multinomial(6000, p), p, seed=1)
    >>> r.passed, round(r.min_detectable_tv, 3)
    (True, 0.041)
    """
    _validate_rates(false_fail_rate, false_pass_rate)
    probs = validate_probs(probs)
    counts = np.asarray(counts)
    if counts.shape != probs.shape or (counts < 0).any():
        raise InvalidDistributionError(f"counts must be non-negative with the shape of probs {probs.shape}")
    n = int(round(float(counts.sum())))
    if n == 0:
        return TestResult("identity", 0.0, 1.0, 0, false_fail_rate, math.inf)
    possible = probs > 0
    hits = float(counts[~possible].sum())
    p, c = probs[possible], counts[possible].astype(np.float64)
    key = np.ascontiguousarray(p, dtype=np.float64).tobytes()
    law = _null_cached(n, key, int(seed), int(replicates))
    z = identity_statistic(c, p)
    critical, detectable = _figure(n, key, int(seed), int(replicates), false_fail_rate, false_pass_rate)
    if possible.sum() == 1:  # one possible token: only impossible hits can show a difference
        detectable = _occurrence_min_tv(n, false_pass_rate)
    pvalue = 0.0 if hits else min(1.0, law.sf(z))
    details = {"null_mean": law.mean, "null_sd": law.sd, "critical": critical, "impossible_hits": hits,
               "null_replicates": float(law.replicates),
               "measured_tv": float(0.5 * np.abs(counts / n - probs).sum())}
    return TestResult("identity", math.inf if hits else z, pvalue, n, false_fail_rate, detectable, None, details)


def min_discrepancy_of_identity_test(n: int, probs: np.ndarray, *, false_fail_rate: float = DEFAULT_FALSE_FAIL,
                                     false_pass_rate: float = DEFAULT_FALSE_PASS) -> float:
    """Worst-case TV :func:`identity_test` detects from ``n`` draws (analytic null: for planning)."""
    p = validate_probs(probs)
    p = p[p > 0]
    if p.size == 1:
        return _occurrence_min_tv(n, false_pass_rate)
    law = _analytic_null(n, p)
    return _min_tv(n, p, law.critical(false_fail_rate), law.sd, false_pass_rate)


def min_num_samples_for_identity_test(tv: float, probs: np.ndarray, *, false_fail_rate: float = DEFAULT_FALSE_FAIL,
                                      false_pass_rate: float = DEFAULT_FALSE_PASS) -> int:
    """Draws :func:`identity_test` needs to detect every alternative at ``tv``: O(√V/tv²)
    when p is spread, O(1/tv²) on few tokens, O(log 1/false_fail_rate)."""
    if not 0 < tv < 1:
        raise InvalidDistributionError(f"tv must lie in (0, 1), got {tv!r}")
    lo, hi = 1, 64
    while min_discrepancy_of_identity_test(hi, probs, false_fail_rate=false_fail_rate,
                                           false_pass_rate=false_pass_rate) > tv:
        lo, hi = hi, hi * 2
        if hi > 2**40:
            return hi
    while hi - lo > max(1, lo // 200):  # to half a percent
        mid = (lo + hi) // 2
        if min_discrepancy_of_identity_test(mid, probs, false_fail_rate=false_fail_rate,
                                            false_pass_rate=false_pass_rate) > tv:
            lo = mid
        else:
            hi = mid
    return hi
