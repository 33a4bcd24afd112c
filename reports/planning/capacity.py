"""How many GPUs for a request rate: each configuration's capacity, found by search, and the replicas it needs.

A configuration's capacity is the highest Poisson request rate at which its run is stable
(``simulator.metrics.stability``: it serves what arrives and its queue does not grow) and
meets every SLO bound. It is found by bisection on the rate, not read off a grid: the
saturated run (the batch kept full) bounds it from above, the bracket is halved until its
ends are within ``rel_tol`` of each other, and the lower end, a rate that was run and
passed, is the answer. A target rate then needs ⌈rate ÷ capacity⌉ replicas of
``tp × dp`` GPUs each; ``sizing_table`` puts the configurations cheapest first, with and
without speculation.

Feasibility is monotone in the rate for the same seed: the Poisson arrivals at every rate
are the same draws scaled, so a faster rate is the same run compressed in time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from specgauge.simulator import SimulationConfig, simulate

from .slo import SLO, parse_slo

#: the search stops when its bracket is this narrow (relative): the answer lies within 1 % below the boundary
REL_TOL = 0.01
#: the upper end starts at this multiple of the saturated run's request rate (its drain leaves it slightly low)
SATURATED_MARGIN = 1.1
#: the bracket's lower end when half the upper fails, as a fraction of the upper; below it no rate meets the SLO
FLOOR_FRACTION = 1.0 / 256


@dataclass(frozen=True)
class CapacityQuery:
    """One configuration to size (its ``qps`` is the search's) and the SLO text it must meet."""

    config: SimulationConfig
    slo: str = ""
    rel_tol: float = REL_TOL

    def describe(self) -> str:
        c = self.config
        return f"gamma={c.gamma} tp={c.tp} dp={c.dp} ep={c.ep} batch_size={c.batch_size} draft={c.draft} gpu={c.gpu}"


@dataclass(frozen=True)
class Probe:
    """One run of the search: its rate, whether it passed, and why not."""

    qps: float
    ok: bool
    why: str


def judge(row: dict[str, Any], slo: SLO) -> tuple[bool, str]:
    """A run passes when it is stable and meets every bound; else the first reason it does not."""
    if not bool(row.get("stable", True)):
        return False, (f"unstable (served {float(row['served_fraction']):.1%} of the offered rate, "
                       f"queue growing {float(row['queue_growth']):.2g} s/s)")
    frame = pd.DataFrame([row])
    for objective in slo.objectives:
        if not bool(SLO((objective,)).met(frame).iloc[0]):
            return False, f"{objective} missed ({objective.column} {float(row[objective.column]):.4g} ms)"
    return True, ""


def search(config: SimulationConfig, slo: SLO, rel_tol: float = REL_TOL) -> tuple[dict[str, Any] | None, list[Probe],
                                                                                     float]:
    """Bisect the request rate: (the row at the highest passing rate or None, the probes, the saturated rate)."""
    saturated = simulate(replace(config, qps=None))
    sat_rate = float(saturated["request_throughput"])
    probes: list[Probe] = []

    def run(qps: float) -> tuple[bool, dict[str, Any]]:
        row = simulate(replace(config, qps=qps))
        ok, why = judge(row, slo)
        probes.append(Probe(qps, ok, why))
        return ok, row

    hi = sat_rate * SATURATED_MARGIN
    ok_hi, row_hi = run(hi)
    while ok_hi and len(probes) < 8:  # the saturated run's drain can leave the bound low; widen until it fails
        hi *= 2.0
        ok_hi, row_hi = run(hi)
    if ok_hi:
        return row_hi, probes, sat_rate
    lo = hi / 2.0  # most configurations hold half their saturated rate: a narrow bracket at once
    ok_lo, best = run(lo)
    if not ok_lo:
        hi, lo = lo, hi * FLOOR_FRACTION
        ok_lo, best = run(lo)
        if not ok_lo:
            return None, probes, sat_rate
    while hi - lo > rel_tol * lo:
        mid = math.sqrt(lo * hi) if hi / lo > 4 else 0.5 * (lo + hi)
        ok, row = run(mid)
        if ok:
            lo, best = mid, row
        else:
            hi = mid
    return best, probes, sat_rate


def gpus_per_replica(config: SimulationConfig) -> int:
    """The GPUs one replica holds: TP × DP (a draft runs on the same GPUs)."""
    return config.tp * config.dp


def capacity_row(query: CapacityQuery) -> dict[str, Any]:
    """One CSV row: the configuration's columns, its capacity and the search that found it, then
    the metrics of the run at the capacity (``qps`` = the capacity)."""
    config = query.config
    slo = parse_slo(query.slo or None)
    best, probes, sat_rate = search(config, slo, query.rel_tol)
    failed = [p for p in probes if not p.ok]
    limit = min(failed, key=lambda p: p.qps).why if failed else "no rate up to the probes' largest failed"
    row: dict[str, Any] = dict(config.columns())
    row["gpu"] = _canonical_gpu(config)
    if best is None:
        row.update(capacity_rps=float("nan"), capacity_limit=f"no rate meets it: at {probes[-1].qps:.3g} req/s "
                   + probes[-1].why)
    else:
        row.update(best)
        row.update(capacity_rps=float(best["qps"]), capacity_limit=limit)
    row.update(gpus_per_replica=gpus_per_replica(config), saturated_request_rate=sat_rate, search_probes=len(probes),
               search_rel_tol=query.rel_tol)
    return row


def _canonical_gpu(config: SimulationConfig) -> str:
    from specgauge.simulator import load_gpu

    return load_gpu(config.gpu, config.profiles).name


def replicas_for(rate: float, capacity: float) -> float:
    """⌈rate ÷ capacity⌉, NaN when the configuration meets the SLO at no rate."""
    if not (capacity > 0 and math.isfinite(capacity)):
        return float("nan")
    return float(math.ceil(rate / capacity - 1e-9))


def add_capacity_intervals(frame: pd.DataFrame, profiles: str | None = None, alpha_measured: bool = False
                           ) -> pd.DataFrame:
    """``capacity_rps_lo``/``_hi`` from the validation's interval of the run's request rate
    (``reports.planning.intervals``), where it exists; the frame unchanged otherwise."""
    try:
        from . import intervals
    except ImportError:  # pragma: no cover - the intervals module ships with the planner
        return frame
    rated = frame[frame["capacity_rps"].notna()]
    if not len(rated) or "request_throughput" not in frame:
        return frame
    with_bands = intervals.add_intervals(rated, alpha_measured=alpha_measured, profiles=profiles)
    out = frame.copy()
    scale_lo = with_bands["request_throughput_lo"] / with_bands["request_throughput"]
    scale_hi = with_bands["request_throughput_hi"] / with_bands["request_throughput"]
    out.loc[rated.index, "capacity_rps_lo"] = rated["capacity_rps"] * scale_lo
    out.loc[rated.index, "capacity_rps_hi"] = rated["capacity_rps"] * scale_hi
    out.loc[rated.index, "capacity_interval_note"] = with_bands["interval_note"]
    return out


LAYOUT_COLUMNS = ("gpu", "target", "tp", "dp", "ep", "draft", "gamma", "tree", "batch_size", "acceptance")


def layout(row: pd.Series) -> str:
    """``tp 4``, ``tp 1 x dp 8, ep 8``: how a replica spreads over its GPUs."""
    dp, ep = int(row.get("dp", 1) or 1), int(row.get("ep", 1) or 1)
    text = f"tp {int(row['tp'])}"
    if dp > 1:
        text += f" x dp {dp}"
    if ep > 1:
        text += f", ep {ep}"
    return text


def sizing_table(frame: pd.DataFrame, rate: float) -> pd.DataFrame:
    """Per configuration: speculation or not, capacity a replica, replicas and GPUs for ``rate``,
    cheapest first (fewest GPUs, then the highest capacity); the intervals' ends where known."""
    rows = []
    for _, r in frame.iterrows():
        cap = float(r["capacity_rps"])
        per = int(r["gpus_per_replica"])
        replicas = replicas_for(rate, cap)
        out = {"speculation": f"{r['draft']} γ={int(r['gamma'])}" if int(r["gamma"]) > 0 else "none",
               "layout": layout(r), "gpu": r["gpu"], "batch_size": int(r["batch_size"]),
               "acceptance": r["acceptance"] if int(r["gamma"]) > 0 else "",
               "capacity_rps": cap, "replicas": replicas, "gpus_per_replica": per,
               "gpus": replicas * per if math.isfinite(replicas) else float("nan")}
        if "capacity_rps_lo" in r and pd.notna(r.get("capacity_rps_lo")):
            lo, hi = float(r["capacity_rps_lo"]), float(r["capacity_rps_hi"])
            out.update(capacity_rps_lo=lo, capacity_rps_hi=hi,
                       gpus_lo=replicas_for(rate, hi) * per, gpus_hi=replicas_for(rate, lo) * per)
        out["limit"] = r["capacity_limit"]
        rows.append(out)
    table = pd.DataFrame(rows)
    return table.sort_values(["gpus", "capacity_rps"], ascending=[True, False], na_position="last",
                             kind="stable").reset_index(drop=True)


def sizing_lines(table: pd.DataFrame, rate: float) -> list[str]:
    """The answer in words: the cheapest configuration with and without speculation."""
    lines = []
    for label, rows in (("with speculation", table[table["speculation"] != "none"]),
                        ("without speculation", table[table["speculation"] == "none"])):
        rows = rows[rows["gpus"].notna()]
        if not len(rows):
            if len(table[(table["speculation"] != "none") == (label == "with speculation")]):
                lines.append(f"{rate:g} req/s {label}: no configuration meets the SLO with a stable queue.")
            continue
        best = rows.iloc[0]
        span = ""
        if "gpus_lo" in best and pd.notna(best.get("gpus_lo")):
            span = (f" (validation interval: {best['capacity_rps_lo']:.3g}–{best['capacity_rps_hi']:.3g} req/s a "
                    f"replica, {int(best['gpus_lo'])}–" + ("∞" if not math.isfinite(best["gpus_hi"]) else
                                                           f"{int(best['gpus_hi'])}") + " GPUs)")
        lines.append(f"{rate:g} req/s {label}: {int(best['gpus'])} × {best['gpu']} GPUs = {int(best['replicas'])} "
                     f"replicas of {best['layout']} ({best['speculation']}, batch cap {best['batch_size']}), "
                     f"{best['capacity_rps']:.4g} req/s a replica{span}.")
    return lines
