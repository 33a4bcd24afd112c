"""`specgauge plan`: sweep the simulator and turn the rows into a deployment decision.

The sweep writes one wide row per configuration (the configuration's own columns, then
vLLM's metric names). The decision summary answers what a team asks before switching
speculation on: which γ at each load level (for latency and for throughput), up to which
batch size or request rate it pays, the highest request rate that meets an SLO with and
without it, and how much concurrency the draft's memory costs.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from typing import Any, Sequence

import numpy as np
import pandas as pd

from specgauge.errors import SpecgaugeError

from .acceptance import AcceptanceSpec, parse_acceptance
from .csvio import CsvTarget, resolve_csv_target, specgauge_version, write_csv_atomic
from .slo import SLO, parse_slo
from .sweep import add_sweep_options, options_from_args, sweep_to_csv

#: The documented default scenario: the seed's deployment (Qwen3-32B, Qwen3-0.6B drafting,
#: γ = 5 among the alternatives) on one H200, saturated at each batch-size cap.
DEFAULT_SCENARIO = [
    "--gpu", "h200", "--target", "qwen3-32b", "--draft", "qwen3-0.6b", "--tp", "1",
    "--gamma", "0,1,2,3,4,5,6,8", "--batch-size", "1,2,4,8,16,32,64,128,256",
    "--requests", "400",
]

LOAD_COLUMNS = ("batch_size", "qps")
LATENCY_METRIC = "mean_tpot_ms"
THROUGHPUT_METRIC = "output_throughput"
SPEEDUP_METRIC = "speedup_vs_no_spec"
DECISION_COLUMNS = ["decision", "scope", "batch_size", "qps", "gamma", "metric", "value", "baseline", "speedup", "detail"]


class PlanError(SpecgaugeError):
    """The plan's options do not describe a sweep that can run."""


# --------------------------------------------------------------------------- decisions


def _scope_columns(frame: pd.DataFrame, config_columns: Sequence[str]) -> list[str]:
    """Configuration columns that vary in the sweep other than γ and the load axes."""
    skip = {"gamma", "policy", "acceptance", "alpha", "seed", "arrival", *LOAD_COLUMNS}  # arrival follows qps
    return [c for c in config_columns if c in frame and c not in skip and frame[c].nunique(dropna=False) > 1]


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


def _nan_to_none(value: Any) -> Any:
    return None if isinstance(value, float) and np.isnan(value) else value


def _decision(decision: str, scope: str, row: pd.Series | None = None, **fields: Any) -> dict[str, Any]:
    out = {c: None for c in DECISION_COLUMNS}
    out.update(decision=decision, scope=scope)
    if row is not None:
        out.update(batch_size=_nan_to_none(row.get("batch_size")), qps=_nan_to_none(row.get("qps")), gamma=int(row["gamma"]))
    out.update(fields)
    return out


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
                if float(ratios.max()) < 1.0:  # plain decoding wins; it is γ = 0 even if not swept
                    best = best.copy()
                    best["gamma"] = 0
                    value, ratio = baseline, 1.0
                else:
                    value, ratio = float(best[metric]), float(ratios.max())
                detail = f"γ={int(best['gamma'])}: {metric} {value:.4g} vs {baseline:.4g} without speculation"
                out.append(_decision(decision, scope, best, metric=metric, value=value, baseline=baseline,
                                     speedup=ratio, detail=detail))
    return out


def crossing(x: np.ndarray, speedup: np.ndarray, log: bool = True) -> tuple[float | None, str]:
    """Where ``speedup`` first falls to 1 along increasing ``x`` (interpolated), and how it ended.

    Returns (value, kind): kind is ``crossed``, ``always`` (pays at every x) or ``never``
    (does not pay even at the smallest x). The crossing is interpolated linearly in log x
    between the last point that pays and the first that does not.
    """
    order = np.argsort(x, kind="stable")
    x, s = np.asarray(x, float)[order], np.asarray(speedup, float)[order]
    below = np.flatnonzero(s <= 1.0)
    if below.size == 0:
        return None, "always"
    first = int(below[0])
    if first == 0:
        return None, "never"
    x0, x1, s0, s1 = x[first - 1], x[first], s[first - 1], s[first]
    t = (s0 - 1.0) / (s0 - s1) if s0 != s1 else 1.0
    if log and x0 > 0:
        return float(np.exp(np.log(x0) + t * (np.log(x1) - np.log(x0)))), "crossed"
    return float(x0 + t * (x1 - x0)), "crossed"


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
            first = group.sort_values(axis).iloc[0]
            lo, hi = group[axis].min(), group[axis].max()
            detail = {
                "crossed": f"γ={int(first['gamma'])} stops paying at {axis} ≈ {value:.3g}" if value else "",
                "always": f"γ={int(first['gamma'])} pays at every swept {axis} (up to {hi:g}); no crossing",
                "never": f"γ={int(first['gamma'])} does not pay even at {axis}={lo:g}",
            }[kind]
            row = _decision(name, scope, first, metric=SPEEDUP_METRIC, value=value, detail=detail)
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
    base["gamma"] = 0
    base["_met"] = slo.met(base)
    return base


