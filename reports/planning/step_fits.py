"""The step model's constants that published runs set, estimated per source for leave-one-source-out.

Each function returns ``{source: [estimate, ...]}``: what that source's rows imply for one
shipped constant, so that ``folds.fold_profile`` can refit the constant without the
source it predicts (``fold_values``) and the shipped value can be checked against the median
of all sources (``tests/test_step_fits.py``).

- ``draft_pass_layer_estimates``: an EAGLE or MTP head's batch-1 pass in target layers
  (``GPU.draft_pass_layers``), from every batch-1 speculative row of a head whose acceptance the
  source states (its accepted length), and from [1]'s per-round EAGLE-3 fit.
- ``moe_curve_estimates``: the MoE per-token factor (``GPU.moe_token_factor``) that best predicts
  each source's whole MoE serve curves on the datasheet prior: every point, with and without
  speculation, not only the baseline's step fit.
"""

from __future__ import annotations

import math
import os
import tempfile

import numpy as np
import pandas as pd

HEAD_KINDS = ("eagle", "mtp")
#: The per-round EAGLE-3 fit that ships (steps.toml): its source and the drafts a round it assumes.
ROUND_FIT_SOURCE, ROUND_FIT_PASSES = "[1]", 3
#: The MoE factors a whole curve is simulated at; the best is interpolated in log factor.
MOE_FACTORS = (1.0, 1.5, 2.0, 2.55, 3.2, 4.0, 5.0, 6.5, 8.5)


def _profile(workdir: str, name: str, values: dict[str, float], extra: str = "") -> str:
    """A profile file setting ``values`` on every known GPU, then ``extra`` tables."""
    from specgauge.simulator.profiles import known_gpus

    path = os.path.join(workdir, name)
    with open(path, "w") as handle:
        handle.write("".join(f'[gpus."{g}"]\n' + "".join(f"{k} = {v!r}\n" for k, v in values.items())
                             for g in known_gpus()) + extra)
    return path


def head_fit_text(config, layers: float) -> str:
    """Where a shipped step fit prices the row's head (a per-round fit, which ``draft_pass_layers``
    does not reach), a steps table that replaces it with the head priced at ``layers`` target layers
    a pass: the same batch-1 pass as ``drafts._priced_as_layers``, the head's per-token and KV terms
    from its shape (``drafts.head_shape``). Empty where no fit prices the head."""
    from dataclasses import replace

    from specgauge.simulator.core import resolve
    from specgauge.simulator.drafts import draft_kind, head_shape
    from specgauge.simulator.profiles import load_step_fit, step_key

    kind = draft_kind(config.draft)
    if kind not in HEAD_KINDS:
        return ""
    setup = resolve(replace(config, draft=None, gamma=0))
    if load_step_fit(f"{kind}:{setup.target.name}", setup.gpu.name, config.tp, config.profiles) is None:
        return ""
    one = float(setup.target_cost.time(1.0, 0.0, 0.0))
    head = head_shape(setup.gpu, setup.target, kind, config.tp)
    per_pass = layers / setup.target.layers * one
    key = step_key(f"{kind}:{setup.target.name}", setup.gpu.name, config.tp)
    return (f'[steps."{key}"]\nc_fixed_ms = 0.0\nc_pass_ms = {per_pass * 1e3!r}\nc_token_us = {head.c_token * 1e6!r}\n'
            f'c_kv_ns = {head.c_kv * 1e9!r}\nper_round = true\nincludes_engine = true\n'
            f'source = "head priced at {layers:.3g} target layers a pass (leave-one-source-out)"\n')


def head_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Batch-1 speculative rows of an EAGLE or MTP head with the source's own accepted length (or a
    stated α), a speed-up and no step fit of their own: where a round's cost against the plain step
    is all the row measures."""
    from specgauge.simulator.drafts import draft_kind

    kinds = table["draft"].map(lambda d: draft_kind(d) if d not in ("", "none") else None)
    gamma = table["gamma"].replace("", "0").astype(int)
    stated = (table["alpha"] == "length") | table["alpha"].str.match(r"^[0-9.]+$")
    return table[kinds.isin(HEAD_KINDS) & (gamma > 0) & (table["batch_size"] == "1") & stated
                 & table["measured"].isin(["speedup", "decode_speedup"]) & (table["fit_group"] == "")
                 & (table["dp"].isin(["", "1"]))]


def draft_pass_layer_estimates(table: pd.DataFrame, workdir: str | None = None) -> dict[str, list[float]]:
    """Per source, the ``draft_pass_layers`` at which each of its ``head_rows`` is simulated as
    published. At batch 1 a round costs the verification plus γ head passes, so 1 / speed-up is
    linear in the constant: two simulations and a secant step (a third where the first two straddle
    the clip at 0). [1] adds its per-round fit: 2.135 ms at 3 passes against its target's batch-1
    pass of 32 layers."""
    from specgauge.reports.planning.validation import alpha_for_length, row_config, simulated_value
    from specgauge.simulator.core import resolve
    from specgauge.simulator.profiles import load_step_fit

    workdir = workdir or tempfile.mkdtemp(prefix="specgauge-passes-")
    out: dict[str, list[float]] = {}
    for _, row in head_rows(table).iterrows():
        gamma = int(row["gamma"])
        alpha = alpha_for_length(gamma, float(row["accepted_length"])) if row["alpha"] == "length" else float(row["alpha"])

        def inverse(x: float) -> float:
            path = _profile(workdir, f"passes-{row['id']}-{x:g}.toml", {"draft_pass_layers": x},
                            head_fit_text(row_config(row), x))
            return 1.0 / simulated_value(row, row_config(row, path), alpha)

        target = 1.0 / float(row["published"])
        lo, hi = 2.0, 6.0
        f_lo, f_hi = inverse(lo), inverse(hi)
        x = lo + (target - f_lo) * (hi - lo) / (f_hi - f_lo) if f_hi != f_lo else lo
        x = max(x, 0.0)
        if x < 1.0:   # below the secant's range the head's own linear cost may set the pass: one more step
            f_x = inverse(max(x, 0.05))
            x = max(x + (target - f_x) * (hi - lo) / (f_hi - f_lo), 0.0)
        out.setdefault(row["source"], []).append(float(x))
    fit = load_step_fit("eagle:llama-3.1-8b", "h100-sxm", 1)
    if fit is not None and ROUND_FIT_SOURCE in set(table["source"]):
        config = row_config({"gpu": "h100", "target": "llama-3.1-8b", "draft": "none"})
        setup = resolve(config)
        one = float(setup.target_cost.time(1.0, 0.0, 0.0))
        per_pass = (fit.c_fixed_ms / ROUND_FIT_PASSES + fit.c_pass_ms) * 1e-3
        out.setdefault(ROUND_FIT_SOURCE, []).append(per_pass * setup.target.layers / one)
    return out


def moe_load_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Every source's rows on MoE targets (its calibration rows kept: a curve's α comes from its
    first point)."""
    from specgauge.simulator.profiles import load_model

    return table[table["target"].map(lambda t: load_model(t).is_moe)]


