"""``simulate``: prepare the configuration, run the speculative/baseline pair, build the row.

``prepare`` validates and draws everything both runs share (models, memory plan, step
costs, the workload), ``run_pair`` runs the baseline and, when the configuration
speculates, the speculative run on the same workload, and ``build_row`` turns the two
into one wide report row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specgauge.errors import ConfigError
from specgauge.laws import tokens_per_pass as iid_tokens_per_pass
from specgauge.simulator.config import SimulationConfig
from specgauge.simulator.cost import PassCost, RoundCost
from specgauge.simulator.engine import Engine, EngineParams, RunStats
from specgauge.simulator.memory import MemoryPlan, memory_plan_for
from specgauge.simulator.metrics import summarise
from specgauge.simulator.policies import NoSpeculation
from specgauge.simulator.profiles import GPU, Model, load_gpu, load_model
from specgauge.simulator.workload import Workload, make_workload

_BASELINE_KEYS = ("output_throughput", "request_throughput", "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms",
                  "mean_e2el_ms", "p99_tpot_ms")


def _models(config: SimulationConfig) -> tuple[GPU, Model, Model | None]:
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
        if model is not None and (model.heads % config.tp or model.kv_heads % config.tp):
            raise ConfigError(f"--tp {config.tp} must divide {model.name}'s {model.heads} attention heads and "
                              f"{model.kv_heads} KV heads (tensor parallelism splits heads across GPUs)")
    if config.length_dist == "fixed" and config.prompt_len + config.output_len > target.max_position:
        raise ConfigError(f"prompt_len + output_len = {config.prompt_len + config.output_len} exceeds "
                          f"{target.name}'s context of {target.max_position} tokens")
    return gpu, target, draft


def memory_plan(config: SimulationConfig) -> MemoryPlan:
    """The per-GPU memory budget and maximum concurrency of ``config`` (draft included when speculating)."""
    gpu, target, draft = _models(config)
    return _memory_plan(config, gpu, target, draft)


def _memory_plan(config: SimulationConfig, gpu: GPU, target: Model, draft: Model | None) -> MemoryPlan:
    return memory_plan_for(gpu, target, draft if config.speculative else None, config.tp,
                           config.prompt_len + config.output_len, lookahead=config.parsed_policy.max_gamma,
                           block_tokens=config.block_size, gpu_memory_utilization=config.gpu_memory_utilization)


@dataclass(frozen=True, eq=False)
class Prepared:
    """Everything the paired runs share: models, memory, step costs and the drawn workload."""

    config: SimulationConfig
    gpu: GPU
    target: Model
    plan: MemoryPlan
    workload: Workload
    target_cost: PassCost
    costs: RoundCost
    acceptance_seed: np.random.SeedSequence


def _fit_workload(config: SimulationConfig, target: Model, workload: Workload) -> Workload:
    """Outputs cut to the target's context when lengths are drawn or come from a trace."""
    if config.length_dist == "fixed" and config.arrival != "trace":
        return workload
    room = target.max_position - workload.prompt
    if np.any(room < 1):
        raise ConfigError(f"a prompt of {int(workload.prompt.max())} tokens exceeds {target.name}'s context")
    return Workload(workload.arrival, workload.prompt, np.minimum(workload.output, room))


