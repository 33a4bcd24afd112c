"""The figures: the Pareto front is right, and each PNG appears beside the CSV."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("matplotlib")

from specgauge.reports.figures.curves import pareto_front, plot_plan  # noqa: E402


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


def test_plan_figures_name_the_scenario_the_metric_and_the_draft_memory_cap(tmp_path, monkeypatch):
    import specgauge.reports.figures.curves as plots

    seen, labels = {}, {}
    real_save = plots.save_figure

    def recording_save(fig, path):
        ax = fig.axes[0]
        legend = ax.get_legend()
        seen[path.name] = (ax.get_title(), ax.get_xlabel(), ax.get_ylabel(),
                           [t.get_text() for t in legend.get_texts()] if legend else [])
        labels[path.name] = sorted(t.get_text() for t in ax.texts)
        return real_save(fig, path)

    monkeypatch.setattr(plots, "save_figure", recording_save)
    rows = [{"gamma": g, "batch_size": b, "alpha": 0.8, "speedup_vs_no_spec": 2.0 / (1 + b / 64) if g else 1.0,
             "spec_decode_acceptance_length": 2.0, "output_throughput": 100.0 * b, "p99_tpot_ms": 10.0 + b,
             "max_concurrency": 203, "max_concurrency_no_draft": 304} for g in (0, 2) for b in (1, 16, 256)]
    scenario = "qwen3-32b, draft qwen3-0.6b, on h200; acceptance iid(0.8)"
    plot_plan(pd.DataFrame(rows), tmp_path / "plan.csv", scenario)
    assert all(scenario in title for title, _, _, _ in seen.values())
    title, xlabel, ylabel, legend = seen["plan_speedup_vs_batch.png"]
    assert "output-throughput speed-up" in ylabel and "batch cap" in xlabel
    assert "draft's memory caps the batch at 203" in legend
    assert seen["plan_pareto.png"][1:3] == ("p99 TPOT (ms)", "output throughput (tokens/s)")
    assert "Pareto front (each point: its batch cap)" in seen["plan_pareto.png"][3]
    # every point of the front says which batch cap it is: here the front is γ = 2 at each cap
    assert labels["plan_pareto.png"] == ["1", "16", "256"], labels
