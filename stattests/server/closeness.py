"""Two-sample closeness per context: the Chan–Diakonikolas–Valiant–Valiant statistic, permutation-calibrated,
and a Chernoff scan where the rate is beyond any permutation's reach.

At one context (a prompt and the tokens before a position) arm 0 drew counts ``x`` and arm 1
counts ``y`` over the same tokens. The statistic (Chan, Diakonikolas, Valiant and Valiant 2014,
in the unequal-size form of Bhattacharya and Valiant 2015)

    Z = Σ_i ((n_y X_i − n_x Y_i)² − n_y² X_i − n_x² Y_i) / (X_i + Y_i)

is calibrated by swapping arm labels: given the pooled counts, an arm's counts under equal laws
are multivariate hypergeometric, so the p-value (1 + #{Z_perm ≥ Z}) / (1 + R) is exact at any
R (never below the nominal level). To reject at rate ``a`` it needs R ≥ 20 / a replicates.

Where that is more than :data:`MAX_REPLICATES` (the default false-fail 10⁻⁶ shared among contexts
asks for about 10¹⁰), the context is tested by a **scan with a proven level** instead: over the
subsets A fixed by the pooled counts (each token, and each prefix of the tokens in decreasing
pooled count), the count X(A) is hypergeometric given the pooled counts, and Hoeffding (1963,
§6) bounds its tails by the binomial Chernoff bound, P(X(A) ≥ x) ≤ exp(−n_x KL(x/n_x ‖ π_A)),
π_A the pooled share, as Serfling (1974) does with the finite-population factor,
exp(−2 n_x (x/n_x − π_A)² / (1 − (n_x − 1)/N)); the better of the two holds. Arm 1's count in A
bounds the opposite tail of the same X(A), and nested events' union is the larger, so each
subset spends two tails. A union over them and the 2V − 1 subsets rejects when the largest
exponent passes log(2 (2V − 1) / a): false-fail at most ``a``, proven, at any rate, in closed form.

The figure per context is *calibrated by simulation*, not proven: the smallest TV at which the
worst of :data:`ALTERNATIVES` (laws built from the pooled law at the context, at the sizes
observed) is detected with simulated probability ``1 - false_pass_rate`` by the context's own
test. An alternative outside that family can be harder.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.special import rel_entr

from specgauge.stattests.core.statistics import DEFAULT_FALSE_PASS

#: Permutation replicates a context may draw (20 / a of them are needed to reject at rate a).
MAX_REPLICATES = 400_000
#: Simulated pairs of samples per alternative and TV in the figure's search.
POWER_SIMULATIONS = 2_000
#: The alternatives the figure is the worst of, each moving TV t from the pooled law q to p.
ALTERNATIVES = ("heavy half to light half", "light half to heavy half", "onto the lightest token",
                "onto a new token")
#: What a closeness figure bounds (the certificate's ``detectable`` column).
FIGURE = ("CALIBRATED BY SIMULATION, not proven: the worst over the tested contexts of the smallest TV at which each "
          "alternative built from a context's pooled law (mass moved between the heavy and light halves either way, "
          "onto its lightest token, onto a new token) is detected with simulated power 0.999 at the sizes observed "
          "(CDVV closeness statistic with an exact permutation level, or a Chernoff scan with a proven level where "
          "the rate needs more replicates); alternatives outside that family may be harder")

#: Decides, per row of simulated counts ``x[S, V]``, ``y[S, V]``, whether a context's test rejects.
Rejects = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Closeness:
    """One context's closeness test: its level (exact permutation or proven Chernoff scan) and its
    simulated worst-case figure."""

    statistic: float
    pvalue: float
    replicates: int        # permutation replicates drawn (0: the Chernoff scan, or untested)
    critical: float        # reject when the statistic reaches it (inf: untested)
    figure: float          # smallest TV detected at power 1 - false_pass_rate by every alternative (inf: none)
    method: str = "permutation"   # "permutation" | "Chernoff scan" | "untested"


def cdvv(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The statistic per row of counts ``x[..., V]``, ``y[..., V]`` (arm sizes from the rows' sums),
    scaled by 1 / (n_x n_y). Given the pooled counts and equal arms it is an increasing function of
    Pearson's chi-square of the 2 x V table; the permutation calibration needs no more of it."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    nx, ny = x.sum(axis=-1, keepdims=True), y.sum(axis=-1, keepdims=True)
    m = x + y
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(m > 0, ((ny * x - nx * y) ** 2 - ny ** 2 * x - nx ** 2 * y) / m, 0.0)
    return terms.sum(axis=-1) / (nx[..., 0] * ny[..., 0])


def _exponent(count: np.ndarray, n: np.ndarray, share: np.ndarray, total: np.ndarray) -> np.ndarray:
    """The better of two proven tail exponents for a hypergeometric count (``n`` draws without
    replacement from ``total`` with success ``share``): Hoeffding's Chernoff, n KL(count/n ‖ share),
    and Serfling's (1974), 2 n (count/n − share)² / (1 − (n − 1)/total), which keeps the
    finite-population factor (about 2 at equal arms) that the first gives up."""
    a = count / n
    chernoff = n * (rel_entr(a, share) + rel_entr(1.0 - a, 1.0 - share))
    return np.maximum(chernoff, 2.0 * n * (a - share) ** 2 / (1.0 - (n - 1.0) / total))


def scan(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The scan's statistic per row of counts ``x[..., V]``, ``y[..., V]``, and its family size.

    Statistic: the largest proven tail exponent (:func:`_exponent`) over the subsets fixed by the
    pooled counts m = x + y (each token, each prefix of the tokens in decreasing m), of either arm's
    count in the subset against the pooled share π_A. Family size:
    2V' − 1 subsets, V' the tokens with m > 0 (the rest add nothing but repeats)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    nx, ny = x.sum(axis=-1, keepdims=True), y.sum(axis=-1, keepdims=True)
    m = x + y
    order = np.argsort(-m, axis=-1, kind="stable")
    cx = np.cumsum(np.take_along_axis(x, order, axis=-1), axis=-1)[..., :-1]
    cm = np.cumsum(np.take_along_axis(m, order, axis=-1), axis=-1)[..., :-1]
    a_x, a_m = np.concatenate([x, cx], axis=-1), np.concatenate([m, cm], axis=-1)
    total = nx + ny
    share = a_m / total
    exponent = np.maximum(_exponent(a_x, nx, share, total), _exponent(a_m - a_x, ny, share, total))
    support = (m > 0).sum(axis=-1)
    return exponent.max(axis=-1), 2 * support - 1


def scan_critical(family: np.ndarray | int, rate: float) -> np.ndarray:
    """The exponent at which the scan rejects at ``rate``: a union over two tails and ``family`` subsets."""
    return np.log(2.0 * np.asarray(family, np.float64) / rate)


def replicates_for(rate: float) -> int:
    """Permutation replicates that let a context reject at ``rate`` with about 20 exceedances to spare."""
    return math.ceil(20.0 / rate)


def closeness(x: np.ndarray, y: np.ndarray, rate: float, rng: np.random.Generator, *,
              false_pass_rate: float = DEFAULT_FALSE_PASS, figure: bool = True) -> Closeness:
    """Test arm counts ``x`` and ``y`` at one context at false-fail ``rate``: by label swapping where
    :data:`MAX_REPLICATES` reach the rate, else by the Chernoff scan (level proven)."""
    x, y = np.asarray(x, np.int64), np.asarray(y, np.int64)
    nx, m = int(x.sum()), x + y
    if (m > 0).sum() < 2:
        return Closeness(0.0, 1.0, 0, math.inf, math.inf, "untested")
    q = m / m.sum()
    r = replicates_for(rate)
    if r > MAX_REPLICATES:
        statistic, family = scan(x, y)
        z, critical = float(statistic), float(scan_critical(family, rate))
        pvalue = float(min(1.0, 2.0 * family * math.exp(-z)))

        def rejects(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
            stat, fam = scan(xs, ys)
            return stat >= scan_critical(fam, rate)

        tv = figure_of(q, nx, int(y.sum()), rejects, rng, false_pass_rate) if figure else math.inf
        return Closeness(z, pvalue, 0, critical, tv, "Chernoff scan")
    z = float(cdvv(x, y))
    perm = rng.multivariate_hypergeometric(m, nx, size=r, method="marginals")
    zs = cdvv(perm, m - perm)
    pvalue = float((1 + np.count_nonzero(zs >= z - 1e-12 * max(1.0, abs(z)))) / (1 + r))
    # the smallest z with (1 + #{Z_perm >= z}) / (1 + R) <= rate: above the (e+1)-th largest replicate
    allowed = math.floor(rate * (1 + r) - 1)
    critical = float(np.sort(zs)[::-1][allowed]) if allowed >= 0 else math.inf
    if not math.isfinite(critical):
        return Closeness(z, pvalue, r, critical, math.inf)
    tv = figure_of(q, nx, int(y.sum()), lambda xs, ys: cdvv(xs, ys) > critical, rng,
                   false_pass_rate) if figure else math.inf
    return Closeness(z, pvalue, r, critical, tv)


def alternatives(q: np.ndarray, tv: float) -> list[np.ndarray]:
    """Laws at TV ``tv`` from ``q`` (one extra, empty cell for a new token), one per :data:`ALTERNATIVES`
    that ``tv`` leaves a law; ``q`` sorted or not."""
    q = np.append(np.asarray(q, np.float64), 0.0)
    order = np.argsort(-q[:-1], kind="stable")
    heavy = np.zeros(q.size, bool)
    cum = np.cumsum(q[order])
    heavy[order[:int(np.searchsorted(cum, 0.5)) + 1]] = True
    light = ~heavy
    light[-1] = False
    out = []
    for src, dst in ((heavy, light), (light, heavy)):
        if q[src].sum() >= tv and q[dst].sum() > 0:
            out.append(q - tv * np.where(src, q, 0) / q[src].sum() + tv * np.where(dst, q, 0) / q[dst].sum())
    lightest = order[-1]
    for j in (lightest, q.size - 1):
        rest = 1.0 - q[j]
        if rest >= tv and rest > 0:
            p = q - tv * np.where(np.arange(q.size) == j, 0.0, q) / rest
            p[j] += tv
            out.append(p)
    return [np.clip(p, 0.0, None) / np.clip(p, 0.0, None).sum() for p in out]


#: Simulated pairs drawn at once; a detection stops at the first block that makes its rate unreachable.
SIMULATION_BLOCK = 250


def detects(q: np.ndarray, nx: int, ny: int, tv: float, rejects: Rejects, rng: np.random.Generator,
            power: float, sims: int = POWER_SIMULATIONS) -> bool:
    """Whether every alternative at ``tv`` (arm 0 from ``q``, arm 1 moved) is detected in at least
    ``power`` of ``sims`` simulated pairs. Drawn in blocks: once an alternative has missed more
    pairs than ``power`` allows, the rest could not change the answer and are not drawn."""
    allowed = sims - math.ceil(power * sims - 1e-9)  # misses an alternative may have
    base = np.append(np.asarray(q, np.float64), 0.0)
    for p in alternatives(q, tv):
        missed = 0
        for start in range(0, sims, SIMULATION_BLOCK):
            size = min(SIMULATION_BLOCK, sims - start)
            x = rng.multinomial(nx, base, size=size)
            y = rng.multinomial(ny, p, size=size)
            missed += size - int(np.count_nonzero(rejects(x, y)))
            if missed > allowed:
                return False
    return True


def figure_of(q: np.ndarray, nx: int, ny: int, rejects: Rejects, rng: np.random.Generator,
              false_pass_rate: float = DEFAULT_FALSE_PASS, steps: int = 9) -> float:
    """The smallest TV (bisection, to 2⁻⁹) at which every alternative is detected at power
    ``1 - false_pass_rate`` in simulation; inf where even the largest TV they allow is not."""
    power = 1.0 - false_pass_rate
    hi = max(float(np.sort(q)[::-1][0]), 0.5)  # a move of the heavy half's mass at most
    hi = min(hi, 1.0 - 1e-9)
    if not detects(q, nx, ny, hi, rejects, rng, power):
        return math.inf
    lo = 0.0
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        if detects(q, nx, ny, mid, rejects, rng, power):
            hi = mid
        else:
            lo = mid
    return hi
