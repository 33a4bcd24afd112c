"""Fit the step model ``c_fixed + blend(c_weight, c_token·tokens; knee) + c_kv·kv`` to measured steps.

Every measurement becomes one equation: a few passes (weight, batched tokens, KV tokens
read) whose weighted time is one measured number. A timed step is one pass; a ``vllm
bench latency`` run is its prefill plus its decode steps, divided by its step count; a
``vllm bench serve`` run without speculation is its mean TPOT at its concurrency.

Three coefficients are fitted per knee: at knee 1 (the additive form) ``c_fixed`` (weights
and launches together), ``c_token`` and ``c_kv``; at a knee above 1 ``c_weight``, ``c_token``
and ``c_kv``, with the launch cost ``c_fixed`` held at the datasheet prior (a flat pass
cannot tell launches from weights). The knee with the smallest RMS relative error wins.
A coefficient the measurements cannot separate (``vllm bench latency`` at several batch
sizes with the same lengths moves tokens and KV together) is held at the prior, and the
fit says which. Least squares on relative errors (a 2 ms step and a 40 ms step count
alike), non-negative; each coefficient's standard error comes from the residuals.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.optimize import least_squares, nnls

from specgauge.errors import ConfigError
from specgauge.simulator.cost import PassCost

KNEES = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, math.inf)
NAMES = ("c_fixed", "c_weight", "c_token", "c_kv")
UNITS = {"c_fixed": (1e3, "ms"), "c_weight": (1e3, "ms"), "c_token": (1e6, "us"), "c_kv": (1e9, "ns")}


@dataclass(frozen=True)
class Equation:
    """One measurement: ``sum(weight · pass_time(tokens, kv)) = seconds``, with where it came from."""

    passes: tuple[tuple[float, float, float], ...]     # (weight, batched tokens, KV tokens read)
    seconds: float
    label: str

    @property
    def design(self) -> tuple[float, float, float]:
        """The additive form's row: (Σ weight, Σ weight·tokens, Σ weight·kv)."""
        p = np.asarray(self.passes, dtype=float)
        return float(p[:, 0].sum()), float(p[:, 0] @ p[:, 1]), float(p[:, 0] @ p[:, 2])


def step_equation(batched_tokens: float, kv_tokens: float, seconds: float, label: str) -> Equation:
    """A timed forward pass."""
    return Equation(((1.0, float(batched_tokens), float(kv_tokens)),), float(seconds), label)


def latency_equation(batch: int, input_len: int, output_len: int, seconds: float, label: str) -> Equation:
    """A ``vllm bench latency`` run: one prefill of ``batch x input_len`` tokens, then ``output_len - 1`` decode steps.

    Decode step k (1-based) reads ``batch x (input_len + k - 1)`` cached tokens (KV reads
    count the context that exists before the pass): the decode steps are one pass shape
    at their mean KV, since the KV term is linear. Divided by the number of passes so that
    it weighs like one step.
    """
    steps = max(output_len, 1)
    passes = [(1.0 / steps, float(batch * input_len), 0.0)]
    if output_len > 1:
        mean_kv = batch * (input_len + (output_len - 2) / 2)
        passes.append(((output_len - 1) / steps, float(batch), float(mean_kv)))
    return Equation(tuple(passes), seconds / steps, label)


def tpot_equation(concurrency: float, input_len: float, output_len: float, tpot_s: float, label: str) -> Equation:
    """A serving run's mean TPOT as one decode step at its concurrency and mid-output context."""
    return step_equation(concurrency, concurrency * (input_len + output_len / 2), tpot_s, label)


@dataclass(frozen=True)
class StepModelFit:
    """The fitted pass cost, the coefficients' standard errors, what was held at the prior, and each point's error."""

    cost: PassCost
    knee: float
    se: dict[str, float]
    held: tuple[str, ...]
    labels: tuple[str, ...]
    measured: np.ndarray = field(repr=False)
    fitted: np.ndarray = field(repr=False)

    def __getattr__(self, name: str) -> float:
        """``c_fixed``, ``c_weight``, ``c_token``, ``c_kv``: the fitted cost's coefficients (seconds)."""
        if name in NAMES:
            return getattr(self.cost, name)
        raise AttributeError(name)

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
        return self.cost.time(np.asarray(batched_tokens, dtype=float), np.asarray(kv_tokens, dtype=float), 0.0)

    def describe(self) -> str:
        """One line: each coefficient with its standard error, or that it was held at the prior."""
        parts = []
        for name in NAMES:
            if name == "c_weight" and self.knee == 1:
                continue
            scale, unit = UNITS[name]
            value = getattr(self.cost, name) * scale
            if name in self.held:
                parts.append(f"{name} {value:.4g} {unit} (datasheet prior: not separable by these measurements)")
            else:
                parts.append(f"{name} {value:.4g} {unit} (± {self.se.get(name, 0.0) * scale:.2g})")
        return f"knee {self.knee:g}: " + ", ".join(parts)


