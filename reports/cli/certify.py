"""``specgauge certify``: certify a decoder and write the certificate CSV."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from specgauge import inputs
from specgauge.stattests.chain.certify import (ALL_FIXTURES, DEFAULT_FALSE_FAIL, CertConfig, certify, decoder_config,
                                              plan, plan_size)
from specgauge.stattests.core.certificate import fold
from specgauge.stattests.core.contract import decoder_name, load_decoder
from specgauge.stattests.chain.checks import CHECKS
from specgauge.stattests.chain.diagnosis import summary as chain_summary
from specgauge.csvio import resolve_csv_target
from specgauge.stattests.chain.certify import certification, identity_rows, sizing_note
from specgauge.stattests.chain.shards import DEFAULT_MAX_CPU_HOURS, ShardError
from specgauge.errors import UsageError
from specgauge.sweeps.executors import SweepOptions, add_sweep_options, check_scheduler, options_from_args
from specgauge.sweeps.journal import sweep_lock
from specgauge.stattests.chain.figures import check_plotting, figures_note, plot_certificate

from .console import say


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,  # a prefix is refused, never read as the option it begins (`--out`, `--output-len`)
        prog="specgauge certify",
        description="Certify that a speculative decoder samples exactly from the target distribution.")
    parser.add_argument("--decoder", default=None,
                        help="short name (numpy, torch, hf, vllm, sglang, ...) or MODULE:NAME; "
                             "default $SPECGAUGE_DECODER, else numpy")
    parser.add_argument("--tv", type=inputs.certified_tv, default=None,
                        help="TV that must be detectable on every fixture (default 0.005, or the coarser TVs a slow "
                             "decoder declares, per fixture)")
    parser.add_argument("--false-fail", type=inputs.false_fail, default=DEFAULT_FALSE_FAIL,
                        help="family-wise false-fail rate: the chance that an exact decoder fails any assertion; "
                             f"each assertion gets its Bonferroni share (default {DEFAULT_FALSE_FAIL:g}; at least "
                             f"{inputs.MIN_FALSE_FAIL:g})")
    parser.add_argument("--timeout", type=inputs.seconds, default=None, metavar="SECONDS",
                        help="seconds each decoder call may take; a call past it fails the contract check, "
                             "naming the call (default: no limit)")
    parser.add_argument("--slow", action="store_true",
                        help="add the slow tier (production vocabularies streamed over many calls)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--seed", type=inputs.seed, default=0, help="root seed (default 0)")
    parser.add_argument("--check", action="append", choices=list(CHECKS), help="only these checks (repeatable)")
    parser.add_argument("--fixture", action="append", choices=list(ALL_FIXTURES), help="only these fixtures (repeatable)")
    parser.add_argument("--csv", type=inputs.OutputPath((".csv",)), default=None, metavar="PATH",
                        help="certificate path (default specgauge-out/certificate.csv); a .meta.json sidecar goes beside it")
    sized = parser.add_argument_group("sized and sharded runs")
    sized.add_argument("--guarantee", type=inputs.certified_tv, default=None, metavar="TV",
                       help="size each fixture's rows for this worst-case TV at its rarest emitted position "
                            "(the identity test's guarantee), and the directional checks for it unless --tv is "
                            "given; the time and bytes are estimated first, and a run this machine cannot hold, "
                            "or above --max-cpu-hours, is refused")
    sized.add_argument("--max-cpu-hours", type=inputs.positive,
                       default=DEFAULT_MAX_CPU_HOURS, metavar="H",
                       help=f"refuse a sized run estimated above H CPU-hours (default {DEFAULT_MAX_CPU_HOURS:g})")
    sized.add_argument("--shards", type=inputs.positive_int, default=None, metavar="N",
                       help="split each fixture's rows into N shards, each seeded from --seed and its index; "
                            "finished shards are kept beside the CSV until it is written, so a rerun resumes; "
                            "the certificate depends on N, never on where the shards ran (default with "
                            "--guarantee: shards of about a CPU-minute of estimated work each)")
    add_sweep_options(parser, progress=False)
    parser.add_argument("--plot", action="store_true",
                        help="also draw one PNG per fixture beside the CSV: PIT histograms, observed against "
                             "expected counts, acceptance by position, tokens per pass (needs matplotlib)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    target = resolve_csv_target(args.csv, default_name="certificate.csv")  # before any work
    if args.plot:
        check_plotting()  # before any work
    sharded = args.guarantee is not None or args.shards is not None
    options = options_from_args(args)
    if not sharded and (options != SweepOptions(progress=options.progress) or args.restart):
        raise ShardError("--jobs, --executor, --scheduler and --restart apply to sized or sharded runs: "
                         "add --shards N (or --guarantee TV)")
    if options.resolved_executor() == "dask":  # contradictory options, an unreachable scheduler: before any work
        check_scheduler(options.scheduler)
    refuse_vacuous(args.fixture, args.check, args.slow)
    if sharded:
        refuse_blocked_shard_folder(target.path)
        if args.shards is not None and args.shards > CertConfig().max_rows:
            raise ShardError(f"--shards {args.shards:,} is more than the {CertConfig().max_rows:,} rows a fixture "
                             "is ever sized to; a shard is at least one decoder call")
    decoder = load_decoder(args.decoder)
    config = decoder_config(decoder, args.tv, args.guarantee, false_fail=args.false_fail, seed=args.seed,
                            timeout=args.timeout)
    if sharded:
        return _sized(args, argv, target, decoder, config, options)
    arguments = list(sys.argv[1:] if argv is None else argv)
    with sweep_lock(target, "specgauge certify " + " ".join(arguments)):  # a second run on this CSV is refused
        print(fold(f"certifying {args.decoder or 'numpy'}: {sizing_note(config)}"), file=sys.stderr)
        capped = capped_note(config, args.fixture, args.check, args.slow, progress=not args.no_progress)
        if capped:
            print(fold(capped), file=sys.stderr)
        session = certification(decoder, config, checks=args.check, fixtures=args.fixture,
                                progress=not args.no_progress, name=decoder_name(args.decoder), slow=args.slow)
        cert = session.certificate()
        cert.to_csv(target.path, {"arguments": arguments, "decoder": decoder_name(args.decoder), "tv": config.tv,
                                  "tv_by_fixture": dict(config.fixture_tv),
                                  "false_fail": config.false_fail, "seed": config.seed})
    say(chain_summary(cert, target.path))
    say(f"certificate: {target.path}")
    if args.plot:
        figures = plot_certificate(session.runs, cert, target.path)
        say(figures_note(figures))
    return 0 if cert.passed else 1


def _sized(args, argv, target, decoder, config: CertConfig, options: SweepOptions) -> int:
    """A sized or sharded run: estimate and refuse first, then the shards (resumed from the
    folder beside the CSV), merged per fixture, then the checks once, as an unsharded run."""
    from specgauge.stattests.chain.shards import (SHARD_SECONDS, ShardCache, guarantee_lower_bound, guarantee_reached,
                                                  plan_shards,
                                                  refuse_more_shards_than_calls, refuse_over_budget,
                                                  refuse_unholdable, run_shards, sized_plan, takes_views)

    name = decoder_name(args.decoder)
    cache = ShardCache(target.path.with_name(target.path.name + ".shards"))

    def refuse(est) -> None:  # on the complete estimate: every fixture sized
        refuse_unholdable(est, cache.folder)
        refuse_over_budget(est, args.max_cpu_hours)

    planned, pairs, rows, est = sized_plan(config, args.fixture, args.check, args.slow, progress=options.progress,
                                           refuse=refuse, views=takes_views(decoder))
    refuse_more_shards_than_calls(pairs, rows, planned.chunk_bytes, args.shards)
    asked = {f.name: config.guarantee for f in pairs if config.guarantee is not None and CHECKS["identity"].applies(f)}
    local = options.resolved_executor() == "serial"
    # in this process, the decoder loaded above; elsewhere, its spec, loaded where the shard runs
    plan_ = plan_shards(decoder if local else args.decoder, pairs, rows, config.seed, config.timeout,
                        planned.chunk_bytes, args.shards)
    if args.shards:
        count = f"{args.shards} shard(s) a fixture"
    elif len(plan_) == len(pairs):  # every fixture's estimate under a shard's: nothing to split
        count = (f"one shard a fixture (each estimated under {SHARD_SECONDS / 60:g} CPU-minute; --shards N "
                 "splits them)")
    else:
        count = f"{len(plan_)} shard(s) of about {SHARD_SECONDS / 60:g} CPU-minute (--shards N for another plan)"
    print(fold(f"certifying {args.decoder or 'numpy'}: {sizing_note(config)}"
          + (f"; rows sized for worst-case TV {config.guarantee:g}" if config.guarantee is not None else "")
          + f"; {count} on {options.resolved_executor()}"), file=sys.stderr)
    from specgauge.stattests.core.reference import NumpyDecoder

    for line in est.lines(options.jobs, asked, reference=isinstance(decoder, NumpyDecoder)):
        print(fold(line), file=sys.stderr)
    for f in (f for f in pairs if f.name in asked):  # what the rows cost beyond what any test needs
        bound = guarantee_lower_bound(f, asked[f.name], planned.per_assertion, planned.false_pass)
        needs = planned.row_needs(f)  # which check set the rows, and the identity test's own share
        alone = identity_rows(f, asked[f.name], planned.per_assertion, planned.false_pass)
        print(fold(bound.line(f.name, est.rows[f.name], asked[f.name], max(needs, key=needs.get), alone)),
              file=sys.stderr)
    arguments = list(sys.argv[1:] if argv is None else argv)
    with sweep_lock(target, "specgauge certify " + " ".join(arguments)):
        if args.restart:
            cache.remove()
        try:
            runs, reused = run_shards(plan_, name, cache, options, progress=options.progress)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: keep finished shards for the rerun, nothing else
            kept = cache.tidy()
            if kept:
                say(f"kept {kept} finished shard(s) in {cache.folder}: the same command resumes them, "
                    "--restart discards them", file=sys.stderr)
            raise
        if reused:
            say(f"resumed {reused} of {len(plan_)} shard(s) from {cache.folder}")
        session = certification(decoder, config, checks=args.check, fixtures=args.fixture,
                                progress=options.progress, name=name, slow=args.slow, runs=runs)
        cert = session.certificate()
        meta = {"arguments": arguments, "decoder": name, "tv": config.tv, "tv_by_fixture": dict(config.fixture_tv),
                "false_fail": config.false_fail, "seed": config.seed, "guarantee": config.guarantee,
                "shards": {f.name: next(s.shards for s in plan_ if s.fixture == f.name) for f in pairs},
                "rows": dict(est.rows)}
        cert.to_csv(target.path, meta)
        cache.remove()
    reached = guarantee_reached(cert.frame)
    if reached:
        say(fold("worst-case TV reached (the identity rows' figure at each fixture's worst position): "
                 + "; ".join(f"{k} {v:.3g}" for k, v in reached.items())))
    short = {k: v for k, v in reached.items() if k in asked and not v <= asked[k]}
    if short:
        say(fold(f"short of TV {config.guarantee:g} on {', '.join(f'{k} ({v:.3g})' for k, v in short.items())}: "
                 "rows are sized on the identity test's planning figure (analytic critical value), the rows state "
                 "it at the simulated null's critical value, a few per cent apart and not monotone in the "
                 "emissions; the bonus row says what the asked TV needs there"))
    say(chain_summary(cert, target.path))
    say(f"certificate: {target.path}")
    if args.plot:
        say(figures_note(plot_certificate(session.runs, cert, target.path)))
    return 0 if cert.passed else 1


def refuse_vacuous(fixtures: list[str] | None, checks: list[str] | None, slow: bool) -> None:
    """Zero assertions is a refusal, never a pass: --check and --fixture must meet at least once."""
    if not any(True for _ in plan(fixtures, checks, slow)):
        raise UsageError(f"no assertion to run: check(s) {', '.join(checks or CHECKS)} apply to none of the "
                         f"fixture(s) {', '.join(fixtures or ALL_FIXTURES)}"
                         + ("" if slow else " (add --slow for the slow tier's)"))


def refuse_blocked_shard_folder(csv) -> None:
    """The shards' folder beside the CSV must be a folder, or absent: a file there is in the way."""
    folder = csv.with_name(csv.name + ".shards")
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{str(folder)!r} is a file, where the run keeps its finished shards; move it or "
                         "choose another --csv")


