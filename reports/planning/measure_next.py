"""Name the next measurement: which run a user can make, and how far it would narrow a decision.

A plan's best γ at a load is decided on point predictions, but its speed-up interval may be
too wide to act on ("γ 5 {any}": every γ, γ 0 included, overlaps it). The interval's width
comes from what the planner was given (``reports.planning.intervals``): α's own term (the
draft kind's published range while α is a placeholder) and the residual pool of the step
model (the datasheet prior, a step model calibrated on own runs without speculation, or
those runs plus one speculative run with its acceptance). Each measurement below moves the
plan up that ladder:

* a scrape of the server's ``/metrics`` around a run, or ``specgauge acceptance`` on one's
  own prompts: a measured acceptance; α's range becomes the measurement's own spread, the
  binomial 90 % interval at the draft tokens it counts (sampling alone: a workload unlike
  the measured one is not covered);
* ``vllm bench serve --max-concurrency N --save-result`` without speculation at the lowest
  and the highest load, then ``specgauge calibrate``: the calibrated pool;
* the same runs and one speculative run at the lowest load: the user-runs pool, with α
  measured by that run.

"After" is simulated by the planner's own path for that level: the same rows through
``intervals.add_intervals`` as it would run once the information is in, then
``decisions.best_gamma`` on them, so the after-interval is the one ``plan`` would print.
It assumes the measurement returns the figures the plan holds now (the point does not
move; only what the interval rests on changes). A measurement that would not narrow an
interval is listed too, with its after-interval equal to the interval now.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import pandas as pd

from .decisions import _groups, _runs, _scope_columns, _scope_label, best_gamma
from .intervals import LEVEL, add_intervals

#: the CSV's columns, the first seven as the plan documents them
MEASURE_NEXT_COLUMNS = ["decision", "measurement", "command", "interval_lo", "interval_hi", "after_lo", "after_hi",
                        "scope", "batch_size", "qps", "gamma", "interval_gamma", "speedup", "gammas_within",
                        "after_gammas_within", "narrowing"]
#: requests a measurement run sends (``vllm bench serve --num-prompts``; prompts × samples offline)
NUM_PROMPTS = 200
#: what a row's step model source says once it is calibrated on own runs (``intervals.row_group``
#: reads every source not beginning "datasheet prior" as calibrated)
CALIBRATED_SOURCE = "calibrated on own runs (simulated for measure-next)"


@dataclass(frozen=True)
class Knowledge:
    """What the planner is given: a calibrated step model, a measured acceptance, and whether that
    acceptance was counted over ``NUM_PROMPTS`` requests of the rows' lengths (its binomial spread
    is then α's term; otherwise, as for a typed-in α, none is added)."""

    calibrated: bool = False
    alpha_measured: bool = False
    alpha_sampled: bool = False


@dataclass(frozen=True)
class Measurement:
    """A run a user can make, the command for it, and what the planner knows after it."""

    name: str
    command: str
    after: Knowledge


def measured_alpha_spread(alpha: float, draft_tokens: float, level: float = LEVEL) -> tuple[float, float]:
    """The exact (Clopper-Pearson) ``level`` interval of α counted over ``draft_tokens`` drafts."""
    from scipy.stats import binomtest

    n = max(int(draft_tokens), 1)
    k = min(max(int(round(alpha * n)), 0), n)
    ci = binomtest(k, n).proportion_ci(confidence_level=level)
    return float(ci.low), float(ci.high)


def _draft_tokens(rows: pd.DataFrame) -> float:
    """Draft tokens a measurement of NUM_PROMPTS requests counts at these rows' γ: rounds × γ, rounds =
    output tokens / the accepted length."""
    first = rows.iloc[0]
    gamma = float(first.get("gamma") or 0)
    length = pd.to_numeric(pd.Series([first.get("expected_acceptance_length")]), errors="coerce").iloc[0]
    length = float(length) if np.isfinite(length) and length > 0 else 1.0 + gamma / 2
    return NUM_PROMPTS * float(first.get("output_len") or 256) * gamma / length


