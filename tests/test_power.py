"""Every detectable discrepancy the certificate prints holds in its worst direction.

The certificate's ``min_detectable_tv`` of a goodness-of-fit row is the TV between the
pooled bins' distributions that the chi-square test detects with power 1 − false_pass,
derived from the bound λ = n Σ δ²/π ≥ 4 n TV², tight when the bias is proportional to π
and splits the mass in halves. This module searches bias directions per fixture, at the
claimed TV and the sample size and per-assertion rate the default certification uses:

* the balanced split (the bound's own worst case, as close as the bins allow),
* random splits of the bins into a raised and a lowered set,
* all the mass moved between the two heaviest bins,

and checks that the misses are no more than Binomial(R, false_pass) allows (one-sided, at
``META_RATE``). The KS figure (a sup-CDF gap along the vocabulary order, printed for the
heterogeneous fixture) is searched the same way: tents of height d peaking at several
points of [0, 1].
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from specgauge.fixtures.pairs import FIXTURES
from specgauge.fixtures.toy_lm import load_toy_lm
from specgauge.stattests.chain.certify import SEQUENCE_CASES, CertConfig
from specgauge.stattests.chain.harness import emission_probability
from specgauge.stattests.core.sampling import multinomial_counts
from specgauge.stattests.chain.sequences import sequence_distribution
from specgauge.stattests.core.statistics import (MIN_EXPECTED, _pool, goodness_of_fit, ks_uniformity,
                                            min_discrepancy_of_goodness_of_fit, min_num_samples_for_ks_uniformity)

META_RATE = 1e-6
CONFIG = CertConfig()
RATE = CONFIG.per_assertion
REPLICATES = 1000
KS_REPLICATES = 300
SHAPES = [("seed-six-token", 0), ("position-dependent", 0), ("position-dependent", 4), ("q-zeros", 0),
          ("tiny", 0), ("zipf-1k-tv0.05", 0), ("zipf-32k-tv0.2", 1), ("wide-70000", 0), ("batch1-g5", 5),
          ("batch8-g8", 8)]


def _directions(bin_mass: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Sign patterns over bins (+1 raised, −1 lowered) to search."""
    order = np.argsort(-bin_mass)
    balanced = np.empty(bin_mass.size)
    up = down = 0.0
    for b in order:  # greedy halves: the Cauchy–Schwarz worst case
        if up <= down:
            balanced[b], up = 1.0, up + bin_mass[b]
        else:
            balanced[b], down = -1.0, down + bin_mass[b]
    out = {"balanced": balanced}
    for i in range(3):
        signs = rng.choice([-1.0, 1.0], size=bin_mass.size)
        if abs(signs.sum()) < signs.size:
            out[f"random-{i}"] = signs
    two = np.zeros(bin_mass.size)
    two[order[0]], two[order[1]] = -1.0, 1.0
    out["two-heaviest"] = two
    return out


def _planted(p: np.ndarray, bins: np.ndarray, signs: np.ndarray, tv: float) -> np.ndarray | None:
    """p with each bin's mass moved by tv·π_b/π(raised) or −tv·π_b/π(lowered), spread ∝ p inside."""
    mass = np.bincount(bins, weights=p)
    raised, lowered = mass[signs > 0].sum(), mass[signs < 0].sum()
    delta = np.where(signs > 0, tv * mass / raised, np.where(signs < 0, -tv * mass / lowered, 0.0))
    if (delta < -mass).any():
        return None
    return p * (1.0 + (delta / np.where(mass > 0, mass, 1.0))[bins])


def _search(p: np.ndarray, n: int, label: str, seed: int) -> None:
    tv = min_discrepancy_of_goodness_of_fit(n, p, false_fail_rate=RATE)
    positive = p > 0
    bins = _pool(n * p[positive], MIN_EXPECTED)
    rng = np.random.default_rng(seed)
    lines, failed = [f"{label}: n {n}, claimed TV {tv:.4g} at false-fail {RATE:.2g}"], []
    for name, signs in _directions(np.bincount(bins, weights=p[positive]), rng).items():
        planted = np.zeros_like(p)
        q = _planted(p[positive], bins, signs, tv)
        if q is None:
            continue
        planted[positive] = q
        assert abs(0.5 * np.abs(np.bincount(bins, weights=q) - np.bincount(bins, weights=p[positive])).sum() - tv) < 1e-9
        misses = sum(goodness_of_fit(multinomial_counts(n, planted / planted.sum(), rng), p, false_fail_rate=RATE).passed
                     for _ in range(REPLICATES))
        pvalue = stats.binomtest(misses, REPLICATES, CONFIG.false_pass, alternative="greater").pvalue
        lines.append(f"  {name}: detected {1 - misses / REPLICATES:.4f} (stated power {1 - CONFIG.false_pass}; "
                     f"binomial p-value {pvalue:.3g})")
        if pvalue < META_RATE:
            failed.append(name)
    print("\n".join(lines))
    assert not failed, "\n".join(lines)


