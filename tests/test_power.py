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
