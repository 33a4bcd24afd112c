"""``specgauge calibrate``: fit the step-time model to your own measurements, write a profile for ``--profiles``.

Inputs, any mix (each becomes equations of ``specgauge.simulator.fit``):

* ``--steps FILE.csv``: timed steps, columns ``batched_tokens, kv_tokens, ms`` (``batch``
  and ``model`` optional; with ``model`` only the target's rows are used);
* ``--latency FILE.json:batch=B,input=I,output=O``: ``vllm bench latency --output-json``
  files (the JSON holds ``avg_latency`` but not the run's shape, so the suffix gives it,
  unless the JSON carries ``batch_size``/``input_len``/``output_len``);
* ``--serve FILE.json[:draft=NAME][,gamma=N]``: ``vllm bench serve --save-result`` or
  ``sglang.bench_serving`` result files (SGLang's ``accept_length`` read as the accepted
  length; its results do not record γ, so ``gamma=`` gives it). A run
  without speculation contributes its mean TPOT at its ``max_concurrency``, read as a
  closed loop (a decode step plus the prompt prefills of the requests that replace the
  others meanwhile: ``fit.closed_loop_equation``); a run with
  speculation (``spec_decode_acceptance_length`` present; ``draft=`` names the proposer:
  a model, ``eagle``, ``mtp`` or ``ngram``) is priced after the fit: what a round costs
  beyond the verify pass. Runs of one proposer at two or more concurrencies split it into
  the engine's overhead per speculative step and the proposer's cost per drafted token,
  runs at two or more draft lengths (``gamma``) split off its cost per draft pass (a round
  is γ sequential passes); one run makes it all the proposer's per-round cost
  (``split_speculation``).

Writes one TOML that stands alone for ``--profiles``: the GPU's and the model's tables,
``[steps."MODEL@GPU@tpN"]`` and the proposer's; prints and saves each point's error
(``PATH.points.csv``) and, with ``--plot``, a measured-versus-fitted PNG. Each input kind
has one schema function (``check_steps_frame``, ``check_spec_options``,
``check_json_object``, ``check_serve_result``) that other readers can reuse.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from specgauge import inputs
from specgauge.csvio import check_writable, write_bytes_atomic, write_csv_atomic
from specgauge.errors import ConfigError, as_usage_error
from specgauge.simulator.cost import PassCost
from specgauge.simulator.drafts import draft_kind
from specgauge.simulator.fit import (Equation, StepModelFit, closed_loop_equation, fit_step_model, latency_equation,
                                     step_equation, tpot_prefills)
from specgauge.simulator.profiles import GPU, Model, load_gpu, load_model, step_key
from specgauge.sweeps.journal import sweep_lock
from specgauge.reports.planning.bench_results import (ACCEPTED_LENGTH_KEYS, CalibrateError, ServeRun,
                                                     accepted_length_key, check_consistent_runs, check_distinct_files,
                                                     check_json_object, check_model_id, check_serve_result,
                                                     check_spec_options, positive_number, spec_gamma)

STEP_COLUMNS = ("batched_tokens", "kv_tokens", "ms")


def check_steps_frame(path: Path) -> pd.DataFrame:
    """A timed-steps CSV: columns batched_tokens, kv_tokens, ms (numbers), batch and model optional; at least a row."""
    text = inputs.read_input_text(path)  # a regular file of a sane size, UTF-8: else one line, exit 2
    try:
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        raise CalibrateError(f"{str(path)!r} is empty; needs a header {', '.join(STEP_COLUMNS)} and rows") from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise CalibrateError(f"cannot read step times {str(path)!r}: {exc}") from None
    missing = set(STEP_COLUMNS) - set(frame.columns)
    if missing:
        raise CalibrateError(f"{str(path)!r} lacks column(s) {', '.join(sorted(missing))}; needs batched_tokens, "
                             "kv_tokens, ms (batch and model optional)")
    if not len(frame):
        raise CalibrateError(f"{str(path)!r} has a header but no rows")
    for name in STEP_COLUMNS:
        values = pd.to_numeric(frame[name], errors="coerce")
        bad = ~np.isfinite(values.to_numpy(dtype=float)) | (values.to_numpy(dtype=float) < 0)
        if name == "ms":
            bad |= values.to_numpy(dtype=float) == 0
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            column = list(frame.columns).index(name) + 1
            raise CalibrateError(f"{str(path)!r} line {i + 2}, column {column} ({name}): {frame[name].iloc[i]!r} is "
                                 f"not a number {'> 0' if name == 'ms' else '>= 0'}")
        frame[name] = values
    return frame


def check_accepted_length(data: dict[str, Any], path: Path) -> float:
    """A speculative run's accepted length: tokens a verification step emits, the bonus token
    included, so at least 1 (below it the round's cost beyond verification turns negative)."""
    key = accepted_length_key(data) or ACCEPTED_LENGTH_KEYS[0]
    place = inputs.where(path, inputs.json_key_line(inputs.read_input_text(path), key), key)
    return inputs.check(data[key], inputs.Real(low=1.0, noun="an accepted length (tokens a verification "
                                                                  "step emits, the bonus token included)"), place)


# --------------------------------------------------------------------------- equations


def steps_equations(path: Path, model: str) -> list[Equation]:
    frame = check_steps_frame(path)
    if "model" in frame:
        frame = frame[frame["model"].astype(str).str.lower() == model]
        if not len(frame):
            raise CalibrateError(f"{str(path)!r} has no rows for model {model!r}")
    return [step_equation(r.batched_tokens, r.kv_tokens, r.ms * 1e-3, f"{path.name}:{i + 1}")
            for i, r in enumerate(frame.itertuples(index=False))]


#: a fitted profile simulated at a measurement's conditions must give it back within this (relative)
ROUND_TRIP_TOLERANCE = 0.03


@dataclasses.dataclass(frozen=True)
class Replay:
    """How to simulate one measurement: the configuration's fields (beside the profile's GPU, model
    and TP), the simulated column that answers it, and what divides that column to give the
    measured number's unit (a latency run's steps)."""

    label: str
    fields: tuple[tuple[str, Any], ...]
    column: str
    per: float = 1.0


def latency_replay(label: str, batch: int, input_len: int, output_len: int) -> Replay:
    """A ``vllm bench latency`` run: one batch, prefilled in one pass, decoded together; its time per step."""
    return Replay(label, (("batch_size", batch), ("requests", batch), ("prompt_len", input_len),
                          ("output_len", output_len), ("max_batched_tokens", max(8192, batch * input_len)),
                          ("draft", None), ("gamma", 0)),
                  "mean_e2el_ms", float(max(output_len, 1)))


def serve_replay(label: str, concurrency: float, input_len: float, output_len: float, requests: float,
                 draft: str | None = None, gamma: int = 0, accepted_length: float = 1.0) -> Replay:
    """A ``vllm bench serve --max-concurrency`` run: the simulator's steady closed loop (``--arrival closed``);
    a speculative one at the i.i.d. α whose tokens a round match its accepted length, without empty proposals."""
    fields: list[tuple[str, Any]] = [("batch_size", int(round(concurrency))), ("requests", int(min(requests, 400))),
                                     ("prompt_len", max(int(round(input_len)), 1)),
                                     ("output_len", max(int(round(output_len)), 2)), ("arrival", "closed")]
    if draft is None:
        fields += [("draft", None), ("gamma", 0)]
    else:
        fields += [("draft", draft), ("gamma", gamma), ("empty_proposals", 0.0),
                   ("alpha", alpha_for_length(accepted_length, gamma))]
    return Replay(label, tuple(fields), "mean_tpot_ms")


def alpha_for_length(length: float, gamma: int) -> float:
    """The i.i.d. α whose (1 − α^(γ+1)) / (1 − α) equals ``length`` (bisection; 0 and 1 at the ends)."""
    from specgauge.laws import tokens_per_pass

    if length <= 1.0:
        return 0.0
    if length >= gamma + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if tokens_per_pass(mid, gamma) < length else (lo, mid)
    return 0.5 * (lo + hi)


def round_trip(replays: list[Replay], measured_ms: dict[str, float], gpu: str, target: str, tp: int,
               profiles: str) -> pd.DataFrame:
    """Each measurement simulated with the written profile at its own conditions."""
    from specgauge.simulator import SimulationConfig, simulate
    from specgauge.simulator.acceptance import IIDAcceptance

    rows = []
    for replay in replays:
        fields = dict(replay.fields)
        if "alpha" in fields:
            fields["acceptance"] = IIDAcceptance(fields.pop("alpha"))
        config = SimulationConfig(gpu=gpu, target=target, tp=tp, profiles=profiles, **fields)
        value = float(simulate(config)[replay.column]) / replay.per
        rows.append({"measurement": replay.label, "simulated_ms": value,
                     "round_trip_error": value / measured_ms[replay.label] - 1.0})
    return pd.DataFrame(rows, columns=["measurement", "simulated_ms", "round_trip_error"])


def round_trip_lines(points: pd.DataFrame, fit: StepModelFit) -> list[str]:
    """The round trip in words: how many measurements the simulated profile gives back within
    ``ROUND_TRIP_TOLERANCE``, and for each it does not, why."""
    simulated = points[points["simulated_ms"].notna()]
    if not len(simulated):
        return ["round trip: none of these measurements can be simulated (timed steps are the fit's own equations)"]
    errors = simulated["round_trip_error"].abs()
    lines = [f"round trip: the profile simulated at each measurement's conditions (serve runs as --arrival closed) "
             f"gives {int((errors <= ROUND_TRIP_TOLERANCE).sum())} of {len(simulated)} back within "
             f"{ROUND_TRIP_TOLERANCE:.0%} (worst {errors.max():.1%})"]
    for _, row in simulated[errors > ROUND_TRIP_TOLERANCE].iterrows():
        fitted = row.get("relative_error")
        if pd.notna(fitted) and abs(fitted) > ROUND_TRIP_TOLERANCE:
            why = f"the step model itself misses it by {fitted:+.1%}: its form cannot reach this point"
        elif pd.isna(fitted):
            why = ("its speculative cost is the split of the proposer's runs (per speculative step, per draft pass, "
                   "per drafted token), which fits these runs only as well as that split can")
        else:
            why = (f"the fit's equation gives it within {fitted:+.1%}, so the simulated schedule differs from the "
                   "equation's (prefill chunks, the batch's lengths, acceptance drawn per round)")
        lines.append(f"  cannot reproduce {row['measurement']}: simulated {row['simulated_ms']:.4g} ms against "
                     f"{row['measured_ms']:.4g} measured ({row['round_trip_error']:+.1%}): {why}")
    return lines


def latency_measurement(text: str) -> tuple[Equation, Replay]:
    """A ``--latency`` argument: its equation and how to simulate it."""
    path, options = check_spec_options(text, {"batch": int, "input": int, "output": int})
    data = check_json_object(path)
    shape = {key: options.get(key, data.get(name)) for key, name in
             (("batch", "batch_size"), ("input", "input_len"), ("output", "output_len"))}
    if any(v is None for v in shape.values()):
        raise CalibrateError(f"{str(path)!r}: `vllm bench latency` JSON does not record the run's shape; "
                             f"give it as {path}:batch=B,input=I,output=O")
    try:
        batch, input_len, output_len = (int(shape[k]) for k in ("batch", "input", "output"))
    except (TypeError, ValueError):
        raise CalibrateError(f"{str(path)!r}: batch_size, input_len and output_len must be integers") from None
    label = f"{path.name} (latency, batch {batch})"
    return (latency_equation(batch, input_len, output_len, positive_number(data, "avg_latency", str(path)), label),
            latency_replay(label, batch, input_len, output_len))


def calibration_prior(gpu: GPU, model: Model, tp: int) -> PassCost:
    """The datasheet prior of a whole measured step: the pass plus the engine's per-step and per-token costs."""
    prior = PassCost.prior(gpu, model, tp)
    return replace(prior, c_fixed=prior.c_fixed + gpu.step_overhead_ms * 1e-3,
                   c_token=prior.c_token + gpu.sample_us_per_token * 1e-6)


@dataclasses.dataclass(frozen=True)
class SpecRun:
    """A speculative serve run: its shape and what a round cost beyond the fitted verify pass."""

    where: str
    kind: str
    proposer: str
    concurrency: float
    gamma: int
    extra_s: float
    prefill_tokens: float = 0.0   # prompt tokens a round's proposer ingests (the prefills the round carries)

    @property
    def proposer_tokens(self) -> float:
        """Tokens the proposer handles a round: γ drafted a sequence and the carried prompts, which the
        simulator prices at the same per-token cost (``drafts.RoundFitDraft.prefill``)."""
        return self.concurrency * self.gamma + self.prefill_tokens


def spec_run(fit: StepModelFit, data: dict[str, Any], where: str, draft: str, *, model: Model,
             profiles: str | None, gamma: int | None = None) -> SpecRun:
    """What a speculative round cost beyond its verify pass."""
    concurrency, input_len, output_len, tpot = check_serve_result(data, where)
    accepted_length = positive_number(data, accepted_length_key(data) or ACCEPTED_LENGTH_KEYS[0], where)
    gamma = spec_gamma(data, where, gamma)
    # A round carries the prompt prefills of the requests that replace finished ones meanwhile, inside its
    # verify pass (``fit.closed_loop_equation``, mixed): m of them, the other sequences verifying γ + 1 tokens.
    m = min(tpot_prefills(concurrency, output_len) * accepted_length, concurrency - 1.0)
    kv = (concurrency - m) * (input_len + output_len / 2)
    verify = float(fit.predict((concurrency - m) * (gamma + 1) + m * input_len, kv))
    kind = draft_kind(draft)
    proposer = load_model(draft, profiles).name if kind == "model" else f"{kind}:{model.name}"
    return SpecRun(where, kind, proposer, concurrency, gamma, tpot * accepted_length - verify, m * input_len)


def split_speculation(runs: list[SpecRun]) -> tuple[float | None, dict[str, tuple[float, float, float]], str]:
    """(overhead per speculative step in s, {proposer: (per-round s, per drafted token s, per draft pass s)},
    how it was split).

    A round's extra cost is ``s + c · γ + p · concurrency · γ``: the engine's per-step
    overhead (scheduling, rejection sampling), the proposer's γ sequential passes, and its
    cost per drafted token. Runs of one proposer at two or more draft lengths separate the
    per-pass part; at two or more loads, the per-token part. What the runs cannot separate
    is left out (0), and one run makes its whole extra cost the proposer's per-round cost."""
    by: dict[str, list[SpecRun]] = {}
    for run in runs:
        by.setdefault(run.proposer, []).append(run)
    overhead: list[float] = []
    proposers: dict[str, tuple[float, float, float]] = {}
    notes = []
    for proposer, group in by.items():
        gammas = {r.gamma for r in group}
        columns = {"step": [1.0] * len(group)}
        if len(gammas) >= 2:
            columns["pass"] = [float(r.gamma) for r in group]
        if len({r.concurrency for r in group}) >= 2 or len({r.proposer_tokens for r in group}) >= 2:
            columns["token"] = [r.proposer_tokens for r in group]
        a = np.array(list(columns.values())).T
        while a.shape[1] > 1 and (np.linalg.matrix_rank(a) < a.shape[1] or a.shape[0] < a.shape[1]):
            columns.pop("token" if "token" in columns else "pass")
            a = np.array(list(columns.values())).T
        if a.shape[1] == 1:
            extra = float(np.mean([r.extra_s for r in group]))
            proposers[proposer] = (extra, 0.0, 0.0)
            notes.append(f"{proposer}: one load and one draft length only, so its {extra * 1e3:.3g} ms a round is the "
                         "proposer's whole cost (runs at two concurrencies separate the per-step overhead, at two "
                         "draft lengths the per-pass cost)")
            continue
        coef, _ = nnls(a, np.array([r.extra_s for r in group]))
        fitted = dict(zip(columns, map(float, coef)))
        overhead.append(fitted["step"])
        proposers[proposer] = (0.0, fitted.get("token", 0.0), fitted.get("pass", 0.0))
        parts = [f"{fitted['step'] * 1e3:.3g} ms per speculative step"]
        if "pass" in fitted:
            parts.append(f"{fitted['pass'] * 1e3:.3g} ms per draft pass")
        if "token" in fitted:
            parts.append(f"{fitted['token'] * 1e6:.3g} us per proposer token (drafted, or a carried prompt's)")
        loads = len({r.concurrency for r in group})
        notes.append(f"{proposer}: {len(group)} runs at {loads} load{'s' if loads > 1 else ''}"
                     + (f" and {len(gammas)} draft lengths" if len(gammas) > 1 else "") + ": " + " + ".join(parts))
    return (float(np.mean(overhead)) if overhead else None), proposers, "; ".join(notes)


# --------------------------------------------------------------------------- output


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return f"{value:.6g}"


def toml_table(kind: str, key: str, values: dict[str, Any]) -> str:
    lines = [f'[{kind}."{key}"]'] + [f"{name} = {_toml_value(v)}" for name, v in values.items() if v is not None]
    return "\n".join(lines) + "\n"


def profile_fields(profile: Any) -> dict[str, Any]:
    """A GPU or model profile's fields as a table (name left out), so the output stands alone."""
    return {f.name: getattr(profile, f.name) for f in dataclasses.fields(profile) if f.name != "name"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,  # a prefix is refused, never read as the option it begins (`--out`, `--output-len`)
        prog="specgauge calibrate",
        description="Fit c_fixed + blend(c_weight, c_token·batched_tokens; knee) + c_kv·kv_tokens to measured step "
                    "times and write a profile TOML (GPU, model and steps) for --profiles.")
    parser.add_argument("--gpu", required=True, help="GPU profile the measurements were taken on (h100, h200, ...)")
    parser.add_argument("--target", required=True, help="model profile that was measured")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel degree of the measured engine (default 1)")
    parser.add_argument("--steps", action="append", default=[], metavar="CSV",
                        help="timed steps: batched_tokens, kv_tokens, ms[, batch, model]")
    parser.add_argument("--latency", action="append", default=[], metavar="JSON[:batch=B,input=I,output=O]",
                        help="a `vllm bench latency --output-json` file and the run's shape")
    parser.add_argument("--serve", action="append", default=[], metavar="JSON[:draft=NAME[,gamma=N]]",
                        help="a `vllm bench serve --save-result` or `sglang.bench_serving` result, with or without "
                             "speculation (draft=eagle for vLLM's \"method\": \"eagle3\"; gamma=N where the file "
                             "does not record the draft length)")
    parser.add_argument("--profiles", default=None,
                        help="extra GPU/model profiles (TOML/JSON, several comma-separated) the names refer to")
    parser.add_argument("--out", default="calibrated.toml", help="profile TOML to write (default calibrated.toml)")
    parser.add_argument("--allow-model-mismatch", action="store_true",
                        help="take a result whose model_id does not name --target (the same model under another name);"
                             " refused otherwise")
    parser.add_argument("--plot", action="store_true", help="write a measured-versus-fitted PNG beside --out (the "
                        "fit's points, and every measurement the written profile gives back when simulated)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.tp < 1:
        raise CalibrateError(f"--tp must be >= 1, got {args.tp}")
    out = Path(args.out)
    if out.is_dir():
        raise CalibrateError(f"--out {str(out)!r} is a folder; give a file name such as {str(out / 'calibrated.toml')!r}")
    if not out.parent.exists():
        raise CalibrateError(f"the folder of --out {str(out)!r} does not exist")
    check_writable(out)  # before the fit, not after it
    with sweep_lock(out, "specgauge calibrate " + " ".join(argv or []), flag="--out"):  # one run on an --out
        return fit_and_write(args, argv, out)


def fit_and_write(args: argparse.Namespace, argv: list[str] | None, out: Path) -> int:
    """Read the measurements, fit, write the profile and its points (``--out`` checked and locked)."""
    try:  # a name given on the command line: unknown, it is a usage error (exit status 2)
        gpu = load_gpu(args.gpu, args.profiles)
        model = load_model(args.target, args.profiles)
    except ConfigError as exc:
        raise as_usage_error(exc) from None
    check_distinct_files([Path(p) for p in args.steps]
                         + [check_spec_options(t, {"batch": int, "input": int, "output": int})[0] for t in args.latency]
                         + [check_spec_options(t, {"draft": str, "gamma": int})[0] for t in args.serve])
    equations: list[Equation] = []
    plain: list[ServeRun] = []
    for path in args.steps:
        equations += steps_equations(Path(path), model.name)
    latency = [latency_measurement(text) for text in args.latency]
    equations += [equation for equation, _ in latency]
    replays: list[Replay] = [replay for _, replay in latency]
    speculative: list[tuple[dict[str, Any], str, str, int | None]] = []
    for text in args.serve:
        path, options = check_spec_options(text, {"draft": str, "gamma": int})
        data = check_json_object(path)
        check_model_id(data, repr(str(path)), model.name, args.allow_model_mismatch)
        if accepted_length_key(data) is not None:
            if "draft" not in options:
                raise CalibrateError(f"{str(path)!r} is a speculative run: name its proposer, {path}:draft=eagle")
            check_accepted_length(data, path)
            speculative.append((data, str(path), options["draft"], options.get("gamma")))
            continue
        concurrency, input_len, output_len, tpot = check_serve_result(data, str(path))
        plain.append(ServeRun(repr(str(path)), concurrency, input_len, output_len, tpot))
        label = f"{path.name} (serve TPOT)"
        equations.append(closed_loop_equation(concurrency, input_len, output_len, tpot, label,
                                              prefills=tpot_prefills(concurrency, output_len), mixed=True))
        replays.append(serve_replay(label, concurrency, input_len, output_len, positive_number(data, "completed", label)))
    check_consistent_runs(plain)   # one concurrency with two TPOTs, or TPOT falling with load: refused
    if not equations:
        raise CalibrateError("nothing to fit: give --steps, --latency or --serve files without speculation")
    fit = fit_step_model(equations, calibration_prior(gpu, model, args.tp))
    runs = [spec_run(fit, data, where, draft, model=model, profiles=args.profiles, gamma=gamma)
            for data, where, draft, gamma in speculative]
    spec_overhead, proposers, split_note = split_speculation(runs)
    sources = ", ".join(sorted({label.split(" ")[0].split(":")[0] for label in fit.labels}))
    key = step_key(model.name, gpu.name, args.tp)
    text = (f"# Written by specgauge calibrate: {len(equations)} measurements, worst-case error "
            f"{fit.worst_error:.1%}, RMS {fit.rms_error:.1%}. Use with --profiles {out.name}.\n"
            f"# {fit.describe()}\n\n")
    text += toml_table("gpus", gpu.name, profile_fields(gpu)) + "\n" + toml_table("models", model.name,
                                                                                     profile_fields(model)) + "\n"
    held = f"; held at the datasheet prior: {', '.join(fit.held)}" if fit.held else ""
    text += toml_table("steps", key, {
        "c_fixed_ms": fit.c_fixed * 1e3, "c_weight_ms": fit.c_weight * 1e3, "knee": fit.knee,
        "c_token_us": fit.c_token * 1e6, "c_kv_ns": fit.c_kv * 1e9,
        "includes_engine": True, "step_overhead_ms": 0.0, "spec_overhead_ms": (spec_overhead or 0.0) * 1e3,
        "source": f"fitted by specgauge calibrate from {len(equations)} measurements ({sources}); worst-case "
                  f"error {fit.worst_error:.1%}{held}"})
    for proposer, (round_s, token_s, pass_s) in proposers.items():
        if round_s <= 0 and token_s <= 0 and pass_s <= 0:
            print(f"note: {proposer}: its runs cost no more than the verify pass and the per-step overhead, so its "
                  "table is written with every cost 0: simulate charges this proposer nothing (without the table it "
                  "would price it from its shape, the datasheet prior)")
        text += "\n" + toml_table("steps", step_key(proposer, gpu.name, args.tp), {
            "c_fixed_ms": round_s * 1e3, "c_pass_ms": pass_s * 1e3, "c_token_us": token_s * 1e6, "c_kv_ns": 0.0,
            "per_round": True,
            "source": f"specgauge calibrate: speculative serve runs' cost beyond verification ({split_note})"})
    write_bytes_atomic(out, text.encode())
    points = pd.DataFrame({"measurement": fit.labels, "measured_ms": fit.measured * 1e3,
                           "fitted_ms": fit.fitted * 1e3, "relative_error": fit.relative_error})
    measured_ms = dict(zip(fit.labels, fit.measured * 1e3))
    for data, where, draft, gamma in speculative:
        concurrency, input_len, output_len, tpot = check_serve_result(data, where)
        g = spec_gamma(data, where, gamma)
        label = f"{Path(where).name} (serve TPOT, {draft} γ={g})"
        measured_ms[label] = tpot * 1e3
        points = pd.concat([points, pd.DataFrame([{"measurement": label, "measured_ms": tpot * 1e3}])],
                           ignore_index=True)
        replays.append(serve_replay(label, concurrency, input_len, output_len, positive_number(data, "completed", where),
                                    draft=draft, gamma=g, accepted_length=positive_number(
                                        data, accepted_length_key(data) or ACCEPTED_LENGTH_KEYS[0], where)))
    trip = round_trip(replays, measured_ms, gpu.name, model.name, args.tp,
                      ",".join(filter(None, [args.profiles, str(out)])))
    points = points.merge(trip, on="measurement", how="left")
    points_path = out.with_suffix(".points.csv")
    write_csv_atomic(points, points_path, {"command": "calibrate", "arguments": argv, "profile": out.name})
    print(points.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"\n{fit.describe()}")
    if fit.held:
        print(f"note: these measurements cannot separate {', '.join(fit.held)} from the other terms; held at the "
              "datasheet prior (vary the batch size and the context length independently to fit it)")
    if split_note:
        print(f"speculation: {split_note}")
    print(f"worst-case error {fit.worst_error:.1%}, RMS {fit.rms_error:.1%} over {len(equations)} measurements")
    for line in round_trip_lines(points, fit):
        print(line)
    print(f"wrote {out} and {points_path}")
    if args.plot:
        from specgauge.reports.figures.curves import plot_calibration

        print(f"wrote {plot_calibration(points, out.with_suffix('.png'), f'{model.name} on {gpu.name}, tp {args.tp}')}")
    return 0
