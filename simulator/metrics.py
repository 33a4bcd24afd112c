"""Report columns from a run, named as ``vllm bench serve`` names them (times in ms)."""

from __future__ import annotations

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


def summarise(stats: RunStats, workload: Workload, gamma_max: int) -> dict[str, float | int]:
    """vLLM-style latency and throughput metrics plus engine counters for one run."""
    duration = float(np.nanmax(stats.finish))
    completed = int(np.isfinite(stats.finish).sum())
    row: dict[str, float | int] = {
        "completed": completed,
        "duration_s": duration,
        "total_input_tokens": int(workload.prompt.sum()),
        "total_output_tokens": int(stats.output_tokens),
        "request_throughput": completed / duration,
        "output_throughput": stats.output_tokens / duration,
        "total_token_throughput": (stats.output_tokens + int(workload.prompt.sum())) / duration,
    }
    ttft = stats.first_token - workload.arrival
    e2el = stats.finish - workload.arrival
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(workload.output > 1, (stats.finish - stats.first_token) / (workload.output - 1), np.nan)
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
