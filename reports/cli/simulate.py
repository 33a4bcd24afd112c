"""``specgauge simulate``: simulate one serving configuration, print a summary, write a one-row CSV."""

from __future__ import annotations

import argparse
import os
import sys

import pandas as pd

from specgauge.csvio import resolve_csv_target, write_csv_atomic
from specgauge.errors import ConfigError, UsageError, as_usage_error
from .console import say, warn
from .options import add_simulation_options, configs_from_args
from specgauge.simulator import memory_plan, simulate


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specgauge simulate",
        description="Simulate one serving configuration with speculative decoding against its paired "
                    "no-speculation baseline (same arrivals and lengths). Lengths are in tokens, times in ms.")
    add_simulation_options(parser, sweep=False)
    return parser


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


def summary(row: dict, trace: str | None = None) -> str:
    """A short readable summary of one report row (``trace``: the file it replayed, if any)."""
    draft = row["draft"] if row["gamma"] else "none"
    lines = [
        f"{row['target']} on {row['gpu']} x{row['tp']}, draft {draft}, gamma {row['gamma']} ({row['policy']}), "
        f"acceptance {row['acceptance']}",
        f"  batch cap {row['batch_size']}, {row['arrival']}" + (f" at {row['qps']:g} req/s" if row["qps"] else "")
        + f", {_workload_line(row, trace)}, seed {row['seed']}",
        f"  output throughput {row['output_throughput']:.1f} tok/s   (no spec {row['no_spec_output_throughput']:.1f})"
        f"   speedup {row['speedup_vs_no_spec']:.3f}x",
        f"  TTFT mean {row['mean_ttft_ms']:.1f} ms   TPOT mean {row['mean_tpot_ms']:.2f} ms "
        f"(no spec {row['no_spec_mean_tpot_ms']:.2f})   p99 E2EL {row['p99_e2el_ms']:.0f} ms",
        f"  acceptance length {row['spec_decode_acceptance_length']:.3f} (expected "
        + (f"{row['expected_acceptance_length']:.3f}" if row["expected_acceptance_length"] is not None else "n/a")
        + f"), mean batch {row['mean_batch_size']:.1f}, compute-bound {row['compute_bound_fraction']:.0%}",
        f"  max concurrency {row['max_concurrency']} ({_concurrency_note(row)}), KV utilisation {row['kv_utilization']:.0%}",
    ]
    return "\n".join(lines)


#: Measured on a shared 2-core machine: peak memory grows by about 100 bytes per request plus
#: 1.3 per output token (20,000 and 80,000 requests at 64 and 512 output tokens), and the
#: paired runs simulate about a million output tokens per wall second (4 idle).
BYTES_PER_REQUEST, BYTES_PER_TOKEN, TOKENS_PER_SECOND = 100.0, 1.3, 1e6
#: warn past this much memory or this many seconds
MEMORY_WARNING_BYTES, SLOW_SECONDS = 2 * 2**30, 10.0


def estimate(config) -> tuple[float, float]:
    """(seconds, bytes) the run will take, from its arguments alone, before it starts."""
    tokens = float(config.requests) * float(config.output_len)
    return tokens / TOKENS_PER_SECOND, BYTES_PER_REQUEST * config.requests + BYTES_PER_TOKEN * tokens


def physical_memory() -> float:
    """This machine's memory in bytes (infinite where the system does not say)."""
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return float("inf")


def announce(config, command: str = "simulate") -> None:
    """Say before a long run how long and how much memory it will take; warn past the limits,
    and refuse a run that cannot fit in this machine's memory at all."""
    seconds, memory = estimate(config)
    if memory > physical_memory():
        raise UsageError(f"{config.requests:,} requests of {config.output_len} output tokens need about "
                         f"{memory / 2**30:,.0f} GiB of memory, more than this machine's "
                         f"{physical_memory() / 2**30:,.0f} GiB; lower --requests")
    if memory > MEMORY_WARNING_BYTES:
        warn(command, f"{config.requests:,} requests of {config.output_len} output tokens need about "
                      f"{memory / 2**30:.1f} GiB of memory; lower --requests (a few thousand give stable means)")
    if seconds > SLOW_SECONDS:
        say(f"specgauge {command}: about {config.requests * config.output_len:,} output tokens to simulate twice "
            f"(with and without speculation): roughly {_duration(seconds)} on one core", file=sys.stderr)


def progress_bar(config):
    """A tqdm bar over the requests of both runs when the estimate exceeds a few seconds
    (None otherwise: a short run prints nothing extra); it closes itself at the last request."""
    seconds, _ = estimate(config)
    if seconds <= SLOW_SECONDS:
        return None
    from tqdm.auto import tqdm

    bar = tqdm(desc="simulating", unit="request", file=sys.stderr, leave=False, mininterval=0.5)

    def update(admitted: int, total: int) -> None:
        bar.total = total
        if admitted > bar.n:
            bar.update(admitted - bar.n)
        if admitted >= total:
            bar.close()

    return update


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0)):
        if seconds >= 2 * size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    (config,) = configs_from_args(args)
    try:  # the profiles and memory, before any work: what the options name must exist and fit
        memory_plan(config)
    except ConfigError as exc:
        raise as_usage_error(exc) from None
    target = resolve_csv_target(args.csv, default_name="simulate.csv") if args.csv else None  # before any work
    for message in config.implausible():
        warn("simulate", message)
    announce(config)
    row = simulate(config, progress_bar(config))
    say(summary(row, config.trace))
    if target is not None:
        write_csv_atomic(pd.DataFrame([row]), target.path, {"command": "simulate", "arguments": argv, "seed": config.seed})
        say(f"wrote {target.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
