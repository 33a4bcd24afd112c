"""GPU and model profiles: data in ``fixtures/hardware``, extendable from user files.

Profiles are frozen dataclasses so that a cost or memory model built from them cannot
drift during a run. A user file (TOML or JSON) has the same ``[gpus.NAME]``,
``[models.NAME]`` and ``[steps.NAME]`` tables as the bundled ones. ``--profiles`` takes
one file or several, comma-separated; later files win, field by field: a table naming a
known GPU or model changes only the fields it gives. ``check_profile_tables`` is the one
place a profile file's shape is checked.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import json
import math
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from specgauge.errors import ConfigError, InputFileError

GIB = float(2 ** 30)
#: The default knee of a pass (``cost.blend``): 1 adds weight streaming and GEMM time (the
#: published fits' form), infinity is the roofline's max. Chosen on held-out published
#: curves (benchmarks/inputs.py --knee-study), not per row.
KNEE = 1.5


def _check_knee(where: str, knee: object) -> None:
    if not (isinstance(knee, (int, float)) and not isinstance(knee, bool) and knee >= 1):
        raise ConfigError(f"{where}: knee must be a number >= 1 (1 adds, inf is the roofline max), got {knee!r}")


#: A sequence's consecutive tokens share experts: each token after the first brings half a
#: token's worth of new ones. Cohere measured, on its production MoE models in vLLM, that
#: verifying 4 consecutive tokens loads about 2.5 times one token's unique expert weights, not 4
#: times ("Why MoE models get more from speculative decoding", cohere.com blog, 21 Apr 2026):
#: 1 + 3 · 0.5 = 2.5. A model's ``expert_affinity`` 1 routes every token independently.
EXPERT_AFFINITY = 0.5

#: Fixed parts a layer adds to a forward pass beyond the dense layer's launches
#: (``layer_overhead_us``) and its two collectives (``allreduce_latency_us``): latency-bound at
#: decode, so constants of the pass that do not shrink with the batch. Each is the median over
#: sources of the value a published batch-1 time of a deployment without speculation implies
#: (``specgauge validate``: ``folds.fixed_cost_estimates``; docs/validation.md, "Step times at
#: batch 1"), and is refitted without each source in the leave-one-source-out folds.
#:
#: A MoE layer's router, top-k, token alignment and grouped-GEMM launches: Qwen3-30B-A3B on two
#: H100s in SGLang runs a batch-1 step in 4.49 ms (222.47 tok/s, SpecForge issue #339), which the
#: prior without any such cost nearly reaches (4.4 ms): 1.5 µs a layer, the only such source.
MOE_LAYER_OVERHEAD_US = 1.5
#: A layer of DeepSeek-V3-style multi-head latent attention with its block-scaled FP8 projections:
#: the absorbed q/kv projections and their quantisation kernels, RoPE, the split decode kernel and
#: its combine. DeepSeek-V3 at batch 1 on 8 GPUs takes 21-23 ms a token in SGLang on H200, B200 and
#: MI300X (9 ms in TensorRT-LLM's fused min-latency build), where the weights it reads take about
#: 1 ms: the published rows cannot tell MLA's kernels from the FP8 block-quantisation and MoE
#: kernels of the same layer, so the constant carries them all, on MLA targets only.
MLA_LAYER_OVERHEAD_US = 267.8

#: An EAGLE or MTP head's pass at batch 1, in layers of the target's own batch-1 pass (the
#: target's bare pass ÷ its layer count; ``drafts._priced_as_layers``). Published batch-1 runs
#: that give each round's cost against the plain step put it at 2.5-7.2 layers a source: vLLM's
#: EAGLE-3 head on Llama-3.1-8B on an H100 (SpecDecode-Bench's per-round fit, 3.85; vLLM issue
#: #20780's K sweep, 7.2 over K = 2-7, which also carries a per-round cost), SGLang's DeepSeek-V3
#: MTP on H200 (2.5), TensorRT-LLM's DeepSeek-R1 MTP on B200 (blog 2: 6.3; blog 1, layers 1-5:
#: 4.8) and SGLang's Qwen3-30B-A3B EAGLE-3 on 2 x H100 (30.7, a run its source reports as
#: degraded): the median over the six sources (``reports.planning.step_fits``), refitted without
#: each in the leave-one-source-out folds. A head priced from its shape alone costs about one
#: layer's fixed part, and an MTP round on an MLA target came out little more than a plain step.
DRAFT_PASS_LAYERS = 5.5

#: Bytes a weight; 4-bit formats (MXFP4 as AMD's Quark writes it, NVFP4) at half a byte, their
#: block scales (one byte per 16-32 weights) left out.
_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "float16": 2, "bfloat16": 2, "fp8": 1, "fp32": 4, "float32": 4,
                "fp4": 0.5, "mxfp4": 0.5, "nvfp4": 0.5}


@dataclass(frozen=True)
class GPU:
    """One accelerator (dense BF16 peak, HBM bandwidth and capacity, link) and the priors of its step time.

    Capacity is binary (``memory_gib``: what the driver reports, as vLLM counts it);
    ``memory_gb`` (decimal) is still read from older user files. The remaining fields are
    the datasheet prior of the step-time model (see ``cost.PassCost.prior``): the achieved
    fractions of bandwidth and peak, the launch cost per layer of a CUDA-graphed pass and
    of an eager draft model's pass, and the engine's own costs per step and per token.
    """

    name: str
    peak_tflops: float
    bandwidth_tb_s: float
    fp8_tflops: float | None = None     # dense FP8 peak, for FP8 weights; None: the BF16 peak
    memory_gib: float | None = None
    memory_gb: float | None = None
    link_gb_s: float = 900.0
    efficiency: float = 0.9             # fraction of HBM bandwidth while streaming weights
    kv_efficiency: float = 1.0          # ... while reading the KV cache
    compute_efficiency: float | None = 0.75  # MFU of the batched-token GEMMs; None: same as efficiency
    layer_overhead_us: float = 25.0     # per layer of a CUDA-graphed forward pass
    draft_layer_overhead_us: float = 65.0  # per layer of a separate draft model's pass (eager proposer)
    draft_pass_layers: float = DRAFT_PASS_LAYERS  # an EAGLE/MTP head's batch-1 pass, in target layers (see the constant)
    draft_pass_overhead_ms: float = 0.0    # a head pass's own work beyond draft_pass_layers (a user's measurement)
    step_overhead_ms: float = 1.21      # engine per step, with or without speculation (scheduler, input prep)
    spec_overhead_ms: float = 0.0       # extra per speculative step beyond the proposer's own cost
    sample_us_per_token: float = 1.0    # sampling / verification per batched token
    allreduce_latency_us: float = 10.0
    non_torch_gib: float = 1.0          # CUDA context, NCCL and cuBLAS workspaces, CUDA graphs
    knee: float = KNEE                  # sharpness of the pass's memory-to-compute knee (cost.blend)
    moe_knee: float = 1.0               # ... of a MoE target's pass: its per-token GEMM time adds to the expert reads
    moe_token_factor: float = 6.2       # a MoE pass's per-token cost over the dense prior's (small grouped GEMMs)
    moe_layer_overhead_us: float = MOE_LAYER_OVERHEAD_US  # fixed kernels a MoE layer adds to a pass (router, top-k, grouped GEMMs)
    mla_layer_overhead_us: float = MLA_LAYER_OVERHEAD_US  # fixed kernels an MLA layer adds to a pass (see the constant)
    source: str = "datasheet prior"

    def __post_init__(self) -> None:
        if (self.memory_gib is None) == (self.memory_gb is None):
            raise ConfigError(f"GPU profile {self.name!r}: give memory_gib (binary, as the driver reports) "
                              "or memory_gb (decimal), exactly one")
        for name in ("peak_tflops", "bandwidth_tb_s", "link_gb_s", "memory_gib" if self.memory_gib is not None else "memory_gb"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ConfigError(f"GPU profile {self.name!r}: {name} must be > 0, got {value!r}")
        for name in ("efficiency", "kv_efficiency", "compute_efficiency"):
            value = getattr(self, name)
            if value is not None and not 0 < value <= 1:
                raise ConfigError(f"GPU profile {self.name!r}: {name} must be in (0, 1], got {value!r}")
        for name in ("layer_overhead_us", "draft_layer_overhead_us", "draft_pass_layers", "draft_pass_overhead_ms",
                     "step_overhead_ms", "spec_overhead_ms",
                     "sample_us_per_token", "allreduce_latency_us", "non_torch_gib", "moe_layer_overhead_us",
                     "mla_layer_overhead_us"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"GPU profile {self.name!r}: {name} must be >= 0")
        _check_knee(f"GPU profile {self.name!r}", self.knee)
        _check_knee(f"GPU profile {self.name!r} (moe_knee)", self.moe_knee)
        if not (isinstance(self.moe_token_factor, (int, float)) and math.isfinite(self.moe_token_factor)
                and self.moe_token_factor >= 1):
            raise ConfigError(f"GPU profile {self.name!r}: moe_token_factor must be a number >= 1, "
                              f"got {self.moe_token_factor!r}")

    @property
    def mfu(self) -> float:
        """Achieved fraction of peak FLOP/s in a compute-bound pass."""
        return self.efficiency if self.compute_efficiency is None else self.compute_efficiency

    @property
    def peak_flops(self) -> float:
        return self.peak_tflops * 1e12

    def peak_flops_for(self, dtype_bytes: int) -> float:
        """Dense peak for GEMMs on weights of ``dtype_bytes``: FP8's for FP8 and 4-bit weights where the GPU
        has it (no FP4 peak is profiled: a 4-bit GEMM is priced at the FP8 rate), else BF16's."""
        return self.fp8_tflops * 1e12 if dtype_bytes <= 1 and self.fp8_tflops else self.peak_flops

    @property
    def bandwidth(self) -> float:
        """Bytes per second (datasheets quote decimal TB/s)."""
        return self.bandwidth_tb_s * 1e12

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * GIB if self.memory_gib is not None else self.memory_gb * 1e9

    @property
    def link_bandwidth(self) -> float:
        """One direction of the GPU-to-GPU link, bytes per second (datasheets quote both ways)."""
        return self.link_gb_s * 1e9 / 2


