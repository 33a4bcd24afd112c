"""The benchmark results a team already has, read once: ``vllm bench serve --save-result`` and
``sglang.bench_serving`` files, with their ``PATH:KEY=VALUE,...`` suffixes.

Both ``specgauge calibrate`` (which fits a profile on them) and ``specgauge validate`` (which
predicts them) read these files, so the schema and its one-line refusals live here, below both.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from specgauge import inputs
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
    data = inputs.read_json(path)  # a regular file of a sane size, valid JSON: else one line, exit 2
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


# --------------------------------------------------------------------------- whose runs, each once, consistent


def _plain(text: str) -> str:
    """A model name without case or separators: ``Meta-Llama-3.1-70B-Instruct`` -> ``metallama3.170binstruct``."""
    return re.sub(r"[^a-z0-9.]", "", text.lower())


def check_model_id(data: dict[str, Any], where: str, target: str, allow: bool = False) -> None:
    """A result whose ``model_id`` (``vllm bench serve`` records the served model) does not name the
    profile it is read for is refused: an 8B's runs fitted into a 70B profile give back "2 of 2
    within 3 %" of the wrong model. The id's last path part must contain the profile's name,
    case and separators aside; ``allow`` (``--allow-model-mismatch``) takes it anyway."""
    model_id = data.get("model_id")
    if allow or not isinstance(model_id, str) or not model_id.strip():
        return
    served = model_id.strip().rstrip("/").rsplit("/", 1)[-1]
    if _plain(target) not in _plain(served):
        raise CalibrateError(f"{where}: its model_id {model_id!r} is not the profile {target!r} it is read for; give "
                             f"runs of {target}, or --allow-model-mismatch if it is the same model under another name")


def check_distinct_files(paths: Iterable[Path | str]) -> None:
    """The same run given twice (one path twice, or two copies of one file) would count twice: refused.
    A file that cannot be read is left to its reader, which names the problem."""
    seen: dict[str, str] = {}
    for path in paths:
        path = Path(path)
        if inputs.input_file_problem(path) is not None:
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest in seen:
            same = "is given twice" if Path(seen[digest]).resolve() == path.resolve() else \
                f"holds the same bytes as {seen[digest]!r}"
            raise CalibrateError(f"{str(path)!r} {same}: a run counts once; drop the repeat")
        seen[digest] = str(path)


@dataclass(frozen=True)
class ServeRun:
    """A run without speculation as ``check_serve_result`` reads it: where, concurrency, mean lengths, mean TPOT (s)."""

    where: str
    concurrency: float
    input_len: float
    output_len: float
    tpot_s: float


#: two runs of one shape at one concurrency whose mean TPOTs differ by more than this factor are not one server's
SAME_LOAD_FACTOR = 1.25
#: from a lower concurrency to a higher one a mean TPOT may fall this much (run-to-run noise), no more
FALL_TOLERANCE = 0.10
#: runs whose mean input and output lengths are within this (relative) of each other have one shape
SAME_SHAPE = 0.10


def check_consistent_runs(runs: list[ServeRun]) -> None:
    """Runs without speculation of one shape must read as one server: at one concurrency, TPOTs within
    ``SAME_LOAD_FACTOR`` of each other; at a higher one, a TPOT no more than ``FALL_TOLERANCE`` lower (a
    decode step never gets cheaper as it carries more sequences). Else refused with the pair and why."""
    def same(a: float, b: float) -> bool:
        return abs(a - b) <= SAME_SHAPE * max(a, b)

    for i, a in enumerate(runs):
        for b in runs[i + 1:]:
            if not (same(a.input_len, b.input_len) and same(a.output_len, b.output_len)):
                continue
            low, high = sorted((a, b), key=lambda r: (r.concurrency, r.tpot_s))
            if low.concurrency == high.concurrency:
                if high.tpot_s > SAME_LOAD_FACTOR * low.tpot_s:
                    raise CalibrateError(
                        f"{low.where} and {high.where} ran one shape at concurrency {low.concurrency:g} but measured "
                        f"mean TPOT {low.tpot_s * 1e3:.4g} and {high.tpot_s * 1e3:.4g} ms ({high.tpot_s / low.tpot_s:.2f}x):"
                        " not one server and model, or a disturbed run; drop the one that does not belong")
            elif high.tpot_s < (1.0 - FALL_TOLERANCE) * low.tpot_s:
                raise CalibrateError(
                    f"mean TPOT falls with load: {low.where} measured {low.tpot_s * 1e3:.4g} ms at concurrency "
                    f"{low.concurrency:g}, {high.where} {high.tpot_s * 1e3:.4g} ms at {high.concurrency:g}; a decode "
                    "step never gets cheaper as it carries more sequences: are these runs of one server and model?")


def check_added_results(texts: Iterable[str], allowed: dict[str, type], allow_mismatch: bool = False) -> None:
    """``validate --add``'s files before any is read: none twice, and each result's ``model_id``
    naming the ``target=`` its suffix gives (``check_model_id``; ``allow_mismatch`` takes it anyway)."""
    parsed = [(Path(t), {}) if t.lower().endswith(".csv") else check_spec_options(t, allowed) for t in texts]
    check_distinct_files(path for path, _ in parsed)
    for path, options in parsed:
        if "target" in options and inputs.input_file_problem(path) is None:
            check_model_id(check_json_object(path), repr(str(path)), str(options["target"]), allow_mismatch)
