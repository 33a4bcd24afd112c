"""`specgauge plan`: sweep the simulator and turn the rows into a deployment decision.

The sweep writes one wide row per configuration (the configuration's own columns, then
vLLM's metric names). The decision summary answers what a team asks before switching
speculation on: which γ at each load level (for latency and for throughput), up to which
batch size or request rate it pays, the highest request rate that meets an SLO with and
without it, and how much concurrency the draft's memory costs.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from typing import Any

from specgauge.csvio import CsvTarget, resolve_csv_target, write_csv_atomic
from specgauge import inputs
from specgauge.errors import UsageError
from specgauge.reports.planning.decisions import decide, recommendation, summary_table
from specgauge.reports.planning.measured_rates import AcceptanceSpec, parse_acceptance
from specgauge.reports.planning.slo import parse_slo
from specgauge.sweeps.executors import add_sweep_options, options_from_args, sweep_to_csv

from .budget import announce
from .console import say, warn

#: The default scenario: the seed's deployment (Qwen3-32B with Qwen3-0.6B drafting on one
#: H200: the SimulationConfig defaults) swept over γ and the batch cap, saturated. Every
#: simulation option the command line does not give takes its value from here (or from
#: SimulationConfig), so ``plan --jobs 2`` or ``plan --acceptance 0.6`` still sweeps it.
PLAN_DEFAULTS = {"gamma": "0,1,2,3,4,5,6,8", "batch_size": "1,2,4,8,16,32,64,128,256", "requests": "400"}


class PlanError(UsageError):
    """The plan's options do not describe a sweep that can run: a usage error, exit status 2."""


# --------------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    from .options import add_simulation_options

    parser = argparse.ArgumentParser(
        allow_abbrev=False,  # a prefix is refused, never read as the option it begins (`--out`, `--output-len`)
        prog="specgauge plan",
        description="Sweep the serving simulator over γ, batch caps, request rates, drafts and GPUs, "
        "write one CSV row per configuration and a decision summary. Every option not given keeps the "
        "default scenario's value (Qwen3-32B, Qwen3-0.6B drafting, one H200, γ and batch cap swept, "
        "saturated), so the defaults below are the ones that apply. Lengths are in tokens, times in ms.",
    )
    add_simulation_options(parser, sweep=True, defaults=PLAN_DEFAULTS)  # includes --csv (default specgauge-out/plan.csv)
    group = parser.add_argument_group("plan")
    group.add_argument("--slo", nargs="+", default=None, metavar="METRIC:MS",
                       help="service-level objectives in ms as vllm bench serve --goodput takes them, e.g. "
                       "ttft:200 tpot:50; each bounds the p99 unless prefixed mean_ or median_ (default: none)")
    group.add_argument("--acceptance", default=None, metavar="SPEC",
                       help="acceptance instead of --alpha: one α, a per-position list (0.9,0.8,0.7), a profile "
                       "name from fixtures/workloads, a `vllm bench serve --save-result` JSON, or a saved vLLM /metrics "
                       "text (two, BEFORE,AFTER: their difference)")
    group.add_argument("--acceptance-beyond", choices=("geometric", "last", "refuse"), default="geometric",
                       help="draft positions beyond those a per-position --acceptance gives (a vLLM run measured at "
                       "3 draft tokens, swept to γ 5): a geometric decay fitted to the given positions (default), "
                       "the last rate repeated, or refused; a best γ resting on them says so")
    group.add_argument("--rate", type=float, default=None, metavar="REQ_PER_S",
                       help="size a deployment for this request rate: per configuration, the highest Poisson rate "
                       "whose run is stable and meets every --slo bound, found by bisection (not a --qps grid), then "
                       "the replicas × GPUs each needs, cheapest first, with and without speculation (γ 0 is added); "
                       "batch cap 256 and 1000 requests unless given")
    group.add_argument("--gpus-per-node", type=inputs.Integer(minimum=1, noun="GPUs a node: an integer"),
                       default=None, metavar="N",
                       help="with --rate: round the GPUs up to whole nodes of N (default: 8 for the shipped "
                       "datacenter parts, 1 for any other GPU); the comparison with and without speculation is made "
                       "on the rounded counts")
    group.add_argument("--headroom", type=inputs.Real(low=0.0, high=10.0, noun="a fraction of the rate"),
                       default=None, metavar="FRACTION",
                       help="with --rate: size for the rate x (1 + FRACTION), the margin for failures and for peaks "
                       "above the average rate (default 0)")
    group.add_argument("--spare-replicas", type=inputs.Integer(minimum=0, noun="spare replicas: an integer"),
                       default=None, metavar="K", help="with --rate: K replicas beyond those the rate needs (N+K; "
                       "default 0)")
    group.add_argument("--validation", default=None, metavar="CSV",
                       help="your own runs' residuals, as `specgauge validate --add RUN.json:... --mine CSV` writes "
                       "them: they set the intervals wherever they are enough for one (9 rows of a figure at 90 %%), "
                       "the shipped validation's elsewhere")
    group.add_argument("--plot", action=argparse.BooleanOptionalAction, default=None,
                       help="write the PNG figures beside the CSV (default: on for the default scenario when "
                       "matplotlib is installed, else off)")
    add_sweep_options(parser)
    return parser


