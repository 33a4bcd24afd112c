"""How many GPUs for a request rate: each configuration's capacity, found by search, and the nodes it needs.

A configuration's capacity is the highest Poisson request rate at which its run kept up
(``judge``: it served at least 98 % of the offered rate and its wait did not grow) and
meets every SLO bound. It is found by bisection on the rate, not read off a grid: the
saturated run (the batch kept full) bounds it from above, the bracket is halved until its
ends are within ``rel_tol`` of each other, and the lower end, a rate that was run and
passed, is the answer.

Each seed is its own search (feasibility is monotone in the rate for one seed: the Poisson
arrivals at every rate are the same draws scaled, so a faster rate is the same run
compressed in time); ``merge_seeds`` makes one capacity of them, the mean, with the seeds'
spread inside its interval. ``Sizing`` turns a target rate into replicas (the rate with its
headroom over the capacity, at least one, plus spares) and whole nodes; ``sizing_table``
puts the configurations cheapest first within each value of the world's swept options
(``WORLD_FIELDS``: α, lengths, GPU, target), and ``sizing_lines`` answers with and without
speculation, compared on the rounded counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Iterator, Sequence

import numpy as np
import pandas as pd

from specgauge.simulator import SimulationConfig, simulate
from specgauge.simulator.metrics import STABLE_SERVED_FRACTION

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
        return (f"gamma={c.gamma} tp={c.tp} dp={c.dp} ep={c.ep} batch_size={c.batch_size} draft={c.draft} gpu={c.gpu} "
                f"acceptance={c.acceptance.label()} seed={c.seed}")


@dataclass(frozen=True)
class Probe:
    """One run of the search: its rate, whether it passed, and why not."""

    qps: float
    ok: bool
    why: str


def judge(row: dict[str, Any], slo: SLO) -> tuple[bool, str]:
    """A run passes when it kept up and meets every bound; else the first reason it does not.

    Kept up: it served at least 98 % of the offered rate (``served_fraction``) and its wait did
    not grow by more than 0.02 s a second (``queue_growth``), read strictly here (the run's own
    ``stable`` forgives a shortfall inside a short run's bursts), so that the ``stable`` of a
    capacity's row means what it says."""
    served, growth = float(row.get("served_fraction", math.nan)), float(row.get("queue_growth", math.nan))
    short = math.isfinite(served) and served < STABLE_SERVED_FRACTION
    growing = math.isfinite(growth) and growth > 1.0 - STABLE_SERVED_FRACTION
    if short or growing or not bool(row.get("stable", True)):
        return False, (f"unstable (served {served:.1%} of the offered rate, queue growing {growth:.2g} s/s)")
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


def add_capacity_intervals(frame: pd.DataFrame, profiles: str | None = None, alpha_measured: bool = False,
                           own: pd.DataFrame | None = None) -> pd.DataFrame:
    """``capacity_rps_lo``/``_hi`` from the validation's interval of the run's request rate
    (``reports.planning.intervals``), where it exists; the frame unchanged otherwise. The
    validation's only published capacities are brackets (a sweep stable at one rate, overloaded
    at the next: ``folds.overload_check``), two from one source, too few for a pool of their own,
    so the note says whose residuals the interval borrows;
    ``own``: a user's residuals (``plan --validation``), as ``intervals.add_intervals`` takes them."""
    try:
        from . import intervals
    except ImportError:  # pragma: no cover - the intervals module ships with the planner
        return frame
    rated = frame[frame["capacity_rps"].notna()]
    if not len(rated) or "request_throughput" not in frame:
        return frame
    with_bands = intervals.add_intervals(rated, alpha_measured=alpha_measured, profiles=profiles, own=own)
    out = frame.copy()
    scale_lo = with_bands["request_throughput_lo"] / with_bands["request_throughput"]
    scale_hi = with_bands["request_throughput_hi"] / with_bands["request_throughput"]
    out.loc[rated.index, "capacity_rps_lo"] = rated["capacity_rps"] * scale_lo
    out.loc[rated.index, "capacity_rps_hi"] = rated["capacity_rps"] * scale_hi
    out.loc[rated.index, "capacity_interval_note"] = ("published capacity brackets too few for a pool (2, one source): "
                                                      "borrowed from the interval of a simulated request rate; " + with_bands["interval_note"].astype(str))
    return out


# --------------------------------------------------------------------------- run length, seeds, whole nodes

#: requests a capacity run holds at least when no bound is a p99: the stability test reads the queue from
#: the first decile (or once the engine has filled) to the end, so the count's drift shows above its bursts
MIN_REQUESTS_STABLE = 200
#: requests a capacity run holds at least under a p99 bound: 10 of them beyond the 99th percentile
MIN_REQUESTS_P99 = 1000


def min_requests(slo: SLO) -> tuple[int, str]:
    """The fewest requests a run may hold for the decision ``slo`` asks of it, and why."""
    if any(o.statistic == "p99" for o in slo.objectives):
        return MIN_REQUESTS_P99, (f"a p99 bound needs {MIN_REQUESTS_P99:,} requests a run (10 beyond the 99th "
                                  "percentile)")
    return MIN_REQUESTS_STABLE, (f"a stable queue is observed over at least {MIN_REQUESTS_STABLE} requests a run "
                                 "(a shorter run's bursts hide its drift)")


#: GPUs a node for the shipped datacenter parts: HGX and OAM boards of 8, and 8-way PCIe servers for the
#: L40S; ``--gpus-per-node``'s default for them (any other GPU counts single GPUs)
NODE_GPUS = {"a100-80gb": 8, "h100-sxm": 8, "h200": 8, "h20": 8, "b200": 8, "mi300x": 8, "mi355x": 8, "l40s": 8}
#: more GPUs than this for one answer is beyond the largest published deployments: a unit error, most likely
MOST_GPUS = 100_000
#: fewer requests a second than this (one an hour) is a unit error, most likely, or no load at all
LEAST_RATE = 1.0 / 3600.0


@dataclass(frozen=True)
class Sizing:
    """How a request rate becomes whole nodes.

    ``headroom``: the fraction of the rate kept free for failures and for peaks above the
    average (the replicas serve ``rate × (1 + headroom)``); ``spare``: replicas added
    beyond that (N+k); ``gpus_per_node``: the node the replicas are bought in (None: the
    GPU's own, ``NODE_GPUS``, else 1).
    """

    rate: float
    headroom: float = 0.0
    spare: int = 0
    gpus_per_node: int | None = None

    @property
    def sized_rate(self) -> float:
        return self.rate * (1.0 + self.headroom)

    def node_gpus(self, gpu: str) -> int:
        return self.gpus_per_node or NODE_GPUS.get(str(gpu), 1)

    def replicas(self, capacity: float) -> float:
        """⌈rate × (1 + headroom) ÷ capacity⌉, at least one, plus the spares; NaN when no rate meets the SLO."""
        if not (capacity > 0):
            return float("nan")
        if not math.isfinite(capacity):
            return float(1 + self.spare)
        return float(max(1, math.ceil(self.sized_rate / capacity - 1e-9)) + self.spare)

    @staticmethod
    def nodes(replicas: float, per_replica: int, node: int) -> float:
        """Whole nodes for ``replicas`` of ``per_replica`` GPUs: as many replicas a node as fit, or a
        replica spanning several nodes."""
        if not math.isfinite(replicas):
            return replicas
        if per_replica <= node:
            return float(math.ceil(replicas / (node // per_replica)))
        return float(replicas * math.ceil(per_replica / node))


def replicas_for(rate: float, capacity: float) -> float:
    """⌈rate ÷ capacity⌉ (at least one replica), NaN when the configuration meets the SLO at no rate."""
    return Sizing(rate).replicas(capacity)


def configuration_columns(frame: pd.DataFrame) -> list[str]:
    """The columns that name a configuration apart from its seed (and the rate the search found)."""
    return [c for c in SimulationConfig().columns() if c in frame and c not in ("seed", "qps")]


def merge_seeds(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration from its runs over several seeds: the mean capacity, the seeds'
    lowest and highest (``capacity_rps_seed_min``/``_max``), and an interval that spans every
    seed's own (``capacity_rps_lo``/``_hi``: the validation's band around each seed's capacity, or
    the seeds' spread alone where there is no band). A seed that meets the SLO at no rate makes
    the configuration's capacity NaN, and its ``capacity_limit`` says which."""
    keys = configuration_columns(frame)
    rows = []
    for _, runs in frame.groupby(keys, dropna=False, sort=False):
        caps = runs["capacity_rps"].to_numpy(float)
        row = {k: runs.iloc[0][k] for k in keys}
        row["gpus_per_replica"] = int(runs.iloc[0]["gpus_per_replica"])
        row["seeds"] = ",".join(str(int(s)) for s in runs["seed"])
        worst = runs.iloc[int(np.nanargmin(np.where(np.isfinite(caps), caps, -np.inf)))]
        row["capacity_limit"] = (f"seed {int(worst['seed'])}: " if len(runs) > 1 else "") + str(worst["capacity_limit"])
        if np.isfinite(caps).all():
            lo = runs["capacity_rps_lo"].to_numpy(float) if "capacity_rps_lo" in runs else caps
            hi = runs["capacity_rps_hi"].to_numpy(float) if "capacity_rps_hi" in runs else caps
            row.update(capacity_rps=float(caps.mean()), capacity_rps_lo=float(np.nanmin(np.minimum(lo, caps))),
                       capacity_rps_hi=float(np.nanmax(np.maximum(hi, caps))),
                       capacity_rps_seed_min=float(caps.min()), capacity_rps_seed_max=float(caps.max()))
        else:
            row.update(capacity_rps=math.nan, capacity_rps_lo=math.nan, capacity_rps_hi=math.nan,
                       capacity_rps_seed_min=math.nan, capacity_rps_seed_max=math.nan)
        if "capacity_interval_note" in runs:
            row["capacity_interval_note"] = runs.iloc[0]["capacity_interval_note"]
        rows.append(row)
    return pd.DataFrame(rows)


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


def _counts(sizing: Sizing, capacity: float, per: int, node: int) -> tuple[float, float, float, float]:
    """(replicas, GPUs they hold, whole nodes, the GPUs of those nodes) at one capacity."""
    replicas = sizing.replicas(capacity)
    nodes = Sizing.nodes(replicas, per, node)
    return replicas, replicas * per, nodes, nodes * node


def rounding_edge(sizing: Sizing, low: float, high: float, per: int, node: int) -> str:
    """Words when the seeds' lowest and highest capacities give different counts: the answer sits
    within run-to-run noise of a rounding edge; "" when they agree (or one seed ran)."""
    if not (math.isfinite(low) and math.isfinite(high)) or low == high:
        return ""
    few, many = _counts(sizing, high, per, node), _counts(sizing, low, per, node)
    if few[0] == many[0]:
        return ""
    exact = f"{sizing.sized_rate:.4g} ÷ {low:.4g}–{high:.4g} req/s = {sizing.sized_rate / high:.2f}–" \
            f"{sizing.sized_rate / low:.2f} replicas"
    nodes = f", {int(few[2])} or {int(many[2])} nodes" if node > 1 and few[2] != many[2] else ""
    return (f"{exact} across the seeds: within run-to-run noise of a rounding edge ({int(few[0])} or "
            f"{int(many[0])} replicas{nodes})")


def sizing_table(frame: pd.DataFrame, sizing: Sizing | float, world: tuple[str, ...] = ()) -> pd.DataFrame:
    """Per configuration (seeds merged, ``merge_seeds``): its capacity a replica with its interval,
    and the replicas, GPUs and whole nodes ``sizing`` asks for at the capacity and at each end of
    its interval (``_lo``: the fewest, from ``capacity_rps_hi``; ``_hi``: the most). Sorted per
    ``world`` value (the swept options that describe the world, not a choice: α, lengths), then
    cheapest first: fewest GPUs in whole nodes, fewest GPUs, highest capacity."""
    sizing = sizing if isinstance(sizing, Sizing) else Sizing(float(sizing))
    if "seeds" not in frame:
        frame = merge_seeds(frame.assign(seed=frame["seed"] if "seed" in frame else 0))
    rows = []
    for _, r in frame.iterrows():
        cap, per, node = float(r["capacity_rps"]), int(r["gpus_per_replica"]), sizing.node_gpus(r["gpu"])
        out = {column: r[column] for column in world}
        out.update(speculation=f"{r['draft']} γ={int(r['gamma'])}" if int(r["gamma"]) > 0 else "none",
                   layout=layout(r), gpu=r["gpu"], batch_size=int(r["batch_size"]),
                   acceptance=r["acceptance"] if int(r["gamma"]) > 0 else "", seeds=r["seeds"])
        out.update({column: r[column] for column in world})   # a γ 0 row belongs to its world's α too
        lo, hi = float(r.get("capacity_rps_lo", cap)), float(r.get("capacity_rps_hi", cap))
        smin, smax = float(r.get("capacity_rps_seed_min", cap)), float(r.get("capacity_rps_seed_max", cap))
        out.update(capacity_rps=cap, capacity_rps_lo=lo, capacity_rps_hi=hi, capacity_rps_seed_min=smin,
                   capacity_rps_seed_max=smax)
        point, fewest, most = _counts(sizing, cap, per, node), _counts(sizing, hi, per, node), _counts(sizing, lo, per, node)
        for i, name in enumerate(("replicas", "gpus", "nodes", "node_gpus")):
            out[name], out[f"{name}_lo"], out[f"{name}_hi"] = point[i], fewest[i], most[i]
            if name == "replicas":
                out["gpus_per_replica"] = per
            if name == "gpus":
                out["gpus_per_node"] = node
        out["seed_rounding_edge"] = rounding_edge(sizing, smin, smax, per, node)
        out["limit"] = r["capacity_limit"]
        if "capacity_interval_note" in r:
            out["interval_note"] = r["capacity_interval_note"]
        rows.append(out)
    table = pd.DataFrame(rows)
    order = [*world, "node_gpus", "gpus", "capacity_rps"]
    return table.sort_values(order, ascending=[True] * (len(order) - 1) + [False], na_position="last",
                             kind="stable").reset_index(drop=True)


def _world_label(values: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in values.items())


def _gpus_text(row: pd.Series, suffix: str = "") -> str:
    value = float(row[f"node_gpus{suffix}"])
    return "∞" if not math.isfinite(value) else f"{int(value)}"


def _n(count: float, noun: str) -> str:
    """``1 node``, ``12,077 nodes``: a whole count with its noun."""
    return f"{int(count):,} {noun}{'' if int(count) == 1 else 's'}"


def _answer(row: pd.Series, sizing: Sizing, label: str, prefix: str) -> list[str]:
    """The answer for one side (with or without speculation): the count, how it was rounded, its interval
    and the seeds' spread."""
    node, per = int(row["gpus_per_node"]), int(row["gpus_per_replica"])
    whole = (f"{_n(row['nodes'], 'node')} of {node} × {row['gpu']} = {_n(row['node_gpus'], 'GPU')}"
             if node > 1 else f"{int(row['node_gpus']):,} × {row['gpu']} GPUs")
    seeds = row["seeds"].split(",")
    spread = (f"seeds {row['seeds']}: {row['capacity_rps_seed_min']:.4g}–{row['capacity_rps_seed_max']:.4g}"
              if len(seeds) > 1 else f"one seed ({seeds[0]}): run-to-run spread not measured, --seed 0,1,2 measures it")
    lines = [f"{prefix}{sizing.rate:g} req/s {label}: {whole}, {_n(row['replicas'], 'replica')} of {row['layout']} "
             f"({row['speculation']}, batch cap {row['batch_size']}); {row['capacity_rps']:.4g} req/s a replica "
             f"[{row['capacity_rps_lo']:.3g}, {row['capacity_rps_hi']:.3g}] ({spread}), "
             + (f"{_gpus_text(row, '_lo')} GPUs" if _gpus_text(row, '_lo') == _gpus_text(row, '_hi') else
                f"{_gpus_text(row, '_lo')}–{_gpus_text(row, '_hi')} GPUs") + " across that interval."]
    steps = f"{sizing.rate:g} req/s" + (f" × {1 + sizing.headroom:g} headroom = {sizing.sized_rate:.4g}"
                                        if sizing.headroom else "")
    ratio = sizing.sized_rate / float(row["capacity_rps"])
    need = int(row["replicas"]) - sizing.spare
    steps += f" ÷ {row['capacity_rps']:.4g} = {ratio:,.2f} → {_n(need, 'replica')}"
    if ratio < 1:
        steps += " (one replica serves more than the rate)"
    if sizing.spare:
        steps += f" + {sizing.spare} spare (N+{sizing.spare}) = {int(row['replicas']):,}"
    steps += f" × {_n(per, 'GPU')} = {_n(row['gpus'], 'GPU')}"
    if node > 1:
        steps += (f", rounded up to whole {node}-GPU nodes: {_n(row['nodes'], 'node')}, {_n(row['node_gpus'], 'GPU')}"
                  + (f" ({int(row['node_gpus'] - row['gpus']):,} idle)" if row["node_gpus"] > row["gpus"] else ""))
    elif sizing.gpus_per_node is None:
        steps += f" ({row['gpu']} has no known node size: single GPUs; --gpus-per-node N rounds to nodes)"
    lines.append(f"  rounded: {steps}.")
    if row["seed_rounding_edge"]:
        lines.append(f"  note: {row['seed_rounding_edge']}.")
    return lines


def answers(table: pd.DataFrame, world: Sequence[str] = ()) -> Iterator[tuple[str, str, pd.DataFrame, pd.Series | None]]:
    """The sizing table's answers: per value of the world's swept options (its label, ``acceptance
    iid(0.6)``, or empty) and per side (``with speculation``, ``without speculation``, where the side
    was swept), the side's rows and its cheapest configuration that meets the SLO (None: none does)."""
    groups = table.groupby(list(world), sort=False, dropna=False) if world else [((), table)]
    for values, rows in groups:
        values = values if isinstance(values, tuple) else (values,)
        scope = _world_label(dict(zip(world, values)))
        for label, side in (("with speculation", rows[rows["speculation"] != "none"]),
                            ("without speculation", rows[rows["speculation"] == "none"])):
            if len(side):
                feasible = side[side["node_gpus"].notna()]
                yield scope, label, side, feasible.iloc[0] if len(feasible) else None


def sizing_lines(table: pd.DataFrame, sizing: Sizing | float, world: tuple[str, ...] = ()) -> list[str]:
    """The answer in words, per value of the world's swept options: the cheapest configuration with and
    without speculation in whole nodes, how each count was rounded, and the two compared on the rounded
    counts."""
    sizing = sizing if isinstance(sizing, Sizing) else Sizing(float(sizing))
    lines: list[str] = []
    best: dict[str, dict[str, pd.Series]] = {}
    for scope, label, side, row in answers(table, world):
        prefix = f"{scope}: " if scope else ""
        if row is None:
            lines.append(f"{prefix}{sizing.rate:g} req/s {label}: no configuration meets the SLO with a stable "
                         f"queue ({side.iloc[0]['limit']}).")
            continue
        lines += _answer(row, sizing, label, prefix)
        sides = best.setdefault(scope, {})
        sides[label] = row
        if len(sides) == 2:
            lines.append(prefix + compare_rounded(sides["with speculation"], sides["without speculation"]))
    return lines


def compare_rounded(spec: pd.Series, base: pd.Series) -> str:
    """Speculation against none on the counts a team buys: whole nodes (GPUs where a node is one GPU)."""
    node = int(spec["gpus_per_node"])
    unit = f"{node}-GPU nodes" if node > 1 and node == int(base["gpus_per_node"]) else "GPUs"
    saved = float(base["node_gpus"] - spec["node_gpus"])
    exact = float(base["gpus"] - spec["gpus"])
    counts = f"{int(spec['node_gpus']):,} against {int(base['node_gpus']):,} GPUs"
    if unit != "GPUs":
        counts = f"{int(spec['nodes']):,} against {_n(base['nodes'], 'node')}, " + counts
    if saved > 0:
        return f"speculation saves {_n(saved, 'GPU')} in whole {unit} ({counts})."
    if saved == 0:
        return (f"speculation saves nothing once rounded to whole {unit} ({counts}); "
                + (f"before rounding it saved {_n(exact, 'GPU')}." if exact > 0 else "nor before rounding."))
    return f"speculation costs {_n(-saved, 'more GPU')} in whole {unit} ({counts})."


def rate_notes(table: pd.DataFrame, sizing: Sizing) -> list[str]:
    """One-line notes on a rate no deployment is sized for: below one request an hour, or an answer
    beyond the largest deployments (a unit slip, most likely)."""
    notes = []
    if sizing.rate < LEAST_RATE:
        notes.append(f"note: --rate {sizing.rate:g} req/s is fewer than one request an hour; one replica of any "
                     "configuration serves it (--rate is in requests a second)")
    most = pd.to_numeric(table.get("node_gpus"), errors="coerce").replace(math.inf, np.nan).max()
    if np.isfinite(most) and most > MOST_GPUS:
        notes.append(f"note: {int(most):,} GPUs is more than the largest deployments hold (about {MOST_GPUS:,}); "
                     "--rate is in requests a second, for the whole fleet")
    return notes


#: the configuration fields that describe the world the deployment serves rather than a choice its team makes:
#: swept, each value gets its own answer (a GPU count for α 0.6 and one for α 0.8), never the most favourable
WORLD_FIELDS = ("gpu", "target", "acceptance", "tree_acceptance", "empty_proposals", "draft_cost_ratio", "arrival",
                "arrival_cv", "requests", "prompt_len", "output_len", "length_dist", "trace")
