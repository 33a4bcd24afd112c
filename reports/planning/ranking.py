"""``specgauge acceptance --plan``: rank the measured drafts by predicted speed-up at the user's batch sizes.

Each draft's measured acceptance is replayed request by request from the traces just
written (``PATH.jsonl:LABEL``, the same reader as ``plan --acceptance``), and its cost and
memory come from the simulator's profiles (a draft model profile, ``eagle``, ``mtp`` or
``ngram``, named per draft with ``--plan-draft LABEL=PROFILE``). The simulated rows go
to one CSV, and the decisions to a second one with ``plan``'s decision columns: ``plan``'s
own decisions per draft (best γ per batch size, break-even, the draft's memory cost)
and one ``draft_rank`` row per batch size and draft, best first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from specgauge.measurement.models import MeasurementInputError

from .decisions import DECISION_COLUMNS, SPEEDUP_METRIC, _decision, decide
from .slo import SLO

DRAFT_COLUMN = "measured_draft"


@dataclass(frozen=True)
class PlanSetting:
    """The deployment the ranking is for: GPU, target profile, drafts' profiles, load and lengths."""

    gpu: str
    target: str
    drafts: Mapping[str, str]            # measured label -> simulator draft (profile, eagle, mtp, ngram)
    batch_sizes: tuple[int, ...]
    gammas: tuple[int, ...]
    requests: int = 200
    prompt_len: int = 512
    output_len: int = 256
    seed: int = 0


def parse_plan_drafts(items: Sequence[str], labels: Sequence[str]) -> dict[str, str]:
    """``LABEL=PROFILE`` for each measured draft; a label not measured is refused."""
    out = {}
    for item in items:
        label, eq, profile = item.partition("=")
        if not eq or not profile:
            raise MeasurementInputError(f"--plan-draft {item!r}: expected LABEL=PROFILE (e.g. small=llama-3.2-1b)")
        if label not in labels:
            raise MeasurementInputError(f"--plan-draft {item!r}: no draft is labelled {label!r} "
                                       f"(drafts: {', '.join(labels)})")
        out[label] = profile
    if not out:
        raise MeasurementInputError("--plan needs --plan-draft LABEL=PROFILE for at least one draft "
                                   f"(drafts: {', '.join(labels)})")
    return out


def configs(setting: PlanSetting, traces: Path | None) -> list[tuple[str, object]]:
    """(label, SimulationConfig) for every draft, γ and batch size; with no traces yet, a placeholder
    acceptance, so that profiles and memory are refused before any measuring."""
    from specgauge.simulator import IIDAcceptance, SimulationConfig, memory_plan
    from specgauge.simulator.drafts import draft_kind
    from specgauge.simulator.replay import ReplayAcceptance

    from specgauge.errors import ConfigError

    out = []
    try:
        for label, profile in setting.drafts.items():
            replay = ReplayAcceptance.from_jsonl(traces, label) if traces is not None else IIDAcceptance(0.5)
            empty = 0.0 if draft_kind(profile) == "ngram" else None   # the trace holds the empty proposals
            for gamma in setting.gammas:
                for batch in setting.batch_sizes:
                    config = SimulationConfig(
                        gpu=setting.gpu, target=setting.target, draft=profile, gamma=gamma, acceptance=replay,
                        batch_size=batch, requests=setting.requests, prompt_len=setting.prompt_len,
                        output_len=setting.output_len, empty_proposals=empty, seed=setting.seed)
                    out.append((label, config))
        for _, config in out:
            memory_plan(config)
    except ConfigError as exc:
        raise MeasurementInputError(str(exc)) from None
    return out


def simulate_all(items: list[tuple[str, object]], progress=None) -> pd.DataFrame:
    from specgauge.simulator import simulate

    rows = []
    for label, config in items:
        rows.append({DRAFT_COLUMN: label, **simulate(config)})
        if progress is not None:
            progress(1)
    return pd.DataFrame(rows)


def rank_drafts(frame: pd.DataFrame, alpha: Mapping[str, float]) -> list[dict]:
    """Per batch size, every draft at its best γ, ranked by output-throughput speed-up (best first)."""
    out = []
    for batch, level in frame.groupby("batch_size", sort=True):
        best = level.loc[level.groupby(DRAFT_COLUMN)[SPEEDUP_METRIC].idxmax()]
        best = best.sort_values(SPEEDUP_METRIC, ascending=False, kind="stable")
        for rank, (_, row) in enumerate(best.iterrows(), 1):
            label = row[DRAFT_COLUMN]
            speedup = float(row[SPEEDUP_METRIC])
            detail = (f"rank {rank}: {label} ({row['draft']}) at γ={int(row['gamma'])}: {speedup:.3f}× output "
                      f"throughput (measured mean α {alpha.get(label, float('nan')):.3f}, {row['acceptance']})"
                      + ("" if speedup > 1.0 else "; does not pay: run without speculation"))
            out.append(_decision("draft_rank", f"{DRAFT_COLUMN}={label}", row, metric=SPEEDUP_METRIC, value=float(row["output_throughput"]),
                                 baseline=float(row["no_spec_output_throughput"]), speedup=speedup, detail=detail))
    return out


def decisions(frame: pd.DataFrame, alpha: Mapping[str, float]) -> pd.DataFrame:
    """``plan``'s decisions per measured draft, then the ranking rows."""
    own = decide(frame, [DRAFT_COLUMN, "gamma", "batch_size", "qps"], SLO())  # one scope per measured draft
    ranked = pd.DataFrame(rank_drafts(frame, alpha), columns=DECISION_COLUMNS)
    table = pd.concat([own, ranked], ignore_index=True) if len(own) else ranked
    for column in ("batch_size", "gamma"):
        table[column] = pd.to_numeric(table[column]).astype("Int64")
    return table


def ranking_lines(table: pd.DataFrame) -> list[str]:
    """One line per batch size: the drafts in order with their speed-ups."""
    lines = []
    ranks = table[table["decision"] == "draft_rank"]
    for batch, group in ranks.groupby("batch_size", sort=True):
        order = ", ".join(f"{r.scope.partition('=')[2]} (γ={int(r.gamma)}, {float(r.speedup):.2f}×)" for r in group.itertuples())
        lines.append(f"batch {int(batch)}: {order}")
    return lines
