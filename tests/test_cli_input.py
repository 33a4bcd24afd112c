"""Bad input refused in one line before any work; implausible values warned; a trace run described as run."""

from __future__ import annotations

import pytest

from specgauge.reports.cli import main


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("command", ["simulate", "plan"])
def test_tp_must_divide_heads_and_kv_heads(command, tmp_path, capsys):
    assert main([command, "--tp", "3", "--csv", str(tmp_path / "x.csv")]) == 2
    err = _err(capsys)
    assert "--tp 3 must divide qwen3-32b's 64 attention heads and 8 KV heads" in err and "\n" not in err
    assert list(tmp_path.iterdir()) == []


def test_trace_without_arrival_trace_is_refused(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s\n0\n")
    assert main(["simulate", "--trace", str(trace)]) == 2
    assert "only read with --arrival trace" in _err(capsys)


def test_an_invalid_trace_is_refused_before_simulating(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("when\n0\n")
    assert main(["simulate", "--arrival", "trace", "--trace", str(trace)]) == 2
    err = _err(capsys)
    assert "needs a column arrival_s" in err and "\n" not in err


def test_the_summary_and_row_describe_the_trace_actually_run(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_len,output_len\n0,100,20\n0.5,200,40\n1.0,300,60\n")
    csv = tmp_path / "r.csv"
    assert main(["simulate", "--arrival", "trace", "--trace", str(trace), "--csv", str(csv)]) == 0
    out = capsys.readouterr().out
    assert f"3 requests of mean 200 + 40 tokens from trace {trace}" in out and "1000 requests" not in out
    import pandas as pd

    assert pd.read_csv(csv)["requests"].tolist() == [3]


@pytest.mark.parametrize("argv,message", [
    (["--gamma", "1000"], "--gamma 1000 is implausible"),
    (["--max-batched-tokens", "1"], "--max-batched-tokens 1 is below one full verification pass"),
])
def test_implausible_values_are_warned(argv, message, capsys):
    assert main(["simulate", *argv, "--requests", "4", "--output-len", "8", "--batch-size", "4"]) == 0
    assert f"specgauge simulate: warning: {message}" in capsys.readouterr().err


def test_plan_warns_once_for_a_whole_sweep(tmp_path, capsys):
    assert main(["plan", "--gamma", "20", "--batch-size", "1,2", "--requests", "4", "--output-len", "8",
                 "--no-progress", "--csv", str(tmp_path / "p.csv")]) == 0
    assert capsys.readouterr().err.count("--gamma 20 is implausible") == 1


def test_law_decoder_whose_verify_raises_is_one_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "raising_decoder.py").write_text(
        "class Decoder:\n    def verify(self, *args):\n        raise RuntimeError('kernel failed\\nat line 2')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["law", "--decoder", "raising_decoder:Decoder", "--csv", str(tmp_path / "l.csv")]) == 1
    err = _err(capsys)
    assert err == "specgauge law: error: the decoder's verify raised RuntimeError: kernel failed"


def test_a_decoder_module_in_the_working_directory_hints_at_pythonpath(tmp_path, capsys, monkeypatch):
    import sys

    (tmp_path / "mymod_not_on_path.py").write_text("class X:\n    pass\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    assert main(["law", "--decoder", "mymod_not_on_path:X", "--csv", str(tmp_path / "l.csv")]) == 2
    err = _err(capsys)
    assert "mymod_not_on_path.py is in the working directory" in err and "PYTHONPATH=." in err


@pytest.mark.parametrize("argv, words", [
    (["plan", "--rate", "30", "--rate", "40"], "argument --rate: given twice (--rate 30, then --rate 40)"),
    (["plan", "--slo", "tpot:50", "--slo", "ttft:2000", "--rate", "30"], "argument --slo: given twice"),
    (["plan", "--plot", "--no-plot"], "argument --no-plot: given twice (--plot, then --no-plot)"),
    (["simulate", "--gamma=3", "--gamma", "4"], "argument --gamma: given twice (--gamma 3, then --gamma 4)"),
    (["calibrate", "--gpu", "h100", "--gpu", "h200", "--target", "x"], "argument --gpu: given twice"),
])
def test_a_single_valued_option_given_twice_is_refused(argv, words, tmp_path, capsys):
    assert main([*argv, "--csv" if argv[0] != "calibrate" else "--out", str(tmp_path / "x.csv")]) == 2
    err = _err(capsys)
    assert words in err and "\n" not in err
    assert list(tmp_path.iterdir()) == []
    # options made to repeat stay repeatable, and a value after -- is not an option
    from specgauge.inputs import repeated_option
    from specgauge.reports.cli import calibrate

    assert repeated_option(calibrate.build_parser(), ["--serve", "a.json", "--serve", "b.json"]) is None
    assert repeated_option(calibrate.build_parser(), ["--out", "a", "--", "--out"]) is None


def test_options_the_arrival_ignores_are_refused(tmp_path, capsys):
    assert main(["simulate", "--arrival", "closed", "--arrival-cv", "2"]) == 2
    assert "--arrival-cv 2 is read only by --arrival gamma (the arrival here is closed" in _err(capsys)
    assert main(["plan", "--arrival-cv", "2", "--csv", str(tmp_path / "x.csv")]) == 2
    assert "(the arrival here is poisson" in _err(capsys)
    assert list(tmp_path.iterdir()) == []


def test_a_closed_loop_of_one_request_is_refused_and_a_huge_cap_runs_what_memory_holds(capsys):
    assert main(["simulate", "--arrival", "closed", "--requests", "1"]) == 2
    assert "give --requests 2 or more, got 1" in _err(capsys)   # was: output throughput nan, speedup nanx
    # 2 x 1,000,000 warm-up and tail requests were minutes of silence; the loop holds what the KV cache holds
    argv = ["simulate", "--arrival", "closed", "--batch-size", "1000000", "--gamma", "1", "--output-len", "64"]
    assert main([*argv, "--requests", "200"]) == 2
    assert "--requests 200 is below the 449 it keeps in flight" in _err(capsys)
    assert main([*argv, "--requests", "449"]) == 0
    out = capsys.readouterr().out
    assert "the KV cache holds about 449 of these requests at once, so the closed loop runs 449" in out
    assert "nan" not in out
