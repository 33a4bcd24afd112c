"""`specgauge plan`: the sweep's CSV, the decision summary, reproducibility, bad input."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from specgauge.reports import cli
from specgauge.reports.cli import plan
from specgauge.reports.planning.decisions import crossing, slo_capacity
from specgauge.reports.planning.slo import parse_slo

SMALL = ["--gamma", "0,2,4", "--batch-size", "1,16,256", "--requests", "40", "--output-len", "64", "--no-progress"]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plan")
    csv = folder / "plan.csv"
    assert plan.main(SMALL + ["--csv", str(csv), "--slo", "tpot:30"]) == 0
    return csv


def test_one_wide_row_per_configuration_in_order(small_run):
    frame = pd.read_csv(small_run)
    assert len(frame) == 9
    assert frame[["gamma", "batch_size"]].values.tolist() == [[g, b] for g in (0, 2, 4) for b in (1, 16, 256)]
    for column in ("request_throughput", "output_throughput", "p99_tpot_ms", "spec_decode_acceptance_rate",
                   "speedup_vs_no_spec", "max_concurrency", "max_concurrency_no_draft"):
        assert column in frame
    meta = json.loads(small_run.with_name("plan.meta.json").read_text())
    assert meta["command"] == "plan" and meta["specgauge_version"] and meta["rows"] == 9


def test_decision_summary_answers_each_question(small_run):
    decisions = pd.read_csv(small_run.with_name("plan_decision.csv"))
    kinds = set(decisions["decision"])
    assert {"best_gamma_latency", "best_gamma_throughput", "breakeven_batch_size",
            "max_slo_request_rate_spec", "max_slo_request_rate_no_spec", "draft_concurrency_cost"} <= kinds
    latency = decisions[decisions["decision"] == "best_gamma_latency"].set_index("batch_size")
    assert latency.loc[1, "gamma"] > 0 and latency.loc[1, "speedup"] > 1
    memory = decisions[decisions["decision"] == "draft_concurrency_cost"].iloc[0]
    assert 0 < memory["value"] < memory["baseline"]


def test_same_arguments_give_the_same_bytes_across_jobs(small_run, tmp_path):
    other = tmp_path / "again.csv"
    assert plan.main(SMALL + ["--csv", str(other), "--slo", "tpot:30", "--jobs", "2"]) == 0
    assert other.read_bytes() == small_run.read_bytes()
    assert other.with_name("again_decision.csv").read_bytes() == small_run.with_name("plan_decision.csv").read_bytes()


def test_crossing_interpolates_in_log_batch():
    value, kind = crossing(np.array([1, 4, 16, 64]), np.array([2.0, 1.5, 1.25, 0.75]))
    assert kind == "crossed" and value == pytest.approx(32.0)
    assert crossing(np.array([1, 2]), np.array([1.5, 1.1]))[1] == "always"
    assert crossing(np.array([1, 2]), np.array([0.9, 0.8]))[1] == "never"


def test_slo_capacity_with_and_without_speculation():
    frame = pd.DataFrame({"gamma": [0, 0, 3, 3], "batch_size": [8, 64, 8, 64], "qps": [None] * 4,
                          "request_throughput": [1.0, 5.0, 2.0, 7.0], "p99_tpot_ms": [30, 60, 10, 45]})
    rows = pd.DataFrame(slo_capacity(frame, [], parse_slo("tpot:50")))
    got = rows.set_index("decision")["value"]
    assert got["max_slo_request_rate_spec"] == 7.0 and got["max_slo_request_rate_no_spec"] == 1.0


def test_vllm_json_calibrates_the_sweep(tmp_path):
    result = tmp_path / "bench.json"
    result.write_text(json.dumps({"spec_decode_per_position_acceptance_rates": [0.9, 0.72]}))
    csv = tmp_path / "p.csv"
    assert plan.main(["--gamma", "2", "--batch-size", "1", "--requests", "10", "--output-len", "32", "--no-progress",
                      "--acceptance", str(result), "--csv", str(csv)]) == 0
    row = pd.read_csv(csv).iloc[0]
    assert row["acceptance"] == "per-position(0.9,0.8; beyond: geometric ×0.889)"  # the rule past position 2, named
    assert "made conditional" in json.loads((tmp_path / "p.meta.json").read_text())["acceptance_source"]


@pytest.mark.parametrize("extra, message", [
    (["--gamma", ","], "empty sweep"),
    (["--slo", "latency:3"], "unknown SLO metric"),
    (["--alpha", "0.7", "--acceptance", "0.8"], "contradict"),
    (["--acceptance", "BROKEN_JSON"], "not valid JSON"),
    (["--executor", "dask"], "needs --scheduler"),
    (["--gamma", "-1"], "gamma"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, extra, message):
    broken = tmp_path / "in" / "bench.json"
    broken.parent.mkdir()
    broken.write_text("{oops")
    extra = [str(broken) if e == "BROKEN_JSON" else e for e in extra]
    out = tmp_path / "out"
    out.mkdir()
    code = cli.main(["plan", "--requests", "5", "--no-progress", "--csv", str(out / "p.csv")] + extra)
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err  # usage errors
    assert list(out.iterdir()) == []


def test_csv_in_a_missing_folder(tmp_path, capsys):
    assert cli.main(["plan", "--requests", "5", "--csv", str(tmp_path / "missing" / "p.csv")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_default_scenario_is_the_seed_deployment():
    args = plan.build_parser().parse_args([])
    assert plan.apply_plan_defaults(args)[0] is False
    configs = plan.plan_configs(args, None)
    assert {(c.target, c.draft, c.gpu, c.tp) for c in configs} == {("qwen3-32b", "qwen3-0.6b", "h200", 1)}
    assert {0, 5} <= {c.gamma for c in configs}


def test_an_interrupted_plan_resumes_without_recomputing(small_run, tmp_path, monkeypatch, capsys):
    from specgauge import simulator

    real, calls = simulator.simulate, []

    def interrupted(config):
        if len(calls) == 4:
            raise KeyboardInterrupt
        calls.append(config)
        return real(config)

    monkeypatch.setattr(simulator, "simulate", interrupted)
    csv = tmp_path / "p.csv"
    argv = SMALL + ["--csv", str(csv), "--slo", "tpot:30"]
    with pytest.raises(KeyboardInterrupt):
        plan.main(argv)
    assert not csv.exists() and (tmp_path / "p.csv.partial.jsonl").exists()
    calls.clear()
    monkeypatch.setattr(simulator, "simulate", lambda c: calls.append(c) or real(c))
    assert plan.main(argv) == 0
    assert len(calls) == 9 - 4 and "4 resumed" in capsys.readouterr().out
    assert not (tmp_path / "p.csv.partial.jsonl").exists()
    assert csv.read_bytes() == small_run.read_bytes()