@pytest.mark.slow
@pytest.mark.parametrize("name, k", SHAPES, ids=[f"{n}-pos{k}" for n, k in SHAPES])
def test_goodness_of_fit_power_holds_in_every_direction(name, k):
    f = FIXTURES[name]
    n = int(CONFIG.rows(f) * emission_probability(f)[k])
    _search(f.target[k], n, f"{name} position {k}", seed=k + 100 * len(name))


@pytest.mark.parametrize("case", ["trigram-v4-L4-g3", "bigram-v5-sparse-L3-g2"])
def test_sequence_power_holds_in_every_direction(case):
    c = SEQUENCE_CASES[case]
    pair = load_toy_lm(c.pair)
    _search(sequence_distribution(pair.target, pair.prompt, c.new_tokens), CONFIG.sequences(c), case, seed=5)


def _tent_sample(n: int, d: float, peak: float, rng: np.random.Generator) -> np.ndarray:
    """Values with CDF u + d·tent(u), the tent 1 at ``peak``: sup-CDF gap exactly d."""
    grid = np.linspace(0.0, 1.0, 20_001)
    cdf = grid + d * np.minimum(grid / peak, (1.0 - grid) / (1.0 - peak))
    return np.interp(rng.random(n), cdf, grid)


@pytest.mark.parametrize("tv", [0.05, pytest.param(0.02, marks=pytest.mark.slow)])
def test_ks_power_holds_wherever_the_gap_sits(tv):
    """The KS figure at the n the certification sizes for it: detected wherever the gap is."""
    n = min_num_samples_for_ks_uniformity(tv, false_fail_rate=RATE)
    rng = np.random.default_rng(int(tv * 1000))
    reached = ks_uniformity(rng.random(n), false_fail_rate=RATE).min_detectable_tv
    assert reached <= tv
    for peak in (0.02, 0.25, 0.5, 0.75, 0.98):
        misses = sum(ks_uniformity(_tent_sample(n, reached, peak, rng), false_fail_rate=RATE).passed
                     for _ in range(KS_REPLICATES))
        pvalue = stats.binomtest(misses, KS_REPLICATES, CONFIG.false_pass, alternative="greater").pvalue
        print(f"KS n {n}, gap {reached:.4g} at {peak}: detected {1 - misses / (KS_REPLICATES):.4f}")
        assert pvalue >= META_RATE, f"gap at {peak}: missed {misses} of {KS_REPLICATES}"


# ---------------------------------------------------------------- the identity test's worst case
#
# The identity row's min_detectable_tv is a guarantee against EVERY alternative at TV ε.
# Searched here in the hardest directions the literature names, at the n and per-assertion
# rate of the default certification: Paninski's paired ± perturbations (mass ∝ max(λ, 1),
# the Cauchy–Schwarz least-favourable direction), permutations of p within probability
# bands, mass moved between two mid-frequency tokens, the mixture towards the fixture's
# draft, and the worst of random directions found by the test's own power calculation.

IDENTITY_REPLICATES = 1000
_SLOW = pytest.mark.slow
IDENTITY_SHAPES = [("seed-six-token", 0), pytest.param("position-dependent", 4, marks=_SLOW),
                   pytest.param("tiny", 3, marks=_SLOW), pytest.param("q-zeros", 0, marks=_SLOW),
                   ("zipf-1k-tv0.05", 0), pytest.param("zipf-1k-tv0.5", 2, marks=_SLOW), ("batch1-g5", 5),
                   pytest.param("batch8-g8", 8, marks=_SLOW), pytest.param("zipf-32k-tv0.2", 1, marks=_SLOW)]


def _scale_to(p: np.ndarray, delta: np.ndarray, tv: float) -> np.ndarray | None:
    """p + c·δ at TV ``tv`` (δ sums to 0), or None when that leaves the simplex."""
    size = 0.5 * np.abs(delta).sum()
    if size <= 0:
        return None
    q = p + delta * (tv / size)
    return None if (q < -1e-15).any() else np.clip(q, 0.0, None) / np.clip(q, 0.0, None).sum()


