"""Instance-optimal identity testing against a known p, with a worst-case detectable TV.

The test splits p's support three ways (Valiant & Valiant 2014; Balakrishnan & Wasserman
2019): the heaviest token H, the light tail T (the lightest tokens, holding mass p(T)), and
the middle M. H and T are tested on their counts (exact two-sided binomial tests); M with
the bias-corrected, weighted chi-square, written as a U-statistic of the n draws,

    Z = Σ_{a≠b} Σ_{i∈M} w_i (1[X_a=i] − p_i)(1[X_b=i] − p_i)
      = Σ_{i∈M} w_i (N_i (N_i − 1) − 2 (n − 1) p_i N_i + n (n − 1) p_i²),

so E_q[Z] = n (n − 1) D with D = Σ_M w_i δ_i², δ = q − p, for ANY law q of the draws, and
E_p[Z] = 0 exactly. Weights are w_i = max(p_i, θ)^(−a): a = 2/3 (Valiant & Valiant's
p^(−2/3)) or a = 1 with θ = 1/n (Acharya, Daskalakis & Kamath's weighting, better where the
chi-square regime rules: few tokens, many draws). Which split and weighting is used is
fixed before looking at the counts: the one whose worst-case figure is smallest for this
(n, p) and these rates.

The guarantee (docs/gate.md derives it). Any q at TV ε has 2ε = |δ_H| + Σ_T|δ_i| + Σ_M|δ_i|,
Σ_T|δ_i| ≤ 2 p(T) + (q(T) − p(T)), and Σ_M|δ_i| ≤ √(D Σ_M 1/w_i) (Cauchy–Schwarz). So
if ε ≥ (x* + y* + 2 p(T) + s*) / 2, one of |δ_H| ≥ x*, q(T) − p(T) ≥ y*, or
D ≥ s*² / Σ_M 1/w_i holds, and the matching sub-test rejects with probability ≥ 1 − β:
x*, y* exactly (binomial power), s* from Z's exact mean and a variance bound that holds
for every q with that D (U-statistic decomposition: Var Z = 2n(n−1)(2(n−2) ζ₁ + ζ₂),
ζ₁ ≤ A D + √w_max D^{3/2}, √ζ₂ ≤ √(Σ w²p²) + √(w_max D) + D, A = max_M w_i p_i).
Two figures come from that bound:

* ``min_detectable_tv`` (also ``details["proven_tv"]``), the guarantee: Bernstein's
  inequality on Z's linear (Hájek) part and Markov's on the fourth power of its degenerate
  part (:func:`degenerate_deviation`), each at β/2: proven for independent rows;
* ``details["estimated_tv"]`` takes Z's lower tail under the alternative as normal
  (E − z_β sd ≥ c): an estimate, checked by simulation in the hardest directions
  (tests/test_power.py).

On at most 50 tokens (:mod:`specgauge.stattests.identity.subsets`) the empirical TV against
every subset's exact binomial law runs beside it, each test at half the rate: the figure
is the smaller proven one, the p-value twice the smaller. On wider laws it does so where its
figure is smaller than the others' at the whole rate; its null tail is then the smaller of
the union bound (up to 1,000 tokens) and Chernoff over the counts' negative association
(:func:`.tail_bounds.positive_part_bound`, no union over sets). Where it is not, a second plan
(:class:`CoarsePlan`) takes the split's place where its proven figure is smaller: the same
scan over a coarsening of p (the heaviest tokens one by one, the middle M and the light
tail T as two groups) and Z on M, each at half the rate; its figure is the scan's + s*/2 +
p(T), since any q's TV is its coarse TV plus at most ½ Σ_M |δ| + p(T).

The critical value of Z and its p-value come from a proven bound on Z's null upper tail
(:mod:`specgauge.stattests.identity.tail_bounds`: exact binomial truncation, Poissonization,
Chernoff), so the false-fail rate is proven. :func:`null_law` still simulates the null
(a Pearson III law with the simulated skewness): an estimate, for reading and for checking
the bound against. No asymptotic χ² is involved.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import optimize, special, stats

from specgauge.errors import InvalidDistributionError
from specgauge.stattests.identity.subsets import ALWAYS_TOKENS, SubsetTest, subset_statistic, subset_test_plan
from specgauge.stattests.identity.tail_bounds import ZTailBound, _window, z_tail_bound
from specgauge.stattests.core.statistics import (DEFAULT_FALSE_FAIL, DEFAULT_FALSE_PASS, TestResult,
                                                 _occurrence_min_tv, _validate_rates, pearson3_isf, validate_probs)

#: Null replicates simulated per (n, p).
NULL_REPLICATES = 1000
#: Light-tail masses tried for the split (besides no tail).
TAIL_MASSES = tuple(float(t) for t in np.geomspace(1e-5, 0.5, 28))
#: (weight exponent a, floor θ in units of 1/n) tried for the middle.
WEIGHTINGS = ((2.0 / 3.0, 0.0), (1.0, 1.0))


@dataclass(frozen=True)
class NullLaw:
    """The simulated null law of Z for one (n, p, split): its first three moments, and the
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
        return pearson3_isf(rate, self.skew, self.mean, self.sd)


@dataclass(frozen=True, eq=False)
class Split:
    """How one (n, p) is tested: the heaviest token (−1: none), the light tail, the middle's
    weights (0 outside M), and the worst-case figures that choice gives."""

    heavy: int
    tail: np.ndarray  # bool mask over p's positive entries
    weights: np.ndarray  # w_i on M, 0 on H and T
    exponent: float
    tail_mass: float
    heavy_shift: float  # x*: |δ_H| detected with power 1 − β
    tail_shift: float  # y*: q(T) − p(T) detected with power 1 − β
    middle_l1: float  # s*: Σ_M |δ_i| detected (normal tail: estimated)
    middle_l1_proven: float  # s* with Bernstein and the fourth-moment bound (proven)

    @property
    def parts(self) -> int:
        return 1 + (self.heavy >= 0) + bool(self.tail.any())

    @property
    def tv(self) -> float:
        """The guarantee: the proven figure."""
        return self.proven_tv

    @property
    def proven_tv(self) -> float:
        return 0.5 * (self.heavy_shift + self.tail_shift + 2 * self.tail_mass + self.middle_l1_proven)

    @property
    def estimated_tv(self) -> float:
        """The same bound with Z's lower tail under the alternative taken as normal: an estimate."""
        return 0.5 * (self.heavy_shift + self.tail_shift + 2 * self.tail_mass + self.middle_l1)


# ---------------------------------------------------------------- the statistic and its moments


