"""``simulate``: prepare the configuration, run the speculative/baseline pair, build the row.

``prepare`` validates and draws everything both runs share (models, memory plan, step
costs, the workload), ``run_pair`` runs the baseline and, when the configuration
speculates, the speculative run on the same workload, and ``build_row`` turns the two
into one wide report row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from specgauge.errors import ConfigError
from specgauge.laws import tokens_per_pass as iid_tokens_per_pass
from specgauge.simulator.acceptance import AcceptanceModel, EmptyProposals
from specgauge.simulator.config import SimulationConfig
from specgauge.simulator.cost import EngineOverhead, PassCost, RoundCost
from specgauge.simulator.drafts import Draft, build_draft, draft_kind
from specgauge.simulator.engine import Engine, EngineParams, RunStats
from specgauge.simulator.memory import MemoryPlan, memory_plan_for
from specgauge.simulator.metrics import summarise
from specgauge.simulator.policies import NoSpeculation
from specgauge.simulator.replay import ReplayAcceptance
from specgauge.simulator.trees import parse_tree, rank_rates, tree_acceptance, tree_shape
from specgauge.simulator.profiles import GIB, GPU, Model, load_gpu, load_model, load_step_fit
from specgauge.simulator.workload import Workload, closed_loop, closed_loop_concurrency, make_workload

_BASELINE_KEYS = ("output_throughput", "request_throughput", "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms",
                  "mean_e2el_ms", "p99_tpot_ms", "stable")


def _check_tp(model: Model, tp: int, flag: str, hint: str = "") -> None:
    if model.heads % tp or model.kv_heads % tp:
        raise ConfigError(f"{flag} {tp} must divide {model.name}'s {model.heads} attention heads and "
                          f"{model.kv_heads} KV heads (tensor parallelism splits heads across GPUs){hint}")


def _check_parallel(target: Model, config: SimulationConfig) -> None:
    """DP attention and expert parallelism are deployments of a MoE target; EP splits its experts evenly."""
    if (config.dp > 1 or config.ep > 1) and not target.is_moe:
        raise ConfigError(f"--dp and --ep deploy a mixture-of-experts target; {target.name} is dense (run "
                          "separate replicas of it instead)")
    if target.is_moe and target.experts % config.ep:
        raise ConfigError(f"--ep {config.ep} must divide {target.name}'s {target.experts} routed experts")


@dataclass(frozen=True)
class Setup:
    """What a configuration resolves to: profiles, the target's step cost, the engine overhead and the proposer."""

    gpu: GPU
    target: Model
    target_cost: PassCost
    overhead: EngineOverhead
    draft: Draft | None


def resolve(config: SimulationConfig) -> Setup:
    """Load the profiles and step fits a configuration names; refuse what cannot run."""
    gpu = load_gpu(config.gpu, config.profiles)
    target = load_model(config.target, config.profiles)
    _check_tp(target, config.tp, "--tp")
    if draft_kind(config.draft) == "model":
        _check_tp(load_model(config.draft, config.profiles), config.draft_tp or config.tp, "the draft's TP",
                  "" if config.draft_tp else "; set --draft-tp 1 (vLLM's speculative_draft_tensor_parallel_size)")
    _check_parallel(target, config)
    wide = config.dp > 1 or config.ep > 1
    fit = None if wide else load_step_fit(target.name, gpu.name, config.tp, config.profiles)
    target_cost = PassCost.build(gpu, target, config.tp, fit, dp=config.dp, ep=config.ep)
    overhead = EngineOverhead.for_target(gpu, fit)
    draft = build_draft(config.draft, gpu=gpu, target=target, target_cost=target_cost, tp=config.tp,
                        draft_tp=config.draft_tp, profiles=config.profiles, ratio=config.draft_cost_ratio,
                        empty=config.empty_proposals, kv_budget=config.draft_kv_budget, overhead=overhead,
                        dp=config.dp)
    if config.speculative and draft is None:
        raise ConfigError("speculation (gamma > 0) needs a draft (--draft MODEL, eagle, mtp or ngram) or a fixed "
                          "--draft-cost-ratio; use --gamma 0 for no speculation")
    if config.length_dist == "fixed" and config.prompt_len + config.output_len > target.max_position:
        raise ConfigError(f"prompt_len + output_len = {config.prompt_len + config.output_len} exceeds "
                          f"{target.name}'s context of {target.max_position} tokens")
    return Setup(gpu, target, target_cost, overhead, draft)


