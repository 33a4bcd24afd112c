"""``specgauge compare``: certify probe files two-sample, against the server's logprobs, or a local model."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specgauge.csvio import resolve_csv_target
from specgauge.errors import UsageError
from specgauge.stattests.server.compare import MODES, ServerCertificate, run_mode
from specgauge.stattests.server.probe import read_probe
from specgauge.stattests.server.progress import auto_mode

from .probe import _number, count, positive, top_p, unit

rate = _number(float, lambda v: 0 < v < 1, "a rate in (0, 1)")
tv = _number(float, lambda v: 0 < v <= 1, "a TV in (0, 1]")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,  # a prefix is refused, never read as the option it begins (`--out`, `--output-len`)
        prog="specgauge compare",
        description="Certify that a server samples exactly: speculation on vs off (two-sample), against the "
                    "server's own top-k logprobs, or against a local reference model (teacher forcing).")
    parser.add_argument("candidate", help="probe JSONL of the server under test (speculation on)")
    parser.add_argument("--baseline", default=None, help="probe JSONL with speculation off: two-sample mode (with "
                        "--mode logprobs: the reported law cross-checked against it)")
    parser.add_argument("--reference", default=None, metavar="MODEL_DIR",
                        help="local Hugging Face model directory of the served model: reference mode (with "
                             "--mode logprobs: the reported law cross-checked against it)")
    parser.add_argument("--tokenizer", default=None, metavar="MODEL_DIR",
                        help="count tokens with this model directory's tokenizer where the server returned text only "
                             "(default: words; the reference mode counts with the reference's tokenizer)")
    parser.add_argument("--mode", choices=MODES, default=None,
                        help="default: two-sample with --baseline, reference with --reference, else logprobs")
    parser.add_argument("--false-fail", type=rate, default=1e-6, help="total false-fail rate, in (0, 1) (default 1e-6)")
    parser.add_argument("--tv", type=tv, default=0.1,
                        help="target TV for the 'needed samples per prompt' column (default 0.1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the randomized PIT (default 0)")
    parser.add_argument("--ref-temperature", type=positive, default=None, help="default: the run's temperature")
    parser.add_argument("--ref-top-k", type=count, default=None, help="default: the run's top_k")
    parser.add_argument("--ref-top-p", type=top_p, default=None, help="default: the run's top_p")
    parser.add_argument("--ref-min-p", type=unit, default=None, help="default: the run's min_p")
    parser.add_argument("--eos-token", action="append", default=None, metavar="NAME",
                        help="logprobs mode: the end-of-sequence token's name in the top logprobs (e.g. token_id:2 "
                             "or </s>), where samples stopped without listing it (default: guessed, and said)")
    parser.add_argument("--csv", default=None, help="certificate CSV (default specgauge-out/server_certificate.csv)")
    return parser


def _mode(args: argparse.Namespace) -> str:
    """The mode the files given imply; what another mode would ignore is refused, not dropped."""
    if args.mode is None and args.baseline and args.reference:
        raise UsageError("--baseline and --reference name two modes: choose one with --mode two-sample or "
                          "--mode reference")
    mode = args.mode or ("two-sample" if args.baseline else "reference" if args.reference else "logprobs")
    unused = [f"--{name.replace('_', '-')}" for name in ("ref_temperature", "ref_top_k", "ref_top_p", "ref_min_p")
              if getattr(args, name) is not None and mode != "reference" and not (mode == "logprobs" and args.reference)]
    unused += ["--eos-token"] if args.eos_token and mode != "logprobs" else []
    unused += [flag for flag, value, used in (("--baseline", args.baseline, "two-sample"),
                                              ("--reference", args.reference, "reference"))
               if value and mode != used and mode != "logprobs"]  # logprobs: a cross-check of the reported law
    if mode == "logprobs" and args.baseline and args.reference:
        raise UsageError("--mode logprobs cross-checks the reported law against one of --reference or --baseline")
    if unused:
        raise UsageError(f"{', '.join(unused)} would be ignored in {mode} mode")
    if mode == "two-sample" and not args.baseline:
        raise UsageError("--mode two-sample needs --baseline BASELINE.jsonl")
    if mode == "reference" and not args.reference:
        raise UsageError("--mode reference needs --reference MODEL_DIR")
    return mode


def _model_dir(value: str | None, flag: str) -> str | None:
    """A model directory option: refused in one line (exit 2) when empty or not a folder."""
    if value is None:
        return None
    if not value.strip():
        raise UsageError(f"{flag} is empty: give a model directory")
    if not Path(value).is_dir():
        raise UsageError(f"{flag} {value!r} is not a directory")
    return value


def certificate(args: argparse.Namespace) -> ServerCertificate:
    """The pure part: read the files, run the mode."""
    mode = _mode(args)
    args.tokenizer = _model_dir(args.tokenizer, "--tokenizer")
    args.reference = _model_dir(args.reference, "--reference")
    candidate = read_probe(args.candidate, whole=True)
    common = {"false_fail_rate": args.false_fail, "target_tv": args.tv}
    if mode == "two-sample":
        tokenize = None
        if args.tokenizer:
            from specgauge.stattests.server.reference import model_tokenizer

            tokenize = model_tokenizer(args.tokenizer)
        return run_mode(mode, baseline=read_probe(args.baseline, whole=True), candidate=candidate, tokenize=tokenize, **common)
    ref = None
    if args.reference:
        from specgauge.stattests.server.reference import ReferenceModel

        params = candidate.header["params"]
        ref = ReferenceModel(args.reference,
                             temperature=args.ref_temperature if args.ref_temperature is not None else params["temperature"],
                             top_k=args.ref_top_k if args.ref_top_k is not None else params.get("top_k"),
                             top_p=args.ref_top_p if args.ref_top_p is not None else params.get("top_p"),
                             min_p=args.ref_min_p if args.ref_min_p is not None else params.get("min_p"),
                             progress=auto_mode(sys.stderr))
    if mode == "reference":
        return run_mode(mode, run=candidate, law=ref, seed=args.seed, **common)
    eos = tuple(args.eos_token or ())
    if args.reference or args.baseline:  # the reported law cross-checked
        from specgauge.stattests.server.compare import cross_checked

        baseline = read_probe(args.baseline, whole=True) if args.baseline else None
        return cross_checked(candidate, law=ref, baseline=baseline, seed=args.seed, eos_tokens=eos, **common)
    return run_mode(mode, run=candidate, seed=args.seed, eos_tokens=eos, **common)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    target = resolve_csv_target(args.csv, default_name="server_certificate.csv")
    cert = certificate(args)
    frame = cert.frame
    cert.certificate.to_csv(target.path, {"command": "compare", "mode": cert.mode, "candidate": args.candidate,
                                          "baseline": args.baseline, "reference": args.reference,
                                          "false_fail_rate": args.false_fail, "seed": args.seed,
                                          "notes": list(cert.notes), "verdict": cert.verdict()})
    shown = frame[["check", "position", "verdict", "pvalue", "n", "min_detectable_tv", "observed"]].copy()
    shown.loc[shown["verdict"] != "fail", "observed"] = float("nan")  # a plug-in figure: read it beside a FAIL only
    print(shown.rename(columns={"observed": "measured_tv"}).to_string(index=False))
    for note in cert.notes:
        print(f"note: {note}")
    print(cert.verdict())
    print(f"certificate: {target.path}")
    return 0 if cert.passed else 1
