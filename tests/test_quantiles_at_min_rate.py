"""Every quantile the certificates use, at the smallest per-assertion rate the CLI allows.

``--false-fail`` goes down to ``MIN_FALSE_FAIL`` (1e-12), split over the slow tier's whole
plan: a per-assertion rate near 1.5e-15. There scipy's Kolmogorov quantile sits at the edge
of what its root finder brackets (it raised on some processors and not on others), so each
statistic's quantile is checked here from the default rate down to that one, and below it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from specgauge import inputs
from specgauge.stattests.chain import certify as chain_certify
from specgauge.stattests.core import statistics
from specgauge.stattests.identity import instance as identity
from specgauge.stattests.core.statistics import DEFAULT_FALSE_FAIL, kolmogorov_critical
from specgauge.stattests.server import stats as server_stats


def smallest_per_assertion_rate() -> float:
    """The CLI's floor, split over the largest plan it can run (the slow tier's)."""
    return chain_certify.CertConfig(false_fail=inputs.MIN_FALSE_FAIL,
                                    assertions=chain_certify.plan_size(True)).per_assertion


RATES = (DEFAULT_FALSE_FAIL, 1e-8, 1e-12, statistics.KOLMOGOROV_ISF_EDGE, smallest_per_assertion_rate(), 1e-18)
SIZES = (1, 2, 3, 7, 50, 140, 1_000, 2_000, 5_000, 10_000, 160_000, 2_000_000)


def test_the_smallest_rate_is_below_the_edge_that_broke_scipy():
    assert smallest_per_assertion_rate() < 2e-15


@pytest.mark.parametrize("rate", RATES, ids=lambda r: f"rate={r:.2g}")
def test_kolmogorov_critical_value_holds_its_rate_at_every_size(rate):
    previous = math.inf
    for n in SIZES:
        d = kolmogorov_critical(n, rate)
        assert 0 < d <= 1 and d <= previous + 1e-12, (n, d)  # a quantile, shrinking with n
        previous = d
        if n <= 10_000:  # the exact tail (scipy's sf is slow beyond): never above the rate asked
            assert stats.kstwo.sf(d, n) <= rate * 1.01, (n, d, stats.kstwo.sf(d, n) / rate)
        # and not wastefully conservative: within 1 % of Massart's bound, which is tight here
        assert d >= 0.99 * min(1.0, math.sqrt(math.log(2 / rate) / (2 * n))) or n < 1_000, (n, d)


def test_kolmogorov_critical_value_does_not_depend_on_scipy_inverting(monkeypatch):
    """Where ``kstwo.isf`` raises (as it does on some processors near 1.5e-15), the
    conservative DKW bound stands in; it is what the smallest rates take anyway."""
    def refuse(*_args, **_kwargs):
        raise ValueError("f(a) and f(b) must have different signs")

    kolmogorov_critical.cache_clear()
    monkeypatch.setattr(stats.kstwo, "isf", refuse)
    try:
        for n in (50, 2_000, 1_000_000):
            d = kolmogorov_critical(n, 1e-6)
            assert d == pytest.approx(math.sqrt(math.log(2 / 1e-6) / (2 * n)))
            assert stats.kstwo.sf(d, min(n, 2_000)) <= 1e-6 or n > 2_000
    finally:
        kolmogorov_critical.cache_clear()


@pytest.mark.parametrize("rate", RATES, ids=lambda r: f"rate={r:.2g}")
def test_every_statistic_sizes_and_resolves_at_the_rate(rate):
    """Each test's min_num_samples_* and min_discrepancy_* is finite, positive and ordered
    (more samples, a smaller discrepancy) from the default rate down to the smallest."""
    zipf = 1.0 / np.arange(1, 1_001) ** 1.1
    zipf /= zipf.sum()
    six = np.array([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
    for probs in (six, zipf):
        n = statistics.min_num_samples_for_goodness_of_fit(0.05, probs, false_fail_rate=rate)
        assert 0 < n < 10**9
        assert statistics.min_discrepancy_of_goodness_of_fit(n, probs, false_fail_rate=rate) <= 0.05 + 1e-9
        m = identity.min_num_samples_for_identity_test(0.1, probs, false_fail_rate=rate)
        assert 0 < m < 10**9
        assert identity.min_discrepancy_of_identity_test(m, probs, false_fail_rate=rate) <= 0.1 * 1.01
        df = probs.size - 1
        assert (server_stats.min_discrepancy_of_homogeneity(10_000, df, false_fail_rate=rate)
                > server_stats.min_discrepancy_of_homogeneity(100_000, df, false_fail_rate=rate) > 0)
    k = statistics.min_num_samples_for_ks_uniformity(0.05, false_fail_rate=rate)
    assert 0 < k < 10**7 and statistics.min_discrepancy_of_ks_uniformity(k, false_fail_rate=rate) <= 0.05
    assert 0 < statistics.min_num_samples_for_acceptance_rate_test(0.05, 0.5, false_fail_rate=rate) < 10**7
    assert 0 < server_stats.min_num_samples_for_homogeneity(0.1, six, false_fail_rate=rate) < 10**8
    assert 0 < server_stats.min_num_samples_for_conditional_fit(0.1, 6, false_fail_rate=rate) < 10**8
    assert 0 < server_stats.min_discrepancy_of_conditional_fit(10_000, 6, false_fail_rate=rate) < 1


#: One fixture of each kind in the default tier (small and wide vocabularies, small calls, rows
#: with their own laws, a real law, whole sequences); every fixture in the slow tier (the
#: identity sizing of position-dependent and zipf-1k-tv0.05 at the floor takes 8 CPU-s each).
_SIZED_FAST = {"seed-six-token", "batch1-g5", "heterogeneous", "zipf-32k-tv0.2", "smollm2-chat-t1",
               "bigram-v6-mid-L4-g1"}


@pytest.mark.parametrize("name", [n if n in _SIZED_FAST else pytest.param(n, marks=pytest.mark.slow)
                                  for n in chain_certify.ALL_FIXTURES])
def test_every_fixture_is_sized_at_the_smallest_rate(name):
    """Every fixture of every tier, chains and whole sequences: rows at the CLI's floor."""
    config = chain_certify.CertConfig(false_fail=inputs.MIN_FALSE_FAIL, assertions=chain_certify.plan_size(True))
    default = chain_certify.CertConfig(assertions=chain_certify.plan_size(True))
    fixture = chain_certify.ALL_FIXTURES[name]
    size = config.rows(fixture) if hasattr(fixture, "target") else config.sequences(fixture)
    base = default.rows(fixture) if hasattr(fixture, "target") else default.sequences(fixture)
    assert 0 < size and size >= base, (name, size, base)  # a smaller rate never buys fewer rows


def test_the_smallest_rate_certifies_through_the_cli(tmp_path, capsys):
    """``certify --false-fail 1e-12``: a certificate, not an internal error."""
    from specgauge.reports.cli import main

    csv = tmp_path / "cert.csv"
    status = main(["certify", "--fixture", "seed-six-token", "--false-fail", "1e-12", "--tv", "0.2",  # any TV: the rate
                   "--csv", str(csv), "--no-progress"])                                          # is the point
    out = capsys.readouterr()
    assert status == 0, out.err
    assert csv.exists() and "0 failed" in out.out


@pytest.mark.parametrize("skew", (-0.5, 1e-12, 0.3, 1.16, 2.5))
def test_pearson3_quantile_holds_its_rate_where_scipy_gives_inf(skew):
    """The identity test's critical value: scipy's pearson3.isf is inf below 1e-17."""
    for rate in RATES:
        z = statistics.pearson3_isf(rate, skew, 0.0, 3.5)
        assert math.isfinite(z)
        assert stats.pearson3.sf(z, skew, loc=0.0, scale=3.5) == pytest.approx(rate, rel=1e-6)