def memory_plan(config: SimulationConfig, setup: Setup | None = None) -> MemoryPlan:
    """The per-GPU memory budget and maximum concurrency of ``config`` (draft included when speculating)."""
    setup = resolve(config) if setup is None else setup
    draft = setup.draft if config.speculative else None
    return memory_plan_for(setup.gpu, setup.target, draft.weight_bytes if draft else 0.0,
                           draft.kv_bytes_per_token if draft else 0.0, config.tp, config.prompt_len + config.output_len,
                           dp=config.dp,
                           lookahead=config.parsed_policy.max_gamma, block_tokens=config.block_size,
                           gpu_memory_utilization=config.gpu_memory_utilization,
                           max_batched_tokens=config.max_batched_tokens, draft_label=draft.name if draft else "draft")


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
    base_costs: RoundCost
    acceptance: AcceptanceModel
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
    setup = resolve(config)
    gpu, target, draft = setup.gpu, setup.target, setup.draft
    plan = memory_plan(config, setup)
    arrival_ss, length_ss, acceptance_ss = np.random.SeedSequence(config.seed).spawn(3)
    workload = make_workload(config.requests, config.qps, config.arrival, config.arrival_cv, config.prompt_len,
                             config.output_len, config.length_dist, config.trace,
                             np.random.default_rng(arrival_ss), np.random.default_rng(length_ss))
    workload = _fit_workload(config, target, workload)
    if config.arrival == "closed":   # no more warm-up requests than the KV cache can hold at once
        workload = closed_loop(workload, min(config.batch_size, closed_loop_concurrency(plan, config.length_dist)))
    worst = int((workload.prompt + workload.output).max())
    for blocks, look in ((plan.total_blocks, config.parsed_policy.max_gamma), (plan.total_blocks_no_draft, 0)):
        if -(-(worst + look) // config.block_size) > blocks:
            raise ConfigError(f"the longest request ({worst} tokens) needs more KV blocks than the "
                              f"{blocks} that fit on {gpu.name} with tp={config.tp}")
    acceptance, tree = config.acceptance, None
    if config.tree is not None:
        acceptance = tree_acceptance(config.tree, acceptance, rank_rates(config.tree_acceptance))
        tree = tree_shape(parse_tree(config.tree))
    elif draft is not None and draft.empty > 0 and not isinstance(acceptance, ReplayAcceptance):
        acceptance = EmptyProposals(acceptance, draft.empty)
    # A replayed trace holds its own empty proposals; their verification cost is --empty-proposals' alone.
    empty = 0.0 if draft is None or tree is not None else (
        (config.empty_proposals or 0.0) if isinstance(acceptance, ReplayAcceptance) else draft.empty)
    costs = RoundCost(setup.target_cost, draft.cost if draft is not None else None, setup.overhead,
                      empty=empty, tree=tree)
    return Prepared(config, gpu, target, plan, workload, setup.target_cost, costs,
                    RoundCost(setup.target_cost, None, setup.overhead), acceptance, acceptance_ss)


def _engine_run(p: Prepared, blocks: int, speculative: bool,
                progress: Callable[[int], None] | None = None) -> RunStats:
    config = p.config
    if speculative:
        policy, costs = config.parsed_policy, p.costs
        acceptance = p.acceptance
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
        policy, costs, sampler = NoSpeculation(), p.base_costs, None

        def tokens_per_pass(g: int) -> float:
            return 1.0
    cap = min(config.batch_size, config.spec_batch_size or config.batch_size) if speculative else config.batch_size
    params = EngineParams(batch_cap=cap, total_blocks=blocks, block_tokens=config.block_size,
                          lookahead=policy.max_gamma, max_batched_tokens=config.max_batched_tokens, costs=costs,
                          policy=policy, speculative=speculative, tokens_per_pass=tokens_per_pass)
    return Engine(p.workload, params, sampler).run(progress)


def run_pair(p: Prepared, progress: Callable[[int], None] | None = None) -> tuple[RunStats, RunStats | None]:
    """The no-speculation baseline (without the draft's memory) and, when speculating, the speculative run.

    ``progress``, when given, is told the requests admitted so far, counted over both runs.
    """
    n = len(p.workload.arrival)
    baseline = _engine_run(p, p.plan.total_blocks_no_draft, speculative=False, progress=progress)
    second = None if progress is None else (lambda admitted: progress(n + admitted))
    spec = _engine_run(p, p.plan.total_blocks, speculative=True, progress=second) if p.config.speculative else None
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
    row["requests"] = p.workload.measured_count
    row["gpu"] = p.gpu.name  # one canonical name however it was typed (h100 and h100-sxm are one GPU)
    row.update(metrics)
    row.update({
        "expected_acceptance_length": p.acceptance.expected_tokens_per_pass(config.gamma) if speculative else 1.0,
        "kv_utilization": float(stats.kv_block_seconds / (stats.busy_s * blocks)),
        "max_concurrency": plan.max_concurrency if speculative else plan.max_concurrency_no_draft,
        "max_concurrency_no_draft": plan.max_concurrency_no_draft,
        "kv_blocks": blocks,
        "target_weight_gib": plan.target_weight_bytes / GIB,
        "draft_weight_gib": plan.draft_weight_bytes / GIB if speculative else 0.0,
        "draft_cost_ratio_b1": p.costs.draft_step_ratio(config.prompt_len) if speculative else None,
        "ridge_tokens": float(p.target_cost.ridge_tokens()),
        "step_model_source": p.target_cost.source,
        "speedup_vs_no_spec": metrics["output_throughput"] / base_row["output_throughput"],
        "tpot_speedup_vs_no_spec": base_row["mean_tpot_ms"] / metrics["mean_tpot_ms"],
    })
    for key in _BASELINE_KEYS:
        row[f"no_spec_{key}"] = base_row[key]
    return row


def simulate(config: SimulationConfig, progress: Callable[[int, int], None] | None = None
             ) -> dict[str, float | int | str]:
    """One wide row for ``config``: prepare, run the paired runs, build the row.

    The no-speculation baseline runs on the same arrivals and lengths without the draft's
    memory, so ``speedup_vs_no_spec`` is a paired ratio of output throughput. ``progress``,
    when given, is called with (requests admitted, total) over both runs.
    """
    prepared = prepare(config)
    total = len(prepared.workload.arrival) * (2 if config.speculative else 1)
    hook = None if progress is None else (lambda admitted: progress(admitted, total))
    return build_row(prepared, *run_pair(prepared, hook))