def intervals_at(frame: pd.DataFrame, knowledge: Knowledge, profiles: str | None = None) -> pd.DataFrame:
    """``frame``'s rows with the intervals the planner gives at ``knowledge``: the planner's own
    ``intervals.add_intervals``, the step model marked calibrated where the knowledge says so,
    α's spread per (α, γ) group where the acceptance is measured over a known sample."""
    rows = frame.copy()
    if knowledge.calibrated and "step_model_source" in rows:
        prior = rows["step_model_source"].astype(str).str.startswith("datasheet prior")
        rows.loc[prior, "step_model_source"] = CALIBRATED_SOURCE
    if not (knowledge.alpha_measured and knowledge.alpha_sampled and {"alpha", "gamma"} <= set(rows)):
        return add_intervals(rows, alpha_measured=knowledge.alpha_measured, profiles=profiles)
    parts = []
    for (alpha, gamma), group in rows.groupby([rows["alpha"].fillna(-1.0), rows["gamma"]], sort=False):
        spread = None
        if gamma > 0 and 0.0 <= alpha <= 1.0:
            spread = measured_alpha_spread(float(alpha), _draft_tokens(group))
        parts.append(add_intervals(group, alpha_measured=True, alpha_spread=spread, profiles=profiles))
    return pd.concat(parts).loc[rows.index]


def _now(frame: pd.DataFrame, alpha_measured: bool) -> Knowledge:
    calibrated = "step_model_source" in frame and not frame["step_model_source"].astype(str).str.startswith(
        "datasheet prior").any()
    return Knowledge(calibrated=bool(calibrated), alpha_measured=alpha_measured)


def _plan_again(argv: Sequence[str], acceptance: str | None = None, profiles: str | None = None) -> str:
    """``specgauge plan`` as the user ran it, with the measured acceptance in place of ``--alpha``
    and the calibrated profile added to any ``--profiles`` given."""
    args, given, skip = [], None, 0
    for i, arg in enumerate(argv):
        if skip:
            skip -= 1
            continue
        name = arg.split("=", 1)[0]
        if acceptance is not None and name in ("--alpha", "--acceptance"):
            skip = 0 if "=" in arg else 1
            continue
        if profiles is not None and name == "--profiles":
            given = arg.split("=", 1)[1] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else "")
            skip = 0 if "=" in arg else 1
            continue
        args.append(arg)
    if profiles is not None:
        args += ["--profiles", f"{given},{profiles}" if given else profiles]
    if acceptance is not None:
        args += ["--acceptance", acceptance]
    return shlex.join(["specgauge", "plan", *args])


def bench_command(lengths: tuple[int, int], load: Sequence[str], result: str, server: str = "$SERVER",
                  prompts: int = NUM_PROMPTS) -> str:
    """A ``vllm bench serve`` run of ``lengths`` (prompt, output) at ``load`` (its flags:
    ``--max-concurrency N`` or ``--request-rate R``); ``$SERVER`` serves without speculation,
    ``$SPEC_SERVER`` with it (the plan's draft and γ)."""
    return shlex.join(["vllm", "bench", "serve", "--base-url", server, "--model", "$MODEL", "--dataset-name", "random",
                       "--random-input-len", str(int(lengths[0])), "--random-output-len", str(int(lengths[1])),
                       "--num-prompts", str(prompts), *load,
                       "--save-result", "--result-filename", result]).replace(f"'{server}'", server) \
        .replace("'$MODEL'", "$MODEL")


def _bench(row: pd.Series, concurrency: int, result: str, server: str = "$SERVER") -> str:
    """A closed-loop run at ``concurrency`` of the row's lengths (512 and 256 where it has none)."""
    lengths = (int(row.get("prompt_len") or 512), int(row.get("output_len") or 256))
    return bench_command(lengths, ["--max-concurrency", str(concurrency)], result, server)


