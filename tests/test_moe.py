"""MoE and MLA targets: parameter counts from config.json, expert traffic, latent KV, MTP drafting."""

from __future__ import annotations

import numpy as np
import pytest

from specgauge.simulator import ConfigError, IIDAcceptance, SimulationConfig, load_model, memory_plan, simulate
from specgauge.simulator.core import resolve
from specgauge.simulator.cost import PassCost
from specgauge.simulator.drafts import _head_params
from specgauge.simulator.profiles import load_gpu


def test_parameter_counts_match_the_published_totals():
    ds = load_model("deepseek-v3")
    assert ds.params == pytest.approx(671e9, rel=0.002)             # 671B total
    assert ds.linear_params == pytest.approx(36.6e9, rel=0.005)     # 36.6B activated, LM head included
    resident, _ = _head_params(ds, "mtp")
    assert resident == pytest.approx(11.5e9, rel=0.015)             # the MTP module's 11.5B unique parameters
    qwen = load_model("qwen3-30b-a3b")
    assert qwen.params == pytest.approx(30.5e9, rel=0.003)          # 30.5B total
    assert qwen.active_params == pytest.approx(3.3e9, rel=0.02)     # 3.3B activated
    dense = load_model("llama-3.1-8b")
    assert dense.active_params == dense.params and not dense.is_moe and not dense.is_mla


def test_mla_caches_one_latent_per_layer_replicated_over_tp():
    ds = load_model("deepseek-v3")
    assert ds.kv_bytes_per_token == 61 * (512 + 64) * 2             # BF16 latent + RoPE key, 61 layers
    assert ds.kv_bytes_per_gpu(8) == ds.kv_bytes_per_token          # every TP rank holds the whole latent
    plan = memory_plan(SimulationConfig(gpu="h200", target="deepseek-v3", draft="mtp", tp=8, gamma=1))
    assert plan.target_weight_bytes == pytest.approx(ds.params / 8)  # FP8: a byte a parameter
    assert plan.target_block_bytes == ds.kv_bytes_per_token * 16


def test_expert_traffic_follows_the_distinct_experts_a_pass_touches():
    qwen = load_model("qwen3-30b-a3b")
    e, k = 128, 8
    for tokens in (1, 4, 64, 1024):
        assert qwen.distinct_experts(tokens) == pytest.approx(e * (1 - (1 - k / e) ** tokens))
    cost = PassCost.prior(load_gpu("h200"), qwen)
    expert_bytes = qwen.expert_params * qwen.moe_layers * 2
    one, many = cost.weights(1), cost.weights(4096)
    assert many - one == pytest.approx((qwen.distinct_experts(4096) - k) * expert_bytes / (4.8e12 * 0.9), rel=1e-9)
    assert many == pytest.approx(qwen.weight_bytes / (4.8e12 * 0.9), rel=0.02)   # a big batch reads every expert
    # so verifying 4 tokens a sequence costs a batch-1 MoE pass more than a dense one of the same active size
    assert cost.time(4, 1000, 4000) / cost.time(1, 1000, 1000) > 1.5


def test_mtp_on_a_moe_target_runs_and_pays_less_than_its_tokens_a_pass():
    rows = [simulate(SimulationConfig(gpu="h200", target="qwen3-30b-a3b", draft="mtp", gamma=2, batch_size=b,
                                      acceptance=IIDAcceptance(0.8), requests=3 * b, prompt_len=256, output_len=128))
            for b in (1, 64)]
    assert all(r["completed"] == 3 * b for r, b in zip(rows, (1, 64)))
    # Batch 1: verifying touches more experts, so speculation pays less than E[N]; at batch 64 every expert
    # is read anyway, but the verified tokens' GEMMs add to the reads (the MoE prior), so it pays less again.
    tokens = IIDAcceptance(0.8).expected_tokens_per_pass(2)
    assert 1.0 < rows[1]["speedup_vs_no_spec"] < rows[0]["speedup_vs_no_spec"] < tokens
    setup = resolve(SimulationConfig(gpu="h200", target="deepseek-v3", draft="mtp", tp=8, gamma=1))
    assert setup.draft.weight_bytes == pytest.approx(_head_params(load_model("deepseek-v3"), "mtp")[0] / 8)
    assert np.isfinite(setup.target_cost.time(64, 64_000, 64_000))


def test_a_measured_routing_curve_replaces_random_routing(tmp_path):
    # Neighbouring tokens that share experts: 2 tokens touch 10 experts, not 16 (random routing: 15.75).
    path = tmp_path / "routing.toml"
    path.write_text('[models.deepseek-v3]\nmeasured_experts = [[1, 8], [2, 10], [64, 200], [4096, 256]]\n')
    measured, random = load_model("deepseek-v3", str(path)), load_model("deepseek-v3")
    assert measured.distinct_experts(2) == pytest.approx(10.0) and random.distinct_experts(2) == pytest.approx(15.75)
    assert measured.distinct_experts(8) == pytest.approx(10 + (200 - 10) * np.log(4) / np.log(32))
    gpu = load_gpu("h200")
    cheap, dear = PassCost.prior(gpu, measured, 8), PassCost.prior(gpu, random, 8)
    assert cheap.time(2, 1000, 2000) < dear.time(2, 1000, 2000) and cheap.time(1, 1000, 1000) == dear.time(1, 1000, 1000)
    row = simulate(SimulationConfig(gpu="h200", target="deepseek-v3", draft="mtp", tp=8, gamma=1, batch_size=1,
                                    requests=2, output_len=64, acceptance=IIDAcceptance(0.9), profiles=str(path)))
    assert row["speedup_vs_no_spec"] > simulate(SimulationConfig(
        gpu="h200", target="deepseek-v3", draft="mtp", tp=8, gamma=1, batch_size=1, requests=2, output_len=64,
        acceptance=IIDAcceptance(0.9)))["speedup_vs_no_spec"]
    bad = tmp_path / "bad.toml"
    bad.write_text('[models.deepseek-v3]\nmeasured_experts = [[1, 8], [2, 300]]\n')
    with pytest.raises(ConfigError, match="measured_experts"):
        load_model("deepseek-v3", str(bad))
