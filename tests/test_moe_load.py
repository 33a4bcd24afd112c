"""Speculation's gain under load on MoE targets, and the break-even load (simulator side)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from specgauge.simulator import IIDAcceptance, SimulationConfig, simulate
from specgauge.simulator.breakeven import break_even_from_table, break_even_load, crossing
from specgauge.simulator.core import resolve
from specgauge.simulator.fit import serve_curve_fit
from specgauge.simulator.profiles import step_key

# MiniMax-M2.5 on MI355X TP 4, no speculation: output tok/s per GPU at concurrency 4-64
# (AMD ROCm blog, Eagle3 on MI350X/MI355X, 3 Jul 2026), the published input of the fit.
MINIMAX_BASELINE = {4: 90.4, 8: 162.6, 16: 282.7, 32: 484.8, 64: 822.0}
MINIMAX = SimulationConfig(gpu="mi355x", target="minimax-m2.5", draft="eagle", tp=4, gamma=3, prompt_len=1024,
                           output_len=1024, acceptance=IIDAcceptance(0.62))


def test_crossing_interpolates_in_log_load_and_says_how_it_ended():
    value, kind = crossing([1, 4, 16, 64], [1.8, 1.4, 1.2, 0.9])
    assert kind == "crossed" and value == pytest.approx(np.exp(np.log(16) + (0.2 / 0.3) * np.log(4)))
    assert crossing([1, 2], [1.5, 1.1]) == (None, "always")
    assert crossing([1, 2], [0.9, 0.8]) == (None, "never")


def test_break_even_names_the_best_gamma_on_each_side():
    loads, gammas = [1, 8, 64, 256], [1, 2, 4]
    # γ = 4 is best at low load, γ = 1 keeps paying longest; nothing pays at 256.
    table = [[1.4, 1.7, 2.1], [1.3, 1.5, 1.6], [1.1, 1.05, 0.9], [0.95, 0.9, 0.7]]
    answer = break_even_from_table("batch_size", loads, gammas, table)
    assert answer.kind == "crossed" and 64 < answer.load < 256
    assert (answer.gamma_below, answer.gamma_above) == (1, 1)
    assert answer.best_gamma == (4, 4, 1, 1)
    assert "stops paying" in answer.describe()
    # A table that pays everywhere has no break-even (the check is not always "crossed").
    always = break_even_from_table("batch_size", loads, gammas, np.asarray(table) + 1.0)
    assert always.kind == "always" and always.load is None and always.gamma_below == 1


def test_break_even_load_runs_the_paired_simulations():
    config = SimulationConfig(gpu="h100", target="qwen3-8b", draft="qwen3-0.6b", prompt_len=256, output_len=64,
                              requests=64, acceptance=IIDAcceptance(0.6))
    answer = break_even_load(config, [1, 16, 256], [1, 3])
    assert answer.loads == (1.0, 16.0, 256.0) and answer.best_speedup[0] > 1.0
    # The answer is the crossing of its own best-over-γ curve, each point a paired simulate run.
    assert (answer.load, answer.kind) == crossing(answer.loads, answer.best_speedup)
    one = simulate(replace(config, batch_size=16, gamma=answer.best_gamma[1]))["speedup_vs_no_spec"]
    assert answer.best_speedup[1] == pytest.approx(one)


# DeepSeek-V3 on 8x MI300X (SGLang), no speculation: mean end-to-end latency (ms) of 3200 + 800
# token requests at max concurrency 1-64 (AMD ROCm blog, MTP on AMD Instinct, Sep 2025): the fit's input.
DEEPSEEK_E2E = {1: 17348.25, 2: 17162.29, 4: 17948.30, 8: 19919.06, 16: 23708.94, 32: 30868.39, 64: 43848.20}
DEEPSEEK = SimulationConfig(gpu="mi300x", target="deepseek-v3", draft="mtp", tp=8, gamma=2, prompt_len=3200,
                            output_len=800, acceptance=IIDAcceptance(0.73))


def _profile(tmp_path, config, fit, name: str) -> str:
    setup = resolve(config)
    path = tmp_path / f"{name}.toml"      # one file a fit: profiles are cached by path
    path.write_text(f'[steps."{step_key(setup.target.name, setup.gpu.name, config.tp)}"]\n'
                    f'c_fixed_ms = {float(fit.c_fixed) * 1e3!r}\nc_token_us = {float(fit.c_token) * 1e6!r}\n'
                    f'c_kv_ns = {float(fit.c_kv) * 1e9!r}\nstep_overhead_ms = 0.0\n')
    return str(path)


def test_serve_curve_fit_recovers_a_known_per_token_cost():
    prior = resolve(MINIMAX).target_cost
    truth = replace(prior, knee=1.0, c_fixed=prior.c_fixed + prior.c_weight, c_weight=0.0, c_token=30e-6)
    conc = np.array([4, 8, 16, 32, 64])
    # A closed loop: one decode step at the batch plus concurrency / output_len prompt prefills.
    seconds = np.asarray(truth.time(conc, conc * (1024 + 512), 0.0) + conc / 1024 * truth.time(1024, 0, 0.0), float)
    fit = serve_curve_fit(prior, conc, seconds, 1024, 1024)
    assert fit.c_token == pytest.approx(30e-6, rel=0.05)
    assert fit.rms_error < 0.01


def test_a_closed_loop_fit_reproduces_its_own_baseline_where_a_decode_only_fit_double_counts_prefill(tmp_path):
    """Under load each decode step of a closed loop carries concurrency / output_len prompt
    prefills. Fitted with them, the simulated no-speculation run reproduces the published
    latencies it was fitted on; fitted as decode steps alone (the known-bad reading), the
    prefill time lands in the per-token cost and the simulator pays it twice."""
    conc = sorted(DEEPSEEK_E2E)
    seconds = [DEEPSEEK_E2E[c] / 1e3 / 800 for c in conc]
    prior = resolve(DEEPSEEK).target_cost
    closed = serve_curve_fit(prior, conc, seconds, 3200, 800)
    from specgauge.simulator.fit import fit_step_model, tpot_equation
    decode_only = fit_step_model([tpot_equation(c, 3200, 800, s, str(c)) for c, s in zip(conc, seconds)], prior, (1.0,))

    def per_token(fit, name, c):
        row = simulate(replace(DEEPSEEK, profiles=_profile(tmp_path, DEEPSEEK, fit, name), batch_size=c,
                               requests=4 * c, gamma=0))
        return c / row["output_throughput"]

    measured = DEEPSEEK_E2E[64] / 1e3 / 800
    assert per_token(closed, "closed", 64) == pytest.approx(measured, rel=0.10)
    assert per_token(decode_only, "decode_only", 64) > 1.5 * measured


def test_the_speculative_batch_cap_binds_the_speculative_run_alone():
    config = replace(DEEPSEEK, prompt_len=256, output_len=128, batch_size=64, requests=256)
    capped = simulate(replace(config, spec_batch_size=48))
    free = simulate(config)
    assert capped["mean_batch_size"] <= 48 < free["mean_batch_size"]
    assert capped["no_spec_output_throughput"] == free["no_spec_output_throughput"]     # the baseline is untouched
    assert capped["speedup_vs_no_spec"] < free["speedup_vs_no_spec"]


def test_a_heads_round_starts_with_a_catch_up_pass_over_the_accepted_tokens():
    """MTP on DeepSeek-V3: the first pass ingests γ + 1 tokens a sequence (the accepted ones,
    padded), so at batch 1 it touches the experts of 4 tokens where a plain draft step touches
    8 experts; the round grows with batch × (γ + 1). Without the catch-up (the old pricing,
    the known-bad case) the round is γ equal passes of one token."""
    setup = resolve(replace(DEEPSEEK, gamma=3))
    draft = setup.draft.cost
    step = draft.step
    # the catch-up's 4 tokens are one sequence's consecutive tokens: they share experts (step.runs)
    assert draft.round(1, 3, 3.0, 4000, 0.0) == pytest.approx(step.time(4, 4000, 16000, step.runs(1, 4))
                                                              + 2 * step.time(1, 4000, 4000))
    flat = replace(draft, catch_up=False)
    assert flat.round(1, 3, 3.0, 4000, 0.0) == pytest.approx(3 * step.time(1, 4000, 4000))
    # the passes' own cost (the proposer's per-pass work, the same in both, left out) grows by over 5 %
    assert draft.round(1, 3, 3.0, 4000, 0.0) - flat.round(1, 3, 3.0, 4000, 0.0) > 0.05 * (
        flat.round(1, 3, 3.0, 4000, 0.0) - 3 * step.c_fixed)
    # A tree's round: the catch-up (depth + 1 a sequence), then depth - 1 levels of K nodes each.
    assert draft.round(8, 3, 12.0, 32000, 0.0) == pytest.approx(
        step.time(8 * 4, 32000, 4 * 32000, step.runs(8, 4)) + 2 * step.time(8 * 4, 32000, 4 * 32000))


def test_the_target_drafting_for_itself_has_no_catch_up_pass():
    config = SimulationConfig(gpu="a100", target="llama-3.1-8b", draft="llama-3.1-8b", draft_kv_budget=512, tp=8,
                              gamma=3, prompt_len=8192, output_len=256)
    assert resolve(config).draft.cost.catch_up is False
