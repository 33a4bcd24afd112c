"""The identity test on small supports: the empirical TV, with every subset's binomial law.

For a law p on at most :data:`MAX_TOKENS` tokens and n draws with counts N, the statistic is

    D = Σ_i (N_i − n p_i)⁺ = max over sets S of (N_S − n p(S)),

n times the empirical TV (the maximising S is {N_i > n p_i}). Two facts make it a test
whose rates are exact binomial tails, with no moment bound and no normal law:

* **The null.** D ≥ t happens only if N_S − n p(S) ≥ t for some proper, non-empty S, and
  N_S is Binomial(n, p(S)). So P_p(D ≥ t) ≤ U(t) = Σ_S P(Binomial(n, p(S)) ≥ n p(S) + t),
  a sum over the 2^V − 2 sets (the union bound). The critical value is the least t with
  U(t) ≤ the rate, and U(D) is a proven p-value.
* **The power.** Let q be at TV ε from p and S* = {q > p}: q(S*) − p(S*) = ε. A draw off
  p's support fails the test at once; otherwise D ≥ N_{S*} − n p(S*), so the test rejects
  with probability at least P(Binomial(n, p(S*) + ε) ≥ n p(S*) + t), whatever q does inside
  S* and its complement. The guarantee is the least ε at which this is ≥ 1 − β for every
  value p(S*) takes.

The sets are counted by their p-mass: exactly (every sum) up to :data:`EXACT_TOKENS` tokens,
else on a grid of 2^-20 (a set's mass lies in [h K, h K + V h) for its grid count K), and
merged into blocks of width about 1/n. Each block is charged at its least favourable end
(the upper tail at the largest mass and the smallest threshold for the null; the smallest
mass and the largest threshold for the power), so merging and the grid only cost rows.
The counts are floats: past 2^53 a sum rounds, by at most a relative 2^-53 each time, so
each count is raised by the worst compounded rounding of its V additions (a count is only
ever charged, never credited: raising it can only raise the p-value and the critical value).

Past :data:`ALWAYS_TOKENS` tokens a second null bound needs no union: multinomial counts are
negatively associated, so P(D ≥ t) ≤ e^{−st} Π_i E e^{s (N_i − n p_i)⁺} over each count's own
binomial law (:func:`.tail_bounds.positive_part_bound`); the p-value is the smaller of the
two bounds, the critical value the smaller of theirs. Past :data:`MAX_TOKENS` it is the only
one, and the power step takes S*'s mass to be any value in [0, 1].

The identity test runs it beside the split test, each at half the rate: always up to
:data:`ALWAYS_TOKENS` tokens, and on wider laws where its figure is the smaller.
On the shipped small laws the pair needs 1.1–1.5 times the rows no test can do without
(:mod:`.lower_bound`), where the split test alone needed 4–7 times. The union over 2^V sets
costs V log 2 in the exponent, so its figure grows as √V where the split test's grows as
V^¼: on uniform laws at 15,000 draws it is the sharper up to about 1,000 tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special

from specgauge.stattests.identity.tail_bounds import PositivePartBound, positive_part_bound

#: The test applies up to this many tokens in p's support (2^V sets: float counts stay finite).
MAX_TOKENS = 1000
#: Up to this many tokens the identity test always runs the subset test beside the split test.
ALWAYS_TOKENS = 50
#: The test applies up to this many draws: scipy's binomial tails lose their precision beyond.
MAX_DRAWS = 2 ** 30
#: Up to this many tokens every set's mass is summed exactly.
EXACT_TOKENS = 16
#: Grid of set masses beyond EXACT_TOKENS.
GRID_BITS = 20
#: Relative slack on the rate and on β, above every rounding in the tails.
SLACK = 1e-6


@dataclass(frozen=True, eq=False)
class SetMasses:
    """The proper, non-empty subsets of a support by p-mass: each block holds ``count``
    sets whose masses lie in [lo, hi]."""

    lo: np.ndarray
    hi: np.ndarray
    count: np.ndarray


@lru_cache(maxsize=32)  # up to 2^20 cells a law: 24 MB each
def _fine_masses(key: bytes) -> SetMasses:
    """Every proper non-empty subset's mass: exact sums, or grid counts with their intervals."""
    p = np.frombuffer(key, dtype=np.float64)
    if p.size <= EXACT_TOKENS:
        sums = np.zeros(1)
        for x in p:
            sums = np.concatenate([sums, sums + x])
        sums = np.sort(sums[1:-1])  # the empty set first, the whole support last
        pad = 1e-12  # far above the rounding of a sum of 16 terms
        return SetMasses(np.maximum(sums - pad, 0.0), np.minimum(sums + pad, 1.0), np.ones(sums.size))
    h = 2.0 ** -GRID_BITS
    units = np.floor(p / h).astype(np.int64)
    counts = np.zeros(int(units.sum()) + 1)
    counts[0] = 1.0
    top = 0
    for u in units:  # the sets without this token, and with it
        if u:
            counts[u:top + u + 1] += counts[:top + 1].copy()
        else:
            counts[:top + 1] *= 2
        top += int(u)
    counts[0] -= 1.0  # the empty set
    counts[top] -= 1.0  # the whole support
    k = np.flatnonzero(counts > 0)
    return SetMasses(k * h, np.minimum(k * h + p.size * h, 1.0), counts[k] * _rounding_up(p.size))


