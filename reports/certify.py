"""``specgauge certify``: certify a decoder and write the certificate CSV."""

from __future__ import annotations

import argparse
import os
import sys

from specgauge.stattests.certify import CertConfig, certify, default_tv
from specgauge.stattests.contract import decoder_name, load_decoder
from specgauge.stattests.checks import CHECKS
from specgauge.errors import SpecgaugeError
from specgauge.fixtures.pairs import FIXTURES


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specgauge certify",
        description="Certify that a speculative decoder samples exactly from the target distribution.")
    parser.add_argument("--decoder", default=None,
                        help="short name (numpy, torch, hf, vllm, sglang, ...) or MODULE:NAME; "
                             "default $SPECGAUGE_DECODER, else numpy")
    parser.add_argument("--tv", type=float, default=None,
                        help="TV that must be detectable (default 0.005, or the coarser one a slow decoder declares)")
    parser.add_argument("--false-fail", type=float, default=1e-6, help="false-fail rate per assertion (default 1e-6)")
    parser.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    parser.add_argument("--check", action="append", choices=list(CHECKS), help="only these checks (repeatable)")
    parser.add_argument("--fixture", action="append", choices=list(FIXTURES), help="only these fixtures (repeatable)")
    parser.add_argument("--csv", default="reports/certificate.csv", help="certificate path (default reports/certificate.csv)")
    return parser


def _check_writable(path: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise SpecgaugeError(f"cannot write {path}: directory {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise SpecgaugeError(f"cannot write {path}: directory {folder} is not writable")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.csv == "reports/certificate.csv":
        os.makedirs("reports", exist_ok=True)
    _check_writable(args.csv)
    decoder = load_decoder(args.decoder)
    config = CertConfig(tv=args.tv or default_tv(decoder), false_fail=args.false_fail, seed=args.seed)
    print(f"certifying {args.decoder or 'numpy'}: samples sized to detect TV {config.tv:g}", file=sys.stderr)
    cert = certify(decoder, config, checks=args.check, fixtures=args.fixture,
                   progress=sys.stderr.isatty(), name=decoder_name(args.decoder))
    tmp = f"{args.csv}.tmp"
    cert.to_csv(tmp)
    os.replace(tmp, args.csv)
    print(cert.summary())
    print(f"certificate: {args.csv}")
    return 0 if cert.passed else 1
