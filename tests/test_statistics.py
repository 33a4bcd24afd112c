"""Unit tests of stattests.statistics: known answers against scipy, and bad input rejected."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from specgauge.errors import InvalidDistributionError
from specgauge.stattests.core.statistics import (TestResult, acceptance_rate_test, expected_tokens_per_pass, goodness_of_fit,
                                  independence_test, ks_uniformity, min_num_samples_for_goodness_of_fit,
                                  pit_values, pvalue_uniformity, tokens_per_pass_mean_test, tokens_per_pass_pmf,
                                  tokens_per_pass_test, total_variation, validate_probs)

P = np.array([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])


# ---------------------------------------------------------------- known answers


def test_goodness_of_fit_matches_scipy_chisquare():
    counts = np.array([410, 240, 160, 90, 60, 40])
    result = goodness_of_fit(counts, P)
    expected = stats.chisquare(counts, counts.sum() * P)
    assert isinstance(result, TestResult)
    assert result.statistic == pytest.approx(expected.statistic)
    assert result.pvalue == pytest.approx(expected.pvalue)
    assert result.df == 5 and result.n == 1000
    assert 0 < result.min_detectable_tv < 1


def test_goodness_of_fit_pools_rare_categories():
    p = np.r_[0.5, 0.49, np.full(10, 0.001)]
    counts = np.r_[50, 49, np.ones(1, int), np.zeros(9, int)]
    result = goodness_of_fit(counts, p)  # 100 draws: the ten rare categories share one bin
    assert result.df < 11
    assert result.details["bins"] < 12


def test_goodness_of_fit_fails_on_an_impossible_category():
    result = goodness_of_fit(np.array([5, 5, 1]), np.array([0.5, 0.5, 0.0]))
    assert result.pvalue == 0.0 and not result.passed
    assert result.details["impossible_hits"] == 1


def test_ks_uniformity_matches_scipy():
    values = np.random.default_rng(3).random(500)
    result = ks_uniformity(values)
    expected = stats.kstest(values, "uniform")
    assert result.statistic == pytest.approx(expected.statistic)
    assert result.pvalue == pytest.approx(expected.pvalue)
    assert pvalue_uniformity(values).pvalue == pytest.approx(expected.pvalue)


def test_acceptance_rate_is_the_exact_binomial_test():
    accepted = np.r_[np.ones(620, bool), np.zeros(380, bool)]
    result = acceptance_rate_test(accepted, 0.6)
    assert result.pvalue == pytest.approx(stats.binomtest(620, 1000, 0.6).pvalue)
    assert result.details["observed_rate"] == pytest.approx(0.62)


def test_acceptance_rate_heterogeneous_is_a_normal_test():
    alpha = np.r_[np.full(500, 0.2), np.full(500, 0.8)]
    accepted = np.r_[np.arange(500) < 100, np.arange(500) < 400]
    result = acceptance_rate_test(accepted, alpha)
    assert result.statistic == pytest.approx(0.0) and result.pvalue == pytest.approx(1.0)


def test_acceptance_rate_impossible_outcome_fails():
    assert not acceptance_rate_test(np.array([True, False]), np.array([0.0, 0.5])).passed
    assert not acceptance_rate_test(np.array([False, True]), np.array([1.0, 0.5])).passed


def test_independence_matches_scipy_contingency():
    """Without a law, y is binned by x's observed margin: Pearson's X² of the table as scipy has it,
    the chi-square law's upper tail of G above 1e-3, Agrawal's proven bound at a verdict's rates."""
    rng = np.random.default_rng(5)
    x, y = rng.integers(3, size=3000), rng.integers(4, size=3000)
    result = independence_test(x, y)
    table = np.zeros((3, 4))
    np.add.at(table, (x, y), 1)
    table = np.column_stack([table[:, :3], table[:, 3]])  # y's 4th category never drawn as x: a bin of its own
    chi2, _, dof, expected = stats.chi2_contingency(table, correction=False)
    assert result.statistic == pytest.approx(chi2)
    g = 2 * (table * np.log(table / expected)).sum()
    assert result.pvalue == pytest.approx(stats.chi2.sf(g, dof))
    assert result.df == dof and result.details["false_fail_basis"] == "proven"


