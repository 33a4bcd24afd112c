"""Sized and sharded certification: ``specgauge certify --guarantee TV --shards N``.

The certificate of a shard plan is the same bytes whichever executor ran the shards (one
process, local processes, a Dask cluster) and after an interrupted run is resumed; the
guarantee printed is the identity rows' own figure; a bad TV or a run this machine cannot
hold is refused in one line before anything is written.
"""

from __future__ import annotations

import itertools


import numpy as np
import pytest

from specgauge.reports.cli import main

FIXTURES = ["--fixture", "seed-six-token", "--fixture", "batch1-g5"]
GUARANTEE = 0.1
DECODER = "stopping_decoder:Decoder"
STOP_ENV = "SPECGAUGE_TEST_STOP_AFTER"

# The NumPy reference, with a switch that interrupts the run (as Ctrl-C does) after N verify calls.
STOPPING_DECODER = f'''
import os
from specgauge.stattests.core.contract import load_decoder

_reference = load_decoder("numpy")


class Decoder:
    def __init__(self):
        self.calls = 0

    def verify(self, target, draft, tokens, rng):
        self.calls += 1
        limit = int(os.environ.get("{STOP_ENV}", "0"))
        if limit and self.calls > limit:
            raise KeyboardInterrupt
        return _reference.verify(target, draft, tokens, rng)
'''


@pytest.fixture(scope="module")
def decoder_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("decoder")
    (folder / "stopping_decoder.py").write_text(STOPPING_DECODER)
    return folder


@pytest.fixture(autouse=True)
def importable(decoder_dir, monkeypatch):
    monkeypatch.syspath_prepend(str(decoder_dir))  # forked local workers inherit it
    monkeypatch.delenv(STOP_ENV, raising=False)


def certify(csv, *extra) -> int:
    return main(["certify", "--decoder", DECODER, *FIXTURES, "--guarantee", str(GUARANTEE), "--shards", "3",
                 "--no-progress", "--csv", str(csv), *extra])


@pytest.fixture(scope="module")
def one_process(decoder_dir, tmp_path_factory):
    """The reference bytes: three shards a fixture, one after another in this process."""
    import sys

    sys.path.insert(0, str(decoder_dir))
    try:
        csv = tmp_path_factory.mktemp("serial") / "c.csv"
        assert certify(csv) == 0
    finally:
        sys.path.remove(str(decoder_dir))
    return csv.read_bytes()


def test_local_processes_write_the_same_bytes(one_process, tmp_path):
    csv = tmp_path / "c.csv"
    assert certify(csv, "--jobs", "2") == 0
    assert csv.read_bytes() == one_process
    assert not (tmp_path / "c.csv.shards").exists() and not (tmp_path / "c.csv.lock").exists()


def test_a_dask_cluster_writes_the_same_bytes(one_process, tmp_path):
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        csv = tmp_path / "c.csv"
        assert certify(csv, "--scheduler", cluster.scheduler_address) == 0
    assert csv.read_bytes() == one_process


def test_an_interrupted_run_resumes_to_the_same_bytes(one_process, tmp_path, monkeypatch, capsys):
    csv = tmp_path / "c.csv"
    monkeypatch.setenv(STOP_ENV, "10")  # shard 1 of seed-six-token: shard 0 (2 + 5 calls) is finished
    assert certify(csv) == 130
    kept = list((tmp_path / "c.csv.shards").glob("*.npz"))
    assert not csv.exists() and len(kept) == 1
    monkeypatch.delenv(STOP_ENV)
    capsys.readouterr()
    assert certify(csv) == 0
    assert "resumed 1 of 6 shard(s)" in capsys.readouterr().out
    assert csv.read_bytes() == one_process
    assert not (tmp_path / "c.csv.shards").exists()


def test_the_guarantee_printed_is_the_identity_rows(decoder_dir, tmp_path, capsys):
    import pandas as pd

    csv = tmp_path / "c.csv"
    assert main(["certify", "--decoder", DECODER, *FIXTURES, "--guarantee", str(GUARANTEE), "--no-progress",
                 "--check", "identity", "--csv", str(csv)]) == 0
    out = capsys.readouterr()
    assert "estimate:" in out.err and "GB of decoder input" in out.err and "CPU-minutes" in out.err
    # each sized fixture's rows beside the rows below which no test reaches the rates
    limits = [x for x in out.err.splitlines() if x.startswith("limit: ")]
    assert [x.split()[1] for x in limits] == ["seed-six-token", "batch1-g5"]
    assert all("x the lower bound" in x for x in limits)
    frame = pd.read_csv(csv)
    identity = frame[frame["check"] == "identity"]
    worst = identity.groupby("fixture", sort=False)["min_detectable_tv"].max()
    # sized on the planning figure: the stated one is within a few per cent of the TV asked
    assert set(worst.index) == {"seed-six-token", "batch1-g5"} and (worst < 2 * GUARANTEE).all()
    lines = out.out.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("worst-case TV reached"))
    folded = itertools.takewhile(lambda x: x.startswith("  "), lines[at + 1:])  # the summary folds at 100 characters
    line = " ".join([lines[at], *(x.strip() for x in folded)])
    assert line.endswith("; ".join(f"{k} {v:.3g}" for k, v in worst.items()))
    assert ("short of TV" in out.out) == bool((worst > GUARANTEE).any())


