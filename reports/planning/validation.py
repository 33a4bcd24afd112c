"""The planner against published measurements: rows from a data file, predicted in and out of sample.

The shipped table (``data/validation.csv``, its sources in ``data/sources.csv``) holds one
row per published figure: its source and where in it (``locator``), what was measured
(``measured``), the deployment (the simulator's own option names), the row's ``role`` and
where its acceptance comes from (``alpha``):

- ``measured``: ``speedup`` (output throughput's, saturated; mean TPOT's under ``qps``),
  ``decode_speedup`` (the decode phase of an already prefilled batch), ``tpot_ms``,
  ``output_throughput``, ``duration_s`` (a whole batch's run), ``p99_tpot_ms`` and ``p99_ttft_ms``
  (a run's tail at its stated load), ``throughput_ratio`` (output
  throughput against the deployment ``versus`` changes, ``tp=8;dp=1``), ``pass_ms`` (one
  pass on the shipped step model, no engine overhead), ``prior_pass_ms`` (the same on the
  datasheet prior), ``draft_cost_ratio`` (c at batch 1);
- ``role``: ``check`` (a pass time or a cost ratio against the constants read from it),
  ``calibrated`` (α bisected on this row: it matches by construction), ``predicted``;
- ``alpha``: ``calibrate``, ``length`` (from ``accepted_length``, the tokens a verification
  emits, at ``gamma``), ``row:ID`` (the α calibrated on another row), a number, or empty
  (no speculation);
- ``fit_group`` / ``baseline`` / ``baseline_unit``: a curve whose source also published its
  run without speculation (``e2e_ms`` mean end-to-end latency, ``tok_s_gpu`` output tokens
  a second a GPU, ``tpot_ms``): the target's step model is fitted on those points alone, a
  calibration inside the source.

``evaluate`` predicts every row; ``loso`` holds out each source in turn, refits what the
table taught the simulator without it (``fold_profile``) and predicts its rows;
``residuals`` turns the held-out predictions into the table the planner's intervals come
from (``intervals``). User rows come in the same schema (``read_table``) or from
``vllm bench serve`` / ``sglang.bench_serving`` results (``rows_from_result``).
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from dataclasses import replace
from importlib.resources import files
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from specgauge.errors import InputFileError

DATA = ("planning", "data")
COLUMNS = ["id", "source", "locator", "setup", "measured", "published", "role", "alpha", "accepted_length",
           "alpha_source", "gpu", "target", "draft", "tp", "dp", "ep", "draft_tp", "gamma", "prompt_len", "output_len",
           "batch_size", "spec_batch_size", "qps", "arrival", "requests", "empty_proposals", "draft_kv_budget", "versus",
           "fit_group", "baseline", "baseline_unit", "engine", "year", "note", "regime"]
REQUIRED = ["source", "setup", "measured", "published", "gpu", "target"]
MEASURES = ("speedup", "decode_speedup", "tpot_ms", "output_throughput", "duration_s", "throughput_ratio", "pass_ms",
            "prior_pass_ms", "draft_cost_ratio", "p99_tpot_ms", "p99_ttft_ms")
#: The tail figures a fleet is sized on: a run's 99th percentile TPOT and TTFT at its stated load.
TAIL_MEASURES = ("p99_tpot_ms", "p99_ttft_ms")
ROLES = ("check", "calibrated", "predicted")
#: A row's ``regime``, from its source alone: empty, a steady state (what a simulator's mean
#: figures describe); ``overloaded``, a run past the server's capacity: its source states that
#: the queue grew, or it served under 98 % of the offered rate (the planner's own ``stable``,
#: ``STABLE_SERVED_FRACTION``), or its own figures put more requests in flight than its engine
#: runs at once (``little_in_flight``; ``check_table`` refuses such a row left steady). Its TPOT
#: grows with the run's length, so no steady-state prediction is comparable with it: it stays
#: out of every residual pool and is checked as a capacity question instead
#: (``folds.overload_check``).
REGIMES = ("", "overloaded")
INTEGER_FIELDS = ("tp", "dp", "ep", "draft_tp", "gamma", "prompt_len", "output_len", "batch_size", "spec_batch_size",
                  "requests", "draft_kv_budget")
FLOAT_FIELDS = ("qps", "empty_proposals")
#: How a row's source sent its requests: empty, every request at once (a saturated run, or an
#: offline batch); ``closed``, a client holding ``batch_size`` in flight (``vllm bench serve`` /
#: ``sglang.bench_serving --max-concurrency``), simulated in its steady state; ``poisson``, at
#: the row's ``qps``.
ARRIVAL_VALUES = ("", "closed", "poisson")
#: How a source's ``baseline_unit`` reads a run: a time (lower is faster) or a rate.
TIME_UNITS = ("e2e_ms", "tpot_ms")
#: The sources whose numbers set shipped constants (``fold_profile`` refits them without the source):
#: SpecDecode-Bench's per-round EAGLE-3 fit and the K sweep of vLLM issue #20780.
FIT_SOURCE, K_SWEEP_SOURCE = "[1]", "[14]"
WITHIN = 0.15


class ValidationInputError(InputFileError):
    """A validation row file that cannot be read: one line, exit status 2."""

    exit_code = 2


# ----------------------------------------------------------------------------- the table


def _data_path(name: str):
    return files("specgauge.reports").joinpath(*DATA, name)


def shipped_table() -> pd.DataFrame:
    """The published rows that ship with specgauge."""
    with _data_path("validation.csv").open("r", encoding="utf-8") as handle:
        return check_table(pd.read_csv(handle, dtype=str, keep_default_na=False), "the shipped validation table")


def shipped_sources() -> dict[str, str]:
    """Source key -> citation."""
    with _data_path("sources.csv").open("r", encoding="utf-8") as handle:
        frame = pd.read_csv(handle, dtype=str, keep_default_na=False)
    return dict(zip(frame["source"], frame["citation"]))


def read_table(path: str | Path) -> pd.DataFrame:
    """A user's CSV in the shipped table's schema (``REQUIRED`` columns at least)."""
    from specgauge import inputs

    path = Path(path)
    text = inputs.read_input_text(path, "validation rows")
    import io

    try:
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as exc:
        raise ValidationInputError(f"{str(path)!r} is not a CSV of validation rows: {' '.join(str(exc).split())}") from None
    return check_table(frame, repr(str(path)))


def check_table(frame: pd.DataFrame, where: str) -> pd.DataFrame:
    """Every row checked at the door: the required columns, a known measure and role, numbers
    where numbers go. Missing optional columns are added empty."""
    missing = [c for c in REQUIRED if c not in frame]
    if missing:
        raise ValidationInputError(f"{where} lacks column(s) {', '.join(missing)}; needs {', '.join(REQUIRED)} "
                                   f"(optional: {', '.join(c for c in COLUMNS if c not in REQUIRED)})")
    unknown = [c for c in frame if c not in COLUMNS and c not in ("citation",)]
    if unknown:
        raise ValidationInputError(f"{where}: unknown column(s) {', '.join(unknown)}; valid: {', '.join(COLUMNS)}")
    if not len(frame):
        raise ValidationInputError(f"{where} has a header but no rows")
    frame = frame.copy()
    for column in COLUMNS:
        if column not in frame:
            frame[column] = ""
    frame = frame.fillna("").astype(str)
    for i, row in enumerate(frame.itertuples(index=False)):
        line = f"{where} row {i + 1}"
        if row.measured not in MEASURES:
            raise ValidationInputError(f"{line}: measured {row.measured!r} is not one of {', '.join(MEASURES)}")
        if (row.role or "predicted") not in ROLES:
            raise ValidationInputError(f"{line}: role {row.role!r} is not one of {', '.join(ROLES)}")
        value = _float(row.published, f"{line}: published")
        if not (math.isfinite(value) and value > 0):
            raise ValidationInputError(f"{line}: published must be a number > 0, got {row.published!r}")
        for name in INTEGER_FIELDS:
            text = getattr(row, name)
            if text != "" and not (text.lstrip("-").isdigit() and int(text) >= 0):
                raise ValidationInputError(f"{line}: {name} must be a whole number >= 0, got {text!r}")
        for name in FLOAT_FIELDS + ("accepted_length", "baseline"):
            if getattr(row, name) != "":
                _float(getattr(row, name), f"{line}: {name}")
        if row.arrival not in ARRIVAL_VALUES:
            raise ValidationInputError(f"{line}: arrival {row.arrival!r} is not one of closed, poisson or empty "
                                       f"(every request at once)")
        if row.arrival == "closed" and row.qps != "":
            raise ValidationInputError(f"{line}: arrival closed holds batch_size requests in flight; drop qps {row.qps}")
        if row.arrival == "poisson" and row.qps == "":
            raise ValidationInputError(f"{line}: arrival poisson needs a qps")
        if row.regime not in REGIMES:
            raise ValidationInputError(f"{line}: regime {row.regime!r} is not overloaded or empty (a steady state)")
        if row.regime == "overloaded" and row.arrival != "poisson":
            raise ValidationInputError(f"{line}: an overloaded row is a request rate past capacity: it needs arrival "
                                       f"poisson and its qps")
        in_flight = little_in_flight(row._asdict())
        if row.regime != "overloaded" and in_flight > float(row.batch_size or "inf"):
            raise ValidationInputError(
                f"{line}: by Little's law its own figures hold {in_flight:.0f} requests in flight ({row.qps} requests/s "
                f"x {row.output_len} output tokens x its time a token), more than the {row.batch_size} its engine runs at "
                f"once: a queue grows; mark it regime overloaded")
        alpha = row.alpha
        if alpha not in ("", "calibrate", "length") and not alpha.startswith("row:"):
            a = _float(alpha, f"{line}: alpha")
            if not 0 <= a <= 1:
                raise ValidationInputError(f"{line}: alpha must be calibrate, length, row:ID or a number in [0, 1], got {alpha!r}")
        if alpha == "length" and row.accepted_length == "":
            raise ValidationInputError(f"{line}: alpha 'length' needs an accepted_length")
        if alpha.startswith("row:") and alpha[4:] not in set(frame["id"]):
            raise ValidationInputError(f"{line}: alpha {alpha!r} names no row id of the same file")
        if alpha.startswith("row:") and alpha[4:] in set(frame.loc[frame["regime"] == "overloaded", "id"]):
            raise ValidationInputError(f"{line}: alpha {alpha!r} names an overloaded row; take α from a steady one")
    if frame["id"].eq("").any():
        frame.loc[frame["id"].eq(""), "id"] = [f"row{i + 1}" for i in np.flatnonzero(frame["id"].eq(""))]
    if frame["role"].eq("").any():
        frame.loc[frame["role"].eq(""), "role"] = "predicted"
    return frame


def steady_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The rows a steady-state prediction is compared with: every row but the overloaded ones
    (``REGIMES``)."""
    return table[table.get("regime", pd.Series("", index=table.index)) != "overloaded"]