def prepare(config: SimulationConfig) -> Prepared:
    """Validate ``config`` against its profiles and draw the shared workload.

    Common random numbers: one SeedSequence child each for arrivals, lengths and
    acceptance, so the baseline and the speculative run see the same requests.
    """
    if not isinstance(config, SimulationConfig):
        raise ConfigError(f"simulate needs a SimulationConfig, got {type(config).__name__}")
    gpu, target, draft = _models(config)
    plan = _memory_plan(config, gpu, target, draft)
    arrival_ss, length_ss, acceptance_ss = np.random.SeedSequence(config.seed).spawn(3)
    workload = make_workload(config.requests, config.qps, config.arrival, config.arrival_cv, config.prompt_len,
                             config.output_len, config.length_dist, config.trace,
                             np.random.default_rng(arrival_ss), np.random.default_rng(length_ss))
    workload = _fit_workload(config, target, workload)
    worst = int((workload.prompt + workload.output).max())
    for blocks, look in ((plan.total_blocks, config.parsed_policy.max_gamma), (plan.total_blocks_no_draft, 0)):
        if -(-(worst + look) // config.block_size) > blocks:
            raise ConfigError(f"the longest request ({worst} tokens) needs more KV blocks than the "
                              f"{blocks} that fit on {gpu.name} with tp={config.tp}")
    target_cost = PassCost.build(gpu, target, config.tp)
    draft_cost = PassCost.build(gpu, draft, config.tp) if draft is not None else None
    return Prepared(config, gpu, target, plan, workload, target_cost,
                    RoundCost(target_cost, draft_cost, config.draft_cost_ratio), acceptance_ss)


def _engine_run(p: Prepared, blocks: int, speculative: bool) -> RunStats:
    config = p.config
    if speculative:
        policy, costs = config.parsed_policy, p.costs
        acceptance = config.acceptance
        sampler = acceptance.sampler(np.random.default_rng(p.acceptance_seed), len(p.workload))
        cache: dict[int, float] = {}

        def tokens_per_pass(g: int) -> float:
            if g not in cache:
                value = acceptance.expected_tokens_per_pass(g)
                if value is None:
                    alpha = acceptance.mean_alpha if acceptance.mean_alpha is not None else 0.5
                    value = iid_tokens_per_pass(alpha, g)
                cache[g] = float(value)
            return cache[g]
    else:
        policy, costs, sampler = NoSpeculation(), RoundCost(p.target_cost, None), None

        def tokens_per_pass(g: int) -> float:
            return 1.0
    params = EngineParams(batch_cap=config.batch_size, total_blocks=blocks, block_tokens=config.block_size,
                          lookahead=policy.max_gamma, max_batched_tokens=config.max_batched_tokens, costs=costs,
                          policy=policy, speculative=speculative, tokens_per_pass=tokens_per_pass)
    return Engine(p.workload, params, sampler).run()


def run_pair(p: Prepared) -> tuple[RunStats, RunStats | None]:
    """The no-speculation baseline (without the draft's memory) and, when speculating, the speculative run."""
    baseline = _engine_run(p, p.plan.total_blocks_no_draft, speculative=False)
    spec = _engine_run(p, p.plan.total_blocks, speculative=True) if p.config.speculative else None
    return baseline, spec


def build_row(p: Prepared, baseline: RunStats, spec: RunStats | None) -> dict[str, float | int | str]:
    """One wide row: the configuration's columns, vLLM-named metrics, memory and the paired speed-up.

    ``requests`` is the number of requests actually run (a trace may hold fewer).
    """
    config, plan = p.config, p.plan
    speculative = spec is not None
    base_row = summarise(baseline, p.workload, 0)
    stats, blocks = (spec, plan.total_blocks) if speculative else (baseline, plan.total_blocks_no_draft)
    metrics = summarise(spec, p.workload, config.parsed_policy.max_gamma) if speculative else base_row
    row: dict[str, float | int | str] = dict(config.columns())
    row["requests"] = len(p.workload)
    row.update(metrics)
    row.update({
        "expected_acceptance_length": config.acceptance.expected_tokens_per_pass(config.gamma) if speculative else 1.0,
        "kv_utilization": float(stats.kv_block_seconds / (stats.busy_s * blocks)),
        "max_concurrency": plan.max_concurrency if speculative else plan.max_concurrency_no_draft,
        "max_concurrency_no_draft": plan.max_concurrency_no_draft,
        "kv_blocks": blocks,
        "target_weight_gb": plan.target_weight_bytes / 1e9,
        "draft_weight_gb": plan.draft_weight_bytes / 1e9 if speculative else 0.0,
        "draft_cost_ratio_b1": float(p.costs.draft_step(1, config.prompt_len)
                                     / p.target_cost.time(1, config.prompt_len, config.prompt_len)) if speculative else None,
        "ridge_tokens": float(p.target_cost.ridge_tokens()),
        "speedup_vs_no_spec": metrics["output_throughput"] / base_row["output_throughput"],
        "tpot_speedup_vs_no_spec": base_row["mean_tpot_ms"] / metrics["mean_tpot_ms"],
    })
    for key in _BASELINE_KEYS:
        row[f"no_spec_{key}"] = base_row[key]
    return row


def simulate(config: SimulationConfig) -> dict[str, float | int | str]:
    """One wide row for ``config``: prepare, run the paired runs, build the row.

    The no-speculation baseline runs on the same arrivals and lengths without the draft's
    memory, so ``speedup_vs_no_spec`` is a paired ratio of output throughput.
    """
    prepared = prepare(config)
    return build_row(prepared, *run_pair(prepared))