@dataclass(frozen=True)
class StepFit:
    """Fitted step-time coefficients of one model on one GPU at one TP:
    ``c_fixed + blend(c_weight, c_token·tokens; knee) + c_kv·kv``.

    ``knee`` 1 with ``c_weight`` 0 is the additive form SpecDecode-Bench publishes.

    ``includes_engine``: the fit's per-token cost already holds sampling and verification,
    so the per-token engine overhead is not added again. ``c_pass_ms``: a per-round fit's
    cost per draft pass (a round of K passes costs ``c_fixed + K·c_pass + ...``), so that a
    fit measured at one draft length prices another. ``step_overhead_ms`` /
    ``spec_overhead_ms``: the engine's cost per step and extra per speculative step that
    go with this fit (None: the GPU profile's). ``per_round``:
    a draft's fit of a whole proposal (γ tokens per sequence), not of one draft pass.
    """

    name: str
    c_fixed_ms: float
    c_token_us: float
    c_kv_ns: float = 0.0
    c_weight_ms: float = 0.0         # weight streaming, flat until the GEMMs outgrow it (see cost.blend)
    knee: float = 1.0
    c_attn_ns: float | None = None   # attention arithmetic per (query x context) token; None: the datasheet prior
    c_pass_ms: float = 0.0           # a per-round fit's cost per draft pass
    includes_engine: bool = True
    per_round: bool = False
    step_overhead_ms: float | None = None
    spec_overhead_ms: float | None = None
    source: str = "unstated"

    def __post_init__(self) -> None:
        for name in ("c_fixed_ms", "c_token_us", "c_kv_ns", "c_weight_ms", "c_pass_ms"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"step fit {self.name!r}: {name} must be a number >= 0, got {value!r}")
        _check_knee(f"step fit {self.name!r}", self.knee)


