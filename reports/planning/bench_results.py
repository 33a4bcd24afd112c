"""The benchmark results a team already has, read once: ``vllm bench serve --save-result`` and
``sglang.bench_serving`` files, with their ``PATH:KEY=VALUE,...`` suffixes.

Both ``specgauge calibrate`` (which fits a profile on them) and ``specgauge validate`` (which
predicts them) read these files, so the schema and its one-line refusals live here, below both.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from specgauge import validate
from specgauge.errors import InputFileError


class CalibrateError(InputFileError):
    """A measurement file that cannot be read as the calibration input it claims to be (exit status 2)."""


def check_spec_options(text: str, allowed: dict[str, type]) -> tuple[Path, dict[str, Any]]:
    """``PATH[:KEY=VALUE,...]``: the path and its options, each parsed by its type; names a bad one."""
    path, _, rest = text.partition(":") if not Path(text).exists() else (text, "", "")
    options: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            raise CalibrateError(f"{text!r}: options after ':' are KEY=VALUE, e.g. "
                                 + ",".join(f"{k}=..." for k in allowed))
        if key not in allowed:
            raise CalibrateError(f"{text!r}: unknown option {key!r}; valid: {', '.join(allowed)}")
        try:
            options[key] = allowed[key](value)
        except ValueError:
            raise CalibrateError(f"{text!r}: {key}={value!r} is not a{'n integer' if allowed[key] is int else ' name'}"
                                 ) from None
        if allowed[key] is int and options[key] < 1:
            raise CalibrateError(f"{text!r}: {key}={value!r} must be >= 1")
    return Path(path), options


def check_json_object(path: Path) -> dict[str, Any]:
    """A benchmark result file: one JSON object."""
    data = validate.read_json(path)  # a regular file of a sane size, valid JSON: else one line, exit 2
    if not isinstance(data, dict):
        raise CalibrateError(f"{str(path)!r} does not hold a JSON object")
    return data


def check_serve_result(data: dict[str, Any], where: str) -> tuple[float, float, float, float]:
    """A ``vllm bench serve --save-result`` file: (concurrency, mean input, mean output, mean TPOT in s)."""
    completed = positive_number(data, "completed", where)
    concurrency = data.get("max_concurrency")
    if concurrency is None:
        raise CalibrateError(f"{where}: run `vllm bench serve` with --max-concurrency so the batch size is known")
    try:
        concurrency = float(concurrency)
    except (TypeError, ValueError):
        raise CalibrateError(f"{where}: max_concurrency must be a number, got {data['max_concurrency']!r}") from None
    if not (math.isfinite(concurrency) and concurrency >= 1):  # requests in flight: at least one
        raise CalibrateError(f"{where}: max_concurrency must be a number >= 1, got {data['max_concurrency']!r}")
    return (concurrency, positive_number(data, "total_input_tokens", where) / completed,
            positive_number(data, "total_output_tokens", where) / completed, positive_number(data, "mean_tpot_ms", where) * 1e-3)


def positive_number(data: dict[str, Any], key: str, where: str) -> float:
    """The number a result file holds under ``key``, finite and > 0, or a one-line refusal."""
    try:
        value = float(data[key])
    except (KeyError, TypeError, ValueError):
        raise CalibrateError(f"{where}: needs a number {key!r}") from None
    if not np.isfinite(value) or value <= 0:
        raise CalibrateError(f"{where}: {key} must be > 0, got {data[key]!r}")
    return value


#: The accepted length a speculative serve result records: vLLM's key, then ``sglang.bench_serving``'s
#: (the server's average accept length, tokens a verification step including the bonus).
ACCEPTED_LENGTH_KEYS = ("spec_decode_acceptance_length", "accept_length")


def accepted_length_key(data: dict[str, Any]) -> str | None:
    """Which key holds a speculative run's accepted length, or None for a run without speculation."""
    return next((key for key in ACCEPTED_LENGTH_KEYS if data.get(key) is not None), None)


def spec_gamma(data: dict[str, Any], where: str, given: int | None = None) -> int:
    """The draft length γ of a speculative run: as given, else from its counters or per-position rates."""
    if given is not None:
        return given
    if data.get("spec_decode_num_drafts") and data.get("spec_decode_draft_tokens"):
        return int(round(float(data["spec_decode_draft_tokens"]) / float(data["spec_decode_num_drafts"])))
    positions = data.get("spec_decode_per_position_acceptance_rates")
    if positions:
        return len(positions)
    raise CalibrateError(f"{where}: a speculative run needs spec_decode_draft_tokens / spec_decode_num_drafts "
                         "or spec_decode_per_position_acceptance_rates to know γ, or the suffix gamma=N (an "
                         "sglang.bench_serving result does not record it)")
