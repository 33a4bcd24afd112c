"""``--acceptance``: one α, a per-position list, a named profile, a vLLM result JSON or ``/metrics`` text.

The point is to calibrate a plan on measured numbers. Five spellings:

* ``0.8``: i.i.d. acceptance, every draft token accepted with probability 0.8;
* ``0.9,0.8,0.7``: per-position *conditional* rates α_k = P(draft k accepted | drafts
  before it accepted), the α_i of 1 + Σ_k Π_{i≤k} α_i; positions beyond the list (a γ
  longer than what was measured) follow ``beyond``: a geometric decay fitted to the given
  positions by default (``simulator.acceptance.geometric_decay``), the last rate
  repeated, or refused; the acceptance label names the rule;
* ``NAME``: a profile from ``fixtures/workloads/acceptance_profiles.json``,
  each with the workload and publication it was measured on;
* ``PATH.jsonl[:METHOD]``: per-request acceptance traces replayed request by request
  (SpecDecode-Bench's profiled traces, METHOD ``eagle`` or ``ngram``; the traces
  ``specgauge acceptance`` writes, METHOD a draft's label; or per-step counts; see
  ``specgauge.simulator.replay``);
* ``PATH.json``: what ``vllm bench serve --save-result`` writes. vLLM's
  ``spec_decode_per_position_acceptance_rates`` are *unconditional* (accepted at position
  k over drafts, i.e. Π_{i≤k} α_i), so they are turned into conditional rates by dividing
  each by the one before; without them, ``spec_decode_acceptance_rate`` (a percentage)
  gives an i.i.d. α. A list is read as fractions when every value is at most 1 (as vLLM
  writes it) and as percentages when every value is above 1; a list mixing the two (such
  as ``[1.2, 0.9, 0.7]``) and a single rate of at most 1 (vLLM writes a percentage, so it
  is a fraction or under 1 %) are ambiguous and refused rather than guessed. A present
  but empty per-position list is refused too: it says the counters gave nothing, and the
  overall rate alone would hide that.
* ``PATH`` or ``BEFORE,AFTER``: a saved Prometheus text of a vLLM server's ``/metrics`` (any
  file that is not JSON), or two scrapes whose difference is the load between them
  (``reports.planning.server_metrics``): per-position acceptance and the accepted length
  from vLLM's speculative-decoding counters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np

from specgauge.errors import UsageError

PROFILES_RESOURCE = ("workloads", "acceptance_profiles.json")
VLLM_PER_POSITION_KEY = "spec_decode_per_position_acceptance_rates"
VLLM_RATE_KEY = "spec_decode_acceptance_rate"


class AcceptanceError(UsageError):
    """An ``--acceptance`` value that cannot be read as any of the four spellings (exit status 2)."""


@dataclass(frozen=True)
class AcceptanceSpec:
    """Acceptance as the user gave it: i.i.d. (one value) or per position, and its origin."""

    rates: tuple[float, ...]
    source: str
    replay: tuple[str, str] | None = None   # (JSONL trace, method): measured acceptance replayed per request
    beyond: str = "geometric"               # positions beyond ``rates``: geometric, last or refuse
    acceptance_length: float | None = None  # the accepted length the measurement itself gives (a server's counters)

    @property
    def positions(self) -> int | None:
        """How many draft positions were given (measured), None for one i.i.d. α or a replay."""
        return len(self.rates) if self.per_position and self.replay is None else None

    def beyond_note(self, gamma: int) -> str | None:
        """What a γ longer than the given positions rests on, in words; None when γ is covered."""
        m = self.positions
        if m is None or gamma <= m:
            return None
        span = f"position {m + 1}" if gamma == m + 1 else f"positions {m + 1}–{gamma}"
        return f"{span} not measured: {self.to_model().describe_beyond()}"

    @property
    def per_position(self) -> bool:
        return len(self.rates) > 1

    @property
    def label(self) -> str:
        """Compact text for a CSV column: ``0.8`` or ``0.9|0.8|0.7``."""
        return "|".join(f"{r:.6g}" for r in self.rates)

    def to_model(self) -> Any:
        """The simulator's acceptance model for these rates (imported here, lazily)."""
        from specgauge.simulator import IIDAcceptance, PerPositionAcceptance

        if self.replay is not None:
            from specgauge.simulator.replay import ReplayAcceptance

            return ReplayAcceptance.from_jsonl(*self.replay)
        if self.per_position:
            return PerPositionAcceptance(tuple(self.rates), beyond=self.beyond)
        return IIDAcceptance(self.rates[0])


def _checked(rates: list[float], origin: str) -> tuple[float, ...]:
    if not rates:
        raise AcceptanceError(f"{origin}: no acceptance rate given")
    bad = [r for r in rates if not np.isfinite(r) or not 0.0 <= r <= 1.0]
    if bad:
        raise AcceptanceError(f"{origin}: acceptance rates must lie in [0, 1], got {bad[0]!r}")
    return tuple(float(r) for r in rates)


def load_profiles() -> dict[str, dict[str, Any]]:
    """The named profiles shipped in ``specgauge.fixtures``."""
    resource = files("specgauge.fixtures").joinpath(*PROFILES_RESOURCE)
    return json.loads(resource.read_text(encoding="utf-8"))["profiles"]


def from_profile(name: str) -> AcceptanceSpec:
    profiles = load_profiles()
    if name not in profiles:
        raise AcceptanceError(
            f"unknown acceptance {name!r}: not a number, a comma-separated list, a .json file, "
            f"or a profile ({', '.join(sorted(profiles))})"
        )
    entry = profiles[name]
    rates = entry["per_position"] if "per_position" in entry else [entry["alpha"]]
    return AcceptanceSpec(_checked(list(rates), f"profile {name!r}"), f"profile {name}: {entry['workload']}; {entry['source']}")