def step_key(model: str, gpu: str, tp: int) -> str:
    """Name of a step fit: ``MODEL@GPU@tpN`` (drafts: ``eagle:TARGET@GPU@tpN`` and the like)."""
    return f"{model}@{gpu}@tp{tp}".lower()


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer as its HF config.json describes it: dense (SwiGLU MLP, GQA),
    mixture-of-experts (``experts`` > 0) and/or multi-head latent attention (``kv_lora_rank`` > 0).

    MoE fields: ``experts`` routed experts of ``moe_intermediate`` each, ``experts_per_token``
    chosen per token, ``shared_experts`` always on, the first ``dense_layers`` layers dense
    (DeepSeek's ``first_k_dense_replace``). MLA fields: ``q_lora_rank`` (0: a plain q
    projection), ``kv_lora_rank`` and ``qk_rope_head_dim`` (the cached latent), with
    ``head_dim`` the no-RoPE query/key width and ``v_head_dim`` the value width.
    ``kv_dtype``: the KV cache's dtype when it differs from the weights' (FP8 weights, BF16 KV).
    """

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool = False
    qk_norm: bool = False
    dtype: str = "bf16"
    kv_dtype: str | None = None
    max_position: int = 131072
    experts: int = 0
    experts_per_token: int = 0
    moe_intermediate: int = 0
    shared_experts: int = 0
    dense_layers: int = 0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    mtp_layers: int = 0
    measured_experts: tuple | None = None   # [[tokens, distinct experts per MoE layer], ...] measured; None: random routing
    expert_affinity: float = EXPERT_AFFINITY  # new experts each further consecutive token of a sequence brings
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "max_position"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
                raise ConfigError(f"model profile {self.name!r}: {name} must be a positive integer, got {value!r}")
        for name in ("experts", "experts_per_token", "moe_intermediate", "shared_experts", "dense_layers",
                     "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "v_head_dim", "mtp_layers"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
                raise ConfigError(f"model profile {self.name!r}: {name} must be an integer >= 0, got {value!r}")
        for name in ("dtype", "kv_dtype"):
            value = getattr(self, name)
            if value is not None and value not in _DTYPE_BYTES:
                raise ConfigError(f"model profile {self.name!r}: unknown {name} {value!r}; valid: {', '.join(_DTYPE_BYTES)}")
        if self.experts and not (0 < self.experts_per_token <= self.experts and self.moe_intermediate > 0):
            raise ConfigError(f"model profile {self.name!r}: a MoE model needs 0 < experts_per_token <= experts "
                              f"and moe_intermediate > 0")
        if not (isinstance(self.expert_affinity, (int, float)) and 0 <= self.expert_affinity <= 1):
            raise ConfigError(f"model profile {self.name!r}: expert_affinity must be in [0, 1], got {self.expert_affinity!r}")
        if self.dense_layers > self.layers:
            raise ConfigError(f"model profile {self.name!r}: dense_layers {self.dense_layers} > layers {self.layers}")
        if self.measured_experts is not None:
            object.__setattr__(self, "measured_experts", _routing_table(self.name, self.measured_experts,
                                                                        self.experts, self.experts_per_token))

    @property
    def dtype_bytes(self) -> float:
        return _DTYPE_BYTES[self.dtype]

    @property
    def kv_dtype_bytes(self) -> int:
        return _DTYPE_BYTES[self.kv_dtype or self.dtype]

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def attention_params(self) -> int:
        """One layer's attention projections."""
        h, nh, nkv, hd = self.hidden, self.heads, self.kv_heads, self.head_dim
        if not self.is_mla:
            return h * nh * hd + 2 * h * nkv * hd + nh * hd * h
        qk = hd + self.qk_rope_head_dim
        v = self.v_head_dim or hd
        q = h * self.q_lora_rank + self.q_lora_rank * nh * qk if self.q_lora_rank else h * nh * qk
        kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * nh * (hd + v)
        return q + kv + nh * v * h

    @property
    def expert_params(self) -> int:
        """One routed expert of one layer (SwiGLU: gate, up, down)."""
        return 3 * self.hidden * self.moe_intermediate

    def _mlp_params(self, moe: bool, active: bool) -> int:
        if not moe:
            return 3 * self.hidden * self.intermediate
        routed = self.experts_per_token if active else self.experts
        return (routed + self.shared_experts) * self.expert_params + self.hidden * self.experts   # + the router

    @property
    def layer_linear_params(self) -> int:
        """A layer's resident matrices (a MoE layer: all its experts)."""
        return self.attention_params + self._mlp_params(self.is_moe, active=False)

    @property
    def layer_active_params(self) -> int:
        """A layer's matrices that one token multiplies (a MoE layer: its chosen and shared experts)."""
        return self.attention_params + self._mlp_params(self.is_moe, active=True)

    def _sum_layers(self, active: bool) -> int:
        dense = self.attention_params + self._mlp_params(False, active)
        moe = self.attention_params + self._mlp_params(True, active)
        return (self.layers - self.moe_layers) * dense + self.moe_layers * moe

    @property
    def linear_params(self) -> int:
        """Parameters multiplied per token: every layer's active matrices and the LM head."""
        return self._sum_layers(active=True) + self.vocab * self.hidden

    @property
    def active_params(self) -> int:
        """Parameters one token uses, embedding included (DeepSeek-V3: 37B of 671B)."""
        return self.linear_params + self.vocab * self.hidden + self._norm_params

    @property
    def _norm_params(self) -> int:
        norms = 2 * self.hidden + (2 * self.head_dim if self.qk_norm else 0)
        if self.is_mla:
            norms += self.q_lora_rank + self.kv_lora_rank
        return self.layers * norms + self.hidden

    @property
    def dense_weight_params(self) -> int:
        """Matrices every pass streams whatever its tokens: all but the routed experts, and the LM head."""
        shared = self.moe_layers * (self.shared_experts * self.expert_params + self.hidden * self.experts)
        return (self.layers * self.attention_params + (self.layers - self.moe_layers) * 3 * self.hidden * self.intermediate
                + shared + self.vocab * self.hidden)

    @property
    def params(self) -> int:
        """Resident parameters (a tied LM head shares the embedding matrix)."""
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self._sum_layers(active=False) + self._norm_params + embeddings

    @property
    def total_params(self) -> int:
        return self.params

    @property
    def weight_bytes(self) -> int:
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """Cached bytes per token over all layers: K and V per KV head, or MLA's one latent."""
        if self.is_mla:
            return self.layers * (self.kv_lora_rank + self.qk_rope_head_dim) * self.kv_dtype_bytes
        return 2 * self.layers * self.kv_heads * self.head_dim * self.kv_dtype_bytes

    def kv_bytes_per_gpu(self, tp: int) -> float:
        """Per-GPU KV bytes per token: TP splits KV heads; MLA's latent is replicated on every rank."""
        return float(self.kv_bytes_per_token) if self.is_mla else self.kv_bytes_per_token / tp

    def distinct_experts(self, tokens):
        """Routed experts a pass over ``tokens`` tokens touches per MoE layer: the measured table
        (``measured_experts``, interpolated in log tokens) where the profile gives one, else the
        expectation under random routing, E · (1 − (1 − k/E)^tokens). Balanced routers are close
        to random; routers whose neighbouring tokens share experts touch fewer."""
        if not self.is_moe:
            return 0.0
        return distinct_experts(tokens, self.experts, self.experts_per_token, self.measured_experts)


