"""A draft round is K sequential passes: ``calibrate`` fits the per-pass part from runs at two or more K,
and the shipped EAGLE proposer prices each pass, so the best K at batch 1 is interior."""

from __future__ import annotations

import numpy as np
import pytest

from specgauge.reports.cli import main as cli_main
from specgauge.simulator import IIDAcceptance, SimulationConfig, simulate
from specgauge.simulator.profiles import load_step_fit
from tests.test_calibrate import _serve, closed_loop_round_tpot_ms, closed_loop_tpot_ms, synthetic_steps

PASS_MS, STEP_MS = 0.9, 0.4     # the engine's per speculative step and the proposer's per pass


def _runs(tmp_path, gammas, concurrencies=(1, 8), length=2.2):
    """vLLM-like serve pairs: a round costs the verify pass + STEP_MS + PASS_MS per draft pass."""
    args = []
    for c in concurrencies:
        args += ["--serve", _serve(tmp_path / f"base{c}.json", c, closed_loop_tpot_ms(c))]
        for gamma in gammas:
            tpot = closed_loop_round_tpot_ms(c, gamma, length, lambda _: STEP_MS + PASS_MS * gamma)
            spec = {"spec_decode_acceptance_length": length, "spec_decode_num_drafts": 1000,
                    "spec_decode_draft_tokens": 1000 * gamma}
            args += ["--serve", _serve(tmp_path / f"spec{c}-{gamma}.json", c, tpot, **spec) + ":draft=eagle"]
    return args


def _calibrate(tmp_path, args, capsys):
    steps = tmp_path / "steps.csv"
    synthetic_steps(np.random.default_rng(3), noise=0.0).to_csv(steps, index=False)
    out = tmp_path / "k.toml"
    assert cli_main(["calibrate", "--gpu", "h100", "--target", "llama-3.1-8b", "--steps", str(steps), "--out",
                     str(out)] + args) == 0
    return str(out), capsys.readouterr().out


def test_runs_at_three_draft_lengths_recover_the_per_pass_cost(tmp_path, capsys):
    out, printed = _calibrate(tmp_path, _runs(tmp_path, (2, 4, 7)), capsys)
    assert "per draft pass" in printed
    proposer = load_step_fit("eagle:llama-3.1-8b", "h100-sxm", 1, out)
    target = load_step_fit("llama-3.1-8b", "h100-sxm", 1, out)
    assert proposer.c_pass_ms == pytest.approx(PASS_MS, rel=0.05)
    assert target.spec_overhead_ms == pytest.approx(STEP_MS, abs=0.05)


def test_runs_at_one_draft_length_cannot_split_the_pass_and_leave_it_out(tmp_path, capsys):
    out, printed = _calibrate(tmp_path, _runs(tmp_path, (3,)), capsys)
    assert "per draft pass" not in printed
    assert load_step_fit("eagle:llama-3.1-8b", "h100-sxm", 1, out).c_pass_ms == 0.0


def _tpot_speedups(alpha, gammas=range(1, 9), profiles=None):
    out = []
    for gamma in gammas:
        row = simulate(SimulationConfig(gpu="h100", target="llama-3.1-8b", draft="eagle", gamma=gamma, batch_size=1,
                                        requests=12, prompt_len=256, output_len=128,
                                        acceptance=IIDAcceptance(alpha), profiles=profiles))
        out.append(float(row["tpot_speedup_vs_no_spec"]))
    return np.array(out)


@pytest.mark.parametrize("alpha", [0.6, 0.7])
def test_shipped_eagle_head_on_a_dense_8b_has_an_interior_best_draft_length(alpha):
    values = _tpot_speedups(alpha)
    best = int(np.argmax(values)) + 1
    assert 2 <= best <= 5, values
    assert np.all(np.diff(values[best - 1:]) < 0), values      # falls past it, as vLLM measured


def test_a_round_priced_at_one_fixed_cost_would_pick_the_longest_draft(tmp_path):
    """The known-bad case: the published per-round fit taken whole (no per-pass part) rises to K = 8."""
    bad = tmp_path / "per-round.toml"
    bad.write_text('[steps."eagle:llama-3.1-8b@h100-sxm@tp1"]\nc_fixed_ms = 2.135\nc_pass_ms = 0.0\n')
    values = _tpot_speedups(0.6, profiles=str(bad))
    assert int(np.argmax(values)) + 1 == 8