def _rounding_up(tokens: int) -> float:
    """The factor that lifts a float count of sets over its exact value: below 2^53 every
    sum is exact (1); past it each of the V + 2 additions and subtractions rounds by at most
    a relative 2^-53, compounding to below (1 + 2^-53)^(V + 2) ≤ 1 + (V + 3) 2^-53."""
    return 1.0 if tokens <= 52 else 1.0 + (tokens + 3) * 2.0 ** -52


@lru_cache(maxsize=1024)
def _blocks(key: bytes, n: int) -> SetMasses:
    """The set masses merged into blocks of width about 1/n (at most 4,000 blocks)."""
    fine = _fine_masses(key)
    width = max(1.0 / max(n, 1), 1.0 / 4000)
    label = np.floor(fine.lo / width).astype(np.int64)
    starts = np.flatnonzero(np.concatenate([[True], label[1:] != label[:-1]]))
    return SetMasses(np.minimum.reduceat(fine.lo, starts), np.maximum.reduceat(fine.hi, starts),
                     np.add.reduceat(fine.count, starts))


def _union(n: int, sets: SetMasses, t: float) -> float:
    """U(t): the union bound on P(D ≥ t) under p, each block at its least favourable end."""
    need = np.ceil(n * sets.lo + t - 1e-9)  # N_S ≥ n p(S) + t needs at least this many
    tails = np.where(need <= 0, 1.0, np.where(need > n, 0.0, special.bdtrc(np.clip(need - 1, 0, n), n, sets.hi)))
    return float((sets.count * tails).sum()) * (1 + SLACK)


@dataclass(frozen=True, eq=False)
class SubsetTest:
    """The test's plan for one (n, p, rates): its critical value and guarantee."""

    n: int
    critical: float  # reject when D ≥ critical
    proven_tv: float
    sets: SetMasses  # the set masses (or, past MAX_TOKENS, every mass in [0, 1] in blocks)
    union: bool  # the union bound U over the sets is charged (at most MAX_TOKENS tokens)
    chernoff: PositivePartBound | None  # the bound by negative association (past ALWAYS_TOKENS)

    def pvalue(self, d: float) -> float:
        """A proven p-value of D = d: the smaller of U(d) and the Chernoff bound, each a bound
        on P(D ≥ d)."""
        if d <= 0:
            return 1.0
        bound = _union(self.n, self.sets, d) if self.union else 1.0
        if self.chernoff is not None:
            bound = min(bound, self.chernoff.sf(d) * (1 + SLACK))
        return min(1.0, bound)

    def binding_mass(self, beta: float) -> float:
        """The set mass p(S*) at which the guarantee binds (for planting the hardest move)."""
        eps = _block_shifts(self.n, self.sets, self.critical, beta)
        k = int(eps.argmax())
        return float(0.5 * (self.sets.lo[k] + self.sets.hi[k]))


def subset_statistic(counts: np.ndarray, p: np.ndarray) -> float:
    """D = Σ (N_i − n p_i)⁺: n times the empirical TV on p's support."""
    counts = np.asarray(counts, dtype=np.float64)
    return float(np.maximum(counts - counts.sum() * p, 0.0).sum())


