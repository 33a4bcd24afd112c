"""Proven two-sided tails of a band's counts over equal groups, on their exact conditional law.

R groups of n draws each (a server's requests of n choices, a chain run's blocks of n
consecutive emissions, a call's n rows) put c_r of their draws in a band (a set of
labels fixed before the counts are looked at). Under independence the groups are
exchangeable, so given the pooled count K the counts are multivariate hypergeometric:

    P(c_1, ..., c_R | K) = Π_r C(n, c_r) / C(nR, K).

The statistic is S = Σ_r c_r²: too large when draws of a group are herded together (shared
uniforms), too small when they are spread apart (stratified or low-discrepancy streams).
Its tails are bounded by Chernoff's inequality on that exact law,

    P(S ≥ s | K) ≤ min_{θ ≥ 0, t} f_θ(e^t)^R e^{−θ s − t K} / C(nR, K),
    f_θ(x) = Σ_c C(n, c) e^{θ c²} x^c,

(and θ ≤ 0 for the lower tail): E e^{θS} = [x^K] f_θ(x)^R / C(nR, K), and a coefficient of
a power series with non-negative terms is at most its value at any x > 0 over x^K. So the
level holds at any rate, however small, with no replicates and no asymptotics.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import special


@functools.lru_cache(maxsize=64)
def _log_mgf(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    c = np.arange(n + 1, dtype=np.float64)
    return c, c * c, special.gammaln(n + 1) - special.gammaln(c + 1) - special.gammaln(n - c + 1)


#: The tilts θ·n the bounds are minimised over (any θ gives a valid bound; a fine grid, a near-optimal
#: one): up to 4, and on to 400 for the far lower tail of long blocks (a call of 300 rows whose
#: count sits on its mean: the bound falls from e^-4.3 to e^-38 there).
GRID = np.concatenate([np.geomspace(1e-6, 4.0, 161), np.geomspace(4.0, 400.0, 41)[1:]])


def _profile(theta: np.ndarray, n: int, r: int, k: int) -> np.ndarray:
    """g(θ) = min_t log(f_θ(e^t)^R e^{−tK}) for each θ (the inner minimum in t by bisection on its
    convex derivative R E[c] − K, vectorised over θ); long groups: :func:`_profile_window`."""
    p = k / (n * r)
    width = int(15.0 * math.sqrt(n * p * (1.0 - p))) + 50
    if n + 1 > 3 * (2 * width + 1):
        return _profile_window(np.asarray(theta, np.float64), n, r, k, width)
    c, c2, logc = _log_mgf(n)
    theta = np.asarray(theta, np.float64)[:, None]
    span = 2.0 * np.abs(theta[:, 0]) * n + 60.0
    a, b = -span, span.copy()
    for _ in range(56):  # the span over 2⁵⁶: below a float's step
        t = 0.5 * (a + b)
        x = logc + theta * c2 + t[:, None] * c
        w = np.exp(x - x.max(axis=1, keepdims=True))
        high = r * (w @ c) / w.sum(axis=1) > k
        a, b = np.where(high, a, t), np.where(high, t, b)
    t = 0.5 * (a + b)
    x = logc + theta * c2 + t[:, None] * c
    top = x.max(axis=1)
    return r * (top + np.log(np.exp(x - top[:, None]).sum(axis=1))) - t * k


def _profile_window(theta: np.ndarray, n: int, r: int, k: int, width: int) -> np.ndarray:
    """:func:`_profile` for groups of many draws, summing the terms of f_θ in a window around the
    mean count K/R and bounding the rest: where the exponent h(c) = log C(n, c) + θc² + tc is
    concave in c (θ ≤ 0 always; θ > 0 up to half the least second difference of log C(n, c)),
    h(edge ± j) ≤ h(edge) ± j Δ with Δ the edge's step, so each side beyond the window is at most
    a geometric series. Tilts where h may not be concave give no bound (+inf), which only loosens
    the minimum. t comes from a few safeguarded Newton steps (any t gives a valid bound)."""
    centre = k / r
    lo, hi = max(0, int(centre) - width), min(n, int(centre) + width)
    c = np.arange(max(lo - 1, 0), min(hi + 1, n) + 1, dtype=np.float64)  # the window and one step beyond
    logc = special.gammaln(n + 1) - special.gammaln(c + 1) - special.gammaln(n - c + 1)
    th = theta[:, None]
    mid = min(max(centre, 0.5), n - 0.5)
    t = -2.0 * theta * mid - math.log((n - mid) / mid)  # the tilt whose mode sits at K/R
    inner = (c >= lo) & (c <= hi)
    for _ in range(12):
        x = logc[inner] + th * c[inner] ** 2 + t[:, None] * c[inner]
        w = np.exp(x - x.max(axis=1, keepdims=True))
        w /= w.sum(axis=1, keepdims=True)
        mean = w @ c[inner]
        var = np.maximum(w @ c[inner] ** 2 - mean ** 2, 1e-12)
        t = t - np.clip((mean - centre) / var, -5.0, 5.0)
    x = logc + th * c * c + t[:, None] * c
    body = x[:, inner]
    top = body.max(axis=1)
    log_sum = top + np.log(np.exp(body - top[:, None]).sum(axis=1))
    for edge, beyond in ((lo, lo > 0), (hi, hi < n)):  # the geometric tails past each edge
        if not beyond:
            continue
        i = int(np.flatnonzero(c == edge)[0])
        step = x[:, i] - x[:, i - 1] if edge == lo else x[:, i] - x[:, i + 1]  # the decay per step outward
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            tail = np.where(step > 0, x[:, i] - step - np.log1p(-np.exp(-step)), np.inf)
        log_sum = np.logaddexp(log_sum, tail)
    cc = np.arange(0, max(n - 1, 1), dtype=np.float64)  # where h stays concave: θ ≤ ½ min second difference
    second = np.log((n - cc) * (cc + 2) / ((n - cc - 1) * (cc + 1))) if n >= 2 else np.array([np.inf])
    concave = theta <= 0.5 * float(second.min())
    return np.where(concave, r * log_sum - t * k, np.inf)


def _log_choose(a: int, b: int) -> float:
    return float(special.gammaln(a + 1) - special.gammaln(b + 1) - special.gammaln(a - b + 1))


@functools.lru_cache(maxsize=1024)
def _profiles(n: int, r: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(θ > 0 on the grid, g(θ) − log C(nR, K), g(−θ) − log C(nR, K))."""
    theta = GRID / n
    denom = _log_choose(n * r, k)
    return theta, _profile(theta, n, r, k) - denom, _profile(-theta, n, r, k) - denom