def overloaded_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The rows taken past the server's capacity (``REGIMES``): a capacity question, not a figure."""
    return table[table.get("regime", pd.Series("", index=table.index)) == "overloaded"]


def check_deployments(frame: pd.DataFrame, where: str) -> pd.DataFrame:
    """Every row's deployment resolved against the profiles before any simulation (an unknown GPU
    or model, a TP that does not divide the heads: one line, exit status 2)."""
    from specgauge.errors import ConfigError
    from specgauge.simulator import memory_plan

    for i, (_, row) in enumerate(frame.iterrows()):
        try:
            memory_plan(row_config(row))
        except ConfigError as exc:
            raise ValidationInputError(f"{where} row {i + 1} ({row['setup']}): {' '.join(str(exc).split())}") from None
    return frame


def _float(text: str, where: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        raise ValidationInputError(f"{where} must be a number, got {text!r}") from None


# ----------------------------------------------------------------------------- simulating a row


def row_config(row, profiles: str | None = None):
    """The ``SimulationConfig`` of a row (its empty fields keep the simulator's defaults)."""
    from specgauge.simulator import SimulationConfig

    fields: dict[str, object] = {"gpu": row["gpu"], "target": row["target"], "profiles": profiles}
    draft = row.get("draft", "")
    fields["draft"] = draft if draft not in ("", "none") else None
    for name in INTEGER_FIELDS:
        if row.get(name, "") != "":
            fields[name] = int(row[name])
    for name in FLOAT_FIELDS:
        if row.get(name, "") != "":
            fields[name] = float(row[name])
    if row.get("arrival", ""):
        fields["arrival"] = row["arrival"]
    if fields["draft"] is None:
        fields["gamma"] = 0
    fields.setdefault("requests", max(4 * int(fields.get("batch_size", 64)), 16))
    return SimulationConfig(**fields)


def speedup(config, alpha: float, decode: bool = False, e2e: bool = False) -> float:
    """Paired speed-up: of output throughput when saturated, of mean TPOT under a request rate
    (of mean end-to-end latency there with ``e2e``: ``_speedup_of``).
    With ``decode``, the decode phase alone: tokens a pass × plain step ÷ speculative round, at
    the batch cap and the mid-output context."""
    from specgauge.simulator import IIDAcceptance, simulate
    from specgauge.simulator.core import resolve
    from specgauge.simulator.cost import RoundCost

    config = replace(config, acceptance=IIDAcceptance(alpha))
    if not decode:
        return _speedup_of(simulate(config), config, "e2e_ms" if e2e else "")
    setup = resolve(config)
    costs = RoundCost(setup.target_cost, setup.draft.cost, setup.overhead)
    kv = config.batch_size * (config.prompt_len + config.output_len / 2)
    plain = float(costs.decode_round(config.batch_size, 0, kv)[0])
    spec = float(costs.decode_round(config.batch_size, config.gamma, kv)[0])
    return config.acceptance.expected_tokens_per_pass(config.gamma) * plain / spec


def _speedup_of(result: dict, config, unit: str = "") -> float:
    """The simulated speed-up a published one measures: the output throughput ratio when saturated
    or in a closed loop (where, by Little's law, it is also the ratio of mean end-to-end
    latencies); under a request rate, the ratio of mean TPOTs, or of mean end-to-end latencies
    where the source timed whole requests (``unit`` e2e_ms)."""
    if config.qps is None:
        return float(result["speedup_vs_no_spec"])
    if unit == "e2e_ms":
        return float(result["no_spec_mean_e2el_ms"]) / float(result["mean_e2el_ms"])
    return float(result["tpot_speedup_vs_no_spec"])


def _e2e(row) -> bool:
    """A row whose speed-up is a ratio of end-to-end latencies (its source's unit, ``baseline_unit``)."""
    return row.get("baseline_unit", "") == "e2e_ms"


def alpha_for_length(gamma: int, length: float) -> float:
    """The i.i.d. α whose expected tokens a pass at ``gamma`` equal a published accepted length."""
    from specgauge.simulator import IIDAcceptance

    lo, hi = 0.0, 0.999
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if IIDAcceptance(mid).expected_tokens_per_pass(gamma) < length else (lo, mid)
    return (lo + hi) / 2


def calibrate_alpha(measure: Callable[[float], float], target: float, lo: float = 0.02, hi: float = 0.99) -> float:
    """The α at which ``measure(α)`` equals ``target`` (bisection; clipped to [lo, hi])."""
    if measure(hi) < target:
        return hi
    if measure(lo) > target:
        return lo
    for _ in range(14):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if measure(mid) < target else (lo, mid)
    return (lo + hi) / 2


def simulated_value(row, config, alpha: float | None) -> float:
    """The row's figure, simulated."""
    from specgauge.simulator import IIDAcceptance, simulate
    from specgauge.simulator.core import resolve
    from specgauge.simulator.cost import PassCost, RoundCost

    measured = row["measured"]
    if measured in ("speedup", "decode_speedup"):
        return speedup(config, alpha if alpha is not None else 0.0, decode=measured == "decode_speedup", e2e=_e2e(row))
    if measured in ("pass_ms", "prior_pass_ms"):
        setup = resolve(config)
        prior = measured == "prior_pass_ms"
        cost = PassCost.prior(setup.gpu, setup.target, config.tp) if prior else setup.target_cost
        gamma = int(row["gamma"] or 0)   # a pass verifying γ + 1 tokens a sequence, no draft needed
        tokens = config.batch_size * (gamma + 1)
        ctx = config.prompt_len
        sampling = setup.gpu.sample_us_per_token * 1e-6 * tokens if prior else 0.0
        return float(cost.time(tokens, config.batch_size * ctx, (gamma + 1) * config.batch_size * ctx)
                     + sampling) * 1e3
    if measured == "draft_cost_ratio":
        setup = resolve(config)
        return float(RoundCost(setup.target_cost, setup.draft.cost, setup.overhead).draft_step_ratio(512))
    if alpha is not None and config.gamma > 0:
        config = replace(config, acceptance=IIDAcceptance(alpha))
    result = simulate(config)
    if measured in ("tpot_ms", "output_throughput", "duration_s") + TAIL_MEASURES:
        return float(result["mean_tpot_ms" if measured == "tpot_ms" else measured])
    if measured == "throughput_ratio":
        changes = dict(part.split("=") for part in row["versus"].split(";") if part)
        other = replace(config, **{k: int(v) for k, v in changes.items()})
        return float(result["output_throughput"]) / float(simulate(other)["output_throughput"])
    raise ValidationInputError(f"unknown measure {measured!r}")


# ----------------------------------------------------------------------------- fits inside a source


def _per_token_s(row, config) -> float:
    """A baseline point's seconds a token of one request."""
    base = float(row["baseline"])
    unit = row["baseline_unit"]
    if unit == "e2e_ms":
        return base / 1e3 / config.output_len
    if unit == "tok_s_gpu":
        return config.batch_size / (config.tp * config.dp * base)
    if unit == "tok_s":   # the whole run's output tokens a second, at most ``requests`` in flight
        return min(config.batch_size, config.requests) / base
    if unit == "tpot_ms":
        return base / 1e3
    raise ValidationInputError(f"row {row['id']}: baseline_unit {unit!r} is not e2e_ms, tok_s_gpu or tpot_ms")


def little_in_flight(row) -> float:
    """Requests in flight a rate-sweep row's own figures imply, by Little's law, in its slower arm:
    the rate times the published seconds its output takes (TTFT left out, so never more than the
    truth); 0 where the row is no rate sweep with a published time a token. Past the engine's cap
    (``batch_size``) the queue must grow: the row is ``overloaded`` whatever its source says."""
    unit = row.get("baseline_unit", "")
    if row.get("arrival") != "poisson" or row.get("baseline", "") == "" or row.get("output_len", "") == "" \
            or unit not in TIME_UNITS:
        return 0.0
    seconds = float(row["baseline"]) / 1e3 / (float(row["output_len"]) if unit == "e2e_ms" else 1.0)
    if row.get("measured") in ("speedup", "decode_speedup"):
        seconds = max(seconds, seconds / float(row["published"]))
    return float(row["qps"]) * seconds * float(row["output_len"])


def _concurrency(row, config) -> float:
    """Requests in flight at a curve point: a closed loop's concurrency (at most its requests);
    under a request rate, by Little's law and Poisson arrivals seeing time averages, the request
    itself and the rate times the published seconds its output takes (``_per_token_s`` × output
    length), at most the batch cap. Either way, each request's life holds that many prefills."""
    if config.qps is None:
        return min(config.batch_size, config.requests)
    return min(float(config.batch_size), 1.0 + config.qps * _per_token_s(row, config) * config.output_len)


def curve_fit(rows: pd.DataFrame, profiles: str | None = None):
    """The target's step model fitted on a curve's no-speculation points (closed loop, additive;
    a rate sweep's points at their requests in flight, ``_concurrency``)."""
    from specgauge.simulator.core import resolve
    from specgauge.simulator.fit import serve_curve_fit

    configs = [row_config(r, profiles) for _, r in rows.iterrows()]
    setup = resolve(configs[0])
    conc = [_concurrency(r, c) for (_, r), c in zip(rows.iterrows(), configs)]
    per_token = [_per_token_s(r, c) for (_, r), c in zip(rows.iterrows(), configs)]
    return serve_curve_fit(setup.target_cost, conc, per_token, configs[0].prompt_len, configs[0].output_len)


def fitted_profile(rows: pd.DataFrame, path: str, base_profiles: str | None = None) -> tuple[str, str]:
    """A profile file holding the target's step model fitted on the curve's baseline points."""
    from specgauge.simulator.profiles import step_key
    from specgauge.simulator.core import resolve

    config = row_config(rows.iloc[0], base_profiles)
    setup = resolve(config)
    fit = curve_fit(rows, base_profiles)
    key = step_key(setup.target.name, setup.gpu.name, config.tp)
    with open(path, "w") as handle:
        handle.write(f'[steps."{key}"]\nc_fixed_ms = {float(fit.c_fixed) * 1e3!r}\nc_token_us = {float(fit.c_token) * 1e6!r}\n'
                     f'c_kv_ns = {float(fit.c_kv) * 1e9!r}\nknee = 1.0\nstep_overhead_ms = 0.0\n'
                     f'source = "fitted on the no-speculation points of {key}"\n')
    profiles = path if base_profiles is None else f"{base_profiles},{path}"
    return profiles, f"step model fitted on the source's no-speculation points ({fit.describe()}, rms {fit.rms_error:.1%})"


# ----------------------------------------------------------------------------- evaluating a table


def _alpha_label(alpha: float, where: str) -> str:
    bound = " (at the 0.99 bound: the figure is out of the simulator's reach)" if alpha >= 0.989 else ""
    return f"α = {alpha:.3f} {where}{bound}"


def evaluate(table: pd.DataFrame, profiles: str | None = None, fit_curves: bool = True,
             workdir: str | None = None, reference: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every row of ``table`` simulated. ``fit_curves``: rows of a ``fit_group`` run on a step model
    fitted on their source's no-speculation points (else on ``profiles`` alone, as a user without
    measurements gets them). ``reference``: where a ``row:ID`` outside ``table`` is looked up
    (its α calibrated again on ``profiles``). Returns the table with ``simulated``, ``ratio``, ``alpha_used``,
    ``calibration``, ``kind`` (dense, moe), ``profile`` (prior, calibrated) and ``load``."""
    from specgauge.reports.planning.intervals import SHIPPED_STEPS
    from specgauge.simulator.core import resolve

    workdir = workdir or tempfile.mkdtemp(prefix="specgauge-validate-")
    group_profiles: dict[str, tuple[str, str]] = {}
    if fit_curves:
        for group, rows in table[table["fit_group"] != ""].groupby("fit_group", sort=False):
            if rows["baseline"].eq("").any():
                continue
            group_profiles[group] = fitted_profile(rows, os.path.join(workdir, f"{group}.toml"), profiles)
    alphas: dict[str, float] = {}
    out = []
    order = sorted(range(len(table)), key=lambda i: 0 if table.iloc[i]["alpha"] == "calibrate" else 1)
    results: dict[int, dict] = {}
    for i in order:
        row = table.iloc[i]
        fitted = group_profiles.get(row["fit_group"])
        row_profiles = fitted[0] if fitted else profiles
        config = row_config(row, row_profiles)
        how = row["alpha"]
        alpha: float | None = None
        decode = row["measured"] == "decode_speedup"
        if how == "calibrate":
            alpha = calibrate_alpha(lambda a: speedup(config, a, decode, _e2e(row)), float(row["published"]))
            where = "calibrated here"
        elif how == "length":
            alpha = alpha_for_length(config.gamma, float(row["accepted_length"]))
            where = row["alpha_source"] or f"from the accepted length {row['accepted_length']}"
        elif how.startswith("row:"):
            alpha = alphas.get(how[4:])
            if alpha is None:   # the row it names was not evaluated here (another fold): calibrate it now
                pool = table if reference is None else reference
                ref = pool[pool["id"] == how[4:]]
                if not len(ref):
                    raise ValidationInputError(f"row {row['id']}: alpha {how!r} names no row")
                source_row = ref.iloc[0]
                ref_config = row_config(source_row, row_profiles)
                alpha = calibrate_alpha(lambda a: speedup(ref_config, a, source_row["measured"] == "decode_speedup",
                                                          _e2e(source_row)), float(source_row["published"]))
            where = row["alpha_source"] or f"from row {how[4:]}"
        elif how != "":
            alpha = float(how)
            where = row["alpha_source"] or "given"
        if alpha is not None:
            alphas[row["id"]] = alpha
        value = simulated_value(row, config, alpha)
        setup = resolve(config)
        calibration = _alpha_label(alpha, where) if alpha is not None else (row["alpha_source"] or "none")
        if fitted:
            calibration += "; " + fitted[1]
        elif row["fit_group"] and not fit_curves:
            calibration += "; datasheet prior"
        published = float(row["published"])
        role = "calibrated" if fitted and row["gamma"] in ("0", "") else row["role"]
        results[i] = {**row.to_dict(), "simulated": value, "ratio": value / published, "alpha_used": alpha,
                      "calibration": calibration, "role": role, "kind": "moe" if setup.target.is_moe else "dense",
                      "profile": "prior" if setup.target_cost.source.startswith(SHIPPED_STEPS) else "calibrated",
                      "load": _load_held(row, config), "draft_kind": _draft_kind(config)}
    out = [results[i] for i in range(len(table))]
    return pd.DataFrame(out)


def _load_held(row, config) -> float:
    """The batch a row's run held, for its pool's load band: the batch size, or under a request
    rate with a published time a token, the requests in flight by Little's law (``_concurrency``),
    not the engine's cap."""
    if config.qps is not None and row.get("baseline", "") != "" and row.get("baseline_unit", "") in TIME_UNITS:
        return _concurrency(row, config)
    return float(config.batch_size)


def _draft_kind(config) -> str:
    from specgauge.simulator.drafts import draft_kind

    return (draft_kind(config.draft) or "none") if config.gamma > 0 else "none"


# ----------------------------------------------------------------------------- leave one source out


def _head_step(gpu_name: str = "h100", target_name: str = "llama-3.1-8b"):
    """An EAGLE-3 head's datasheet pass, without the proposer's own work around it."""
    from specgauge.simulator.cost import PassCost
    from specgauge.simulator.drafts import EAGLE_DRAFT_BYTES, _head_params
    from specgauge.simulator.profiles import load_gpu, load_model

    gpu, target = load_gpu(gpu_name), load_model(target_name)
    _, linear = _head_params(target, "eagle")
    return PassCost.from_shape(gpu, linear_params=linear, kv_bytes_per_token=target.kv_bytes_per_gpu(1) / target.layers,
                               attn_flops_per_ctx=4.0 * target.heads * target.head_dim, layers=2, hidden=target.hidden,
                               dtype_bytes=EAGLE_DRAFT_BYTES)


def head_pass_s(ctx: float = 256.0) -> float:
    """The head's datasheet pass at batch 1 (Llama-3.1-8B's EAGLE-3 head on an H100)."""
    return float(_head_step().time(1, ctx, ctx))


_SOURCE_KEY = re.compile(r"\[\d+\]")


def alpha_from(row, table: pd.DataFrame) -> str:
    """Where a row's α came from: ``run`` (the run's own accepted length, or its source's curve),
    ``other`` (another source's run: its residual carries α's error, which is not the step
    model's), ``none`` (no speculation)."""
    alpha = str(row.get("alpha", ""))
    if str(row.get("gamma", "")) in ("", "0") or alpha == "":
        return "none"
    if alpha.startswith("row:"):
        ref = table.loc[table["id"] == alpha[4:], "source"]
        return "run" if len(ref) and ref.iloc[0] == row["source"] else "other"
    named = set(_SOURCE_KEY.findall(str(row.get("alpha_source", "")))) - {row["source"]}
    return "other" if named else "run"


def prior_path(folds: pd.DataFrame) -> pd.DataFrame:
    """The held-out rows as a user who gave the planner no runs of their own gets them: every
    row on the shipped constants, a curve with published no-speculation points on the datasheet
    prior (``variant`` prior), not on a fit of those points."""
    keep = (((folds["variant"] == "as published") & (folds["fit_group"] == "")) | (folds["variant"] == "prior"))
    return folds[keep]


def residuals(folds: pd.DataFrame, table: pd.DataFrame | None = None, runs: pd.DataFrame | None = None,
              own: pd.DataFrame | None = None) -> pd.DataFrame:
    """The intervals' table: one row per figure predicted out of sample, r = log(published /
    simulated): the prior path's held-out rows (``path`` loso), the user-runs protocol's
    points (``path`` user runs, ``runs``) and a team's own rows (``path`` yours, ``own``: the
    ``user`` variant of ``loso``), each with its ``figure`` (ratio, absolute, tail), its
    ``profile`` (what the planner was given) and where its α came from (``alpha_from``)."""
    from specgauge.reports.planning.intervals import figure_of, load_band

    table = shipped_table() if table is None else table
    rows = steady_rows(prior_path(folds))   # a run past capacity is no steady-state figure's residual
    predicted = rows[(rows["role"] == "predicted") & rows["ratio"].notna()]
    out = pd.DataFrame({
        "source": predicted["source"], "id": predicted["id"], "path": "loso", "setup": predicted["setup"],
        "measured": predicted["measured"], "figure": [figure_of(m) for m in predicted["measured"]],
        "draft_kind": predicted["draft_kind"], "kind": predicted["kind"], "profile": predicted["profile"],
        "load": [load_band(x) for x in predicted["load"]], "gamma": predicted["gamma"].replace("", "0").astype(int),
        "alpha": predicted["alpha_used"], "alpha_from": [alpha_from(r, table) for _, r in predicted.iterrows()],
        "published": predicted["published"].astype(float), "simulated": predicted["simulated"].round(6)})
    if own is not None and len(own):
        mine = steady_rows(own)
        mine = mine[(mine["role"] == "predicted") & mine["ratio"].notna()]
        out = pd.concat([out, pd.DataFrame({
            "source": mine["source"], "id": mine["id"], "path": "yours", "setup": mine["setup"],
            "measured": mine["measured"], "figure": [figure_of(m) for m in mine["measured"]],
            "draft_kind": mine["draft_kind"], "kind": mine["kind"], "profile": mine["profile"],
            "load": [load_band(x) for x in mine["load"]], "gamma": mine["gamma"].replace("", "0").astype(int),
            "alpha": mine["alpha_used"], "alpha_from": "run", "published": mine["published"].astype(float),
            "simulated": mine["simulated"].round(6)})], ignore_index=True)
    if runs is not None and len(runs):
        out = pd.concat([out, pd.DataFrame({
            "source": runs["source"], "id": runs["id"], "path": "user runs", "setup": runs["setup"],
            "measured": runs["measured"], "figure": runs["figure"], "draft_kind": runs["draft_kind"],
            "kind": runs["kind"], "profile": runs["profile"], "load": [load_band(x) for x in runs["load"]],
            "gamma": runs["gamma"].astype(int), "alpha": runs["alpha"], "alpha_from": "run",
            "published": runs["published"].astype(float), "simulated": runs["simulated"].round(6)})],
            ignore_index=True)
    out["residual"] = np.log(out["published"] / out["simulated"]).round(6)
    return out.reset_index(drop=True)


def share(frame: pd.DataFrame) -> tuple[int, int]:
    """Predicted rows within ±15 % and their count."""
    predicted = frame[(frame["role"] == "predicted") & frame["ratio"].notna()]
    return int(((predicted["ratio"] - 1).abs() <= WITHIN).sum()), len(predicted)


#: Figures that are a ratio of two runs on the same deployment (the engine's own costs largely cancel),
#: against the absolute ones (TPOT, throughput, latency), whose error is the step model's whole error.
RELATIVE_MEASURES = ("speedup", "decode_speedup", "throughput_ratio")


def share_by_figure(frame: pd.DataFrame) -> dict[str, tuple[int, int]]:
    """``share`` of the relative figures (speed-ups, ratios) and of the absolute ones apart."""
    relative = frame["measured"].isin(RELATIVE_MEASURES)
    return {"relative": share(frame[relative]), "absolute": share(frame[~relative])}


def binomial_interval(hits: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson interval of a share (for coverage: a nominal 90 % that covers 70 % is a defect)."""
    from scipy.stats import binomtest

    if n == 0:
        return math.nan, math.nan
    ci = binomtest(hits, n).proportion_ci(confidence)
    return float(ci.low), float(ci.high)


def markdown(frame: pd.DataFrame) -> str:
    """A GitHub table (no extra dependency)."""
    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(("—" if v != v else f"{v:.3g}") if isinstance(v, float) else str(v) for v in row) + " |"
              for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def display_table(frame: pd.DataFrame) -> pd.DataFrame:
    """The docs' table: setup, source, published, simulated, ratio, role, calibration, note."""
    out = frame[["setup", "source", "published", "simulated", "ratio", "role", "calibration", "note"]].copy()
    out["published"] = out["published"].astype(float)
    out["simulated"] = out["simulated"].astype(float).round(3)
    out["ratio"] = out["ratio"].astype(float).round(3)
    return out


def resolve_moe(config) -> bool:
    from specgauge.simulator.core import resolve

    return bool(resolve(config).target.is_moe)


def with_held_out_intervals(rows: pd.DataFrame, residual_rows: pd.DataFrame, level: float) -> pd.DataFrame:
    """``rows`` (``source``, ``figure``, ``profile``, ``kind``, ``load``, ``simulated``,
    ``published``) with each interval computed from the other sources' residuals alone, bounded
    like the planner's (a speed-up never above γ + 1), and ``covered``."""
    from specgauge.reports.planning.intervals import held_out_q, load_band

    out = rows.copy()
    keys = out.assign(load=[load_band(float(x)) for x in out["load"]])
    out["q"] = held_out_q(keys, residual_rows, level)
    sim = out["simulated"].astype(float)
    out["interval_lo"] = sim * np.exp(-out["q"])
    out["interval_hi"] = sim * np.exp(out["q"])
    gamma = pd.to_numeric(out["gamma"], errors="coerce").fillna(0)
    capped = out["measured"].isin(["speedup", "decode_speedup"]) & (gamma > 0)
    out.loc[capped, "interval_hi"] = np.minimum(out.loc[capped, "interval_hi"], gamma[capped] + 1.0)
    published = out["published"].astype(float)
    out["covered"] = (published >= out["interval_lo"]) & (published <= out["interval_hi"])
    return out


def decisive(rows: pd.DataFrame, low: float = 0.85, high: float = 1.15) -> tuple[int, int]:
    """Among speed-up rows whose published value is below ``low`` or above ``high``, how many
    intervals exclude 1.0 (the planner says whether speculation pays), and how many rows."""
    speedups = rows[rows["measured"].isin(["speedup", "decode_speedup"])]
    published = speedups["published"].astype(float)
    clear = speedups[(published < low) | (published > high)]
    excludes = (clear["interval_lo"] > 1.0) | (clear["interval_hi"] < 1.0)
    return int(excludes.sum()), len(clear)


def path_summary(rows: pd.DataFrame) -> dict[str, float]:
    """Within ±15 %, covered, median half-width (of every figure and of the speed-ups) and decisive."""
    half = np.expm1(rows["q"].replace(np.inf, np.nan))
    speedups = rows["measured"].isin(["speedup", "decode_speedup"])
    hits, n = decisive(rows)
    return {"n": len(rows), "within": int(((rows["ratio"].astype(float) - 1).abs() <= WITHIN).sum()),
            "covered": int(rows["covered"].sum()), "half_width": float(half.median()) if len(rows) else math.nan,
            "speedup_half_width": float(half[speedups].median()) if speedups.any() else math.nan,
            "speedups": int(speedups.sum()), "decisive": hits, "clear": n,
            "sources": int(rows["source"].nunique()),
            "curves": int(rows["curve"].nunique()) if "curve" in rows else 0}


# ----------------------------------------------------------------------------- a user's own rows

#: What a result file's suffix may say about the deployment it ran (the JSON does not record it).
RESULT_OPTIONS: dict[str, type] = {"gpu": str, "target": str, "tp": int, "dp": int, "ep": int, "draft": str,
                                   "gamma": int, "source": str}


def rows_from_result(text: str) -> pd.DataFrame:
    """``FILE.json:gpu=G,target=M[,tp=N,draft=D,gamma=K,source=NAME]``: a ``vllm bench serve
    --save-result`` or ``sglang.bench_serving`` result as one predicted row of its mean TPOT at
    its max concurrency and mean lengths, simulated as the closed loop the client ran
    (``arrival`` closed); a speculative run's α from its accepted length.
    ``FILE.csv``: rows in the shipped table's schema."""
    from specgauge.reports.planning.bench_results import (accepted_length_key, check_json_object, check_serve_result,
                                                         check_spec_options, spec_gamma)

    if text.lower().endswith(".csv"):
        return check_deployments(read_table(text), repr(text))
    path, options = check_spec_options(text, RESULT_OPTIONS)
    if path.suffix.lower() == ".csv":
        raise ValidationInputError(f"{text!r}: a CSV of rows takes no options; put gpu, target, ... in its columns")
    data = check_json_object(path)  # a missing or unreadable file is named as such first
    missing = [k for k in ("gpu", "target") if k not in options]
    if missing:
        raise ValidationInputError(f"{text!r}: a benchmark result does not record its deployment; give "
                                   f"{path}:gpu=NAME,target=NAME[,tp=N,draft=NAME,gamma=K]")
    where = repr(str(path))
    concurrency, input_len, output_len, tpot_s = check_serve_result(data, where)
    length_key = accepted_length_key(data)
    draft = options.get("draft", "none" if length_key is None else "")
    row = {c: "" for c in COLUMNS}
    row.update(id=path.stem, source=options.get("source", path.name), locator=path.name,
               setup=f"mean TPOT (ms), {options['target']} on {options['gpu']}, concurrency {concurrency:g}",
               measured="tpot_ms", published=f"{tpot_s * 1e3!r}", role="predicted", gpu=options["gpu"],
               target=options["target"], tp=str(options.get("tp", 1)), dp=str(options.get("dp", 1)),
               ep=str(options.get("ep", 1)), batch_size=str(max(int(round(concurrency)), 1)),
               prompt_len=str(max(int(round(input_len)), 1)), output_len=str(max(int(round(output_len)), 1)),
               requests=str(max(4 * int(round(concurrency)), 16)), arrival="closed", engine="",
               note="a user's run (a closed loop at its max concurrency)")
    if length_key is not None:
        if not draft:
            raise ValidationInputError(f"{text!r}: a speculative run: say what drafted, e.g. {path}:draft=eagle,...")
        gamma = spec_gamma(data, where, options.get("gamma"))
        row.update(draft=draft, gamma=str(gamma), alpha="length", accepted_length=f"{float(data[length_key])!r}",
                   alpha_source=f"from the run's accepted length {float(data[length_key]):.3g}",
                   setup=f"mean TPOT (ms), {options['target']} + {draft} γ={gamma} on {options['gpu']}, "
                         f"concurrency {concurrency:g}")
    else:
        row.update(draft="none", gamma="0", alpha_source="no speculation")
    return check_deployments(check_table(pd.DataFrame([row]), where), where)


# ----------------------------------------------------------------------------- the knee study

KNEES = (1.0, 1.5, 2.0, 3.0, 4.0, math.inf)


def knee_study(table: pd.DataFrame, workdir: str | None = None) -> pd.DataFrame:
    """Every row at each knee of the datasheet prior (written over every bundled GPU), the ratios
    side by side: fit the knee on one source, predict the others."""
    from specgauge.simulator.profiles import known_gpus

    workdir = workdir or tempfile.mkdtemp(prefix="specgauge-knee-")
    out = table[["setup", "source", "role"]].copy()
    for knee in KNEES:
        path = os.path.join(workdir, f"knee{knee}.toml")
        with open(path, "w") as handle:
            handle.write("".join(f'[gpus."{g}"]\nknee = {"inf" if knee == math.inf else knee}\n' for g in known_gpus()))
        out[f"knee {knee:g}"] = evaluate(table, path, workdir=workdir)["ratio"].round(3).to_numpy()
    return out
