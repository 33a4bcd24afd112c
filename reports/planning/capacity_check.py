"""The run that settles a fleet size: one replica at the share of the rate the answer gives it.

``plan --rate`` sizes a fleet on the capacity a replica holds, and that capacity's interval is
wide: no published row gives a capacity, so it borrows a request rate's residuals. A capacity
read off runs far below the engine's cap is optimistic, too (docs/validation.md, "Runs past
capacity": the planner put a published server's capacity at 10.6 requests/s, which its own runs
show past the cap at 6). So the measurement that decides the answer is not another run that
narrows the step model, but the answer itself, tried: one replica of the chosen configuration
sent its share of the rate, ``rate × (1 + headroom) ÷ replicas``. If it keeps up (served at
least 98 % of the rate, its wait not growing, the SLO met: the planner's own ``stable``), the
capacity is at least that share and the answer's count is enough: the GPU interval's upper end
comes down to the answer. If it does not, the answer is short; the next count up is the one to
try. The lower end stays: keeping up at the share says nothing of what more a replica holds.
"""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from .capacity import Sizing, answers
from .measure_next import MEASURE_NEXT_COLUMNS, bench_command

#: requests the check sends: long enough for a queue that grows to show, as ``plan --rate``'s own runs
CHECK_PROMPTS = 1000
#: the CSV's columns: measure-next's first seven, then what the check is of
CHECK_COLUMNS = [*MEASURE_NEXT_COLUMNS[:7], "scope", "speculation", "layout", "batch_size", "request_rate",
                 "replicas", "node_gpus"]


def check_command(row: pd.Series, rate: float, lengths: tuple[int, int]) -> str:
    """``vllm bench serve`` at ``rate`` requests a second (Poisson) against one replica: ``$SPEC_SERVER``
    with the row's draft and γ, ``$SERVER`` without speculation; the row's lengths where the sweep
    varies them, else the plan's (``lengths``: prompt, output)."""
    server = "$SERVER" if row["speculation"] == "none" else "$SPEC_SERVER"
    own = (row.get("prompt_len", lengths[0]), row.get("output_len", lengths[1]))
    return bench_command(own, ["--request-rate", f"{rate:.4g}"], "rate-check.json", server, CHECK_PROMPTS)


def rate_checks(table: pd.DataFrame, sizing: Sizing, lengths: tuple[int, int],
                world: Sequence[str] = ()) -> pd.DataFrame:
    """One row per answer (per value of the world's swept options, with and without speculation):
    the sizing table's cheapest configuration that meets the SLO, the run that checks it, its GPUs'
    interval now (``interval_lo``/``_hi``) and once the replica keeps up at its share (``after_``)."""
    rows = []
    for scope, label, _, row in answers(table, world):
        if row is None:
            continue
        share = sizing.sized_rate / (float(row["replicas"]) - sizing.spare)
        rows.append({
            "decision": f"GPUs for {sizing.rate:g} req/s {label}" + (f" ({scope})" if scope else ""),
            "measurement": f"one replica of {row['layout']} ({row['speculation']}, batch cap {int(row['batch_size'])}) "
                           f"at {share:.4g} req/s, its share of the rate",
            "command": check_command(row, share, lengths),
            "interval_lo": row["node_gpus_lo"], "interval_hi": row["node_gpus_hi"],
            "after_lo": row["node_gpus_lo"], "after_hi": min(row["node_gpus"], row["node_gpus_hi"]),
            "scope": scope, "speculation": row["speculation"], "layout": row["layout"],
            "batch_size": int(row["batch_size"]), "request_rate": share, "replicas": row["replicas"],
            "node_gpus": row["node_gpus"]})
    return pd.DataFrame(rows, columns=CHECK_COLUMNS)


def check_line(checks: pd.DataFrame, slo: str, csv_name: str) -> str | None:
    """The console's line: the check of the first answer with speculation (else without)."""
    if not len(checks):
        return None
    spec = checks[checks["speculation"] != "none"]
    row = (spec if len(spec) else checks).iloc[0]
    meets = f" and meets {slo}" if slo else ""
    now = f"{row['interval_lo']:.0f}–{row['interval_hi']:.0f}"
    return (f"Measure next: {row['measurement']}{' (' + row['scope'] + ')' if row['scope'] else ''}: if it serves at "
            f"least 98 % of them with a queue that does not grow{meets}, {row['node_gpus']:.0f} GPUs are enough "
            f"({now} now, {row['after_lo']:.0f}–{row['after_hi']:.0f} after); if not, the answer is short. Run: "
            f"{row['command']} (every answer's check: {csv_name})")
