"""The two-sample closeness test per context: its level on equal laws, its stated figure on a
known-bad pair, and the figure stated by a compare of two fake-server runs."""

import numpy as np
import pytest

from specgauge.fixtures.fake_openai import FakeOpenAI
from specgauge.stattests.server.closeness import cdvv, closeness, scan, scan_critical
from specgauge.stattests.server.compare import two_sample

LAW = np.array([0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.02])


def test_pvalues_on_equal_laws_are_at_most_nominal():
    """Permutation p-values of pairs drawn from one law, unequal arm sizes: P(p <= a) <= a (+3 SE)."""
    rng = np.random.default_rng(11)
    trials = 400
    p = np.array([closeness(rng.multinomial(120, LAW), rng.multinomial(90, LAW), 0.05, rng, figure=False).pvalue
                  for _ in range(trials)])
    for a in (0.05, 0.2, 0.5):
        assert (p <= a).mean() <= a + 3 * np.sqrt(a * (1 - a) / trials), (a, (p <= a).mean())
    assert 0.4 < p.mean() < 0.6, p.mean()  # uniform-ish, not merely conservative


def test_a_pair_further_apart_than_the_figure_is_failed():
    """The stated figure at 300 + 300 draws, then pairs 1.1x that far apart in a direction outside the
    simulated family (mass swapped between the two heaviest tokens): failed nearly always."""
    rng = np.random.default_rng(13)
    rate = 1e-3
    stated = closeness(rng.multinomial(300, LAW), rng.multinomial(300, LAW), rate, rng)
    assert 0 < stated.figure < 0.5, stated
    tv = 1.1 * stated.figure
    moved = LAW.copy()
    moved[0] -= tv
    moved[1] += tv
    assert moved.min() >= 0
    fails = [closeness(rng.multinomial(300, LAW), rng.multinomial(300, moved), rate, rng, figure=False).pvalue <= rate
             for _ in range(40)]
    assert np.mean(fails) >= 0.95, (stated.figure, np.mean(fails))


def test_compare_of_fake_runs_states_a_per_context_figure():
    run = FakeOpenAI(seed=1).run(["one"], 600)
    other = FakeOpenAI(seed=2).run(["one"], 600)
    cert = two_sample(other, run, false_fail_rate=0.05)
    rows = cert.frame[cert.frame["check"] == "closeness-per-context"]
    assert len(rows) == 3 and cert.passed, cert.verdict()
    first = rows[rows["position"] == "pos0"].iloc[0]
    assert first["verdict"] == "pass" and 0 < first["min_detectable_tv"] < 0.3, first.to_dict()
    assert "calibrated by simulation" in first["message"] and "CALIBRATED BY SIMULATION" in first["detectable"]
    assert "worst-case TV <=" in cert.verdict()
    for _, row in rows.iterrows():  # a figure, or words saying why none
        assert np.isfinite(row["min_detectable_tv"]) or "no per-context figure" in row["message"], row.to_dict()
    cold = FakeOpenAI(seed=3, sample_temperature_factor=0.6).run(["one"], 600)
    biased = two_sample(other, cold, false_fail_rate=0.05)
    assert (biased.frame[biased.frame["check"] == "closeness-per-context"]["verdict"] == "fail").any(), \
        biased.frame.to_string()


# ---------------------------------------------------------------- the Chernoff scan (rates beyond any permutation)

SHAPES = {"seven tokens": LAW, "flat 40": np.full(40, 1 / 40),
          "zipf 200": (lambda w: w / w.sum())(1.0 / np.arange(1, 201) ** 1.1), "two tokens": np.array([0.9, 0.1])}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_scan_rejects_equal_laws_at_most_at_its_rate(shape):
    """Its level is a proven bound: on pairs drawn from one law (unequal arms) the share rejected at
    rates large enough to see stays at or under each rate, on every shape; the bound is conservative."""
    law, rng = SHAPES[shape], np.random.default_rng(17)
    statistic, family = scan(rng.multinomial(150, law, size=15_000), rng.multinomial(90, law, size=15_000))
    for rate in (0.9, 0.5, 0.2, 0.05):
        assert (statistic >= scan_critical(family, rate)).mean() <= rate, (shape, rate)


def test_a_scan_that_forgets_the_subsets_it_scans_is_caught_by_that_check():
    """The level check can fail: charging one subset instead of the 2V − 1 scanned, the share rejected
    at rate 0.5 exceeds 0.5 on the flat law of 40 tokens."""
    rng = np.random.default_rng(17)
    law = SHAPES["flat 40"]
    statistic, _ = scan(rng.multinomial(150, law, size=15_000), rng.multinomial(90, law, size=15_000))
    assert (statistic >= scan_critical(1, 0.5)).mean() > 0.5


def test_at_a_rate_beyond_the_permutation_the_scan_states_a_figure_that_holds():
    """At 10⁻⁹ (2·10¹⁰ replicates) the context is tested by the scan, which states a figure; pairs 1.1x
    that far apart, moved between the two heaviest tokens (outside the simulated family), fail."""
    rng = np.random.default_rng(19)
    rate = 1e-9
    stated = closeness(rng.multinomial(1000, LAW), rng.multinomial(1000, LAW), rate, rng)
    assert stated.method == "Chernoff scan" and stated.replicates == 0 and 0 < stated.figure < 0.5, stated
    tv = 1.1 * stated.figure
    moved = LAW.copy()
    moved[0] -= tv
    moved[1] += tv
    fails = [closeness(rng.multinomial(1000, LAW), rng.multinomial(1000, moved), rate, rng, figure=False).pvalue
             <= rate for _ in range(40)]
    assert np.mean(fails) >= 0.95, (stated.figure, np.mean(fails))


def test_compare_at_the_default_rate_tests_every_context_with_a_proven_level():
    """The default false-fail 10⁻⁶: no closeness row is left untested for want of replicates; each says
    its level is proven, the first position (one context of 1,000 + 1,000 draws) states a figure, a
    later one may be too small for any and says so. A sampler at 0.4 x the temperature is failed by them
    (one at 0.6 x is failed by the binned position rows, not by these at this rate and size)."""
    run = FakeOpenAI(seed=1).run(["one"], 1000)
    other = FakeOpenAI(seed=2).run(["one"], 1000)
    cert = two_sample(other, run)
    rows = cert.frame[cert.frame["check"] == "closeness-per-context"]
    assert cert.passed and rows["verdict"].isin(["pass", "untested"]).all(), rows.to_string()
    assert rows["message"].str.contains("Chernoff scan, proven level").all()
    assert not rows["message"].str.contains("more than").any()
    assert (rows["false_fail_basis"] == "proven").all()
    first = rows[rows["position"] == "pos0"].iloc[0]
    assert first["verdict"] == "pass" and 0 < first["min_detectable_tv"] < 0.5, first.to_dict()
    for _, row in rows[rows["verdict"] == "untested"].iterrows():
        assert "too small for any figure" in row["message"], row.to_dict()
    cold = FakeOpenAI(seed=3, sample_temperature_factor=0.4).run(["one"], 1000)
    biased = two_sample(other, cold)
    assert (biased.frame[biased.frame["check"] == "closeness-per-context"]["verdict"] == "fail").any()