def apply_plan_defaults(args: argparse.Namespace) -> tuple[bool, list[str]]:
    """Fill the simulation options not given from ``PLAN_DEFAULTS``.

    Returns whether any scenario option (a simulation option or ``--acceptance``) was
    given, and the flags filled in, as ``["--gamma", "0,1,…", …]``.
    """
    from .options import given_options, simulation_options

    scenario_given = bool(given_options(args)) or args.acceptance is not None
    filled: list[str] = []
    for opt in simulation_options():
        if opt.dest in PLAN_DEFAULTS and getattr(args, opt.dest) is None:
            setattr(args, opt.dest, PLAN_DEFAULTS[opt.dest])
            filled += [opt.flag, PLAN_DEFAULTS[opt.dest]]
    return scenario_given, filled


def _acceptance_override(args: argparse.Namespace) -> AcceptanceSpec | None:
    if args.acceptance is None:
        return None
    if args.alpha is not None:
        raise PlanError("--alpha and --acceptance contradict each other: give one (--acceptance also takes a single α)")
    from dataclasses import replace

    return replace(parse_acceptance(args.acceptance), beyond=args.acceptance_beyond)


def _check_measured_positions(configs: list[Any], acceptance: AcceptanceSpec | None) -> None:
    """With ``--acceptance-beyond refuse``, a γ longer than the measured positions is refused before any run."""
    if acceptance is None or acceptance.beyond != "refuse" or acceptance.positions is None:
        return
    longest = max((c.parsed_policy.max_gamma for c in configs), default=0)
    if longest > acceptance.positions:
        raise PlanError(f"γ {longest} drafts beyond the {acceptance.positions} positions --acceptance measured; "
                        f"give --gamma up to {acceptance.positions}, or --acceptance-beyond geometric to extend them "
                        "by a stated decay")


def _check_not_empty(args: argparse.Namespace) -> None:
    """A swept option given as '' or ',' is an empty sweep, not a default."""
    from .options import given_options

    for opt in given_options(args):
        if not [part for part in str(getattr(args, opt.dest)).split(",") if part.strip()]:
            raise PlanError(f"empty sweep: {opt.flag} was given no values")


def plan_configs(args: argparse.Namespace, acceptance: AcceptanceSpec | None) -> list[Any]:
    from specgauge.simulator import ConfigError

    from .options import configs_from_args

    try:
        configs = configs_from_args(args, acceptance=acceptance.to_model() if acceptance else None)
    except ConfigError as exc:
        raise PlanError(str(exc)) from None
    if not configs:
        raise PlanError("empty sweep: every swept option needs at least one value")
    return list(dict.fromkeys(configs))  # a tree fixes γ to its depth: γ × tree sweeps repeat configurations


def scenario_title(configs: list[Any]) -> str:
    """The scenario in a figure title: models, GPU and acceptance (lists when swept)."""
    def values(get) -> str:
        seen = list(dict.fromkeys(str(get(c)) for c in configs))
        return "/".join(seen) if len(seen) <= 3 else f"{len(seen)} values"

    tp, dp, ep = values(lambda c: c.tp), values(lambda c: c.dp), values(lambda c: c.ep)
    layout = f" (tp {tp}" + ("" if dp == "1" else f" × dp {dp}") + ("" if ep == "1" else f", ep {ep}") + ")"
    return (f"{values(lambda c: c.target)}, draft {values(lambda c: c.draft)}, on {values(lambda c: c.gpu)}"
            + layout + f"; acceptance {values(lambda c: c.acceptance.label())}")