def measurements(frame: pd.DataFrame, argv: Sequence[str], now: Knowledge) -> list[Measurement]:
    """The runs a user can make from where the plan stands; those already made are left out."""
    first = frame.iloc[0]
    caps = pd.to_numeric(frame.get("batch_size"), errors="coerce").dropna()
    low, high = (int(caps.min()), int(caps.max())) if len(caps) else (1, 256)
    gpu, target = str(first.get("gpu")), str(first.get("target"))
    out = []
    if not now.alpha_measured:
        scrape = " && ".join(["curl -s $SPEC_SERVER/metrics > before.txt", _bench(first, low, "spec.json", "$SPEC_SERVER"),
                              "curl -s $SPEC_SERVER/metrics > after.txt",
                              _plan_again(argv, acceptance="before.txt,after.txt")])
        out.append(Measurement("the acceptance in the server's /metrics around a speculative run", scrape,
                               replace(now, alpha_measured=True, alpha_sampled=True)))
        if str(first.get("draft_kind")) in ("model", "ngram"):
            draft = "ngram" if str(first.get("draft_kind")) == "ngram" else "draft=$DRAFT_DIR"
            label = "ngram" if draft == "ngram" else "draft"
            offline = " && ".join([shlex.join(["specgauge", "acceptance", "--target", "$TARGET_DIR", "--draft", draft,
                                               "--prompts", "prompts.jsonl", "--samples", "4", "--max-new-tokens",
                                               str(int(first.get("output_len") or 256))]).replace("'", ""),
                                   _plan_again(argv, acceptance=f"specgauge-out/acceptance.jsonl:{label}")])
            out.append(Measurement("the draft's acceptance on your prompts", offline,
                                   replace(now, alpha_measured=True, alpha_sampled=True)))
    calibrate = ["specgauge", "calibrate", "--gpu", gpu, "--target", target, "--tp", str(int(first.get("tp") or 1)),
                 "--serve", f"nospec-{low}.json", "--serve", f"nospec-{high}.json"]
    if not now.calibrated:
        runs = [_bench(first, low, f"nospec-{low}.json"), _bench(first, high, f"nospec-{high}.json"),
                shlex.join([*calibrate, "--out", "mine.toml"]), _plan_again(argv, profiles="mine.toml")]
        out.append(Measurement(f"no-speculation runs at concurrency {low} and {high}",
                               " && ".join(runs), replace(now, calibrated=True)))
    if not (now.calibrated and now.alpha_measured):
        spec_run = _bench(first, low, f"spec-{low}.json", "$SPEC_SERVER")
        if now.calibrated:   # the step model is the user's already: the run's acceptance is what it adds
            runs, what = [spec_run, _plan_again(argv, f"spec-{low}.json")], f"a speculative run at concurrency {low}"
        else:
            draft = str(first.get("draft") or first.get("draft_kind") or "model")
            runs = [_bench(first, low, f"nospec-{low}.json"), _bench(first, high, f"nospec-{high}.json"), spec_run,
                    shlex.join([*calibrate, "--serve", f"spec-{low}.json:draft={draft}", "--out", "mine.toml"]),
                    _plan_again(argv, f"spec-{low}.json", "mine.toml")]
            what = f"no-speculation runs at concurrency {low} and {high} and a speculative run at {low}"
        out.append(Measurement(what, " && ".join(runs),
                               Knowledge(calibrated=True, alpha_measured=True, alpha_sampled=True)))
    return out


def _key(row: dict) -> tuple:
    return tuple(None if v is None or (isinstance(v, float) and math.isnan(v)) else v
                 for v in (row["decision"], row["scope"], row["batch_size"], row["qps"]))


def _width(lo: float, hi: float) -> float:
    return math.log(hi / lo) if lo > 0 and math.isfinite(hi) else math.inf


