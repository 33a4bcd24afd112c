"""The planner's smaller gaps: simulate replays a plan --acceptance configuration, prints p99 TPOT,
echoes one GPU name, says what eagle3 maps to; the draft memory line says why."""

from __future__ import annotations

import json

import pandas as pd

from specgauge.reports.cli import main as cli_main
from specgauge.reports.cli import plan, simulate


def test_simulate_replays_one_configuration_of_a_plan_acceptance_sweep(tmp_path, capsys):
    result = tmp_path / "bench.json"
    result.write_text(json.dumps({"spec_decode_per_position_acceptance_rates": [0.8, 0.62, 0.47]}))
    common = ["--gamma", "3", "--batch-size", "8", "--requests", "30", "--output-len", "32", "--acceptance", str(result)]
    assert plan.main([*common, "--csv", str(tmp_path / "p.csv"), "--no-progress"]) == 0
    assert simulate.main([*common, "--csv", str(tmp_path / "s.csv")]) == 0
    out = capsys.readouterr().out
    planned, replayed = pd.read_csv(tmp_path / "p.csv").iloc[0], pd.read_csv(tmp_path / "s.csv").iloc[0]
    for column in ("acceptance", "output_throughput", "p99_tpot_ms", "spec_decode_acceptance_length"):
        assert planned[column] == replayed[column], column
    assert "p99 " in out.split("TPOT mean")[1].splitlines()[0]          # the SLO's metric, printed
    assert cli_main(["simulate", "--alpha", "0.7", "--acceptance", "0.8"]) == 2


def test_one_gpu_name_however_typed(tmp_path):
    for name in ("h100", "h100-sxm"):
        assert simulate.main(["--gpu", name, "--target", "llama-3.1-8b", "--draft", "eagle", "--requests", "8",
                              "--output-len", "16", "--csv", str(tmp_path / f"{name}.csv")]) == 0
    assert {pd.read_csv(tmp_path / f"{n}.csv")["gpu"].iloc[0] for n in ("h100", "h100-sxm")} == {"h100-sxm"}


def test_the_help_says_what_eagle3_is(capsys):
    try:
        simulate.main(["--help"])
    except SystemExit:
        pass
    assert '"eagle3"' in capsys.readouterr().out


def test_the_draft_memory_line_says_why(tmp_path, capsys):
    assert plan.main(["--gpu", "h200", "--target", "deepseek-v3", "--draft", "mtp", "--tp", "1", "--dp", "8", "--ep",
                      "8", "--gamma", "0,3", "--batch-size", "64", "--requests", "20", "--output-len", "16",
                      "--csv", str(tmp_path / "dp.csv"), "--no-progress"]) == 0
    memory = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Memory:")][0]
    assert "GiB on each GPU (every one of the 8 DP-attention ranks holds the whole mtp head at TP 1)" in memory
