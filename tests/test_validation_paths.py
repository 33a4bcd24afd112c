"""The two paths ``specgauge validate`` measures: the prior path (the shipped constants, a measured
acceptance, each source held out) and the user-runs protocol (two runs without speculation and one
with, per published curve; every other point predicted, its interval from this path's own
held-out residuals)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from specgauge.reports.planning import folds as F
from specgauge.reports.planning import validation as V


@pytest.fixture(scope="module")
def table():
    return V.shipped_table()


def test_alpha_from_tells_a_runs_own_acceptance_from_another_sources(table):
    by_id = table.set_index("id")
    cases = {"vllm20780-k2": "run",          # this K's own accepted length
             "amd-mtp-random-c4": "run",     # the same curve's lowest load
             "sdb-70b-b128": "other",        # the vLLM blog's α, another source
             "trt-blog2-nextn3": "other",    # [9]'s accepted length for [8]'s run
             "gpustack-tp8": "none"}         # no speculation
    for row_id, expected in cases.items():
        assert V.alpha_from(by_id.loc[row_id].to_dict() | {"id": row_id}, table) == expected, row_id


def test_the_protocol_takes_every_curve_with_two_baselines_and_three_speculative_points(table):
    curves = F.runs_curves(table)
    names = [c.iloc[0]["fit_group"] for c in curves]
    assert names == ["amd-mtp-random", "amd-mtp-sharegpt", "amd-minimax", "amd-kimi",
                     "amd-dd-405b", "amd-dd-70b", "llmd-qwen32b", "gist-qwen8b-eagle3", "vllm-mtp-r1"]
    for curve in curves:
        loads = [F._load_of(row) for _, row in curve.iterrows()]   # concurrency, or a rate sweep's requests/s
        assert loads == sorted(loads) and len(set(loads)) >= F.RUNS_MIN_SPEC
    rates = next(c for c in curves if c.iloc[0]["fit_group"] == "amd-dd-405b")
    assert rates["qps"].astype(float).tolist() == [0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4]
    assert rates["batch_size"].nunique() == 1           # one engine cap: the load is the rate
    short = table[table["fit_group"] == "amd-kimi"].head(2)   # known-bad: two speculative points are not a curve
    assert F.runs_curves(short) == []


def test_a_rate_sweep_is_read_at_its_requests_in_flight_and_its_own_speedup(table):
    """A curve sent at request rates (``arrival`` poisson): its runs without speculation are fitted
    at the requests in flight (the request itself and, by Little's law, rate × the published time
    its output takes); its speed-up is the ratio of mean end-to-end latencies where the source
    timed whole requests, of mean TPOTs where it timed tokens, and a closed loop's stays the
    throughput ratio."""
    from types import SimpleNamespace

    row = table.set_index("id").loc["amd-dd-405b-q0.2"].to_dict()
    config = V.row_config(row)
    assert V._concurrency(row, config) == pytest.approx(1.0 + 0.2 * 4.50921)
    saturated = V.row_config(row | {"qps": "100"})
    assert V._concurrency(row | {"qps": "100"}, saturated) == float(config.batch_size)   # at most the cap
    closed = V.row_config(table.set_index("id").loc["amd-mtp-random-c8"].to_dict())
    assert V._concurrency({}, closed) == min(closed.batch_size, closed.requests)
    result = {"speedup_vs_no_spec": 1.1, "tpot_speedup_vs_no_spec": 2.5, "mean_e2el_ms": 2000.0,
              "no_spec_mean_e2el_ms": 4400.0}
    rate, loop = SimpleNamespace(qps=0.2), SimpleNamespace(qps=None)
    assert V._speedup_of(result, rate, "e2e_ms") == pytest.approx(2.2)
    assert V._speedup_of(result, rate, "tpot_ms") == 2.5
    assert V._speedup_of(result, loop, "e2e_ms") == 1.1
    assert F._unit_value(result, rate, "e2e_ms", spec=True) == 2000.0
    assert F._unit_value(result, rate, "e2e_ms", spec=False) == 4400.0


#: Stand-in fold constants (the table's own estimates take about 15 s of CPU: the slow tier's
#: validate run uses them); the protocol's bookkeeping does not depend on their values.
ESTIMATES = ({"[x]": [5.5]}, {"[x]": [4.8]},
             {"moe_layer_overhead_us": {"[x]": [1.5]}, "mla_layer_overhead_us": {"[x]": [269.5]}})


@pytest.fixture(scope="module")
def runs(table, tmp_path_factory):
    return F.user_runs(table, str(tmp_path_factory.mktemp("runs")), ESTIMATES)


def test_the_given_runs_are_never_among_the_predicted_points(table, runs):
    for curve in F.runs_curves(table):
        low, high = curve.iloc[0]["id"], curve.iloc[-1]["id"]
        ids = set(runs["id"])
        assert not {f"{low}:no-spec", f"{low}:spec", f"{low}:speedup", f"{high}:no-spec"} & ids
        assert {f"{high}:spec", f"{high}:speedup"} <= ids      # the highest load's speculative run is predicted
    assert set(runs.loc[runs["point"] == "no-spec", "profile"]) == {"calibrated"}
    assert set(runs.loc[runs["point"] != "no-spec", "profile"]) == {"runs"}
    assert (runs["ratio"] == runs["simulated"] / runs["published"]).all()


def test_a_published_speculative_point_is_read_in_its_sources_unit(table, runs):
    """[10] publishes mean end-to-end latency (a time: with speculation it is the baseline over the
    speed-up); [11] output tokens a second a GPU (a rate: the baseline times the speed-up)."""
    point = runs.set_index("id")
    assert point.loc["amd-mtp-random-c8:spec", "published"] == pytest.approx(19919.06 / 1.7)
    assert point.loc["amd-kimi-c8:spec", "published"] == pytest.approx(142.2 * 1.89)
    assert point.loc["amd-dd-405b-q0.4:spec", "published"] == pytest.approx(2146.50, rel=1e-4)  # [22]: a rate sweep


def test_a_points_interval_comes_from_the_other_sources_residuals_only(runs):
    residual_rows = runs.assign(path="user runs", residual=np.log(runs["published"] / runs["simulated"]),
                                load=runs["load"].map(lambda x: "1" if x <= 1 else "2-16" if x <= 16 else "over 16"),
                                alpha_from="run")
    rows = V.with_held_out_intervals(runs, residual_rows, 0.9)
    moved = residual_rows.copy()
    moved.loc[moved["source"] == "[10]", "residual"] = 5.0     # [10]'s own residuals cannot widen [10]'s intervals
    again = V.with_held_out_intervals(runs, moved, 0.9)
    own = rows["source"] == "[10]"
    assert np.allclose(rows.loc[own, "q"], again.loc[own, "q"])
    assert (again.loc[~own, "q"] >= rows.loc[~own, "q"]).all() and (again.loc[~own, "q"] > rows.loc[~own, "q"]).any()


def test_decisive_counts_clear_speedups_whose_interval_excludes_one():
    rows = pd.DataFrame({"measured": ["speedup"] * 5 + ["tpot_ms"],
                         "published": [1.5, 1.5, 0.7, 1.05, 1.3, 20.0],
                         "interval_lo": [1.1, 0.9, 0.5, 1.01, 1.2, 10.0],
                         "interval_hi": [1.9, 2.0, 0.95, 1.1, 1.4, 30.0]})
    assert V.decisive(rows) == (3, 4)      # 1.05 is not clear; the TPOT row is no speed-up


def test_the_prior_path_keeps_the_curves_on_the_datasheet_prior():
    folds = pd.DataFrame({"variant": ["as published", "as published", "prior", "user"],
                          "fit_group": ["", "curve", "curve", ""], "id": ["a", "b", "b", "c"]})
    assert list(V.prior_path(folds)["id"]) == ["a", "b"]
    assert list(V.prior_path(folds)["variant"]) == ["as published", "prior"]


@pytest.mark.slow
def test_validate_prints_the_two_paths_lines_as_the_issue_words_them(capsys):
    from specgauge.reports.cli import main

    assert main(["validate", "--no-table"]) == 0
    out = capsys.readouterr().out.splitlines()
    runs = next(line for line in out if line.startswith("user runs: "))
    assert " points within ±15 %; 90 % intervals cover " in runs and " curves from " in runs
    assert any(line.startswith("decisive: ") for line in out)
    prior = next(line for line in out if line.startswith("prior path, measured acceptance"))
    covered = prior.split("intervals cover ")[1]
    hits, n = (int(x) for x in covered.split(" (")[0].split(" of "))
    assert not math.isnan(hits / n)
