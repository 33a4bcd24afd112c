"""The suite checks its own calibration: declared error rates are the rates it has.

Over many seeds, on the seed's six-token fixture at a coarse TV (cheap, so hundreds of
certifications fit in seconds):

* the reference's p-values are Uniform(0, 1) (a second-level KS test, as NIST SP 800-22
  and TestU01 do), and its failure count at a relaxed false-fail rate of 0.01 is
  Binomial(n, 0.01) (an exact binomial test, not a guessed tolerance);
* a decoder with a planted bias of exactly the certified TV, in the direction that is
  hardest for the chi-square test, is caught at the declared power 1 − false_pass_rate:
  its misses are tested against Binomial(N, false_pass_rate), never "all must be caught";
* the ``min_num_samples_*`` and ``min_discrepancy_*`` companions invert each other.

Every assertion here is itself a test at ``META_RATE`` (1e-6), so this file fails
spuriously about once in a hundred thousand runs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, stats

from specgauge.fixtures.pairs import FIXTURES, SEED_DRAFT, SEED_TARGET, zipf
from specgauge.stattests.chain.certify import CertConfig, certify
from specgauge.stattests.core.reference import NumpyDecoder, leviathan_verify
from specgauge.stattests.core.statistics import (acceptance_rate_test, goodness_of_fit, min_discrepancy_of_goodness_of_fit,
                                  min_discrepancy_of_ks_uniformity, min_num_samples_for_acceptance_rate_test,
                                  min_num_samples_for_goodness_of_fit, min_num_samples_for_ks_uniformity,
                                  multinomial_kl_tail, pvalue_uniformity, total_variation)

META_RATE = 1e-6  # false-fail rate of each assertion of this file
FIXTURE = "seed-six-token"
COARSE_TV = 0.05
RELAXED = 0.01  # the relaxed per-assertion false-fail rate whose realised rate is checked
SEEDS = range(200)
POWER_SEEDS = range(1000, 1200)


@pytest.fixture(scope="module")
def reference_runs():
    """p-values and verdicts of the reference's exactness assertions, 200 seeds × γ+1 positions."""
    pvalues, verdicts = [], []
    for seed in SEEDS:
        cert = certify(NumpyDecoder(), CertConfig(tv=COARSE_TV, false_fail=RELAXED, seed=seed, assertions=1),
                       checks=["exactness"], fixtures=[FIXTURE])
        pvalues.extend(cert.frame["pvalue"].astype(float))
        verdicts.extend(cert.frame["verdict"])
    return np.array(pvalues), np.array(verdicts)


def test_reference_pvalues_are_uniform(reference_runs):
    """Positions of one run are independent given exactness (position k+1's tokens are fresh
    draws given how many reached it), so all 1000 p-values enter one KS test."""
    pvalues, _ = reference_runs
    assert pvalues.size == len(SEEDS) * (FIXTURES[FIXTURE].gamma + 1)
    result = pvalue_uniformity(pvalues, false_fail_rate=META_RATE)
    assert result.passed, result.describe()


def test_reference_fails_at_the_declared_rate(reference_runs):
    _, verdicts = reference_runs
    assert set(verdicts) <= {"pass", "fail"}
    failures, n = int((verdicts == "fail").sum()), verdicts.size
    test = stats.binomtest(failures, n, RELAXED)
    print(f"reference at false-fail {RELAXED}: {failures} of {n} assertions failed "
          f"(expected {RELAXED * n:.0f}; binomial p-value {test.pvalue:.3g})")
    assert test.pvalue >= META_RATE, f"{failures}/{n} failures at a declared rate of {RELAXED}"


def planted_target(tv: float) -> np.ndarray:
    """p' with TV(p', p) = tv exactly, shifted by δ ∝ p: the least detectable direction for
    a chi-square test (λ = n Σ δ²/p meets its Cauchy–Schwarz bound 4 n TV²)."""
    heavy = np.isin(np.arange(SEED_TARGET.size), [0, 3])  # "the" + "late": half of p's mass
    assert math.isclose(SEED_TARGET[heavy].sum(), 0.5)
    return SEED_TARGET * (1 + 2 * tv * np.where(heavy, 1.0, -1.0))


class PlantedBias:
    """Leviathan's rule, exactly, but for p' instead of the fixture's p: a contract-valid
    decoder whose every token is off by exactly ``tv`` in total variation."""

    def __init__(self, tv: float) -> None:
        self.target = planted_target(tv)

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        planted = np.broadcast_to(self.target, target_probs.shape)
        return leviathan_verify(planted, draft_probs, draft_tokens, rng.random(draft_tokens.shape), rng)


def test_planted_bias_is_exactly_tv():
    p_prime = planted_target(COARSE_TV)
    assert math.isclose(p_prime.sum(), 1.0)
    assert math.isclose(float(total_variation(p_prime, SEED_TARGET)), COARSE_TV, rel_tol=1e-12)
    assert np.allclose(FIXTURES[FIXTURE].target, SEED_TARGET)