def test_independence_detects_shared_randomness():
    u = np.random.default_rng(6).random(5000)
    x, y = (u * 4).astype(int), (u * 3).astype(int)
    assert not independence_test(x, y).passed


def test_total_variation():
    assert total_variation(P, P) == 0
    assert total_variation(np.r_[1.0, 0], np.r_[0, 1.0]) == 1
    assert total_variation(P, np.full(6, 1 / 6)) == pytest.approx(0.5 * np.abs(P - 1 / 6).sum())


def test_pit_values_are_uniform_for_exact_draws():
    rng = np.random.default_rng(8)
    probs = rng.dirichlet(np.ones(7), size=20_000)
    cdf = probs.cumsum(axis=1)
    tokens = (cdf < rng.random((20_000, 1))).sum(axis=1).clip(max=6)
    for key in (None, rng.random(probs.shape)):
        u = pit_values(tokens, probs, rng.random(20_000), key)
        assert ks_uniformity(u, false_fail_rate=1e-6).passed


def test_pit_values_by_hand():
    probs = np.array([[0.2, 0.3, 0.5]])
    assert pit_values(np.array([1]), probs, np.array([0.5]))[0] == pytest.approx(0.2 + 0.15)
    key = np.array([[3.0, 2.0, 1.0]])  # order: token 2, token 1, token 0
    assert pit_values(np.array([1]), probs, np.array([0.5]), key)[0] == pytest.approx(0.5 + 0.15)


def test_tokens_per_pass_law():
    alpha, gamma = 0.9, 4
    pmf = tokens_per_pass_pmf(np.full(gamma, alpha))
    expected = [alpha ** (n - 1) * (1 - alpha) for n in range(1, gamma + 1)] + [alpha ** gamma]
    assert pmf == pytest.approx(expected)
    assert expected_tokens_per_pass(np.full(gamma, alpha)) == pytest.approx((1 - alpha ** 5) / (1 - alpha))
    alphas = np.array([0.9, 0.5, 0.2])
    assert expected_tokens_per_pass(alphas) == pytest.approx(1 + 0.9 + 0.45 + 0.09)
    assert (tokens_per_pass_pmf(alphas) * np.arange(1, 5)).sum() == pytest.approx(1 + 0.9 + 0.45 + 0.09)


def test_tokens_per_pass_tests_accept_the_law_and_reject_a_missing_bonus():
    rng = np.random.default_rng(9)
    alpha, gamma, n = 0.8, 4, 20_000
    lengths = rng.choice(np.arange(1, gamma + 2), size=n, p=tokens_per_pass_pmf(np.full(gamma, alpha)))
    assert tokens_per_pass_test(lengths, np.full((1, gamma), alpha)).passed
    assert tokens_per_pass_mean_test(lengths, np.full((1, gamma), alpha)).passed
    dropped = np.minimum(lengths, gamma)
    assert not tokens_per_pass_test(dropped, np.full((1, gamma), alpha)).passed
    assert not tokens_per_pass_mean_test(dropped, np.full((1, gamma), alpha)).passed


def test_result_describe_names_verdict_and_detectable_tv():
    text = goodness_of_fit(np.array([410, 240, 160, 90, 60, 40]), P).describe()
    assert "pass" in text and "detects TV" in text


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("probs, words", [
    (np.r_[0.5, 0.4], "not normalised"),
    (np.r_[1.2, -0.2], "negative"),
    (np.r_[np.nan, 1.0], "NaN"),
    (np.r_[np.inf, 0.0], "infinity"),
    (np.array([]), "empty"),
], ids=["not-normalised", "negative", "nan", "infinite", "empty"])
def test_invalid_distributions_are_rejected(probs, words):
    with pytest.raises(InvalidDistributionError, match=words):
        validate_probs(probs)
    if probs.size:
        with pytest.raises(InvalidDistributionError, match=words):
            goodness_of_fit(np.ones(probs.size, int), probs)
        with pytest.raises(InvalidDistributionError, match=words):
            min_num_samples_for_goodness_of_fit(0.05, probs)