def _validate(configs: list[Any]) -> list[str]:
    """Every configuration checked against its profiles before any is simulated; the warnings, once each."""
    from specgauge.simulator import ConfigError, memory_plan

    warnings: dict[str, None] = {}
    for config in configs:
        try:
            memory_plan(config)
        except ConfigError as exc:
            raise PlanError(str(exc)) from None
        warnings.update(dict.fromkeys(config.implausible()))
    return list(warnings)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    _rate_defaults(args)
    scenario_given, filled = apply_plan_defaults(args)
    if args.plot is None:
        args.plot = not scenario_given and importlib.util.find_spec("matplotlib") is not None
        if not scenario_given and not args.plot:
            say("specgauge plan: matplotlib is not installed, so no figures: pip install 'specgauge[plot]'")
    slo = parse_slo(args.slo)
    own = None
    if args.validation is not None:   # read and checked before any work
        from specgauge.reports.planning.intervals import read_own_residuals

        own = read_own_residuals(args.validation)
    if args.rate is not None:
        _lengthen_short_runs(args, slo)
    _check_not_empty(args)
    acceptance = _acceptance_override(args)
    options = options_from_args(args)
    options.resolved_executor()
    configs = plan_configs(args, acceptance)
    _check_measured_positions(configs, acceptance)
    announce(configs, "plan", parallel=options.jobs)  # refuse what cannot fit before any file is made
    target: CsvTarget = resolve_csv_target(args.csv, default_name="plan.csv")
    if args.plot:
        from specgauge.plotting import pyplot

        pyplot()  # refuse --plot without matplotlib before the sweep, not after
    for message in _validate(configs):
        warn("plan", message)
    if not scenario_given:
        say("specgauge plan: the default scenario (Qwen3-32B, Qwen3-0.6B drafting, one H200): " + " ".join(filled))
    elif filled:
        say("specgauge plan: options not given keep the default scenario's values: " + " ".join(filled))

    if args.rate is not None:
        return size_for_rate(args, argv, configs, target, slo, acceptance, filled, options)

    from specgauge.simulator import simulate

    config_columns = list(configs[0].columns())
    alphas = sorted({c.acceptance.label() for c in configs})
    source = acceptance.source if acceptance else (
        f"--alpha {args.alpha}" if args.alpha is not None else f"simulator default {', '.join(alphas)}; calibrate with --acceptance")
    metadata = {
        "command": "plan",
        "arguments": argv,
        "scenario_defaults": filled,
        "acceptance_source": source,
        "slo": str(slo),
        "configurations": len(configs),
    }
    started = time.perf_counter()
    frame, resumed = sweep_to_csv(
        simulate, configs, target, signature_payload={"command": "plan"},
        metadata=metadata, options=options, restart=args.restart,
        describe=lambda c: " ".join(f"{k}={v}" for k, v in c.columns().items() if k in ("gamma", "batch_size", "qps", "draft", "gpu")),
    )
    # every figure with its interval (reports.planning.intervals), in the CSV and the decisions
    from specgauge.reports.planning.intervals import add_intervals

    placeholder = acceptance is None and args.alpha is None
    frame = add_intervals(frame, alpha_measured=not placeholder, profiles=args.profiles, own=own)
    write_csv_atomic(frame, target.path, metadata)
    elapsed = time.perf_counter() - started
    say(f"wrote {target.path}: {len(frame)} configurations in {elapsed:.1f} s"
        + (f" ({resumed} resumed from an interrupted run)" if resumed else ""))

    decisions = decide(frame, config_columns, slo, beyond_note=acceptance.beyond_note if acceptance else None)
    decision_path = target.sibling("decision")
    write_csv_atomic(decisions, decision_path, {**metadata, "source_csv": target.path.name})
    say(f"wrote {decision_path}: {len(decisions)} decisions (acceptance: {source})")
    table = summary_table(decisions)
    if table:
        say("\nBest γ per load level (speed-up: TPOT for latency, output throughput for throughput; [90 % interval]; "
            "{γ within it}):")
        say(table)
    say()
    for line in recommendation(decisions):
        say(line)
    from specgauge.reports.planning.measure_next import write_measure_next   # what to measure to narrow them

    for line in write_measure_next(frame, config_columns, argv, not placeholder, args.profiles,
                                   target.sibling("measure_next"), {**metadata, "source_csv": target.path.name}):
        say(line)
    if args.plot:
        from specgauge.reports.figures.curves import plot_plan

        for path in plot_plan(frame, target.path, scenario_title(configs)):
            say(f"wrote {path}")
    return 0


