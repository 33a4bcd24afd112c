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