def test_planted_bias_is_caught_at_the_declared_power():
    config = CertConfig(tv=COARSE_TV, seed=0)
    misses, reached = 0, []
    for seed in POWER_SEEDS:
        cert = certify(PlantedBias(COARSE_TV), CertConfig(tv=config.tv, seed=seed),
                       checks=["exactness"], fixtures=[FIXTURE])
        frame = cert.frame
        reached.append(float(frame.loc[frame["position"] == "pos0", "min_detectable_tv"].iloc[0]))
        misses += cert.passed
    # the declared power applies: position 0 alone could detect the planted TV
    assert max(reached) <= COARSE_TV, f"position 0 reached only TV {max(reached):.4g}"
    test = stats.binomtest(misses, len(POWER_SEEDS), config.false_pass, alternative="greater")
    print(f"planted bias TV {COARSE_TV}: missed {misses} of {len(POWER_SEEDS)} "
          f"(declared miss rate {config.false_pass}; binomial p-value {test.pvalue:.3g}; "
          f"position 0 detects TV >= {max(reached):.3g})")
    assert test.pvalue >= META_RATE, f"missed {misses} of {len(POWER_SEEDS)} at a declared rate {config.false_pass}"


@pytest.mark.parametrize("false_pass", [0.5, 0.2])
def test_power_is_what_it_claims_not_just_a_bound(false_pass):
    """At n = min_num_samples_for_goodness_of_fit(tv) and a bias of exactly tv in the worst
    direction, the chi-square test misses at the rate it declares: a two-sided binomial
    test of the misses, so a power computation that is merely conservative fails too."""
    runs, tv, rate = 2000, COARSE_TV, 1e-3
    n = min_num_samples_for_goodness_of_fit(tv, SEED_TARGET, false_fail_rate=rate, false_pass_rate=false_pass)
    rng = np.random.default_rng(7)
    counts = rng.multinomial(n, planted_target(tv), size=runs)
    misses = sum(goodness_of_fit(c, SEED_TARGET, false_fail_rate=rate, false_pass_rate=false_pass).passed
                 for c in counts)
    test = stats.binomtest(misses, runs, false_pass)
    print(f"n {n}, TV {tv}: missed {misses} of {runs} at declared miss rate {false_pass} (p-value {test.pvalue:.3g})")
    assert test.pvalue >= META_RATE


# ---------------------------------------------------------------- companions are inverses

VOCABS = {"seed": SEED_TARGET, "uniform-50": np.full(50, 0.02), "zipf-1k": zipf(1000)}


@pytest.mark.parametrize("tv", [0.01, 0.05, 0.2])
@pytest.mark.parametrize("vocab", list(VOCABS))
def test_goodness_of_fit_companions_are_inverses(vocab, tv):
    p = VOCABS[vocab]
    n = min_num_samples_for_goodness_of_fit(tv, p)
    assert min_discrepancy_of_goodness_of_fit(n, p) <= tv * (1 + 1e-9)
    assert min_discrepancy_of_goodness_of_fit(int(n * 0.97), p) > tv  # and n is (nearly) the smallest


@pytest.mark.parametrize("tv", [0.005, 0.02, 0.1])
@pytest.mark.parametrize("false_fail", [1e-6, 1e-3])
def test_ks_companions_are_inverses(tv, false_fail):
    n = min_num_samples_for_ks_uniformity(tv, false_fail_rate=false_fail)
    assert min_discrepancy_of_ks_uniformity(n, false_fail_rate=false_fail) <= tv
    assert min_discrepancy_of_ks_uniformity(int(n * 0.97), false_fail_rate=false_fail) > tv


@pytest.mark.parametrize("alpha", [0.1, 0.5, 0.9])
def test_acceptance_companions_are_inverses(alpha):
    tv = 0.01
    n = min_num_samples_for_acceptance_rate_test(tv, alpha)
    trials = np.zeros(n, dtype=bool)
    trials[: round(alpha * n)] = True
    assert acceptance_rate_test(trials, alpha).min_detectable_tv <= tv
    fewer = trials[: int(n * 0.97)]
    assert acceptance_rate_test(fewer, alpha).min_detectable_tv > tv


@pytest.mark.parametrize("df", [1, 5, 50])
def test_chi_square_min_tv_has_the_declared_power(df):
    """At the reported min_detectable_tv the worst-case non-centrality 4 n TV² gives power 0.999
    past the larger of the chi-square law's critical value and the proven bound's (G at which
    e^{−G/2} (e G / 2df)^df is the rate)."""
    p = np.full(df + 1, 1.0 / (df + 1))
    n = 10_000
    tv = min_discrepancy_of_goodness_of_fit(n, p, false_fail_rate=1e-6, false_pass_rate=1e-3)
    g = optimize.brentq(lambda x: multinomial_kl_tail(x / 2, df + 1) - 1e-6, 2.0 * df + 1e-9, 1e4)
    critical = max(stats.chi2.isf(1e-6, df), g)
    power = stats.ncx2.sf(critical, df, 4 * n * tv * tv)
    assert power == pytest.approx(0.999, abs=1e-5)
    counts = np.full(df + 1, n // (df + 1))
    assert goodness_of_fit(counts, p).min_detectable_tv == pytest.approx(tv, rel=1e-3)


@pytest.mark.parametrize("tv", [0.01, 0.04])
def test_sample_sizes_scale_as_inverse_square(tv):
    """O(1/tv²): halving the discrepancy quadruples the sample size."""
    ks = min_num_samples_for_ks_uniformity(tv / 2) / min_num_samples_for_ks_uniformity(tv)
    gof = min_num_samples_for_goodness_of_fit(tv / 2, SEED_TARGET) / min_num_samples_for_goodness_of_fit(tv, SEED_TARGET)
    assert ks == pytest.approx(4, rel=0.05)
    assert gof == pytest.approx(4, rel=0.01)
