"""Step times: a pass is flat while it streams its weights and grows with tokens past the knee.

One forward pass over ``tokens`` new tokens reading ``kv`` cached tokens costs

    c_fixed + blend(c_weight + c_expert·distinct_experts(tokens), c_token·tokens; knee)
            + max(c_kv·kv, c_attn·attn)

``c_fixed`` is launch and all-reduce latency; ``c_weight`` streaming the weights every pass
reads (a MoE target: all but the routed experts, whose traffic grows with the experts a
batch touches, ``Model.distinct_experts``); ``c_token`` the GEMMs' arithmetic per token;
``blend`` (``knee`` = p) is ``(a^p + b^p)^(1/p)``: p = 1 adds the two (every verified token
pays full GEMM time, as the published additive fits say), p = inf is the roofline's max (a
token is free until the ridge). Attention reads the KV (or computes, whichever is
longer) whatever the knee, and the engine's own costs (per step, per speculative step,
per token) are separate: ``EngineOverhead``.

Coefficients come from a fit (``profiles.StepFit``: published, or the user's own from
``specgauge calibrate``) or, without one, from the datasheet prior (``PassCost.prior``):
bandwidth, peak FLOP/s, launch cost per layer, achieved fractions and the GPU's knee.
Every ``PassCost`` names its ``source``. All methods broadcast over NumPy arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from specgauge.simulator.profiles import GPU, Model, StepFit, distinct_experts

PRIOR = "datasheet prior"


def blend(a, b, knee: float):
    """``(a^p + b^p)^(1/p)`` for p = ``knee`` >= 1: the sum at 1, the max at infinity, between in between."""
    if knee == 1:
        return a + b
    if knee == math.inf:
        return np.maximum(a, b)
    inverse = 1.0 / knee
    if isinstance(a, float) and isinstance(b, float):      # one pass (numpy's float64 is a float too)
        return (a ** knee + b ** knee) ** inverse
    return (np.power(a, knee) + np.power(b, knee)) ** inverse


@dataclass(frozen=True)
class PassCost:
    """Seconds of one forward pass (see the module's formula)."""

    c_fixed: float
    c_token: float
    c_kv: float
    c_attn: float = 0.0
    c_weight: float = 0.0
    knee: float = 1.0
    c_expert: float = 0.0              # streaming one routed expert of every MoE layer
    experts: int = 0
    experts_per_token: int = 0
    measured_experts: tuple | None = None   # a measured distinct-experts curve; None: random routing
    affinity: float = 1.0              # new experts each further consecutive token of a sequence brings (1: independent)
    source: str = PRIOR

    @classmethod
    def from_shape(cls, gpu: GPU, *, linear_params: float, kv_bytes_per_token: float, attn_flops_per_ctx: float,
                   layers: int, hidden: int, dtype_bytes: int, tp: int = 1, layer_overhead_us: float | None = None,
                   weight_params: float | None = None, expert_params: float = 0.0, moe_layers: int = 0,
                   experts: int = 0, experts_per_token: int = 0, measured_experts: tuple | None = None,
                   mla_layers: int = 0) -> "PassCost":
        """The datasheet prior of a pass over a network of this shape, split over ``tp`` GPUs.

        ``linear_params``: multiplied per token; ``weight_params``: streamed by every pass
        (default the same); a MoE adds ``expert_params`` per routed expert touched in each of
        its ``moe_layers``; ``mla_layers`` of multi-head latent attention add their fixed kernels."""
        per_gpu = 1.0 / tp
        launch = gpu.layer_overhead_us if layer_overhead_us is None else layer_overhead_us
        stream = dtype_bytes * per_gpu / (gpu.bandwidth * gpu.efficiency)
        peak = gpu.peak_flops_for(dtype_bytes) * gpu.mfu
        # a MoE layer's and an MLA layer's own fixed kernels: latency-bound at decode, so
        # constants of the pass (GPU.moe_layer_overhead_us, GPU.mla_layer_overhead_us)
        c_fixed = (layers * launch + moe_layers * gpu.moe_layer_overhead_us
                   + mla_layers * gpu.mla_layer_overhead_us) * 1e-6
        c_token = 2.0 * linear_params * per_gpu / peak
        if tp > 1:
            # Two ring all-reduces per layer over tokens x hidden activations.
            ring = 2.0 * (tp - 1) / tp
            c_token += 2 * layers * ring * hidden * 2 / gpu.link_bandwidth
            c_fixed += 2 * layers * gpu.allreduce_latency_us * 1e-6
        return cls(c_fixed=c_fixed, c_token=c_token,
                   c_kv=kv_bytes_per_token * per_gpu / (gpu.bandwidth * gpu.kv_efficiency),
                   c_attn=attn_flops_per_ctx * per_gpu / (gpu.peak_flops * gpu.mfu),
                   c_weight=(linear_params if weight_params is None else weight_params) * stream, knee=gpu.knee,
                   c_expert=expert_params * moe_layers * stream, experts=experts,
                   experts_per_token=experts_per_token, measured_experts=measured_experts, source=PRIOR)

    def split_ranks(self, dp: int) -> "PassCost":
        """This pass run by ``dp`` data-parallel ranks, each on its share of the batch: per-token,
        KV, attention and routed-expert terms (the experts spread over every rank's GPUs) divide
        by ``dp``; the weights each rank streams and the launches do not."""
        if dp == 1:
            return self
        return replace(self, c_token=self.c_token / dp, c_kv=self.c_kv / dp, c_attn=self.c_attn / dp,
                       c_expert=self.c_expert / dp)

    @classmethod
    def prior(cls, gpu: GPU, model: Model, tp: int = 1, layer_overhead_us: float | None = None, dp: int = 1,
              ep: int = 1) -> "PassCost":
        if model.is_mla:   # absorbed MLA: scores over the latent and RoPE part, values over the latent
            attn = 2.0 * model.layers * model.heads * (2 * model.kv_lora_rank + model.qk_rope_head_dim)
        else:
            attn = 4.0 * model.layers * model.heads * model.head_dim
        # from_shape splits KV over tp; MLA's latent is replicated, so its per-GPU bytes are scaled back up.
        cost = cls.from_shape(gpu, linear_params=model.linear_params, kv_bytes_per_token=model.kv_bytes_per_gpu(tp) * tp,
                              attn_flops_per_ctx=attn, layers=model.layers, hidden=model.hidden,
                              dtype_bytes=model.dtype_bytes, tp=tp, layer_overhead_us=layer_overhead_us,
                              weight_params=model.dense_weight_params, expert_params=model.expert_params,
                              moe_layers=model.moe_layers, experts=model.experts,
                              experts_per_token=model.experts_per_token, measured_experts=model.measured_experts,
                              mla_layers=model.layers if model.is_mla else 0)
        if not model.is_moe:
            return cost
        # A MoE pass's GEMMs are many small ones (a few tokens per expert): their time adds to
        # the expert reads instead of hiding under them, at a lower efficiency than a dense
        # GEMM's (GPU.moe_knee, GPU.moe_token_factor: what published MoE serve curves measured).
        cost = replace(cost, c_token=cost.c_token * gpu.moe_token_factor, knee=gpu.moe_knee,
                       affinity=model.expert_affinity).split_ranks(dp)
        return cost if dp == 1 and ep == 1 else cost.with_moe_exchange(gpu, model, tp * dp, ep)

    def with_moe_exchange(self, gpu: GPU, model: Model, gpus: int, ep: int) -> "PassCost":
        """The MoE layers' token exchange across ``gpus`` GPUs, two collectives a layer. Under expert
        parallelism (``ep`` > 1) a dispatch and a combine all-to-all: each token goes to the GPUs of
        its chosen experts (k · (1 − 1/ep) of them off its own) as FP8 and comes back as BF16. Without
        it, DP ranks gather every rank's tokens before the layer and scatter them after (ring)."""
        if ep > 1:
            per_token = model.moe_layers * model.experts_per_token * (1 - 1 / ep) * model.hidden * (1 + 2) / gpus
        else:
            per_token = model.moe_layers * 2 * (gpus - 1) / gpus * model.hidden * 2
        return replace(self, c_token=self.c_token + per_token / gpu.link_bandwidth,
                       c_fixed=self.c_fixed + 2 * model.moe_layers * gpu.allreduce_latency_us * 1e-6)

    @classmethod
    def from_fit(cls, fit: StepFit, attn_from: "PassCost | None" = None) -> "PassCost":
        """A fit's coefficients; attention arithmetic (not in the fit's form) and a MoE's expert
        traffic from the prior."""
        moe = {} if attn_from is None else dict(c_expert=attn_from.c_expert, experts=attn_from.experts,
                                                affinity=attn_from.affinity,
                                                experts_per_token=attn_from.experts_per_token,
                                                measured_experts=attn_from.measured_experts)
        return cls(c_fixed=fit.c_fixed_ms * 1e-3, c_token=fit.c_token_us * 1e-6, c_kv=fit.c_kv_ns * 1e-9,
                   c_attn=fit.c_attn_ns * 1e-9 if fit.c_attn_ns is not None else
                   attn_from.c_attn if attn_from is not None else 0.0, c_weight=fit.c_weight_ms * 1e-3,
                   knee=fit.knee, source=fit.source, **moe)

    @classmethod
    def build(cls, gpu: GPU, model: Model, tp: int = 1, fit: StepFit | None = None, dp: int = 1,
              ep: int = 1) -> "PassCost":
        """The fit where one is given (a fit is of a TP deployment: DP attention and EP use the prior)."""
        prior = cls.prior(gpu, model, tp, dp=dp, ep=ep)
        return prior if fit is None or dp > 1 or ep > 1 else cls.from_fit(fit, prior)

    def runs(self, sequences, run, extra=0.0):
        """Tokens routed as if independent for ``sequences`` runs of ``run`` consecutive tokens (a
        verification's γ + 1 a sequence) plus ``extra`` independent ones: a sequence's consecutive
        tokens share experts, so a run touches as many as 1 + (run − 1)·affinity independent tokens."""
        return sequences * (1.0 + (run - 1.0) * self.affinity) + extra

    def weights(self, tokens, routed=None):
        """Seconds streaming weights: the dense part plus the routed experts the tokens touch
        (``routed``: the tokens routed as if independent, ``runs``; default all of them)."""
        if not self.experts:
            return self.c_weight
        return self.c_weight + self.c_expert * distinct_experts(tokens if routed is None else routed, self.experts,
                                                                self.experts_per_token, self.measured_experts)

    def linear(self, tokens, routed=None):
        """Seconds of the pass's matrices: weight streaming and GEMM arithmetic, blended at the knee."""
        return blend(self.weights(tokens, routed), self.c_token * tokens, self.knee)

    def time(self, tokens, kv, attn, routed=None):
        """Seconds for a pass over ``tokens`` new tokens reading ``kv`` cached tokens.

        ``attn`` is the sum over new tokens of the context each attends to; ``routed`` the tokens
        whose experts count as independent (``runs``; default all).
        """
        return self.c_fixed + self.linear(tokens, routed) + np.maximum(self.c_kv * kv, self.c_attn * attn)

    def is_compute_bound(self, tokens, kv, attn):
        """Whether the GEMMs' arithmetic outweighs weight streaming and the KV read."""
        return self.c_token * tokens + self.c_attn * attn > self.weights(tokens) + self.c_kv * kv + \
            (self.c_fixed if self.knee == 1 else 0.0)

    def ridge_tokens(self, kv: float = 0.0) -> float:
        """Batched tokens at which the GEMMs' time equals the weights' (and KV) time."""
        base = self.c_weight + self.c_expert * self.experts + self.c_kv * kv + (self.c_fixed if self.knee == 1 else 0.0)
        return base / self.c_token if self.c_token else float("inf")


@dataclass(frozen=True)
class EngineOverhead:
    """The engine's own cost: per step (scheduler, input preparation), per speculative step, per token."""

    step_s: float = 0.0
    spec_step_s: float = 0.0
    token_s: float = 0.0

    @classmethod
    def for_target(cls, gpu: GPU, fit: StepFit | None) -> "EngineOverhead":
        """The fit's own overheads where it states them, else the GPU profile's; a fit that
        includes the engine already holds the per-token cost in ``c_token``."""
        def pick(name: str) -> float:
            value = getattr(fit, name) if fit is not None else None
            return (getattr(gpu, name) if value is None else value) * 1e-3
        included = fit is not None and fit.includes_engine
        return cls(step_s=pick("step_overhead_ms"), spec_step_s=pick("spec_overhead_ms"),
                   token_s=0.0 if included else gpu.sample_us_per_token * 1e-6)

    def __call__(self, tokens, speculative: bool):
        return self.step_s + (self.spec_step_s if speculative else 0.0) + self.token_s * tokens


class DraftCost(Protocol):
    """What a proposer costs: a round of ``steps`` passes drafting ``drafted`` tokens per sequence, and prefill."""

    def round(self, batch: int, steps: int, drafted: float, ctx, verify_s): ...

    def prefill(self, tokens: int, ctx: float, attn: float) -> float: ...


@dataclass(frozen=True)
class Shape:
    """What one speculative round does per sequence: draft passes, drafted tokens, verified tokens."""

    steps: int
    drafted: float
    verified: float


def chain(gamma: int, empty: float = 0.0) -> Shape:
    """A chain of γ drafts; a proposal is empty with probability ``empty`` (n-gram lookup misses)."""
    drafted = gamma * (1.0 - empty)
    return Shape(steps=gamma, drafted=drafted, verified=1.0 + drafted)


@dataclass(frozen=True)
class RoundCost:
    """Price of one engine iteration: the proposer's round, then one target verification pass.

    ``shape(γ)`` says how many tokens a round drafts and verifies (a chain by default; a
    tree drafts and verifies all its nodes). ``draft`` is None without speculation.
    """

    target: PassCost
    draft: DraftCost | None
    overhead: EngineOverhead = EngineOverhead()
    empty: float = 0.0
    tree: Shape | None = None

    def shape(self, gamma: int) -> Shape:
        return self.tree if self.tree is not None else chain(gamma, self.empty)

    def decode_round(self, batch: int, gamma: int, ctx):
        """(seconds, target compute-bound?) for ``batch`` decoding sequences with context sum ``ctx``."""
        if gamma == 0:
            seconds = self.target.time(batch, ctx, ctx) + self.overhead(batch, False)
            return seconds, self.target.is_compute_bound(batch, ctx, ctx)
        shape = self.shape(gamma)
        tokens = batch * shape.verified
        verify = self.target.time(tokens, ctx, shape.verified * ctx, self.target.runs(batch, shape.verified))
        bound = self.target.is_compute_bound(tokens, ctx, shape.verified * ctx)
        seconds = verify + self.draft.round(batch, shape.steps, shape.drafted, ctx, verify) + self.overhead(tokens, True)
        return seconds, bound

    def mixed_round(self, batch: int, gamma: int, ctx: float, prefill_tokens: int, prefill_ctx: float,
                    prefill_attn: float, speculative: bool) -> tuple[float, bool]:
        """An iteration that decodes ``batch`` sequences and prefills ``prefill_tokens`` prompt tokens.

        The proposer (when the run speculates) prefills the same prompt chunk.
        """
        shape = self.shape(gamma) if gamma > 0 else Shape(0, 0.0, 1.0)
        tokens = batch * shape.verified + prefill_tokens
        kv = ctx + prefill_ctx
        attn = shape.verified * ctx + prefill_attn
        # a prompt chunk's tokens count as independent (a chunk of thousands touches every expert anyway)
        routed = self.target.runs(batch, shape.verified, prefill_tokens)
        verify = float(self.target.time(tokens, kv, attn, routed))
        bound = bool(self.target.is_compute_bound(tokens, kv, attn))
        seconds = verify + float(self.overhead(tokens, speculative and gamma > 0))
        if speculative and self.draft is not None:
            if gamma > 0 and batch:
                seconds += float(self.draft.round(batch, shape.steps, shape.drafted, ctx, verify))
            if prefill_tokens:
                seconds += float(self.draft.prefill(prefill_tokens, prefill_ctx, prefill_attn))
        return seconds, bound

    def draft_step_ratio(self, ctx: float) -> float | None:
        """c at batch 1: one draft step's cost over one target forward pass (both at context ``ctx``,
        engine overhead left out of both, as the published ratios are); a fixed ``--draft-cost-ratio``
        is its own c (whole step against whole step)."""
        if self.draft is None:
            return None
        if getattr(self.draft, "ratio", None) is not None:
            return float(self.draft.ratio)
        step = float(self.target.time(1, ctx, ctx))
        one = float(self.draft.round(1, 1, 1.0, ctx, step))
        return one / step