# --------------------------------------------------------------------------- --rate: GPUs for a request rate

#: what ``--rate`` changes in the default scenario: one batch cap (a serving engine's usual
#: --max-num-seqs), runs long enough for the queue's stability to show, and three seeds, so that
#: the answer carries its run-to-run spread
RATE_DEFAULTS = {"batch_size": "256", "requests": "1000", "seed": "0,1,2"}
#: the options that only size a rate, refused without ``--rate``
SIZING_OPTIONS = {"gpus_per_node": "--gpus-per-node", "headroom": "--headroom", "spare_replicas": "--spare-replicas"}


def _rate_defaults(args: argparse.Namespace) -> None:
    """``--rate`` searches the request rate itself: a --qps grid is refused, γ 0 joins the sweep."""
    if args.rate is None:
        given = [flag for dest, flag in SIZING_OPTIONS.items() if getattr(args, dest) is not None]
        if given:
            raise PlanError(f"{given[0]} sizes the answer of --rate: add --rate REQ_PER_S or drop it")
        return
    if not (args.rate > 0 and args.rate < float("inf")):
        raise PlanError(f"--rate must be a request rate > 0 (requests/s), got {args.rate:g}")
    if args.qps is not None:
        raise PlanError("--rate searches the request rate itself (bisection per configuration); drop --qps")
    if args.arrival is not None and any(a.strip() in ("trace", "closed") for a in str(args.arrival).split(",")):
        raise PlanError(f"--rate searches a Poisson or gamma arrival rate; --arrival {args.arrival} has no rate to search")
    for dest, value in RATE_DEFAULTS.items():
        if getattr(args, dest) is None:
            setattr(args, dest, value)
    if args.gamma is not None and "0" not in [g.strip() for g in str(args.gamma).split(",")]:
        args.gamma = "0," + str(args.gamma)  # the comparison without speculation


def _lengthen_short_runs(args: argparse.Namespace, slo: Any) -> None:
    """A run too short for the decision it feeds is lengthened, and the console says so: ``--requests``
    below what the SLO's statistics and the stability test need (``capacity.min_requests``) is raised."""
    from specgauge.reports.planning.capacity import min_requests

    least, why = min_requests(slo)
    try:
        given = [inputs.positive_int(part) for part in str(args.requests).split(",") if part.strip()]
    except argparse.ArgumentTypeError:
        return  # configs_from_args refuses it, naming the option
    if given and min(given) < least:
        raised = list(dict.fromkeys(max(n, least) for n in given))
        args.requests = ",".join(map(str, raised))
        say(f"specgauge plan: --requests {min(given)} is too short for a capacity: {why}; running "
            f"{', '.join(f'{n:,}' for n in raised)} requests a run instead")


def _world_columns(args: argparse.Namespace, configs: list[Any]) -> tuple[str, ...]:
    """The swept options that describe the world rather than a choice (α, lengths, GPU, target):
    ``--rate`` answers once for each of their values and never picks the most favourable one."""
    from specgauge.reports.planning.capacity import WORLD_FIELDS

    from .options import given_options

    columns = [opt.field for opt in given_options(args) if opt.field in WORLD_FIELDS]
    if args.acceptance is not None:
        columns.append("acceptance")
    return tuple(c for c in dict.fromkeys(columns) if len({str(cfg.columns()[c]) for cfg in configs}) > 1)


