"""The figures: the Pareto front is right, and each PNG appears beside the CSV."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("matplotlib")

from specgauge.reports.plots import pareto_front, plot_plan  # noqa: E402


def test_pareto_front_keeps_only_undominated_points():
    throughput = np.array([10.0, 20.0, 15.0, 30.0, 25.0])
    latency = np.array([1.0, 2.0, 3.0, 4.0, 4.0])
    assert sorted(pareto_front(throughput, latency).tolist()) == [0, 1, 3]


def test_plan_figures_are_written_beside_the_csv(tmp_path):
    rows = [{"gamma": g, "batch_size": b, "alpha": 0.8, "speedup_vs_no_spec": 2.0 / (1 + b / 64) if g else 1.0,
             "spec_decode_acceptance_length": (1 - 0.8 ** (g + 1)) / 0.2, "output_throughput": 100.0 * b,
             "p99_tpot_ms": 10.0 + b / 4 + g} for g in (0, 2, 4) for b in (1, 16, 256)]
    paths = plot_plan(pd.DataFrame(rows), tmp_path / "plan.csv")
    assert [p.name for p in paths] == ["plan_speedup_vs_batch.png", "plan_tokens_per_pass.png", "plan_pareto.png"]
    assert all(p.stat().st_size > 5000 for p in paths)
