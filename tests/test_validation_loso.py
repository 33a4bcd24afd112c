"""Leave-one-source-out validation (``specgauge validate``): each fold refits what the table taught
the simulator without the held-out source, and the headline counts predicted rows only."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pandas as pd
import pytest

from specgauge.reports.planning import validation as V
from specgauge.simulator import SimulationConfig
from specgauge.simulator.core import resolve
from specgauge.simulator.profiles import MLA_LAYER_OVERHEAD_US, MOE_LAYER_OVERHEAD_US

PASSES = {V.FIT_SOURCE: 0.38, V.K_SWEEP_SOURCE: 0.68}
MOE = {"[10]": [3.0, 6.0], "[11]": [1.5, 3.5]}
FIXED = {"mla_layer_overhead_us": {"[6]": [300.0], "[9]": [70.0], "[17]": [270.0]}}


def _fold(tmp_path, held_out):
    path = V.fold_profile(held_out, str(tmp_path / f"fold{held_out.strip('[]')}.toml"), PASSES, MOE, FIXED)
    return path, tomllib.loads(Path(path).read_text())


def test_a_fold_learns_nothing_from_its_held_out_source(tmp_path):
    _, amd = _fold(tmp_path, "[10]")
    assert amd["gpus"]["h100-sxm"]["moe_token_factor"] == pytest.approx(math.sqrt(1.5 * 3.5))
    assert amd["gpus"]["h100-sxm"]["draft_pass_overhead_ms"] == 0.38
    _, sglang = _fold(tmp_path, "[6]")
    assert sglang["gpus"]["h200"]["mla_layer_overhead_us"] == pytest.approx(170.0)    # median of 70 and 270
    path, first = _fold(tmp_path, V.FIT_SOURCE)
    assert first["gpus"]["h100-sxm"]["draft_pass_overhead_ms"] == 0.68          # from the K sweep, not [1]
    assert first["gpus"]["h100-sxm"]["moe_token_factor"] == pytest.approx((3.0 * 6.0 * 1.5 * 3.5) ** 0.25)
    assert first["gpus"]["h100-sxm"]["mla_layer_overhead_us"] == pytest.approx(270.0)
    # [1]'s fits give way to the datasheet prior
    setup = resolve(SimulationConfig(gpu="h100", target="llama-3.1-8b", draft="eagle", gamma=3, profiles=path))
    assert setup.target_cost.source.startswith("datasheet prior")


def test_the_estimates_come_from_the_sources_numbers():
    table = V.shipped_table()
    passes = V.pass_overhead_estimates(table)
    assert passes[V.FIT_SOURCE] == pytest.approx(0.712 - V.head_pass_s() * 1e3)
    assert passes[V.K_SWEEP_SOURCE] == pytest.approx(0.68, abs=0.02)    # slope of TPOT x length over K, less the head


def test_the_shipped_fixed_costs_are_the_medians_the_table_implies():
    fixed = V.fixed_cost_estimates(V.shipped_table())
    assert set(fixed["mla_layer_overhead_us"]) >= {"[6]", "[9]", "[10]", "[17]"}
    assert V.median_of_sources(fixed["mla_layer_overhead_us"]) == pytest.approx(MLA_LAYER_OVERHEAD_US, abs=1.0)
    assert V.median_of_sources(fixed["moe_layer_overhead_us"]) == pytest.approx(MOE_LAYER_OVERHEAD_US, abs=0.5)


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
    estimates = V.fold_estimates(table, str(tmp_path))
    folds, _ = V.loso(table, workdir=str(tmp_path), estimates=estimates)
    fresh = V.residuals(folds, table, V.user_runs(table, str(tmp_path), estimates)).reset_index(drop=True)
    shipped = shipped_residuals()
    assert list(fresh["id"]) == list(shipped["id"])
    assert fresh["residual"].to_numpy() == pytest.approx(shipped["residual"].to_numpy(), abs=1e-3)
