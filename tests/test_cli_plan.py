"""`specgauge plan`: the default scenario survives non-scenario flags; the headline agrees with the table."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from specgauge.reports.cli import plan
from specgauge.reports.planning.decisions import _decision, decide, recommendation
from specgauge.reports.planning.slo import parse_slo

DEFAULT_SIZE = 8 * 9  # γ ∈ {0, 1, 2, 3, 4, 5, 6, 8} × nine batch caps


def _configs(argv):
    args = plan.build_parser().parse_args(argv)
    plan.apply_plan_defaults(args)
    return plan.plan_configs(args, plan._acceptance_override(args))


@pytest.mark.parametrize("argv", [[], ["--jobs", "2"], ["--csv", "my.csv"], ["--plot"], ["--no-progress"],
                                  ["--slo", "tpot:50"], ["--restart"]])
def test_flags_that_are_not_scenario_options_keep_the_default_scenario(argv):
    configs = _configs(argv)
    assert len(configs) == DEFAULT_SIZE
    assert {c.gamma for c in configs} == {0, 1, 2, 3, 4, 5, 6, 8} and {c.requests for c in configs} == {400}


def test_a_scenario_option_changes_only_itself():
    configs = _configs(["--acceptance", "0.6"])
    assert len(configs) == DEFAULT_SIZE and {c.acceptance.label() for c in configs} == {"iid(0.6)"}
    configs = _configs(["--gamma", "3"])
    assert {c.gamma for c in configs} == {3} and len({c.batch_size for c in configs}) == 9


def test_help_shows_the_defaults_that_apply():
    text = " ".join(plan.build_parser().format_help().split())
    assert "(default 0,1,2,3,4,5,6,8)" in text and "(default 1,2,4,8,16,32,64,128,256)" in text
    assert "(default 400)" in text and "p99 unless prefixed" in text


def _frame(breakeven: dict[int, float], memory_cap: int = 203) -> pd.DataFrame:
    """Synthetic sweep: speed-up of γ falls through 1 at ``breakeven[γ]`` (log-linear in batch size)."""
    rows = []
    for batch in (1, 4, 16, 64, 256):
        for gamma, cross in breakeven.items():
            speedup = 1.0 + (0.1 if gamma == 1 else 0.6) * np.log2(cross / batch)  # a long draft wins at low load
            rows.append({"gpu": "h200", "gamma": gamma, "batch_size": batch, "qps": None, "speedup_vs_no_spec": speedup,
                         "tpot_speedup_vs_no_spec": speedup, "mean_tpot_ms": 10 / speedup, "no_spec_mean_tpot_ms": 10.0,
                         "output_throughput": 100 * speedup, "no_spec_output_throughput": 100.0,
                         "max_concurrency": memory_cap, "max_concurrency_no_draft": 304})
    return pd.DataFrame(rows)


def test_the_headline_names_the_largest_breakeven_over_gamma():
    decisions = decide(_frame({1: 216.0, 8: 77.4}), ["gpu", "gamma", "batch_size", "qps"], parse_slo(None))
    text = "\n".join(recommendation(decisions))
    assert "stops paying at batch size ≈ 216 (γ = 1 is the last" in text, text
    # the best γ per load level, as in the table: γ = 8 first, γ = 1 longer, nothing past 216
    assert "γ = 8 at 1–16, γ = 1 at 64, γ = 0 (no speculation) at 256" in text, text


def test_the_headline_says_when_some_gamma_pays_everywhere_and_when_the_draft_memory_binds():
    decisions = decide(_frame({1: 1000.0, 8: 77.4}), ["gpu", "gamma", "batch_size", "qps"], parse_slo(None))
    text = "\n".join(recommendation(decisions))
    assert "does not stop paying within this sweep" in text and "binds from batch cap 256" in text, text
    decisions = decide(_frame({1: 1000.0}, memory_cap=300), ["gpu", "gamma", "batch_size", "qps"], parse_slo(None))
    assert "does not bind here" in "\n".join(recommendation(decisions))


def test_slo_lines_are_labelled_with_and_without_speculation():
    decisions = pd.DataFrame([_decision("max_slo_request_rate_spec", "all", detail="7 req/s"),
                              _decision("max_slo_request_rate_no_spec", "all", detail="4 req/s")])
    lines = recommendation(decisions)
    assert lines == ["SLO with speculation: 7 req/s.", "SLO without speculation: 4 req/s."]


SMALL = ["--gamma", "0,2", "--batch-size", "1,8", "--requests", "20", "--output-len", "32", "--no-progress"]


def test_plan_into_a_closed_pipe_finishes_its_work(tmp_path):
    pytest.importorskip("matplotlib")
    csv = tmp_path / "p.csv"
    cmd = [sys.executable, "-m", "specgauge.reports.cli", "plan", *SMALL, "--plot", "--csv", str(csv)]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first.stdout.readline()  # the reader takes one line and leaves, as `| head -1` does
    first.stdout.close()
    err = first.stderr.read().decode()
    assert first.wait(timeout=120) == 0 and "Traceback" not in err and "BrokenPipe" not in err, err
    assert csv.exists() and sorted(p.name for p in tmp_path.glob("*.png"))


def test_a_corrected_plan_runs_after_an_aborted_one(tmp_path, monkeypatch, capsys):
    from specgauge import simulator

    real, calls = simulator.simulate, []

    def aborting(config):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(config)
        return real(config)

    csv = tmp_path / "p.csv"
    monkeypatch.setattr(simulator, "simulate", aborting)
    with pytest.raises(KeyboardInterrupt):
        plan.main(SMALL + ["--csv", str(csv)])
    assert (tmp_path / "p.csv.partial.jsonl").exists()
    monkeypatch.setattr(simulator, "simulate", real)
    assert plan.main(["--gamma", "0,2,4", *SMALL[2:], "--csv", str(csv)]) == 0
    assert "2 resumed" in capsys.readouterr().out
    assert len(pd.read_csv(csv)) == 6 and not (tmp_path / "p.csv.partial.jsonl").exists()