def measure_next(frame: pd.DataFrame, config_columns: Sequence[str], argv: Sequence[str], alpha_measured: bool,
                 profiles: str | None = None) -> pd.DataFrame:
    """One row per (best-γ decision with an interval, measurement): the speed-up interval now and
    after the measurement, as ``plan`` would print it; ``narrowing`` = 1 − after width / width now
    (in log units)."""
    scope_cols = _scope_columns(frame, config_columns)
    now_rows = {k: r for k, r in _decisions(frame, scope_cols).items() if r.get("speedup_lo") is not None}
    knowledge = _now(frame, alpha_measured)
    after_by_level: dict[Knowledge, dict[tuple, dict]] = {}
    out = []
    for skey, scoped in _groups(frame, scope_cols):   # commands name each scope's own GPU, target and draft
        scope = _scope_label(skey, scope_cols)
        if not any(v["scope"] == scope for v in now_rows.values()):   # nothing to narrow here
            continue
        for measurement in measurements(scoped, argv, knowledge):
            if measurement.after not in after_by_level:   # one pass of the planner's path per level
                after_by_level[measurement.after] = _decisions(intervals_at(frame, measurement.after, profiles),
                                                               scope_cols)
            after_rows = after_by_level[measurement.after]
            out += _rows(measurement, {k: v for k, v in now_rows.items() if v["scope"] == scope}, after_rows)
    table = pd.DataFrame(out, columns=MEASURE_NEXT_COLUMNS)
    for column in ("batch_size", "gamma", "interval_gamma"):
        table[column] = pd.to_numeric(table[column]).astype("Int64")
    order = {name: i for i, name in enumerate(dict.fromkeys(table["measurement"]))}   # per decision, as listed
    keys = table.assign(_m=table["measurement"].map(order))
    return table.loc[keys.sort_values(["scope", "batch_size", "qps", "decision", "_m"], kind="stable").index] \
        .reset_index(drop=True)


RATIO_COLUMNS = {"best_gamma_latency": "tpot_speedup_vs_no_spec", "best_gamma_throughput": "speedup_vs_no_spec"}


def _decisions(frame: pd.DataFrame, scope_cols: list[str]) -> dict[tuple, dict]:
    """``best_gamma``'s decisions, keyed, each with the speed-up interval the decision turns on
    (``interval_gamma``): the best γ's own, or, where plain decoding is best (γ 0, exact by
    construction), that of the speculative γ nearest to beating it."""
    rows = {_key(r): dict(r, interval_gamma=r["gamma"]) for r in best_gamma(frame, scope_cols)}
    plain = [k for k, r in rows.items() if int(r["gamma"]) == 0 or r.get("speedup_lo") is None]
    if not plain:
        return rows
    for skey, scoped in _groups(frame[frame["gamma"] > 0], scope_cols):
        scope = _scope_label(skey, scope_cols)
        for _, level in _groups(scoped, [c for c in ("batch_size", "qps") if c in scoped]):
            first = level.iloc[0]
            for decision, column in RATIO_COLUMNS.items():
                key = _key({"decision": decision, "scope": scope, "batch_size": first.get("batch_size"),
                            "qps": first.get("qps")})
                if key not in plain or f"{column}_lo" not in level:
                    continue
                ratios = pd.to_numeric(level[column], errors="coerce")
                if ratios.isna().all():
                    continue
                best = level.loc[ratios.idxmax()]
                rows[key].update(interval_gamma=int(best["gamma"]), speedup_lo=float(best[f"{column}_lo"]),
                                 speedup_hi=float(best[f"{column}_hi"]))
    return rows


def _rows(measurement: Measurement, now_rows: dict[tuple, dict], after_rows: dict[tuple, dict]) -> list[dict]:
    """The table's rows of one measurement: each decision's interval now and after it."""
    out = []
    for key, now in now_rows.items():
        after = after_rows.get(key)
        if after is None or after.get("speedup_lo") is None:
            continue
        width_now = _width(now["speedup_lo"], now["speedup_hi"])
        width_after = _width(after["speedup_lo"], after["speedup_hi"])
        if math.isfinite(width_now):
            narrowing = 1.0 - width_after / width_now if width_now > 0 else 0.0
        else:   # unbounded now: any bound is all the narrowing there is
            narrowing = 1.0 if math.isfinite(width_after) else 0.0
        out.append({"decision": now["decision"], "measurement": measurement.name, "command": measurement.command,
                    "interval_lo": now["speedup_lo"], "interval_hi": now["speedup_hi"],
                    "after_lo": after["speedup_lo"], "after_hi": after["speedup_hi"],
                    "scope": now["scope"], "batch_size": now["batch_size"], "qps": now["qps"],
                    "gamma": now["gamma"], "interval_gamma": now["interval_gamma"], "speedup": now["speedup"],
                    "gammas_within": now["gammas_within"],
                    "after_gammas_within": after["gammas_within"], "narrowing": narrowing})
    return out


