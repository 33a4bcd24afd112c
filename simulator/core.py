"""``simulate``: validate, draw the shared workload, run speculative and baseline, report one row."""

from __future__ import annotations

import numpy as np

from specgauge.simulator.config import SimulationConfig
from specgauge.simulator.cost import PassCost, RoundCost
from specgauge.simulator.engine import Engine, EngineParams
from specgauge.errors import ConfigError
from specgauge.laws import tokens_per_pass as iid_tokens_per_pass
from specgauge.simulator.memory import MemoryPlan, memory_plan_for
from specgauge.simulator.metrics import summarise
from specgauge.simulator.policies import NoSpeculation
from specgauge.simulator.profiles import load_gpu, load_model
from specgauge.simulator.workload import make_workload

_BASELINE_KEYS = ("output_throughput", "request_throughput", "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms",
                  "mean_e2el_ms", "p99_tpot_ms")


def _models(config: SimulationConfig):
    gpu = load_gpu(config.gpu, config.profiles)
    target = load_model(config.target, config.profiles)
    draft = load_model(config.draft, config.profiles) if config.draft is not None else None
    if draft is not None and draft.vocab != target.vocab:
        raise ConfigError(f"draft {draft.name!r} has vocabulary {draft.vocab} but target {target.name!r} has "
                          f"{target.vocab}: draft and target must share a tokenizer")
    if config.speculative and draft is None and config.draft_cost_ratio is None:
        raise ConfigError("speculation (gamma > 0) needs a draft model (--draft) or a fixed --draft-cost-ratio; "
                          "use --gamma 0 for no speculation")
    for model in (target, draft):
        if model is not None and config.tp > model.kv_heads:
            raise ConfigError(f"tp={config.tp} exceeds {model.name}'s {model.kv_heads} KV heads")
    if config.length_dist == "fixed" and config.prompt_len + config.output_len > target.max_position:
        raise ConfigError(f"prompt_len + output_len = {config.prompt_len + config.output_len} exceeds "
                          f"{target.name}'s context of {target.max_position} tokens")
    return gpu, target, draft


def memory_plan(config: SimulationConfig) -> MemoryPlan:
    """The per-GPU memory budget and maximum concurrency of ``config`` (draft included when speculating)."""
    gpu, target, draft = _models(config)
    used_draft = draft if config.speculative else None
    lookahead = config.parsed_policy.max_gamma
    return memory_plan_for(gpu, target, used_draft, config.tp, config.prompt_len + config.output_len,
                           lookahead=lookahead, block_tokens=config.block_size,
                           gpu_memory_utilization=config.gpu_memory_utilization)


def _run(workload, config, plan_blocks, lookahead, costs, policy, speculative, sampler, tokens_per_pass):
    params = EngineParams(batch_cap=config.batch_size, total_blocks=plan_blocks, block_tokens=config.block_size,
                          lookahead=lookahead, max_batched_tokens=config.max_batched_tokens, costs=costs,
                          policy=policy, speculative=speculative, tokens_per_pass=tokens_per_pass)
    engine = Engine(workload, params, sampler)
    stats = engine.run()
    return stats, params


