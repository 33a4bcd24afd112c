"""The engine against the textbook law, paired baselines, memory and the roofline.

Statistical assertions use a false-fail rate of 1e-6 (two-sided z = 4.89); tolerances are
computed from the exact variance of tokens per pass, not guessed.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from specgauge.simulator import ConfigError, IIDAcceptance, SimulationConfig, load_gpu, load_model, memory_plan, simulate
from specgauge.simulator.cost import PassCost

FALSE_FAIL = 1e-6
Z = stats.norm.isf(FALSE_FAIL / 2)


def pmf(alpha: float, gamma: int) -> np.ndarray:
    p = alpha ** np.arange(gamma + 1) * (1 - alpha)
    p[gamma] = alpha ** gamma
    return p


#: The textbook's cost model as a step fit: every pass costs the same, whatever its tokens,
#: and a speculative step adds nothing; only then is the speed-up exactly E[N] / (γc + 1).
TEXTBOOK_FIT = ('[steps."llama-3.1-8b@h100-sxm@tp1"]\nc_fixed_ms = 10.0\nc_token_us = 0.0\nc_kv_ns = 0.0\n'
                'c_attn_ns = 0.0\nstep_overhead_ms = 0.0\nspec_overhead_ms = 0.0\nsource = "textbook: a pass costs the same whatever its tokens"\n')


@pytest.fixture(scope="module")
def textbook_profiles(tmp_path_factory):
    path = tmp_path_factory.mktemp("profiles") / "textbook.toml"
    path.write_text(TEXTBOOK_FIT)
    return str(path)


def textbook(profiles: str, alpha: float, gamma: int, c: float, seed: int = 0) -> dict:
    return simulate(SimulationConfig(gpu="h100-sxm", target="llama-3.1-8b", draft=None, gamma=gamma,
                                     acceptance=IIDAcceptance(alpha), draft_cost_ratio=c, batch_size=1,
                                     requests=2, prompt_len=16, output_len=30_000, seed=seed, profiles=profiles))


@pytest.mark.parametrize("alpha,gamma,c", [(0.8, 4, 0.1), (0.6, 3, 0.05)])
def test_batch_one_reproduces_leviathan(textbook_profiles, alpha, gamma, c):
    row = textbook(textbook_profiles, alpha, gamma, c)
    p = pmf(alpha, gamma)
    mean_n = (1 - alpha ** (gamma + 1)) / (1 - alpha)
    sd_n = math.sqrt(((np.arange(gamma + 1) + 1) ** 2 * p).sum() - mean_n ** 2)
    rounds = row["spec_decode_num_drafts"]
    se = sd_n / math.sqrt(rounds)
    assert abs(row["spec_decode_acceptance_length"] - mean_n) <= Z * se
    speedup = mean_n / (gamma * c + 1)
    # Speed-up = (tokens per pass) / (gamma c + 1) up to the sampling error of tokens per pass.
    assert abs(row["speedup_vs_no_spec"] - speedup) <= Z * se / (gamma * c + 1) + 1e-3 * speedup
    assert row["expected_acceptance_length"] == pytest.approx(mean_n)


def test_engine_tokens_per_pass_distribution_is_truncated_geometric():
    alpha, gamma = 0.7, 5
    row = simulate(SimulationConfig(gamma=gamma, acceptance=IIDAcceptance(alpha), batch_size=32, requests=400,
                                    prompt_len=64, output_len=256, seed=3))
    drafts = row["spec_decode_num_drafts"]
    at_least = [drafts] + [round(row[f"spec_decode_acceptance_rate_pos{k}"] * drafts) for k in range(1, gamma + 1)]
    observed = np.array(at_least + [0])[:-1] - np.array(at_least[1:] + [0])
    assert observed.sum() == drafts
    assert stats.chisquare(observed, pmf(alpha, gamma) * drafts).pvalue > FALSE_FAIL


def test_free_draft_and_zero_acceptance_is_exactly_no_speculation(textbook_profiles):
    for qps in (None, 20.0):
        row = simulate(SimulationConfig(gpu="h100-sxm", target="llama-3.1-8b", draft=None, gamma=4,
                                        acceptance=IIDAcceptance(0.0), draft_cost_ratio=0.0, batch_size=8,
                                        requests=100, prompt_len=16, output_len=64, qps=qps, seed=5,
                                        profiles=textbook_profiles))
        assert row["speedup_vs_no_spec"] == 1.0
        assert row["mean_tpot_ms"] == row["no_spec_mean_tpot_ms"]


def test_same_seed_same_row_and_other_seed_other_row():
    config = SimulationConfig(requests=200, qps=8.0, length_dist="exponential", seed=11)
    a, b = simulate(config), simulate(config)
    assert list(a) == list(b)
    assert repr(a) == repr(b)
    assert simulate(SimulationConfig(requests=200, qps=8.0, length_dist="exponential", seed=12)) != a


def test_speedup_falls_with_batch_size_and_turns_into_a_slowdown():
    speedups = []
    # Verification pays per token at every batch size, so the speed-up falls from batch 1 on.
    for batch in (1, 64, 128, 256):
        row = simulate(SimulationConfig(gamma=4, acceptance=IIDAcceptance(0.6), batch_size=batch,
                                        requests=max(3 * batch, 48), prompt_len=32, output_len=128, seed=1))
        speedups.append(row["speedup_vs_no_spec"])
    assert speedups == sorted(speedups, reverse=True), speedups
    assert speedups[0] > 1.2 and speedups[-1] < 1.0, speedups


def test_draft_lowers_concurrency_by_exactly_its_weights_and_kv():
    config = SimulationConfig(gpu="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", gamma=4,
                              prompt_len=1000, output_len=1000)
    plan = memory_plan(config)
    draft = load_model("llama-3.2-1b")
    assert plan.kv_budget_no_draft_bytes - plan.kv_budget_bytes == draft.weight_bytes
    assert plan.reserve_bytes > 0.1 * plan.gpu_bytes + plan.activation_bytes > 0.1 * plan.gpu_bytes
    block = plan.target_block_bytes + plan.draft_block_bytes
    assert plan.draft_block_bytes == draft.kv_bytes_per_token * 16
    assert plan.total_blocks == plan.kv_budget_bytes // block
    assert plan.total_blocks_no_draft == plan.kv_budget_no_draft_bytes // plan.target_block_bytes
    assert plan.max_concurrency == plan.total_blocks // math.ceil(2004 / 16)
    assert plan.max_concurrency_no_draft == plan.total_blocks_no_draft // math.ceil(2000 / 16)
    assert plan.max_concurrency < plan.max_concurrency_no_draft
    no_spec = memory_plan(SimulationConfig(gpu="h100-sxm", target="llama-3.1-8b", draft="llama-3.2-1b", gamma=0,
                                           prompt_len=1000, output_len=1000))
    assert no_spec.max_concurrency == plan.max_concurrency_no_draft


def test_a_pass_is_flat_below_the_knee_and_grows_past_it():
    cost = PassCost.build(load_gpu("h200"), load_model("qwen3-32b"))
    ctx = 4 * 1000
    assert 100 < cost.ridge_tokens() < 300 and cost.knee == load_gpu("h200").knee > 1
    decode, verify = cost.time(4, ctx, ctx), cost.time(4 * 5, ctx, 5 * ctx)
    # Below the ridge, verifying 16 more tokens costs well under their full GEMM time ...
    assert 0 < verify - decode < 0.5 * cost.c_token * 16
    # ... far above it, each token costs its GEMM time: the slope tends to c_token.
    big = [cost.time(tokens, ctx, 0) for tokens in (4000, 8000, 12000)]
    assert (big[2] - big[1]) / 4000 == pytest.approx(cost.c_token, rel=0.01)
    additive = PassCost(**{**cost.__dict__, "knee": 1.0})
    assert additive.time(20, ctx, 5 * ctx) - additive.time(4, ctx, ctx) == pytest.approx(cost.c_token * 16, rel=1e-9)
    roofline = PassCost(**{**cost.__dict__, "knee": math.inf})
    assert roofline.time(20, ctx, 5 * ctx) == roofline.time(4, ctx, ctx)


def test_tensor_parallel_splits_weights_and_adds_communication():
    gpu, model = load_gpu("h100-sxm"), load_model("llama-3.1-70b")
    one, four = PassCost.build(gpu, model, 1), PassCost.build(gpu, model, 4)
    assert four.c_kv == pytest.approx(one.c_kv / 4)
    assert four.c_weight == pytest.approx(one.c_weight / 4)   # a quarter of the weights ...
    assert four.c_fixed > one.c_fixed                        # ... plus all-reduce latency
    assert four.c_token > one.c_token / 4            # a quarter of the arithmetic, plus all-reduce volume


@pytest.mark.parametrize("policy,check", [
    ("none", lambda r: r["speedup_vs_no_spec"] == 1.0),
    ("disable-above:4", lambda r: r["speedup_vs_no_spec"] == pytest.approx(1.0, abs=0.02)),
    ("table:1:4,8:0", lambda r: r["speedup_vs_no_spec"] == pytest.approx(1.0, abs=0.02)),
    ("goodput", lambda r: r["speedup_vs_no_spec"] > 1.0),
])
def test_policies(policy, check):
    row = simulate(SimulationConfig(gamma=4, policy=policy, batch_size=16, requests=64, prompt_len=32,
                                    output_len=64, seed=2))
    assert check(row), row["speedup_vs_no_spec"]


@pytest.mark.parametrize("kwargs,message", [
    (dict(gamma=-1), "gamma"),
    (dict(qps=0.0), "qps"),
    (dict(qps=-3.0), "qps"),
    (dict(requests=0), "requests"),
    (dict(draft_cost_ratio=-0.1), "draft_cost_ratio"),
    (dict(policy="sometimes"), "valid: none"),
    (dict(policy="table:8:2,4:1"), "increasing"),
    (dict(arrival="burst"), "poisson"),
])
def test_bad_configs_are_refused_at_construction(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        SimulationConfig(**kwargs)


@pytest.mark.parametrize("kwargs,message", [
    (dict(gpu="h900"), "known: a100-80gb"),
    (dict(target="gpt-5"), "known: deepseek-v3, kimi-k2.5, llama-3.1-405b, llama-3.1-70b"),
    (dict(draft="llama-3.2-1b"), "vocabulary"),
    (dict(gpu="a100-80gb", target="llama-3.1-70b", draft="llama-3.2-1b"), "weights do not fit"),
    (dict(draft=None), "needs a draft"),
    (dict(prompt_len=40_000, output_len=2_000), "context"),
])
def test_bad_setups_are_refused_before_running(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        simulate(SimulationConfig(requests=1, **kwargs))
