"""What a simulation will cost, said before it starts: seconds and memory from the arguments
alone, a refusal when it cannot fit in this machine's memory, and a bar when it is long."""

from __future__ import annotations

import os
import sys
from typing import Iterable

from specgauge.errors import UsageError

from .console import say, warn

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


def duration(seconds: float) -> str:
    for unit, size in (("days", 86400.0), ("hours", 3600.0), ("minutes", 60.0)):
        if seconds >= 2 * size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def announce(configs, command: str = "simulate", flag: str = "--requests", parallel: int = 1) -> None:
    """Say before a long run how long and how much memory it will take; warn past the limits,
    and refuse a run that cannot fit in this machine's memory at all.

    ``configs`` is one configuration or the sweep's list, run one after another (``parallel``
    at a time, each holding its own memory); ``flag`` is the option that sets the requests.
    """
    configs = list(configs) if isinstance(configs, Iterable) else [configs]
    costs = [estimate(c) for c in configs]
    seconds = sum(s for s, _ in costs)
    largest = max(range(len(configs)), key=lambda i: costs[i][1])
    config, memory = configs[largest], costs[largest][1] * max(1, min(parallel, len(configs)))
    what = f"{config.requests:,} requests of {config.output_len} output tokens"
    if memory > physical_memory():
        raise UsageError(f"{what} need about {memory / 2**30:,.0f} GiB of memory, more than this machine's "
                         f"{physical_memory() / 2**30:,.0f} GiB; lower {flag}")
    if memory > MEMORY_WARNING_BYTES:
        warn(command, f"{what} need about {memory / 2**30:.1f} GiB of memory; lower {flag} "
                      "(a few thousand give stable means)")
    if seconds > SLOW_SECONDS:
        tokens = sum(c.requests * c.output_len for c in configs)
        over = f" over {len(configs)} configurations" if len(configs) > 1 else ""
        say(f"specgauge {command}: about {tokens:,} output tokens to simulate twice (with and without "
            f"speculation){over}: roughly {duration(seconds / max(1, parallel))} on "
            + ("one core" if parallel <= 1 else f"{parallel} processes"), file=sys.stderr)


def progress_bar(config):
    """A tqdm bar over the requests of both runs when the estimate exceeds a few seconds
    (None otherwise: a short run prints nothing extra); it closes itself at the last request."""
    seconds, _ = estimate(config)
    if seconds <= SLOW_SECONDS:
        return None
    from specgauge.progress import bar as progress_bar

    bar = progress_bar(desc="simulating", unit="request", file=sys.stderr, leave=False, mininterval=0.5)

    def update(admitted: int, total: int) -> None:
        bar.total = total
        if admitted > bar.n:
            bar.update(admitted - bar.n)
        if admitted >= total:
            bar.close()

    return update
