"""``specgauge validate``: the planner against published measurements, in and out of sample.

Predicts every row of the shipped validation table (``reports/planning/data/validation.csv``)
with all the shipped constants (in-sample) and with each row's source left out (the
constants the table taught refitted without it), prints the share of predicted rows within
±15 % both ways, the coverage of the planner's 90 % intervals with each source held out
(with a binomial confidence interval) and the median half-width per group, and a table of
the rows. ``--add`` puts a team's own runs beside them: ``vllm bench serve --save-result``
or ``sglang.bench_serving`` results (``FILE.json:gpu=h100,target=llama-3.1-8b,tp=1``), or a
CSV in the table's schema.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np
import pandas as pd

from specgauge.csvio import resolve_csv_target, write_csv_atomic

from .console import say


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,  # a prefix is refused, never read as the option it begins (`--out`, `--output-len`)
        prog="specgauge validate",
        description="Predict the published measurements specgauge ships (and your own), in sample and with each "
                    "source left out; print the share within ±15 %, the coverage of the planner's intervals and "
                    "a table of the rows (about a minute on 2 cores).")
    parser.add_argument("--add", action="append", default=[], metavar="FILE",
                        help="your own rows: a `vllm bench serve --save-result` or `sglang.bench_serving` JSON as "
                             "FILE.json:gpu=NAME,target=NAME[,tp=N,dp=N,ep=N,draft=NAME,gamma=K,source=LABEL] (its "
                             "mean TPOT at its max concurrency is predicted), or a CSV in the shipped table's schema "
                             "(columns source, setup, measured, published, gpu, target, ...); repeatable")
    parser.add_argument("--allow-model-mismatch", action="store_true",
                        help="take an --add result whose model_id does not name its target= (the same model under "
                             "another name); refused otherwise")
    parser.add_argument("--level", type=float, default=0.9, help="nominal coverage of the intervals (default 0.9)")
    parser.add_argument("--csv", default=None, metavar="PATH",
                        help="write every held-out row with its interval to this CSV")
    parser.add_argument("--no-table", action="store_true", help="print the summary only")
    parser.add_argument("--knee-study", action="store_true",
                        help="instead: every row in sample at each knee of the datasheet prior (1, 1.5, 2, 3, 4, inf), "
                             "the ratios side by side (several minutes)")
    parser.add_argument("--mine", default=None, metavar="PATH",
                        help="write your --add rows with their residuals to PATH, for `specgauge plan --validation PATH`: "
                             "your own runs then set your intervals wherever they are enough for one")
    parser.add_argument("--write-residuals", default=None, metavar="PATH",
                        help="write the held-out residuals the planner's intervals are computed from (the shipped "
                             "reports/planning/data/residuals.csv is this file for the shipped table)")
    return parser


def _check_level(level: float) -> float:
    from specgauge.errors import UsageError

    if not (math.isfinite(level) and 0.5 <= level < 1):
        raise UsageError(f"--level must be in [0.5, 1), got {level!r}")
    return level


def held_out_intervals(folds: pd.DataFrame, residual_rows: pd.DataFrame, level: float,
                       table: pd.DataFrame | None = None) -> pd.DataFrame:
    """Each held-out row with the interval computed from the other sources' residuals alone, in
    its pool (figure, profile, kind, load band), and where its α came from."""
    from specgauge.reports.planning import validation as V
    from specgauge.reports.planning.intervals import figure_of

    table = V.shipped_table() if table is None else table
    rows = folds.assign(figure=[figure_of(m) for m in folds["measured"]],
                        alpha_from=[V.alpha_from(r, table) for _, r in folds.iterrows()])
    return V.with_held_out_intervals(rows, residual_rows, level)


def coverage_lines(rows: pd.DataFrame, level: float) -> list[str]:
    """Coverage overall and per pool (with the median half-width), on predicted rows."""
    from specgauge.reports.planning.intervals import LOAD_BANDS, load_band
    from specgauge.reports.planning.validation import binomial_interval

    predicted = rows[rows["role"] == "predicted"]
    hits, n = int(predicted["covered"].sum()), len(predicted)
    low, high = binomial_interval(hits, n)
    lines = [f"{level:.0%} intervals, each source held out: {hits} of {n} predicted rows covered ({hits / n:.0%}; "
             f"95 % CI {low:.0%}-{high:.0%})"]
    lines.append("  pool                                rows  sources  covered  median half-width")

    def line(label: str, group: pd.DataFrame) -> str:
        width = np.expm1(group["q"].replace(np.inf, np.nan)).median()
        return (f"  {label:<36}{len(group):>4}  {group['source'].nunique():>7}  {group['covered'].mean():>6.0%}  "
                + ("unbounded" if not np.isfinite(width) else f"±{width:.0%}"))

    bands = predicted["load"].map(load_band)
    figures = predicted["figure"] if "figure" in predicted else pd.Series("absolute", index=predicted.index)
    names = {"ratio": "speed-ups", "absolute": "absolute", "tail": "p99"}
    for (figure, kind, profile), group in predicted.assign(figure=figures).groupby(["figure", "kind", "profile"],
                                                                                    sort=True):
        lines.append(line(f"{names.get(figure, figure)}, {kind}, {profile} profile", group))
        for name, _ in LOAD_BANDS:   # the intervals' own pools, each with its load band
            inside = group[bands.loc[group.index] == name]
            if len(inside):
                lines.append(line(f"  batch {name}", inside))
    return lines


def pool_lines(residual_rows: pd.DataFrame, level: float) -> list[str]:
    """The half-widths the planner reads, per pool and load band, from every residual (a band
    too small for a finite quantile borrows from its parent pool, named in parentheses)."""
    from specgauge.reports.planning.intervals import FIGURE_WORDS, FIGURES, LOAD_BANDS, PROFILES, Group, band

    lines = [f"pools the planner reads ({level * 100:.0f} % half-widths from every residual; in parentheses the "
             f"pool a band too small borrows from):"]
    for figure in FIGURES:
        for profile in PROFILES:
            for kind in ("dense", "moe"):
                parts = []
                for name, _ in LOAD_BANDS:
                    b = band(Group(figure, profile, kind, name), level, residual_rows)
                    text = _half(b.half_width) if math.isfinite(b.q) else "unbounded"
                    if b.group_used != b.group:
                        text += f" ({b.group_used.label()})"
                    parts.append(f"batch {name} {text}")
                lines.append(f"  {FIGURE_WORDS[figure]}, {profile}, {kind}: " + "; ".join(parts))
    return lines


def _half(width: float) -> str:
    """A median half-width as printed: ``±16 %``, or ``unbounded``."""
    return f"±{width * 100:.0f} %" if np.isfinite(width) else "unbounded"


def path_lines(prior: pd.DataFrame, runs: pd.DataFrame, level: float) -> list[str]:
    """The two paths' figures: the prior path with a measured acceptance (each source held out)
    and the user-runs protocol (its own residuals, each source held out)."""
    from specgauge.reports.planning import validation as V

    lines = []
    tails = prior[prior["figure"] == "tail"]
    if len(tails):
        t = V.path_summary(tails)
        lines.append(f"p99 rows (TPOT, TTFT at a stated load), each source held out: {t['within']} of {t['n']} within "
                     f"±15 %; their {level * 100:.0f} % intervals (the p99 rows' own pool) cover {t['covered']} of "
                     f"{t['n']}; median half-width {_half(t['half_width'])}")
    p = V.path_summary(prior)
    lines.append(f"prior path, measured acceptance, each source held out: {p['within']} of {p['n']} rows within "
                 f"±15 % ({p['within'] / max(p['n'], 1):.0%}); {level * 100:.0f} % intervals cover {p['covered']} of {p['n']} "
                 f"({p['covered'] / max(p['n'], 1):.0%}); median speed-up half-width {_half(p['speedup_half_width'])} "
                 f"({p['speedups']} speed-ups); decisive {p['decisive']} of {p['clear']}")
    points = runs[runs["point"] != "speedup"]
    u = V.path_summary(points)
    speedups = V.path_summary(runs[runs["point"] == "speedup"])
    lines.append(f"user runs: {u['within']} of {u['n']} points within ±15 %; {level * 100:.0f} % intervals cover {u['covered']} "
                 f"of {u['n']}; median half-width {_half(u['half_width'])}; {u['curves']} curves from "
                 f"{u['sources']} sources")
    lines.append(f"decisive: {speedups['decisive']} of {speedups['clear']} (speed-ups published below 0.85 or above "
                 f"1.15 whose {level * 100:.0f} % interval excludes 1.0)")
    lines.append(f"  user runs' speed-ups: {speedups['within']} of {speedups['n']} within ±15 %; intervals cover "
                 f"{speedups['covered']} of {speedups['n']}; median half-width {_half(speedups['half_width'])}")
    return lines


def overload_lines(checks: pd.DataFrame, brackets: pd.DataFrame) -> list[str]:
    """The overloaded rows as a capacity question: how many the planner calls beyond one
    replica's capacity (each arm a row), each miss by name, and each published bracket of a
    capacity (stable at one rate, overloaded at the next) against the planner's search."""
    if not len(checks):
        return []
    beyond, n_sources = int(checks["beyond"].sum()), checks["source"].nunique()
    lines = [f"overloaded points (out of every steady-state pool): the planner called {beyond} of {len(checks)} beyond "
             f"one replica's capacity ({n_sources} source{'s' if n_sources != 1 else ''}, each arm a point)"]
    for _, miss in checks[~checks["beyond"]].iterrows():
        lines.append(f"  MISSED: {miss['id']} {miss['arm']}: {miss['qps']:g} requests/s published overloaded, the "
                     f"planner's capacity {miss['capacity_rps']:.3g} requests/s")
    for _, b in brackets.iterrows():
        lines.append(f"  published capacity bracket, {b['curve']} {b['arm']}: stable at {b['stable_qps']:g}, overloaded "
                     f"at {b['overloaded_qps']:g} requests/s; the planner's capacity {b['capacity_rps']:.3g} "
                     f"({'inside' if b['inside'] else 'outside'} the bracket)")
    return lines


