"""SimulationConfig: one serving configuration, validated at construction, never mutated."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from specgauge.simulator.acceptance import AcceptanceModel, IIDAcceptance
from specgauge.errors import ConfigError
from specgauge.simulator.policies import parse_policy
from specgauge.simulator.workload import ARRIVALS, LENGTH_DISTRIBUTIONS


def _positive_int(name: str, value: object, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _positive_float(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")


@dataclass(frozen=True)
class SimulationConfig:
    """Everything one simulated run depends on; ``seed`` is the only source of randomness."""

    gpu: str = "h200"
    target: str = "qwen3-32b"
    draft: str | None = "qwen3-0.6b"
    tp: int = 1
    gamma: int = 5
    acceptance: AcceptanceModel = field(default=IIDAcceptance(0.8))
    draft_cost_ratio: float | None = None
    batch_size: int = 64
    qps: float | None = None
    requests: int = 1000
    prompt_len: int = 512
    output_len: int = 256
    length_dist: str = "fixed"
    policy: str = "fixed"
    arrival: str = "poisson"
    arrival_cv: float = 1.0
    trace: str | None = None
    seed: int = 0
    profiles: str | None = None
    max_batched_tokens: int = 8192
    block_size: int = 16
    gpu_memory_utilization: float = 0.9

    def __post_init__(self) -> None:
        _positive_int("tp", self.tp)
        _positive_int("gamma", self.gamma, minimum=0)
        _positive_int("batch_size", self.batch_size)
        _positive_int("requests", self.requests)
        _positive_int("prompt_len", self.prompt_len)
        _positive_int("output_len", self.output_len)
        _positive_int("max_batched_tokens", self.max_batched_tokens)
        _positive_int("block_size", self.block_size)
        _positive_int("seed", self.seed, minimum=0)
        if self.qps is not None:
            _positive_float("qps", self.qps)
        _positive_float("arrival_cv", self.arrival_cv)
        if self.draft_cost_ratio is not None and not (
                isinstance(self.draft_cost_ratio, (int, float)) and math.isfinite(self.draft_cost_ratio) and self.draft_cost_ratio >= 0):
            raise ConfigError(f"draft_cost_ratio must be a finite number >= 0, got {self.draft_cost_ratio!r}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization!r}")
        if not isinstance(self.acceptance, AcceptanceModel):
            raise ConfigError(f"acceptance must be an acceptance model (IIDAcceptance, ...), got {self.acceptance!r}")
        if self.arrival not in ARRIVALS:
            raise ConfigError(f"unknown arrival process {self.arrival!r}; valid: {', '.join(ARRIVALS)}")
        if self.length_dist not in LENGTH_DISTRIBUTIONS:
            raise ConfigError(f"unknown length distribution {self.length_dist!r}; valid: {', '.join(LENGTH_DISTRIBUTIONS)}")
        if self.arrival == "trace" and self.trace is None:
            raise ConfigError("arrival 'trace' needs a workload trace file (trace=PATH)")
        if isinstance(self.draft, str) and self.draft.lower() in ("", "none"):
            object.__setattr__(self, "draft", None)
        parse_policy(self.policy, self.gamma)  # refuse a bad policy string now

    @property
    def speculative(self) -> bool:
        return parse_policy(self.policy, self.gamma).max_gamma > 0

    def columns(self) -> dict[str, object]:
        """The configuration's own CSV columns: flat, stable names, same order every time."""
        return {
            "gpu": self.gpu,
            "target": self.target,
            "draft": self.draft if self.draft is not None else "none",
            "tp": self.tp,
            "gamma": self.gamma,
            "policy": self.policy,
            "acceptance": self.acceptance.label(),
            "alpha": self.acceptance.mean_alpha,
            "draft_cost_ratio": self.draft_cost_ratio,
            "batch_size": self.batch_size,
            "qps": self.qps,
            "arrival": "saturated" if self.qps is None and self.arrival != "trace" else self.arrival,
            "arrival_cv": self.arrival_cv,
            "requests": self.requests,
            "prompt_len": self.prompt_len,
            "output_len": self.output_len,
            "length_dist": self.length_dist,
            "max_batched_tokens": self.max_batched_tokens,
            "block_size": self.block_size,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "seed": self.seed,
        }
