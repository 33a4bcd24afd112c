"""``specgauge certify``: certify a decoder and write the certificate CSV."""

from __future__ import annotations

import argparse
import sys

from specgauge.stattests.chain.certify import ALL_FIXTURES, DEFAULT_FALSE_FAIL, certify, decoder_config
from specgauge.stattests.plugin import tv_type
from specgauge.stattests.core.contract import decoder_name, load_decoder
from specgauge.stattests.chain.checks import CHECKS
from specgauge.csvio import resolve_csv_target
from specgauge.reports.console import say


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specgauge certify",
        description="Certify that a speculative decoder samples exactly from the target distribution.")
    parser.add_argument("--decoder", default=None,
                        help="short name (numpy, torch, hf, vllm, sglang, ...) or MODULE:NAME; "
                             "default $SPECGAUGE_DECODER, else numpy")
    parser.add_argument("--tv", type=tv_type, default=None,
                        help="TV that must be detectable on every fixture (default 0.005, or the coarser TVs a slow "
                             "decoder declares, per fixture)")
    parser.add_argument("--false-fail", type=float, default=DEFAULT_FALSE_FAIL,
                        help="family-wise false-fail rate: the chance that an exact decoder fails any assertion; "
                             f"each assertion gets its Bonferroni share (default {DEFAULT_FALSE_FAIL:g})")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="seconds each decoder call may take; a call past it fails the contract check, "
                             "naming the call (default: no limit)")
    parser.add_argument("--slow", action="store_true",
                        help="add the slow tier (production vocabularies streamed over many calls)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    parser.add_argument("--check", action="append", choices=list(CHECKS), help="only these checks (repeatable)")
    parser.add_argument("--fixture", action="append", choices=list(ALL_FIXTURES), help="only these fixtures (repeatable)")
    parser.add_argument("--csv", default=None, metavar="PATH",
                        help="certificate path (default reports/certificate.csv); a .meta.json sidecar goes beside it")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    target = resolve_csv_target(args.csv, default_name="certificate.csv")  # before any work
    decoder = load_decoder(args.decoder)
    config = decoder_config(decoder, args.tv, false_fail=args.false_fail, seed=args.seed, timeout=args.timeout)
    finer = "".join(f", {name} {tv:g}" for name, tv in config.fixture_tv.items())
    print(f"certifying {args.decoder or 'numpy'}: samples sized to detect TV {config.tv:g}{finer}", file=sys.stderr)
    cert = certify(decoder, config, checks=args.check, fixtures=args.fixture,
                   progress=not args.no_progress, name=decoder_name(args.decoder), slow=args.slow)
    cert.to_csv(target.path, {"arguments": list(sys.argv[1:] if argv is None else argv),
                              "decoder": decoder_name(args.decoder), "tv": config.tv,
                              "tv_by_fixture": dict(config.fixture_tv),
                              "false_fail": config.false_fail, "seed": config.seed})
    say(cert.summary())
    say(f"certificate: {target.path}")
    return 0 if cert.passed else 1
