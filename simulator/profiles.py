"""GPU and model profiles: data in ``fixtures/hardware``, extendable from a user file.

Profiles are frozen dataclasses so that a cost or memory model built from them cannot
drift during a run. A user file (TOML or JSON) has the same ``[gpus.NAME]`` and
``[models.NAME]`` tables as the bundled ones and may add or replace entries.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import math
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from specgauge.errors import ConfigError

GIB = float(2 ** 30)
_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "float16": 2, "bfloat16": 2, "fp8": 1, "fp32": 4, "float32": 4}


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
    memory_gib: float | None = None
    memory_gb: float | None = None
    link_gb_s: float = 900.0
    efficiency: float = 0.9             # fraction of HBM bandwidth while streaming weights
    kv_efficiency: float = 1.0          # ... while reading the KV cache
    compute_efficiency: float | None = 0.75  # MFU of the batched-token GEMMs; None: same as efficiency
    layer_overhead_us: float = 25.0     # per layer of a CUDA-graphed forward pass
    draft_layer_overhead_us: float = 65.0  # per layer of a separate draft model's pass (eager proposer)
    step_overhead_ms: float = 1.21      # engine per step, with or without speculation (scheduler, input prep)
    spec_overhead_ms: float = 0.0       # extra per speculative step beyond the proposer's own cost
    sample_us_per_token: float = 1.0    # sampling / verification per batched token
    allreduce_latency_us: float = 10.0
    non_torch_gib: float = 1.0          # CUDA context, NCCL and cuBLAS workspaces, CUDA graphs
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
        for name in ("layer_overhead_us", "draft_layer_overhead_us", "step_overhead_ms", "spec_overhead_ms",
                     "sample_us_per_token", "allreduce_latency_us", "non_torch_gib"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"GPU profile {self.name!r}: {name} must be >= 0")

    @property
    def mfu(self) -> float:
        """Achieved fraction of peak FLOP/s in a compute-bound pass."""
        return self.efficiency if self.compute_efficiency is None else self.compute_efficiency

    @property
    def peak_flops(self) -> float:
        return self.peak_tflops * 1e12

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
    """Fitted step-time coefficients of one model on one GPU at one TP: ``c_fixed + c_token·tokens + c_kv·kv``.

    ``includes_engine``: the fit's per-token cost already holds sampling and verification,
    so the per-token engine overhead is not added again. ``step_overhead_ms`` /
    ``spec_overhead_ms``: the engine's cost per step and extra per speculative step that
    go with this fit (None: the GPU profile's). ``per_round``:
    a draft's fit of a whole proposal (γ tokens per sequence), not of one draft pass.
    """

    name: str
    c_fixed_ms: float
    c_token_us: float
    c_kv_ns: float = 0.0
    c_attn_ns: float | None = None   # attention arithmetic per (query x context) token; None: the datasheet prior
    includes_engine: bool = True
    per_round: bool = False
    step_overhead_ms: float | None = None
    spec_overhead_ms: float | None = None
    source: str = "unstated"

    def __post_init__(self) -> None:
        for name in ("c_fixed_ms", "c_token_us", "c_kv_ns"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"step fit {self.name!r}: {name} must be a number >= 0, got {value!r}")


def step_key(model: str, gpu: str, tp: int) -> str:
    """Name of a step fit: ``MODEL@GPU@tpN`` (drafts: ``eagle:TARGET@GPU@tpN`` and the like)."""
    return f"{model}@{gpu}@tp{tp}".lower()


@dataclass(frozen=True)
class Model:
    """A dense decoder-only transformer (SwiGLU MLP, GQA), as its HF config describes it."""

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
    max_position: int = 131072

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "max_position"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value > 0):
                raise ConfigError(f"model profile {self.name!r}: {name} must be a positive integer, got {value!r}")
        if self.dtype not in _DTYPE_BYTES:
            raise ConfigError(f"model profile {self.name!r}: unknown dtype {self.dtype!r}; valid: {', '.join(_DTYPE_BYTES)}")

    @property
    def dtype_bytes(self) -> int:
        return _DTYPE_BYTES[self.dtype]

    @property
    def layer_linear_params(self) -> int:
        h, nh, nkv, hd = self.hidden, self.heads, self.kv_heads, self.head_dim
        return h * nh * hd + 2 * h * nkv * hd + nh * hd * h + 3 * h * self.intermediate

    @property
    def linear_params(self) -> int:
        """Parameters multiplied per token: every layer's matrices and the LM head."""
        return self.layers * self.layer_linear_params + self.vocab * self.hidden

    @property
    def params(self) -> int:
        """Resident parameters (a tied LM head shares the embedding matrix)."""
        norms = self.layers * (2 * self.hidden + (2 * self.head_dim if self.qk_norm else 0)) + self.hidden
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * self.layer_linear_params + norms + embeddings

    @property
    def weight_bytes(self) -> int:
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes


def _read_table_file(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read profiles file {str(path)!r}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"profiles file {str(path)!r} is not valid {'JSON' if path.suffix == '.json' else 'TOML'}: {exc}") from None
    if not isinstance(data, dict) or not set(data) <= {"gpus", "models", "steps"}:
        raise ConfigError(f"profiles file {str(path)!r} must hold only [gpus.NAME], [models.NAME] and [steps.NAME] tables")
    return data


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
        raise ConfigError(f"{kind} profile {name!r} in {source}: unknown field(s) {', '.join(unknown)}; valid: {', '.join(sorted(allowed))}")
    try:
        return cls(name=name, **entry)
    except TypeError as exc:
        raise ConfigError(f"{kind} profile {name!r} in {source}: {exc}") from None


@functools.lru_cache(maxsize=16)
def _catalogue(profiles: str | None) -> tuple[dict[str, GPU], dict[str, Model], dict[str, str], dict[str, StepFit]]:
    """Name -> profile maps (plus aliases -> name), bundled first, then the user's file."""
    sources = [("bundled profiles", _bundled())]
    if profiles is not None:
        sources.append((repr(str(profiles)), _read_table_file(profiles)))
    gpus: dict[str, GPU] = {}
    models: dict[str, Model] = {}
    aliases: dict[str, str] = {}
    steps: dict[str, StepFit] = {}
    for source, data in sources:
        for name, entry in data.get("gpus", {}).items():
            key = name.lower()
            gpus[key] = _build("GPU", GPU, key, dict(entry), source)
            for alias in entry.get("aliases", []):
                aliases[("gpu", alias.lower())] = key  # type: ignore[index]
        for name, entry in data.get("models", {}).items():
            key = name.lower()
            models[key] = _build("model", Model, key, dict(entry), source)
        for name, entry in data.get("steps", {}).items():
            key = name.lower()
            steps[key] = _build("step fit", StepFit, key, dict(entry), source)
    return gpus, models, aliases, steps


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
