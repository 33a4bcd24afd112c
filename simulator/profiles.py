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

_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "float16": 2, "bfloat16": 2, "fp8": 1, "fp32": 4, "float32": 4}


@dataclass(frozen=True)
class GPU:
    """One accelerator: dense BF16 peak, HBM bandwidth and capacity, link bandwidth."""

    name: str
    peak_tflops: float
    bandwidth_tb_s: float
    memory_gb: float
    link_gb_s: float = 900.0
    efficiency: float = 0.7
    step_overhead_ms: float = 0.4
    allreduce_latency_us: float = 10.0
    compute_efficiency: float | None = None  # MFU of a serving step's GEMMs; None: same as efficiency

    def __post_init__(self) -> None:
        for name in ("peak_tflops", "bandwidth_tb_s", "memory_gb", "link_gb_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"GPU profile {self.name!r}: {name} must be > 0, got {value!r}")
        for name in ("efficiency", "compute_efficiency"):
            value = getattr(self, name)
            if value is not None and not 0 < value <= 1:
                raise ConfigError(f"GPU profile {self.name!r}: {name} must be in (0, 1], got {value!r}")
        if self.step_overhead_ms < 0 or self.allreduce_latency_us < 0:
            raise ConfigError(f"GPU profile {self.name!r}: overheads must be >= 0")

    @property
    def mfu(self) -> float:
        """Achieved fraction of peak FLOP/s in a compute-bound pass."""
        return self.efficiency if self.compute_efficiency is None else self.compute_efficiency

    @property
    def peak_flops(self) -> float:
        return self.peak_tflops * 1e12

    @property
    def bandwidth(self) -> float:
        """Bytes per second."""
        return self.bandwidth_tb_s * 1e12

    @property
    def memory_bytes(self) -> float:
        return self.memory_gb * 1e9

    @property
    def link_bandwidth(self) -> float:
        """One direction of the GPU-to-GPU link, bytes per second (datasheets quote both ways)."""
        return self.link_gb_s * 1e9 / 2


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
    if not isinstance(data, dict) or not set(data) <= {"gpus", "models"}:
        raise ConfigError(f"profiles file {str(path)!r} must hold only [gpus.NAME] and [models.NAME] tables")
    return data


@functools.lru_cache(maxsize=1)
def _bundled() -> dict[str, Any]:
    root = importlib.resources.files("specgauge.fixtures") / "hardware"
    gpus = tomllib.loads((root / "gpus.toml").read_text())["gpus"]
    models = tomllib.loads((root / "models.toml").read_text())["models"]
    return {"gpus": gpus, "models": models}


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
def _catalogue(profiles: str | None) -> tuple[dict[str, GPU], dict[str, Model], dict[str, str]]:
    """Name -> profile maps (plus aliases -> name), bundled first, then the user's file."""
    sources = [("bundled profiles", _bundled())]
    if profiles is not None:
        sources.append((repr(str(profiles)), _read_table_file(profiles)))
    gpus: dict[str, GPU] = {}
    models: dict[str, Model] = {}
    aliases: dict[str, str] = {}
    for source, data in sources:
        for name, entry in data.get("gpus", {}).items():
            key = name.lower()
            gpus[key] = _build("GPU", GPU, key, dict(entry), source)
            for alias in entry.get("aliases", []):
                aliases[("gpu", alias.lower())] = key  # type: ignore[index]
        for name, entry in data.get("models", {}).items():
            key = name.lower()
            models[key] = _build("model", Model, key, dict(entry), source)
    return gpus, models, aliases


def known_gpus(profiles: str | None = None) -> list[str]:
    """Sorted names of the GPUs that ``load_gpu`` accepts."""
    return sorted(_catalogue(profiles)[0])


def known_models(profiles: str | None = None) -> list[str]:
    """Sorted names of the models that ``load_model`` accepts."""
    return sorted(_catalogue(profiles)[1])


def load_gpu(name: str, profiles: str | None = None) -> GPU:
    """The GPU profile called ``name`` (case-insensitive; common aliases such as ``h100`` work)."""
    gpus, _, aliases = _catalogue(profiles)
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
