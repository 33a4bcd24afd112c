"""certify refuses, in one line and before any work, what cannot give an honest certificate
or cannot finish; and Ctrl-C ends a run on local processes at once.

Every refusal is exit status 2 with nothing written; each case has a time limit, since a
refusal that comes after minutes of work (or never) is the failure being guarded against.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from specgauge.reports.cli import main

FIXTURE = ["--fixture", "seed-six-token"]


def certify(tmp_path: Path, *args: str, limit: float = 60.0) -> tuple[int, str]:
    """(exit status, stderr) of ``specgauge certify`` in its own process, within ``limit`` seconds."""
    done = subprocess.run([sys.executable, "-m", "specgauge.reports.cli", "certify", "--no-progress", *args,
                           "--csv", str(tmp_path / "c.csv")], capture_output=True, text=True, timeout=limit,
                          cwd=tmp_path)
    assert "Traceback" not in done.stderr
    return done.returncode, done.stderr


def refused(tmp_path: Path, *args: str, limit: float = 60.0) -> str:
    status, err = certify(tmp_path, *args, limit=limit)
    assert status == 2, err
    assert err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "a refusal writes nothing"
    return err


@pytest.mark.parametrize("address", ["", "notaurl", "http://127.0.0.1:8786", "tcp://host:99999", "tcp://:8786"])
def test_a_malformed_scheduler_is_refused_as_an_option(address, tmp_path):
    assert "--scheduler" in refused(tmp_path, *FIXTURE, "--shards", "2", "--scheduler", address)


def test_an_unreachable_scheduler_is_refused_before_any_work(tmp_path):
    with socket.socket() as sock:  # a port that was free a moment ago: connection refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    start = time.monotonic()
    err = refused(tmp_path, *FIXTURE, "--shards", "2", "--scheduler", f"tcp://127.0.0.1:{port}")
    assert "cannot reach the Dask scheduler" in err
    assert time.monotonic() - start < 30


def test_a_server_that_never_speaks_is_not_taken_for_a_scheduler(tmp_path):
    """An HTTP server (or any peer that accepts and stays silent) in place of the scheduler:
    refused within the connect timeout, no lock file left."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(server.accept()[0]), daemon=True).start()
    try:
        start = time.monotonic()
        err = refused(tmp_path, *FIXTURE, "--shards", "2", "--scheduler", f"127.0.0.1:{server.getsockname()[1]}")
        assert "no Dask scheduler answered" in err
        assert time.monotonic() - start < 30
    finally:
        for conn in accepted:
            conn.close()
        server.close()


def test_zero_assertions_is_a_refusal_not_a_pass(tmp_path):
    err = refused(tmp_path, *FIXTURE, "--check", "greedy")
    assert "no assertion" in err and "greedy" in err


def test_more_shards_than_rows_is_refused_before_sizing(tmp_path):
    start = time.monotonic()
    assert "a shard is at least one decoder call" in refused(tmp_path, *FIXTURE, "--shards", "1000000000")
    assert time.monotonic() - start < 30


def test_more_shards_than_decoder_calls_is_refused(tmp_path):
    err = refused(tmp_path, *FIXTURE, "--shards", "100000")
    assert "decoder call(s) seed-six-token takes" in err and "ask for at most" in err


def test_a_file_where_the_shards_go_is_refused(tmp_path):
    (tmp_path / "c.csv.shards").write_text("in the way")
    status, err = certify(tmp_path, *FIXTURE, "--shards", "2")
    assert status == 2 and err.count("\n") == 1 and "is a file" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv.shards"]


def test_a_run_above_the_cpu_budget_is_refused(tmp_path):
    err = refused(tmp_path, *FIXTURE, "--guarantee", "0.01", "--max-cpu-hours", "1e-6")
    assert "CPU-hours in all" in err and "above the budget" in err and "--max-cpu-hours" in err


def test_a_second_unsharded_run_on_one_csv_is_refused(tmp_path, capsys):
    from specgauge.sweeps.journal import sweep_lock

    csv = tmp_path / "c.csv"
    with sweep_lock(csv, "specgauge certify (the first run)"):
        assert main(["certify", *FIXTURE, "--no-progress", "--csv", str(csv)]) == 1  # as the sharded run: held
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "being written by another run" in err and str(os.getpid()) in err
    assert not csv.exists()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_ends_a_run_on_local_processes_at_once(tmp_path):
    """SIGINT once the workers verify: exit 130 in one line within 5 s, no worker left, and the
    finished shards kept for the resumed run."""
    psutil = pytest.importorskip("psutil")
    proc = subprocess.Popen([sys.executable, "-m", "specgauge.reports.cli", "certify", "--no-progress",
                             "--fixture", "seed-six-token", "--fixture", "batch1-g5", "--shards", "8",
                             "--jobs", "2", "--csv", str(tmp_path / "c.csv")],
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    lines = []
    try:
        deadline = time.monotonic() + 120
        while not any(line.startswith("estimate:") for line in lines):  # sized; the shards start now
            assert time.monotonic() < deadline and proc.poll() is None, lines
            lines.append(proc.stderr.readline())
        time.sleep(1.0)
        workers = psutil.Process(proc.pid).children(recursive=True)
        assert workers, "the run should be on worker processes"
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        status = proc.wait(timeout=15)
        took = time.monotonic() - start
    finally:
        proc.kill()
    rest = proc.stderr.read()
    assert status == 130 and took < 5.0, (status, took)
    assert "interrupted" in rest and "Traceback" not in rest
    assert not [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE]
    assert not (tmp_path / "c.csv").exists() and not (tmp_path / "c.csv.lock").exists()


def test_summary_lines_fit_a_terminal(tmp_path, capsys):
    """Each printed line is at most the summary's width, a TV figure on a line with its name."""
    from specgauge.stattests.core.certificate import SUMMARY_WIDTH

    status = main(["certify", "--decoder", "specgauge.stattests.chain.zoo:long-draft-bug", "--fixture",
                   "batch1-g5", "--no-progress", "--csv", str(tmp_path / "c.csv")])
    out = capsys.readouterr()
    assert status == 1
    lines = (out.out + out.err).splitlines()
    assert max(map(len, lines)) <= SUMMARY_WIDTH, max(lines, key=len)
    assert any(line.startswith("  guaranteed TV: ") for line in lines)
    assert any(line.startswith("  directional detectable discrepancy: ") for line in lines)