def capped_note(config: CertConfig, fixtures: list[str] | None, checks: list[str] | None, slow: bool,
                progress: bool = False) -> str:
    """One line naming the fixtures whose sample size the row, memory or sequence caps cut short
    of what the TV asked for, and the resolution those capped sizes give; '' when none is.

    Sizing searches each fixture's sample size (the identity test's by bisection), about a
    minute over the default fixtures on two cores, so ``progress`` shows a bar over them."""
    from specgauge.progress import bar as progress_bar
    from specgauge.stattests.chain.harness import emission_probability
    from specgauge.stattests.chain.sequences import MAX_SEQUENCES
    from specgauge.stattests.core.statistics import min_discrepancy_of_ks_uniformity

    items = list(plan(fixtures, checks, slow))
    config = replace(config, assertions=plan_size(slow) if not (fixtures or checks) else len(items))
    uncapped = replace(config, max_rows=2**62, max_bytes=2**62)
    reached: dict[str, float] = {}
    unique = list({fixture.name: fixture for _, fixture, _ in items}.values())
    for fixture in progress_bar(unique, desc="sizing the samples", unit="fixture", disable=not progress, leave=False):
        if fixture.kind == "sequence":
            n = config.sequences(fixture)
            capped = n >= MAX_SEQUENCES
        else:
            n = config.rows(fixture)
            capped = n < uncapped.rows(fixture)
            n = max(1, int(n * max(float(emission_probability(fixture)[-1]), 0.5)))
        figure = min_discrepancy_of_ks_uniformity(n, false_fail_rate=config.per_assertion,
                                                  false_pass_rate=config.false_pass) if capped else 0.0
        if figure > max(config.tv_for(fixture.name), fixture.tv_floor):  # a cap that cost resolution
            reached[fixture.name] = figure
    if not reached:
        return ""
    finest, coarsest = min(reached, key=reached.get), max(reached, key=reached.get)
    span = (f"{reached[finest]:.2g} ({finest})" if finest == coarsest
            else f"{reached[finest]:.2g} ({finest}) to {reached[coarsest]:.2g} ({coarsest})")
    return (f"sample sizes capped on {len(reached)} fixture(s) (at most {config.max_rows:,} rows, "
            f"{config.max_bytes / 2**30:g} GiB of decoder input, {MAX_SEQUENCES:,} sequences): there the "
            f"certificate resolves about {span}, not TV {config.tv:g} (each assertion's: min_detectable_tv)")

