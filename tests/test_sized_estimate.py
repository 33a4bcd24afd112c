"""A sized run's estimate (``certify --guarantee TV``): complete before any work, monotone in
the TV, sized by the identity test's own function, with a refusal whose advice is accepted;
and a run stopped by SIGTERM leaves no lock and no empty shard folder behind.

The estimate against measured CPU time is in docs/scale.md (seed-six-token at TV 0.1, 0.05
and 0.02: 0.74-0.93 of the measured time).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specgauge.reports.cli import main
from specgauge.stattests.chain import certify as chain_certify
from specgauge.stattests.chain.certify import CertConfig, plan_size
from specgauge.stattests.chain.shards import sized_plan, suggested_budget

FIXTURES = ["seed-six-token", "batch8-g8"]


def _estimate(tv: float):
    config = CertConfig(tv=tv, guarantee=tv, assertions=plan_size())
    return sized_plan(config, FIXTURES)


def test_the_estimate_grows_as_the_tv_shrinks():
    """Rows, and the CPU time still to come, never fall as the TV asked gets finer (the
    estimate that once read 1.39 CPU-h at 0.05, 6.4 at 0.1 and 2.26 at 0.2 was a running sum)."""
    tvs = [0.3, 0.15, 0.08]
    ests = [_estimate(tv)[3] for tv in tvs]
    work = [e.work_seconds for e in ests]
    assert all(a <= b for a, b in zip(work, work[1:])), dict(zip(tvs, work))
    for name in FIXTURES:
        rows = [e.rows[name] for e in ests]
        assert all(a <= b for a, b in zip(rows, rows[1:])), (name, rows)
    assert all(e.check_seconds > 0 and e.spent_seconds > 0 for e in ests)
    assert all(e.total_seconds == pytest.approx(e.spent_seconds + e.cpu_seconds + e.check_seconds) for e in ests)


def test_the_rows_come_from_the_identity_tests_own_sizing(monkeypatch):
    """The estimate calls ``min_num_samples_for_identity_test`` (a blunter or sharper identity
    test moves it at once), never a copy of it. (On six tokens the identity test is within
    1.2 times the lower bound, below the KS check's rows at TV 0.1: a blunter one binds.)"""
    calls = []
    original = chain_certify.min_num_samples_for_identity_test

    def blunter(*args, **kwargs):
        calls.append(args)
        return 4 * original(*args, **kwargs)

    before = _estimate(0.1)[3].rows["seed-six-token"]
    monkeypatch.setattr(chain_certify, "min_num_samples_for_identity_test", blunter)
    after = _estimate(0.1)[3].rows["seed-six-token"]
    assert calls and after > 1.6 * before, (before, after)


@pytest.mark.parametrize("hours", [0.0001, 0.3, 2.0, 17.3])
def test_the_suggested_budget_is_above_the_estimate(hours):
    assert hours * 1.2 < suggested_budget(hours) <= hours * 1.4


def test_a_refused_run_is_accepted_with_the_budget_it_suggests(tmp_path, capsys):
    argv = ["certify", "--fixture", "seed-six-token", "--guarantee", "0.1", "--no-progress"]
    assert main([*argv, "--max-cpu-hours", "0.0001", "--csv", str(tmp_path / "a.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "estimated at" in err and "every fixture sized" in err, err
    budget = re.search(r"--max-cpu-hours ([0-9.e-]+)", err).group(1)
    assert main([*argv, "--max-cpu-hours", budget, "--csv", str(tmp_path / "b.csv")]) == 0
    err = " ".join(capsys.readouterr().err.split())  # the lines fold at 100 characters
    assert "CPU-minutes in all" in err and "spent loading and sizing" in err
    assert "can be coarser than a default run's" in err


# A decoder that turns slow after a number of calls, so that a signal finds the run working.
SLOW_DECODER = '''
import os, time
from specgauge.stattests.core.contract import load_decoder

_reference = load_decoder("numpy")


class Decoder:
    def __init__(self):
        self.calls = 0

    def verify(self, target, draft, tokens, rng):
        self.calls += 1
        if self.calls > int(os.environ["SLOW_AFTER"]):
            time.sleep(0.5)
        return _reference.verify(target, draft, tokens, rng)
'''


def _finished(shards: Path) -> list[Path]:
    """Finished shards (a shard being written is a hidden temporary file)."""
    return [p for p in shards.glob("*.npz") if not p.name.startswith(".")]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_leaves_no_lock_and_only_finished_shards(tmp_path):
    """SIGTERM unwinds as Ctrl-C does (status 143): the lock goes; a finished shard stays for
    the rerun to resume (said in one line); an unfinished one leaves nothing (below)."""
    (tmp_path / "slow_decoder.py").write_text(SLOW_DECODER)
    env = {**os.environ, "SLOW_AFTER": "10", "PYTHONPATH": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "specgauge.reports.cli", "certify", "--decoder",
                             "slow_decoder:Decoder", "--fixture", "seed-six-token", "--guarantee", "0.1", "--shards",
                             "3", "--no-progress", "--csv", "out.csv"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock, shards = tmp_path / "out.csv.lock", tmp_path / "out.csv.shards"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None and not _finished(shards):
        time.sleep(0.05)
    assert lock.exists()
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "terminated" in err and "Traceback" not in err, err
    assert not lock.exists() and not (tmp_path / "out.csv").exists()
    assert list(Path(tmp_path).glob("**/*.tmp*")) == []
    assert len(_finished(shards)) == 1 and "resumes them" in err, err


def test_an_interrupted_run_with_no_finished_shard_leaves_no_folder(tmp_path):
    from specgauge.stattests.chain.shards import ShardCache

    cache = ShardCache(tmp_path / "out.csv.shards")
    assert cache.tidy() == 0
    cache.folder.mkdir()
    (cache.folder / ".abc.123.tmp.npz").write_bytes(b"half")  # a shard being written when the signal came
    assert cache.tidy() == 0 and not cache.folder.exists()
    cache.folder.mkdir()
    (cache.folder / "abc.npz").write_bytes(b"done")
    (cache.folder / ".def.123.tmp.npz").write_bytes(b"half")
    assert cache.tidy() == 1 and [p.name for p in cache.folder.iterdir()] == ["abc.npz"]
