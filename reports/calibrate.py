"""``specgauge calibrate``: fit the step-time model to your own measurements, write a profile for ``--profiles``.

Inputs, any mix (each becomes equations of ``specgauge.simulator.fit``):

* ``--steps FILE.csv``: timed steps, columns ``batched_tokens, kv_tokens, ms`` (``batch``
  and ``model`` optional; with ``model`` only the target's rows are used);
* ``--latency FILE.json:batch=B,input=I,output=O``: ``vllm bench latency --output-json``
  files (the JSON holds ``avg_latency`` but not the run's shape, so the suffix gives it,
  unless the JSON carries ``batch_size``/``input_len``/``output_len``);
* ``--serve FILE.json[:draft=NAME]``: ``vllm bench serve --save-result`` files. A run
  without speculation contributes its mean TPOT at its ``max_concurrency``; a run with
  speculation (``spec_decode_acceptance_length`` present; ``draft=`` names the proposer:
  a model, ``eagle`` or ``mtp``) is priced after the fit: what a round costs beyond the
  verify pass and the speculative-step overhead becomes that proposer's per-round cost.

Writes a TOML with ``[steps."MODEL@GPU@tpN"]`` (and the proposer's table), prints and
saves each point's error (``PATH.points.csv``) and, with ``--plot``, a measured-versus-
fitted PNG.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specgauge.csvio import write_csv_atomic
from specgauge.errors import SpecgaugeError
from specgauge.simulator.drafts import draft_kind
from specgauge.simulator.fit import (Equation, StepModelFit, fit_step_model, latency_equation, step_equation,
                                     tpot_equation)
from specgauge.simulator.profiles import load_gpu, load_model, step_key


class CalibrateError(SpecgaugeError):
    """A measurement file that cannot be read as the calibration input it claims to be."""


def _split_spec(text: str) -> tuple[Path, dict[str, str]]:
    path, _, rest = text.partition(":") if not Path(text).exists() else (text, "", "")
    options = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise CalibrateError(f"{text!r}: options after ':' are KEY=VALUE, e.g. batch=8,input=512,output=128")
        options[key.strip()] = value.strip()
    return Path(path), options


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise CalibrateError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CalibrateError(f"{str(path)!r} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CalibrateError(f"{str(path)!r} does not hold a JSON object")
    return data


def _number(data: dict[str, Any], key: str, where: str) -> float:
    try:
        value = float(data[key])
    except (KeyError, TypeError, ValueError):
        raise CalibrateError(f"{where}: needs a number {key!r}") from None
    if not np.isfinite(value) or value <= 0:
        raise CalibrateError(f"{where}: {key} must be > 0, got {data[key]!r}")
    return value


def steps_equations(path: Path, model: str) -> list[Equation]:
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise CalibrateError(f"cannot read step times {str(path)!r}: {exc}") from None
    missing = {"batched_tokens", "kv_tokens", "ms"} - set(frame.columns)
    if missing:
        raise CalibrateError(f"{str(path)!r} lacks column(s) {', '.join(sorted(missing))}; needs batched_tokens, "
                             "kv_tokens, ms (batch and model optional)")
    if "model" in frame:
        frame = frame[frame["model"].astype(str).str.lower() == model]
        if not len(frame):
            raise CalibrateError(f"{str(path)!r} has no rows for model {model!r}")
    return [step_equation(r.batched_tokens, r.kv_tokens, r.ms * 1e-3, f"{path.name}:{i + 1}")
            for i, r in enumerate(frame.itertuples(index=False))]


def latency_equation_from(text: str) -> Equation:
    path, options = _split_spec(text)
    data = _read_json(path)
    shape = {key: options.get(key, data.get(name)) for key, name in
             (("batch", "batch_size"), ("input", "input_len"), ("output", "output_len"))}
    if any(v is None for v in shape.values()):
        raise CalibrateError(f"{str(path)!r}: `vllm bench latency` JSON does not record the run's shape; "
                             f"give it as {path}:batch=B,input=I,output=O")
    try:
        batch, input_len, output_len = (int(shape[k]) for k in ("batch", "input", "output"))
    except ValueError:
        raise CalibrateError(f"{text!r}: batch, input and output must be integers") from None
    return latency_equation(batch, input_len, output_len, _number(data, "avg_latency", str(path)),
                            f"{path.name} (latency, batch {batch})")


def _serve_shape(data: dict[str, Any], where: str) -> tuple[float, float, float, float]:
    completed = _number(data, "completed", where)
    concurrency = data.get("max_concurrency")
    if concurrency is None:
        raise CalibrateError(f"{where}: run `vllm bench serve` with --max-concurrency so the batch size is known")
    return (float(concurrency), _number(data, "total_input_tokens", where) / completed,
            _number(data, "total_output_tokens", where) / completed, _number(data, "mean_tpot_ms", where) * 1e-3)


def _spec_gamma(data: dict[str, Any], where: str) -> int:
    if data.get("spec_decode_num_drafts") and data.get("spec_decode_draft_tokens"):
        return int(round(float(data["spec_decode_draft_tokens"]) / float(data["spec_decode_num_drafts"])))
    positions = data.get("spec_decode_per_position_acceptance_rates")
    if positions:
        return len(positions)
    raise CalibrateError(f"{where}: a speculative run needs spec_decode_draft_tokens / spec_decode_num_drafts "
                         "or spec_decode_per_position_acceptance_rates to know γ")


def proposer_round_ms(fit: StepModelFit, data: dict[str, Any], where: str, spec_overhead_ms: float) -> float:
    """What a speculative round cost beyond its verify pass and ``spec_overhead_ms``, in ms.

    The fitted steps were timed whole (engine overhead inside), so the profile sets the
    engine's per-step and speculative overheads to 0 and the residual is the proposer's."""
    concurrency, input_len, output_len, tpot = _serve_shape(data, where)
    accepted_length = _number(data, "spec_decode_acceptance_length", where)
    gamma = _spec_gamma(data, where)
    kv = concurrency * (input_len + output_len / 2)
    verify = fit.predict(concurrency * (gamma + 1), kv)
    return (tpot * accepted_length - float(verify)) * 1e3 - spec_overhead_ms


def _toml_table(key: str, values: dict[str, Any]) -> str:
    lines = [f'[steps."{key}"]']
    for name, value in values.items():
        text = json.dumps(value) if isinstance(value, str) else ("true" if value is True else "false" if value is False
                                                                  else f"{value:.6g}")
        lines.append(f"{name} = {text}")
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specgauge calibrate",
        description="Fit c_fixed + c_token·batched_tokens + c_kv·kv_tokens to measured step times and write a "
                    "profile TOML for --profiles.")
    parser.add_argument("--gpu", required=True, help="GPU profile the measurements were taken on (h100, h200, ...)")
    parser.add_argument("--target", required=True, help="model profile that was measured")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel degree of the measured engine (default 1)")
    parser.add_argument("--steps", action="append", default=[], metavar="CSV",
                        help="timed steps: batched_tokens, kv_tokens, ms[, batch, model]")
    parser.add_argument("--latency", action="append", default=[], metavar="JSON[:batch=B,input=I,output=O]",
                        help="a `vllm bench latency --output-json` file and the run's shape")
    parser.add_argument("--serve", action="append", default=[], metavar="JSON[:draft=NAME]",
                        help="a `vllm bench serve --save-result` file, with or without speculation")
    parser.add_argument("--profiles", default=None, help="extra GPU/model profiles (TOML/JSON) the names refer to")
    parser.add_argument("--out", default="calibrated.toml", help="profile TOML to write (default calibrated.toml)")
    parser.add_argument("--plot", action="store_true", help="write a measured-versus-fitted PNG beside --out")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    gpu = load_gpu(args.gpu, args.profiles)
    model = load_model(args.target, args.profiles)
    if args.tp < 1:
        raise CalibrateError(f"--tp must be >= 1, got {args.tp}")
    out = Path(args.out)
    if not out.parent.exists():
        raise CalibrateError(f"the folder of --out {str(out)!r} does not exist")
    equations: list[Equation] = []
    for path in args.steps:
        equations += steps_equations(Path(path), model.name)
    equations += [latency_equation_from(text) for text in args.latency]
    speculative: list[tuple[dict[str, Any], str, str]] = []
    for text in args.serve:
        path, options = _split_spec(text)
        data = _read_json(path)
        if data.get("spec_decode_acceptance_length") is not None:
            if "draft" not in options:
                raise CalibrateError(f"{str(path)!r} is a speculative run: name its proposer, {path}:draft=eagle")
            speculative.append((data, str(path), options["draft"]))
            continue
        concurrency, input_len, output_len, tpot = _serve_shape(data, str(path))
        equations.append(tpot_equation(concurrency, input_len, output_len, tpot, f"{path.name} (serve TPOT)"))
    if not equations:
        raise CalibrateError("nothing to fit: give --steps, --latency or --serve files without speculation")
    fit = fit_step_model(equations)
    sources = ", ".join(sorted({label.split(" ")[0].split(":")[0] for label in fit.labels}))
    key = step_key(model.name, gpu.name, args.tp)
    text = (f"# Written by specgauge calibrate: {len(equations)} measurements, worst-case error "
            f"{fit.worst_error:.1%}, RMS {fit.rms_error:.1%}. Use with --profiles {out.name}.\n\n")
    text += _toml_table(key, {
        "c_fixed_ms": fit.c_fixed * 1e3, "c_token_us": fit.c_token * 1e6, "c_kv_ns": fit.c_kv * 1e9,
        "includes_engine": True, "step_overhead_ms": 0.0, "spec_overhead_ms": 0.0,
        "source": f"fitted by specgauge calibrate from {len(equations)} measurements ({sources}); worst-case "
                  f"error {fit.worst_error:.1%}"})
    for data, where, draft in speculative:
        kind = draft_kind(draft)
        proposer = load_model(draft, args.profiles).name if kind == "model" else f"{kind}:{model.name}"
        round_ms = proposer_round_ms(fit, data, where, 0.0)
        if round_ms <= 0:
            print(f"warning: {where}: the round costs no more than its verify pass and overhead "
                  f"({round_ms:.3f} ms); no proposer cost written")
            continue
        text += "\n" + _toml_table(step_key(proposer, gpu.name, args.tp), {
            "c_fixed_ms": round_ms, "c_token_us": 0.0, "c_kv_ns": 0.0, "per_round": True,
            "source": f"specgauge calibrate: a speculative round's cost beyond verification in {Path(where).name}"})
    out.write_text(text)
    points = pd.DataFrame({"measurement": fit.labels, "measured_ms": fit.measured * 1e3,
                           "fitted_ms": fit.fitted * 1e3, "relative_error": fit.relative_error})
    points_path = out.with_suffix(".points.csv")
    write_csv_atomic(points, points_path, {"command": "calibrate", "arguments": argv, "profile": out.name})
    print(points.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"\nc_fixed {fit.c_fixed * 1e3:.4g} ms (± {fit.se[0] * 1e3:.2g}), c_token {fit.c_token * 1e6:.4g} us "
          f"(± {fit.se[1] * 1e6:.2g}), c_kv {fit.c_kv * 1e9:.4g} ns (± {fit.se[2] * 1e9:.2g}) per token")
    print(f"worst-case error {fit.worst_error:.1%}, RMS {fit.rms_error:.1%} over {len(equations)} measurements")
    print(f"wrote {out} and {points_path}")
    if args.plot:
        from .plots import _pyplot, _save

        plt = _pyplot()
        fig, ax = plt.subplots(figsize=(5, 5))
        ax.scatter(fit.measured * 1e3, fit.fitted * 1e3, s=14)
        lo, hi = float(min(fit.measured.min(), fit.fitted.min()) * 1e3), float(max(fit.measured.max(), fit.fitted.max()) * 1e3)
        ax.plot([lo, hi], [lo, hi], color="grey", lw=1, label="fitted = measured")
        ax.set(xscale="log", yscale="log", xlabel="measured step time (ms)", ylabel="fitted step time (ms)",
               title=f"{model.name} on {gpu.name}, tp {args.tp}: worst {fit.worst_error:.1%}")
        ax.legend()
        print(f"wrote {_save(fig, out.with_suffix('.png'))}")
    return 0