def moe_curve_estimates(table: pd.DataFrame, workdir: str | None = None) -> dict[str, list[float]]:
    """Per source, the ``moe_token_factor`` that best predicts how its MoE figures move with load, on
    the datasheet prior: each speed-up or ratio above batch 1 (with the α the source gives, or its
    curve calibrates at its first point, recalibrated at each factor as ``evaluate`` does), and the
    shape of each curve of absolute figures (its runs without speculation, ``baseline``, and rows of
    one deployment at several loads): each point's log error less its lowest load's, since the
    factor prices tokens, not a step's fixed part. At each of ``MOE_FACTORS``, the least mean
    squared log error, refined by a parabola through it and its neighbours in log factor. A source
    with nothing under load gives none."""
    from specgauge.reports.planning.validation import RELATIVE_MEASURES, evaluate

    workdir = workdir or tempfile.mkdtemp(prefix="specgauge-moe-")
    out: dict[str, list[float]] = {}
    for source, rows in moe_load_rows(table).groupby("source", sort=False):
        batch = rows["batch_size"].replace("", "0").astype(int)
        predicted = rows["role"] == "predicted"
        relative = (predicted & (batch > 1) & rows["measured"].isin(RELATIVE_MEASURES)).to_numpy()
        absolute = rows[predicted & ~rows["measured"].isin(RELATIVE_MEASURES)]
        shapes = [g.index for _, g in absolute.groupby(["gpu", "target", "tp", "measured", "prompt_len"], sort=False)
                  if g["batch_size"].nunique() > 1]
        curves = [c for _, c in rows[(rows["fit_group"] != "") & (rows["baseline"] != "")].groupby("fit_group", sort=False)]
        if not relative.any() and not shapes and not curves:
            continue
        errors = []
        for factor in MOE_FACTORS:
            path = _profile(workdir, f"moe-{source.strip('[]')}-{factor:g}.toml", {"moe_token_factor": factor})
            ratios = evaluate(rows, path, fit_curves=False, workdir=workdir, reference=table)["ratio"].astype(float)
            ratios.index = rows.index
            logs = [np.log(ratios[relative].to_numpy())]
            for index in shapes:
                order = batch.loc[index].sort_values(kind="stable").index
                logs.append(np.log(ratios.loc[order].to_numpy()[1:] / ratios.loc[order[0]]))
            for curve in curves:
                shape = _baseline_errors(curve, path)
                logs.append(shape[1:] - shape[0])
            errors.append(float(np.mean(np.concatenate(logs) ** 2)))
        out[source] = [_parabola_min(np.log(MOE_FACTORS), np.array(errors))]
    return out


def _baseline_errors(curve: pd.DataFrame, profiles: str) -> np.ndarray:
    """log(simulated / published) of each point's run without speculation, in the source's unit, by load."""
    from dataclasses import replace

    from specgauge.reports.planning.validation import _per_token_s, row_config
    from specgauge.simulator import simulate

    out = []
    points = curve.assign(_load=curve["batch_size"].astype(int)).sort_values("_load", kind="stable")
    for _, row in points.drop_duplicates("batch_size").iterrows():
        config = row_config(row, profiles)
        plain = replace(config, draft=None, gamma=0)
        result = simulate(plain)
        per_token = min(config.batch_size, config.requests) / float(result["output_throughput"])
        out.append(math.log(per_token / _per_token_s(row, config)))
    return np.array(out)


def _parabola_min(x: np.ndarray, y: np.ndarray) -> float:
    """exp of the vertex of the parabola through the least ``y`` and its neighbours (clipped to the grid)."""
    i = int(np.clip(np.argmin(y), 1, len(y) - 2))
    a, b, _ = np.polyfit(x[i - 1:i + 2], y[i - 1:i + 2], 2)
    vertex = -b / (2 * a) if a > 0 else x[int(np.argmin(y))]
    return float(np.exp(np.clip(vertex, x[0], x[-1])))


def fold_values(estimates: dict[str, list[float]], held_out: str | None, geometric: bool = False) -> float | None:
    """The constant without ``held_out``: the median over sources of each source's mean (a
    geometric mean and median of logs with ``geometric``); None without any source."""
    values = [float(np.mean(np.log(v) if geometric else v)) for src, v in estimates.items() if src != held_out and v]
    if not values:
        return None
    middle = float(np.median(values))
    return math.exp(middle) if geometric else middle
