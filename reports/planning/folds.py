"""Each source held out: the constants the table taught the simulator refitted without it, and
the rows and user-runs curves predicted on them (``specgauge validate``).

The layer above ``validation`` (the table and one row's simulation) and ``step_fits`` (the
per-source estimates of the shipped constants): both read rows, this module folds them.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import replace

import numpy as np
import pandas as pd

from specgauge.reports.planning.validation import (FIT_SOURCE, TIME_UNITS, _draft_kind, _e2e, _speedup_of, alpha_for_length,
                                                    calibrate_alpha, evaluate, fitted_profile, overloaded_rows,
                                                    resolve_moe, row_config, simulated_value, speedup, steady_rows)


def pass_overhead_estimates(table: pd.DataFrame, workdir: str | None = None) -> dict[str, list[float]]:
    """An EAGLE or MTP head's batch-1 pass in target layers (``GPU.draft_pass_layers``), as each
    source's batch-1 head rows and [1]'s per-round fit give it (``step_fits``)."""
    from specgauge.reports.planning.step_fits import draft_pass_layer_estimates

    return draft_pass_layer_estimates(table, workdir)


def moe_factor_estimates(table: pd.DataFrame, workdir: str | None = None) -> dict[str, list[float]]:
    """The MoE per-token factor (``GPU.moe_token_factor``) each source's MoE rows under load imply
    on the datasheet prior, whole curves with and without speculation (``step_fits``)."""
    from specgauge.reports.planning.step_fits import moe_curve_estimates

    return moe_curve_estimates(table, workdir)


FIXED_FIELDS = ("moe_layer_overhead_us", "mla_layer_overhead_us")


def _overrides(path: str, values: dict[str, float]) -> str:
    """A profile file setting ``values`` on every known GPU."""
    from specgauge.simulator.profiles import known_gpus

    with open(path, "w") as handle:
        handle.write("".join(f'[gpus."{g}"]\n' + "".join(f"{k} = {v!r}\n" for k, v in values.items())
                             for g in known_gpus()))
    return path


def fixed_cost_estimates(table: pd.DataFrame, workdir: str | None = None) -> dict[str, dict[str, list[float]]]:
    """The per-layer fixed costs (µs) each published batch-1 time of a MoE deployment without
    speculation implies, per source: ``moe_layer_overhead_us`` from MoE targets without MLA, then
    ``mla_layer_overhead_us`` from MLA targets with the MoE layer's median held. Each is the value
    at which the row's simulated time equals the published one (two simulations; the time is
    linear in the constant), never below 0."""
    from specgauge.simulator.core import resolve

    workdir = workdir or tempfile.mkdtemp(prefix="specgauge-fixed-")
    rows = table[(table["gamma"].isin(["0", ""])) & (table["batch_size"] == "1")
                 & table["measured"].isin(["tpot_ms", "duration_s", "output_throughput"])]
    out: dict[str, dict[str, list[float]]] = {name: {} for name in FIXED_FIELDS}
    held: dict[str, float] = {}
    for name in FIXED_FIELDS:
        for _, row in rows.iterrows():
            target = resolve(row_config(row)).target
            if not target.is_moe or (name == "mla_layer_overhead_us") != target.is_mla:
                continue
            def seconds(x: float) -> float:
                path = _overrides(os.path.join(workdir, f"fixed-{row['id']}-{name}-{x:g}.toml"), {**held, name: x})
                value = simulated_value(row, row_config(row, path), None)
                return 1.0 / value if row["measured"] == "output_throughput" else value
            published = float(row["published"])
            published = 1.0 / published if row["measured"] == "output_throughput" else published
            lo, hi = seconds(0.0), seconds(100.0)
            x = max(0.0, 100.0 * (published - lo) / (hi - lo)) if hi > lo else 0.0
            out[name].setdefault(row["source"], []).append(x)
        held[name] = median_of_sources(out[name])
    return out


def median_of_sources(estimates: dict[str, list[float]], held_out: str | None = None) -> float:
    """The median over sources (each source's rows averaged first) of a per-layer constant; 0 without any."""
    values = [float(np.mean(v)) for src, v in estimates.items() if src != held_out]
    return float(np.median(values)) if values else 0.0


def fold_profile(held_out: str, path: str, passes: dict[str, list[float]], moe: dict[str, list[float]],
                 fixed: dict[str, dict[str, list[float]]] | None = None) -> str:
    """A profile file holding every constant the table taught the simulator, refitted without ``held_out``.

    A head pass in target layers is the median over the other sources; the MoE per-token factor
    the median over the other sources of what their rows under load imply (in log factor).
    Without [1], its fits of Llama-3.1-8B and its EAGLE-3 head give way to the datasheet prior
    (the head at the fold's layers a pass), and the eager draft layer's launch cost read off its
    cost ratios to the graphed layer's. The prior's bandwidth and FLOP fractions, also read off
    [1]'s fit, stay: no other source times a dense pass."""
    from specgauge.reports.planning.step_fits import fold_values, head_fit_text
    from specgauge.simulator.cost import PassCost
    from specgauge.simulator.profiles import known_gpus, load_gpu, load_model

    layers = fold_values(passes, held_out)
    factor = fold_values(moe, held_out, geometric=True)
    text = ""
    for gpu in known_gpus():
        text += f'[gpus."{gpu}"]\n'
        if layers is not None:
            text += f"draft_pass_layers = {layers!r}\n"
        if factor is not None:
            text += f"moe_token_factor = {factor!r}\n"
        for name, estimates in (fixed or {}).items():
            text += f"{name} = {median_of_sources(estimates, held_out)!r}\n"
        if held_out == FIT_SOURCE:
            text += f"draft_layer_overhead_us = {load_gpu(gpu).layer_overhead_us!r}\n"
    if held_out == FIT_SOURCE:
        gpu, target = load_gpu("h100"), load_model("llama-3.1-8b")
        prior = PassCost.prior(gpu, target, 1)
        text += (f'[steps."llama-3.1-8b@h100-sxm@tp1"]\nc_fixed_ms = {prior.c_fixed * 1e3!r}\n'
                 f'c_weight_ms = {prior.c_weight * 1e3!r}\nc_token_us = {prior.c_token * 1e6!r}\n'
                 f'c_kv_ns = {prior.c_kv * 1e9!r}\nc_attn_ns = {prior.c_attn * 1e9!r}\nknee = {prior.knee!r}\n'
                 f'includes_engine = false\nsource = "datasheet prior (leave-one-source-out fold without [1])"\n')
        with open(path, "w") as handle:
            handle.write(text)
        if layers is not None:
            text += head_fit_text(row_config({"gpu": "h100", "target": "llama-3.1-8b", "draft": "eagle", "gamma": "3"},
                                             path), layers)
    with open(path, "w") as handle:
        handle.write(text)
    return path


def fold_estimates(table: pd.DataFrame, workdir: str) -> tuple[dict, dict, dict]:
    """What ``fold_profile`` refits per fold: the proposer's per-pass work, the MoE token factors
    and the per-layer fixed costs, each per source."""
    return pass_overhead_estimates(table), moe_factor_estimates(table), fixed_cost_estimates(table, workdir)


def loso(table: pd.DataFrame, workdir: str | None = None, user: pd.DataFrame | None = None,
         estimates: tuple | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Leave one source out. Returns (the folds' rows, the in-sample rows).

    For every source S: the constants the table taught are refitted without S
    (``fold_profile``) and S's rows predicted. A curve with published no-speculation points is
    predicted twice: on the step model fitted on those points (a calibration inside S, the
    ``calibrated`` profile) and on the datasheet prior (``variant`` ``prior``). ``user`` rows
    are predicted with every shipped constant (nothing in the shipped table is theirs)."""
    workdir = workdir or tempfile.mkdtemp(prefix="specgauge-loso-")
    table = steady_rows(table)   # the overloaded rows are a capacity question (``overload_check``)
    shipped = evaluate(table, workdir=workdir)
    passes, moe, fixed = estimates or fold_estimates(table, workdir)
    folds = []
    for src in dict.fromkeys(table["source"]):
        rows = table[table["source"] == src]
        if not (rows["role"] == "predicted").any():
            continue
        path = fold_profile(src, os.path.join(workdir, f"fold{src.strip('[]')}.toml"), passes, moe, fixed)
        fitted = evaluate(rows, path, fit_curves=True, workdir=workdir, reference=table).assign(variant="as published")
        folds.append(fitted)
        if (rows["fit_group"] != "").any() and not rows["baseline"].eq("").all():
            curve_rows = rows[rows["fit_group"] != ""]
            folds.append(evaluate(curve_rows, path, fit_curves=False, workdir=workdir, reference=table).assign(variant="prior"))
    if user is not None and len(user):
        folds.append(evaluate(user, workdir=workdir).assign(variant="user"))
    return pd.concat(folds, ignore_index=True), shipped


# ----------------------------------------------------------------------------- the user-runs protocol

#: The user-runs protocol's thresholds: a curve qualifies with its own no-speculation points at
#: this many loads or more and speculative points at this many or more.
RUNS_MIN_BASELINE, RUNS_MIN_SPEC = 2, 3


def _load_of(row) -> float:
    """A curve point's load: its request rate in a rate sweep (``arrival`` poisson), else its
    concurrency (``batch_size``)."""
    return float(row["qps"]) if row.get("arrival", "") == "poisson" and row.get("qps", "") != "" \
        else float(row["batch_size"])


def runs_curves(table: pd.DataFrame) -> list[pd.DataFrame]:
    """The published curves the user-runs protocol takes: a ``fit_group`` whose source published
    its run without speculation at ``RUNS_MIN_BASELINE`` loads or more and speculative points at
    ``RUNS_MIN_SPEC`` or more, each curve sorted by load (``_load_of``: concurrency, or request
    rate)."""
    curves = []
    table = steady_rows(table)   # a run past capacity is no point of a steady-state curve
    rows = table[(table["fit_group"] != "") & (table["baseline"] != "")]
    for _, curve in rows.groupby("fit_group", sort=False):
        loads = curve.apply(_load_of, axis=1) if len(curve) else pd.Series(dtype=float)
        spec = (curve["gamma"].replace("", "0").astype(int) > 0) & (curve["measured"] == "speedup")
        if loads.nunique() >= RUNS_MIN_BASELINE and loads[spec].nunique() >= RUNS_MIN_SPEC:
            curves.append(curve.assign(_load=loads).sort_values("_load", kind="stable").drop(columns="_load"))
    return curves


def _unit_value(result: dict, config, unit: str, spec: bool) -> float:
    """A simulated run in its source's unit (``baseline_unit``). A closed loop's mean end-to-end
    latency by Little's law, concurrency × output tokens ÷ output throughput: it holds the time a
    request waits for a slot when the engine caps fewer running requests than the client sends
    (SGLang's 48 with speculation, [12]), which the client's clock counts."""
    prefix = "" if spec else "no_spec_"
    if unit == "e2e_ms" and config.qps is not None:   # a rate sweep: the requests' own mean
        return float(result[f"{prefix}mean_e2el_ms"])
    if unit == "e2e_ms":
        return 1e3 * config.batch_size * config.output_len / float(result[f"{prefix}output_throughput"])
    if unit == "tpot_ms":
        return float(result[f"{prefix}mean_tpot_ms"])
    rate = float(result[f"{prefix}output_throughput"])
    return rate / (config.tp * config.dp) if unit == "tok_s_gpu" else rate


def _afternoon(curve: pd.DataFrame, workdir: str, estimates: tuple) -> tuple[str, float]:
    """What a user's afternoon gives the planner on one curve (sorted by load): the step model
    fitted on its runs without speculation at the lowest and the highest load, over the
    constants refitted without its source, and α from the speculative run at the lowest load
    (its accepted length where published, else read off its speed-up)."""
    src, name = curve.iloc[0]["source"], curve.iloc[0]["fit_group"]
    base = fold_profile(src, os.path.join(workdir, f"runs-fold{src.strip('[]')}.toml"), *estimates)
    low = curve.iloc[0]
    profiles, _ = fitted_profile(curve.iloc[[0, -1]], os.path.join(workdir, f"runs-{name}.toml"), base)
    low_config = row_config(low, profiles)
    if low["alpha"] == "length":
        return profiles, alpha_for_length(low_config.gamma, float(low["accepted_length"]))
    return profiles, calibrate_alpha(lambda a: speedup(low_config, a, e2e=_e2e(low)), float(low["published"]))


def user_runs(table: pd.DataFrame, workdir: str | None = None, estimates: tuple | None = None) -> pd.DataFrame:
    """The user-runs protocol on every curve of ``runs_curves``: what a user measures in an
    afternoon, given to the planner, and every other point of the curve predicted.

    Given: the run without speculation at the curve's lowest and highest load (the target's step
    model is fitted on those two, ``fitted_profile``, over the constants refitted without the
    curve's source, ``fold_profile``) and one speculative run at the lowest load with its
    acceptance (the source's accepted length where published; else α read off that run's
    speed-up, which is what its measured acceptance stands for in the model). Predicted: the
    other runs without speculation (``figure`` absolute, ``profile`` calibrated), and at every
    other load the speculative run (absolute, ``profile`` runs) and its speed-up (ratio, runs).
    One row per predicted figure, with ``published``, ``simulated`` and ``ratio``."""
    from specgauge.simulator import IIDAcceptance, simulate

    workdir = workdir or tempfile.mkdtemp(prefix="specgauge-runs-")
    estimates = estimates or fold_estimates(table, workdir)
    out = []
    for curve in runs_curves(table):
        src, name = curve.iloc[0]["source"], curve.iloc[0]["fit_group"]
        high = curve.iloc[-1]
        profiles, alpha = _afternoon(curve, workdir, estimates)
        for _, row in curve.iloc[1:].iterrows():
            config = replace(row_config(row, profiles), acceptance=IIDAcceptance(alpha))
            result = simulate(config)
            unit, base_value, published_speedup = row["baseline_unit"], float(row["baseline"]), float(row["published"])
            spec_value = base_value / published_speedup if unit in TIME_UNITS else base_value * published_speedup
            load = float(config.batch_size) if config.qps is None else float(result["mean_batch_size"])
            common = {"source": src, "curve": name, "kind": "moe" if resolve_moe(config) else "dense",
                      "load": load, "gamma": config.gamma, "alpha": alpha, "draft_kind": _draft_kind(config)}
            figures = [("spec", "absolute", "runs", unit, spec_value, _unit_value(result, config, unit, True)),
                       ("speedup", "ratio", "runs", "speedup", published_speedup, _speedup_of(result, config, unit))]
            if row["id"] != high["id"]:
                figures.insert(0, ("no-spec", "absolute", "calibrated", unit, base_value,
                                   _unit_value(result, config, unit, False)))
            for point, figure, profile, measured, published, simulated in figures:
                what = {"no-spec": "without speculation", "spec": "with speculation", "speedup": "speed-up"}[point]
                out.append({**common, "id": f"{row['id']}:{point}", "point": point, "figure": figure,
                            "profile": profile, "measured": measured, "setup": f"{row['setup']}: {what}",
                            "published": published, "simulated": simulated, "ratio": simulated / published})
    return pd.DataFrame(out)


# ----------------------------------------------------------------------------- runs past capacity


def overload_check(table: pd.DataFrame, workdir: str | None = None,
                   estimates: tuple | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The overloaded rows (``validation.REGIMES``) as a capacity question: does the planner, at
    that deployment, call the row's request rate beyond one replica's capacity?

    Each curve with overloaded rows is given what the user-runs protocol gives (``_afternoon``,
    on the curve's steady rows, its source left out of every shipped constant); the planner's
    capacity (``capacity.search``, no SLO: the highest rate it serves stably) is found with and
    without speculation. Returns (one row per overloaded row and arm: ``qps``, ``capacity_rps``,
    ``beyond``; one row per curve and arm whose sweep brackets its capacity, stable at
    ``stable_qps`` and overloaded at ``overloaded_qps``: the planner's ``capacity_rps``, ``inside``
    the bracket, and ``residual``, log of the bracket's geometric middle over the capacity)."""
    from specgauge.reports.planning.capacity import search
    from specgauge.reports.planning.slo import parse_slo
    from specgauge.simulator import IIDAcceptance

    over = overloaded_rows(table)
    if not len(over):
        return pd.DataFrame(), pd.DataFrame()
    workdir = workdir or tempfile.mkdtemp(prefix="specgauge-overload-")
    estimates = estimates or fold_estimates(table, workdir)
    curves = {c.iloc[0]["fit_group"]: c for c in runs_curves(table)}
    checks, brackets = [], []
    for name, rows in over.groupby("fit_group", sort=False):
        rows = rows.sort_values("qps", key=lambda s: s.astype(float), kind="stable")
        src, first = rows.iloc[0]["source"], rows.iloc[0]
        curve = curves.get(name)
        if curve is not None:
            profiles, alpha = _afternoon(curve, workdir, estimates)
        else:   # no steady curve to calibrate on: the prior, refitted without the source, and no speculative arm
            profiles = fold_profile(src, os.path.join(workdir, f"over-fold{src.strip('[]')}.toml"), *estimates)
            alpha = None
        config = replace(row_config(first, profiles), qps=None)
        arms = {"no speculation": replace(config, draft=None, gamma=0)}
        if alpha is not None and config.gamma > 0:
            arms["speculation"] = replace(config, acceptance=IIDAcceptance(alpha))
        for arm, arm_config in arms.items():
            best, _, _ = search(arm_config, parse_slo(None))
            capacity = float(best["qps"]) if best is not None else 0.0
            for _, row in rows.iterrows():
                checks.append({"id": row["id"], "source": src, "curve": name, "arm": arm, "qps": float(row["qps"]),
                               "capacity_rps": capacity, "beyond": float(row["qps"]) > capacity})
            stable = curve[curve["arrival"] == "poisson"]["qps"].astype(float) if curve is not None else pd.Series()
            if len(stable):
                low, high = float(stable.max()), float(rows["qps"].astype(float).min())
                brackets.append({"source": src, "curve": name, "arm": arm, "stable_qps": low, "overloaded_qps": high,
                                 "capacity_rps": capacity, "inside": low <= capacity < high,
                                 "residual": math.log(math.sqrt(low * high) / capacity) if capacity > 0 else math.inf})
    return pd.DataFrame(checks), pd.DataFrame(brackets)
