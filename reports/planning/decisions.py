"""The plan's decisions, read off the simulated rows: what a team asks before switching speculation on.

Which γ at each load level (for latency and for throughput), up to which batch size or
request rate it pays (the break-even), the highest request rate that meets an SLO with
and without it, and how much concurrency the draft's memory costs; then a few sentences
a person can act on, each read off the decision table.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from specgauge.simulator.breakeven import break_even_from_table, crossing  # noqa: F401 (crossing: the plan's too)
from specgauge.simulator.metrics import STABLE_SERVED_FRACTION

from .slo import SLO

LOAD_COLUMNS = ("batch_size", "qps")
LATENCY_METRIC = "mean_tpot_ms"
THROUGHPUT_METRIC = "output_throughput"
SPEEDUP_METRIC = "speedup_vs_no_spec"
DECISION_COLUMNS = ["decision", "scope", "batch_size", "qps", "gamma", "metric", "value", "baseline", "speedup", "detail",
                    "shape", "value_lo", "value_hi", "speedup_lo", "speedup_hi", "gammas_within"]


def _bounds(row: pd.Series, column: str) -> tuple[float | None, float | None]:
    """A figure's interval ends (``reports.planning.intervals``: ``<column>_lo``/``_hi``), or None."""
    lo, hi = row.get(f"{column}_lo"), row.get(f"{column}_hi")
    if lo is None or hi is None or pd.isna(lo) or pd.isna(hi):
        return None, None
    return float(lo), float(hi)


def _within(level: pd.DataFrame, best: pd.Series, ratio_column: str) -> str | None:
    """The γ whose speed-up interval overlaps the best one's: the set the data cannot tell apart
    from the best (γ = 0 in it when the best's lower end is at most 1)."""
    lo, _ = _bounds(best, ratio_column)
    if lo is None:
        return None
    his = pd.to_numeric(level.get(f"{ratio_column}_hi"), errors="coerce")
    gammas = sorted({int(g) for g, hi in zip(level["gamma"], his) if pd.notna(hi) and hi >= lo})
    if lo <= 1.0:
        gammas = sorted({0, *gammas})
    return ",".join(str(g) for g in gammas)


def _scope_columns(frame: pd.DataFrame, config_columns: Sequence[str]) -> list[str]:
    """Configuration columns that vary in the sweep other than γ, the tree (the shape a decision
    picks) and the load axes: every decision is made per value of each, α, policy and seed
    included, so no swept option is collapsed into its most favourable value. ``alpha``
    follows ``acceptance`` and ``arrival`` follows ``qps``, so they are not named twice."""
    skip = {"gamma", "tree", "arrival", *LOAD_COLUMNS}
    if "acceptance" in config_columns and "acceptance" in frame:
        skip.add("alpha")
    return [c for c in config_columns if c in frame and c not in skip and frame[c].nunique(dropna=False) > 1]


def _stable(frame: pd.DataFrame, prefix: str = "") -> pd.Series:
    """Rows whose queue kept up with the arrivals (``simulator.metrics.stability``); a frame
    without the column (an older CSV) counts every row as stable."""
    column = f"{prefix}stable"
    if column not in frame:
        return pd.Series(True, index=frame.index)
    values = frame[column]
    return values.map(lambda v: str(v).strip().lower() in ("true", "1", "1.0")) if values.dtype == object else \
        values.fillna(False).astype(bool)


def _scope_label(key: Any, columns: list[str]) -> str:
    if not columns:
        return "all"
    key = key if isinstance(key, tuple) else (key,)
    return " ".join(f"{c}={v}" for c, v in zip(columns, key))


def _groups(frame: pd.DataFrame, columns: list[str]):
    if not columns:
        yield (), frame
        return
    yield from frame.groupby(columns, dropna=False, sort=False)


def _unstable_note(row: pd.Series) -> str:
    """``; unstable run (...)`` when a decision rests on a run whose queue did not keep up."""
    if bool(_stable(pd.DataFrame([row])).iloc[0]):
        return ""
    return (f"; an unstable run (served {float(row['served_fraction']):.0%} of the offered rate): its latencies "
            "describe the run's length, not the service")


