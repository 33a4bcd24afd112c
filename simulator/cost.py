"""Roofline step times: max(bytes / bandwidth / efficiency, FLOPs / peak / mfu) + fixed overhead.

A GPU profile may give one efficiency for both sides of the roofline, or a separate
``compute_efficiency`` (MFU): the GEMMs of a verification pass over B x (gamma + 1)
tokens reach a smaller fraction of peak than weight streaming reaches of bandwidth.

Bytes are the weights streamed once per pass plus the KV cache read over the context
that exists before the pass; FLOPs are 2 x linear parameters per token plus attention
(4 x heads x head_dim x context per layer and token). KV writes of the pass's own tokens
are left out: they are at most (gamma + 1) / context of the reads, and leaving them out
makes a memory-bound verification pass cost exactly a plain decode step, which is the
property the paired comparison relies on. All functions broadcast over NumPy arrays so
the engine can price many rounds at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specgauge.simulator.profiles import GPU, Model


@dataclass(frozen=True)
class PassCost:
    """One model's forward pass on one GPU of a tensor-parallel group of ``tp``."""

    weight_bytes: float          # streamed per pass, per GPU
    kv_bytes_per_token: float    # per GPU
    flops_per_token: float       # linear layers, per GPU
    attn_flops_per_ctx: float    # per query token and context token, per GPU
    bandwidth: float
    peak_flops: float
    efficiency: float
    mfu: float
    overhead_s: float
    allreduce_s_per_token: float
    allreduce_fixed_s: float

    @classmethod
    def build(cls, gpu: GPU, model: Model, tp: int = 1) -> "PassCost":
        per_gpu = 1.0 / tp
        if tp > 1:
            # Two ring all-reduces per layer over tokens x hidden activations.
            ring = 2.0 * (tp - 1) / tp
            per_token = 2 * model.layers * ring * model.hidden * model.dtype_bytes / gpu.link_bandwidth
            fixed = 2 * model.layers * gpu.allreduce_latency_us * 1e-6
        else:
            per_token = fixed = 0.0
        return cls(
            weight_bytes=model.linear_params * model.dtype_bytes * per_gpu,
            kv_bytes_per_token=model.kv_bytes_per_token * per_gpu,
            flops_per_token=2.0 * model.linear_params * per_gpu,
            attn_flops_per_ctx=4.0 * model.layers * model.heads * model.head_dim * per_gpu,
            bandwidth=gpu.bandwidth,
            peak_flops=gpu.peak_flops,
            efficiency=gpu.efficiency,
            mfu=gpu.mfu,
            overhead_s=gpu.step_overhead_ms * 1e-3,
            allreduce_s_per_token=per_token,
            allreduce_fixed_s=fixed,
        )

    def memory_s(self, ctx):
        """Achieved seconds to stream the weights and read the KV cache."""
        return (self.weight_bytes + self.kv_bytes_per_token * ctx) / (self.bandwidth * self.efficiency)

    def compute_s(self, tokens, attn):
        """Achieved seconds of arithmetic."""
        return (self.flops_per_token * tokens + self.attn_flops_per_ctx * attn) / (self.peak_flops * self.mfu)

    def time(self, tokens, ctx, attn):
        """Seconds for a pass over ``tokens`` new tokens reading ``ctx`` cached tokens.

        ``attn`` is the sum over new tokens of the context each attends to.
        """
        if isinstance(ctx, np.ndarray):
            roof = np.maximum(self.memory_s(ctx), self.compute_s(tokens, attn))
        else:
            roof = max(self.memory_s(ctx), self.compute_s(tokens, attn))
        comm = self.allreduce_fixed_s + self.allreduce_s_per_token * tokens if self.allreduce_fixed_s else 0.0
        return roof + self.overhead_s + comm

    def is_compute_bound(self, tokens, ctx, attn):
        return self.compute_s(tokens, attn) > self.memory_s(ctx)

    def ridge_tokens(self, ctx: float = 0.0) -> float:
        """Batch tokens at which compute time equals memory time (attention ignored)."""
        return self.memory_s(ctx) * self.peak_flops * self.mfu / self.flops_per_token


@dataclass(frozen=True)
class RoundCost:
    """Price of one engine iteration: gamma draft steps, then one target verification pass.

    With ``draft_ratio`` set (the textbook c), each draft step costs c times the target's
    one-token-per-sequence pass at the same batch and context instead of its roofline.
    """

    target: PassCost
    draft: PassCost | None
    draft_ratio: float | None = None

    def decode_round(self, batch: int, gamma: int, ctx):
        """(seconds, target compute-bound?) for ``batch`` decoding sequences with context sum ``ctx``."""
        tokens = batch * (gamma + 1)
        target = self.target.time(tokens, ctx, (gamma + 1) * ctx)
        bound = self.target.is_compute_bound(tokens, ctx, (gamma + 1) * ctx)
        if gamma == 0:
            return target, bound
        return target + gamma * self.draft_step(batch, ctx), bound

    def draft_step(self, tokens, ctx, attn=None):
        """Seconds of one draft step over ``tokens`` sequences (the fixed ratio c when set)."""
        attn = ctx if attn is None else attn
        if self.draft_ratio is not None:
            return self.draft_ratio * self.target.time(tokens, ctx, attn)
        assert self.draft is not None
        return self.draft.time(tokens, ctx, attn)

    def mixed_round(self, batch: int, gamma: int, ctx: float, prefill_tokens: int, prefill_ctx: float,
                    prefill_attn: float, speculative: bool) -> tuple[float, bool]:
        """An iteration that decodes ``batch`` sequences and prefills ``prefill_tokens`` prompt tokens.

        The draft (when the run speculates) prefills the same prompt chunk in its first step.
        """
        tokens = batch * (gamma + 1) + prefill_tokens
        kv = ctx + prefill_ctx
        attn = (gamma + 1) * ctx + prefill_attn
        seconds = float(self.target.time(tokens, kv, attn))
        bound = bool(self.target.is_compute_bound(tokens, kv, attn))
        if speculative and (gamma > 0 or prefill_tokens):
            if gamma > 0:
                seconds += float(self.draft_step(batch + prefill_tokens, kv, ctx + prefill_attn))
                seconds += (gamma - 1) * float(self.draft_step(batch, ctx))
            else:
                seconds += float(self.draft_step(prefill_tokens, prefill_ctx, prefill_attn))
        return seconds, bound
