"""Every writer: one run at a time on an output, a failed write is one line with nothing
half-written, and nothing is created before the first write.

The lock is the sweeps' (``specgauge.sweeps.journal.sweep_lock``): held here by the test
process, it stands for a first run still working, and the command under test is the
second run, which must refuse at once naming the first's pid.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from specgauge.csvio import CsvTarget
from specgauge.reports.cli import main
from specgauge.sweeps.journal import sweep_lock

STEPS = "batched_tokens,kv_tokens,ms\n" + "".join(
    f"{b * g},{b * c},{4 + 0.03 * b * g + 5e-5 * b * c:.4f}\n" for b in (1, 4, 16, 64) for c in (256, 2048) for g in (1, 4))
SIMULATE = ["simulate", "--requests", "4", "--output-len", "4", "--prompt-len", "8", "--batch-size", "2"]
PLAN = ["plan", "--requests", "4", "--output-len", "4", "--prompt-len", "8", "--gamma", "0,2", "--batch-size", "1",
        "--no-plot"]
CALIBRATE = ["calibrate", "--gpu", "h100", "--target", "llama-3.1-8b", "--steps", "steps.csv"]
ACCEPTANCE = ["acceptance", "--target", "toy:bigram-v6-mid", "--draft", "ngram", "--samples", "1",
              "--max-new-tokens", "4", "--gamma", "1", "--no-progress", "--no-plot"]

#: (writer, argv, the output file, the option naming it)
WRITERS = [
    ("simulate", [*SIMULATE, "--csv", "out.csv"], "out.csv", "--csv"),
    ("plan", [*PLAN, "--csv", "out.csv"], "out.csv", "--csv"),
    ("calibrate", [*CALIBRATE, "--out", "out.toml"], "out.toml", "--out"),
    ("acceptance", [*ACCEPTANCE, "--csv", "out.csv"], "out.csv", "--csv"),
    ("law", ["law", "--rounds", "20", "--gamma", "2", "--alpha", "0.5", "--csv", "out.csv"], "out.csv", "--csv"),
]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    (tmp_path / "steps.csv").write_text(STEPS)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(("argv", "output", "flag"), [w[1:] for w in WRITERS], ids=[w[0] for w in WRITERS])
def test_a_second_run_on_the_same_output_is_refused_naming_the_first(folder, capsys, argv, output, flag):
    before = sorted(p.name for p in folder.iterdir())
    with sweep_lock(CsvTarget(folder / output), "specgauge first-run"):
        assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"is being written by another run (pid {os.getpid()} on " in err and f"choose another {flag}" in err, err
    assert sorted(p.name for p in folder.iterdir()) == before  # the first run's lock is gone, nothing else made
    assert main(argv) == 0  # once the first run is done, the same command runs
    assert (folder / output).is_file() and not (folder / (output + ".lock")).exists()


@pytest.mark.parametrize(("argv", "output", "flag"), [w[1:] for w in WRITERS], ids=[w[0] for w in WRITERS])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO])
def test_a_write_that_fails_is_one_line_and_leaves_nothing_half_written(folder, capsys, monkeypatch, argv, output,
                                                                        flag, code):
    """A full disk or an I/O error at the write: exit status 1 (a failure while working), one
    line naming the file and the reason, and no temporary or partial file left behind."""
    import specgauge.csvio as csvio

    def full(fd):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(csvio.os, "fsync", full)
    before = sorted(p.name for p in folder.iterdir())
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "internal error" not in err, err
    assert "cannot write " in err and os.strerror(code) in err, err
    journal = {output + ".partial.jsonl"} if argv[0] == "plan" else set()  # a sweep's record, to resume from
    assert set(p.name for p in folder.iterdir()) - journal == set(before), "a temporary or partial file was left"


@pytest.mark.parametrize("argv", [["plan", "--gamma", "-1"], ["plan", "--gpu", "nosuch"],
                                  ["law", "--decoder", "nosuch_module_xyz:X"], ["certify", "--fixture", "nosuch"],
                                  ["acceptance", "--target", "toy:nosuch", "--draft", "ngram"],
                                  ["compare", "missing.jsonl"]],
                         ids=["plan-gamma", "plan-gpu", "law-decoder", "certify-fixture", "acceptance-target",
                              "compare-missing"])
def test_a_refusal_of_a_command_writing_to_the_default_folder_creates_no_folder(folder, argv):
    assert main(argv) == 2
    assert not (folder / "specgauge-out").exists()


def test_the_default_folder_is_made_at_the_first_write_and_a_refused_run_leaves_none(folder):
    with sweep_lock(CsvTarget(folder / "specgauge-out" / "plan.csv"), "specgauge first-run"):
        assert (folder / "specgauge-out").is_dir()  # the lock is the first write: it makes the folder
        assert main(PLAN) == 1
    assert not (folder / "specgauge-out").exists()  # the folder it made, still empty, goes with the lock
    assert main(PLAN) == 0
    assert (folder / "specgauge-out" / "plan.csv").is_file()


def test_an_unwritable_default_folder_is_refused_before_any_work(folder, capsys):
    """The default folder cannot be made where a file already stands in its place."""
    Path(folder / "specgauge-out").write_text("not a folder")
    assert main(PLAN) == 2
    assert "cannot write 'specgauge-out/plan.csv': 'specgauge-out' is a file, not a folder" in capsys.readouterr().err


def test_a_run_inside_the_checkout_writes_nothing_among_the_sources(tmp_path, monkeypatch):
    """The default output folder is specgauge-out/, never reports/ (the package's own folder
    when run inside the checkout)."""
    from specgauge.reports.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "__init__.py").write_text("")
    assert main(["plan", "--gamma", "2", "--batch-size", "1", "--requests", "10", "--output-len", "16",
                 "--no-progress", "--no-plot"]) == 0
    assert (tmp_path / "specgauge-out" / "plan.csv").is_file()
    assert [p.name for p in (tmp_path / "reports").iterdir()] == ["__init__.py"]