def _nan_to_none(value: Any) -> Any:
    return None if isinstance(value, float) and np.isnan(value) else value


def _decision(decision: str, scope: str, row: pd.Series | None = None, **fields: Any) -> dict[str, Any]:
    out = {c: None for c in DECISION_COLUMNS}
    out.update(decision=decision, scope=scope)
    if row is not None:
        out.update(batch_size=_nan_to_none(row.get("batch_size")), qps=_nan_to_none(row.get("qps")), gamma=int(row["gamma"]),
                   shape=draft_shape(row))
    out.update(fields)
    return out


def draft_shape(row: pd.Series) -> str:
    """What a row drafts: ``none``, ``chain γ=4`` or ``tree topk:4x5``."""
    tree = row.get("tree")
    if int(row["gamma"]) == 0:
        return "none"
    return f"tree {tree}" if isinstance(tree, str) and tree != "none" else f"chain γ={int(row['gamma'])}"


def best_gamma(frame: pd.DataFrame, scope_cols: list[str]) -> list[dict[str, Any]]:
    """Per load level: the γ with the lowest mean TPOT and the one with the highest throughput.

    Every simulated row carries its own paired no-speculation baseline (``no_spec_*``), so
    γ = 0 competes even when the sweep does not list it: when no swept γ beats it, the
    answer is γ = 0. Ties go to the smaller γ.
    """
    out = []
    for skey, scoped in _groups(frame, scope_cols):
        scope = _scope_label(skey, scope_cols)
        for _, level in _groups(scoped, [c for c in LOAD_COLUMNS if c in scoped]):
            level = level.sort_values("gamma", kind="stable")
            for decision, metric, ratio_column in (("best_gamma_latency", LATENCY_METRIC, "tpot_speedup_vs_no_spec"),
                                                   ("best_gamma_throughput", THROUGHPUT_METRIC, SPEEDUP_METRIC)):
                ratios = pd.to_numeric(level[ratio_column], errors="coerce")
                if ratios.isna().all():
                    continue
                best = level.loc[ratios.idxmax()]
                baseline = float(best[f"no_spec_{metric}"])
                within = _within(level, best, ratio_column)
                bounds = {}
                if float(ratios.max()) < 1.0:  # plain decoding wins; it is γ = 0 even if not swept
                    best = best.copy()
                    best["gamma"] = 0
                    value, ratio = baseline, 1.0
                else:
                    value, ratio = float(best[metric]), float(ratios.max())
                    (bounds["value_lo"], bounds["value_hi"]), (bounds["speedup_lo"], bounds["speedup_hi"]) = \
                        _bounds(best, metric), _bounds(best, ratio_column)
                detail = f"{draft_shape(best)}: {metric} {value:.4g} vs {baseline:.4g} without speculation" + (
                    f"; γ in {{{within}}} within the interval" if within and "," in within else "") + _unstable_note(best)
                out.append(_decision(decision, scope, best, metric=metric, value=value, baseline=baseline,
                                     speedup=ratio, detail=detail, gammas_within=within, **bounds))
    return out


