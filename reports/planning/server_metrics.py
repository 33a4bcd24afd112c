"""``--acceptance`` from a running vLLM server: its saved Prometheus ``/metrics`` text.

A server with speculative decoding counts every round in four counters
(``vllm/v1/spec_decode/metrics.py``, ``SpecDecodingProm``), each labelled by
``model_name`` and ``engine`` (one label set per data-parallel engine):

* ``vllm:spec_decode_num_drafts_total``: rounds that drafted;
* ``vllm:spec_decode_num_draft_tokens_total``: tokens drafted;
* ``vllm:spec_decode_num_accepted_tokens_total``: drafts accepted;
* ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="k"}``: rounds whose draft
  k was accepted (0-based), so the drafts before it were too.

The counters run from the server's start, so a load of one's own is measured between two
scrapes: ``--acceptance before.txt,after.txt`` takes the difference, as ``vllm bench serve``
does around its run. Every label set of a counter is summed (engines, models); the
``_created`` samples, comments and other metrics are skipped. From the counts, vLLM's own
figures: the accepted length 1 + accepted / drafts (bonus token included) and the
per-position rate accepted_k / drafts, which is unconditional (Π_{i≤k} α_i) and is made
conditional as for a ``--save-result`` JSON (``measured_rates.conditional_from_cumulative``).

Refused in one line (exit status 2): a text without the counters, a counter that falls
between the scrapes (a restarted server), no drafts, positions with a gap or that rise.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specgauge.errors import UsageError

PREFIX = "vllm:spec_decode_num_"
DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
#: the sum of the per-position counters may differ from the accepted counter by this share
#: (a scrape is not atomic: a step may land between two counters' lines)
CONSISTENCY = 0.01

#: ``name{labels} value [timestamp]`` (the Prometheus text exposition format)
SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?\s*$")
LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


class MetricsError(UsageError):
    """A ``/metrics`` text that does not give speculative-decoding counters (exit status 2)."""


@dataclass(frozen=True)
class SpecDecodeCounters:
    """The four counters of one scrape (summed over label sets), or the difference of two."""

    drafts: float
    draft_tokens: float
    accepted: float
    accepted_per_pos: tuple[float, ...]

    @property
    def acceptance_length(self) -> float:
        """vLLM's mean acceptance length: 1 + accepted / drafts (the bonus token counts)."""
        return 1.0 + self.accepted / self.drafts

    @property
    def acceptance_rate(self) -> float:
        """Accepted over drafted tokens (vLLM's ``spec_decode_acceptance_rate`` / 100)."""
        return self.accepted / self.draft_tokens if self.draft_tokens else math.nan

    @property
    def per_position(self) -> tuple[float, ...]:
        """P(draft k accepted) = accepted_k / drafts: unconditional, as vLLM reports it."""
        return tuple(float(a) / self.drafts for a in self.accepted_per_pos)

    def since(self, before: "SpecDecodeCounters", origin: str) -> "SpecDecodeCounters":
        """The counts between ``before`` and this scrape; a counter that fell is refused."""
        pairs = {"drafts": (before.drafts, self.drafts), "draft tokens": (before.draft_tokens, self.draft_tokens),
                 "accepted tokens": (before.accepted, self.accepted)}
        k = max(len(before.accepted_per_pos), len(self.accepted_per_pos))
        early = np.pad(np.asarray(before.accepted_per_pos, float), (0, k - len(before.accepted_per_pos)))
        late = np.pad(np.asarray(self.accepted_per_pos, float), (0, k - len(self.accepted_per_pos)))
        pairs.update({f"accepted at position {p}": (a, b) for p, (a, b) in enumerate(zip(early, late))})
        fell = [(name, a, b) for name, (a, b) in pairs.items() if b < a]
        if fell:
            name, a, b = fell[0]
            raise MetricsError(f"{origin}: the {name} counter fell from {a:.0f} to {b:.0f} between the scrapes "
                               "(the server restarted?); scrape twice from one run of the server")
        return SpecDecodeCounters(self.drafts - before.drafts, self.draft_tokens - before.draft_tokens,
                                  self.accepted - before.accepted, tuple((late - early).tolist()))


def _labels(text: str, where: str) -> dict[str, str]:
    out, at = {}, 0
    while at < len(text):
        match = LABEL.match(text, at)
        if match is None:
            if not text[at:].strip():
                break
            raise MetricsError(f"{where}: cannot read the labels {{{text}}}")
        out[match.group(1)] = match.group(2)
        at = match.end()
    return out


