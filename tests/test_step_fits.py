"""The step model's passes priced as published runs show them (``drafts._priced_as_layers``,
``reports.planning.step_fits``): a head's batch-1 pass in target layers, refitted without each
source, and the MoE per-token factor fitted on whole curves under load."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from specgauge.reports.planning import step_fits as S
from specgauge.reports.planning import validation as V
from specgauge.simulator import SimulationConfig
from specgauge.simulator.core import resolve
from specgauge.simulator.cost import RoundCost
from specgauge.simulator.profiles import DRAFT_PASS_LAYERS, load_gpu

HEADS = [dict(gpu="h200", target="deepseek-v3", draft="mtp", tp=8), dict(gpu="b200", target="deepseek-v3", draft="mtp", tp=8),
         dict(gpu="h100", target="llama-3.1-70b", draft="eagle", tp=8), dict(gpu="h100", target="qwen3-30b-a3b", draft="eagle", tp=2),
         dict(gpu="mi355x", target="kimi-k2.5", draft="eagle", tp=4, draft_tp=1)]


@pytest.fixture(scope="module")
def estimates():
    return S.draft_pass_layer_estimates(V.shipped_table())


@pytest.mark.parametrize("deployment", HEADS, ids=lambda d: f"{d['target']}+{d['draft']}@{d['gpu']}")
def test_a_head_pass_at_batch_1_costs_its_layers_of_the_target_pass(deployment):
    setup = resolve(SimulationConfig(**deployment, gamma=3))
    step = setup.draft.cost.step
    one = float(setup.target_cost.time(1.0, 0.0, 0.0))
    layers = load_gpu(deployment["gpu"]).draft_pass_layers
    assert float(step.c_fixed + step.linear(1.0)) == pytest.approx(layers / setup.target.layers * one)
    # and it still grows with the tokens it drafts, from the head's own shape
    assert float(step.linear(64.0)) > float(step.linear(1.0))


def test_an_mtp_round_at_batch_1_costs_what_its_passes_do():
    """The audit's case: with MLA's fixed kernels in every target pass, a round of γ MTP passes at
    batch 1 must cost γ head passes more than the verification, not almost nothing."""
    setup = resolve(SimulationConfig(gpu="b200", target="deepseek-v3", draft="mtp", tp=8, gamma=3))
    costs = RoundCost(setup.target_cost, setup.draft.cost, setup.overhead)
    ctx = 1024.0
    plain = costs.decode_round(1, 0, ctx)[0]
    rounds = np.array([costs.decode_round(1, g, ctx)[0] for g in (1, 2, 3, 4, 5)])
    per_pass = DRAFT_PASS_LAYERS / setup.target.layers * float(setup.target_cost.time(1.0, 0.0, 0.0))
    # each further draft: one head pass, and a verification one token wider (a few more experts)
    assert np.all(np.diff(rounds) >= per_pass) and np.all(np.diff(rounds) <= 1.2 * per_pass)
    assert rounds[2] / plain > 1 + 3 * per_pass / plain


def test_the_shipped_layers_are_the_median_over_sources(estimates):
    assert {"[1]", "[6]", "[8]", "[9]", "[14]"} <= set(estimates)
    assert S.fold_values(estimates, None) == pytest.approx(DRAFT_PASS_LAYERS, abs=0.05)
    # [1]'s per-round fit: 2.135 ms over 3 passes, against its 8B fit's batch-1 pass of 32 layers
    assert estimates["[1]"] == [pytest.approx(2.135 / 3 * 32 / 5.91, rel=0.01)]


def test_each_source_estimate_reproduces_its_own_rows(estimates):
    """The estimate of a row is where its simulated speed-up equals the published one (the secant
    step is exact where 1/speed-up is linear in the constant: at batch 1)."""
    rows = S.head_rows(V.shipped_table())
    row = rows[rows["id"] == "trt-blog1-mtp3"].iloc[0]
    x = estimates["[9]"][list(rows[rows["source"] == "[9]"]["id"]).index("trt-blog1-mtp3")]
    path = S._profile(__import__("tempfile").mkdtemp(), "x.toml", {"draft_pass_layers": x})
    alpha = V.alpha_for_length(3, float(row["accepted_length"]))
    assert V.simulated_value(row, V.row_config(row, path), alpha) == pytest.approx(float(row["published"]), rel=0.01)


def test_held_out_deepseek_batch_1_speedups_within_15_percent(estimates, tmp_path):
    """Leave one source out: each DeepSeek MTP source's batch-1 speed-ups on the layers the other
    sources give (they were 1.02-1.26x the published with MLA's fixed cost in every pass and a head
    priced from its shape)."""
    rows = S.head_rows(V.shipped_table())
    rows = rows[rows["target"] == "deepseek-v3"]
    ratios = []
    for source, group in rows.groupby("source"):
        layers = S.fold_values(estimates, source)
        path = S._profile(str(tmp_path), f"fold{source.strip('[]')}.toml", {"draft_pass_layers": layers})
        for _, row in group.iterrows():
            alpha = V.alpha_for_length(int(row["gamma"]), float(row["accepted_length"]))
            ratios.append(V.simulated_value(row, V.row_config(row, path), alpha) / float(row["published"]))
    assert len(ratios) == 7
    assert np.abs(np.array(ratios) - 1).max() <= 0.15


def test_a_fold_profile_prices_eagle_8b_by_the_folds_layers(tmp_path):
    """Without [1], its EAGLE-3 round fit gives way to the head at the fold's layers a pass."""
    config = V.row_config({"gpu": "h100", "target": "llama-3.1-8b", "draft": "eagle", "gamma": "3"})
    text = S.head_fit_text(config, 4.0)
    path = tmp_path / "head.toml"
    path.write_text(text)
    setup = resolve(replace(config, profiles=str(path)))
    one = float(setup.target_cost.time(1.0, 0.0, 0.0))
    assert float(setup.draft.cost.round(1, 3, 3.0, 0.0, 0.0)) == pytest.approx(3 * 4.0 / 32 * one, rel=0.01)
    assert S.head_fit_text(V.row_config({"gpu": "h200", "target": "deepseek-v3", "draft": "mtp", "tp": "8"}), 4.0) == ""


@pytest.mark.slow
def test_the_shipped_moe_factor_is_the_median_over_sources_of_whole_curves():
    """Whole MoE curves under load, each source's factor apart (about 15 s of CPU)."""
    from specgauge.simulator.profiles import load_gpu

    moe = S.moe_curve_estimates(V.shipped_table())
    assert {"[10]", "[11]"} <= set(moe)
    assert S.fold_values(moe, None, geometric=True) == pytest.approx(load_gpu("h200").moe_token_factor, rel=0.03)