def breakeven(frame: pd.DataFrame, scope_cols: list[str], axis: str) -> list[dict[str, Any]]:
    """Per γ > 0 (and per value of the other load axis): where the speed-up crosses 1 along ``axis``."""
    other = [c for c in LOAD_COLUMNS if c != axis and c in frame]
    spec = frame[(frame["gamma"] > 0) & frame[axis].notna()]
    if spec[axis].nunique() < 2:
        return []
    out = []
    name = "breakeven_batch_size" if axis == "batch_size" else "breakeven_request_rate"
    for skey, scoped in _groups(spec, scope_cols):
        scope = _scope_label(skey, scope_cols)
        for _, group in _groups(scoped, other + ["gamma"]):
            value, kind = crossing(group[axis].to_numpy(float), group[SPEEDUP_METRIC].to_numpy(float))
            ends = _crossing_range(group, axis, SPEEDUP_METRIC)
            ordered = group.sort_values(axis)
            first, last = ordered.iloc[0], ordered.iloc[-1]
            lo, hi = group[axis].min(), group[axis].max()
            detail = {
                "crossed": f"γ={int(first['gamma'])} stops paying at {axis} ≈ {value:.3g}" if value else "",
                "always": f"γ={int(first['gamma'])} pays at every swept {axis} (up to {hi:g}); no crossing",
                "never": f"γ={int(first['gamma'])} does not pay even at {axis}={lo:g}",
            }[kind]
            row = _decision(name, scope, first, metric=SPEEDUP_METRIC, value=value,
                            speedup=float(last[SPEEDUP_METRIC]), detail=detail + _range_words(ends, axis), **ends)
            row[axis] = None
            out.append(row)
    return out


def _crossing_range(group: pd.DataFrame, axis: str, metric: str) -> dict[str, float | None]:
    """Where the speed-up interval's lower and upper ends cross 1 along ``axis``: the range of
    loads up to which speculation pays, within the interval (None: that end never crosses)."""
    if f"{metric}_lo" not in group:
        return {}
    loads = group[axis].to_numpy(float)
    out = {}
    for key, column in (("value_lo", f"{metric}_lo"), ("value_hi", f"{metric}_hi")):
        value, kind = crossing(loads, pd.to_numeric(group[column], errors="coerce").to_numpy(float))
        out[key] = value if kind == "crossed" else (float(loads.min()) if kind == "never" else None)
    return out


def _range_words(ends: dict[str, float | None], axis: str) -> str:
    if not ends:
        return ""
    lo, hi = ends.get("value_lo"), ends.get("value_hi")
    upper = f"{hi:.3g}" if hi is not None else "beyond the sweep"
    return f" (90 % interval: {lo:.3g} to {upper})" if lo is not None else " (90 % interval: beyond the sweep)"


SPEC_BREAKEVEN = {"batch_size": ("spec_breakeven_batch_size", SPEEDUP_METRIC, "batch size"),
                  "qps": ("spec_breakeven_request_rate", "tpot_speedup_vs_no_spec", "request rate")}


def speculation_breakeven(frame: pd.DataFrame, scope_cols: list[str], axis: str) -> list[dict[str, Any]]:
    """Per configuration (and per value of the other load axis): the load where the best γ's
    speed-up falls to 1, with the best γ below it and the γ that loses least above it
    (``simulator.breakeven``). Along the batch cap the speed-up is output throughput's; along
    the request rate it is mean TPOT's (under a rate, throughput follows the arrivals)."""
    name, metric, words = SPEC_BREAKEVEN[axis]
    other = [c for c in LOAD_COLUMNS if c != axis and c in frame]
    spec = frame[(frame["gamma"] > 0) & frame[axis].notna()]
    if spec[axis].nunique() < 2 or metric not in spec:
        return []
    out = []
    for skey, scoped in _groups(spec, scope_cols):
        scope = _scope_label(skey, scope_cols)
        for _, group in _groups(scoped, other):
            table = group.pivot_table(index=axis, columns="gamma", values=metric, aggfunc="max")
            if len(table) < 2:
                continue
            answer = break_even_from_table(words, table.index.to_numpy(float), [int(g) for g in table.columns],
                                           table.to_numpy(float))
            first = group.iloc[0]
            ends = {}
            if f"{metric}_lo" in group:   # the best γ's interval ends, crossed like the speed-up itself
                best = group.groupby(axis)[[f"{metric}_lo", f"{metric}_hi"]].max().reset_index()
                ends = _crossing_range(best, axis, metric)
            row = _decision(name, scope, first, metric=metric, value=answer.load, speedup=answer.best_speedup[-1],
                            detail=answer.describe() + _range_words(ends, words), **ends)
            row.update(gamma=answer.gamma_below if answer.gamma_below is not None else 0, shape=None)
            row[axis] = None
            out.append(row)
    return out


