"""The MoE datasheet prior: a MoE pass's many small GEMMs add their per-token time to the expert
reads (knee 1) at a lower efficiency than a dense GEMM (``GPU.moe_token_factor``), as the
published MoE serve curves measured; dense targets keep the dense prior."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specgauge.simulator import IIDAcceptance, SimulationConfig, simulate
from specgauge.simulator.cost import PassCost
from specgauge.simulator.profiles import load_gpu, load_model


def test_the_moe_prior_adds_its_token_time_and_the_dense_prior_is_unchanged():
    gpu = load_gpu("h200")
    moe = PassCost.prior(gpu, load_model("deepseek-v3"), 8)
    plain = PassCost.prior(replace(gpu, moe_token_factor=1.0, moe_knee=gpu.knee), load_model("deepseek-v3"), 8)
    assert moe.knee == gpu.moe_knee == 1.0
    assert moe.c_token == pytest.approx(plain.c_token * gpu.moe_token_factor)
    dense = PassCost.prior(gpu, load_model("qwen3-32b"), 1)
    assert dense.knee == gpu.knee


def _speedups(profiles=None, batches=(32, 64, 128)):
    return [simulate(SimulationConfig(gpu="h200", target="deepseek-v3", draft="mtp", tp=8, gamma=3,
                                      acceptance=IIDAcceptance(0.8), batch_size=b, requests=3 * b, prompt_len=512,
                                      output_len=256, profiles=profiles))["speedup_vs_no_spec"] for b in batches]


def test_deepseek_mtp_falls_past_64_with_the_moe_prior_and_the_roofline_keeps_it_higher(tmp_path):
    """Known-bad case: the dense roofline (knee 1.5, no factor) hides the verified tokens under
    the expert reads, so the speed-up at batch 128 stays higher."""
    shipped = _speedups()
    assert shipped[2] < shipped[1]
    roofline = tmp_path / "roofline.toml"
    roofline.write_text('[gpus."h200"]\nmoe_token_factor = 1.0\nmoe_knee = 1.5\n')
    assert _speedups(str(roofline))[2] > shipped[2] + 0.1


def test_a_sequences_consecutive_tokens_share_experts():
    """Cohere's measurement: 4 consecutive tokens load about 2.5 times one token's experts. With
    expert_affinity 1 (independent routing, the known-bad case) they load 4 times."""
    gpu, model = load_gpu("h200"), load_model("deepseek-v3")
    cost = PassCost.prior(gpu, model, 8)
    k = model.experts_per_token
    reads = lambda c, routed: (c.weights(4, routed) - c.c_weight) / c.c_expert   # noqa: E731
    assert reads(cost, cost.runs(1, 4)) == pytest.approx(model.distinct_experts(2.5))
    assert reads(cost, cost.runs(1, 4)) / k == pytest.approx(2.5, rel=0.03)
    independent = replace(cost, affinity=1.0)
    assert reads(independent, independent.runs(1, 4)) / k == pytest.approx(4.0, rel=0.05)
    # a batch's sequences route independently of each other
    assert cost.runs(64, 4) == 64 * 2.5 and cost.runs(64, 1) == 64