def write_measure_next(frame: pd.DataFrame, config_columns: Sequence[str], argv: Sequence[str], alpha_measured: bool,
                       profiles: str | None, path, metadata: dict) -> list[str]:
    """``plan_measure_next.csv`` through the project's CSV writer, and the console's lines."""
    from specgauge.csvio import write_csv_atomic

    table = measure_next(frame, config_columns, argv, alpha_measured, profiles)
    write_csv_atomic(table, path, metadata)
    line = best_line(table, str(path))
    return [line or f"wrote {path}: no best-γ decision with an interval to narrow"]


def _count(gammas: object) -> int:
    return len(str(gammas).split(",")) if isinstance(gammas, str) and gammas else 1


def best_row(table: pd.DataFrame) -> pd.Series | None:
    """The measurement that leaves the fewest γ the interval cannot tell apart, then narrows most:
    per measurement the γ removed and the narrowing summed over decisions; its row where it narrows
    most."""
    if not len(table):
        return None
    removed = table["gammas_within"].map(_count) - table["after_gammas_within"].map(_count)
    scored = table.assign(_removed=removed)
    totals = scored.groupby("measurement", sort=False)[["_removed", "narrowing"]].sum()
    best = totals.sort_values(["_removed", "narrowing"], ascending=False, kind="stable").index[0]
    rows = scored[scored["measurement"] == best]
    return rows.sort_values(["_removed", "narrowing"], ascending=False, kind="stable").iloc[0].drop("_removed")


def _set(gammas: object, swept: set[int]) -> str:
    """``{any}`` or ``{1-6,8}``, as the plan's summary table writes the γ within an interval."""
    return "{" + (_runs(gammas, swept) if isinstance(gammas, str) and gammas else "") + "}"


def best_line(table: pd.DataFrame, csv_name: str = "plan_measure_next.csv") -> str | None:
    """The console's one line: what to measure next, what it narrows, and the command."""
    row = best_row(table)
    if row is None:
        return None
    if row["narrowing"] <= 0.0:
        return ("Measure next: no listed measurement narrows a best-γ interval further (each rests on the residual "
                f"pool it has); {csv_name} lists them")
    swept = {0} | {int(g) for text in table["gammas_within"].dropna() for g in str(text).split(",")}
    metric = "TPOT" if row["decision"].endswith("latency") else "throughput"
    where = f"batch cap {int(row['batch_size'])}" if pd.notna(row["batch_size"]) else "this load"
    if pd.notna(row["qps"]):
        where += f" @ {row['qps']:g} req/s"
    sets = ""
    if isinstance(row["gammas_within"], str) and "," in row["gammas_within"]:
        sets = f"; γ {_set(row['gammas_within'], swept)} → {_set(row['after_gammas_within'], swept)}"
    whose = f"γ {int(row['interval_gamma'])}'s {metric} speed-up"
    whose = f"no speculation is best at {where}; the nearest, {whose}," if int(row["gamma"]) == 0 else \
        f"{whose} at {where}"
    return (f"Measure next: {row['measurement']}: {whose} [{row['interval_lo']:.2f}, {row['interval_hi']:.2f}] now, "
            f"[{row['after_lo']:.2f}, {row['after_hi']:.2f}] after{sets}. Run: {_command_words(row['command'], csv_name)}")


def _command_words(command: str, csv_name: str) -> str:
    """A short command as it is; a chain of several as the steps it takes, the whole in the CSV."""
    steps = command.split(" && ")
    if len(command) <= 160:
        return command
    names = ["scrape /metrics" if "/metrics" in step else " ".join(step.split()[:3 if step.startswith("vllm") else 2])
             for step in steps]
    counted = ", ".join(f"{n} ×{names.count(n)}" if names.count(n) > 1 else n for n in dict.fromkeys(names))
    return f"{counted} (the commands: {csv_name})"
