"""What a sized run's time estimate assumes on small vocabularies: the harness's and the
NumPy reference's cost per row and per verify call, where bytes of decoder input say little.

``specgauge.stattests.chain.shards.ROW_SECONDS`` and ``CALL_SECONDS`` come from this run on
the project's 2-core machine; the estimate adds them to the input bytes at
``REFERENCE_BYTES_PER_SECOND`` (measured by bench_sample_complexity.py on the 152k fixture).

Run with ``pytest benchmarks/bench_sharded.py -s``.
"""

from __future__ import annotations

import time

import numpy as np

from specgauge.fixtures.pairs import FIXTURES
from specgauge.stattests.chain.harness import call_step, verify_rows
from specgauge.stattests.chain.shards import CALL_SECONDS, ROW_SECONDS
from specgauge.stattests.core.contract import load_decoder


def _cpu_seconds(fixture_name: str, rows: int, step: int | None = None) -> tuple[float, int]:
    """CPU seconds of ``rows`` reference rows in calls of ``step`` rows (default: as a run splits them)."""
    fixture = FIXTURES[fixture_name]
    step = step or call_step(fixture, rows, 64 * 2**20)
    rngs = tuple(np.random.default_rng(s) for s in np.random.SeedSequence(0).spawn(4))
    start = time.process_time()
    part = verify_rows(load_decoder("numpy"), fixture, rows, step, rngs, None)
    assert part.error is None
    return time.process_time() - start, -(-rows // step)


def test_row_and_call_costs():
    """Per-row cost from many rows in few calls, per-call cost from one-row calls."""
    many, calls_many = _cpu_seconds("seed-six-token", 200_000, step=50_000)  # a run would split it finer
    single, calls_single = _cpu_seconds("batch1-g5", 4_000)
    row = (many - calls_many * CALL_SECONDS) / 200_000
    call = single / calls_single
    print(f"\nseed-six-token: 200,000 rows in {calls_many} calls, {many:.2f} CPU-s: {row:.2e} s a row")
    print(f"batch1-g5: {calls_single:,} one-row calls, {single:.2f} CPU-s: {call:.2e} s a call")
    print(f"constants in use: ROW_SECONDS {ROW_SECONDS:.1e}, CALL_SECONDS {CALL_SECONDS:.1e}")
    assert row > 0 and call > 0
