"""Replay measured acceptance: per-request traces from JSONL drive the accepted counts.

Two layouts, one JSON object per request and line:

* SpecDecode-Bench's profiled traces (github.com/SpecDecode-Bench/simulator, ``data/``):
  ``{"id", "prompt_token_ids", "generated_token_ids", "acc_eagle": {"acc_len": [...]},
  "acc_ngram": {"acc_len": [...]}}``. ``acc_len[i]`` is indexed by *output position*: the
  tokens one verification pass would emit if it started at position i with unlimited γ
  (1 = only the correction token). With γ drafts a round emits min(acc_len[i], γ + 1) and
  the next round starts that many positions later.
* Per-step counts, as vLLM's per-request spec-decode metrics give them: ``{"accepted":
  [a_0, a_1, ...]}`` (also ``num_accepted_tokens_per_step``), drafts accepted in each
  verification step, in order; a round accepts min(a_s, γ).

Request i of the simulated workload replays trace i modulo the number of traces; a trace
that runs out wraps around. ``expected_tokens_per_pass(γ)`` is the traces' own mean over
every round of a walk through them, so the planner's policies see the same acceptance.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specgauge.errors import ConfigError, InputFileError
from specgauge.simulator.acceptance import _AcceptanceBase

STEP_KEYS = ("accepted", "num_accepted_tokens_per_step")
METHODS = ("eagle", "ngram", "eagle_three")


@dataclass(frozen=True, eq=False)
class ReplayAcceptance(_AcceptanceBase):
    """Measured traces, padded to one array: ``table[r, i]`` and each trace's length."""

    table: np.ndarray = field(repr=False)
    lengths: np.ndarray = field(repr=False)
    positional: bool        # True: SpecDecode-Bench's per-position emitted lengths; False: per-step accepted drafts
    name: str = "trace"

    def __post_init__(self) -> None:
        if self.table.ndim != 2 or not len(self.lengths) or self.lengths.min() < 1:
            raise ConfigError(f"acceptance trace {self.name!r} holds no non-empty request")

    @classmethod
    def from_jsonl(cls, path: str | Path, method: str = "eagle") -> "ReplayAcceptance":
        """Read a JSONL trace; ``method`` picks ``acc_<method>`` in SpecDecode-Bench's layout."""
        from specgauge import inputs

        lines = inputs.read_input_text(path, "acceptance trace").splitlines()  # a regular file of a sane size, UTF-8
        traces, positional = [], None
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (ValueError, RecursionError) as exc:
                raise InputFileError(f"{path}:{number}: not JSON: {inputs.one_line(exc)}") from None
            counts, kind = _counts(record, method, f"{path}:{number}")
            if positional is not None and kind != positional:
                raise ConfigError(f"{path}:{number}: mixes per-position and per-step traces")
            positional = kind
            traces.append(counts)
        if not traces:
            raise ConfigError(f"acceptance trace {str(path)!r} is empty")
        lengths = np.array([len(t) for t in traces])
        table = np.zeros((len(traces), int(lengths.max())), dtype=np.int64)
        for row, trace in enumerate(traces):
            table[row, :len(trace)] = trace
        return cls(table, lengths, bool(positional), f"{Path(path).name}:{method}" if positional else Path(path).name)

    @property
    def mean_alpha(self) -> None:
        return None

    def _walk(self, cursor: np.ndarray, rows: np.ndarray, rounds: int, gamma: int) -> tuple[np.ndarray, np.ndarray]:
        """Accepted counts [rounds, len(rows)] from ``cursor``, and the cursor after them."""
        out = np.zeros((rounds, len(rows)), dtype=np.int64)
        cursor = cursor.copy()
        length = self.lengths[rows]
        for k in range(rounds):  # rounds depend on each other; requests are vectorised
            value = self.table[rows, cursor % length]
            accepted = np.minimum(value - 1, gamma) if self.positional else np.minimum(value, gamma)
            out[k] = np.maximum(accepted, 0)
            cursor += out[k] + 1 if self.positional else 1
        return out, cursor

    @functools.lru_cache(maxsize=32)
    def expected_tokens_per_pass(self, gamma: int) -> float:
        rows = np.arange(len(self.lengths))
        rounds = int(self.lengths.max())
        accepted, _ = self._walk(np.zeros(len(rows), dtype=np.int64), rows, rounds, gamma)
        if self.positional:  # each trace's own rounds: stop a walk once it has passed its end
            emitted = np.cumsum(accepted + 1, axis=0) - (accepted + 1)
            inside = emitted < self.lengths[rows]
        else:
            inside = np.arange(rounds)[:, None] < self.lengths[rows]
        return float((accepted[inside] + 1).mean())

    def sampler(self, rng: np.random.Generator, n_requests: int):
        return _ReplaySampler(self, n_requests)

    def label(self) -> str:
        return f"replay({self.name}, {len(self.lengths)} requests)"


class _ReplaySampler:
    def __init__(self, model: ReplayAcceptance, n_requests: int) -> None:
        self.model = model
        self.rows = np.arange(n_requests) % len(model.lengths)
        self.cursor = np.zeros(n_requests, dtype=np.int64)
        self._gamma = 0

    def draw(self, requests: np.ndarray, rounds: int, gamma: int) -> np.ndarray:
        self._gamma = gamma
        out, _ = self.model._walk(self.cursor[requests], self.rows[requests], rounds, gamma)
        return out

    def advance(self, requests: np.ndarray, used: np.ndarray) -> None:
        if self.model.positional:
            self.cursor[requests] += (used + 1).sum(axis=0)
        else:
            self.cursor[requests] += used.shape[0]


def _counts(record: object, method: str, where: str) -> tuple[list[int], bool]:
    if not isinstance(record, dict):
        raise ConfigError(f"{where}: each line must be a JSON object")
    for key in STEP_KEYS:
        if key in record:
            return _ints(record[key], where, minimum=0), False
    entry = record.get(f"acc_{method}", record.get("acc"))
    if isinstance(entry, dict):
        entry = entry.get("acc_len")
    if entry is None:
        others = [k[4:] for k in record if k.startswith("acc_")]
        hint = f"; this trace has {', '.join(others)}: name one as PATH.jsonl:{others[0]}" if others else ""
        raise ConfigError(f"{where}: no acceptance found: expected acc_{method}.acc_len (SpecDecode-Bench) or "
                          f"{' / '.join(STEP_KEYS)} (per-step counts){hint}")
    return _ints(entry, where, minimum=1), True


def _ints(values: object, where: str, minimum: int) -> list[int]:
    if not isinstance(values, list) or not values or not all(isinstance(v, int) and v >= minimum for v in values):
        raise ConfigError(f"{where}: acceptance must be a non-empty list of integers >= {minimum}")
    return values
