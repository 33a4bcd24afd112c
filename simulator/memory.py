"""GPU memory as vLLM accounts it: binary GiB, weights, an activation and CUDA-graph reserve, both KV caches.

A fraction ``gpu_memory_utilization`` of the capacity (binary, as the driver reports it)
is the engine's. Out of it come the weights, the activation peak of a profiling pass over
``max_batched_tokens`` tokens and the memory torch does not allocate (CUDA context, NCCL
and cuBLAS workspaces, CUDA graphs: ``non_torch_gib``); the rest is cut into KV blocks.
With a draft, every block holds the draft's KV for the same tokens too, at the draft's
own TP: a draft model at TP 1 beside a TP 4 target keeps all of its weights and KV on
the GPU it shares with one target shard, and that GPU sets the block count.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from specgauge.errors import ConfigError
from specgauge.simulator.profiles import GIB, GPU, Model


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory budget and the concurrency it allows (all sizes in bytes per GPU)."""

    gpu_bytes: float
    reserve_bytes: float
    activation_bytes: float
    target_weight_bytes: float
    draft_weight_bytes: float
    kv_budget_bytes: float
    kv_budget_no_draft_bytes: float
    block_tokens: int
    target_block_bytes: float
    draft_block_bytes: float
    total_blocks: int
    total_blocks_no_draft: int
    blocks_per_request: int
    blocks_per_request_no_draft: int
    max_concurrency: int
    max_concurrency_no_draft: int

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def activation_bytes(model: Model, max_batched_tokens: int, tp: int) -> float:
    """Peak activations of a pass over ``max_batched_tokens`` tokens: the MLP's gate and up outputs plus residuals."""
    return max_batched_tokens * (2 * model.intermediate + 4 * model.hidden) * model.dtype_bytes / tp


def target_weight_bytes(target: Model, tp: int, dp: int = 1) -> float:
    """Per-GPU target weights: with ``dp`` data-parallel attention ranks each rank holds the dense part
    at ``tp``, and the routed experts spread over all tp × dp GPUs."""
    if dp == 1:
        return target.weight_bytes / tp
    routed = target.moe_layers * target.experts * target.expert_params * target.dtype_bytes
    return (target.weight_bytes - routed) / tp + routed / (tp * dp)


def memory_plan_for(gpu: GPU, target: Model, draft_weight_bytes: float, draft_kv_bytes_per_token: float, tp: int,
                    tokens_per_request: int, lookahead: int = 0, block_tokens: int = 16,
                    gpu_memory_utilization: float = 0.9, max_batched_tokens: int = 8192,
                    draft_label: str = "draft", dp: int = 1) -> MemoryPlan:
    """Blocks and maximum concurrency with and without the draft (per-GPU draft bytes given); refuses what does not fit.

    With ``dp`` data-parallel attention ranks, each rank's GPUs hold the KV of its own requests
    only: the blocks (and the concurrency) of all ranks together are ``dp`` times one GPU's."""
    gpu_bytes = gpu.memory_bytes
    activation = activation_bytes(target, max_batched_tokens, tp)
    reserve = (1.0 - gpu_memory_utilization) * gpu_bytes + gpu.non_torch_gib * GIB + activation
    target_w = target_weight_bytes(target, tp, dp)
    draft_w = draft_weight_bytes
    engine = gpu_bytes - reserve
    if target_w + draft_w >= engine:
        what = f"target {target_w / GIB:.1f} GiB" + (f" + {draft_label} {draft_w / GIB:.1f} GiB" if draft_w else "")
        raise ConfigError(
            f"weights do not fit: {what} per GPU > {engine / GIB:.1f} GiB usable "
            f"({gpu.name}: {gpu_bytes / GIB:.1f} GiB x {gpu_memory_utilization:g} less {(reserve - (1 - gpu_memory_utilization) * gpu_bytes) / GIB:.1f} GiB "
            f"activations and CUDA context, tp={tp}); raise --tp or pick a bigger GPU")
    target_block = target.kv_bytes_per_gpu(tp) * block_tokens
    draft_block = draft_kv_bytes_per_token * block_tokens
    budget = engine - target_w - draft_w
    budget_no_draft = engine - target_w
    blocks = dp * int(budget // (target_block + draft_block))
    blocks_no_draft = dp * int(budget_no_draft // target_block)
    per_request = math.ceil((tokens_per_request + lookahead) / block_tokens)
    per_request_no_draft = math.ceil(tokens_per_request / block_tokens)
    if blocks < per_request:
        raise ConfigError(
            f"KV cache too small: one request of {tokens_per_request + lookahead} tokens needs {per_request} blocks "
            f"({per_request * (target_block + draft_block) / GIB:.2f} GiB) but only {budget / GIB:.2f} GiB "
            f"({blocks} blocks) is left after weights on {gpu.name}, tp={tp}")
    return MemoryPlan(
        gpu_bytes=gpu_bytes, reserve_bytes=reserve, activation_bytes=activation, target_weight_bytes=target_w,
        draft_weight_bytes=draft_w, kv_budget_bytes=budget, kv_budget_no_draft_bytes=budget_no_draft,
        block_tokens=block_tokens, target_block_bytes=target_block, draft_block_bytes=draft_block, total_blocks=blocks,
        total_blocks_no_draft=blocks_no_draft, blocks_per_request=per_request,
        blocks_per_request_no_draft=per_request_no_draft, max_concurrency=blocks // per_request,
        max_concurrency_no_draft=blocks_no_draft // per_request_no_draft)
