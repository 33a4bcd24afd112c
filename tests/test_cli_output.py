"""Report files: checked before any work, written atomically with a sidecar, same seed same bytes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from specgauge.csvio import ReportOutputError, resolve_csv_target, write_csv_atomic
from specgauge.reports.cli import main as cli_main

SMALL_SIM = ["--requests", "20", "--output-len", "32"]
SMALL_CERT = ["--check", "acceptance-rate", "--fixture", "seed-six-token", "--tv", "0.05"]


def _one_line_error(capsys, needle: str) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert needle in err, err
    return err


def _read_only_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    return folder if not os.access(folder, os.W_OK) else Path("/proc")  # root ignores chmod; /proc refuses


def test_simulate_csv_in_a_missing_folder_is_one_line_before_simulating(tmp_path, capsys, monkeypatch):
    import specgauge.reports.cli.simulate as sim

    monkeypatch.setattr(sim, "simulate", lambda config: pytest.fail("simulated before checking the output path"))
    assert cli_main(["simulate", *SMALL_SIM, "--csv", str(tmp_path / "nope" / "s.csv")]) == 2
    _one_line_error(capsys, "does not exist")


def test_simulate_csv_in_a_read_only_folder_is_one_line(tmp_path, capsys):
    folder = _read_only_folder(tmp_path)
    try:
        assert cli_main(["simulate", *SMALL_SIM, "--csv", str(folder / "s.csv")]) == 2
        _one_line_error(capsys, "not writable")
    finally:
        (tmp_path / "ro").chmod(0o755)


def test_simulate_csv_has_a_sidecar_and_the_same_seed_gives_the_same_bytes(tmp_path, capsys):
    paths = [tmp_path / "a.csv", tmp_path / "b.csv"]
    for path in paths:
        assert cli_main(["simulate", *SMALL_SIM, "--seed", "3", "--csv", str(path)]) == 0
    assert paths[0].read_bytes() == paths[1].read_bytes()
    meta = json.loads((tmp_path / "a.meta.json").read_text())
    assert meta["command"] == "simulate" and meta["seed"] == 3 and "--seed" in meta["arguments"]
    assert meta["specgauge_version"] and meta["rows"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "a.meta.json", "b.csv", "b.meta.json"]


@pytest.mark.parametrize("where", ["directory", "read-only", "missing"])
def test_certify_csv_that_cannot_be_written_is_one_line_before_certifying(tmp_path, capsys, monkeypatch, where):
    import specgauge.reports.cli.certify as cert

    monkeypatch.setattr(cert, "certification", lambda *a, **k: pytest.fail("certified before checking the output path"))
    path = {"directory": tmp_path, "missing": tmp_path / "nope" / "c.csv"}.get(where)
    if path is None:
        path = _read_only_folder(tmp_path) / "c.csv"
    try:  # a folder, a missing one or an unwritable one: a bad --csv, refused before any work (2)
        assert cli_main(["certify", *SMALL_CERT, "--csv", str(path)]) == 2
        _one_line_error(capsys, {"directory": "is a folder", "read-only": "not writable", "missing": "does not exist"}[where])
    finally:
        if (tmp_path / "ro").exists():
            (tmp_path / "ro").chmod(0o755)
    assert not list(tmp_path.rglob("*.tmp"))


def test_certificate_has_a_sidecar_and_the_same_seed_gives_the_same_bytes(tmp_path, capsys):
    paths = [tmp_path / "a.csv", tmp_path / "b.csv"]
    for path in paths:
        assert cli_main(["certify", *SMALL_CERT, "--seed", "7", "--csv", str(path)]) == 0
    assert paths[0].read_bytes() == paths[1].read_bytes()
    meta = json.loads((tmp_path / "a.meta.json").read_text())
    assert (meta["command"], meta["decoder"], meta["tv"], meta["seed"]) == ("certify", "numpy", 0.05, 7)
    assert meta["specgauge_version"] and meta["rows"] == 1
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*"))


def test_certify_refuses_tv_zero_at_parse_time(capsys):
    assert cli_main(["certify", "--tv", "0"]) == 2
    assert "expected a total-variation distance in [1e-06, 1), got 0" in capsys.readouterr().err


def test_a_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    import pandas as pd

    import specgauge.csvio as csvio

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(csvio.os, "replace", broken_replace)
    with pytest.raises(ReportOutputError, match="No space left"):
        write_csv_atomic(pd.DataFrame({"x": [1]}), tmp_path / "x.csv", {"command": "t"})
    assert list(tmp_path.iterdir()) == []


def test_an_existing_read_only_file_is_refused(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("old\n")
    path.chmod(0o444)
    if os.geteuid() == 0:
        pytest.skip("root writes read-only files")
    with pytest.raises(ReportOutputError, match="read-only"):
        resolve_csv_target(path, "x.csv")


def test_certify_shows_what_it_is_doing_from_the_first_second(tmp_path, capsys, monkeypatch):
    """No silent minute: on a terminal, a bar over the sizing of each fixture's samples, then the
    certifying bar, which names the fixture it samples as soon as it starts it (in a log, lines:
    tests/test_progress_lines.py)."""
    monkeypatch.setattr("specgauge.progress.auto_mode", lambda stream=None, enabled=True: "bar")
    assert cli_main(["certify", "--fixture", "seed-six-token", "--fixture", "tiny", "--tv", "0.05",
                     "--csv", str(tmp_path / "c.csv")]) == 0
    err = capsys.readouterr().err
    sizing = [frame for frame in err.split("\r") if frame.startswith("sizing the samples:")]
    assert sizing and all("/2 [" in frame for frame in sizing), sizing  # one step per fixture
    certifying = [frame for frame in err.split("\r") if frame.startswith("certifying numpy:") and "%|" in frame]
    assert any(frame.rstrip().endswith("seed-six-token]") for frame in certifying), certifying[:3]
    assert any(frame.rstrip().endswith("tiny]") for frame in certifying), certifying[-3:]
