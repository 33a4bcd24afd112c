"""``specgauge simulate``: simulate one serving configuration, print a summary, write a one-row CSV."""

from __future__ import annotations

import argparse
import contextlib
import sys

import pandas as pd

from specgauge.csvio import resolve_csv_target, write_csv_atomic
from specgauge.sweeps.journal import sweep_lock
from specgauge.errors import ConfigError, UsageError, as_usage_error
from .console import say, warn
from .budget import announce, progress_bar
from .options import add_simulation_options, configs_from_args
from specgauge.simulator import memory_plan, simulate


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,  # a prefix is refused, never read as the option it begins (`--out`, `--output-len`)
        prog="specgauge simulate",
        description="Simulate one serving configuration with speculative decoding against its paired "
                    "no-speculation baseline (same arrivals and lengths). Lengths are in tokens, times in ms.")
    add_simulation_options(parser, sweep=False)
    group = parser.add_argument_group("acceptance (as plan takes it)")
    group.add_argument("--acceptance", default=None, metavar="SPEC",
                       help="acceptance instead of --alpha: one α, a per-position list (0.9,0.8,0.7), a profile name "
                       "from fixtures/workloads, a `vllm bench serve --save-result` JSON, or a saved vLLM /metrics text (two, "
                       "BEFORE,AFTER: their difference), so that one configuration "
                       "of a `plan --acceptance` sweep can be replayed")
    group.add_argument("--acceptance-beyond", choices=("geometric", "last", "refuse"), default="geometric",
                       help="draft positions beyond those --acceptance gives: a geometric decay fitted to them "
                       "(default), the last rate repeated, or refused")
    return parser


def _acceptance(args: argparse.Namespace):
    """``--acceptance`` read as plan reads it (``measured_rates.parse_acceptance``), or None."""
    if args.acceptance is None:
        return None
    if args.alpha is not None:
        raise UsageError("--alpha and --acceptance contradict each other: give one (--acceptance also takes a single α)")
    from dataclasses import replace

    from specgauge.reports.planning.measured_rates import parse_acceptance

    return replace(parse_acceptance(args.acceptance), beyond=args.acceptance_beyond)


def _workload_line(row: dict, trace: str | None) -> str:
    """The requests actually run: counts and lengths from the run itself (a trace's own, when replayed)."""
    n = int(row["requests"])
    if row["arrival"] == "trace" or row["length_dist"] != "fixed":
        done = max(int(row["completed"]), 1)
        lengths = (f"mean {row['total_input_tokens'] / done:.0f} + {row['total_output_tokens'] / done:.0f} tokens"
                   + (f" from trace {trace}" if row["arrival"] == "trace" else f" ({row['length_dist']})"))
    else:
        lengths = f"{row['prompt_len']} + {row['output_len']} tokens"
    return f"{n} requests of {lengths}"


def _concurrency_note(row: dict) -> str:
    """What the concurrency is compared with: without a draft model the difference is the lookahead alone."""
    without = row["max_concurrency_no_draft"]
    if row["gamma"] and row["draft"] != "none" and float(row.get("draft_weight_gib") or 0.0) > 0.0:
        return f"without draft {without}"
    if not row["gamma"]:
        return "no speculation"
    if row["max_concurrency"] == without:
        return "no draft memory"
    return f"no draft memory; {without} without the {row['gamma']} lookahead tokens each request reserves"


def _bracket(row: dict, key: str, digits: str) -> str:
    """`` [lo, hi]`` beside a figure that carries its interval (``reports.planning.intervals``)."""
    lo, hi = row.get(f"{key}_lo"), row.get(f"{key}_hi")
    if lo is None or hi is None or lo != lo or hi != hi:
        return ""
    return f" [{lo:{digits}}, {hi:{digits}}]"