def main(argv: list[str] | None = None) -> int:
    from specgauge.reports.planning import folds as F
    from specgauge.reports.planning import validation as V

    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    level = _check_level(args.level)
    if args.mine and not args.add:
        from specgauge.errors import UsageError

        raise UsageError("--mine writes your --add rows: give --add RUN.json:gpu=...,target=... (or rows.csv)")
    from specgauge.reports.planning.bench_results import check_added_results

    check_added_results(args.add, V.RESULT_OPTIONS, args.allow_model_mismatch)   # none twice, each of its target
    user = [V.rows_from_result(text) for text in args.add]     # every file read and checked before any work
    target = resolve_csv_target(args.csv, default_name="validation.csv") if args.csv else None
    published = V.shipped_table()
    table = V.steady_rows(published)   # the overloaded rows are a capacity question (overload_lines)
    if args.knee_study:
        say(V.markdown(V.knee_study(published)))   # a study of every row, not a pool
        return 0
    user_rows = pd.concat(user, ignore_index=True) if user else None
    started = time.perf_counter()
    say(f"specgauge validate: {len(published)} published rows from {published['source'].nunique()} sources"
        + (f" and {len(user_rows)} of yours" if user_rows is not None else "") + "; predicting each source with "
        "itself left out ...")
    import tempfile

    workdir = tempfile.mkdtemp(prefix="specgauge-validate-")
    estimates = F.fold_estimates(table, workdir)
    folds, shipped = F.loso(table, workdir=workdir, user=user_rows, estimates=estimates)
    runs = F.user_runs(table, workdir, estimates)
    published_folds = folds[folds["variant"] != "user"]
    residual_rows = V.residuals(published_folds, table, runs)
    rows = held_out_intervals(V.prior_path(published_folds), residual_rows, level, table)
    runs = V.with_held_out_intervals(runs, residual_rows[residual_rows["path"] == "user runs"], level)
    if args.write_residuals:
        residual_rows.to_csv(args.write_residuals, index=False)   # package data: no sidecar
        say(f"wrote {args.write_residuals}")
    if not args.no_table:
        main_rows = rows.set_index("id")
        view = shipped.set_index("id")
        display = pd.DataFrame({
            "setup": view["setup"], "source": view["source"], "published": view["published"].astype(float),
            "in sample": view["simulated"].astype(float).round(3),
            "held out": main_rows["simulated"].reindex(view.index).astype(float).round(3),
            "ratio": main_rows["ratio"].reindex(view.index).astype(float).round(3),
            f"{level:.0%} interval": [
                f"{lo:.3g}-{hi:.3g}" if np.isfinite(hi) else "unbounded" if np.isfinite(lo) else "—"
                for lo, hi in zip(main_rows["interval_lo"].reindex(view.index), main_rows["interval_hi"].reindex(view.index))],
            "role": view["role"]}).reset_index(drop=True)
        say(V.markdown(display))
        say()
    in_hit, in_n = V.share(shipped)
    out_hit, out_n = V.share(folds[folds["variant"] == "as published"])
    prior_hit, prior_n = V.share(V.prior_path(published_folds))
    say(f"in sample: {in_hit} of {in_n} predicted rows within ±15 % ({in_hit / in_n:.0%})")
    say(f"leave one source out: {out_hit} of {out_n} predicted rows within ±15 % ({out_hit / out_n:.0%}); on the "
        f"datasheet prior alone (no curve fitted on its own no-speculation points): {prior_hit} of {prior_n} "
        f"({prior_hit / prior_n:.0%})")
    by_figure = V.share_by_figure(folds[folds["variant"] == "as published"])
    (rel_hit, rel_n), (abs_hit, abs_n) = by_figure["relative"], by_figure["absolute"]
    say(f"  of which speed-ups and throughput ratios {rel_hit} of {rel_n} ({rel_hit / max(rel_n, 1):.0%}); absolute "
        f"figures (TPOT, throughput, latency) {abs_hit} of {abs_n} ({abs_hit / max(abs_n, 1):.0%})")
    predicted = rows[rows["role"] == "predicted"]
    for line in coverage_lines(predicted, level):
        say(line)
    measured = predicted[predicted["alpha_from"] != "other"]
    for line in pool_lines(residual_rows, level):
        say(line)
    for line in path_lines(measured, runs, level):
        say(line)
    for line in overload_lines(*F.overload_check(published, workdir, estimates)):
        say(line)
    borrowed = predicted[predicted["alpha_from"] == "other"]
    if len(borrowed):
        say(f"  ({len(borrowed)} held-out rows take α from another source's run and stay out of the prior path's "
            f"figures and of every pool: {', '.join(borrowed['id'])})")
    if args.mine and user_rows is not None:
        mine_rows = V.residuals(folds.iloc[:0], table, own=folds[folds["variant"] == "user"])
        mine_rows.to_csv(args.mine, index=False)
        say(f"wrote {args.mine}: {len(mine_rows)} of your rows with their residuals (plan --validation {args.mine})")
    if user_rows is not None:
        from specgauge.reports.planning.intervals import Group, band, figure_of, load_band

        mine = folds[folds["variant"] == "user"].copy()
        q = [band(Group(figure_of(r["measured"]), r["profile"], r["kind"], load_band(r["load"])), level,
                  residual_rows).q for _, r in mine.iterrows()]
        sim = mine["simulated"].astype(float)
        published = mine["published"].astype(float)
        inside = (published >= sim * np.exp(-np.array(q))) & (published <= sim * np.exp(np.array(q)))
        say()
        say(f"your rows: {int(((mine['ratio'] - 1).abs() <= V.WITHIN).sum())} of {len(mine)} within ±15 %, "
            f"{int(inside.sum())} of {len(mine)} inside their {level:.0%} interval")
        for (_, r), qq, ok in zip(mine.iterrows(), q, inside):
            say(f"  {r['setup']}: published {float(r['published']):.4g}, simulated {float(r['simulated']):.4g} "
                f"(ratio {float(r['ratio']):.3g}); interval {float(r['simulated']) * math.exp(-qq):.4g}-"
                f"{float(r['simulated']) * math.exp(qq):.4g} {'covers it' if ok else 'misses it'}")
    if target is not None:
        columns = ["id", "source", "path", "setup", "measured", "figure", "published", "simulated", "ratio", "kind",
                   "profile", "load", "interval_lo", "interval_hi", "covered"]
        both = pd.concat([rows.assign(path="prior path"), runs.assign(path="user runs")], ignore_index=True)
        write_csv_atomic(both[columns], target.path, {"command": "validate", "arguments": argv, "level": level})
        say(f"wrote {target.path}")
    say(f"done in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