def distinct_experts(tokens, experts: int, per_token: int, measured: tuple | None = None):
    """Distinct routed experts touched by ``tokens`` tokens (see ``Model.distinct_experts``)."""
    if measured is not None:
        t, e = np.array(measured, dtype=float).T
        return np.interp(np.log(np.maximum(tokens, 1.0)), np.log(t), e)
    return experts * (1.0 - np.power(1.0 - per_token / experts, tokens))


def _routing_table(name: str, table: object, experts: int, per_token: int) -> tuple:
    """A measured distinct-experts curve: [[tokens, experts], ...], tokens increasing from 1, experts
    non-decreasing between experts_per_token and experts."""
    try:
        pairs = tuple((float(t), float(e)) for t, e in table)  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise ConfigError(f"model profile {name!r}: measured_experts must be a list of [tokens, experts] pairs, "
                          f"got {table!r}") from None
    t = [p[0] for p in pairs]
    e = [p[1] for p in pairs]
    if not experts or not pairs or t[0] < 1 or any(b <= a for a, b in zip(t, t[1:])) \
            or any(b < a for a, b in zip(e, e[1:])) or e[0] < per_token or e[-1] > experts:
        raise ConfigError(f"model profile {name!r}: measured_experts needs experts > 0 and pairs with tokens "
                          f"increasing from >= 1 and experts non-decreasing within [{per_token}, {experts}]")
    return pairs