def _paninski(p: np.ndarray, n: int, tv: float, rng: np.random.Generator) -> np.ndarray | None:
    """Neighbours by p paired; within a pair the heavier loses and the lighter gains ∝ max(λ, 1)
    (random order of who is heavier's partner), as far as p allows the loss."""
    order = np.argsort(p)[::-1]
    order = order[p[order] > 0]
    a = np.maximum(n * p, 1.0)
    delta = np.zeros_like(p)
    for i in range(0, order.size - 1, 2):
        hi, lo = order[i], order[i + 1]
        if rng.random() < 0.5:
            hi, lo = lo, hi
        d = min(a[hi], a[lo])
        delta[hi] -= d
        delta[lo] += d
    # the loss may not exceed p: shrink the pairs that would overdraw, keep the rest
    for _ in range(50):
        q = _scale_to(p, delta, tv)
        if q is not None:
            return q
        size = 0.5 * np.abs(delta).sum()
        over = delta * (tv / size) < -p
        delta[over] *= 0.5
        delta -= delta.sum() * (delta > 0) / max(int((delta > 0).sum()), 1)  # rebalance: Σ δ = 0
    return None


def _band_permutation(p: np.ndarray, tv: float, rng: np.random.Generator) -> np.ndarray | None:
    """p permuted within bands of neighbouring ranks (each band's mass unchanged), mixed to TV ``tv``."""
    order = np.argsort(p)[::-1]
    q = p.copy()
    band = max(2, p.size // 64)
    for start in range(0, p.size, band):
        idx = order[start:start + band]
        q[idx] = p[rng.permutation(idx)]
    return _scale_to(p, q - p, tv)


def _two_tokens(p: np.ndarray, tv: float) -> np.ndarray | None:
    """ε of mass moved from the median-rank token that can give it to its lighter neighbour."""
    order = np.argsort(p)[::-1]
    can = order[p[order] >= tv]
    if can.size == 0:
        return None
    giver = can[can.size // 2]
    rank = int(np.flatnonzero(order == giver)[0])
    taker = order[min(rank + 1, p.size - 1)] if rank + 1 < p.size else order[rank - 1]
    delta = np.zeros_like(p)
    delta[giver], delta[taker] = -1.0, 1.0
    return _scale_to(p, delta, tv)


def _searched(p: np.ndarray, n: int, tv: float, rng: np.random.Generator, critical: float) -> np.ndarray | None:
    """The worst of 200 random directions (signs and lognormal sizes ∝ max(λ, 1)) by the
    normal power margin E[Z] − z·sd the test's figure is computed from."""
    from specgauge.stattests.core.identity import _poisson_variance, _weights

    lam, w = _weights(n, p)
    best, best_margin = None, np.inf
    for _ in range(200):
        delta = rng.choice([-1.0, 1.0], size=p.size) * np.maximum(lam, 1.0) * rng.lognormal(0, 1, size=p.size)
        delta[p <= 0] = 0
        delta -= p * delta.sum() / p.sum()
        q = _scale_to(p, delta, tv)
        if q is None:
            continue
        mean = n * n * float((w * (q - p) ** 2).sum())
        margin = (mean - critical) / np.sqrt(_poisson_variance(n, p, q))
        if margin < best_margin:
            best, best_margin = q, margin
    return best


@pytest.mark.parametrize("name, k", IDENTITY_SHAPES)
def test_identity_guarantee_holds_in_the_hardest_directions(name, k):
    from specgauge.stattests.core.identity import identity_test, null_law

    f = FIXTURES[name]
    p = f.target[k]
    n = int(CONFIG.rows(f) * emission_probability(f)[k])
    rng = np.random.default_rng([17, k, len(name)])
    probe = identity_test(multinomial_counts(n, p, rng), p, false_fail_rate=RATE)
    tv = probe.min_detectable_tv
    if not np.isfinite(tv) or tv >= 1:
        pytest.skip(f"{name} position {k}: no worst-case guarantee at n {n}")
    critical = null_law(n, p[p > 0]).critical(RATE)
    directions = {"paninski-pairs": _paninski(p, n, tv, rng), "band-permutation": _band_permutation(p, tv, rng),
                  "two-mid-tokens": _two_tokens(p, tv), "searched": _searched(p, n, tv, rng, critical)}
    if k < f.gamma:
        directions["towards-draft"] = _scale_to(p, f.draft[k] - p, tv)
    lines, failed = [f"{name} position {k}: n {n}, guaranteed TV {tv:.4g} at false-fail {RATE:.2g}"], []
    for label, q in directions.items():
        if q is None:
            lines.append(f"  {label}: not reachable at this TV")
            continue
        assert abs(0.5 * np.abs(q - p).sum() - tv) < 1e-6 * max(tv, 1e-3)
        misses = sum(identity_test(multinomial_counts(n, q, rng), p, false_fail_rate=RATE).passed
                     for _ in range(IDENTITY_REPLICATES))
        pvalue = stats.binomtest(misses, IDENTITY_REPLICATES, CONFIG.false_pass, alternative="greater").pvalue
        lines.append(f"  {label}: detected {1 - misses / IDENTITY_REPLICATES:.4f} (binomial p-value {pvalue:.3g})")
        if pvalue < META_RATE:
            failed.append(label)
    print("\n".join(lines))
    assert not failed, "\n".join(lines)