def test_invalid_distribution_error_is_a_value_error_echoing_the_value():
    with pytest.raises(ValueError, match="sums to 0.9"):
        validate_probs(np.r_[0.5, 0.4])


def test_other_bad_input_is_rejected():
    with pytest.raises(InvalidDistributionError, match="shape"):
        goodness_of_fit(np.ones(3, int), np.full(4, 0.25))
    with pytest.raises(InvalidDistributionError, match="negative"):
        goodness_of_fit(np.r_[1, -1, 1, 1], np.full(4, 0.25))
    with pytest.raises(InvalidDistributionError, match=r"\[0, 1\]"):
        ks_uniformity(np.r_[0.5, 1.5])
    with pytest.raises(InvalidDistributionError, match=r"\[0, 1\]"):
        acceptance_rate_test(np.ones(2, bool), np.r_[0.5, np.nan])
    with pytest.raises(InvalidDistributionError, match="false_fail_rate"):
        goodness_of_fit(np.ones(6, int), P, false_fail_rate=0.0)
    with pytest.raises(InvalidDistributionError, match="tv must be positive"):
        min_num_samples_for_goodness_of_fit(0.0, P)
    with pytest.raises(InvalidDistributionError, match="differ in shape"):
        independence_test(np.ones(3, int), np.ones(4, int))
    with pytest.raises(InvalidDistributionError, match="1..5"):
        tokens_per_pass_test(np.r_[0, 1], np.full((1, 4), 0.5))


def test_empty_samples_are_untested_not_failed():
    for result in (goodness_of_fit(np.zeros(6, int), P), ks_uniformity(np.array([])),
                   acceptance_rate_test(np.array([], bool), 0.5), independence_test(np.array([]), np.array([]))):
        assert result.n == 0 and result.passed and math.isinf(result.min_detectable_tv)


def test_an_untested_tail_says_why_not_that_the_position_is_never_reached():
    """A reached position whose rare tokens are too few to collide skips with the real reason."""
    import pytest as _pytest

    from specgauge.stattests.chain.checks import CHECKS
    from specgauge.stattests.core.certificate import assert_certified
    from specgauge.stattests.core.statistics import tail_collision_test

    probs = np.full(1_000, 1e-3)
    counts = np.random.default_rng(0).multinomial(100, probs)  # about 10 equal pairs expected: too few
    result = tail_collision_test(counts, probs)
    assert result.n == 0 and result.passed and "100 draws" in result.details["reason"]
    with _pytest.raises(_pytest.skip.Exception, match="untested at 100 draws: no band of rare tokens"):
        assert_certified(CHECKS["tail-collisions"], "wide", result)


def test_an_exactly_proportional_table_is_not_a_failure() -> None:
    """A 2×2 table of independent pairs is exactly proportional about 1 % of the time at 48
    pairs; the chi-square law's lower tail read p = 0 there, a fail at any rate."""
    x = np.repeat([0, 0, 1, 1], 12)          # margins 24/24, every cell 12: statistic 0
    y = np.tile([0, 1], 24)
    result = independence_test(x, y)
    assert result.statistic == pytest.approx(0.0) and result.pvalue > 0.1


def test_independence_on_small_tables_holds_its_rate() -> None:
    """Independent pairs at 48 and 200 draws: the two-sided p-value is at most nominal
    (the exact conditional lower tail counts the observed table)."""
    rng = np.random.default_rng(20261203)
    for n in (48, 200):
        pvalues = np.array([independence_test(rng.integers(0, 2, n), rng.integers(0, 2, n)).pvalue
                            for _ in range(1000)])
        assert (pvalues == 0).sum() == 0
        assert (pvalues <= 0.05).mean() <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 1000)