def log_tail(s: float, n: int, r: int, k: int, upper: bool) -> float:
    """log of the Chernoff bound on P(S ≥ s | K) (``upper``) or P(S ≤ s | K), at most 0."""
    theta, up, down = _profiles(n, r, k)
    bound = (up - theta * s) if upper else (down + theta * s)
    return min(0.0, float(bound.min()))


def critical_sums(n: int, r: int, k: int, rate: float) -> tuple[float, float]:
    """(s_lo, s_hi): S ≤ s_lo or S ≥ s_hi fails, each tail at ``rate / 2`` (the bound's inverse:
    s_hi = min_{θ>0} (g(θ) − L) / θ with L = log(rate / 2) + log C(nR, K))."""
    theta, up, down = _profiles(n, r, k)
    level = math.log(rate / 2.0)
    return float(-((down - level) / theta).min()), float(((up - level) / theta).min())


def variance_ratio(s: float, n: int, r: int, k: int) -> float:
    """The counts' variance (Σc²/R − (K/R)²) over the binomial n p (1 − p) at p = K / (nR)."""
    p = k / (n * r)
    var = n * p * (1 - p)
    return (s / r - (k / r) ** 2) / var if var > 0 else 1.0


def two_sided(counts: np.ndarray, n: int, rate: float) -> tuple[float, float, tuple[float, float]]:
    """(variance ratio, two-sided p-value, (critical ratio below, critical ratio above)) of the
    band counts ``counts[R]`` of R groups of ``n`` draws at false-fail ``rate``: the p-value is
    twice the smaller Chernoff bound (each tail at half the rate), so it is below ``rate`` only
    where a tail's bound is below ``rate / 2``. Untestable (one group, or the band empty or
    full): ratio 1, p-value 1, no critical ratios."""
    counts = np.asarray(counts, np.int64)
    r, k = counts.size, int(counts.sum())
    if r < 2 or n < 2 or k in (0, n * r):
        return 1.0, 1.0, (-math.inf, math.inf)
    s = float((counts.astype(np.float64) ** 2).sum())
    lo, hi = critical_sums(n, r, k, rate)
    pvalue = min(1.0, 2 * math.exp(min(log_tail(s, n, r, k, True), log_tail(s, n, r, k, False))))
    return variance_ratio(s, n, r, k), pvalue, (variance_ratio(lo, n, r, k), variance_ratio(hi, n, r, k))
