"""Speed of `specgauge plan`: the default scenario, and a sweep's scaling from --jobs 1 to 2.

Run with ``pytest benchmarks/bench_plan.py --benchmark-enable -s``. The sweep's size is
``SPECGAUGE_BENCH_CONFIGS`` configurations at ``SPECGAUGE_BENCH_REQUESTS`` requests each
(defaults 96 and 2000; the issue's full-size check is 1000 and 2000).
"""

from __future__ import annotations

import os
import time

import pytest

from specgauge.reports.cli import plan

CONFIGS = int(os.environ.get("SPECGAUGE_BENCH_CONFIGS", "96"))
REQUESTS = int(os.environ.get("SPECGAUGE_BENCH_REQUESTS", "2000"))


def _sweep_argv(csv: str, jobs: int) -> list[str]:
    """CONFIGS configurations: γ × batch size × seed, saturated."""
    gammas, batches = "0,1,2,3,4,5,6,8", "8,16,32,64,128,256"
    seeds = ",".join(str(s) for s in range(max(1, -(-CONFIGS // 48))))
    return ["--gamma", gammas, "--batch-size", batches, "--seed", seeds, "--requests", str(REQUESTS),
            "--no-progress", "--csv", csv, "--jobs", str(jobs)]


def test_default_plan_under_30_seconds(benchmark, tmp_path, monkeypatch, speed_target):
    monkeypatch.chdir(tmp_path)
    started = time.perf_counter()
    assert benchmark.pedantic(plan.main, args=([],), rounds=1, iterations=1) == 0
    elapsed = time.perf_counter() - started
    benchmark.extra_info["default_plan_seconds"] = round(elapsed, 2)
    print(f"\ndefault plan: {elapsed:.1f} s")
    speed_target(elapsed < 30, f"the default plan took {elapsed:.1f} s (target under 30 s)")
    assert (tmp_path / "specgauge-out" / "plan.csv").exists()


_TIMINGS: dict[str, float] = {}  # --jobs 1 runs first (parametrize order), --jobs 2 reports the ratio


@pytest.mark.parametrize("jobs", [1, 2])
def test_sweep_scaling_with_jobs(benchmark, tmp_path, jobs):
    csv = str(tmp_path / f"sweep{jobs}.csv")
    started = time.perf_counter()
    assert benchmark.pedantic(plan.main, args=(_sweep_argv(csv, jobs),), rounds=1, iterations=1) == 0
    elapsed = time.perf_counter() - started
    timings = _TIMINGS
    timings[str(jobs)] = elapsed
    benchmark.extra_info["seconds"] = round(elapsed, 2)
    message = f"\n{CONFIGS} configurations x {REQUESTS} requests, --jobs {jobs}: {elapsed:.1f} s"
    if jobs == 2 and "1" in timings:
        message += f" (speed-up from 1 to 2 jobs: {timings['1'] / elapsed:.2f}x)"
        benchmark.extra_info["speedup_1_to_2"] = round(timings["1"] / elapsed, 2)
    print(message)
