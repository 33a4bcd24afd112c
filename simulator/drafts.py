"""The proposers people run, each with its own cost, memory and acceptance defaults.

- ``model``: a separate small LM (any model profile name) at its own ``draft_tp``; each
  draft step is its own pass, paying an eager pass's launch cost per layer.
- ``eagle``: an EAGLE-3 head: one decoder layer of the target's shape on the target's
  hidden states (a fc from 3 x hidden), a 32,000-token LM head, its own one-layer KV.
- ``mtp``: a multi-token-prediction module: one decoder layer plus a 2 x hidden
  projection, sharing the target's embedding and LM head, reused for every step.
  A head runs at the target's TP, or at ``draft_tp`` 1 (vLLM's two choices for a head):
  whole on one GPU, every token's FLOPs and the weights unsplit, no all-reduce.
- ``ngram``: prompt lookup on the CPU: no GPU memory, a cost that is a fraction of the
  verify pass, and proposals that are often empty.

``build_draft`` returns a ``Draft``: what memory holds (per GPU), what a round costs
and the acceptance to assume when the user gives none.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from specgauge.errors import ConfigError
from specgauge.simulator.acceptance import AcceptanceModel, IIDAcceptance
from specgauge.simulator.cost import EngineOverhead, PassCost
from specgauge.simulator.profiles import GPU, Model, StepFit, load_model, load_step_fit

KINDS = ("model", "eagle", "mtp", "ngram")
_ALIASES = {"eagle": "eagle", "eagle3": "eagle", "eagle-3": "eagle", "mtp": "mtp", "ngram": "ngram",
            "n-gram": "ngram", "prompt-lookup": "ngram"}
EAGLE_DRAFT_VOCAB = 32_000          # EAGLE-3 checkpoints' draft_vocab_size (d2t maps to the target's)
EAGLE_DRAFT_BYTES = 2               # EAGLE-3 heads ship in BF16 whatever the target's weights (an FP8 or FP4 target too)
NGRAM_VERIFY_FRACTION = 0.0059      # SpecDecode-Bench: the n-gram proposer costs 0.59 % of the verify pass
NGRAM_EMPTY = 0.5                   # share of empty n-gram proposals: a placeholder, replay a trace instead

#: Acceptance assumed when the user gives none. Placeholders, not measurements: calibrate
#: with --acceptance (a vLLM result JSON or a trace) before reading a decision off them.
DEFAULT_ACCEPTANCE: dict[str, AcceptanceModel] = {
    "model": IIDAcceptance(0.8), "eagle": IIDAcceptance(0.75), "mtp": IIDAcceptance(0.8), "ngram": IIDAcceptance(0.7),
}


def draft_kind(name: str | None) -> str | None:
    """``model``, ``eagle``, ``mtp``, ``ngram``, or None without a draft."""
    if name is None:
        return None
    return _ALIASES.get(str(name).lower(), "model")


@dataclass(frozen=True)
class PassDraft:
    """A proposer priced as its own passes (a draft model or a head): one pass per draft step.

    The first pass of a round is a catch-up over the tokens the last verification accepted,
    padded to ``steps + 1`` a sequence, as engines run it: vLLM's EAGLE proposer feeds every
    verified position in its first forward, SGLang runs a draft-extend pass over the accepted
    tokens (padded for its CUDA graphs). Its output is the first draft step; the remaining
    ``steps - 1`` passes draft ``drafted / steps`` tokens a sequence each (1 for a chain, K
    for a tree's level). So a head's or an MTP layer's round grows with batch × (γ + 1), and
    a MoE MTP layer's catch-up pass touches the experts of all those tokens.
    """

    step: PassCost
    kv_budget: int | None = None   # cached tokens read per sequence (a sparse-KV draft), None: all
    self_draft: bool = False       # the target drafting for itself: it reuses the target's KV, no prefill of its own
    catch_up: bool = True          # the first pass ingests the accepted tokens (steps + 1 a sequence)

    def __post_init__(self) -> None:
        # The target drafting for itself has the accepted tokens' KV from its own verification pass.
        if self.self_draft:
            object.__setattr__(self, "catch_up", False)

    def round(self, batch, steps, drafted, ctx, verify_s):
        if not steps:
            return 0.0
        width = drafted / steps
        if self.kv_budget is not None:
            ctx = np.minimum(ctx, batch * self.kv_budget)
        ingest = steps + 1 if self.catch_up else width
        first = self.step.time(batch * ingest, ctx, ingest * ctx, self.step.runs(batch, ingest))
        return first + (steps - 1) * self.step.time(batch * width, ctx, width * ctx) if steps > 1 else first

    def prefill(self, tokens, ctx, attn):
        return 0.0 if self.self_draft else float(self.step.time(tokens, ctx, attn))


@dataclass(frozen=True)
class RoundFitDraft:
    """A fit of a whole proposal round (SpecDecode-Bench's EAGLE-3 form) split into a fixed part and
    one per draft pass: ``c_fixed + steps·c_pass + c_token·drafted + c_kv·kv``. A round of K drafts
    is K sequential passes, so a fit measured at one K prices another only through ``c_pass``."""

    fit: StepFit

    def round(self, batch, steps, drafted, ctx, verify_s):
        return ((self.fit.c_fixed_ms + self.fit.c_pass_ms * steps) * 1e-3 + self.fit.c_token_us * 1e-6 * batch * drafted
                + self.fit.c_kv_ns * 1e-9 * ctx)

    def prefill(self, tokens, ctx, attn):
        return self.fit.c_token_us * 1e-6 * tokens


@dataclass(frozen=True)
class RatioDraft:
    """The textbook c, whole step against whole step: each draft step costs ``ratio`` times a
    plain decode step of the target, its engine overhead included (Leviathan's c compares one
    run of each model; in an engine a run is a step). So at batch 1, where verifying γ + 1
    tokens costs what one token does, a round costs (γc + 1) plain steps and the speed-up is
    E[N] / (γc + 1), whatever the engine's per-step overhead."""

    ratio: float
    target: PassCost
    overhead: EngineOverhead = EngineOverhead()

    def round(self, batch, steps, drafted, ctx, verify_s):
        return steps * self.ratio * (self.target.time(batch, ctx, ctx) + self.overhead(batch, False))

    def prefill(self, tokens, ctx, attn):
        return self.ratio * float(self.target.time(tokens, ctx, attn))


@dataclass(frozen=True)
class FractionDraft:
    """A CPU proposer whose cost is a fraction of the verify pass it feeds (n-gram lookup)."""

    fraction: float

    def round(self, batch, steps, drafted, ctx, verify_s):
        return self.fraction * verify_s

    def prefill(self, tokens, ctx, attn):
        return 0.0


@dataclass(frozen=True)
class Draft:
    """A proposer as the simulator needs it: per-GPU memory, its cost, and its defaults."""

    kind: str
    name: str
    tp: int
    weight_bytes: float          # per GPU
    kv_bytes_per_token: float    # per GPU
    cost: object                 # a cost.DraftCost
    empty: float = 0.0           # probability that a proposal is empty

    @property
    def default_acceptance(self) -> AcceptanceModel:
        return DEFAULT_ACCEPTANCE[self.kind]


def _priced_as_layers(head: PassCost, target: PassCost, layers: int, gpu: GPU) -> PassCost:
    """A head's pass as published runs price it: at batch 1 it costs ``GPU.draft_pass_layers`` of the
    target's layers (the target's bare batch-1 pass ÷ its layer count), whatever the engine, TP or
    attention kind, plus ``GPU.draft_pass_overhead_ms``; its growth with tokens, KV and experts stays
    the head's own, priced from its shape.

    A head pass runs one decoder layer of the target's shape with the same per-layer kernels,
    collectives and (MLA) fixed kernels as a target layer, then an LM head, sampling and the
    proposer's input preparation: the published batch-1 runs put the whole at 2.6-7.3 target
    layers a source (``profiles.DRAFT_PASS_LAYERS``), where pricing the head from its shape alone
    gave about one layer's fixed cost, so an MTP round on an MLA target cost little more than a
    plain step."""
    one = float(target.time(1.0, 0.0, 0.0))
    fixed = gpu.draft_pass_layers / layers * one - float(head.linear(1.0))
    return replace(head, c_fixed=max(fixed, 0.0) + gpu.draft_pass_overhead_ms * 1e-3)


def _head_params(target: Model, kind: str) -> tuple[int, int]:
    """(resident parameters, parameters multiplied per token) of an EAGLE-3 head or an MTP module.

    An MTP module's layer has the target's own shape: a MoE target's MTP layer holds all its
    experts and multiplies the chosen ones (DeepSeek-V3: 11.5B resident, 1.5B active with the head)."""
    h, nh, nkv, hd = target.hidden, target.heads, target.kv_heads, target.head_dim
    mlp = 3 * h * target.intermediate
    if kind == "eagle":
        # EAGLE-3: fc 3h -> h; attention takes [embedding; hidden] (2h); own 32K LM head.
        attention = 2 * h * nh * hd + 2 * 2 * h * nkv * hd + nh * hd * h
        linear = 3 * h * h + attention + mlp + h * EAGLE_DRAFT_VOCAB
        return linear + 4 * h, linear                       # + the layer's two norms, hidden and final norm
    # eh_proj 2h -> h and the layer; embedding and head shared
    return 2 * h * h + target.layer_linear_params + 4 * h, 2 * h * h + target.layer_active_params + h * target.vocab


def head_shape(gpu: GPU, target: Model, kind: str, tp: int) -> PassCost:
    """An EAGLE-3 head's or an MTP module's pass from its shape alone, at ``tp``: its weights
    (an MTP layer of a MoE target streams the routed experts its tokens touch), its FLOPs (at
    the MoE token factor and knee of the target's MoE layers for such a layer), its one-layer
    KV and two layers' launches; ``_priced_as_layers`` then sets its batch-1 cost."""
    _, linear = _head_params(target, kind)
    moe = kind == "mtp" and target.is_moe
    routed = target.experts_per_token * target.expert_params if moe else 0
    shape = PassCost.from_shape(
        gpu, linear_params=linear, kv_bytes_per_token=target.kv_bytes_per_gpu(tp) * tp / target.layers,
        attn_flops_per_ctx=4.0 * target.heads * target.head_dim, layers=2, hidden=target.hidden,
        dtype_bytes=EAGLE_DRAFT_BYTES if kind == "eagle" else target.dtype_bytes, tp=tp, weight_params=linear - routed,
        expert_params=target.expert_params if moe else 0.0, moe_layers=int(moe), experts=target.experts if moe else 0,
        experts_per_token=target.experts_per_token if moe else 0,
        measured_experts=target.measured_experts if moe else None, mla_layers=int(kind == "mtp" and target.is_mla))
    if moe:   # an MTP layer of a MoE target runs the target's grouped GEMMs, priced as PassCost.prior prices them
        shape = replace(shape, c_token=shape.c_token * gpu.moe_token_factor, knee=gpu.moe_knee,
                        affinity=target.expert_affinity)
    return shape


def build_draft(name: str | None, *, gpu: GPU, target: Model, target_cost: PassCost, tp: int, draft_tp: int | None,
                profiles: str | None, ratio: float | None, empty: float | None = None,
                kv_budget: int | None = None, overhead: EngineOverhead = EngineOverhead(), dp: int = 1) -> Draft | None:
    """The proposer called ``name`` for ``target`` on ``gpu``; refuses what cannot run.

    With ``dp`` data-parallel attention ranks, a model or head runs beside the target on each rank,
    on that rank's share of the batch (``PassCost.split_ranks``).

    ``kv_budget`` makes a draft model read (and keep) at most that many cached tokens per
    sequence, as a StreamingLLM-style sparse-KV draft does; a draft that is the target
    itself (MagicDec's self-speculation) then shares the target's weights.
    """
    kind = draft_kind(name)
    if kind is None:
        if ratio is None:
            return None
        return Draft("model", "none", tp, 0.0, 0.0, RatioDraft(ratio, target_cost, overhead))
    if kind == "ngram":
        # A calibrated n-gram proposer (specgauge calibrate, a serve pair) replaces the 0.59 % default.
        fit = load_step_fit(f"ngram:{target.name}", gpu.name, tp, profiles)
        return Draft(kind, "ngram", tp, 0.0, 0.0, RoundFitDraft(fit) if fit is not None else
                     FractionDraft(NGRAM_VERIFY_FRACTION), empty=NGRAM_EMPTY if empty is None else empty)
    empty = 0.0 if empty is None else empty
    if kind == "model":
        model = load_model(name, profiles)
        if model.vocab != target.vocab:
            raise ConfigError(f"draft {model.name!r} has vocabulary {model.vocab} but target {target.name!r} has "
                              f"{target.vocab}: draft and target must share a tokenizer")
        dtp = tp if draft_tp is None else draft_tp
        fit = load_step_fit(model.name, gpu.name, dtp, profiles)
        if ratio is not None:
            cost: object = RatioDraft(ratio, target_cost, overhead)
        elif fit is not None and fit.per_round:
            cost = RoundFitDraft(fit)
        else:
            # The target drafting for itself runs in the target's CUDA graphs, not as an eager draft.
            own = model.name == target.name and dtp == tp
            cost = PassDraft((PassCost.build(gpu, model, dtp, fit) if fit is not None else
                              PassCost.prior(gpu, model, dtp, layer_overhead_us=None if own else gpu.draft_layer_overhead_us)
                              ).split_ranks(dp), kv_budget, self_draft=own)
        weights = 0.0 if model.name == target.name and dtp == tp else model.weight_bytes / dtp
        kv = 0.0 if kv_budget is not None else model.kv_bytes_per_token / dtp   # a budget's few blocks are left out
        return Draft(kind, model.name, dtp, weights, kv, cost, empty)
    if kv_budget is not None:
        raise ConfigError(f"--draft-kv-budget applies to a draft model, not to {kind}")
    # A head on the target's hidden states runs in the target's TP group by default, or alone
    # on one GPU (vLLM's draft_tensor_parallel_size: 1 or the target's, nothing else).
    if draft_tp not in (None, 1, tp):
        raise ConfigError(f"an {kind} head runs at the target's TP ({tp}) or at TP 1, not --draft-tp {draft_tp}")
    dtp = tp if draft_tp is None else draft_tp
    resident, linear = _head_params(target, kind)
    head_bytes = EAGLE_DRAFT_BYTES if kind == "eagle" else target.dtype_bytes   # an MTP module has the target's
    kv = target.kv_bytes_per_gpu(dtp) * dtp / target.layers   # one layer (from_shape and the memory plan split it by dtp)
    fit = load_step_fit(f"{kind}:{target.name}", gpu.name, dtp, profiles)
    if ratio is not None:
        cost = RatioDraft(ratio, target_cost, overhead)
    elif fit is not None and fit.per_round:
        cost = RoundFitDraft(fit)
    elif fit is not None:
        cost = PassDraft(PassCost.from_fit(fit))
    else:
        shape = head_shape(gpu, target, kind, dtp)
        cost = PassDraft(_priced_as_layers(shape, target_cost, target.layers, gpu).split_ranks(dp))
    # At TP 1 the head's weights and KV sit whole on one GPU, which bounds the KV blocks of all.
    return Draft(kind, f"{kind}:{target.name}", dtp, resident * head_bytes / dtp, kv / dtp, cost, empty)