def _paired_baseline(frame: pd.DataFrame, slo: SLO) -> pd.DataFrame:
    """γ = 0 rows rebuilt from each row's paired ``no_spec_*`` columns, when they cover the SLO."""
    needed = [o.column for o in slo.objectives] + ["request_throughput"]
    if not all(f"no_spec_{c}" in frame for c in needed):
        return frame.iloc[:0]
    base = frame.drop_duplicates([c for c in ("batch_size", "qps") if c in frame] + [f"no_spec_{c}" for c in needed]).copy()
    for column in needed:
        base[column] = base[f"no_spec_{column}"]
        for end in ("_lo", "_hi"):   # the baseline's own interval, where the rows carry one
            if f"no_spec_{column}{end}" in base:
                base[f"{column}{end}"] = base[f"no_spec_{column}{end}"]
            elif f"{column}{end}" in base:
                base = base.drop(columns=f"{column}{end}")
    base["gamma"] = 0
    base["_met"] = slo.met(base) & _stable(base, "no_spec_")
    if "no_spec_stable" in base:
        base["stable"] = base["no_spec_stable"]
    return base


def slo_capacity(frame: pd.DataFrame, scope_cols: list[str], slo: SLO) -> list[dict[str, Any]]:
    """Highest achieved request rate among configurations meeting the SLO, with and without speculation.

    Only a stable run meets an SLO: an overloaded one serves fewer requests than arrive,
    and its latencies grow with the run's length (``simulator.metrics.stability``)."""
    if not slo:
        return []
    frame = frame.assign(_met=slo.met(frame) & _stable(frame))
    if not (frame["gamma"] == 0).any():
        frame = pd.concat([frame, _paired_baseline(frame, slo)], ignore_index=True)
    out = []
    for skey, scoped in _groups(frame, scope_cols):
        scope = _scope_label(skey, scope_cols)
        best: dict[str, float | None] = {}
        for decision, mask in (("max_slo_request_rate_spec", scoped["gamma"] > 0),
                               ("max_slo_request_rate_no_spec", scoped["gamma"] == 0)):
            candidates = scoped[mask & scoped["_met"]]
            if not len(scoped[mask]):
                if decision.endswith("no_spec"):
                    out.append(_decision(decision, scope, metric="request_throughput", value=None,
                                         detail="not compared: the simulator's paired baseline lacks a column of this "
                                         "SLO; add 0 to --gamma"))
                continue
            if not len(candidates):
                unstable = int((~_stable(scoped[mask])).sum())
                why = (f"; {unstable} of {int(mask.sum())} ran unstable (served below "
                       f"{STABLE_SERVED_FRACTION:.0%} of the offered rate, or the queue grew)" if unstable else "")
                out.append(_decision(decision, scope, metric="request_throughput", value=None,
                                     detail=f"no swept configuration meets the SLO ({slo}) with a stable queue{why}"))
                best[decision] = None
                continue
            top = candidates.loc[pd.to_numeric(candidates["request_throughput"]).idxmax()]
            best[decision] = float(top["request_throughput"])
            where = f"γ={int(top['gamma'])}, batch_size={top['batch_size']}" + (
                f", qps={top['qps']:g}" if pd.notna(top.get("qps")) else ", saturated")
            lo, hi = _bounds(top, "request_throughput")
            span = f" (interval {lo:.4g}-{hi:.4g})" if lo is not None else ""
            out.append(_decision(decision, scope, top, metric="request_throughput", value=best[decision],
                                 detail=f"{best[decision]:.4g} req/s{span} meeting {slo} at {where}",
                                 value_lo=lo, value_hi=hi))
        spec, base = best.get("max_slo_request_rate_spec"), best.get("max_slo_request_rate_no_spec")
        if spec and base:
            out[-2]["baseline"], out[-2]["speedup"] = base, spec / base
    return out


