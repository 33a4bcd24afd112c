"""The plan's break-even load per configuration, with the best γ on each side (decision CSV and recommendation)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specgauge.reports.planning.decisions import decide, recommendation
from specgauge.reports.planning.slo import parse_slo

COLUMNS = ["gpu", "gamma", "batch_size", "qps"]


def _frame(crossings: dict[int, float], axis: str = "batch_size") -> pd.DataFrame:
    """Speed-up of γ falls through 1 at ``crossings[γ]``, log-linear in load; γ = 8 wins at low load."""
    rows = []
    for load in (1, 4, 16, 64, 256):
        for gamma, cross in crossings.items():
            speedup = 1.0 + (0.1 if gamma == 1 else 0.6) * np.log2(cross / load)
            rows.append({"gpu": "h200", "gamma": gamma, "batch_size": load if axis == "batch_size" else 64,
                         "qps": float(load) if axis == "qps" else None, "speedup_vs_no_spec": speedup,
                         "tpot_speedup_vs_no_spec": speedup, "mean_tpot_ms": 10 / speedup, "no_spec_mean_tpot_ms": 10.0,
                         "output_throughput": 100 * speedup, "no_spec_output_throughput": 100.0})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("axis, decision", [("batch_size", "spec_breakeven_batch_size"),
                                            ("qps", "spec_breakeven_request_rate")])
def test_the_break_even_load_and_the_best_gamma_below_it(axis, decision):
    decisions = decide(_frame({1: 216.0, 8: 77.4}, axis), COLUMNS, parse_slo(None))
    row = decisions[decisions["decision"] == decision].iloc[0]
    # The best γ's envelope: γ = 8 up to 16, γ = 1 at 64 (1.17x), nothing at 256 (γ = 1: 0.92x).
    expected = np.exp(np.log(64) + (0.1 * np.log2(216 / 64)) / (0.1 * np.log2(216 / 64) - 0.1 * np.log2(216 / 256))
                      * np.log(4))
    assert row["value"] == pytest.approx(expected)
    assert int(row["gamma"]) == 1 and "γ 1 loses least" in row["detail"]
    assert any(line.startswith("Break-even load: speculation stops paying") for line in recommendation(decisions))


def test_no_break_even_when_some_gamma_pays_at_every_load():
    decisions = decide(_frame({1: 1000.0, 8: 77.4}), COLUMNS, parse_slo(None))
    row = decisions[decisions["decision"] == "spec_breakeven_batch_size"].iloc[0]
    assert pd.isna(row["value"]) and "pays at every swept" in row["detail"]