def _critical(n: int, sets: SetMasses, rate: float) -> float:
    """The least t (to 1e-3 of a count) with U(t) ≤ rate: a bracket [lo, hi] with U(lo) > rate
    ≥ U(hi), narrowed by regula falsi on log U (Illinois), a bisection whenever a step halves
    nothing; U falls about as exp(−2t²/n), so a few steps do what thirty halvings did."""
    if _union(n, sets, 0.0) <= rate:
        return 0.0
    if _union(n, sets, float(n) + 1.0) > rate:
        return math.inf
    target = math.log(rate)

    def excess(t: float) -> float:  # log U(t) − log rate: positive below the critical value
        u = _union(n, sets, t)
        return math.log(u) - target if u > 0 else -math.inf

    # Hoeffding bounds each block's tail by exp(−2(t − 1)²/n) (a block spans under one count):
    # a first upper end, doubled until it holds
    lo, f_lo = 0.0, excess(0.0)
    hi = min(float(n) + 1.0, 1.0 + math.sqrt(0.5 * n * max(math.log(float(sets.count.sum()) / rate), 1.0)))
    f_hi = excess(hi)
    while f_hi > 0:
        lo, f_lo, hi = hi, f_hi, min(2.0 * hi, float(n) + 1.0)
        f_hi = excess(hi)
    side = 0
    while hi - lo > 1e-3 * max(1.0, lo * 1e-3):
        width = hi - lo
        if math.isfinite(f_hi) and f_lo > f_hi:
            mid = lo + width * f_lo / (f_lo - f_hi)  # the secant's root, kept inside the bracket
            mid = min(max(mid, lo + 1e-4 * width), hi - 1e-4 * width)
        else:
            mid = 0.5 * (lo + hi)
        f_mid = excess(mid)
        if f_mid <= 0:
            hi, f_hi = mid, f_mid
            f_lo = f_lo / 2 if side == -1 else f_lo  # Illinois: the end kept twice counts half
            side = -1
        else:
            lo, f_lo = mid, f_mid
            f_hi = f_hi / 2 if side == 1 and math.isfinite(f_hi) else f_hi
            side = 1
        if hi - lo > 0.5 * width:  # the step halved nothing: bisect once
            mid = 0.5 * (lo + hi)
            f_mid = excess(mid)
            if f_mid <= 0:
                hi, f_hi = mid, f_mid
            else:
                lo, f_lo = mid, f_mid
            side = 0
    return hi


def _block_shifts(n: int, sets: SetMasses, t: float, beta: float) -> np.ndarray:
    """Each block's least ε with P(Binomial(n, π + ε) ≥ n π + t) ≥ 1 − β for every mass π in
    it (at its least favourable end)."""
    need = np.ceil(n * sets.hi + t - 1e-9)
    x = np.where(need <= 0, 0.0, special.bdtri(np.clip(need - 1, 0, n), n, beta * (1 - SLACK)))
    return np.where(need > n, 1.0 - sets.lo, np.maximum(x - sets.lo, 0.0))


def _guarantee(n: int, p_min: float, sets: SetMasses, t: float, beta: float) -> float:
    """The least ε with P(Binomial(n, π + ε) ≥ n π + t) ≥ 1 − β for every set mass π, each
    block at its least favourable end; an empty S* ∩ support is caught by its first draw."""
    if not math.isfinite(t):
        return math.inf
    eps = _block_shifts(n, sets, t, beta)
    off_support = 1.0 - (beta * (1 - SLACK)) ** (1.0 / n)  # q puts ε off p's support: seen in n draws w.p. ≥ 1 − β
    return float(max(eps.max(), off_support)) + 1e-9


@lru_cache(maxsize=1024)
def _plan(n: int, key: bytes, rate: float, beta: float) -> SubsetTest:
    p = np.frombuffer(key, dtype=np.float64)
    union = p.size <= MAX_TOKENS
    sets = _blocks(key, n) if union else _every_mass(n)
    t = _critical(n, sets, rate * (1 - SLACK)) if union else math.inf
    chernoff = None
    if p.size > ALWAYS_TOKENS:  # the union's price grows as V log 2; this one does not
        chernoff = positive_part_bound(n, p, rate * (1 - SLACK))
        t = min(t, chernoff.critical(rate * (1 - SLACK)))
    return SubsetTest(n, t, min(_guarantee(n, float(p.min()), sets, t, beta), math.inf), sets, union, chernoff)


@lru_cache(maxsize=64)
def _every_mass(n: int) -> SetMasses:
    """Every mass in [0, 1] in blocks of width about 1/n (at most 2^17 of them): where the
    sets are too many to count, the power step takes S*'s mass to be any of these."""
    blocks = int(min(max(n, 4000), 2 ** 17))
    lo = np.arange(blocks) / blocks
    return SetMasses(lo, np.minimum(lo + 1.0 / blocks, 1.0), np.ones(blocks))


def subset_test_plan(n: int, p_sorted: np.ndarray, false_fail_rate: float, false_pass_rate: float) -> SubsetTest | None:
    """The plan for ``p_sorted`` (p's positive entries, ascending), or None where the support
    is a single token or the draws too many (MAX_DRAWS). Up to ALWAYS_TOKENS tokens its null
    bound is the union over the sets; up to MAX_TOKENS the smaller of that and the Chernoff
    bound; beyond, the Chernoff bound alone."""
    if p_sorted.size < 2 or not 1 <= n <= MAX_DRAWS:
        return None
    return _plan(int(n), np.ascontiguousarray(p_sorted, dtype=np.float64).tobytes(), float(false_fail_rate),
                 float(false_pass_rate))
