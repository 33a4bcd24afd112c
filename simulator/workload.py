"""Arrivals and request lengths, drawn once per seed and shared by the paired runs.

Arrivals: Poisson (exponential gaps), gamma (bursty; coefficient of variation ``cv``),
a CSV trace, saturated (every request waiting at time 0, so the batch stays full: with
fixed lengths the batch then runs in lock-step waves, every request prefilled and finished
together), or closed (``closed_loop``: ``vllm bench serve --max-concurrency`` in its steady
state, where a finished request's replacement is prefilled while the others decode).
Lengths: fixed, uniform on [1, 2 x mean - 1], exponential (geometric, mean ``mean``),
or from the trace. No gap is capped: a Poisson process is exactly that.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specgauge import inputs

from specgauge.errors import ConfigError, InputFileError

ARRIVALS = ("poisson", "gamma", "trace", "closed")
LENGTH_DISTRIBUTIONS = ("fixed", "uniform", "exponential")


@dataclass(frozen=True, eq=False)
class Workload:
    """Sorted arrival times (s) and per-request prompt and output lengths (tokens)."""

    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    measured_range: tuple[int, int] | None = None   # the requests the metrics describe (a closed loop's middle)

    def __len__(self) -> int:
        return len(self.arrival)

    @property
    def measured(self) -> slice:
        return slice(*self.measured_range) if self.measured_range else slice(None)

    @property
    def measured_count(self) -> int:
        return len(range(*self.measured.indices(len(self.arrival))))


def closed_loop(workload: Workload, concurrency: int) -> Workload:
    """The requests as a closed loop at ``concurrency`` in its steady state, as calibrate reads a serve run.

    Before them run ``concurrency`` warm-up requests with outputs spread evenly over
    1..output (their prompts the same), so the requests that replace them start, and with
    fixed lengths keep finishing, evenly spread: each decode step carries the prefills of
    ``concurrency / output`` new requests on average rather than all of them at once. After
    them run ``concurrency`` more, so the batch stays full until the last measured request
    ends. Only the middle requests are measured; all wait at time 0 (the loop sends a
    request as soon as a slot frees)."""
    n, c = len(workload), int(concurrency)
    mean_out = float(np.mean(workload.output))
    warm_out = np.maximum(np.round(mean_out * np.arange(1, c + 1) / c), 1).astype(np.int64)
    prompt = np.concatenate([np.resize(workload.prompt, c), workload.prompt, np.resize(workload.prompt, c)])
    output = np.concatenate([warm_out, workload.output, np.resize(workload.output, c)])
    return Workload(np.zeros(n + 2 * c), prompt, output, measured_range=(c, c + n))


def closed_loop_concurrency(plan: object, length_dist: str) -> int:
    """The most requests a closed loop can hold at once, whatever its batch cap: what the KV cache
    admits of requests of the mean lengths (``MemoryPlan.max_concurrency_no_draft``, the larger of
    the paired runs'), twice that when lengths are drawn (short ones pack closer). A cap above it
    (``--batch-size 1000000``) would add millions of warm-up requests that never run together."""
    most = max(int(getattr(plan, "max_concurrency_no_draft")), 1)
    return most if length_dist == "fixed" else 2 * most


def _lengths(rng: np.random.Generator, dist: str, mean: int, n: int) -> np.ndarray:
    if dist == "fixed":
        return np.full(n, mean, dtype=np.int64)
    if dist == "uniform":
        return rng.integers(1, 2 * mean, size=n, endpoint=False).astype(np.int64) if mean > 1 else np.ones(n, np.int64)
    if dist == "exponential":
        return rng.geometric(1.0 / mean, size=n).astype(np.int64)
    raise ConfigError(f"unknown length distribution {dist!r}; valid: {', '.join(LENGTH_DISTRIBUTIONS)}")


def read_trace(path: str | Path) -> dict[str, np.ndarray]:
    """A CSV with ``arrival_s`` (or ``timestamp``) and optionally ``prompt_len``/``output_len``."""
    import io

    text = inputs.read_input_text(path, "workload trace")  # a regular file of a sane size, UTF-8: else one line, exit 2
    try:
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise InputFileError(f"workload trace {str(path)!r} is not valid CSV: {exc}") from None
    if not rows:
        raise ConfigError(f"workload trace {str(path)!r} is empty")
    columns = [c for c in rows[0].keys() if c is not None]  # None: cells beyond a short (or blank) header
    time_col = next((c for c in ("arrival_s", "timestamp", "arrival") if c in columns), None)
    if time_col is None:
        raise ConfigError(f"workload trace {str(path)!r} needs a column arrival_s (or timestamp); has {', '.join(columns) or 'no header'}")
    out: dict[str, np.ndarray] = {}
    # every cell checked where it stands: file, line and column named in one line (line 1 is the header)
    out["arrival"] = np.array([inputs.parse(r[time_col], inputs.non_negative, inputs.where(path, line, time_col))
                               for line, r in enumerate(rows, start=2)], dtype=float)
    for key, names in (("prompt", ("prompt_len", "input_len")), ("output", ("output_len",))):
        col = next((c for c in names if c in columns), None)
        if col is not None:
            out[key] = np.array([inputs.parse(r[col], inputs.positive_int, inputs.where(path, line, col))
                                 for line, r in enumerate(rows, start=2)], dtype=np.int64)
    return out


def make_workload(n: int, qps: float | None, arrival: str, cv: float, prompt_len: int, output_len: int,
                  length_dist: str, trace: str | None, arrival_rng: np.random.Generator,
                  length_rng: np.random.Generator) -> Workload:
    """Draw the requests. Arrival and length draws use separate streams (common random numbers)."""
    prompt_rng, output_rng = length_rng.spawn(2)
    prompt = _lengths(prompt_rng, length_dist, prompt_len, n)
    output = _lengths(output_rng, length_dist, output_len, n)
    if arrival == "trace":
        if trace is None:
            raise ConfigError("arrival 'trace' needs a trace file (--trace PATH)")
        data = read_trace(trace)
        times = np.sort(data["arrival"])[:n]
        order = np.argsort(data["arrival"], kind="stable")[:n]
        n = len(times)
        prompt = data["prompt"][order] if "prompt" in data else prompt[:n]
        output = data["output"][order] if "output" in data else output[:n]
    elif qps is None or arrival == "closed":
        times = np.zeros(n)
    elif arrival == "poisson":
        times = np.cumsum(arrival_rng.exponential(1.0 / qps, size=n))
    elif arrival == "gamma":
        shape = 1.0 / cv**2
        times = np.cumsum(arrival_rng.gamma(shape, 1.0 / (qps * shape), size=n))
    else:
        raise ConfigError(f"unknown arrival process {arrival!r}; valid: {', '.join(ARRIVALS)}")
    return Workload(arrival=np.asarray(times, dtype=float), prompt=prompt, output=output)