def size_for_rate(args: argparse.Namespace, argv: list[str], configs: list[Any], target: CsvTarget, slo: Any,
                  acceptance: AcceptanceSpec | None, filled: list[str], options: Any) -> int:
    """``plan --rate R``: the capacity of every configuration and seed by bisection, then the sizing
    table (seeds merged) and the answer per value of the world's swept options, in whole nodes."""
    from specgauge.reports.planning.capacity import (CapacityQuery, Sizing, add_capacity_intervals, capacity_row,
                                                     merge_seeds, rate_notes, sizing_lines, sizing_table)

    if not slo:
        say("specgauge plan: no --slo given, so a configuration's capacity is the highest rate its queue keeps up "
            "with (stable), whatever its latency")
    sizing = Sizing(args.rate, headroom=args.headroom or 0.0, spare=args.spare_replicas or 0,
                    gpus_per_node=args.gpus_per_node)
    world = _world_columns(args, configs)
    queries = [CapacityQuery(c, str(slo)) for c in configs]
    metadata = {"command": "plan", "arguments": argv, "scenario_defaults": filled, "rate": args.rate,
                "headroom": sizing.headroom, "spare_replicas": sizing.spare, "gpus_per_node": args.gpus_per_node,
                "acceptance_source": acceptance.source if acceptance else "simulator default", "slo": str(slo),
                "configurations": len(configs)}
    started = time.perf_counter()
    frame, resumed = sweep_to_csv(capacity_row, queries, target, signature_payload={"command": "plan --rate"},
                                  metadata=metadata, options=options, restart=args.restart,
                                  describe=CapacityQuery.describe)
    elapsed = time.perf_counter() - started
    frame = add_capacity_intervals(frame, profiles=args.profiles, alpha_measured=acceptance is not None)
    write_csv_atomic(frame, target.path, metadata)   # the runs with their capacity intervals
    merged = merge_seeds(frame)
    seeds = frame["seed"].nunique()
    say(f"wrote {target.path}: the capacities of {len(merged)} configurations"
        + (f" × {seeds} seeds" if seeds > 1 else "") + f", by bisection, in {elapsed:.1f} s"
        + (f" ({resumed} resumed from an interrupted run)" if resumed else ""))
    table = sizing_table(merged, sizing, world)
    sizing_path = target.sibling("sizing")
    write_csv_atomic(table, sizing_path, {**metadata, "source_csv": target.path.name})
    say(f"wrote {sizing_path}: {len(table)} configurations, cheapest first"
        + (f" for each {', '.join(world)}" if world else ""))
    rounded = ("" if sizing.headroom == 0 else f" with {sizing.headroom:.0%} headroom") + \
        ("" if not sizing.spare else f", N+{sizing.spare}")
    say(f"\nGPUs for {args.rate:g} req/s{rounded} meeting {slo or 'a stable queue'} (capacity: req/s a replica, "
        "mean over the seeds; [90 % interval with the seeds' spread]; GPUs in whole nodes):")
    say(shown_table(table, world).to_string(index=False, na_rep="-"))
    say()
    for line in sizing_lines(table, sizing, world) + rate_notes(table, sizing):
        say(line)
    from specgauge.reports.planning.capacity_check import check_line, rate_checks   # the run that settles it

    checks = rate_checks(table, sizing, (configs[0].prompt_len, configs[0].output_len), world)
    checks_path = target.sibling("measure_next")
    write_csv_atomic(checks, checks_path, {**metadata, "source_csv": sizing_path.name})
    say(check_line(checks, str(slo) if slo else "", checks_path.name) or
        f"wrote {checks_path}: no configuration meets {slo or 'a stable queue'} at any rate, so no answer to check")
    return 0


def shown_table(table: Any, world: tuple[str, ...]) -> Any:
    """The sizing table as the console shows it: one column per figure, intervals and spreads in brackets."""
    import pandas as pd

    def number(v: float, digits: str = ".4g") -> str:
        return "-" if v != v else ("∞" if v == float("inf") else f"{v:{digits}}")

    shown = table[list(world)].copy() if world else pd.DataFrame(index=table.index)
    shown["speculation"] = table["speculation"]
    shown["layout"] = table["layout"]
    shown["batch_size"] = table["batch_size"]
    shown["capacity_rps"] = [f"{number(c)} [{number(lo, '.3g')}, {number(hi, '.3g')}]"
                             for c, lo, hi in zip(table["capacity_rps"], table["capacity_rps_lo"], table["capacity_rps_hi"])]
    shown["seed_spread"] = [number(a) if a == b or a != a else f"{number(a)}-{number(b)}"
                            for a, b in zip(table["capacity_rps_seed_min"], table["capacity_rps_seed_max"])]
    shown["replicas"] = [number(v, ".0f") for v in table["replicas"]]
    shown["gpus"] = [number(v, ".0f") for v in table["gpus"]]
    shown["nodes"] = [f"{number(n, '.0f')} x {g}" for n, g in zip(table["nodes"], table["gpus_per_node"])]
    shown["node_gpus"] = [f"{number(v, '.0f')} [{number(lo, '.0f')}, {number(hi, '.0f')}]"
                          for v, lo, hi in zip(table["node_gpus"], table["node_gpus_lo"], table["node_gpus_hi"])]
    return shown
