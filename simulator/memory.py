"""GPU memory: weights, both KV caches at block granularity and a reserve; concurrency follows.

vLLM's accounting: a fraction ``gpu_memory_utilization`` of the memory is the engine's;
the rest is the reserve (CUDA context, activations, fragmentation). Weights come out of
the engine's share and the remainder is cut into KV blocks. With a draft, every block
holds the draft's KV for the same tokens too, so a block costs target + draft bytes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from specgauge.errors import ConfigError
from specgauge.simulator.profiles import GPU, Model


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory budget and the concurrency it allows (all sizes in bytes per GPU)."""

    gpu_bytes: float
    reserve_bytes: float
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


def memory_plan_for(gpu: GPU, target: Model, draft: Model | None, tp: int, tokens_per_request: int,
                    lookahead: int = 0, block_tokens: int = 16, gpu_memory_utilization: float = 0.9) -> MemoryPlan:
    """Blocks and maximum concurrency with and without the draft; refuses what does not fit."""
    gpu_bytes = gpu.memory_bytes
    reserve = (1.0 - gpu_memory_utilization) * gpu_bytes
    target_w = target.weight_bytes / tp
    draft_w = draft.weight_bytes / tp if draft is not None else 0.0
    engine = gpu_bytes - reserve
    if target_w + draft_w >= engine:
        what = f"target {target_w / 1e9:.1f} GB" + (f" + draft {draft_w / 1e9:.1f} GB" if draft else "")
        raise ConfigError(
            f"weights do not fit: {what} per GPU > {engine / 1e9:.1f} GB usable "
            f"({gpu.name}: {gpu_bytes / 1e9:.0f} GB x {gpu_memory_utilization:g}, tp={tp}); raise --tp or pick a bigger GPU")
    target_block = target.kv_bytes_per_token / tp * block_tokens
    draft_block = draft.kv_bytes_per_token / tp * block_tokens if draft is not None else 0.0
    budget = engine - target_w - draft_w
    budget_no_draft = engine - target_w
    blocks = int(budget // (target_block + draft_block))
    blocks_no_draft = int(budget_no_draft // target_block)
    per_request = math.ceil((tokens_per_request + lookahead) / block_tokens)
    per_request_no_draft = math.ceil(tokens_per_request / block_tokens)
    if blocks < per_request:
        raise ConfigError(
            f"KV cache too small: one request of {tokens_per_request + lookahead} tokens needs {per_request} blocks "
            f"({per_request * (target_block + draft_block) / 1e9:.2f} GB) but only {budget / 1e9:.2f} GB "
            f"({blocks} blocks) is left after weights on {gpu.name}, tp={tp}")
    return MemoryPlan(
        gpu_bytes=gpu_bytes, reserve_bytes=reserve, target_weight_bytes=target_w, draft_weight_bytes=draft_w,
        kv_budget_bytes=budget, kv_budget_no_draft_bytes=budget_no_draft, block_tokens=block_tokens, target_block_bytes=target_block,
        draft_block_bytes=draft_block, total_blocks=blocks, total_blocks_no_draft=blocks_no_draft,
        blocks_per_request=per_request, blocks_per_request_no_draft=per_request_no_draft,
        max_concurrency=blocks // per_request, max_concurrency_no_draft=blocks_no_draft // per_request_no_draft)
