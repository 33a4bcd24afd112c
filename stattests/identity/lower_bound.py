"""A certified lower bound on the draws any identity test needs: the limit a test is paid against.

Le Cam's reduction. Let a test of "the draws follow p" fail at most a fraction ``a`` of the
time under p and catch every q at TV ≥ ε with probability ≥ 1 − β. Then for any prior on
such q, the Neyman–Pearson test of p against the prior's mixture reaches (a, β) too, with
the same n draws. So wherever that Neyman–Pearson test cannot, no test can.

The priors used here move mass between two halves of p's support. For a set S of tokens
with p(S) = π, let q scale p by (π + x)/π inside S and by (1 − π − x)/(1 − π) outside it:
TV(p, q) = |x|, and the likelihood ratio of n draws depends on the count N_S alone, so the
problem is Binomial(n, π) against Binomial(n, π + x) (one move), or against the mixture
½ Binomial(n, π + ε) + ½ Binomial(n, π − ε) (a two-point prior, which makes a test spend
its false-fail rate on both sides). The Neyman–Pearson test is computed exactly on the
counts (randomised at its boundary), the optimal type II error at level ``a`` found, and
the smallest n at which it reaches β located by bisection: with randomisation allowed the
optimal type II error cannot grow with n (a test may ignore a draw), so every n below the
bound fails. S ranges over subsets whose p(S) lies near the hardest π (all subsets up to
20 tokens; on wider laws, every subset of the 16 heaviest tokens completed greedily).

Rounding. Probabilities are summed in log space from scipy's binomial log-pmf (relative
error far below 1e-9); the level is widened and β tightened by a relative 1e-6 before an n
is declared impossible, the mass outside the computed window of counts is credited to the
test under the alternative and not charged under the null, and so the bound can only be low.

Pair priors (Paninski; Valiant & Valiant), which beat these on long-tailed laws by a few
times, are not computed: the bound here is a floor, never the true minimax.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import special, stats

from specgauge.errors import InvalidDistributionError
from specgauge.stattests.core.statistics import DEFAULT_FALSE_FAIL, DEFAULT_FALSE_PASS, _validate_rates, validate_probs

#: Relative slack on the level and on β before an n is declared impossible.
SLACK = 1e-6
#: Counts farther than this many standard deviations from both means are left out (and
#: credited to the test under the alternative).
WINDOW_SD = 40.0
#: Exhaustive subsets up to this many tokens; above, the heaviest ``HEAD`` tokens' subsets.
EXHAUSTIVE = 20
HEAD = 16


@dataclass(frozen=True)
class LowerBound:
    """No test with fewer than ``draws`` draws has false-fail rate ≤ ``false_fail_rate`` and
    power ≥ 1 − ``false_pass_rate`` against every q at TV ≥ ``tv`` from p."""

    draws: int
    tv: float
    false_fail_rate: float
    false_pass_rate: float
    prior: str  # "one move" | "two-point mixture"
    mass: float  # p(S): the half the mass moves into (or out of)

    def describe(self) -> str:
        return (f"any test needs at least {self.draws:,} draws for TV {self.tv:g} at false-fail rate "
                f"{self.false_fail_rate:.2g} and power {1 - self.false_pass_rate:g} (Neyman-Pearson, {self.prior} "
                f"of mass {self.tv:g} into a set of p-mass {self.mass:.3g})")


def np_type_two(n: int, null: float, alternatives: tuple[float, ...], rate: float) -> float:
    """A lower bound on the type II error of every test of Binomial(n, ``null``) against the
    equal mixture of Binomial(n, x), x in ``alternatives``, at level ``rate``: the randomised
    Neyman–Pearson test's, with the level widened by SLACK and the mass outside the window
    credited to the test."""
    means = [n * null, *(n * x for x in alternatives)]
    sd = math.sqrt(max(n * 0.25, 1.0))
    lo = max(0, int(math.floor(min(means) - WINDOW_SD * sd)))
    hi = min(n, int(math.ceil(max(means) + WINDOW_SD * sd)))
    k = np.arange(lo, hi + 1, dtype=np.float64)
    log0 = stats.binom.logpmf(k, n, null)
    log1 = special.logsumexp(np.stack([stats.binom.logpmf(k, n, x) for x in alternatives]), axis=0) \
        - math.log(len(alternatives))
    mass1 = np.exp(log1)
    outside = max(0.0, 1.0 - float(mass1.sum()))  # credited to the test
    order = np.argsort(-(log1 - np.where(np.isfinite(log0), log0, -np.inf)), kind="stable")
    p0, p1 = np.exp(log0[order]), mass1[order]
    level = rate * (1 + SLACK)
    cum0 = np.cumsum(p0)
    full = int(np.searchsorted(cum0, level, side="right"))  # counts rejected outright
    power = float(p1[:full].sum())
    if full < p0.size and p0[full] > 0:
        spent = float(cum0[full - 1]) if full else 0.0
        power += p1[full] * min(1.0, (level - spent) / p0[full])
    return max(0.0, 1.0 - power - outside)


def _subset_sums(p: np.ndarray) -> np.ndarray:
    """p(S) of subsets of ``p``'s support (sorted): all of them up to EXHAUSTIVE tokens,
    else every subset of the HEAD heaviest completed greedily by the rest towards a grid of
    targets."""
    p = np.sort(p)[::-1]
    head = p if p.size <= EXHAUSTIVE else p[:HEAD]
    sums = np.zeros(1)
    for x in head:
        sums = np.concatenate([sums, sums + x])
    if p.size <= EXHAUSTIVE:
        return np.unique(sums)
    rest = np.concatenate([[0.0], np.cumsum(p[HEAD:])])  # the rest, heaviest first
    out = [sums]
    for target in np.linspace(0.05, 0.95, 37):
        need = target - sums
        ok = (need >= 0) & (need <= rest[-1])
        cut = np.searchsorted(rest, need[ok], side="right") - 1
        out.append(sums[ok] + rest[cut])
    return np.unique(np.concatenate(out))


def _candidates(p: np.ndarray, tv: float, keep: int = 6) -> list[float]:
    """The subset masses nearest to the hardest ones: around (1 − ε)/2 for a move up, and
    the masses of subsets the moves down and the mixture need."""
    sums = _subset_sums(p)
    sums = sums[(sums > 0) & (sums < 1)]
    chosen: set[float] = set()
    for target in (0.5 - tv / 2, 0.5 + tv / 2, 0.5, 0.4, 0.6):
        near = sums[np.argsort(np.abs(sums - target), kind="stable")[:keep]]
        chosen.update(float(x) for x in near)
    chosen.update(float(x) for x in sums[:2])
    chosen.update(float(x) for x in sums[-2:])
    return sorted(chosen)


def _guess(pi: float, alternatives: tuple[float, ...], rate: float, beta: float) -> float:
    """The normal approximation's n for one problem: only to rank problems and start the search."""
    z_a = float(stats.norm.isf(rate / len(alternatives)))
    z_b = float(stats.norm.isf(beta))
    return max((z_a * math.sqrt(pi * (1 - pi)) + z_b * math.sqrt(x * (1 - x))) ** 2 / (x - pi) ** 2
               for x in alternatives)


