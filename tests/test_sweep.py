"""Sweeps: executors agree, rows are journaled as they finish, kill -9 loses nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from specgauge.csvio import CsvTarget, ReportOutputError, resolve_csv_target
from specgauge.sweeps.executors import SweepError, SweepOptions, run_sweep, sweep_to_csv


def square(x: int) -> dict:
    return {"x": x, "y": x * x / 7, "label": f"c{x}"}


def failing(x: int) -> dict:
    if x == 3:
        raise SweepError("x may not be 3")
    return square(x)


ITEMS = list(range(12))
EXPECTED = [square(x) for x in ITEMS]


@pytest.mark.parametrize("options", [SweepOptions(progress=False), SweepOptions(jobs=2, progress=False)], ids=["serial", "jobs2"])
def test_executors_return_rows_in_configuration_order(options):
    assert run_sweep(square, ITEMS, options) == EXPECTED


def test_dask_local_cluster_gives_the_same_rows():
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        options = SweepOptions(executor="dask", scheduler=cluster.scheduler_address, progress=False)
        assert run_sweep(square, ITEMS, options) == EXPECTED


@pytest.mark.parametrize("options, message", [
    (SweepOptions(executor="dask"), "needs --scheduler"),
    (SweepOptions(executor="serial", jobs=4), "contradicts"),
    (SweepOptions(scheduler="tcp://x:1", executor="process"), "only applies"),
    (SweepOptions(jobs=0), "≥ 1"),
])
def test_contradictory_options_are_refused(options, message):
    with pytest.raises(SweepError, match=message):
        options.resolved_executor()


def test_a_failure_names_its_configuration_and_keeps_finished_rows(tmp_path):
    target = CsvTarget(tmp_path / "s.csv")
    with pytest.raises(SweepError, match=r"configuration 3 \(3\): x may not be 3"):
        sweep_to_csv(failing, ITEMS, target, {"command": "t"}, {}, SweepOptions(progress=False))
    assert not target.path.exists()
    lines = target.journal_path.read_text().splitlines()
    assert [json.loads(line)["i"] for line in lines[1:]] == [0, 1, 2]


def test_an_aborted_sweep_never_blocks_the_corrected_one_and_lends_it_its_rows(tmp_path):
    target = CsvTarget(tmp_path / "s.csv")
    with pytest.raises(SweepError):  # rows 0, 1, 2 finish, then 3 fails
        sweep_to_csv(failing, ITEMS, target, {"command": "t"}, {}, SweepOptions(progress=False))
    corrected = [0, 2, 20, 21]  # other arguments: two configurations in common
    calls = []
    frame, resumed = sweep_to_csv(lambda x: calls.append(x) or square(x), corrected, target, {"command": "t"}, {},
                                  SweepOptions(progress=False))
    assert resumed == 2 and calls == [20, 21]
    assert frame.to_dict("records") == pd.DataFrame([square(x) for x in corrected]).to_dict("records")
    assert not target.journal_path.exists()


def test_a_journal_of_another_context_is_not_reused_and_restart_discards_it(tmp_path):
    target = CsvTarget(tmp_path / "s.csv")
    with pytest.raises(SweepError):
        sweep_to_csv(failing, ITEMS, target, {"command": "t", "seed": 1}, {}, SweepOptions(progress=False))
    frame, resumed = sweep_to_csv(square, ITEMS[:3], target, {"command": "t", "seed": 2}, {}, SweepOptions(progress=False))
    assert resumed == 0 and len(frame) == 3
    with pytest.raises(SweepError):
        sweep_to_csv(failing, ITEMS, target, {"command": "t"}, {}, SweepOptions(progress=False))
    frame, resumed = sweep_to_csv(square, ITEMS, target, {"command": "t"}, {}, SweepOptions(progress=False), restart=True)
    assert resumed == 0 and len(frame) == 12 and not target.journal_path.exists()


def test_a_torn_last_line_is_dropped(tmp_path):
    target = CsvTarget(tmp_path / "s.csv")
    with pytest.raises(SweepError):
        sweep_to_csv(failing, ITEMS, target, {"command": "t"}, {}, SweepOptions(progress=False))
    with open(target.journal_path, "ab") as handle:
        handle.write(b'{"i":3,"row":{"x":3,"y"')
    frame, resumed = sweep_to_csv(square, ITEMS, target, {"command": "t"}, {}, SweepOptions(progress=False))
    assert resumed == 3
    assert frame.to_dict("records") == pd.DataFrame(EXPECTED).to_dict("records")


@pytest.mark.parametrize("make", ["missing", "file"])
def test_csv_in_a_missing_folder_is_refused_before_any_work(tmp_path, make):
    path = tmp_path / "nope" / "out.csv" if make == "missing" else tmp_path / "out.txt"
    with pytest.raises(ReportOutputError):
        resolve_csv_target(path, "x.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_csv_in_a_read_only_folder_is_refused(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        if os.access(folder, os.W_OK):  # root: chmod does not stop it, /proc does
            folder = Path("/proc")
        with pytest.raises(ReportOutputError, match="not writable"):
            resolve_csv_target(folder / "out.csv", "x.csv")
    finally:
        (tmp_path / "ro").chmod(0o755)


SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from specgauge.csvio import CsvTarget
    from specgauge.sweeps.executors import SweepOptions, sweep_to_csv

    CALLS = sys.argv[2]

    def slow(x):
        fd = os.open(CALLS, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, f"{x}\\n".encode())
        os.close(fd)
        time.sleep(float(sys.argv[3]))
        return {"x": x, "y": x / 3, "z": [x, x + 1]}

    if __name__ == "__main__":
        options = SweepOptions(jobs=int(sys.argv[4]), progress=False)
        frame, resumed = sweep_to_csv(slow, list(range(16)), CsvTarget(Path(sys.argv[1])), {"command": "kill-test"}, {"command": "kill-test"}, options)
        print("resumed", resumed)
    """
)