def summary(row: dict, trace: str | None = None) -> str:
    """A short readable summary of one report row (``trace``: the file it replayed, if any)."""
    draft = row["draft"] if row["gamma"] else "none"
    dp, ep = row.get("dp", 1), row.get("ep", 1)
    gpus = f"x{row['tp'] * dp} (tp {row['tp']} x dp {dp}, ep {ep})" if dp > 1 or ep > 1 else f"x{row['tp']}"
    lines = [
        f"{row['target']} on {row['gpu']} {gpus}, draft {draft}, gamma {row['gamma']} ({row['policy']}), "
        f"acceptance {row['acceptance']}",
        f"  batch cap {row['batch_size']}, {row['arrival']}" + (f" at {row['qps']:g} req/s" if row["qps"] else "")
        + f", {_workload_line(row, trace)}, seed {row['seed']}",
        f"  output throughput {row['output_throughput']:.1f}{_bracket(row, 'output_throughput', '.1f')} tok/s   "
        f"(no spec {row['no_spec_output_throughput']:.1f}{_bracket(row, 'no_spec_output_throughput', '.1f')})"
        f"   speedup {row['speedup_vs_no_spec']:.3f}x{_bracket(row, 'speedup_vs_no_spec', '.3f')}",
        f"  TTFT mean {row['mean_ttft_ms']:.1f} ms   TPOT mean {row['mean_tpot_ms']:.2f}{_bracket(row, 'mean_tpot_ms', '.2f')} ms "
        f"(no spec {row['no_spec_mean_tpot_ms']:.2f}{_bracket(row, 'no_spec_mean_tpot_ms', '.2f')}), p99 {row['p99_tpot_ms']:.2f} (no spec "
        f"{row['no_spec_p99_tpot_ms']:.2f})   p99 E2EL {row['p99_e2el_ms']:.0f} ms",
        f"  acceptance length {row['spec_decode_acceptance_length']:.3f} (expected "
        + (f"{row['expected_acceptance_length']:.3f}" if row["expected_acceptance_length"] is not None else "n/a")
        + f"), mean batch {row['mean_batch_size']:.1f}, compute-bound {row['compute_bound_fraction']:.0%}",
        f"  max concurrency {row['max_concurrency']} ({_concurrency_note(row)}), KV utilisation {row['kv_utilization']:.0%}",
    ]
    if not bool(row.get("stable", True)):
        lines.append(f"  unstable: served {float(row['served_fraction']):.0%} of the offered rate, the wait growing "
                     f"{float(row['queue_growth']):.2g} s a second: these latencies describe the run's length, "
                     "not the service, and meet no SLO")
    return "\n".join(lines)


def _closed_loop_notes(config, plan) -> None:
    """A closed loop runs at most what the KV cache holds at once; fewer requests than that are read over
    less than one turn of the batch."""
    from specgauge.simulator.workload import closed_loop_concurrency

    held = min(config.batch_size, closed_loop_concurrency(plan, config.length_dist))
    if held < config.batch_size:
        say(f"specgauge simulate: the KV cache holds about {held} of these requests at once, so the closed loop "
            f"runs {held} (its warm-up and tail {held} requests each), not --batch-size {config.batch_size}")
    if config.requests < held:   # they would all start, and with fixed lengths all finish, together
        raise UsageError(f"--arrival closed measures the loop's steady state between the first and last of the "
                         f"measured requests' completions, and --requests {config.requests} is below the {held} it "
                         f"keeps in flight (less than one turn of the batch): give --requests {held} or more, or a "
                         "lower --batch-size")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    spec = _acceptance(args)
    (config,) = configs_from_args(args, acceptance=spec.to_model() if spec else None)
    if spec is not None and spec.beyond == "refuse" and spec.positions is not None \
            and config.parsed_policy.max_gamma > spec.positions:
        raise UsageError(f"γ {config.parsed_policy.max_gamma} drafts beyond the {spec.positions} positions "
                         "--acceptance measured; lower --gamma or use --acceptance-beyond geometric")
    try:  # the profiles and memory, before any work: what the options name must exist and fit
        plan = memory_plan(config)
    except ConfigError as exc:
        raise as_usage_error(exc) from None
    if config.arrival == "closed":
        _closed_loop_notes(config, plan)
    target = resolve_csv_target(args.csv, default_name="simulate.csv") if args.csv else None  # before any work
    for message in config.implausible():
        warn("simulate", message)
    announce(config)
    with sweep_lock(target.path, "specgauge simulate " + " ".join(argv)) if target else contextlib.nullcontext():
        row = simulate(config, progress_bar(config))  # a second run on the same --csv is refused, naming this one
        from specgauge.reports.planning.intervals import add_intervals   # every figure with its 90 % interval

        placeholder = args.alpha is None and spec is None   # the draft kind's default α: its published range too
        row = add_intervals(pd.DataFrame([row]), alpha_measured=not placeholder, profiles=config.profiles).iloc[0].to_dict()
        say(summary(row, config.trace))
        say(f"  90 % intervals in brackets: {row['interval_note']}")
        if spec is not None and spec.acceptance_length is not None:   # measured by a server: say what it gave
            say(f"  acceptance from {spec.source}")
        note = spec.beyond_note(config.parsed_policy.max_gamma) if spec is not None else None
        if note:
            say(f"  acceptance: {note}")
        if target is not None:
            write_csv_atomic(pd.DataFrame([row]), target.path, {"command": "simulate", "arguments": argv, "seed": config.seed})
            say(f"wrote {target.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