def _draws(pi: float, alternatives: tuple[float, ...], rate: float, beta: float, start: float = 64.0) -> int:
    """1 + the largest n certified impossible for this binomial problem (bracketing from
    ``start``, then bisection)."""
    def impossible(n: int) -> bool:
        return np_type_two(n, pi, alternatives, rate) > beta * (1 + SLACK)

    if not impossible(1):
        return 1
    lo = hi = max(2, int(start))
    if impossible(hi):
        while impossible(hi):
            lo, hi = hi, int(hi * 1.25) + 1
            if hi > 2**34:
                return hi
    else:
        while lo > 1 and not impossible(lo):
            hi, lo = lo, max(1, int(lo / 1.25))
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if impossible(mid):
            lo = mid
        else:
            hi = mid
    return lo + 1


#: Problems searched exactly: the hardest by the normal approximation.
EXACT = 16


@lru_cache(maxsize=256)
def _bound(tv: float, key: bytes, rate: float, beta: float) -> LowerBound:
    p = np.frombuffer(key, dtype=np.float64)
    problems = []
    for pi in _candidates(p, tv):
        if pi + tv <= 1:
            problems.append(("one move", pi, (pi + tv,)))
        if pi - tv >= 0:
            problems.append(("one move", pi, (pi - tv,)))
        if pi + tv <= 1 and pi - tv >= 0:
            problems.append(("two-point mixture", pi, (pi + tv, pi - tv)))
    guesses = [_guess(pi, alts, rate, beta) for _, pi, alts in problems]
    best = LowerBound(1, tv, rate, beta, "one move", 0.0)
    for i in np.argsort(guesses)[::-1][:EXACT]:
        prior, pi, alts = problems[i]
        n = _draws(pi, alts, rate, beta, guesses[i])
        if n > best.draws:
            best = LowerBound(n, tv, rate, beta, prior, pi)
    return best


def min_num_samples_lower_bound(tv: float, probs: np.ndarray, *, false_fail_rate: float = DEFAULT_FALSE_FAIL,
                                false_pass_rate: float = DEFAULT_FALSE_PASS) -> LowerBound:
    """The draws below which no identity test against ``probs`` reaches these rates at ``tv``.

    O(log(1/false_fail_rate) / tv²) on every p with a subset of mass near one half, about
    (z_a + z_β)² π(1 − π) / tv². Compare :func:`specgauge.stattests.identity.instance.min_num_samples_for_identity_test`.

    Examples
    --------
    >>> import numpy as np
    >>> p = np.array([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
    >>> min_num_samples_lower_bound(0.05, p, false_fail_rate=2.94e-6).draws
    6010
    """
    _validate_rates(false_fail_rate, false_pass_rate)
    if not 0 < tv < 1:
        raise InvalidDistributionError(f"tv must lie in (0, 1), got {tv!r}")
    p = validate_probs(probs)
    p = np.sort(p[p > 0])
    if p.size < 2:  # one possible token: any q at TV ε puts ε elsewhere, seen once in (1 − ε)^n ≤ β
        # under q the draws are all that token with probability (1 − ε)^n, so β ≥ (1 − ε)^n (1 − a)
        n = max(1, math.ceil(math.log(false_pass_rate / (1 - false_fail_rate)) / math.log1p(-tv) * (1 - SLACK)))
        return LowerBound(n, float(tv), float(false_fail_rate), float(false_pass_rate), "one move", 1.0)
    return _bound(float(tv), np.ascontiguousarray(p).tobytes(), float(false_fail_rate), float(false_pass_rate))
