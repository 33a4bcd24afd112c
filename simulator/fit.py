"""Fit ``c_fixed + c_token · batched_tokens + c_kv · kv_tokens`` to measured step times.

Every measurement becomes one linear equation in the three coefficients: a timed step
directly; a ``vllm bench latency`` run as the sum of its prefill and decode steps,
divided by its step count; a ``vllm bench serve`` run without speculation as its mean
TPOT at its concurrency. The fit is non-negative least squares on relative errors (a
2 ms step and a 40 ms step count alike), and it reports what it cannot hide: each point's
relative error, the worst case, and each coefficient's standard error from the residuals.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import nnls

from specgauge.errors import ConfigError


@dataclass(frozen=True)
class Equation:
    """One measurement: ``design · (c_fixed, c_token, c_kv) = seconds``, with where it came from."""

    design: tuple[float, float, float]
    seconds: float
    label: str


def step_equation(batched_tokens: float, kv_tokens: float, seconds: float, label: str) -> Equation:
    """A timed forward pass."""
    return Equation((1.0, float(batched_tokens), float(kv_tokens)), float(seconds), label)


def latency_equation(batch: int, input_len: int, output_len: int, seconds: float, label: str) -> Equation:
    """A ``vllm bench latency`` run: one prefill of ``batch x input_len`` tokens, then ``output_len - 1`` decode steps.

    Decode step k (1-based) reads ``batch x (input_len + k - 1)`` cached tokens (KV reads
    count the context that exists before the pass). The equation is divided by the number
    of passes so that it weighs like one step.
    """
    steps = max(output_len, 1)
    k = np.arange(1, output_len)
    tokens = batch * input_len + batch * (output_len - 1)
    kv = batch * float((input_len + k - 1).sum())
    return Equation((1.0, tokens / steps, kv / steps), seconds / steps, label)


def tpot_equation(concurrency: float, input_len: float, output_len: float, tpot_s: float, label: str) -> Equation:
    """A serving run's mean TPOT as one decode step at its concurrency and mid-output context."""
    return Equation((1.0, concurrency, concurrency * (input_len + output_len / 2)), tpot_s, label)


@dataclass(frozen=True)
class StepModelFit:
    """Fitted coefficients (seconds), their standard errors and each point's relative error."""

    c_fixed: float
    c_token: float
    c_kv: float
    se: tuple[float, float, float]
    labels: tuple[str, ...]
    measured: np.ndarray = field(repr=False)
    fitted: np.ndarray = field(repr=False)

    @property
    def relative_error(self) -> np.ndarray:
        """(fitted − measured) / measured per point."""
        return (self.fitted - self.measured) / self.measured

    @property
    def worst_error(self) -> float:
        return float(np.abs(self.relative_error).max())

    @property
    def rms_error(self) -> float:
        return float(np.sqrt(np.mean(self.relative_error ** 2)))

    def predict(self, batched_tokens, kv_tokens):
        return self.c_fixed + self.c_token * np.asarray(batched_tokens) + self.c_kv * np.asarray(kv_tokens)


def fit_step_model(equations: list[Equation]) -> StepModelFit:
    """Non-negative least squares on relative errors; refuses data that cannot pin three coefficients."""
    if len(equations) < 3:
        raise ConfigError(f"calibration needs at least 3 measurements for 3 coefficients, got {len(equations)}")
    design = np.array([e.design for e in equations], dtype=float)
    seconds = np.array([e.seconds for e in equations], dtype=float)
    if np.any(~np.isfinite(seconds)) or np.any(seconds <= 0):
        raise ConfigError("every measured time must be a finite number > 0")
    scale = design.max(axis=0)
    scale[scale == 0] = 1.0
    weighted = design / seconds[:, None] / scale
    if np.linalg.matrix_rank(weighted) < 3:
        raise ConfigError("the measurements cannot separate the three coefficients: vary the batch size and the "
                          "context length (at least three distinct points)")
    coef, _ = nnls(weighted, np.ones(len(seconds)))
    coef = coef / scale
    fitted = design @ coef
    residual = fitted / seconds - 1.0
    dof = max(len(seconds) - 3, 1)
    sigma2 = float(residual @ residual) / dof
    cov = sigma2 * np.linalg.pinv(weighted.T @ weighted) / np.outer(scale, scale)
    se = tuple(float(np.sqrt(max(v, 0.0))) for v in np.diag(cov))
    return StepModelFit(c_fixed=float(coef[0]), c_token=float(coef[1]), c_kv=float(coef[2]), se=se,  # type: ignore[arg-type]
                        labels=tuple(e.label for e in equations), measured=seconds, fitted=fitted)