def middle_statistic(counts: np.ndarray, p: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Z of each row of ``counts`` (the U-statistic above; exactly mean 0 under p)."""
    counts = np.asarray(counts, dtype=np.float64)
    n = counts.sum(axis=-1, keepdims=True)
    return (w * (counts * (counts - 1) - 2 * (n - 1) * p * counts + n * (n - 1) * p * p)).sum(axis=-1)


def identity_statistic(counts: np.ndarray, p: np.ndarray) -> float:
    """Z with Valiant & Valiant's weights p^(−2/3) over every token (no split): for reading."""
    return float(middle_statistic(counts, p, np.where(p > 0, p, 1.0) ** (-2.0 / 3.0)))


def null_variance(n: int, p: np.ndarray, w: np.ndarray) -> float:
    """Var_p Z = 2 n (n − 1) ζ₂, ζ₂ = Σ w²p² − 2 Σ w²p³ + (Σ w p²)² (ζ₁ = 0 under p)."""
    zeta2 = float((w * w * p * p).sum() - 2 * (w * w * p ** 3).sum() + (w * p * p).sum() ** 2)
    return 2.0 * n * (n - 1.0) * max(zeta2, 0.0)


def alternative_moments(n: int, p: np.ndarray, q: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """E_q Z and Var_q Z exactly, for n draws from q: n(n−1)D and 2n(n−1)(2(n−2)ζ₁ + ζ₂).

    ζ₁ = Var(w_X δ_X), ζ₂ = Var h(X, Y) with h(x, y) = Σ w (e_x − p)(e_y − p): E h² =
    Σ_ij w_i w_j M_ij², M = diag(q) − q pᵀ − p qᵀ + p pᵀ (rank two besides the diagonal).
    """
    d = q - p
    big_d = float((w * d * d).sum())
    v = w * d
    zeta1 = float((q * v * v).sum() - (q * v).sum() ** 2)
    # M = diag(q) − R, R = q pᵀ + p qᵀ − p pᵀ = Σ_k a_k b_kᵀ
    a_vecs, b_vecs = (q, p, -p), (p, q, p)
    r_diag = 2 * q * p - p * p
    cross = sum(float((w * a_vecs[k] * a_vecs[m]).sum()) * float((w * b_vecs[k] * b_vecs[m]).sum())
                for k in range(3) for m in range(3))
    eh2 = float((w * w * q * q).sum() - 2 * (w * w * q * r_diag).sum()) + cross
    zeta2 = max(eh2 - big_d * big_d, 0.0)
    return n * (n - 1.0) * big_d, 2.0 * n * (n - 1.0) * (2 * (n - 2.0) * max(zeta1, 0.0) + zeta2)


def _simulate(n: int, p: np.ndarray, w: np.ndarray, replicates: int, rng: np.random.Generator) -> np.ndarray:
    """Z of ``replicates`` Multinomial(n, p) draws, vectorised: a matrix of counts when the
    vocabulary is small, else the sorted draws themselves (only tokens drawn matter)."""
    if p.size * replicates <= 4_000_000 or n >= p.size:
        out = np.empty(replicates)
        step = max(1, 4_000_000 // p.size)
        for start in range(0, replicates, step):
            c = rng.multinomial(n, p, size=min(step, replicates - start))
            out[start:start + c.shape[0]] = middle_statistic(c, p, w)
        return out
    # Z = Σ_t w_t N_t (N_t − 1) − 2 (n − 1) Σ_draws w p + n (n − 1) Σ w p²; with each
    # replicate's draws sorted, Σ_t N_t (N_t − 1) / 2 counts, for every draw, the equal
    # draws sorted before it
    cdf = np.cumsum(p)
    constant = n * (n - 1.0) * float((w * p * p).sum())
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
        out[start:start + r] = (2 * (wt * (index - run_start)).sum(axis=1)
                                - 2 * (n - 1.0) * (wt * p[tokens]).sum(axis=1) + constant)
    return out


def replicates_for(n: int, size: int, replicates: int = NULL_REPLICATES) -> int:
    """Replicates to simulate: at least ``replicates``, more (up to 20,000) where a draw is
    cheap (few draws or few tokens), so the simulated tail reaches 1e-3 there."""
    return int(min(20_000, max(replicates, 4_000_000 // max(min(n, size), 1))))


# ---------------------------------------------------------------- the worst-case figures


def _binomial_region(n: int, p: float, rate: float) -> tuple[int, int]:
    """(a, b): reject N ≤ a or N ≥ b, each side at most ``rate`` / 2 under Binomial(n, p)
    (the exact tails, bisected: quick at any rate)."""
    low, top = _window(n, np.array([p], dtype=np.float64), rate / 2)
    return int(low[0]) - 1, int(top[0])


def binomial_pvalue(k: float, n: int, p: float) -> float:
    """Two-sided p-value of k successes: twice the smaller tail."""
    k = int(round(k))
    upper = float(special.bdtrc(k - 1, n, p)) if k > 0 else 1.0
    return float(min(1.0, 2 * min(float(special.bdtr(k, n, p)), upper)))


def _binomial_shift(n: int, p: float, rate: float, beta: float, lower: bool) -> float:
    """The smallest x with P(reject) ≥ 1 − β when the success probability is p + x (p − x
    with ``lower``); the two-sided region at ``rate``. Where no shift inside [0, 1] reaches
    that power, the whole room (p, or 1 − p) is returned: every such shift is left over."""
    a, b = _binomial_region(n, p, rate)
    room = p if lower else 1.0 - p
    if room <= 0:
        return 0.0
    if lower:  # P_{p−x}(N ≤ a) ≥ 1 − β  ⇔  p − x ≤ bdtri(a, n, 1 − β)
        if a < 0:
            return room + 1e-12
        return float(min(room + 1e-12, max(p - special.bdtri(a, n, 1 - beta), 0.0)))
    if b > n:
        return room + 1e-12
    # P_{p+x}(N ≥ b) = 1 − bdtr(b − 1, n, p + x) ≥ 1 − β  ⇔  p + x ≥ bdtri(b − 1, n, β)
    return float(min(room + 1e-12, max(special.bdtri(b - 1, n, beta) - p, 0.0)))


@dataclass(frozen=True)
class _Middle:
    """The summaries of M the variance bound needs."""

    sum_inverse: float  # Σ 1/w
    s2: float  # √Σ w²p²
    swp2: float  # Σ w p²
    a_max: float  # max w p
    w_max: float


#: Cuts τ (in units of A = max_M w p) between the middle's ordinary and spiked coordinates.
SPIKE_CUTS = (0.5, 2.0, 8.0, math.inf)
_D_GRID = 1500


def _parts(n: int, m: _Middle, critical: float, beta: float, proven: bool, tau: float,
           d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(g(D), h(D)) on the grid ``d``: lower bounds on the power margin's ordinary part
    (coordinates with w δ ≤ τ, their D_G = D; the critical value is charged here) and its
    spiked part (w δ > τ, D_B = D). Var Z = 2n(n−1)(2(n−2)ζ₁ + ζ₂) with
    ζ₁ ≤ Σ w² q δ² ≤ (A + τ) D_G + (1 + A/τ) √w_max D_B^{3/2} and
    √ζ₂ ≤ √Σw²p² + √(w_max D_G) + D_G + √(w_max D_B) + D_B; √ of a sum ≤ the sum of √."""
    nn, lin = n * (n - 1.0), 4.0 * n * (n - 1.0) ** 2
    deg_g = math.sqrt(2.0 * nn) * (m.s2 + np.sqrt(m.w_max * d) + d)
    deg_b = math.sqrt(2.0 * nn) * (np.sqrt(m.w_max * d) + d)
    if math.isinf(tau):  # no coordinate spiked: ζ₁ ≤ A D + Σ w² δ³ ≤ A D + √w_max D^{3/2}
        lin_g = lin * (m.a_max * d + math.sqrt(m.w_max) * d ** 1.5)
        lin_b = np.zeros_like(d)
    else:
        lin_g = lin * (m.a_max + tau) * d
        lin_b = lin * (1 + m.a_max / tau) * math.sqrt(m.w_max) * d ** 1.5
    if proven:  # Bernstein on the linear part, a fourth-moment (Markov) bound on the degenerate part
        half = beta / 2
        log_b = math.log(1 / half)
        range_g = 2 * (n - 1.0) * (d + np.sqrt(m.swp2 * d) + m.a_max)
        range_b = 2 * (n - 1.0) * (d + np.sqrt(m.swp2 * d))
        deviation = degenerate_deviation(n, m, half, d)  # concave in D: split as f(D_G) + f(D_B) − f(0)
        g = nn * d - critical - (2 * range_g * log_b / 3 + np.sqrt(2 * log_b * lin_g)) - deviation
        h = nn * d - (2 * range_b * log_b / 3 + np.sqrt(2 * log_b * lin_b)) - (deviation - deviation[0])
    else:
        z = float(stats.norm.isf(beta))
        g = nn * d - critical - z * np.sqrt(lin_g + deg_g ** 2)
        h = nn * d - z * (np.sqrt(lin_b) + deg_b)
    return g, h


def degenerate_deviation(n: int, m: _Middle, beta: float, d: np.ndarray) -> np.ndarray:
    """t(D) with P(U ≤ −t) ≤ β for the degenerate part U = Σ_{a≠b} k(X_a, X_b) of Z under
    every q with Σ_M w δ² = D, k(x, y) = Σ_M w (e_x − q)(e_y − q) (Markov on U⁴).

    E U⁴ = 16 E(Σ_{a<b} k)⁴ sums over the edge multisets of four pairs whose every vertex
    has degree ≥ 2 (degeneracy kills the rest): one pair four times, C(n,2) m₄; two disjoint
    pairs twice, 3 C(n,2) C(n−2,2) m₂²; two pairs sharing a vertex twice, 6 n C(n−1,2) m₂₂;
    a triangle with one pair doubled, 36 C(n,3) m₂₁₁; a 4-cycle, 72 C(n,4) tr K⁴. With
    G = W^½ Cov_q W^½ ≼ diag(w q), λ = ‖G‖ ≤ max w q ≤ A + √(w_max D), R² = sup ‖e_x − q‖²_W ≤
    w_max + Σ w q² ≤ w_max + (√Σwp² + √D)² and m₂ = E k² = tr G² ≤ S², S = √Σw²p² + √(w_max D) + D:
    m₄ ≤ R⁴ m₂, m₂₂ and |m₂₁₁| ≤ λ R² m₂, tr K⁴ ≤ λ² m₂. So t = (E U⁴ / β)^¼ ≤
    β^−¼ (12^¼ √(n(n−1)) S + 2 √(S Y)), Y = √C(n,2) R² + √(6n C(n−1,2) + 36 C(n,3)) √(λ R²) +
    √(72 C(n,4)) λ: a sum of concave functions of D, so concave.
    """
    nf = float(n)
    s = m.s2 + np.sqrt(m.w_max * d) + d
    lam = m.a_max + np.sqrt(m.w_max * d)
    r2 = m.w_max + (math.sqrt(m.swp2) + np.sqrt(d)) ** 2
    c2, c3, c4 = nf * (nf - 1) / 2, nf * (nf - 1) * (nf - 2) / 6, nf * (nf - 1) * (nf - 2) * (nf - 3) / 24
    mixed = 6 * nf * (nf - 1) * (nf - 2) / 2 + 36 * c3
    y = math.sqrt(c2) * r2 + math.sqrt(mixed) * np.sqrt(lam * r2) + math.sqrt(72 * max(c4, 0.0)) * lam
    return beta ** -0.25 * (12 ** 0.25 * math.sqrt(nf * (nf - 1)) * s + 2 * np.sqrt(s * y))


def _suffix_min_at(values: np.ndarray, grid: np.ndarray, at: np.ndarray) -> np.ndarray:
    """min of ``values`` over grid points ≥ the grid point just below each of ``at``
    (a lower bound on the minimum over [at, ∞): conservative)."""
    suffix = np.minimum.accumulate(values[::-1])[::-1]
    index = np.clip(np.searchsorted(grid, at, side="right") - 1, 0, grid.size - 1)
    return np.where(at <= 0, min(float(suffix[0]), 0.0) if at.size else 0.0, suffix[index])


#: The grids of :func:`_middle_shift`: D, s, and each s split between spiked and ordinary parts.
_D_POINTS = np.concatenate([[0.0], np.geomspace(1e-13, 1e5, _D_GRID)])
_S_POINTS = np.geomspace(1e-6, 2.0, 900)
_S_SPIKED = _S_POINTS[:, None] * np.linspace(0.0, 1.0, 41)[None, :]
_S_ORDINARY = _S_POINTS[:, None] - _S_SPIKED


def _middle_shift(n: int, m: _Middle, critical: float, beta: float, proven: bool,
                  cuts: tuple[float, ...] = SPIKE_CUTS) -> float:
    """s*: the Σ_M |δ| from which Z exceeds ``critical`` with probability ≥ 1 − β for every q.

    For a split s = s_G + s_B of Σ_M|δ| between ordinary and spiked coordinates,
    D_G ≥ s_G² / Σ_M 1/w (Cauchy–Schwarz) and D_B ≥ τ s_B (w δ² > τ δ there), so the margin
    is at least min over the split of g*(s_G) + h*(s_B), g* and h* the least g and h
    beyond those D (non-decreasing, so the bound rises with s); the largest over τ is kept.
    """
    if n < 2 or m.sum_inverse <= 0:
        return math.inf
    grid, s_grid, s_b, s_g = _D_POINTS, _S_POINTS, _S_SPIKED, _S_ORDINARY
    best = np.full(s_grid.size, -np.inf)
    for cut in cuts:
        tau = cut * max(m.a_max, 1e-300)
        g, h = _parts(n, m, critical, beta, proven, tau, grid)
        if math.isinf(tau):
            best = np.maximum(best, _suffix_min_at(g, grid, s_grid ** 2 / m.sum_inverse))
            continue
        g_star = _suffix_min_at(g, grid, (s_g ** 2 / m.sum_inverse).ravel()).reshape(s_g.shape)
        h_star = _suffix_min_at(h, grid, (tau * s_b).ravel()).reshape(s_b.shape)
        best = np.maximum(best, (g_star + h_star).min(axis=1))
    ok = best >= 0
    if not ok.any() or not ok[-1]:
        return math.inf
    bad = np.flatnonzero(~ok)
    return float(s_grid[bad.max() + 1]) if bad.size else float(s_grid[0])


def _analytic_critical(n: int, p: np.ndarray, w: np.ndarray, rate: float) -> float:
    """Z's critical value from its exact variance and the Poissonized third cumulant
    (κ₃ = Σ w³ (4λ² + 8λ³)): for choosing a split and for sizing, never for a verdict."""
    lam = n * p
    return _critical_from(n, float((w * w * p * p).sum()), float((w * w * p ** 3).sum()), float((w * p * p).sum()),
                          float((w ** 3 * (4 * lam ** 2 + 8 * lam ** 3)).sum()), rate)


def _critical_from(n: int, w2p2: float, w2p3: float, wp2: float, k3: float, rate: float) -> float:
    var = 2.0 * n * (n - 1.0) * max(w2p2 - 2 * w2p3 + wp2 * wp2, 0.0)
    if var <= 0:
        return 0.0
    return pearson3_isf(rate, k3 / var ** 1.5, 0.0, math.sqrt(var))


def _weights(p: np.ndarray, n: int, exponent: float, floor: float) -> np.ndarray:
    return np.maximum(p, floor / max(n, 1)) ** (-exponent)


def _candidates(n: int, p: np.ndarray, rate: float, beta: float):
    """Every (heavy, tail size, weighting) tried over ``p`` sorted ascending, with the
    middle's summaries and the sums its null variance and third cumulant need: the split
    is chosen on these alone, before any count is seen."""
    for split_heavy in (False, True):
        size = p.size - 1 if split_heavy and p.size > 1 else p.size
        heavy = p.size - 1 if split_heavy and p.size > 1 else -1
        ps = p[:size]
        cum = np.cumsum(ps)
        cuts = sorted({0, *(int(np.searchsorted(cum, t, side="right")) for t in TAIL_MASSES)})
        cuts = [t for t in cuts if t < size]
        lam = n * ps
        for exponent, floor in WEIGHTINGS:
            w = _weights(ps, n, exponent, floor)

            def suffix(x: np.ndarray) -> np.ndarray:
                return np.cumsum(x[::-1])[::-1]

            inv, w2p2, w2p3, wp2 = suffix(1 / w), suffix(w * w * ps * ps), suffix(w * w * ps ** 3), suffix(w * ps * ps)
            k3 = suffix(w ** 3 * (4 * lam ** 2 + 8 * lam ** 3))
            a_max = np.maximum.accumulate((w * ps)[::-1])[::-1]
            w_max = np.maximum.accumulate(w[::-1])[::-1]
            for t in cuts:
                middle = _Middle(float(inv[t]), math.sqrt(float(w2p2[t])), float(wp2[t]), float(a_max[t]),
                                 float(w_max[t]))
                yield (heavy, t, (float(cum[t - 1]) if t else 0.0), exponent, floor, middle,
                       (float(w2p2[t]), float(w2p3[t]), float(wp2[t]), float(k3[t])))


def _split_figures(n: int, p: np.ndarray, heavy: int, tail_mass: float, parts: int, rate: float,
                   beta: float) -> tuple[float, float]:
    """(x*, y*) of the heavy and tail count tests, each at ``rate`` / ``parts``."""
    share = rate / parts
    x = 0.0
    if heavy >= 0:
        x = max(_binomial_shift(n, float(p[heavy]), share, beta, False),
                _binomial_shift(n, float(p[heavy]), share, beta, True))
    y = _binomial_shift(n, tail_mass, share, beta, False) if tail_mass > 0 else 0.0
    return x, y


@lru_cache(maxsize=512)
def _choose(n: int, key: bytes, rate: float, beta: float) -> tuple:
    """The split with the smallest analytic worst-case figure (heavy, tail cut, weighting)."""
    p = np.frombuffer(key, dtype=np.float64)
    best, best_tv = None, math.inf
    binom_cache: dict = {}
    for heavy, t, tail_mass, exponent, floor, m, sums in _candidates(n, p, rate, beta):
        parts = 1 + (heavy >= 0) + (t > 0)
        ck = (heavy, tail_mass, parts)
        if ck not in binom_cache:
            binom_cache[ck] = _split_figures(n, p, heavy, tail_mass, parts, rate, beta)
        x, y = binom_cache[ck]
        if 0.5 * (x + y + 2 * tail_mass) >= best_tv:
            continue
        critical = _critical_from(n, *sums, rate / parts)
        s = _middle_shift(n, m, critical, beta, proven=True, cuts=(math.inf,))  # the quick bound, to choose
        tv = 0.5 * (x + y + 2 * tail_mass + s)
        if tv < best_tv:
            best, best_tv = (heavy, t, exponent, floor), tv
    return best if best is not None else (-1, 0, 2.0 / 3.0, 0.0)


@lru_cache(maxsize=512)
def _null_cached(n: int, key: bytes, heavy: int, t: int, exponent: float, floor: float, seed: int,
                 replicates: int) -> tuple[NullLaw, np.ndarray, np.ndarray]:
    """(null law of Z, weights, tail mask) for one split, simulated from [seed, n, crc(p)]."""
    p = np.frombuffer(key, dtype=np.float64)
    w, tail = _layout(n, p, heavy, t, exponent, floor)
    replicates = replicates_for(n, p.size, replicates)
    z = _simulate(n, p, w, replicates, np.random.default_rng([seed, n, zlib.crc32(key)]))
    var = null_variance(n, p, w)
    sd = math.sqrt(var)
    skew = float((z ** 3).mean() / var ** 1.5) if var > 0 else 0.0
    skew += 2.0 * math.sqrt(6.0 / replicates)
    # where few draws dominate Z (sparse tails, small n) the third moment understates the
    # right tail: raise the skewness until the law's tail holds the simulated tail rates
    for rate in (1e-2, 1e-3):
        if var > 0 and replicates * rate >= 10:
            quantile = float(np.quantile(z, 1.0 - rate))
            while stats.pearson3.sf(quantile, skew, loc=0.0, scale=sd) < rate and skew < 50:
                skew = skew * 1.1 + 0.05
    return NullLaw(0.0, sd, skew, replicates), w, tail


def _middle_summary(p: np.ndarray, w: np.ndarray) -> _Middle:
    on = w > 0
    pm, wm = p[on], w[on]
    if not on.any():
        return _Middle(0.0, 0.0, 0.0, 0.0, 0.0)
    return _Middle(float((1 / wm).sum()), math.sqrt(float((wm * wm * pm * pm).sum())), float((wm * pm * pm).sum()),
                   float((wm * pm).max()), float(wm.max()))


def _layout(n: int, p: np.ndarray, heavy: int, t: int, exponent: float, floor: float) -> tuple[np.ndarray, np.ndarray]:
    """(weights, tail mask) of one split over ``p`` sorted ascending."""
    rest = np.arange(p.size - 1 if heavy >= 0 else p.size)
    tail = np.zeros(p.size, dtype=bool)
    tail[rest[:t]] = True
    w = np.zeros_like(p)
    w[rest[t:]] = _weights(p[rest[t:]], n, exponent, floor)
    return w, tail


@lru_cache(maxsize=1024)
def _plan(n: int, key: bytes, rate: float, beta: float) -> tuple[Split, ZTailBound, float]:
    """The split, the proven bound on Z's null tail and the middle's critical value from it
    (P(Z ≥ critical) ≤ the middle's share of ``rate``, proven), for one (n, p)."""
    p = np.frombuffer(key, dtype=np.float64)
    heavy, t, exponent, floor = _choose(n, key, rate, beta)
    w, tail = _layout(n, p, heavy, t, exponent, floor)
    tail_mass = float(p[tail].sum())
    parts = 1 + (heavy >= 0) + bool(tail.any())
    x, y = _split_figures(n, p, heavy, tail_mass, parts, rate, beta)
    bound = z_tail_bound(n, p, w, rate / parts, math.sqrt(null_variance(n, p, w)))
    critical = bound.critical(rate / parts)
    m = _middle_summary(p, w)
    split = Split(heavy, tail, w, exponent, tail_mass, x, y, _middle_shift(n, m, critical, beta, False),
                  _middle_shift(n, m, critical, beta, True))
    return split, bound, critical


def null_law(n: int, p: np.ndarray, seed: int = 0, replicates: int = NULL_REPLICATES,
             false_fail_rate: float = DEFAULT_FALSE_FAIL, false_pass_rate: float = DEFAULT_FALSE_PASS) -> NullLaw:
    """The simulated null law of the middle's Z for n draws of ``p`` (positive entries only)
    under the split chosen for these rates, with its Pearson III tail: an estimate, for
    reading and for checking the proven bound against; cached per (n, p, seed)."""
    return split_for(n, p, seed, replicates, false_fail_rate, false_pass_rate)[1]


def _sorted(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(order, p[order] ascending): every figure and null law depends on p only up to a
    permutation, so positions whose p is a relabelling of another's share them."""
    order = np.argsort(p, kind="stable")
    return order, np.ascontiguousarray(p[order], dtype=np.float64)


def split_for(n: int, p: np.ndarray, seed: int = 0, replicates: int = NULL_REPLICATES,
              false_fail_rate: float = DEFAULT_FALSE_FAIL,
              false_pass_rate: float = DEFAULT_FALSE_PASS) -> tuple[Split, NullLaw, float]:
    """(split, simulated null law of Z (an estimate), Z's proven critical value) for ``p``'s
    positive entries sorted ascending (the split's masks and weights are in that order)."""
    split, critical = proven_split(n, p, false_fail_rate, false_pass_rate)
    _, ps = _sorted(np.asarray(p, dtype=np.float64)[np.asarray(p) > 0])
    heavy, t, exponent, floor = _choose(int(n), ps.tobytes(), float(false_fail_rate), float(false_pass_rate))
    law = _null_cached(int(n), ps.tobytes(), heavy, t, exponent, floor, int(seed), int(replicates))[0]
    return split, law, critical


def proven_split(n: int, p: np.ndarray, false_fail_rate: float = DEFAULT_FALSE_FAIL,
                 false_pass_rate: float = DEFAULT_FALSE_PASS) -> tuple[Split, float]:
    """(split, Z's proven critical value) for ``p``'s positive entries sorted ascending; no
    simulation."""
    _, ps = _sorted(np.asarray(p, dtype=np.float64)[np.asarray(p) > 0])
    split, _, critical = _plan(int(n), ps.tobytes(), float(false_fail_rate), float(false_pass_rate))
    return split, critical


# ---------------------------------------------------------------- wide laws: coarse scan and Z


#: Heaviest tokens the coarse scan of a wide law tests one by one (groups of the subset scan
#: beside the middle M and the light tail T: at most 50, the scan's limit). The first is
#: tried with every tail mass and weighting, the rest near the best of those.
HEAD_SIZES = (16, 8, 24, 32, 40, 48)


@dataclass(frozen=True, eq=False)
class CoarsePlan:
    """How a wide law (more than 50 tokens) is tested beside the split: the subset scan over
    the coarse law (the K heaviest tokens one by one, M and T as two groups) and Z on M, each
    at half the rate. Any q at TV ε has ε = ε_c + ε_w, its coarse TV and the rest, and
    ε_w ≤ ½ Σ_M |δ_i| + p(T); so the guarantee is the scan's ε_c* + s*/2 + p(T)."""

    heads: int
    groups: np.ndarray  # group of each token of p sorted ascending: 0 = T, 1 = M, 2 … = the heads
    masses: np.ndarray  # p-mass of each group
    coarse: SubsetTest
    split: Split  # Z on M (no heavy token; tail T by its mass): its weights and s*
    critical: float
    bound: ZTailBound

    @property
    def proven_tv(self) -> float:
        return self.coarse.proven_tv + 0.5 * self.split.middle_l1_proven + self.split.tail_mass

    @property
    def estimated_tv(self) -> float:
        """The same with Z's lower tail under the alternative taken as normal: an estimate."""
        return self.coarse.proven_tv + 0.5 * self.split.middle_l1 + self.split.tail_mass

    def coarse_counts(self, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(group counts, group masses), the groups in ascending mass (the scan's order)."""
        c = np.bincount(self.groups, weights=counts, minlength=self.masses.size)
        order = np.argsort(self.masses, kind="stable")
        return c[order], self.masses[order]


def _coarse_groups(p: np.ndarray, heads: int, t: int) -> tuple[np.ndarray, np.ndarray]:
    """(group of each token, group masses) for ``p`` sorted ascending: T = the t lightest
    (group 0, empty when t = 0), M the rest but the ``heads`` heaviest (group 1), each head a group."""
    v = p.size
    groups = np.ones(v, dtype=np.int64)
    groups[:t] = 0
    groups[v - heads:] = 2 + np.arange(heads)
    masses = np.bincount(groups, weights=p, minlength=heads + 2)
    if t == 0:  # no tail: drop its empty group
        groups -= 1
        masses = masses[1:]
    return groups, masses


@lru_cache(maxsize=1024)
def _coarse_scale(key: bytes, heads: int, rate: float, beta: float, n0: int) -> float:
    """√n0 times the scan's figure on the heads and the rest at n0 draws: the choice reads
    it as the figure at n over √n (n0 the power of two nearest n), one scan a law and octave."""
    p = np.frombuffer(key, dtype=np.float64)
    plan = subset_test_plan(n0, np.sort(np.append(p[-heads:], p[:-heads].sum())), rate / 2, beta)
    return plan.proven_tv * math.sqrt(n0) if plan is not None else math.inf


@lru_cache(maxsize=512)
def _coarse_choose(n: int, key: bytes, rate: float, beta: float) -> tuple | None:
    """(heads, tail cut, weighting) of the coarse plan with the smallest analytic figure: the
    scan over the heads and the rest (scaled from the nearest power of two of n), Z on M from
    its analytic critical value, both at half ``rate``; chosen from n, p and the rates alone. Every tail mass and weighting is tried
    at the first head count, then the three tail masses nearest the best at each other."""
    p = np.frombuffer(key, dtype=np.float64)
    best, best_tv, near = None, math.inf, None
    for heads in HEAD_SIZES:
        if p.size - heads < 3:
            break
        coarse = _coarse_scale(key, heads, rate, beta, 2 ** round(math.log2(max(n, 2)))) / math.sqrt(n)
        if coarse >= best_tv:
            continue
        found = None
        for heavy, t, tail_mass, exponent, floor, m, sums in _candidates(n, p[:-heads], rate, beta):
            index = int(np.searchsorted(TAIL_MASSES, tail_mass * (1 - 1e-9))) if t else -1
            if heavy >= 0 or p.size - heads - t < 2 or coarse + tail_mass >= best_tv:
                continue
            if near is not None and abs(index - near) > 1:
                continue
            s = _middle_shift(n, m, _critical_from(n, *sums, rate / 2), beta, proven=True, cuts=(math.inf,))
            tv = coarse + 0.5 * s + tail_mass
            if tv < best_tv:
                best, best_tv, found = (heads, t, exponent, floor), tv, index
        if near is None:
            near = found
    return best


@lru_cache(maxsize=512)
def _coarse_plan(n: int, key: bytes, rate: float, beta: float) -> CoarsePlan | None:
    """The coarse plan for one (n, p) and its proven figures (the scan exact, Z's critical
    value from its proven null tail), or None where the law is too narrow for one."""
    p = np.frombuffer(key, dtype=np.float64)
    chosen = _coarse_choose(n, key, rate, beta)
    if chosen is None:
        return None
    heads, t, exponent, floor = chosen
    groups, masses = _coarse_groups(p, heads, t)
    coarse = subset_test_plan(n, np.sort(masses), rate / 2, beta)
    middle = np.zeros(p.size, dtype=bool)
    middle[t:p.size - heads] = True
    w = np.zeros_like(p)
    w[middle] = _weights(p[middle], n, exponent, floor)
    tail = np.zeros(p.size, dtype=bool)
    tail[:t] = True
    bound = z_tail_bound(n, p, w, rate / 2, math.sqrt(null_variance(n, p, w)))
    critical = bound.critical(rate / 2)
    m = _middle_summary(p, w)
    split = Split(-1, tail, w, exponent, float(p[:t].sum()), 0.0, 0.0,
                  _middle_shift(n, m, critical, beta, False), _middle_shift(n, m, critical, beta, True))
    return CoarsePlan(heads, groups, masses, coarse, split, critical, bound)


def _coarse_fast(n: int, p: np.ndarray, rate: float, beta: float, proven: bool = True) -> float:
    """The coarse plan's figure with Z's analytic critical value (``proven=False``: and Z's
    lower tail taken as normal): for sizing."""
    chosen = _coarse_choose(n, p.tobytes(), rate, beta)
    if chosen is None:
        return math.inf
    heads, t, exponent, floor = chosen
    _, masses = _coarse_groups(p, heads, t)
    coarse = subset_test_plan(n, np.sort(masses), rate / 2, beta)
    w = np.zeros_like(p)
    w[t:p.size - heads] = _weights(p[t:p.size - heads], n, exponent, floor)
    s = _middle_shift(n, _middle_summary(p, w), _analytic_critical(n, p, w, rate / 2), beta, proven)
    return coarse.proven_tv + 0.5 * s + float(p[:t].sum())


# ---------------------------------------------------------------- the test


def _tv_text(tv: float) -> str:
    """A TV bound of 1 or more bounds nothing: "none"."""
    return f"{tv:.3g}" if math.isfinite(tv) and tv < 1 else "none (>= 1)"


def identity_test(
    counts: np.ndarray, probs: np.ndarray, *, false_fail_rate: float = DEFAULT_FALSE_FAIL,
    false_pass_rate: float = DEFAULT_FALSE_PASS, seed: int = 0, replicates: int = NULL_REPLICATES,
) -> TestResult:
    """Identity test of ``counts`` against the known ``probs``, at a proven false-fail rate.

    Any count on a token of probability zero fails at once. The p-value is the Bonferroni
    combination of the heaviest token's, the light tail's (exact binomial, two-sided) and
    the middle's Z (a proven bound on its null tail, :mod:`.tail_bounds`; ``seed`` and
    ``replicates`` are kept for callers and no longer used). ``min_detectable_tv`` is the proven worst case over
    every alternative with independent rows; ``details["estimated_tv"]`` the same bound
    with Z's lower tail under the alternative taken as normal. It scales as ‖p^(−max)_(−ε)‖_(2/3) / ε²
    draws on peaked laws, √V/ε² on uniform ones, O(log 1/rate).

    Examples
    --------
    >>> import numpy as np
    >>> p = np.full(6, 1 / 6)
    >>> r = identity_test(np.random.default_rng(0).multinomial(6000, p), p, seed=1)
    >>> r.passed, round(r.min_detectable_tv, 3)
    (True, 0.055)
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
    measured = float(0.5 * np.abs(counts / n - probs).sum())
    if p.size == 1:  # one possible token: only impossible hits can show a difference
        detectable = _occurrence_min_tv(n, false_pass_rate)
        return TestResult("identity", math.inf if hits else 0.0, 0.0 if hits else 1.0, n, false_fail_rate,
                          detectable, None, {"impossible_hits": hits, "measured_tv": measured,
                                             "proven_tv": detectable})
    order, p = _sorted(p)
    c = c[order]
    rate = float(false_fail_rate)
    subsets = _subsets_used(n, p.tobytes(), rate, float(false_pass_rate))
    if subsets is not None:  # both tests at half the rate each: the subsets' worst case, Z's power on diffuse biases
        rate /= 2
    split, bound, critical = _plan(n, p.tobytes(), rate, float(false_pass_rate))
    wide = subsets is None and p.size > ALWAYS_TOKENS
    coarse = _coarse_plan(n, p.tobytes(), rate, float(false_pass_rate)) if wide else None
    if coarse is not None and coarse.proven_tv < split.proven_tv:  # chosen from n, p and the rates alone
        return _coarse_result(coarse, c, p, n, hits, measured, false_fail_rate)
    z = float(middle_statistic(c, p, split.weights))
    pvalues = {"middle": bound.sf(z)}
    if split.heavy >= 0:
        pvalues["heavy"] = binomial_pvalue(c[split.heavy], n, float(p[split.heavy]))
    if split.tail.any():
        pvalues["tail"] = binomial_pvalue(float(c[split.tail].sum()), n, split.tail_mass)
    worst = min(pvalues, key=pvalues.get)
    pvalue = min(1.0, len(pvalues) * pvalues[worst])
    proven_tv, estimated_tv = split.proven_tv, split.estimated_tv
    message = (f"worst-case TV {_tv_text(split.proven_tv)} proven (exact binomials; Bernstein and a fourth-moment "
               f"bound on Z), {_tv_text(split.estimated_tv)} estimated (normal tail of Z)")
    details = {"plan": "split"}
    if subsets is not None:
        d = subset_statistic(c, p)
        by_subsets = subsets.pvalue(d)
        if by_subsets < pvalue:
            worst = "subsets"
        pvalue = min(1.0, 2 * min(pvalue, by_subsets))
        proven_tv, estimated_tv = min(proven_tv, subsets.proven_tv), min(estimated_tv, subsets.proven_tv)
        details = {"plan": "subsets and split", "subsets_statistic": d, "subsets_critical": subsets.critical,
                   "subsets_tv": subsets.proven_tv, "split_tv": split.proven_tv}
        message = (f"worst-case TV {_tv_text(proven_tv)} proven (the sharper of two tests at half the rate each: "
                   f"the empirical TV against every subset of p's {p.size} tokens, {_subsets_basis(subsets)}, "
                   f"{_tv_text(subsets.proven_tv)}; the split test, Bernstein and a fourth-moment bound on Z, "
                   f"{_tv_text(split.proven_tv)})")
    details.update({"null_sd": math.sqrt(null_variance(n, p, split.weights)), "critical": critical,
                    "impossible_hits": hits, "false_fail_basis": "proven", "measured_tv": measured,
                    "proven_tv": proven_tv, "estimated_tv": estimated_tv, "tail_mass": split.tail_mass,
                    "tail_tokens": float(split.tail.sum()), "middle_tokens": float((split.weights > 0).sum()),
                    "weight_exponent": split.exponent, "heavy_shift": split.heavy_shift,
                    "tail_shift": split.tail_shift, "middle_l1": split.middle_l1,
                    "message": f"{message}; false-fail rate proven; rows assumed independent; smallest p-value: {worst}"})
    return TestResult("identity", math.inf if hits else z, 0.0 if hits else pvalue, n, false_fail_rate, proven_tv,
                      None, details)


def _subsets_basis(plan: SubsetTest) -> str:
    """How the subset test's null tail is bounded, for the row's message."""
    if plan.chernoff is None:
        return "exact binomials"
    if not plan.union:
        return "Chernoff over the counts' negative association and exact binomials"
    return "exact binomials or Chernoff over the counts' negative association"


def _coarse_result(plan: CoarsePlan, c: np.ndarray, p: np.ndarray, n: int, hits: float, measured: float,
                   false_fail_rate: float) -> TestResult:
    """The identity row of a wide law tested by the coarse plan: the scan's and Z's proven
    p-values, each test at half the rate (Bonferroni: twice the smaller)."""
    z = float(middle_statistic(c, p, plan.split.weights))
    counts, masses = plan.coarse_counts(c)
    d = subset_statistic(counts, masses)
    pvalues = {"coarse": plan.coarse.pvalue(d), "middle": plan.bound.sf(z)}
    worst = min(pvalues, key=pvalues.get)
    pvalue = min(1.0, 2 * pvalues[worst])
    message = (f"worst-case TV {_tv_text(plan.proven_tv)} proven (two tests at half the rate each: the empirical TV "
               f"of the coarse law, the {plan.heads} heaviest tokens one by one and the rest in two groups, against "
               f"every subset's exact binomial law, {_tv_text(plan.coarse.proven_tv)}; Z on the rest with Bernstein "
               f"and a fourth-moment bound, plus the light tail's mass), {_tv_text(plan.estimated_tv)} estimated "
               f"(normal tail of Z)")
    on = plan.split.weights > 0
    details = {"plan": "coarse scan and Z", "coarse_statistic": d, "coarse_critical": plan.coarse.critical,
               "coarse_tv": plan.coarse.proven_tv, "heads": float(plan.heads),
               "null_sd": math.sqrt(null_variance(n, p, plan.split.weights)), "critical": plan.critical,
               "impossible_hits": hits, "false_fail_basis": "proven", "measured_tv": measured,
               "proven_tv": plan.proven_tv, "estimated_tv": plan.estimated_tv, "tail_mass": plan.split.tail_mass,
               "tail_tokens": float(plan.split.tail.sum()), "middle_tokens": float(on.sum()),
               "weight_exponent": plan.split.exponent, "middle_l1": plan.split.middle_l1,
               "message": f"{message}; false-fail rate proven; rows assumed independent; smallest p-value: {worst}"}
    return TestResult("identity", math.inf if hits else z, 0.0 if hits else pvalue, n, false_fail_rate,
                      plan.proven_tv, None, details)


def min_discrepancy_of_identity_test(n: int, probs: np.ndarray, *, false_fail_rate: float = DEFAULT_FALSE_FAIL,
                                     false_pass_rate: float = DEFAULT_FALSE_PASS, proven: bool = True,
                                     fast: bool = False) -> float:
    """Worst-case TV :func:`identity_test` detects from ``n`` draws: the proven figure, the
    identity row's own (its proven critical value; ``fast`` takes Z's critical value from
    its analytic Pearson III form instead, a few times quicker, for planning), or with
    ``proven=False`` the estimate (analytic critical value, Z's lower tail under the
    alternative taken as normal)."""
    _validate_rates(false_fail_rate, false_pass_rate)
    p = validate_probs(probs)
    _, p = _sorted(p[p > 0])
    n = int(n)
    if n <= 1:
        return math.inf
    if p.size == 1:
        return _occurrence_min_tv(n, false_pass_rate)
    if proven and not fast:
        subsets = _subsets_used(n, p.tobytes(), float(false_fail_rate), float(false_pass_rate))
        if subsets is not None:  # the two tests share the rate
            return min(subsets.proven_tv, _plan(n, p.tobytes(), float(false_fail_rate) / 2,
                                                         float(false_pass_rate))[0].proven_tv)
        return _without_subsets(n, p.tobytes(), float(false_fail_rate), float(false_pass_rate))
    # for sizing: the subset test's figure is exact; the split test's and the coarse plan's
    # take Z's analytic critical value (and with ``proven=False`` its normal lower tail)
    subsets = subset_test_plan(n, p, false_fail_rate / 2, false_pass_rate)
    small = subsets.proven_tv if subsets is not None else math.inf
    if subsets is None or p.size > ALWAYS_TOKENS:
        alone = _split_fast(n, p, float(false_fail_rate), float(false_pass_rate), proven)
        if p.size > ALWAYS_TOKENS:
            alone = min(alone, _coarse_fast(n, p, float(false_fail_rate), float(false_pass_rate), proven))
        if subsets is None or small >= alone:
            return alone
    return min(small, _split_fast(n, p, false_fail_rate / 2, float(false_pass_rate), proven))


def _split_fast(n: int, p: np.ndarray, false_fail_rate: float, false_pass_rate: float, proven: bool) -> float:
    """The split test's figure with Z's analytic critical value: for sizing."""
    heavy, t, exponent, floor = _choose(n, p.tobytes(), float(false_fail_rate), float(false_pass_rate))
    w, tail = _layout(n, p, heavy, t, exponent, floor)
    tail_mass = float(p[tail].sum())
    parts = 1 + (heavy >= 0) + (t > 0)
    x, y = _split_figures(n, p, heavy, tail_mass, parts, false_fail_rate, false_pass_rate)
    s = _middle_shift(n, _middle_summary(p, w), _analytic_critical(n, p, w, false_fail_rate / parts),
                      false_pass_rate, proven)
    return 0.5 * (x + y + 2 * tail_mass + s)


def _without_subsets(n: int, key: bytes, rate: float, beta: float) -> float:
    """The proven figure of the split test, or of the coarse plan where it is sharper (wide laws)."""
    figure = _plan(n, key, rate, beta)[0].proven_tv
    if len(key) // 8 > ALWAYS_TOKENS:
        coarse = _coarse_plan(n, key, rate, beta)
        figure = min(figure, coarse.proven_tv if coarse is not None else math.inf)
    return figure


@lru_cache(maxsize=1024)
def _subsets_used(n: int, key: bytes, rate: float, beta: float) -> SubsetTest | None:
    """The subset test's plan at half ``rate`` where the identity row runs it beside the split
    test (each at half the rate), else None: always on at most ALWAYS_TOKENS tokens; on wider
    laws where its proven figure is smaller than that of the split test or the coarse plan at
    the whole rate. Chosen from n, p and the rates alone."""
    plan = subset_test_plan(n, np.frombuffer(key, dtype=np.float64), rate / 2, beta)
    if plan is None or len(key) // 8 <= ALWAYS_TOKENS:
        return plan
    return plan if plan.proven_tv < _without_subsets(n, key, rate, beta) else None


def min_num_samples_for_identity_test(tv: float, probs: np.ndarray, *, false_fail_rate: float = DEFAULT_FALSE_FAIL,
                                      false_pass_rate: float = DEFAULT_FALSE_PASS, proven: bool = True,
                                      tolerance: float = 0.01) -> int:
    """Draws :func:`identity_test` needs to detect every alternative at ``tv``: about
    ‖p^(−max)_(−tv)‖_(2/3) / tv² (√V/tv² when p is uniform), O(log 1/false_fail_rate);
    found to within ``tolerance`` (relative), rounded up."""
    if not 0 < tv < 1:
        raise InvalidDistributionError(f"tv must lie in (0, 1), got {tv!r}")
    p = validate_probs(probs)
    _, ps = _sorted(p[p > 0])
    return _samples_for(float(tv), ps.tobytes(), float(false_fail_rate), float(false_pass_rate), bool(proven),
                        float(tolerance))


@lru_cache(maxsize=256)
def _samples_for(tv: float, key: bytes, rate: float, beta: float, proven: bool, tolerance: float) -> int:
    """Cached per sorted p: positions whose p is a relabelling of another's share it."""
    p = np.frombuffer(key, dtype=np.float64)

    def reached(m: int, fast: bool = True) -> float:
        return min_discrepancy_of_identity_test(m, p, false_fail_rate=rate, false_pass_rate=beta, proven=proven,
                                                fast=fast)

    lo, hi = 1, 64
    if p.size > ALWAYS_TOKENS:  # a wide law's figure costs more: start near n (figure / tv)², as it falls as 1/√n
        figure = reached(4096)
        if math.isfinite(figure) and figure > tv:
            lo = hi = max(64, int(4096 * (figure / tv) ** 2 / 1.2))
            if reached(lo) <= tv:
                lo = 1
            else:
                hi = int(lo * 1.3) + 1
    while reached(hi) > tv:
        lo, hi = hi, hi * 2
        if hi > 2**40:
            return hi
    while hi - lo > max(1, int(lo * tolerance)):
        mid = (lo + hi) // 2
        if reached(mid) > tv:
            lo = mid
        else:
            hi = mid
    if not proven:
        return hi
    # the search ran on the analytic critical value; the row states the proven one, which is
    # larger: the figure falls about as 1/√n, so scale n until the row's own figure is reached
    for _ in range(12):
        figure = reached(hi, fast=False)
        if figure <= tv:
            return hi
        hi = math.ceil(hi * min((figure / tv) ** 2, 4.0) * (1 + tolerance))
    return hi
