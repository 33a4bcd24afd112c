"""Speculation policies: how many tokens to draft this iteration, given the batch.

Each policy is a frozen dataclass with ``choose(batch, round_time, tokens_per_pass)``;
``round_time(gamma)`` and ``tokens_per_pass(gamma)`` are supplied by the engine, so only
the goodput policy needs them. ``parse_policy`` turns the command-line form into one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from specgauge.errors import ConfigError

POLICY_FORMS = "none | fixed | disable-above:<B> | table:<B:g,B:g,...> | goodput"


class Policy(Protocol):
    max_gamma: int

    def choose(self, batch: int, round_time: Callable[[int], float], tokens_per_pass: Callable[[int], float]) -> int: ...

    def label(self) -> str: ...


@dataclass(frozen=True)
class NoSpeculation:
    """Never draft."""

    max_gamma: int = 0

    def choose(self, batch, round_time, tokens_per_pass) -> int:
        return 0

    def label(self) -> str:
        return "none"


@dataclass(frozen=True)
class FixedGamma:
    """Always draft ``gamma`` tokens."""

    gamma: int

    @property
    def max_gamma(self) -> int:
        return self.gamma

    def choose(self, batch, round_time, tokens_per_pass) -> int:
        return self.gamma

    def label(self) -> str:
        return "fixed"


@dataclass(frozen=True)
class DisableAbove:
    """vLLM's ``speculative_disable_by_batch_size``: stop drafting when the batch exceeds ``threshold``."""

    threshold: int
    gamma: int

    @property
    def max_gamma(self) -> int:
        return self.gamma

    def choose(self, batch, round_time, tokens_per_pass) -> int:
        return 0 if batch > self.threshold else self.gamma

    def label(self) -> str:
        return f"disable-above:{self.threshold}"


@dataclass(frozen=True)
class BatchTable:
    """gamma from the entry with the largest batch size <= the batch (the first entry below it)."""

    entries: tuple[tuple[int, int], ...]

    @property
    def max_gamma(self) -> int:
        return max(g for _, g in self.entries)

    def choose(self, batch, round_time, tokens_per_pass) -> int:
        gamma = self.entries[0][1]
        for size, g in self.entries:
            if batch >= size:
                gamma = g
        return gamma

    def label(self) -> str:
        return "table:" + ",".join(f"{b}:{g}" for b, g in self.entries)


@dataclass(frozen=True)
class Goodput:
    """The gamma in 0..max_gamma that maximises expected tokens per second for this batch."""

    max_gamma: int

    def choose(self, batch, round_time, tokens_per_pass) -> int:
        best, best_rate = 0, -1.0
        for g in range(self.max_gamma + 1):
            rate = tokens_per_pass(g) / round_time(g)
            if rate > best_rate * (1 + 1e-12):
                best, best_rate = g, rate
        return best

    def label(self) -> str:
        return "goodput"


def parse_policy(spec: str, gamma: int) -> Policy:
    """``none``, ``fixed``, ``disable-above:32``, ``table:1:5,16:3,64:0`` or ``goodput`` (max gamma = ``gamma``)."""
    text = str(spec).strip().lower()
    if gamma == 0 or text == "none":
        return NoSpeculation()
    if text == "fixed":
        return FixedGamma(gamma)
    if text == "goodput":
        return Goodput(gamma)
    if text.startswith("disable-above:"):
        value = text.split(":", 1)[1]
        if not value.isdigit() or int(value) < 1:
            raise ConfigError(f"invalid policy {spec!r}: disable-above needs a batch size >= 1, e.g. disable-above:32")
        return DisableAbove(int(value), gamma)
    if text.startswith("table:"):
        entries = []
        for item in text.split(":", 1)[1].split(","):
            parts = item.split(":")
            if len(parts) != 2 or not all(p.strip().isdigit() for p in parts) or int(parts[0]) < 1:
                raise ConfigError(f"invalid policy {spec!r}: table entries are BATCH:GAMMA with BATCH >= 1, e.g. table:1:5,16:3,64:0")
            entries.append((int(parts[0]), int(parts[1])))
        if [b for b, _ in entries] != sorted({b for b, _ in entries}):
            raise ConfigError(f"invalid policy {spec!r}: table batch sizes must be strictly increasing")
        return BatchTable(tuple(entries))
    raise ConfigError(f"invalid policy {spec!r}; valid: {POLICY_FORMS}")