def parse_counters(text: str, origin: str) -> SpecDecodeCounters:
    """The speculative-decoding counters of one ``/metrics`` text, each summed over its label sets."""
    sums = {DRAFTS: 0.0, DRAFT_TOKENS: 0.0, ACCEPTED: 0.0}
    seen: set[str] = set()
    positions: dict[int, float] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line.startswith(PREFIX):   # comments, other metrics, blank lines
            continue
        match = SAMPLE.match(line)
        if match is None:
            raise MetricsError(f"{origin}, line {number}: not a Prometheus sample: {line[:80]!r}")
        name, labels, value = match.groups()
        if not name.endswith("_total"):   # the _created timestamps and anything else
            continue
        base = name.removesuffix("_total")
        try:
            count = float(value)
        except ValueError:
            raise MetricsError(f"{origin}, line {number}: {name} has the value {value!r}, not a number") from None
        if not math.isfinite(count) or count < 0:
            raise MetricsError(f"{origin}, line {number}: {name} is {value}; a counter is a finite count >= 0")
        if base == PER_POSITION:
            where = f"{origin}, line {number}"
            position = _labels(labels or "", where).get("position")
            if position is None or not position.isdigit():
                raise MetricsError(f"{where}: {name} without a position=\"k\" label")
            positions[int(position)] = positions.get(int(position), 0.0) + count
        elif base in sums:
            sums[base] += count
            seen.add(base)
    missing = [name + "_total" for name in sums if name not in seen]
    if missing:
        raise MetricsError(f"{origin} has no {', '.join(missing)}: not a /metrics text of a vLLM server running "
                           "speculative decoding (--speculative-config)")
    if not positions:
        raise MetricsError(f"{origin} has no {PER_POSITION}_total{{position=\"k\"}}: the per-position acceptance "
                           "needs a vLLM that exports it (0.8 or later)")
    if sorted(positions) != list(range(len(positions))):
        raise MetricsError(f"{origin}: {PER_POSITION}_total has positions {sorted(positions)}, not 0 to "
                           f"{len(positions) - 1}")
    return SpecDecodeCounters(sums[DRAFTS], sums[DRAFT_TOKENS], sums[ACCEPTED],
                              tuple(positions[k] for k in range(len(positions))))


def looks_like_metrics(path: Path) -> bool:
    """A file that is not JSON: its first non-blank character is neither ``{`` nor ``[``."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096).lstrip()
    except OSError:
        return False
    return not head.startswith((b"{", b"[")) and not str(path).lower().endswith(".json")


def read_counters(paths: list[str]) -> tuple[SpecDecodeCounters, str]:
    """One scrape's counters, or the difference of two (before, after); and their origin in words."""
    from specgauge import inputs

    if len(paths) not in (1, 2):
        raise MetricsError(f"--acceptance takes one /metrics text or two (before,after), got {len(paths)}")
    scrapes = []
    for path in paths:
        try:
            text = inputs.read_input_text(path, "vLLM /metrics text")
        except UsageError as exc:
            raise MetricsError(str(exc)) from None
        scrapes.append(parse_counters(text, f"vLLM /metrics {path!r}"))
    if len(scrapes) == 2:
        origin = f"vLLM /metrics {paths[1]!r} minus {paths[0]!r}"
        counters = scrapes[1].since(scrapes[0], origin)
    else:
        origin, counters = f"vLLM /metrics {paths[0]!r}", scrapes[0]
    if counters.drafts <= 0:
        raise MetricsError(f"{origin}: no drafts counted" + (" between the two scrapes" if len(paths) == 2 else "")
                           + "; run a load with speculation on first")
    per_pos = np.asarray(counters.accepted_per_pos, float)
    if np.any(np.diff(per_pos) > CONSISTENCY * counters.drafts):
        raise MetricsError(f"{origin}: accepted tokens rise with position ({per_pos.astype(int).tolist()}), "
                           "which vLLM's counters cannot do")
    if abs(per_pos.sum() - counters.accepted) > CONSISTENCY * max(counters.accepted, 1.0):
        raise MetricsError(f"{origin}: the per-position counts sum to {per_pos.sum():.0f} but "
                           f"{ACCEPTED}_total counts {counters.accepted:.0f}; scrape again when the server is idle")
    return counters, origin


def describe(counters: SpecDecodeCounters) -> str:
    """The counts and vLLM's figures from them, in words."""
    rates = ", ".join(f"{r:.3f}" for r in counters.per_position)
    return (f"{counters.drafts:,.0f} drafts of {counters.draft_tokens / counters.drafts:.3g} tokens, "
            f"{counters.accepted:,.0f} accepted: acceptance length {counters.acceptance_length:.4f} "
            f"(1 + accepted/drafts), acceptance rate {counters.acceptance_rate:.1%}, per position {rates} "
            "(accepted_k/drafts, made conditional)")