def conditional_from_cumulative(cumulative: list[float]) -> list[float]:
    """vLLM's P(position k accepted) → α_k = P(k accepted | all before accepted)."""
    cum = np.asarray(cumulative, float)
    previous = np.concatenate([[1.0], cum[:-1]])
    with np.errstate(divide="ignore", invalid="ignore"):
        conditional = np.where(previous > 0, cum / previous, 0.0)
    return np.clip(conditional, 0.0, 1.0).tolist()


def _fractions(values: list[float], origin: str) -> tuple[list[float], str]:
    """A per-position list as fractions: all in [0, 1] are fractions, all above 1 percentages; a mix is refused."""
    above = [v for v in values if v > 1.0]
    if not above:
        return values, "as fractions"
    if len(above) == len(values):
        return [v / 100.0 for v in values], "read as percentages"
    raise AcceptanceError(
        f"{origin}: {VLLM_PER_POSITION_KEY} {values} mixes values above 1 (percentages?) with values at most 1 "
        f"(fractions?); write them all as fractions in [0, 1]")


def from_vllm_json(path: Path) -> AcceptanceSpec:
    """Acceptance from a ``vllm bench serve --save-result`` file (see the module docstring)."""
    from specgauge import inputs

    origin = f"vLLM result {str(path)!r}"
    try:  # a regular file of a sane size, valid JSON: else one line, exit 2
        data = inputs.read_json(path, "vLLM result")
    except UsageError as exc:
        raise AcceptanceError(str(exc)) from None
    if not isinstance(data, dict):
        raise AcceptanceError(f"{origin} is not a JSON object")
    per_position = data.get(VLLM_PER_POSITION_KEY)
    if per_position is not None and not per_position:
        raise AcceptanceError(
            f"{origin}: {VLLM_PER_POSITION_KEY} is empty (vLLM counted no drafts per position); give the acceptance "
            "another way (--acceptance RATE, or the server's /metrics before and after the run)")
    if per_position:
        if not isinstance(per_position, list) or not all(isinstance(v, (int, float)) for v in per_position):
            raise AcceptanceError(f"{origin}: {VLLM_PER_POSITION_KEY} is not a list of numbers")
        values = [float(v) for v in per_position]
        values, unit = _fractions(values, origin)
        cumulative = _checked(values, origin)
        if any(b > a + 1e-9 for a, b in zip(cumulative, cumulative[1:])):
            raise AcceptanceError(f"{origin}: {VLLM_PER_POSITION_KEY} rises with position, which vLLM's counters cannot do")
        rates = _checked(conditional_from_cumulative(list(cumulative)), origin)
        return AcceptanceSpec(rates, f"{origin} ({VLLM_PER_POSITION_KEY} {unit}, made conditional)")
    rate = data.get(VLLM_RATE_KEY)
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        if 0.0 < rate <= 1.0:
            raise AcceptanceError(
                f"{origin}: {VLLM_RATE_KEY} is {rate:g}; vLLM writes it as a percentage, so this is either a "
                f"fraction or under 1 %: give --acceptance {rate:g} (a fraction) or {rate / 100:g} (a percentage) instead")
        return AcceptanceSpec(_checked([float(rate) / 100.0], origin), f"{origin} ({VLLM_RATE_KEY} / 100)")
    raise AcceptanceError(
        f"{origin} has neither {VLLM_PER_POSITION_KEY} nor {VLLM_RATE_KEY}: was the server run with speculative decoding?"
    )


def from_server_metrics(paths: list[str]) -> AcceptanceSpec:
    """Acceptance from one or two saved ``/metrics`` texts (``reports.planning.server_metrics``)."""
    from .server_metrics import describe, read_counters

    counters, origin = read_counters(paths)
    rates = _checked(conditional_from_cumulative(list(counters.per_position)), origin)
    return AcceptanceSpec(rates, f"{origin}: {describe(counters)}", acceptance_length=counters.acceptance_length)


def parse_acceptance(text: str) -> AcceptanceSpec:
    """Read ``--acceptance`` in any of its five spellings (see the module docstring)."""
    from .server_metrics import looks_like_metrics

    text = text.strip()
    if not text:
        raise AcceptanceError("--acceptance is empty")
    if ".jsonl" in text.lower():
        path, _, method = text.partition(".jsonl")
        return AcceptanceSpec((), f"replayed per request from {path}.jsonl{method}",
                              replay=(path + ".jsonl", method.lstrip(":") or "eagle"))
    parts = [p.strip() for p in text.split(",")]
    if len(parts) == 2 and any(Path(p).exists() for p in parts):   # two scrapes: before,after
        return from_server_metrics(parts)
    if Path(text).is_file() and looks_like_metrics(Path(text)):
        return from_server_metrics([text])
    if text.lower().endswith(".json") or Path(text).exists():  # a pipe or device too: refused as a file
        return from_vllm_json(Path(text))
    try:
        values = [float(p) for p in parts]
    except ValueError:
        if len(parts) > 1:
            raise AcceptanceError(f"--acceptance {text!r}: a per-position list must hold numbers only") from None
        return from_profile(text)
    kind = "per-position rates" if len(values) > 1 else "i.i.d. rate"
    return AcceptanceSpec(_checked(values, f"--acceptance {text!r}"), f"given on the command line ({kind})")