def slo_capacity(frame: pd.DataFrame, scope_cols: list[str], slo: SLO) -> list[dict[str, Any]]:
    """Highest achieved request rate among configurations meeting the SLO, with and without speculation."""
    if not slo:
        return []
    frame = frame.assign(_met=slo.met(frame))
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
                out.append(_decision(decision, scope, metric="request_throughput", value=None,
                                     detail=f"no swept configuration meets the SLO ({slo})"))
                best[decision] = None
                continue
            top = candidates.loc[pd.to_numeric(candidates["request_throughput"]).idxmax()]
            best[decision] = float(top["request_throughput"])
            where = f"γ={int(top['gamma'])}, batch_size={top['batch_size']}" + (
                f", qps={top['qps']:g}" if pd.notna(top.get("qps")) else ", saturated")
            out.append(_decision(decision, scope, top, metric="request_throughput", value=best[decision],
                                 detail=f"{best[decision]:.4g} req/s meeting {slo} at {where}"))
        spec, base = best.get("max_slo_request_rate_spec"), best.get("max_slo_request_rate_no_spec")
        if spec and base:
            out[-2]["baseline"], out[-2]["speedup"] = base, spec / base
    return out


def draft_memory_cost(frame: pd.DataFrame, scope_cols: list[str]) -> list[dict[str, Any]]:
    """Concurrent sequences the draft's weights and KV cache take from the target's memory."""
    spec = frame[frame["gamma"] > 0]
    if not len(spec) or not {"max_concurrency", "max_concurrency_no_draft"} <= set(frame):
        return []
    out = []
    for skey, scoped in _groups(spec, scope_cols):
        row = scoped.iloc[0]
        with_draft, without = int(row["max_concurrency"]), int(row["max_concurrency_no_draft"])
        lost = without - with_draft
        share = lost / without if without else float("nan")
        out.append(_decision(
            "draft_concurrency_cost", _scope_label(skey, scope_cols), metric="max_concurrency",
            value=float(lost), baseline=float(without), speedup=None,
            detail=f"the draft costs {lost} of {without} concurrent sequences ({share:.0%}); {with_draft} remain"))
    return out


def decide(frame: pd.DataFrame, config_columns: Sequence[str], slo: SLO) -> pd.DataFrame:
    """All decisions as one long table (one decision per row; see the README for each)."""
    scope_cols = _scope_columns(frame, config_columns)
    rows = (best_gamma(frame, scope_cols) + breakeven(frame, scope_cols, "batch_size")
            + breakeven(frame, scope_cols, "qps") + slo_capacity(frame, scope_cols, slo)
            + draft_memory_cost(frame, scope_cols))
    decisions = pd.DataFrame(rows, columns=DECISION_COLUMNS)
    for column in ("batch_size", "gamma"):
        decisions[column] = pd.to_numeric(decisions[column]).astype("Int64")
    return decisions


def recommendation(decisions: pd.DataFrame) -> list[str]:
    """A few sentences a person can act on, built from the decision table."""
    lines = []
    for scope, group in decisions.groupby("scope", sort=False):
        head = "" if scope == "all" else f"[{scope}] "
        latency = group[group["decision"] == "best_gamma_latency"]
        if len(latency):
            first = latency.iloc[0]
            g = int(first["gamma"])
            load = (f"batch size {first['batch_size']:g}" if pd.notna(first["batch_size"]) else "")
            load += (f" at {first['qps']:g} req/s" if pd.notna(first["qps"]) else "")
            if g == 0:
                lines.append(f"{head}Recommendation: do not speculate; no γ beats plain decoding even at {load}.")
            else:
                cross = group[(group["decision"].str.startswith("breakeven")) & (group["gamma"] == g)]
                limit = ""
                if len(cross):
                    c = cross.iloc[0]
                    axis = "batch size" if c["decision"] == "breakeven_batch_size" else "request rate"
                    limit = (f"; it stops paying at {axis} ≈ {c['value']:.3g}, beyond which run without the draft"
                             if pd.notna(c["value"]) else f"; {c['detail']}")
                lines.append(f"{head}Recommendation: speculate with γ = {g} at low load "
                             f"({load}: TPOT {first['speedup']:.2f}× faster){limit}.")
        memory = group[group["decision"] == "draft_concurrency_cost"]
        if len(memory):
            lines.append(f"{head}Memory: {memory.iloc[0]['detail']}.")
        for _, r in group[group["decision"].str.startswith("max_slo")].iterrows():
            who = "with speculation" if r["decision"].endswith("_spec") else "without speculation"
            lines.append(f"{head}SLO {who}: {r['detail']}.")
    return lines


def _summary_table(decisions: pd.DataFrame) -> str:
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
    if (table.index.get_level_values("scope") == "all").all():
        table = table.droplevel("scope")
    return table.to_string(float_format=lambda v: f"{v:.2f}")


