"""Acceptance models: how many drafted tokens the target accepts per verification round.

Each model is a frozen dataclass that states its expected tokens per target pass in
closed form where one exists (else ``None``) and makes a *sampler*: the per-run object
that draws accepted counts for whole batches at once (``draw``: rounds x requests) and
keeps whatever state the model carries between rounds (``advance``). The engine may
draw more rounds than it uses; ``advance`` is told which were used, so stateful models
(Markov, trace) stay exact.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from specgauge.errors import ConfigError, InputFileError
from specgauge.laws import tokens_per_pass as iid_tokens_per_pass


def _check_probability(name: str, value: float) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number in [0, 1], got {value!r}") from None
    if not (0.0 <= value <= 1.0):
        raise ConfigError(f"{name} must be in [0, 1], got {value!r}")
    return value


class Sampler(Protocol):
    def draw(self, requests: np.ndarray, rounds: int, gamma: int) -> np.ndarray:
        """Accepted counts, int64 [rounds, len(requests)], each in 0..gamma."""

    def advance(self, requests: np.ndarray, used: np.ndarray) -> None:
        """Record that the first ``len(used)`` drawn rounds were used (``used`` = their counts)."""


@runtime_checkable
class AcceptanceModel(Protocol):
    def expected_tokens_per_pass(self, gamma: int) -> float | None: ...

    def sampler(self, rng: np.random.Generator, n_requests: int) -> Sampler: ...

    @property
    def mean_alpha(self) -> float | None: ...

    def label(self) -> str: ...


class _AcceptanceBase:
    """Shared helper: i.i.d. rounds for independent requests, handy for tests and plots."""

    def sample_accepted(self, rng: np.random.Generator | int | None, gamma: int, rounds: int, requests: int = 1) -> np.ndarray:
        """Accepted counts [rounds, requests] for ``requests`` fresh requests."""
        rng = np.random.default_rng(rng)
        sampler = self.sampler(rng, requests)  # type: ignore[attr-defined]
        return sampler.draw(np.arange(requests), rounds, gamma)


class _Stateless:
    def advance(self, requests: np.ndarray, used: np.ndarray) -> None:
        return None


def _truncated_geometric(rng: np.random.Generator, alpha: float | np.ndarray, shape: tuple[int, int], gamma: int) -> np.ndarray:
    """min(G, gamma) with P(G >= k) = alpha^k, by inversion (vectorised over alpha)."""
    u = rng.random(shape)
    alpha = np.asarray(alpha, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        k = np.floor(np.log(u) / np.log(alpha))
    k = np.where(alpha >= 1.0, gamma, np.where(alpha <= 0.0, 0, k))
    return np.minimum(k, gamma).astype(np.int64)


@dataclass(frozen=True)
class IIDAcceptance(_AcceptanceBase):
    """Every drafted token is accepted with the same probability alpha = 1 - TV(p, q)."""

    alpha: float = 0.8

    def __post_init__(self) -> None:
        object.__setattr__(self, "alpha", _check_probability("alpha", self.alpha))

    @property
    def mean_alpha(self) -> float:
        return self.alpha

    def expected_tokens_per_pass(self, gamma: int) -> float:
        return iid_tokens_per_pass(self.alpha, gamma)

    def sampler(self, rng: np.random.Generator, n_requests: int) -> Sampler:
        return _IIDSampler(self.alpha, rng)

    def label(self) -> str:
        return f"iid({self.alpha:g})"


class _IIDSampler(_Stateless):
    def __init__(self, alpha: float, rng: np.random.Generator) -> None:
        self.alpha, self.rng = alpha, rng

    def draw(self, requests: np.ndarray, rounds: int, gamma: int) -> np.ndarray:
        shape = (rounds, len(requests))
        if self.alpha <= 0.0 or gamma == 0:
            return np.zeros(shape, dtype=np.int64)
        if self.alpha >= 1.0:
            return np.full(shape, gamma, dtype=np.int64)
        # numpy's geometric counts trials up to the first rejection (>= 1).
        return np.minimum(self.rng.geometric(1.0 - self.alpha, size=shape) - 1, gamma)


#: how positions beyond the given rates are treated: the last rate repeated, a geometric decay
#: fitted to the given positions, or refused
BEYOND = ("last", "geometric", "refuse")


def geometric_decay(alphas: tuple[float, ...]) -> float:
    """The factor r of α_k ∝ r^k fitted to the given conditional rates (least squares on log α_k),
    capped at 1: real acceptance falls with position, and a rise measured over a few positions is
    not extended. One position (or a zero rate) gives no decay to fit: 1."""
    a = np.asarray(alphas, float)
    if len(a) < 2 or np.any(a <= 0):
        return 1.0
    slope = float(np.polyfit(np.arange(1, len(a) + 1), np.log(a), 1)[0])
    return float(min(np.exp(slope), 1.0))


@dataclass(frozen=True)
class PerPositionAcceptance(_AcceptanceBase):
    """Draft position k is accepted with alpha_k (given all before it were).

    Beyond the tuple (``beyond``): ``last`` repeats the last rate, ``geometric`` extends it
    by the decay fitted to the given rates (``geometric_decay``), ``refuse`` refuses a γ
    longer than the tuple. The label names the rule whenever it is not ``last``.
    """

    alphas: tuple[float, ...] = (0.9, 0.8, 0.7, 0.6)
    beyond: str = "last"

    def __post_init__(self) -> None:
        alphas = tuple(_check_probability(f"alpha_{i + 1}", a) for i, a in enumerate(self.alphas))
        if not alphas:
            raise ConfigError("PerPositionAcceptance needs at least one alpha")
        if self.beyond not in BEYOND:
            raise ConfigError(f"unknown rule {self.beyond!r} for positions beyond the given rates; valid: "
                              + ", ".join(BEYOND))
        object.__setattr__(self, "alphas", alphas)

    @property
    def decay(self) -> float:
        """The factor a position beyond the given ones multiplies the rate by (1 for ``last``)."""
        return geometric_decay(self.alphas) if self.beyond == "geometric" else 1.0

    def describe_beyond(self) -> str:
        """How positions beyond the given ones are modelled, in words."""
        m = len(self.alphas)
        if self.beyond == "refuse":
            return f"positions beyond {m} refused"
        if self.beyond == "geometric" and m >= 2:
            return (f"a geometric decay fitted to the {m} given positions (×{self.decay:.3g} a position"
                    + (", capped at 1: the given rates do not fall" if self.decay >= 1.0 else "") + ")")
        return f"position {m}'s rate repeated"

    def _padded(self, gamma: int) -> np.ndarray:
        m = len(self.alphas)
        if gamma > m and self.beyond == "refuse":
            raise ConfigError(f"γ {gamma} drafts beyond the {m} positions whose acceptance was given; give γ <= {m} "
                              "or extend them (geometric)")
        extra = self.alphas[-1] * self.decay ** np.arange(1, max(0, gamma - m) + 1)
        return np.concatenate([np.asarray(self.alphas[:gamma], dtype=float), extra])

    @property
    def mean_alpha(self) -> float:
        return float(np.mean(self.alphas))

    def expected_tokens_per_pass(self, gamma: int) -> float:
        """1 + sum_k prod_{i<=k} alpha_i."""
        return float(1.0 + np.cumprod(self._padded(gamma)).sum())

    def sampler(self, rng: np.random.Generator, n_requests: int) -> Sampler:
        return _PerPositionSampler(self, rng)

    def label(self) -> str:
        rates = ",".join(f"{a:g}" for a in self.alphas)
        if self.beyond == "geometric":
            return f"per-position({rates}; beyond: geometric ×{self.decay:.3g})"
        if self.beyond == "refuse":
            return f"per-position({rates}; beyond: refused)"
        return f"per-position({rates})"


class _PerPositionSampler(_Stateless):
    def __init__(self, model: PerPositionAcceptance, rng: np.random.Generator) -> None:
        self.model, self.rng = model, rng

    def draw(self, requests: np.ndarray, rounds: int, gamma: int) -> np.ndarray:
        if gamma == 0:
            return np.zeros((rounds, len(requests)), dtype=np.int64)
        ok = self.rng.random((rounds, len(requests), gamma)) < self.model._padded(gamma)
        return np.cumprod(ok, axis=2).sum(axis=2).astype(np.int64)


@dataclass(frozen=True)
class PerRequestAcceptance(_AcceptanceBase):
    """Each request draws its own alpha from Beta(a, b): workloads mix boilerplate and prose."""

    a: float = 8.0
    b: float = 2.0

    def __post_init__(self) -> None:
        for name in ("a", "b"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ConfigError(f"PerRequestAcceptance: Beta parameter {name} must be > 0, got {value!r}")

    @classmethod
    def from_mean(cls, mean: float, concentration: float = 10.0) -> "PerRequestAcceptance":
        """Beta with the given mean alpha and a + b = concentration (smaller = more spread)."""
        mean = _check_probability("mean alpha", mean)
        if not 0 < mean < 1 or concentration <= 0:
            raise ConfigError(f"PerRequestAcceptance.from_mean needs 0 < mean < 1 and concentration > 0, got {mean!r}, {concentration!r}")
        return cls(mean * concentration, (1 - mean) * concentration)

    @property
    def mean_alpha(self) -> float:
        return self.a / (self.a + self.b)

    def expected_tokens_per_pass(self, gamma: int) -> float:
        """sum_{k=0..gamma} E[alpha^k], with the Beta moments E[alpha^k] = prod (a+j)/(a+b+j)."""
        j = np.arange(gamma)
        moments = np.concatenate([[1.0], np.cumprod((self.a + j) / (self.a + self.b + j))])
        return float(moments.sum())

    def sampler(self, rng: np.random.Generator, n_requests: int) -> Sampler:
        alpha_rng, round_rng = rng.spawn(2)
        return _PerRequestSampler(alpha_rng.beta(self.a, self.b, size=n_requests), round_rng)

    def label(self) -> str:
        return f"beta({self.a:g},{self.b:g})"


class _PerRequestSampler(_Stateless):
    def __init__(self, alphas: np.ndarray, rng: np.random.Generator) -> None:
        self.alphas, self.rng = alphas, rng

    def draw(self, requests: np.ndarray, rounds: int, gamma: int) -> np.ndarray:
        if gamma == 0:
            return np.zeros((rounds, len(requests)), dtype=np.int64)
        return _truncated_geometric(self.rng, self.alphas[requests], (rounds, len(requests)), gamma)


@dataclass(frozen=True)
class MarkovAcceptance(_AcceptanceBase):
    """Bursty acceptance: each draft decision depends on the previous one (a two-state chain).

    The chain runs across rounds of the same request: a round that ends in a rejection
    starts the next one in the reject state. Long-run acceptance rate is
    p_ra / (1 - p_aa + p_ra); no simple closed form for tokens per pass is claimed.
    """

    p_accept_after_accept: float = 0.9
    p_accept_after_reject: float = 0.4

    def __post_init__(self) -> None:
        _check_probability("p_accept_after_accept", self.p_accept_after_accept)
        _check_probability("p_accept_after_reject", self.p_accept_after_reject)
        if self.p_accept_after_accept == 1.0 and self.p_accept_after_reject == 0.0:
            raise ConfigError("MarkovAcceptance with p_aa = 1 and p_ra = 0 has no unique stationary rate")

    @property
    def mean_alpha(self) -> float:
        paa, pra = self.p_accept_after_accept, self.p_accept_after_reject
        return pra / (1.0 - paa + pra)

    def expected_tokens_per_pass(self, gamma: int) -> None:
        return None

    def sampler(self, rng: np.random.Generator, n_requests: int) -> Sampler:
        init_rng, round_rng = rng.spawn(2)
        state = init_rng.random(n_requests) < self.mean_alpha
        return _MarkovSampler(self, state, round_rng)

    def label(self) -> str:
        return f"markov({self.p_accept_after_accept:g},{self.p_accept_after_reject:g})"


class _MarkovSampler:
    def __init__(self, model: MarkovAcceptance, state: np.ndarray, rng: np.random.Generator) -> None:
        self.paa, self.pra = model.p_accept_after_accept, model.p_accept_after_reject
        self.state, self.rng = state, rng

    def draw(self, requests: np.ndarray, rounds: int, gamma: int) -> np.ndarray:
        out = np.zeros((rounds, len(requests)), dtype=np.int64)
        self._gamma = gamma
        if gamma == 0:
            return out
        state = self.state[requests].copy()
        u = self.rng.random((rounds, gamma, len(requests)))
        for r in range(rounds):
            alive = np.ones(len(requests), dtype=bool)
            for k in range(gamma):
                accept = u[r, k] < np.where(state, self.paa, self.pra)
                state = np.where(alive, accept, state)
                alive &= accept
                out[r] += alive
        return out

    def advance(self, requests: np.ndarray, used: np.ndarray) -> None:
        # A round ends in the reject state unless every draft was accepted.
        if self._gamma and used.shape[0]:
            self.state[requests] = used[-1] >= self._gamma

    _gamma = 0


@dataclass(frozen=True)
class TraceAcceptance(_AcceptanceBase):
    """Replays recorded per-round accepted counts, in order, cycling; counts above gamma are cut."""

    counts: tuple[int, ...] = (4, 2, 0, 4, 3, 1)

    def __post_init__(self) -> None:
        counts = tuple(int(c) for c in self.counts)
        if not counts:
            raise ConfigError("TraceAcceptance needs at least one accepted count")
        if min(counts) < 0:
            raise ConfigError(f"TraceAcceptance counts must be >= 0, got {min(counts)}")
        object.__setattr__(self, "counts", counts)

    @classmethod
    def from_csv(cls, path: str | Path, column: str = "accepted") -> "TraceAcceptance":
        """Read per-round accepted counts from column ``column`` of a CSV file."""
        import io

        from specgauge import inputs

        text = inputs.read_input_text(path, "acceptance trace")  # a regular file of a sane size, UTF-8: else one line, exit 2
        try:
            rows = list(csv.DictReader(io.StringIO(text, newline="")))
        except csv.Error as exc:
            raise InputFileError(f"acceptance trace {str(path)!r} is not valid CSV: {exc}") from None
        if not rows or column not in rows[0]:
            raise ConfigError(f"acceptance trace {str(path)!r} has no column {column!r}")
        try:
            return cls(tuple(int(r[column]) for r in rows))
        except ValueError as exc:
            raise ConfigError(f"acceptance trace {str(path)!r}: {exc}") from None

    @property
    def mean_alpha(self) -> None:
        return None

    def expected_tokens_per_pass(self, gamma: int) -> float:
        return float(np.minimum(np.asarray(self.counts), gamma).mean() + 1.0)

    def sampler(self, rng: np.random.Generator, n_requests: int) -> Sampler:
        return _TraceSampler(np.asarray(self.counts, dtype=np.int64))

    def label(self) -> str:
        return f"trace({len(self.counts)} rounds)"


class _TraceSampler:
    def __init__(self, counts: np.ndarray) -> None:
        self.counts, self.cursor = counts, 0

    def draw(self, requests: np.ndarray, rounds: int, gamma: int) -> np.ndarray:
        index = (self.cursor + np.arange(rounds * len(requests))) % len(self.counts)
        return np.minimum(self.counts[index].reshape(rounds, len(requests)), gamma)

    def advance(self, requests: np.ndarray, used: np.ndarray) -> None:
        self.cursor = (self.cursor + used.size) % len(self.counts)


@dataclass(frozen=True)
class EmptyProposals(_AcceptanceBase):
    """``base`` acceptance, but a proposal is empty with probability ``empty`` (an n-gram lookup that found nothing).

    An empty proposal verifies no drafts, so the round emits one token, like plain decoding.
    """

    base: AcceptanceModel = IIDAcceptance(0.7)
    empty: float = 0.5

    def __post_init__(self) -> None:
        if not 0 <= float(self.empty) < 1:
            raise ConfigError(f"the share of empty proposals must be in [0, 1), got {self.empty!r}")

    @property
    def mean_alpha(self) -> float | None:
        return self.base.mean_alpha

    def expected_tokens_per_pass(self, gamma: int) -> float | None:
        inner = self.base.expected_tokens_per_pass(gamma)
        return None if inner is None else (1.0 - self.empty) * inner + self.empty

    def sampler(self, rng: np.random.Generator, n_requests: int) -> Sampler:
        base_rng, empty_rng = rng.spawn(2)
        return _EmptySampler(self.base.sampler(base_rng, n_requests), empty_rng, self.empty)

    def label(self) -> str:
        return f"{self.base.label()}+empty({self.empty:g})"


class _EmptySampler:
    def __init__(self, base: Sampler, rng: np.random.Generator, empty: float) -> None:
        self.base, self.rng, self.empty = base, rng, empty

    def draw(self, requests: np.ndarray, rounds: int, gamma: int) -> np.ndarray:
        counts = self.base.draw(requests, rounds, gamma)
        return np.where(self.rng.random(counts.shape) < self.empty, 0, counts)

    def advance(self, requests: np.ndarray, used: np.ndarray) -> None:
        self.base.advance(requests, used)