def test_kill_9_midway_loses_no_finished_row_and_resumes(tmp_path):
    script = tmp_path / "sweep_script.py"
    script.write_text(SCRIPT)
    csv, calls = tmp_path / "out.csv", tmp_path / "calls.txt"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, str(script), str(csv), str(calls), "0.1", "2"], env=env)
    journal = csv.with_name(csv.name + ".partial.jsonl")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if journal.exists() and journal.read_text().count("\n") >= 6:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not csv.exists(), "the CSV appears only once complete"
    lines = journal.read_bytes().split(b"\n")
    finished = {json.loads(line)["i"] for line in lines[1:-1]}
    assert len(finished) >= 5
    calls.write_text("")
    out = subprocess.run([sys.executable, str(script), str(csv), str(calls), "0", "1"], env=env, capture_output=True, text=True, check=True)
    assert f"resumed {len(finished)}" in out.stdout
    recomputed = {int(v) for v in calls.read_text().split()}
    assert recomputed.isdisjoint(finished) and recomputed | finished == set(range(16))
    resumed_bytes = csv.read_bytes()
    csv.unlink()
    subprocess.run([sys.executable, str(script), str(csv), str(calls), "0", "2"], env=env, check=True, capture_output=True)
    assert csv.read_bytes() == resumed_bytes, "a resumed sweep and an uninterrupted one give the same bytes"
    frame = pd.read_csv(csv)
    assert frame["x"].tolist() == list(range(16))


def test_a_sweep_failing_before_any_row_leaves_no_file(tmp_path):
    target = CsvTarget(tmp_path / "s.csv")
    with pytest.raises(SweepError):
        sweep_to_csv(failing, [3, 1], target, {"command": "t"}, {}, SweepOptions(progress=False))
    assert list(tmp_path.iterdir()) == []
