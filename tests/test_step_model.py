"""The fitted step-time model, its datasheet prior, memory in GiB and the draft kinds."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from specgauge.simulator import ConfigError, IIDAcceptance, SimulationConfig, load_gpu, load_model, memory_plan, simulate
from specgauge.simulator.acceptance import EmptyProposals
from specgauge.simulator.core import resolve
from specgauge.simulator.cost import PassCost, RoundCost
from specgauge.simulator.drafts import NGRAM_VERIFY_FRACTION, _head_params
from specgauge.simulator.profiles import GIB, load_step_fit

Z = stats.norm.isf(1e-6 / 2)


def test_shipped_fit_reproduces_the_published_verify_and_decode_passes():
    # SpecDecode-Bench (vLLM v0.10.1, one H100, Llama-3.1-8B): a γ = 3 verification pass at
    # batch 64 costs 13.9 ms against 9.9 ms for a decode step, at about 1,047 tokens of context.
    setup = resolve(SimulationConfig(gpu="h100", target="llama-3.1-8b", draft="eagle", gamma=3))
    cost, kv = setup.target_cost, 64 * 1047
    assert cost.source.startswith("published fit")
    assert cost.time(64 * 4, kv, 4 * kv) * 1e3 == pytest.approx(13.9, abs=0.05)
    assert cost.time(64, kv, kv) * 1e3 == pytest.approx(9.9, abs=0.05)


def test_datasheet_prior_lands_on_the_published_fit_and_says_it_is_a_prior():
    gpu, model = load_gpu("h100"), load_model("llama-3.1-8b")
    prior = PassCost.prior(gpu, model)
    fit = PassCost.from_fit(load_step_fit("llama-3.1-8b", "h100-sxm", 1))
    assert prior.source == "datasheet prior" and fit.source != prior.source
    per_token = prior.c_token + gpu.sample_us_per_token * 1e-6   # the fit's c_token holds sampling
    assert prior.c_fixed + prior.c_weight == pytest.approx(fit.c_fixed, rel=0.05)   # launches + weights
    # and the engine's per-step cost is the fit's own, added to every step of both runs
    assert gpu.step_overhead_ms == load_step_fit("llama-3.1-8b", "h100-sxm", 1).step_overhead_ms == 1.21
    assert per_token == pytest.approx(fit.c_token, rel=0.05)
    assert prior.c_kv == pytest.approx(fit.c_kv, rel=0.05)
    # Other models and GPUs without a fit fall back to the prior.
    assert resolve(SimulationConfig(gpu="h200", target="qwen3-32b")).target_cost.source == "datasheet prior"


def test_verification_below_the_ridge_costs_its_tokens():
    setup = resolve(SimulationConfig(gpu="h100", target="llama-3.1-8b", draft="llama-3.2-1b"))
    cost = setup.target_cost
    tokens = 64 * 4
    assert tokens < cost.ridge_tokens(64 * 1000)
    extra = cost.time(tokens, 64_000, 4 * 64_000) - cost.time(64, 64_000, 64_000)
    assert extra == pytest.approx(cost.c_token * 64 * 3) and extra > 0.3 * cost.time(64, 64_000, 64_000)


def test_memory_is_binary_and_holds_a_reserve():
    assert load_gpu("h100").memory_bytes == pytest.approx(79.2 * GIB)
    assert load_gpu("h200").memory_bytes == pytest.approx(143_771 * 2 ** 20, rel=1e-3)
    plan = memory_plan(SimulationConfig(gpu="h100", target="llama-3.1-8b", draft=None, gamma=0))
    gpu = load_gpu("h100")
    # vLLM: about 1.6 GiB of activations and non-torch memory for an 8B model.
    assert 1.2 * GIB < plan.reserve_bytes - 0.1 * gpu.memory_bytes < 2.2 * GIB
    assert plan.kv_budget_no_draft_bytes == pytest.approx(
        gpu.memory_bytes - plan.reserve_bytes - load_model("llama-3.1-8b").weight_bytes)


def test_draft_model_at_its_own_tp_beside_a_wider_target(tmp_path):
    path = tmp_path / "small.toml"
    path.write_text('[models."tiny-llama"]\nlayers = 4\nhidden = 1024\nheads = 8\nkv_heads = 2\nhead_dim = 128\n'
                    'intermediate = 2048\nvocab = 128256\n')
    base = dict(gpu="h100", target="llama-3.1-70b", draft="tiny-llama", tp=4, gamma=3, profiles=str(path),
                requests=8, output_len=32)
    with pytest.raises(ConfigError, match="--draft-tp 1"):
        simulate(SimulationConfig(**base))
    row = simulate(SimulationConfig(**base, draft_tp=1))
    draft = load_model("tiny-llama", str(path))
    plan = memory_plan(SimulationConfig(**base, draft_tp=1))
    assert plan.draft_weight_bytes == draft.weight_bytes                # all of it on the GPU it shares
    assert plan.draft_block_bytes == draft.kv_bytes_per_token * 16
    assert row["completed"] == 8 and row["draft_kind"] == "model"


def test_published_draft_cost_ratios():
    # SpecDecode-Bench: c = 0.375 (Qwen3-8B + Qwen3-0.6B) and 0.125 (Llama-70B TP 4 + 1B draft);
    # the eager draft's launch cost per layer was set from these two, so this guards it.
    def ratio(**kwargs):
        setup = resolve(SimulationConfig(gpu="h100", gamma=3, **kwargs))
        return RoundCost(setup.target_cost, setup.draft.cost, setup.overhead).draft_step_ratio(512)
    assert ratio(target="qwen3-8b", draft="qwen3-0.6b") == pytest.approx(0.375, rel=0.1)
    assert ratio(target="llama-3.1-70b", draft="llama-3.2-1b", tp=4, draft_tp=1) == pytest.approx(0.125, rel=0.1)


def test_eagle_head_matches_the_published_shape_and_costs_little():
    resident, _ = _head_params(load_model("llama-3.1-8b"), "eagle")
    assert resident == 424_689_664                    # EAGLE3-LLaMA3.1-Instruct-8B without its embedding
    plan = memory_plan(SimulationConfig(gpu="h100", target="llama-3.1-8b", draft="eagle", gamma=3))
    assert plan.draft_weight_bytes == resident * 2
    assert plan.draft_block_bytes == 2 * 8 * 128 * 2 * 16   # one layer of KV
    mtp = memory_plan(SimulationConfig(gpu="h100", target="llama-3.1-8b", draft="mtp", gamma=3))
    assert 0 < mtp.draft_weight_bytes < plan.draft_weight_bytes


def test_ngram_is_free_in_memory_cheap_and_often_empty():
    config = SimulationConfig(gpu="h100", target="llama-3.1-8b", draft="ngram", gamma=4, batch_size=16,
                              requests=200, prompt_len=64, output_len=256, seed=4)
    plan = memory_plan(config)
    assert plan.draft_weight_bytes == 0 and plan.draft_block_bytes == 0
    assert plan.max_concurrency <= plan.max_concurrency_no_draft
    setup = resolve(config)
    assert setup.draft.cost.round(16, 4, 2.0, 1000, 0.01) == pytest.approx(NGRAM_VERIFY_FRACTION * 0.01)
    row = simulate(config)
    model = EmptyProposals(IIDAcceptance(0.7), 0.5)
    assert row["expected_acceptance_length"] == pytest.approx(model.expected_tokens_per_pass(4))
    assert row["acceptance"] == "iid(0.7)" and row["draft_kind"] == "ngram"


def test_empty_proposals_sample_their_expected_length():
    model = EmptyProposals(IIDAcceptance(0.6), 0.3)
    counts = model.sample_accepted(np.random.default_rng(0), gamma=5, rounds=40_000).ravel() + 1
    se = counts.std(ddof=1) / np.sqrt(counts.size)
    assert abs(counts.mean() - model.expected_tokens_per_pass(5)) < Z * se
    assert (counts == 1).mean() > 0.3                 # empties plus first-draft rejections
