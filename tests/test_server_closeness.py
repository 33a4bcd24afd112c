"""The two-sample closeness test per context: its level on equal laws, its stated figure on a
known-bad pair, and the figure stated by a compare of two fake-server runs."""

import numpy as np

from specgauge.fixtures.fake_openai import FakeOpenAI
from specgauge.stattests.server.closeness import cdvv, closeness
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
