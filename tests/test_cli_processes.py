"""Sweep processes: workers die with their parent; one run per CSV; --restart spares a live run."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from specgauge.csvio import CsvTarget, ReportOutputError
from specgauge.reports.cli import plan
from specgauge.sweeps.journal import sweep_lock

SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from specgauge.csvio import CsvTarget
    from specgauge.sweeps.executors import SweepOptions, sweep_to_csv

    def slow(x):
        with open(sys.argv[2], "a") as handle:
            handle.write(f"{os.getpid()}\\n")
        time.sleep(60)
        return {"x": x}

    if __name__ == "__main__":
        sweep_to_csv(slow, list(range(4)), CsvTarget(Path(sys.argv[1])), {"command": "t"}, {"command": "t"},
                     SweepOptions(jobs=2, progress=False))
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie awaiting its reaper has exited too
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="checks worker processes through /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_workers_exit_when_the_parent_dies(tmp_path, sig):
    script, pids = tmp_path / "s.py", tmp_path / "pids.txt"
    script.write_text(SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "o.csv"), str(pids)])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not pids.exists() or len(pids.read_text().split()) < 2):
        time.sleep(0.05)
    workers = [int(p) for p in pids.read_text().split()]
    assert len(workers) == 2
    proc.send_signal(sig)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in workers):
        time.sleep(0.05)
    alive = [p for p in workers if _alive(p)]
    for pid in alive:  # clean up before failing
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"workers {alive} outlived their parent"


SMALL = ["--gamma", "2", "--batch-size", "1", "--requests", "10", "--output-len", "16", "--no-progress"]


@pytest.mark.parametrize("extra", [[], ["--restart"]], ids=["second run", "restart"])
def test_a_second_run_on_the_same_csv_is_refused_naming_the_holder(tmp_path, capsys, extra):
    from specgauge.reports.cli import main

    csv = tmp_path / "p.csv"
    journal = tmp_path / "p.csv.partial.jsonl"
    journal.write_text('{"journal":"specgauge-sweep-journal"}\n')  # the live run's journal
    with sweep_lock(CsvTarget(csv), "specgauge plan --jobs 2"):
        assert main(["plan", *SMALL, "--csv", str(csv), *extra]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"pid {os.getpid()} on {socket.gethostname()}: specgauge plan --jobs 2" in err, err
    assert journal.exists() and not csv.exists()
    assert plan.main([*SMALL, "--csv", str(csv), *extra]) == 0  # once the holder is gone
    assert not (tmp_path / "p.csv.lock").exists()


def test_a_lock_left_by_a_killed_run_does_not_block(tmp_path):
    target = CsvTarget(tmp_path / "p.csv")
    target.lock_path.write_text('{"pid": 1, "host": "gone", "command": "specgauge plan"}')  # no one holds it
    with sweep_lock(target, "me"):
        with pytest.raises(ReportOutputError, match="me"):
            with sweep_lock(target, "other"):
                pass