def _memory_why(row: pd.Series) -> str:
    """Why the draft costs what it does: its weights on each GPU come out of the KV cache's room
    (with DP attention every rank holds the whole head), its own KV cache takes the rest."""
    weights = float(row.get("draft_weight_gib") or 0.0)
    if weights <= 0:
        return ": its KV cache and the lookahead tokens each request reserves"
    dp = int(row.get("dp", 1) or 1)
    where = (f" (every one of the {dp} DP-attention ranks holds the whole {row.get('draft')} head at TP "
             f"{int(row.get('draft_tp') or row.get('tp') or 1)})" if dp > 1 else "")
    return f": its weights, {weights:.1f} GiB on each GPU{where}, come out of the KV cache's room"


def draft_memory_cost(frame: pd.DataFrame, scope_cols: list[str]) -> list[dict[str, Any]]:
    """Concurrent sequences the draft's weights and KV cache take from the target's memory.

    ``batch_size`` is the smallest swept batch cap the remaining concurrency cannot hold
    (where the draft's memory binds), empty when no swept cap reaches it.
    """
    spec = frame[frame["gamma"] > 0]
    if not len(spec) or not {"max_concurrency", "max_concurrency_no_draft"} <= set(frame):
        return []
    out = []
    for skey, scoped in _groups(spec, scope_cols):
        row = scoped.iloc[0]
        with_draft, without = int(row["max_concurrency"]), int(row["max_concurrency_no_draft"])
        lost = without - with_draft
        share = lost / without if without else float("nan")
        caps = pd.to_numeric(scoped["batch_size"])
        binding = caps[caps > with_draft]
        binds_at = int(binding.min()) if len(binding) else None
        where = (f"it binds from batch cap {binds_at}" if binds_at is not None
                 else f"no swept batch cap reaches {with_draft}, so it does not bind here")
        decision = _decision(
            "draft_concurrency_cost", _scope_label(skey, scope_cols), metric="max_concurrency",
            value=float(lost), baseline=float(without), speedup=None,
            detail=f"the draft's memory leaves room for {with_draft} of {without} concurrent sequences "
                   f"({lost} lost, {share:.0%}{_memory_why(row)}); {where}")
        decision["batch_size"] = binds_at
        out.append(decision)
    return out


