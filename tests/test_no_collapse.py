"""Swept options never collapse silently: decisions per α (and every other swept option), plots per configuration."""

from __future__ import annotations

import pandas as pd
import pytest

from specgauge.reports.planning.decisions import decide, recommendation
from specgauge.reports.planning.slo import parse_slo

COLUMNS = ["gpu", "tp", "gamma", "acceptance", "alpha", "seed", "policy", "batch_size", "qps"]


def _frame() -> pd.DataFrame:
    """At α 0.6 γ 2 is best and speculation stops paying between batch 16 and 64; at α 0.8 γ 4 pays throughout."""
    speedup = {(0.6, 2): [1.5, 1.1, 0.8], (0.6, 4): [1.3, 0.9, 0.6], (0.8, 2): [1.8, 1.5, 1.2],
               (0.8, 4): [2.2, 1.7, 1.3]}
    rows = []
    for (alpha, gamma), values in speedup.items():
        for batch, s in zip((1, 16, 64), values):
            rows.append({"gpu": "h200", "tp": 1, "gamma": gamma, "acceptance": f"iid({alpha:g})", "alpha": alpha,
                         "seed": 0, "policy": "fixed", "batch_size": batch, "qps": None,
                         "speedup_vs_no_spec": s, "tpot_speedup_vs_no_spec": s, "output_throughput": 100.0 * s,
                         "mean_tpot_ms": 10.0 / s, "no_spec_output_throughput": 100.0, "no_spec_mean_tpot_ms": 10.0})
    return pd.DataFrame(rows)


def test_best_gamma_and_break_even_per_alpha():
    decisions = decide(_frame(), COLUMNS, parse_slo(None))
    best = decisions[decisions["decision"] == "best_gamma_latency"]
    assert set(best["scope"]) == {"acceptance=iid(0.6)", "acceptance=iid(0.8)"}
    at_one = best[best["batch_size"] == 1].set_index("scope")["gamma"]
    assert at_one["acceptance=iid(0.6)"] == 2 and at_one["acceptance=iid(0.8)"] == 4
    at_64 = best[best["batch_size"] == 64].set_index("scope")["gamma"]
    assert at_64["acceptance=iid(0.6)"] == 0          # nothing pays there at α 0.6
    spec = decisions[decisions["decision"] == "spec_breakeven_batch_size"].set_index("scope")
    assert pd.notna(spec.loc["acceptance=iid(0.6)", "value"]) and pd.isna(spec.loc["acceptance=iid(0.8)", "value"])
    lines = recommendation(decisions)
    assert any(line.startswith("[acceptance=iid(0.6)]") for line in lines)
    assert any(line.startswith("[acceptance=iid(0.8)]") for line in lines)


def test_seeds_and_policies_are_scopes_too():
    frame = pd.concat([_frame()[_frame()["alpha"] == 0.8].assign(seed=s) for s in (0, 1)], ignore_index=True)
    best = decide(frame, COLUMNS, parse_slo(None))
    assert set(best["scope"]) == {"seed=0", "seed=1"}


def test_the_speedup_plot_draws_each_draft_and_layout_apart(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import specgauge.reports.figures.curves as plots

    seen = {}

    def recording_save(fig, path):
        seen[path.name] = [(ax.get_title(), len(ax.get_lines())) for ax in fig.axes if ax.get_visible()]
        seen[path.name + ":suptitle"] = fig._suptitle.get_text() if fig._suptitle else ""
        return path

    monkeypatch.setattr(plots, "save_figure", recording_save)
    rows = [{"gamma": g, "batch_size": b, "draft": d, "tp": tp, "alpha": 0.8,
             "speedup_vs_no_spec": (2.0 if d == "eagle" else 1.5) / (1 + b * tp / 64) if g else 1.0,
             "spec_decode_acceptance_length": 2.0, "output_throughput": 100.0 * b, "p99_tpot_ms": 10.0 + b}
            for d in ("eagle", "qwen3-0.6b") for tp in (1, 2) for g in (0, 2, 4) for b in (1, 16, 256)]
    plots.plot_plan(pd.DataFrame(rows), tmp_path / "plan.csv", "qwen3-32b (tp 1/2)")
    panels = seen["plan_speedup_vs_batch.png"]
    assert sorted(title for title, _ in panels) == ["draft eagle, tp 1", "draft eagle, tp 2",
                                                   "draft qwen3-0.6b, tp 1", "draft qwen3-0.6b, tp 2"]
    assert "tp 1/2" in seen["plan_speedup_vs_batch.png:suptitle"]


def test_figure_titles_name_the_layout():
    from specgauge.reports.cli.plan import scenario_title
    from specgauge.simulator import SimulationConfig

    dense = scenario_title([SimulationConfig(gpu="h100", target="llama-3.1-70b", draft="eagle", tp=4)])
    assert "(tp 4)" in dense
    moe = scenario_title([SimulationConfig(gpu="h200", target="deepseek-v3", draft="mtp", tp=1, dp=8, ep=8)])
    assert "(tp 1 × dp 8, ep 8)" in moe


def test_unstable_runs_are_marked_in_the_rate_figure(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import specgauge.reports.figures.curves as plots

    seen = {}

    def legend(fig, path):
        seen[path.name] = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        return path

    monkeypatch.setattr(plots, "save_figure", legend)
    rows = [{"gamma": g, "qps": q, "batch_size": 64, "alpha": 0.8, "stable": q < 16,
             "tpot_speedup_vs_no_spec": 1.5 if g else 1.0, "speedup_vs_no_spec": 1.2 if g else 1.0,
             "output_throughput": 100.0 * q, "p99_tpot_ms": 10.0 + q} for g in (0, 3) for q in (2, 8, 16, 32)]
    plots.plot_plan(pd.DataFrame(rows), tmp_path / "plan.csv")
    assert "unstable run (queue growing)" in seen["plan_speedup_vs_rate.png"]
