"""Leave-one-source-out validation (``specgauge validate``): each fold refits what the table taught
the simulator without the held-out source, and the headline counts predicted rows only."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pandas as pd
import pytest

from specgauge.reports.planning import folds as F
from specgauge.reports.planning import validation as V
from specgauge.simulator import SimulationConfig
from specgauge.simulator.core import resolve
from specgauge.simulator.profiles import MLA_LAYER_OVERHEAD_US, MOE_LAYER_OVERHEAD_US

PASSES = {V.FIT_SOURCE: [3.85], V.K_SWEEP_SOURCE: [8.0, 6.0], "[6]": [2.6]}
MOE = {"[10]": [4.6], "[11]": [4.7], "[7]": [2.0]}
FIXED = {"mla_layer_overhead_us": {"[6]": [300.0], "[9]": [70.0], "[17]": [270.0]}}


def _fold(tmp_path, held_out):
    path = F.fold_profile(held_out, str(tmp_path / f"fold{held_out.strip('[]')}.toml"), PASSES, MOE, FIXED)
    return path, tomllib.loads(Path(path).read_text())


def test_a_fold_learns_nothing_from_its_held_out_source(tmp_path):
    _, amd = _fold(tmp_path, "[10]")
    assert amd["gpus"]["h100-sxm"]["moe_token_factor"] == pytest.approx(math.sqrt(4.7 * 2.0))   # median of logs
    assert amd["gpus"]["h100-sxm"]["draft_pass_layers"] == pytest.approx(3.85)                # median of 3.85, 7, 2.6
    _, sglang = _fold(tmp_path, "[6]")
    assert sglang["gpus"]["h200"]["mla_layer_overhead_us"] == pytest.approx(170.0)    # median of 70 and 270
    assert sglang["gpus"]["h200"]["draft_pass_layers"] == pytest.approx((3.85 + 7.0) / 2)
    path, first = _fold(tmp_path, V.FIT_SOURCE)
    assert first["gpus"]["h100-sxm"]["draft_pass_layers"] == pytest.approx((7.0 + 2.6) / 2)   # without [1]'s
    assert first["gpus"]["h100-sxm"]["moe_token_factor"] == pytest.approx(4.6)
    assert first["gpus"]["h100-sxm"]["mla_layer_overhead_us"] == pytest.approx(270.0)
    # [1]'s EAGLE-3 round fit gives way to the head priced at the fold's layers a pass
    head = first["steps"]["eagle:llama-3.1-8b@h100-sxm@tp1"]
    assert head["per_round"] and head["c_pass_ms"] > 0
    # [1]'s fits give way to the datasheet prior
    setup = resolve(SimulationConfig(gpu="h100", target="llama-3.1-8b", draft="eagle", gamma=3, profiles=path))
    assert setup.target_cost.source.startswith("datasheet prior")


def test_the_estimates_come_from_the_sources_numbers():
    table = V.shipped_table()
    passes = F.pass_overhead_estimates(table)
    (first,) = passes[V.FIT_SOURCE]            # 2.135 ms over 3 passes against the 8B fit's 5.91 ms batch-1 pass
    assert first == pytest.approx(2.135 / 3 * 32 / 5.91, rel=0.01)
    assert len(passes[V.K_SWEEP_SOURCE]) == 6 and 5 < min(passes[V.K_SWEEP_SOURCE]) < max(passes[V.K_SWEEP_SOURCE]) < 10


def test_the_shipped_fixed_costs_are_the_medians_the_table_implies():
    fixed = F.fixed_cost_estimates(V.shipped_table())
    assert set(fixed["mla_layer_overhead_us"]) >= {"[6]", "[9]", "[10]", "[17]"}
    assert F.median_of_sources(fixed["mla_layer_overhead_us"]) == pytest.approx(MLA_LAYER_OVERHEAD_US, abs=1.0)
    assert F.median_of_sources(fixed["moe_layer_overhead_us"]) == pytest.approx(MOE_LAYER_OVERHEAD_US, abs=0.5)


def test_the_headline_counts_predicted_rows_only():
    folds = pd.DataFrame({"source": ["[1]", "[1]", "[2]", "[2]"],
                          "role": ["predicted", "calibrated", "predicted", "predicted"], "ratio": [1.1, 3.0, 1.2, 0.9]})
    assert V.share(folds) == (2, 3)


def test_every_shipped_row_cites_a_listed_source_and_is_well_formed():
    table = V.shipped_table()
    sources = V.shipped_sources()
    assert set(table["source"]) <= set(sources)
    assert table["id"].is_unique
    assert {"[17]", "[18]", "[19]"} <= set(table["source"])          # the 2025 sources added with the MoE fixed costs
    assert (table[table["source"].isin(["[17]", "[18]", "[19]"])]["year"].astype(int) >= 2025).all()


def test_the_shipped_residuals_are_the_held_out_predictions():
    """The intervals' table holds predicted rows only (the prior path's and the user-runs points), each
    with its log-ratio."""
    from specgauge.reports.planning.intervals import shipped_residuals

    residuals = shipped_residuals()
    assert set(residuals["kind"]) == {"dense", "moe"} and set(residuals["profile"]) <= {"prior", "calibrated", "runs"}
    assert residuals["residual"].to_numpy() == pytest.approx(
        (residuals["published"] / residuals["simulated"]).map(math.log).to_numpy(), abs=1e-5)
    ids = set(V.shipped_table()["id"])
    assert {i.split(":")[0] for i in residuals["id"]} <= ids


@pytest.mark.slow
def test_the_shipped_residuals_match_a_fresh_leave_one_source_out_run(tmp_path):
    """The file the planner's intervals read is what ``specgauge validate --write-residuals`` writes
    today (regenerate it after changing a constant or a row)."""
    from specgauge.reports.planning.intervals import shipped_residuals

    table = V.shipped_table()
    estimates = F.fold_estimates(table, str(tmp_path))
    folds, _ = F.loso(table, workdir=str(tmp_path), estimates=estimates)
    fresh = V.residuals(folds, table, F.user_runs(table, str(tmp_path), estimates)).reset_index(drop=True)
    shipped = shipped_residuals()
    assert list(fresh["id"]) == list(shipped["id"])
    assert fresh["residual"].to_numpy() == pytest.approx(shipped["residual"].to_numpy(), abs=1e-3)