def beyond_measured(rows: list[dict[str, Any]], note: Callable[[int], str | None]) -> list[dict[str, Any]]:
    """Per scope, where a best γ drafts past the positions whose acceptance was measured: one
    row saying which γ, at which loads, and what the unmeasured positions rest on (``note(γ)``).
    Each such best-γ row's ``detail`` says it too."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        if not row["decision"].startswith("best_gamma") or not row.get("gamma"):
            continue
        text = note(int(row["gamma"]))
        if text is None:
            continue
        row["detail"] += f"; {text}"
        load = "batch cap " + _load_label(pd.Series(row))
        entry = out.setdefault(row["scope"], _decision("acceptance_beyond_measured", row["scope"], metric="gamma",
                                                       detail="", gamma=int(row["gamma"])))
        entry["gamma"] = max(int(entry["gamma"]), int(row["gamma"]))
        entry.setdefault("_loads", {}).setdefault(int(row["gamma"]), []).append(load)
    for entry in out.values():
        loads = entry.pop("_loads")
        entry["detail"] = "; ".join(
            f"γ = {g} (best at {', '.join(dict.fromkeys(where))}) rests on {note(g)}" for g, where in sorted(loads.items()))
    return list(out.values())


def decide(frame: pd.DataFrame, config_columns: Sequence[str], slo: SLO,
           beyond_note: Callable[[int], str | None] | None = None) -> pd.DataFrame:
    """All decisions as one long table (one decision per row; see the README for each).

    ``beyond_note(γ)``, when acceptance was measured at fewer positions than a swept γ,
    says what the unmeasured positions rest on; a best γ beyond them says so."""
    scope_cols = _scope_columns(frame, config_columns)
    rows = (best_gamma(frame, scope_cols) + breakeven(frame, scope_cols, "batch_size")
            + breakeven(frame, scope_cols, "qps") + speculation_breakeven(frame, scope_cols, "batch_size")
            + speculation_breakeven(frame, scope_cols, "qps") + slo_capacity(frame, scope_cols, slo)
            + draft_memory_cost(frame, scope_cols))
    if beyond_note is not None:
        rows += beyond_measured(rows, beyond_note)
    decisions = pd.DataFrame(rows, columns=DECISION_COLUMNS)
    for column in ("batch_size", "gamma"):
        decisions[column] = pd.to_numeric(decisions[column]).astype("Int64")
    return decisions


def _load_label(row: pd.Series) -> str:
    parts = []
    if pd.notna(row["batch_size"]):
        parts.append(f"{int(row['batch_size'])}")
    if pd.notna(row["qps"]):
        parts.append(f"{row['qps']:g} req/s")
    return " @ ".join(parts)


def _gamma_by_load(best: pd.DataFrame) -> str:
    """``γ = 8 at batch cap 1–8, γ = 4 at 16–32, …``: runs of consecutive load levels with one γ."""
    runs: list[tuple[int, list[str]]] = []
    for _, row in best.iterrows():
        g = int(row["gamma"])
        if runs and runs[-1][0] == g:
            runs[-1][1].append(_load_label(row))
        else:
            runs.append((g, [_load_label(row)]))
    text = [f"γ = {g}" + (" (no speculation)" if g == 0 else "") + " at "
            + (labels[0] if len(labels) == 1 else f"{labels[0]}–{labels[-1]}") for g, labels in runs]
    return ", ".join(text)


def _stops_paying(group: pd.DataFrame, decision: str, axis: str) -> str | None:
    """Where speculation as a whole stops paying: the largest break-even over γ along ``axis``."""
    rows = group[group["decision"] == decision]
    if not len(rows):
        return None
    still = rows[rows["value"].isna() & (pd.to_numeric(rows["speedup"]) > 1.0)]
    if len(still):
        best = still.loc[pd.to_numeric(still["speedup"]).idxmax()]
        return (f"Speculation still pays at the largest swept {axis} (γ = {int(best['gamma'])}: "
                f"{float(best['speedup']):.2f}×); it does not stop paying within this sweep.")
    crossed = rows[rows["value"].notna()]
    if not len(crossed):
        return f"Speculation does not pay at any swept {axis}: run without the draft."
    last = crossed.loc[pd.to_numeric(crossed["value"]).idxmax()]
    lo, hi = (None if pd.isna(v) else float(v) for v in (last.get("value_lo"), last.get("value_hi")))
    span = "" if lo is None else (f", between {lo:.3g} and {hi:.3g} within the interval" if hi is not None
                                  else f", from {lo:.3g} to beyond the sweep within the interval")
    return (f"Speculation as a whole stops paying at {axis} ≈ {float(last['value']):.3g}{span} "
            f"(γ = {int(last['gamma'])} is the last to break even); beyond it, run without the draft.")


def recommendation(decisions: pd.DataFrame) -> list[str]:
    """A few sentences a person can act on, each read off the decision table.

    Per scope: the best γ at each load level (for TPOT, and for throughput where it
    differs), the largest break-even over γ (beyond which no γ pays), the draft's memory
    cost and where it binds, and the SLO capacities.
    """
    lines = []
    for scope, group in decisions.groupby("scope", sort=False):
        head = "" if scope == "all" else f"[{scope}] "
        latency = group[group["decision"] == "best_gamma_latency"]
        throughput = group[group["decision"] == "best_gamma_throughput"]
        if len(latency):
            axis = "batch cap @ request rate" if latency["qps"].notna().any() else "batch cap"
            by_latency = _gamma_by_load(latency)
            by_throughput = _gamma_by_load(throughput) if len(throughput) else by_latency
            if by_latency == by_throughput:
                lines.append(f"{head}Best γ by load ({axis}): {by_latency}.")
            else:
                lines.append(f"{head}Best γ by load ({axis}) for TPOT: {by_latency}.")
                lines.append(f"{head}Best γ by load ({axis}) for throughput: {by_throughput}.")
        for decision, axis in (("breakeven_batch_size", "batch size"), ("breakeven_request_rate", "request rate")):
            line = _stops_paying(group, decision, axis)
            if line:
                lines.append(head + line)
        for _, r in group[group["decision"].str.startswith("spec_breakeven")].iterrows():
            lines.append(f"{head}Break-even load: {r['detail']}.")
        memory = group[group["decision"] == "draft_concurrency_cost"]
        if len(memory):
            lines.append(f"{head}Memory: {memory.iloc[0]['detail']}.")
        for _, r in group[group["decision"].str.startswith("max_slo")].iterrows():
            who = "without speculation" if r["decision"].endswith("_no_spec") else "with speculation"
            lines.append(f"{head}SLO {who}: {r['detail']}.")
        for _, r in group[group["decision"] == "acceptance_beyond_measured"].iterrows():
            lines.append(f"{head}Acceptance beyond what was measured: {r['detail']}.")
    return lines


def _runs(gammas: str, swept: set[int]) -> str:
    """``0-6,8`` for ``0,1,2,3,4,5,6,8``; ``any`` when it is every γ the table names, 0 included."""
    values = sorted(int(g) for g in gammas.split(","))
    if set(values) >= swept:
        return "any"
    runs: list[list[int]] = []
    for g in values:
        if runs and g == runs[-1][-1] + 1:
            runs[-1].append(g)
        else:
            runs.append([g])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ",".join(map(str, r)) for r in runs)


def summary_table(decisions: pd.DataFrame) -> str:
    best = decisions[decisions["decision"].isin(["best_gamma_latency", "best_gamma_throughput"])]
    if not len(best):
        return ""
    table = best.pivot_table(index=["scope", "batch_size", "qps"], columns="decision", values=["gamma", "speedup"],
                             aggfunc="first", dropna=False) if best["qps"].notna().any() else \
        best.pivot_table(index=["scope", "batch_size"], columns="decision", values=["gamma", "speedup"], aggfunc="first")
    table.columns = [f"{'γ' if a == 'gamma' else 'speed-up'} ({b.removeprefix('best_gamma_')})" for a, b in table.columns]
    table = table.dropna(how="all")
    for column in table.columns:
        if column.startswith("γ"):
            table[column] = table[column].astype("Int64")
    if best["speedup_lo"].notna().any():   # each speed-up with its interval, each γ with the γ it cannot be told from
        swept = {0} | {int(g) for text in best["gammas_within"].dropna() for g in str(text).split(",")}
        index = ["scope", "batch_size", "qps"] if best["qps"].notna().any() else ["scope", "batch_size"]
        keyed = best.set_index(index + ["decision"])
        for column in list(table.columns):
            kind = "best_gamma_" + column.split("(")[1].rstrip(")")
            rows = [keyed.loc[(*(key if isinstance(key, tuple) else (key,)), kind)] if
                    (*(key if isinstance(key, tuple) else (key,)), kind) in keyed.index else None for key in table.index]
            if column.startswith("speed-up"):
                table[column] = [f"{v:.2f} [{r['speedup_lo']:.2f}, {r['speedup_hi']:.2f}]"
                                 if r is not None and pd.notna(r["speedup_lo"]) else ("" if pd.isna(v) else f"{v:.2f}")
                                 for v, r in zip(table[column], rows)]
            else:
                table[column] = [f"{v} {{{_runs(r['gammas_within'], swept)}}}" if r is not None and
                                 isinstance(r["gammas_within"], str) and "," in r["gammas_within"] else str(v)
                                 for v, r in zip(table[column], rows)]
    if (table.index.get_level_values("scope") == "all").all():
        table = table.droplevel("scope")
    return table.to_string(float_format=lambda v: f"{v:.2f}")
