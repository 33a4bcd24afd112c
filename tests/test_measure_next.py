"""``plan_measure_next.csv``: the runs a user can make, each with the interval a decision would have after it."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest

from specgauge.reports.cli import main as cli_main
from specgauge.reports.planning.decisions import _scope_columns, best_gamma
from specgauge.reports.planning.intervals import add_intervals
from specgauge.reports.planning.measure_next import (CALIBRATED_SOURCE, MEASURE_NEXT_COLUMNS, Knowledge, intervals_at,
                                                     best_line, measure_next, measured_alpha_spread)
from specgauge.simulator import SimulationConfig

SWEEP = ["--gamma", "0,3,5", "--batch-size", "1,64", "--requests", "60", "--no-plot", "--no-progress"]


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """One small plan with a placeholder α: its rows, its measure-next table and what it printed."""
    folder = tmp_path_factory.mktemp("plan")
    capture = pytest.MonkeyPatch()
    lines: list[str] = []
    capture.setattr("specgauge.reports.cli.plan.say", lambda *a: lines.append(" ".join(map(str, a))))
    try:
        assert cli_main(["plan", *SWEEP, "--csv", str(folder / "plan.csv")]) == 0
    finally:
        capture.undo()
    frame = pd.read_csv(folder / "plan.csv", comment="#")
    return frame, pd.read_csv(folder / "plan_measure_next.csv", comment="#"), lines


def test_the_csv_names_runs_and_narrows_at_least_one_decision(planned):
    _, table, lines = planned
    assert list(table.columns[:7]) == MEASURE_NEXT_COLUMNS[:7] and len(table)
    assert table["command"].str.contains("vllm bench serve").any() and table["command"].str.contains("--max-concurrency 1 ").any()
    assert table["command"].str.contains("/metrics").any() and table["command"].str.contains("specgauge acceptance").any()
    width_now = table["interval_hi"] / table["interval_lo"]
    width_after = table["after_hi"] / table["after_lo"]
    assert (width_after < width_now * 0.99).any()
    best = [line for line in lines if line.startswith("Measure next: ")]
    assert len(best) == 1 and "Run: " in best[0] and "(the commands: " in best[0] and "plan_measure_next.csv)" in best[0]
    if any("{any}" in line for line in lines):   # "{any}" is never the whole answer: the line says what narrows it
        assert "; γ {any} → {" in best[0]


def test_after_is_the_planners_own_interval_at_that_level(planned):
    """The calibrated row's after-interval is what add_intervals and best_gamma give a frame whose step
    model is calibrated: the same path ``plan`` runs, not a shrink factor."""
    frame, table, _ = planned
    columns = list(SimulationConfig().columns())
    calibrated = add_intervals(frame.assign(step_model_source=CALIBRATED_SOURCE))
    expected = {(r["decision"], r["batch_size"]): (r["speedup_lo"], r["speedup_hi"])
                for r in best_gamma(calibrated, _scope_columns(frame, columns)) if r.get("speedup_lo") is not None}
    rows = table[table["measurement"] == "no-speculation runs at concurrency 1 and 64"]
    assert len(rows) == len(expected)
    for _, row in rows.iterrows():
        assert (row["after_lo"], row["after_hi"]) == pytest.approx(expected[(row["decision"], row["batch_size"])])


def test_knowledge_now_reproduces_the_plan_and_a_measured_alpha_drops_the_placeholder_range(planned):
    frame, _, _ = planned
    now = intervals_at(frame, Knowledge())
    assert now["speedup_vs_no_spec_lo"].to_numpy() == pytest.approx(frame["speedup_vs_no_spec_lo"].to_numpy())
    measured = intervals_at(frame, Knowledge(alpha_measured=True, alpha_sampled=True))
    spec = frame["gamma"] > 0
    assert (measured.loc[spec, "speedup_vs_no_spec_lo"] > now.loc[spec, "speedup_vs_no_spec_lo"]).any()
    typed = add_intervals(frame, alpha_measured=True)   # a typed-in α: no spread at all, so no wider than measured
    assert (typed["speedup_vs_no_spec_lo"] >= measured["speedup_vs_no_spec_lo"] - 1e-12).all()


def test_runs_already_made_are_not_offered(planned):
    frame, _, _ = planned
    columns = list(SimulationConfig().columns())
    given = add_intervals(frame, alpha_measured=True)
    names = set(measure_next(given, columns, SWEEP, alpha_measured=True)["measurement"])
    assert names and not any("acceptance" in name for name in names)
    done = add_intervals(given.assign(step_model_source=CALIBRATED_SOURCE), alpha_measured=True)
    assert measure_next(done, columns, SWEEP, alpha_measured=True).empty


def test_the_measured_spread_is_binomial_and_shrinks_with_the_sample():
    small, large = measured_alpha_spread(0.7, 1_000), measured_alpha_spread(0.7, 100_000)
    assert small[0] < large[0] < 0.7 < large[1] < small[1]
    assert (small[1] - small[0]) / (large[1] - large[0]) == pytest.approx(math.sqrt(100), rel=0.05)


def test_each_scope_names_its_own_deployment_and_the_plan_is_rerun_with_what_was_measured(planned):
    frame, _, _ = planned
    other = frame.assign(draft="qwen3-1.7b")
    table = measure_next(pd.concat([frame, other], ignore_index=True), list(SimulationConfig().columns()),
                         ["--alpha", "0.8", "--profiles", "mine0.toml", "--gamma", "0,3,5"], alpha_measured=False)
    runs = table[table["measurement"].str.contains("and a speculative run")]
    for scope, rows in runs.groupby("scope"):
        draft = scope.split("=", 1)[1]
        assert rows["command"].str.contains(f"spec-1.json:draft={draft} ").all()
    command = runs["command"].iloc[0]
    assert "--alpha" not in command and command.endswith("--gamma 0,3,5 --profiles mine0.toml,mine.toml --acceptance spec-1.json")


def test_where_plain_decoding_is_best_the_nearest_speculative_interval_is_the_one_to_narrow(planned):
    frame, _, _ = planned
    slower = frame.copy()
    spec = slower["gamma"] > 0
    for column in ("speedup_vs_no_spec", "tpot_speedup_vs_no_spec"):   # every γ loses a little: γ 0 is best
        slower.loc[spec, column] = 0.9 - 0.01 * slower.loc[spec, "gamma"]
    slower = add_intervals(slower)
    table = measure_next(slower, list(SimulationConfig().columns()), SWEEP, alpha_measured=False)
    assert len(table) and (table["gamma"] == 0).all() and (table["interval_gamma"] == 3).all()
    assert (table["interval_lo"] < 1.0).all() and (table["interval_hi"] > 1.0).all()   # not γ 0's exact [1, 1]
    assert re.search(r"no speculation is best at batch cap \d+; the nearest, γ 3's (TPOT|throughput) speed-up, \[",
                     best_line(table))
