"""Acceptance beyond the measured positions: extended by a stated model, or refused, and said either way."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from specgauge.reports.cli import plan
from specgauge.reports.planning.measured_rates import parse_acceptance
from specgauge.simulator.acceptance import PerPositionAcceptance, geometric_decay


def test_the_geometric_decay_recovers_a_known_one_and_is_named():
    rates = tuple(0.9 * 0.85 ** np.arange(4))
    assert geometric_decay(rates) == pytest.approx(0.85)
    model = PerPositionAcceptance(rates[:3], beyond="geometric")
    assert model.expected_tokens_per_pass(4) == pytest.approx(1 + np.cumprod(rates).sum())
    assert "geometric ×0.85" in model.label()
    # the old rule, the known-bad case: the last rate repeated overstates position 4
    assert PerPositionAcceptance(rates[:3]).expected_tokens_per_pass(4) > model.expected_tokens_per_pass(4)
    assert geometric_decay((0.7, 0.8)) == 1.0      # a rise is not extended
    with pytest.raises(Exception, match="beyond the 3 positions"):
        PerPositionAcceptance(rates[:3], beyond="refuse").expected_tokens_per_pass(5)


def test_a_run_measured_at_three_tokens_never_recommends_gamma_five_silently(tmp_path, capsys):
    result = tmp_path / "bench.json"
    result.write_text(json.dumps({"spec_decode_per_position_acceptance_rates": [0.8, 0.62, 0.47]}))
    csv = tmp_path / "p.csv"
    argv = ["--acceptance", str(result), "--gamma", "0,3,5", "--batch-size", "1,64", "--requests", "40",
            "--output-len", "64", "--no-progress", "--csv", str(csv)]
    assert plan.main(argv) == 0
    out = capsys.readouterr().out
    decisions = pd.read_csv(tmp_path / "p_decision.csv")
    best = decisions[decisions["decision"] == "best_gamma_latency"]
    assert (best["gamma"] == 5).any()       # the case that matters: γ 5 wins at batch 1
    for _, row in best[best["gamma"] == 5].iterrows():
        assert "positions 4–5 not measured: a geometric decay fitted to the 3 given positions" in row["detail"]
    assert "Acceptance beyond what was measured: γ = 5" in out
    assert "geometric" in pd.read_csv(csv)["acceptance"].iloc[-1]
    # refused instead: one line, exit status 2, before any run
    from specgauge.reports import cli

    assert cli.main(["plan", *argv, "--acceptance-beyond", "refuse"]) == 2
    assert "beyond the 3 positions" in capsys.readouterr().err


def test_a_note_only_where_gamma_passes_the_measured_positions():
    spec = parse_acceptance("0.9,0.8,0.7")
    assert spec.positions == 3 and spec.beyond_note(3) is None
    assert spec.beyond_note(4).startswith("position 4 not measured")
    assert parse_acceptance("0.8").beyond_note(8) is None
