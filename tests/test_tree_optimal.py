"""The LP bound of Hu et al. (2025): closed forms where they exist, and no rule above it."""

from __future__ import annotations

import numpy as np
import pytest

from specgauge.fixtures.trees import TREE_FIXTURES
from specgauge.laws import rank_chosen
from specgauge.stattests.tree.harness import TreeRunConfig, run_tree_fixture
from specgauge.stattests.tree.optimal import first_level_report, measured_share_of_optimal, optimal_acceptance
from specgauge.stattests.tree.reference import SpecInferDecoder

P = np.array([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
Q = np.array([0.35, 0.30, 0.20, 0.10, 0.03, 0.02])


def test_one_draft_optimum_is_one_minus_tv():
    for scheme in ("iid", "without-replacement"):
        assert optimal_acceptance(P, Q, 1, scheme) == pytest.approx(1 - 0.5 * np.abs(P - Q).sum())


def test_topk_optimum_is_the_target_mass_of_the_drafts_and_q1_reaches_it():
    assert optimal_acceptance(P, Q, 3, "topk") == pytest.approx(P[[0, 1, 2]].sum())
    assert rank_chosen(P, Q, 3, "topk").sum() == pytest.approx(P[[0, 1, 2]].sum())


def test_drafting_every_token_without_replacement_can_always_accept():
    assert optimal_acceptance(P, Q, P.size, "without-replacement") == pytest.approx(1.0)


@pytest.mark.parametrize("k", [2, 3])
def test_no_exact_rule_beats_the_bound(k):
    report = first_level_report(P, Q, k)
    assert (report["acceptance"] <= report["optimal_acceptance"] + 1e-9).all()
    # SpecInfer's rounds leave acceptance on the table with i.i.d. drafts
    assert report.set_index("scheme").loc["iid", "share_of_optimal"] < 1.0


def test_measured_acceptance_is_reported_as_a_share_of_the_optimum():
    run = run_tree_fixture(SpecInferDecoder(), TREE_FIXTURES["narrow"], TreeRunConfig(rows=20_000))
    share = measured_share_of_optimal(run)
    exact_law = rank_chosen(TREE_FIXTURES["narrow"].target[0, 0, 0], TREE_FIXTURES["narrow"].draft[0, 0, 0], 2,
                            "iid").sum()
    assert share["measured"] == pytest.approx(exact_law, abs=5 * np.sqrt(0.25 / 20_000))
    assert 0.5 < share["share"] <= 1.0