def simulate(config: SimulationConfig) -> dict[str, float | int | str]:
    """One wide row: ``config.columns()`` then vLLM-named metrics, memory and the paired speed-up.

    The no-speculation baseline runs on the same arrivals and lengths (common random
    numbers: one SeedSequence child each for arrivals, lengths and acceptance), without
    the draft's memory, so ``speedup_vs_no_spec`` is a paired ratio of output throughput.
    """
    if not isinstance(config, SimulationConfig):
        raise ConfigError(f"simulate needs a SimulationConfig, got {type(config).__name__}")
    gpu, target, draft = _models(config)
    plan = memory_plan(config)
    policy = config.parsed_policy
    speculative = policy.max_gamma > 0
    arrival_ss, length_ss, acceptance_ss = np.random.SeedSequence(config.seed).spawn(3)
    workload = make_workload(config.requests, config.qps, config.arrival, config.arrival_cv, config.prompt_len,
                             config.output_len, config.length_dist, config.trace,
                             np.random.default_rng(arrival_ss), np.random.default_rng(length_ss))
    if config.length_dist != "fixed" or config.arrival == "trace":
        room = target.max_position - workload.prompt
        if np.any(room < 1):
            raise ConfigError(f"a prompt of {int(workload.prompt.max())} tokens exceeds {target.name}'s context")
        workload = type(workload)(workload.arrival, workload.prompt, np.minimum(workload.output, room))
    worst = int((workload.prompt + workload.output).max())
    for blocks, look in ((plan.total_blocks, policy.max_gamma), (plan.total_blocks_no_draft, 0)):
        if -(-(worst + look) // config.block_size) > blocks:
            raise ConfigError(f"the longest request ({worst} tokens) needs more KV blocks than the "
                              f"{blocks} that fit on {gpu.name} with tp={config.tp}")

    target_cost = PassCost.build(gpu, target, config.tp)
    draft_cost = PassCost.build(gpu, draft, config.tp) if draft is not None else None
    base_costs = RoundCost(target_cost, None)
    baseline, _ = _run(workload, config, plan.total_blocks_no_draft, 0, base_costs, NoSpeculation(), False, None,
                       lambda g: 1.0)
    base_row = summarise(baseline, workload, 0)
    acceptance = config.acceptance
    if speculative:
        costs = RoundCost(target_cost, draft_cost, config.draft_cost_ratio)
        sampler = acceptance.sampler(np.random.default_rng(acceptance_ss), len(workload))
        cache: dict[int, float] = {}

        def tokens_per_pass(g: int) -> float:
            if g not in cache:
                value = acceptance.expected_tokens_per_pass(g)
                if value is None:
                    alpha = acceptance.mean_alpha if acceptance.mean_alpha is not None else 0.5
                    value = iid_tokens_per_pass(alpha, g)
                cache[g] = float(value)
            return cache[g]

        stats, _ = _run(workload, config, plan.total_blocks, policy.max_gamma, costs, policy, True, sampler,
                        tokens_per_pass)
        row_metrics = summarise(stats, workload, policy.max_gamma)
        kv_util = stats.kv_block_seconds / (stats.busy_s * plan.total_blocks)
    else:
        stats = baseline
        row_metrics = summarise(baseline, workload, 0)
        kv_util = baseline.kv_block_seconds / (baseline.busy_s * plan.total_blocks_no_draft)

    expected = acceptance.expected_tokens_per_pass(config.gamma) if speculative else 1.0
    b1 = float(RoundCost(target_cost, draft_cost, config.draft_cost_ratio)._draft_step(1, config.prompt_len)
               / target_cost.time(1, config.prompt_len, config.prompt_len)) if speculative else None
    row: dict[str, float | int | str] = dict(config.columns())
    row.update(row_metrics)
    row.update({
        "expected_acceptance_length": expected,
        "kv_utilization": float(kv_util),
        "max_concurrency": plan.max_concurrency if speculative else plan.max_concurrency_no_draft,
        "max_concurrency_no_draft": plan.max_concurrency_no_draft,
        "kv_blocks": plan.total_blocks if speculative else plan.total_blocks_no_draft,
        "target_weight_gb": plan.target_weight_bytes / 1e9,
        "draft_weight_gb": plan.draft_weight_bytes / 1e9 if speculative else 0.0,
        "draft_cost_ratio_b1": b1,
        "ridge_tokens": float(target_cost.ridge_tokens()),
        "speedup_vs_no_spec": row_metrics["output_throughput"] / base_row["output_throughput"],
        "tpot_speedup_vs_no_spec": base_row["mean_tpot_ms"] / row_metrics["mean_tpot_ms"],
    })
    for key in _BASELINE_KEYS:
        row[f"no_spec_{key}"] = base_row[key]
    return row
