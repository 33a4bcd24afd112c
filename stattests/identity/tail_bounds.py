"""A proven upper bound on the null upper tail of the identity test's middle statistic Z.

Z = Σ_{i∈M} w_i f_i(N_i), f_i(k) = k (k − 1) − 2 (n − 1) p_i k + n (n − 1) p_i², over the counts
N of n draws from p (Multinomial(n, p)). No simulation and no approximate law: every step
is an inequality.

1. Truncation. With J_i < K_i chosen from exact binomial tails, the event that some N_i
   falls outside [J_i, K_i) has probability at most u = Σ_{i∈M} P(Binomial(n, p_i) ∉ [J_i, K_i))
   (union bound, exact terms); only the window is summed below, whatever n.
2. Poissonization. Multinomial(n, p) is the law of independent N_i ~ Poisson(n p_i) given
   Σ N_i = n, so for any event A, P_mult(A) = P_pois(A, Σ N = n) / π_n ≤ P_pois(A) / π_n,
   π_n = P(Poisson(n) = n) = e^{−n} nⁿ / n!.
3. Chernoff. For s > 0, P_pois(Z ≥ z, J_i ≤ N_i < K_i ∀ i∈M) ≤ e^{−s z} Π_{i∈M} E[e^{s w_i f_i(N_i)}
   1{J_i ≤ N_i < K_i}], the coordinates being independent; each factor is a finite sum.

So P(Z ≥ z) ≤ u + min_s e^{L(s) − s z}, L(s) = Σ_i log Σ_{J_i≤k<K_i} Poisson(k; n p_i) e^{s w_i f_i(k)}
− log π_n. Any s gives a valid bound, so the minimum is taken over a fixed grid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

#: Chernoff parameters tried, in units of 1 / (Z's null standard deviation).
_S_GRID = np.geomspace(1e-6, 60.0, 28)


@dataclass(frozen=True, eq=False)
class ZTailBound:
    """L(s) on the grid of s, and the truncation's probability u, for one (n, p, w)."""

    s: np.ndarray
    log_mgf: np.ndarray  # L(s): the truncated Poisson log-MGF sum, minus log π_n
    truncation: float  # u

    def sf(self, z: float) -> float:
        """An upper bound on P(Z ≥ z) under the null: a proven p-value."""
        exponent = np.min(self.log_mgf - self.s * z)
        return float(min(1.0, self.truncation + math.exp(min(exponent, 0.0))))

    def critical(self, rate: float) -> float:
        """A z with P(Z ≥ z) ≤ ``rate`` (inf where the truncation alone spends the rate)."""
        room = rate - self.truncation
        if room <= 0:
            return math.inf
        return float(np.min((self.log_mgf - math.log(room)) / self.s))


def _upper(k: np.ndarray, n: int, p: np.ndarray) -> np.ndarray:
    """P(Binomial(n, p) ≥ k), accurate far into the tail (the incomplete beta, not 1 − cdf)."""
    return np.where(k <= 0, 1.0, special.bdtrc(np.maximum(k - 1, 0), n, p))


def _lower(k: np.ndarray, n: int, p: np.ndarray) -> np.ndarray:
    """P(Binomial(n, p) < k)."""
    return np.where(k <= 0, 0.0, special.bdtr(np.maximum(k - 1, 0), n, p))


def _window(n: int, p: np.ndarray, share: float) -> tuple[np.ndarray, np.ndarray]:
    """(J, K): the largest J and the smallest K with P(N < J) ≤ share and P(N ≥ K) ≤ share,
    by bisection on the exact tails (scipy's quantile functions lose the far tail)."""
    mean = np.floor(n * p).astype(np.int64)
    # Bernstein's t with P(|N − np| ≥ t) ≤ share each side brackets both searches (checked,
    # so rounding in the exact tails can only widen a bracket back to the whole range)
    log_s = math.log(1.0 / share)
    t = log_s / 3 + np.sqrt((log_s / 3) ** 2 + 2 * n * p * (1 - p) * log_s)
    lo_k = mean + 1
    hi_k = np.minimum(np.ceil(n * p + t), n + 1).astype(np.int64)
    hi_k = np.where((hi_k >= lo_k) & (_upper(hi_k, n, p) <= share), hi_k, n + 1)  # P(N ≥ n + 1) = 0
    while (hi_k - lo_k > 0).any():
        mid = (lo_k + hi_k) // 2
        ok = _upper(mid, n, p) <= share
        hi_k, lo_k = np.where(ok, mid, hi_k), np.where(ok, lo_k, mid + 1)
    lo_j = np.clip(np.floor(n * p - t), 0, mean).astype(np.int64)
    lo_j = np.where(_lower(lo_j, n, p) <= share, lo_j, 0)  # P(N < 0) = 0
    hi_j = mean
    while (hi_j - lo_j > 0).any():
        mid = (lo_j + hi_j + 1) // 2
        ok = _lower(mid, n, p) <= share
        lo_j, hi_j = np.where(ok, mid, lo_j), np.where(ok, hi_j, mid - 1)
    return lo_j, hi_k