# --------------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    from .options import add_simulation_options

    parser = argparse.ArgumentParser(
        prog="specgauge plan",
        description="Sweep the serving simulator over γ, batch caps, request rates, drafts and GPUs, "
        "write one CSV row per configuration and a decision summary. With no arguments: the "
        "default scenario (Qwen3-32B, Qwen3-0.6B drafting, one H200).",
    )
    add_simulation_options(parser, sweep=True)  # includes --csv: the sweep's CSV (default reports/plan.csv)
    group = parser.add_argument_group("plan")
    group.add_argument("--slo", nargs="+", default=None, metavar="METRIC:MS",
                       help="service-level objectives as vllm bench serve --goodput takes them, e.g. ttft:200 tpot:50")
    group.add_argument("--acceptance", default=None, metavar="SPEC",
                       help="acceptance instead of --alpha: one α, a per-position list (0.9,0.8,0.7), a profile "
                       "name from fixtures/workloads, or a `vllm bench serve --save-result` JSON")
    group.add_argument("--plot", action="store_true", help="write the PNG figures beside the CSV")
    add_sweep_options(parser)
    return parser


def _acceptance_override(args: argparse.Namespace) -> AcceptanceSpec | None:
    if args.acceptance is None:
        return None
    if args.alpha is not None:
        raise PlanError("--alpha and --acceptance contradict each other: give one (--acceptance also takes a single α)")
    return parse_acceptance(args.acceptance)


def _check_not_empty(args: argparse.Namespace) -> None:
    """A swept option given as '' or ',' is an empty sweep, not a default."""
    from .options import given_options

    for opt in given_options(args):
        if not [part for part in str(getattr(args, opt.dest)).split(",") if part.strip()]:
            raise PlanError(f"empty sweep: {opt.flag} was given no values")


def plan_configs(args: argparse.Namespace, acceptance: AcceptanceSpec | None) -> list[Any]:
    from specgauge.simulator import ConfigError

    from .options import configs_from_args

    try:
        configs = configs_from_args(args, acceptance=acceptance.to_model() if acceptance else None)
    except ConfigError as exc:
        raise PlanError(str(exc)) from None
    if not configs:
        raise PlanError("empty sweep: every swept option needs at least one value")
    return configs


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    default_scenario = not argv
    parser = build_parser()
    args = parser.parse_args(DEFAULT_SCENARIO if default_scenario else argv)
    if default_scenario:
        args.plot = importlib.util.find_spec("matplotlib") is not None
        if not args.plot:
            print("specgauge plan: matplotlib is not installed, so no figures: pip install 'specgauge[plot]'")
        print("specgauge plan: no arguments, running the default scenario: " + " ".join(DEFAULT_SCENARIO))
    slo = parse_slo(args.slo)
    _check_not_empty(args)
    acceptance = _acceptance_override(args)
    options = options_from_args(args)
    options.resolved_executor()
    configs = plan_configs(args, acceptance)
    target: CsvTarget = resolve_csv_target(args.csv, default_name="plan.csv")
    if args.plot:
        from .plots import _pyplot

        _pyplot()  # refuse --plot without matplotlib before the sweep, not after

    from specgauge.simulator import simulate

    columns = [c.columns() for c in configs]
    config_columns = list(columns[0])
    alphas = sorted({c.acceptance.label() for c in configs})
    source = acceptance.source if acceptance else (
        f"--alpha {args.alpha}" if args.alpha is not None else f"simulator default {', '.join(alphas)}; calibrate with --acceptance")
    metadata = {
        "command": "plan",
        "arguments": argv if not default_scenario else DEFAULT_SCENARIO,
        "acceptance_source": source,
        "slo": str(slo),
        "configurations": len(configs),
    }
    started = time.perf_counter()
    frame, resumed = sweep_to_csv(
        simulate, configs, target,
        signature_payload={"command": "plan", "configurations": columns, "version": specgauge_version()},
        metadata=metadata, options=options, restart=args.restart,
        describe=lambda c: " ".join(f"{k}={v}" for k, v in c.columns().items() if k in ("gamma", "batch_size", "qps", "draft", "gpu")),
    )
    elapsed = time.perf_counter() - started
    print(f"wrote {target.path}: {len(frame)} configurations in {elapsed:.1f} s"
          + (f" ({resumed} resumed from an interrupted run)" if resumed else ""))

    decisions = decide(frame, config_columns, slo)
    decision_path = target.sibling("decision")
    write_csv_atomic(decisions, decision_path, {**metadata, "source_csv": target.path.name})
    print(f"wrote {decision_path}: {len(decisions)} decisions (acceptance: {source})")
    table = _summary_table(decisions)
    if table:
        print("\nBest γ per load level (speed-up: TPOT for latency, output throughput for throughput):")
        print(table)
    print()
    for line in recommendation(decisions):
        print(line)
    if args.plot:
        from .plots import plot_plan

        for path in plot_plan(frame, target.path):
            print(f"wrote {path}")
    return 0