_KINDS = {"gpus": ("GPU", GPU), "models": ("model", Model), "steps": ("step fit", StepFit)}


def check_profile_tables(data: object, source: str) -> dict[str, dict[str, dict[str, Any]]]:
    """The shape of a profile file: only ``gpus``, ``models`` and ``steps`` tables, each a table of
    named tables. Field values are checked by the profile classes themselves."""
    if not isinstance(data, dict):
        raise InputFileError(f"profiles file {source} must hold [gpus.NAME], [models.NAME] and [steps.NAME] "
                             f"tables, not a {type(data).__name__}")
    unknown = sorted(set(data) - set(_KINDS))
    if unknown:
        raise InputFileError(f"profiles file {source}: unknown table(s) {', '.join(map(repr, unknown))}; "
                             "valid: gpus, models, steps")
    for kind, tables in data.items():
        if not isinstance(tables, dict):
            raise InputFileError(f"profiles file {source}: {kind!r} must be a table of named tables "
                                 f"([{kind}.NAME]), got {type(tables).__name__} {tables!r}"[:200])
        for name, entry in tables.items():
            if not isinstance(entry, dict):
                raise InputFileError(f"profiles file {source}: [{kind}.{name}] must be a table of fields, "
                                     f"got {type(entry).__name__} {entry!r}"[:200])
    return data  # type: ignore[return-value]