def z_tail_bound(n: int, p: np.ndarray, w: np.ndarray, rate: float, sd: float) -> ZTailBound:
    """The bound above for n draws of ``p`` (weights ``w``, 0 outside M); half of ``rate`` goes
    to the truncation, spread evenly over M's tokens and both sides."""
    on = w > 0
    pm, wm = p[on], w[on]
    if n < 2 or pm.size == 0 or sd <= 0:
        return ZTailBound(np.ones(1), np.zeros(1), 0.0)
    share = rate / 4 / pm.size
    low, top = _window(n, pm, share)
    truncation = float(_upper(top, n, pm).sum() + _lower(low, n, pm).sum())
    width = top - low
    starts = np.concatenate([[0], np.cumsum(width)[:-1]])
    token = np.repeat(np.arange(pm.size), width)
    k = np.arange(token.size) - starts[token] + low[token]
    lam = n * pm[token]
    log_pmf = k * np.log(lam) - lam - special.gammaln(k + 1.0)
    f = wm[token] * (k * (k - 1.0) - 2.0 * (n - 1.0) * pm[token] * k + n * (n - 1.0) * pm[token] ** 2)
    log_pi = n * math.log(n) - n - float(special.gammaln(n + 1.0))
    def log_mgf(s: float) -> float:
        a = log_pmf + s * f
        peak = np.maximum.reduceat(a, starts)
        return float((peak + np.log(np.add.reduceat(np.exp(a - peak[token]), starts))).sum()) - log_pi

    # a coarse grid, then a finer one around the s that gives the smallest critical value at ``rate``
    s = _S_GRID / sd
    values = np.array([log_mgf(x) for x in s])
    room = max(rate - truncation, 1e-300)
    best = int(np.argmin((values - math.log(room)) / s))
    fine = np.geomspace(s[max(best - 1, 0)], s[min(best + 1, s.size - 1)], 12)
    s = np.concatenate([s, fine])
    values = np.concatenate([values, [log_mgf(x) for x in fine]])
    return ZTailBound(s, values, truncation)


# ---------------------------------------------------------------- the empirical TV's null tail


@dataclass(frozen=True, eq=False)
class PositivePartBound:
    """A proven bound on P(D ≥ t) under p for D = Σ_i (N_i − n p_i)⁺ (n times the empirical TV),
    by Chernoff over the counts' negative association, for one (n, p).

    Multinomial counts are negatively associated (Joag-Dev & Proschan 1983, 3.1), so for
    non-negative functions f_i all non-decreasing, or all non-increasing, E Π f_i(N_i) ≤
    Π E f_i(N_i) (ibid., 2.8; Dubhashi & Ranjan 1998). With f_i = e^{s (N_i − n p_i)⁺}, s > 0:
    P(D ≥ t) ≤ e^{−s t} Π_i E e^{s (N_i − n p_i)⁺}, each factor over N_i's own Binomial(n, p_i)
    law: no union over sets and no Poissonization. A factor is P(N_i < n p_i) + a finite sum
    over a window of k ≥ n p_i + the rest beyond the window, bounded by Chernoff again:
    E[e^{s N}; N ≥ K] ≤ (1 − p + p e^{s + θ})ⁿ e^{−θ K}, θ ≥ 0.

    A heavy token's own spread dominates that product, though the counts' sum pins it down:
    with h the heaviest token, N_h − n p_h = −Σ_{i≠h} (N_i − n p_i), so D = max(A, B) with
    A = Σ_{i≠h} (N_i − n p_i)⁺ and B = Σ_{i≠h} (n p_i − N_i)⁺, and P(D ≥ t) ≤ P(A ≥ t) + P(B ≥ t),
    each bounded as above (B's factors non-increasing). The smaller of the two bounds is taken."""

    s: np.ndarray
    log_mgf: np.ndarray  # Σ_i log E e^{s (N_i − n p_i)⁺}, raised for rounding
    s_split: np.ndarray | None = None  # the s of the split, near the best of the whole
    log_above: np.ndarray | None = None  # Σ_{i≠h} log E e^{s (N_i − n p_i)⁺} (A), or None where not computed
    log_below: np.ndarray | None = None  # Σ_{i≠h} log E e^{s (n p_i − N_i)⁺} (B)

    def sf(self, t: float) -> float:
        """An upper bound on P(D ≥ t) under p."""
        bound = math.exp(min(float(np.min(self.log_mgf - self.s * t)), 0.0))
        if self.log_above is not None:
            split = (math.exp(min(float(np.min(self.log_above - self.s_split * t)), 0.0))
                     + math.exp(min(float(np.min(self.log_below - self.s_split * t)), 0.0)))
            bound = min(bound, split)
        return float(min(bound, 1.0))

    def critical(self, rate: float) -> float:
        """A t with P(D ≥ t) ≤ ``rate``."""
        t = float(np.min((self.log_mgf - math.log(rate)) / self.s))
        if self.log_above is not None:
            half = math.log(rate / 2)
            t = min(t, max(float(np.min((self.log_above - half) / self.s_split)),
                           float(np.min((self.log_below - half) / self.s_split))))
        return t