def _arrays(equations: list[Equation]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    width = max(len(e.passes) for e in equations)
    out = np.zeros((3, len(equations), width))
    for i, e in enumerate(equations):
        out[:, i, :len(e.passes)] = np.asarray(e.passes, dtype=float).T
    return out[0], out[1], out[2]


def _model(cost: PassCost, w, n, kv) -> np.ndarray:
    return (w * (cost.c_fixed + cost.linear(n) + cost.c_kv * kv)).sum(axis=1)


def _free(knee: float) -> tuple[str, str, str]:
    return ("c_fixed" if knee == 1 else "c_weight", "c_token", "c_kv")


def _jacobian(cost: PassCost, names, w, n, kv, seconds) -> np.ndarray:
    """d(relative residual)/d(coefficient), by central differences scaled to each coefficient."""
    cols = []
    for name in names:
        h = max(abs(getattr(cost, name)), 1e-12) * 1e-4
        up = _model(replace(cost, **{name: getattr(cost, name) + h}), w, n, kv)
        down = _model(replace(cost, **{name: max(getattr(cost, name) - h, 0.0)}), w, n, kv)
        cols.append((up - down) / (h + min(h, getattr(cost, name))) / seconds)
    return np.stack(cols, axis=1)


def _identified(jac: np.ndarray) -> bool:
    if jac.shape[1] == 0:
        return True
    scaled = jac / np.maximum(np.linalg.norm(jac, axis=0), 1e-300)
    s = np.linalg.svd(scaled, compute_uv=False)
    return bool(s[-1] > 1e-6 * s[0]) and jac.shape[0] >= jac.shape[1]


def _solve(prior: PassCost, knee: float, names: tuple[str, ...], w, n, kv, seconds) -> PassCost:
    start = replace(prior, knee=knee)
    if knee == 1:
        start = replace(start, c_fixed=prior.c_fixed + prior.c_weight, c_weight=0.0)
    if not names:
        return start
    if knee == 1 and not prior.experts:
        # Linear: non-negative least squares on relative errors, exactly.
        linear = ("c_fixed", "c_token", "c_kv")
        design = np.stack([w.sum(1), (w * n).sum(1), (w * kv).sum(1)], axis=1)
        target = seconds - sum(design[:, i] * getattr(start, x) for i, x in enumerate(linear) if x not in names)
        cols = [i for i, x in enumerate(linear) if x in names]
        a = design[:, cols] / seconds[:, None]
        scale = np.where(a.max(axis=0) > 0, a.max(axis=0), 1.0)
        coef, _ = nnls(a / scale, target / seconds)
        return replace(start, **{linear[c]: float(v) for c, v in zip(cols, coef / scale)})
    x0 = np.array([max(getattr(start, x), 1e-12) for x in names])

    def residual(x):
        return _model(replace(start, **dict(zip(names, x * x0))), w, n, kv) / seconds - 1.0

    result = least_squares(residual, np.ones(len(names)), bounds=(0.0, np.inf), x_scale="jac", method="trf")
    return replace(start, **dict(zip(names, result.x * x0)))


def fit_step_model(equations: list[Equation], prior: PassCost, knees=KNEES) -> StepModelFit:
    """The best knee's fit; coefficients the data cannot separate are held at ``prior`` (said in ``held``)."""
    if not equations:
        raise ConfigError("calibration needs at least one measurement")
    seconds = np.array([e.seconds for e in equations], dtype=float)
    if np.any(~np.isfinite(seconds)) or np.any(seconds <= 0):
        raise ConfigError("every measured time must be a finite number > 0")
    w, n, kv = _arrays(equations)
    best = None
    for knee in knees:
        names = list(_free(knee))
        start = _solve(prior, knee, (), w, n, kv, seconds)
        # Hold coefficients at the prior, the least identifiable first, until the rest are separable.
        for drop in ("c_kv", "c_token", names[0]):
            jac = _jacobian(start, names, w, n, kv, seconds)
            if _identified(jac) and len(names) <= len(equations):
                break
            names.remove(drop)
        cost = _solve(prior, knee, tuple(names), w, n, kv, seconds)
        fitted = _model(cost, w, n, kv)
        rms = float(np.sqrt(np.mean((fitted / seconds - 1) ** 2)))
        if best is None or rms < best[0] * (1 - 1e-6) - 1e-12:
            best = (rms, knee, cost, tuple(names), fitted)
    _, knee, cost, names, fitted = best
    residual = fitted / seconds - 1.0
    dof = max(len(seconds) - len(names), 1)
    sigma2 = float(residual @ residual) / dof
    se: dict[str, float] = {}
    if names:
        jac = _jacobian(cost, names, w, n, kv, seconds)
        cov = sigma2 * np.linalg.pinv(jac.T @ jac)
        se = {name: float(np.sqrt(max(cov[i, i], 0.0))) for i, name in enumerate(names)}
    held = tuple(x for x in _free(knee) if x not in names)
    return StepModelFit(cost=replace(cost, source="fit"), knee=knee, se=se, held=held,
                        labels=tuple(e.label for e in equations), measured=seconds, fitted=fitted)


def closed_loop_equation(concurrency: float, input_len: float, output_len: float, seconds_per_token: float,
                         label: str, prefills: float | None = None, mixed: bool = False) -> Equation:
    """A closed-loop serving run at ``concurrency``: the time a request spends per output token.

    By Little's law a request's life holds its own prefill and, on average, the prefills of
    the ``concurrency - 1`` requests that replace the others meanwhile, so each decode step
    carries ``prefills`` prompt prefills: one decode pass at the batch and its mid-output
    context, plus that share of a pass over ``input_len`` prompt tokens. ``prefills``
    defaults to ``concurrency / output_len``, for mean end-to-end latency over output tokens
    (or concurrency over output throughput); a mean TPOT leaves the request's own prefill
    out: ``(concurrency - 1) / output_len`` (``tpot_prefills``).

    ``mixed``: the prefills ride in the decode steps, as vLLM's chunked prefill and the
    simulator schedule them (``simulator.engine``): a step carrying k of them is one pass
    over the other ``concurrency - k`` sequences' decode tokens and the k prompts, with no
    launch of its own; with ``share`` = k + f prefills a step on average, a fraction f of
    the steps carries k + 1. This is what ``--arrival closed`` simulates, so a profile
    fitted on it gives its serve runs back. Without ``mixed`` each prefill is a pass of its
    own (SGLang's default scheduler runs prefill batches apart from decode batches).
    """
    share = float(concurrency) / max(float(output_len), 1.0) if prefills is None else float(prefills)
    c, prompt = float(concurrency), float(input_len)
    if mixed:
        kv = max(c - share, 0.0) * (prompt + output_len / 2)
        k = math.floor(share)
        frac = share - k
        passes = [(1.0 - frac, c - k + k * prompt, kv)] + ([(frac, c - k - 1 + (k + 1) * prompt, kv)] if frac else [])
        return Equation(tuple(passes), float(seconds_per_token), label)
    decode = (1.0, c, c * (prompt + output_len / 2))
    return Equation((decode, (share, prompt, 0.0)), float(seconds_per_token), label)


def tpot_prefills(concurrency: float, output_len: float) -> float:
    """Prompt prefills a decode step carries in a closed loop, as a request's TPOT sees them (its own excluded)."""
    return max(float(concurrency) - 1.0, 0.0) / max(float(output_len), 1.0)


def serve_curve_fit(prior: PassCost, concurrency, seconds_per_token, input_len: float, output_len: float,
                    knees=(1.0,)) -> StepModelFit:
    """The target's step model from a no-speculation serve curve at several concurrencies
    (``closed_loop_equation`` per point): the half of a with/without pair that holds the
    engine's own costs, fixed and per token, where the MoE prior's roofline misses most of them."""
    equations = [closed_loop_equation(float(c), input_len, output_len, float(s), f"concurrency {c:g}")
                 for c, s in zip(concurrency, seconds_per_token)]
    return fit_step_model(equations, prior, knees)