def _read_table_file(path: str | Path) -> dict[str, Any]:
    from specgauge import inputs

    path = Path(path)
    text = inputs.read_input_text(path, "profiles file")  # a regular file of a sane size, UTF-8: else one line, exit 2
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
    except RecursionError:
        raise InputFileError(f"profiles file {str(path)!r} is nested too deeply") from None
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        kind = "JSON" if path.suffix.lower() == ".json" else "TOML"
        raise InputFileError(f"profiles file {str(path)!r} is not valid {kind}: {exc}") from None
    return check_profile_tables(data, repr(str(path)))


def profile_paths(profiles: str | None) -> list[str]:
    """The files of a ``--profiles`` value: one path or several, comma-separated."""
    return [] if profiles is None else [p.strip() for p in str(profiles).split(",") if p.strip()]


@functools.lru_cache(maxsize=1)
def _bundled() -> dict[str, Any]:
    root = importlib.resources.files("specgauge.fixtures") / "hardware"
    gpus = tomllib.loads((root / "gpus.toml").read_text())["gpus"]
    models = tomllib.loads((root / "models.toml").read_text())["models"]
    steps = tomllib.loads((root / "steps.toml").read_text())["steps"]
    return {"gpus": gpus, "models": models, "steps": steps}


def _build(kind: str, cls: type, name: str, entry: dict[str, Any], source: str) -> Any:
    allowed = {f.name for f in fields(cls)} - {"name"}
    entry = {k: v for k, v in entry.items() if k != "aliases"}
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise InputFileError(f"{kind} profile {name!r} in {source}: unknown field(s) {', '.join(unknown)}; "
                             f"valid: {', '.join(sorted(allowed))}")
    required = [f.name for f in fields(cls) if f.name != "name" and f.default is dataclasses.MISSING]
    missing = [f for f in required if f not in entry]
    if missing:
        raise InputFileError(f"{kind} profile {name!r} in {source}: missing field(s) {', '.join(missing)} "
                             f"(a new {kind} needs {', '.join(required)}; a known one's name changes only the "
                             "fields given)")
    try:
        return cls(name=name, **entry)
    except TypeError as exc:
        raise InputFileError(f"{kind} profile {name!r} in {source}: {exc}") from None