#: A heaviest token at least this heavy is split off (D = max(A, B)): below it the split costs
#: its factor 2 and saves little, and a third pass over the law is not worth its time.
SPLIT_HEAVY = 0.05


def _excess_log_mgf(n: int, p: np.ndarray, lower: bool):
    """s ↦ Σ_i log E e^{s (N_i − n p_i)⁺} (``lower``: e^{s (n p_i − N_i)⁺}), N_i ~ Binomial(n, p_i):
    the factor 1 where the excess is 0, an exact window of about 10 √(n p_i) + 8 terms, and
    Chernoff beyond it, raised by the rounding of the log-pmfs."""
    lam = n * p
    if lower:  # k < λ counts: the window ends at the last such k, and N ≥ λ gives the factor 1
        last = np.ceil(lam).astype(np.int64) - 1
        width = np.maximum(np.minimum(np.ceil(10.0 * np.sqrt(lam) + 8.0).astype(np.int64), last + 1), 1)
        first = np.maximum(last - width + 1, 0)
        flat = np.log(np.maximum(1.0 - _lower(last + 1, n, p), 1e-300))
    else:  # k ≥ λ counts: the window starts at ⌈λ⌉, and N < λ gives the factor 1
        first = np.minimum(np.ceil(lam), n).astype(np.int64)
        width = np.maximum(np.minimum(np.ceil(10.0 * np.sqrt(lam) + 8.0).astype(np.int64), n + 1 - first), 1)
        flat = np.log(np.maximum(_lower(first, n, p), 1e-300))
    starts = np.concatenate([[0], np.cumsum(width)[:-1]])
    token = np.repeat(np.arange(p.size), width)
    k = (np.arange(token.size) - starts[token] + first[token]).astype(np.float64)
    pt = p[token]
    log_pmf = (special.gammaln(n + 1.0) - special.gammaln(k + 1.0) - special.gammaln(n - k + 1.0)
               + k * np.log(pt) + (n - k) * np.log1p(-pt))
    excess = lam[token] - k if lower else k - lam[token]
    log_pmf = np.where(excess >= 0, log_pmf, -np.inf)  # a window clipped at 0 or n
    edge = (first - 1 if lower else first + width).astype(np.float64)  # the first k outside the window
    # rounding, in log units: each log-pmf sums terms up to log n! + n |log p| in size, each good to a
    # few units of 2^-52 relative, and a token's factor is within that of its largest term's error
    slack = p.size * 64 * 2.0 ** -52 * (float(special.gammaln(n + 1.0)) + n * float(-np.log(p.min()))) + 1e-9

    def log_mgf(s: float) -> float:
        a = log_pmf + s * excess
        peak = np.maximum.reduceat(a, starts)
        peak = np.where(np.isfinite(peak), peak, 0.0)
        window = peak + np.log(np.add.reduceat(np.exp(a - peak[token]), starts))
        if lower:  # E[e^{s(λ − N)}; N ≤ K] ≤ e^{sλ + θK} (1 − p + p e^{−s−θ})ⁿ
            theta = np.maximum(np.log(np.maximum(lam, 1e-300) / np.maximum(edge, 1e-300)) - s, 0.0)
            rest = np.where(edge < 0, -np.inf, s * lam + theta * edge + n * np.log1p(p * np.expm1(-s - theta)))
        else:  # E[e^{s(N − λ)}; N ≥ K] ≤ e^{−sλ − θK} (1 − p + p e^{s+θ})ⁿ
            theta = np.maximum(np.log(np.maximum(edge, 1.0) / np.maximum(lam, 1e-300)) - s, 0.0)
            rest = np.where(edge > n, -np.inf, -s * lam + n * np.log1p(p * np.expm1(s + theta)) - theta * edge)
        return float(np.logaddexp(np.logaddexp(flat, window), rest).sum()) + slack

    return log_mgf


def positive_part_bound(n: int, p: np.ndarray, rate: float) -> PositivePartBound:
    """The bound above for n draws of ``p`` (positive entries, the heaviest last: split off
    where it holds SPLIT_HEAVY or more); the grid of s is refined around the s that gives
    the least critical value at ``rate``."""
    p = np.asarray(p, dtype=np.float64)
    whole = _excess_log_mgf(n, p, False)
    s = np.geomspace(0.03, 30.0, 16) / math.sqrt(max(n, 1))
    values = np.array([whole(x) for x in s])
    best = int(np.argmin((values - math.log(rate)) / s))
    s = np.concatenate([s, np.geomspace(s[max(best - 1, 0)], s[min(best + 1, s.size - 1)], 10)])
    values = np.concatenate([values, [whole(x) for x in s[16:]]])
    heavy = int(np.argmax(p))
    if p.size < 3 or p[heavy] < SPLIT_HEAVY:
        return PositivePartBound(s, values)
    rest = np.delete(p, heavy)
    above, below = _excess_log_mgf(n, rest, False), _excess_log_mgf(n, rest, True)
    near = np.concatenate([s[max(best - 2, 0):best + 3], s[16:]])  # A's and B's best s lie near D's
    return PositivePartBound(s, values, near, np.array([above(x) for x in near]), np.array([below(x) for x in near]))