@pytest.mark.parametrize("tv", ["0", "1", "1.5", "-0.1", "nan", "1e-300", "1e-7"])
def test_a_guarantee_outside_0_1_is_refused(tv, tmp_path, capsys):
    assert main(["certify", *FIXTURES, "--guarantee", tv, "--csv", str(tmp_path / "c.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--guarantee" in err
    assert list(tmp_path.iterdir()) == []


def test_a_run_the_machine_cannot_hold_is_refused(tmp_path, capsys):
    assert main(["certify", *FIXTURES, "--guarantee", "2e-6", "--csv", str(tmp_path / "c.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "GB of memory" in err and "rows" in err
    assert list(tmp_path.iterdir()) == []


def test_executor_options_need_a_sharded_run(tmp_path, capsys):
    assert main(["certify", *FIXTURES, "--jobs", "2", "--csv", str(tmp_path / "c.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--shards" in err
    assert list(tmp_path.iterdir()) == []


def test_shards_split_whole_calls_on_streams_of_their_own():
    from specgauge.fixtures.pairs import FIXTURES as PAIRS
    from specgauge.stattests.chain.shards import Shard, shard_seed

    fx = PAIRS["seed-six-token"]
    for rows, step, n in ((5527, 346, 3), (10, 4, 5), (7, 7, 2)):
        shards = [Shard("numpy", fx.name, 0, None, rows, step, n, k) for k in range(n)]
        assert sum(s.shard_rows for s in shards) == rows
        assert all(s.shard_rows % step == 0 for s in shards[:-1])  # only the last call may be short
    # a shard's stream depends on the seed and its index only, never on seed + k
    first = shard_seed(5, fx, 1).generate_state(4)
    assert np.array_equal(first, shard_seed(5, fx, 1).generate_state(4))
    assert not np.array_equal(shard_seed(5, fx, 0).generate_state(4), shard_seed(4, fx, 1).generate_state(4))
    assert not np.array_equal(shard_seed(0, fx, 1).generate_state(4), first)


def test_a_sized_run_without_shards_cuts_about_a_cpu_minute_each():
    from specgauge.fixtures.pairs import FIXTURES as PAIRS
    from specgauge.stattests.chain.shards import SHARD_SECONDS, plan_shards, reference_seconds

    small, wide = PAIRS["seed-six-token"], PAIRS["zipf-152k-tv0.2"]
    rows = {small.name: 5_000, wide.name: 400_000}
    plan = plan_shards("numpy", [small, wide], rows, 0, None, 64 * 2**20, None)
    counts = {name: sum(s.fixture == name for s in plan) for name in rows}
    assert counts[small.name] == 1
    assert counts[wide.name] == -(-reference_seconds(wide, 400_000, 64 * 2**20, True) // SHARD_SECONDS) > 1
    assert sum(s.shard_rows for s in plan if s.fixture == wide.name) == 400_000


@pytest.mark.parametrize("name", ["seed-six-token", "batch3-g7", "zipf-152k-tv0.2", "heterogeneous", "greedy"])
def test_a_shard_sends_packed_rows_that_unpack_bit_for_bit(name):
    """What the merge unpacks is what the shard's rows were: tokens, lengths, PIT values
    (redrawn from the pit stream on context-free fixtures) and acceptances."""
    from specgauge.fixtures.pairs import FIXTURES as PAIRS
    from specgauge.stattests.chain.harness import call_step, verify_rows
    from specgauge.stattests.chain.shards import Shard, pack_rows, shard_seed, unpack_rows
    from specgauge.stattests.core.reference import NumpyDecoder

    fx = PAIRS[name]
    rows = max(3, min(1_000, 400_000 // (fx.vocab_size * (fx.gamma + 1))))
    step = call_step(fx, rows, 64 * 2**20)
    shard = Shard("numpy", name, 7, None, rows, step, 2, 1)

    def streams():
        return tuple(np.random.default_rng(s) for s in shard_seed(7, fx, 1).spawn(4))

    whole = verify_rows(NumpyDecoder(), fx, shard.shard_rows, step, streams(), None).arrays
    sent = verify_rows(NumpyDecoder(), fx, shard.shard_rows, step, streams(), None, pit=False).arrays
    got = unpack_rows(fx, pack_rows(fx, sent), step, streams()[3])
    for key in ("lengths", "tokens", "pit_id", "pit_ratio") + (() if fx.context_free else ("alpha",)):
        assert got[key].dtype == whole[key].dtype and np.array_equal(got[key], whole[key], equal_nan=True), key


def test_a_200k_row_shard_sends_under_a_megabyte():
    """A worker sends its rows packed (400 kB here), not the checks' per-row arrays (30 MB)."""
    import pickle

    from specgauge.stattests.chain.shards import Shard, run_shard

    result = run_shard(Shard("numpy", "seed-six-token", 0, None, 200_000, 12_500, 1, 0))
    assert result["rows"] == 200_000 and not result["error"]
    assert len(pickle.dumps(result)) < 1_000_000