@functools.lru_cache(maxsize=16)
def _catalogue(profiles: str | None) -> tuple[dict[str, GPU], dict[str, Model], dict[str, str], dict[str, StepFit]]:
    """Name -> profile maps (plus aliases -> name): bundled first, then each user file in turn,
    a later table merged over an earlier one of the same name (or alias) field by field."""
    sources = [("bundled profiles", _bundled())]
    sources += [(repr(path), _read_table_file(path)) for path in profile_paths(profiles)]
    raw: dict[str, dict[str, tuple[dict[str, Any], str]]] = {kind: {} for kind in _KINDS}
    aliases: dict[tuple[str, str], str] = {}
    for source, data in sources:
        for kind in _KINDS:
            for name, entry in data.get(kind, {}).items():
                key = str(name).lower()
                if kind == "gpus":
                    key = aliases.get(("gpu", key), key)
                    names = entry.get("aliases", [])
                    if not isinstance(names, list) or not all(isinstance(a, str) for a in names):
                        raise InputFileError(f"GPU profile {name!r} in {source}: aliases must be a list of names")
                    for alias in names:
                        aliases[("gpu", alias.lower())] = key
                old = raw[kind].get(key, ({}, source))[0]
                raw[kind][key] = ({**old, **entry}, source)
    built = {kind: {key: _build(_KINDS[kind][0], _KINDS[kind][1], key, dict(entry), source)
                    for key, (entry, source) in raw[kind].items()} for kind in _KINDS}
    return built["gpus"], built["models"], aliases, built["steps"]  # type: ignore[return-value]


def known_gpus(profiles: str | None = None) -> list[str]:
    """Sorted names of the GPUs that ``load_gpu`` accepts."""
    return sorted(_catalogue(profiles)[0])


def known_models(profiles: str | None = None) -> list[str]:
    """Sorted names of the models that ``load_model`` accepts."""
    return sorted(_catalogue(profiles)[1])


def load_gpu(name: str, profiles: str | None = None) -> GPU:
    """The GPU profile called ``name`` (case-insensitive; common aliases such as ``h100`` work)."""
    gpus, _, aliases, _ = _catalogue(profiles)
    key = str(name).lower()
    key = aliases.get(("gpu", key), key)  # type: ignore[call-overload]
    if key not in gpus:
        raise ConfigError(f"unknown GPU {name!r}; known: {', '.join(sorted(gpus))}")
    return gpus[key]


def load_model(name: str, profiles: str | None = None) -> Model:
    """The model profile called ``name`` (case-insensitive)."""
    models = _catalogue(profiles)[1]
    key = str(name).lower()
    if key not in models:
        raise ConfigError(f"unknown model {name!r}; known: {', '.join(sorted(models))}")
    return models[key]


def load_step_fit(model: str, gpu: str, tp: int, profiles: str | None = None) -> StepFit | None:
    """The fitted coefficients for ``model`` on ``gpu`` at ``tp``, or None (then the datasheet prior applies)."""
    return _catalogue(profiles)[3].get(step_key(model, gpu, tp))
