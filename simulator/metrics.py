"""Report columns from a run, named as ``vllm bench serve`` names them (times in ms), and whether it was stable.

A run under a request rate counts toward a capacity or an SLO only when its queue is
stable (``stability``): the engine served the requests as fast as they came, within 2 %,
and the wait did not keep growing. An overloaded run's TPOT can look fine while its queue
grows without bound; its latencies describe the length of the run, not the service.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specgauge.simulator.engine import RunStats
from specgauge.simulator.workload import Workload


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """Inverted-CDF quantile of values repeated ``weights`` times (no expansion in memory)."""
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cum, q * cum[-1], side="left")])


def _describe(name: str, values_s: np.ndarray) -> dict[str, float]:
    values = values_s[np.isfinite(values_s)] * 1e3
    if not len(values):
        return {f"mean_{name}_ms": float("nan"), f"median_{name}_ms": float("nan"), f"p99_{name}_ms": float("nan")}
    return {f"mean_{name}_ms": float(values.mean()), f"median_{name}_ms": float(np.median(values)),
            f"p99_{name}_ms": float(np.percentile(values, 99))}


#: a run is stable when it serves at least this share of the offered rate; the queue's wait may grow by at
#: most ``1 - STABLE_SERVED_FRACTION`` seconds a second of arrivals (what a 2 % shortfall makes it grow by)
STABLE_SERVED_FRACTION = 0.98


@dataclass(frozen=True)
class Stability:
    """Whether a run's queue kept up with its arrivals.

    ``served_fraction``: the rate requests completed over the rate they arrived, read off
    the number in the system (arrived, not yet finished) at each arrival from the time the
    engine has filled (one median lifetime after the first arrival, at least the first
    decile, at most the median arrival) to the last: one less its least-squares slope over
    the offered rate. A stable queue holds a steady number whatever its bursts; one served
    at 0.98 of the offered rate gains 0.02 requests a request. A short run's bursts swing
    the count as well, so a shortfall makes the run unstable only when the count's fitted
    growth over the window is more than twice its spread about the fit. ``queue_growth``:
    how many seconds the wait before the first token grew per second of arrivals over the
    second half of the run (least squares); a queue served 2 % too slowly grows by 0.02 s a
    second. NaN for a saturated run (every request waits at time 0: a closed loop at the
    batch cap, stable by construction: it serves what it is given).
    """

    served_fraction: float
    queue_growth: float
    stable: bool

    def columns(self) -> dict[str, float | bool]:
        return {"served_fraction": self.served_fraction, "queue_growth": self.queue_growth, "stable": self.stable}


def stability(arrival: np.ndarray, first_token: np.ndarray, finish: np.ndarray) -> Stability:
    """Served rate against offered rate and the growth of the wait (see ``Stability``)."""
    arrival = np.asarray(arrival, float)
    finish = np.asarray(finish, float)
    n = len(arrival)
    if n < 10 or float(arrival[-1] - arrival[n // 10]) <= 0.0:
        return Stability(np.nan, np.nan, True)  # one NaN object: rows of equal runs compare equal
    # the window opens once the empty engine has filled (about one request's lifetime: the run's median
    # end-to-end latency) and no earlier than the first decile, no later than the median arrival
    filled = arrival[0] + float(np.nanmedian(finish - arrival))
    lo = min(max(n // 10, int(np.searchsorted(arrival, filled))), n // 2)
    times = arrival[lo:]
    in_system = np.arange(lo + 1, n + 1) - np.searchsorted(np.sort(finish), times, side="right")
    offered = (n - 1 - lo) / float(times[-1] - times[0])
    slope, intercept = np.polyfit(times, in_system, 1)
    served = 1.0 - float(slope) / offered
    # a short run's bursts swing the count too: a shortfall counts only when the count's fitted growth
    # over the window exceeds twice its spread about the fit (what a steady queue wanders by)
    growth_in_system = float(slope) * float(times[-1] - times[0])
    beyond_noise = growth_in_system > 2.0 * float(np.std(in_system - (slope * times + intercept)))
    half = slice(n // 2, n)
    wait = np.asarray(first_token, float)[half] - arrival[half]
    ok = np.isfinite(wait)
    growth = float(np.polyfit(arrival[half][ok], wait[ok], 1)[0]) if ok.sum() >= 2 and np.ptp(arrival[half][ok]) > 0 \
        else 0.0
    tolerance = 1.0 - STABLE_SERVED_FRACTION
    short = served < STABLE_SERVED_FRACTION and beyond_noise
    stable = bool(not short and growth <= tolerance and np.isfinite(finish).all())
    return Stability(served, growth, stable)


def summarise(stats: RunStats, workload: Workload, gamma_max: int) -> dict[str, float | int]:
    """vLLM-style latency and throughput metrics plus engine counters for one run.

    A closed loop (``workload.closed_loop``) is measured on its middle requests alone: its
    rates between their first and last completions (the loop's steady state), its TTFT
    from when each joined the batch (when the loop sent it)."""
    m = workload.measured
    if workload.measured_count == len(workload):
        duration = float(np.nanmax(stats.finish))
        completed = int(np.isfinite(stats.finish).sum())
        output_tokens, input_tokens = int(stats.output_tokens), int(workload.prompt.sum())
        sent = workload.arrival
    else:
        finish = stats.finish[m]
        completed = int(np.isfinite(finish).sum())
        rate = (completed - 1) / float(np.nanmax(finish) - np.nanmin(finish)) if completed > 1 else float("nan")
        duration = completed / rate
        output_tokens, input_tokens = int(workload.output[m].sum()), int(workload.prompt[m].sum())
        sent = stats.admitted[m]
    row: dict[str, float | int] = {
        "completed": completed,
        "duration_s": duration,
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "request_throughput": completed / duration,
        "output_throughput": output_tokens / duration,
        "total_token_throughput": (output_tokens + input_tokens) / duration,
    }
    output = workload.output[m]
    ttft = stats.first_token[m] - sent
    e2el = stats.finish[m] - sent
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(output > 1, (stats.finish[m] - stats.first_token[m]) / (output - 1), np.nan)
    row.update(_describe("ttft", ttft))
    row.update(_describe("tpot", tpot))
    if stats.itl_values:
        values = np.concatenate(stats.itl_values)
        weights = np.repeat(np.asarray(stats.itl_weights, dtype=float), [len(v) for v in stats.itl_values])
        row.update({"mean_itl_ms": float(np.average(values, weights=weights) * 1e3),
                    "median_itl_ms": _weighted_quantile(values, weights, 0.5) * 1e3,
                    "p99_itl_ms": _weighted_quantile(values, weights, 0.99) * 1e3})
    else:
        row.update({"mean_itl_ms": float("nan"), "median_itl_ms": float("nan"), "p99_itl_ms": float("nan")})
    row.update(_describe("e2el", e2el))
    row.update(stability(workload.arrival[m], stats.first_token[m], stats.finish[m]).columns())
    if stats.drafts:
        row["spec_decode_acceptance_rate"] = stats.accepted / int(stats.pos_drafted[1:].sum())
        row["spec_decode_acceptance_length"] = 1.0 + stats.accepted / stats.drafts
        row["spec_decode_num_drafts"] = stats.drafts
        row["spec_decode_accepted_tokens"] = stats.accepted
    else:
        row["spec_decode_acceptance_rate"] = float("nan")
        row["spec_decode_acceptance_length"] = 1.0
        row["spec_decode_num_drafts"] = 0
        row["spec_decode_accepted_tokens"] = 0
    for k in range(1, gamma_max + 1):
        drafted = int(stats.pos_drafted[k]) if k < len(stats.pos_drafted) else 0
        row[f"spec_decode_acceptance_rate_pos{k}"] = stats.pos_accepted[k] / drafted if drafted else float("nan")
    row["target_passes"] = stats.passes
    row["mean_batch_size"] = stats.sequences_in_passes / stats.passes if stats.passes else 0.0
    row["compute_bound_fraction"] = stats.compute_bound_passes / stats.passes if stats.passes else 0.0
    return row
