"""Prediction intervals for every figure the planner reports, from out-of-sample residuals.

Each residual is r = log(published / simulated) of one validation row predicted with its
whole source left out (``specgauge validate``; the shipped ``data/residuals.csv``). The
interval of a new figure ŷ is split conformal (Vovk, Gammerman & Shafer 2005; Lei et al.,
JASA 2018), Mondrian by group: with the n residuals of its group, q is the
⌈(n + 1)·level⌉-th smallest |r| and the interval is [ŷ·e^−q, ŷ·e^q]. It covers a new
figure with probability at least ``level`` when the new deployment's residual is
exchangeable with the group's rows. Rows of one source share an engine, a workload and a
measuring habit, so they are not independent; the check of that assumption is
``validate``'s coverage with whole sources held out (``loso_coverage``).

Groups are what the planner knows about a figure (``Group``): a dense or MoE target, a
step model from the datasheet prior or from a fit (``specgauge calibrate``, a published
fit), and a load band of the batch. A group with fewer rows than a finite quantile needs
(9 at 90 %) does not take a tighter group's bound: it takes the wider of its parent
group's (load band dropped, then profile, then kind) and its own largest residual, and
says so in ``Band.reason``.

An acceptance α that nobody measured widens a speculative figure further: its ends move
by the tokens a pass at the ends of the draft kind's α range (``alpha_range``: the α the
validation rows took from published accepted lengths or speed-ups) over the tokens a pass
at the α simulated. A measured α narrows that to the spread the caller gives.

API (all pure; the residual table is read once):

- ``Group(kind, profile, load)``; ``group_of(moe: bool, calibrated: bool, load: float) -> Group``;
  ``load_band(load: float) -> str``.
- ``band(group: Group, level: float = 0.9, residuals: pd.DataFrame | None = None) -> Band``:
  the log half-width ``q`` (inf when no group has enough rows), ``n`` rows, ``sources``,
  ``group_used`` and ``reason``.
- ``interval(value: float, group: Group, level=0.9, factors=(1.0, 1.0)) -> tuple[float, float]``:
  one figure's ends; ``factors`` multiply the lower and upper end (α's spread).
- ``alpha_range(draft_kind: str) -> tuple[float, float]``;
  ``alpha_factors(alpha: float, gamma: int, low: float, high: float) -> tuple[float, float]``.
- ``add_intervals(frame: pd.DataFrame, level=0.9, alpha_measured=False, alpha_spread=None,
  residuals=None) -> pd.DataFrame``: a copy of a ``plan``/``simulate`` result frame with
  ``<metric>_lo`` / ``<metric>_hi`` for each metric of ``METRICS`` it holds, and
  ``interval_group`` / ``interval_note`` columns.
- ``format_interval(value, lo, hi, digits=3) -> str``: ``1.46 [1.21, 1.76]``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from importlib.resources import files

import numpy as np
import pandas as pd

#: The nominal coverage of every interval the planner prints.
LEVEL = 0.9
#: Load bands: a batch of one (latency-bound, fixed costs dominate), a few, many.
LOAD_BANDS = (("1", 1.0), ("2-16", 16.0), ("over 16", math.inf))
#: Figures of a plan/simulate row that get an interval; ``True``: the figure moves with α
#: (a speculative figure), ``-1``: it moves against α (a latency).
METRICS: dict[str, int] = {
    "speedup_vs_no_spec": 1, "tpot_speedup_vs_no_spec": 1,
    "output_throughput": 1, "request_throughput": 1, "total_token_throughput": 1,
    "mean_tpot_ms": -1, "median_tpot_ms": -1, "p99_tpot_ms": -1, "mean_itl_ms": -1,
    "mean_e2el_ms": -1, "p99_e2el_ms": -1, "mean_ttft_ms": 0,
    "no_spec_output_throughput": 0, "no_spec_mean_tpot_ms": 0, "no_spec_request_throughput": 0,
}


@dataclass(frozen=True)
class Group:
    """What the planner knows about a figure: target ``kind`` (dense, moe), step-model
    ``profile`` (prior, calibrated) and ``load`` band (``LOAD_BANDS``); None: any."""

    kind: str | None
    profile: str | None
    load: str | None

    def label(self) -> str:
        parts = [p for p in (self.kind, self.profile and f"{self.profile} profile",
                             self.load and f"batch {self.load}") if p]
        return ", ".join(parts) if parts else "all rows"

    def parent(self) -> "Group | None":
        """The next coarser group: the load band dropped first, then the profile, then the kind."""
        if self.load is not None:
            return Group(self.kind, self.profile, None)
        if self.profile is not None:
            return Group(self.kind, None, None)
        if self.kind is not None:
            return Group(None, None, None)
        return None


@dataclass(frozen=True)
class Band:
    """A group's conformal half-width in log units: the interval is [ŷ·e^−q, ŷ·e^q]."""

    q: float
    n: int
    sources: int
    group: Group
    group_used: Group
    reason: str = ""

    @property
    def half_width(self) -> float:
        """The half-width as a fraction of the figure (e^q − 1), e.g. 0.2 for ±20 %."""
        return math.expm1(self.q)


def load_band(load: float) -> str:
    """The band of a batch (or a rate's mean batch): ``1``, ``2-16`` or ``over 16``."""
    for name, top in LOAD_BANDS:
        if load <= top * 1.0000001:
            return name
    return LOAD_BANDS[-1][0]


def group_of(moe: bool, calibrated: bool, load: float) -> Group:
    return Group("moe" if moe else "dense", "calibrated" if calibrated else "prior", load_band(float(load)))


RESIDUALS = ("planning", "data", "residuals.csv")


@functools.lru_cache(maxsize=1)
def shipped_residuals() -> pd.DataFrame:
    """The residuals ``specgauge validate --write-residuals`` wrote: one row per predicted
    validation row, each predicted with its source left out."""
    path = files("specgauge.reports").joinpath(*RESIDUALS)
    return pd.read_csv(path.open("r", encoding="utf-8"))


def _select(residuals: pd.DataFrame, group: Group) -> pd.DataFrame:
    mask = np.ones(len(residuals), bool)
    for column in ("kind", "profile", "load"):
        value = getattr(group, column)
        if value is not None:
            mask &= (residuals[column].astype(str) == value).to_numpy()
    return residuals[mask]


def needed_rows(level: float = LEVEL) -> int:
    """The fewest residuals with a finite split-conformal quantile: ⌈(n + 1)·level⌉ <= n."""
    return math.ceil(level / (1.0 - level) - 1e-9)


def conformal_q(abs_residuals: np.ndarray, level: float = LEVEL) -> float:
    """The ⌈(n + 1)·level⌉-th smallest |r|; inf when there are too few residuals."""
    values = np.sort(np.abs(np.asarray(abs_residuals, float)))
    k = math.ceil((len(values) + 1) * level - 1e-9)
    return float(values[k - 1]) if k <= len(values) else math.inf


def band(group: Group, level: float = LEVEL, residuals: pd.DataFrame | None = None) -> Band:
    """The group's half-width; a group too small widens to its parent's (never below its own largest residual)."""
    residuals = shipped_residuals() if residuals is None else residuals
    own = _select(residuals, group)
    r = own["residual"].to_numpy(float)
    q = conformal_q(r, level)
    if math.isfinite(q):
        return Band(q, len(r), own["source"].nunique(), group, group)
    parent = group.parent()
    if parent is None:
        return Band(math.inf, len(r), own["source"].nunique(), group, group,
                    f"{len(r)} validation rows in all; a {level:.0%} interval needs {needed_rows(level)}")
    wider = band(parent, level, residuals)
    if not math.isfinite(wider.q):
        return Band(math.inf, len(r), own["source"].nunique(), group, wider.group_used,
                    f"{len(r)} validation rows for {group.label()}, and no wider group has the {needed_rows(level)} "
                    f"a {level:.0%} interval needs: unbounded")
    largest = float(np.max(np.abs(r))) if len(r) else 0.0
    reason = (f"only {len(r)} validation row{'s' if len(r) != 1 else ''} for {group.label()} "
              f"({needed_rows(level)} needed): the wider of the bound of {wider.group_used.label()} and "
              f"this group's largest residual")
    return Band(max(wider.q, largest), len(r), own["source"].nunique(), group, wider.group_used, reason)


def interval(value: float, group: Group, level: float = LEVEL, factors: tuple[float, float] = (1.0, 1.0),
             residuals: pd.DataFrame | None = None) -> tuple[float, float]:
    """One figure's interval: [value·e^−q·factors[0], value·e^q·factors[1]]."""
    q = band(group, level, residuals).q
    if not math.isfinite(q):
        return 0.0, math.inf
    return value * math.exp(-q) * factors[0], value * math.exp(q) * factors[1]


def tokens_per_pass(alpha: float, gamma: int) -> float:
    """Expected tokens a round with i.i.d. acceptance α and γ drafts: (1 − α^(γ+1)) / (1 − α)."""
    if gamma <= 0:
        return 1.0
    if alpha >= 1.0:
        return gamma + 1.0
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def alpha_factors(alpha: float, gamma: int, low: float, high: float) -> tuple[float, float]:
    """How far a speculative figure moves when α moves from ``alpha`` to the ends [low, high]:
    the ratio of tokens a pass (a round's cost barely depends on α, so output throughput
    and speed-up scale with it, TPOT inversely). Never narrower than the figure itself."""
    base = tokens_per_pass(alpha, gamma)
    lo, hi = tokens_per_pass(min(low, alpha), gamma) / base, tokens_per_pass(max(high, alpha), gamma) / base
    return min(lo, 1.0), max(hi, 1.0)


@functools.lru_cache(maxsize=8)
def alpha_range(draft_kind: str) -> tuple[float, float, str]:
    """The α range of a draft kind, from the α the validation rows took from published accepted
    lengths or speed-ups (``residuals.csv``'s ``alpha``), with the named acceptance profiles
    for draft models; (nan, nan, why) when none is known."""
    residuals = shipped_residuals()
    values = residuals.loc[residuals["draft_kind"] == draft_kind, "alpha"].dropna().to_numpy(float).tolist()
    if draft_kind == "model":
        from specgauge.reports.planning.measured_rates import load_profiles

        values += [float(p["alpha"]) for name, p in load_profiles().items()
                   if "alpha" in p and name not in ("seed-six-token", "bigram-draft")]
    if not values:
        return math.nan, math.nan, f"no published acceptance for {draft_kind} drafts"
    return min(values), max(values), f"{draft_kind} α {min(values):.2f}-{max(values):.2f} (published, {len(values)} values)"


def _row_alpha_factors(row: pd.Series, measured: bool, spread: tuple[float, float] | None) -> tuple[float, float, str]:
    gamma = int(row.get("gamma") or 0)
    alpha = row.get("alpha")
    if gamma <= 0 or alpha is None or not np.isfinite(float(alpha)):
        return 1.0, 1.0, ""
    if measured:
        if spread is None:
            return 1.0, 1.0, "α given: no α spread added"
        low, high = spread
        f = alpha_factors(float(alpha), gamma, low, high)
        return f[0], f[1], f"α measured {low:.3g}-{high:.3g}"
    low, high, why = alpha_range(str(row.get("draft_kind") or "model"))
    if not np.isfinite(low):
        return 1.0, 1.0, why
    f = alpha_factors(float(alpha), gamma, low, high)
    return f[0], f[1], f"α a placeholder: {why}"


def row_group(row: pd.Series, profiles: str | None = None) -> Group:
    """A result row's group: MoE from the target profile, calibrated when the step model is a
    fit, load from the mean batch the run held (the batch cap when absent)."""
    from specgauge.simulator.profiles import load_model

    try:
        moe = load_model(str(row["target"]), profiles).is_moe
    except Exception:  # noqa: BLE001 - an unknown target (a user's file gone): the dense rows' bound
        moe = False
    source = str(row.get("step_model_source") or "datasheet prior")
    load = row.get("mean_batch_size")
    if load is None or not np.isfinite(float(load)) or float(load) <= 0:
        load = row.get("batch_size") or 1
    return group_of(moe, not source.startswith("datasheet prior"), max(float(load), 1.0))


def add_intervals(frame: pd.DataFrame, level: float = LEVEL, alpha_measured: bool = False,
                  alpha_spread: tuple[float, float] | None = None, residuals: pd.DataFrame | None = None,
                  profiles: str | None = None) -> pd.DataFrame:
    """``frame`` with ``<metric>_lo``/``<metric>_hi`` beside every metric of ``METRICS`` it holds.

    The group's conformal band, then, for a speculative figure (γ > 0), the α spread: the
    draft kind's published range when α is a placeholder, ``alpha_spread`` (low, high) when
    it was measured (none: no widening). Speed-ups and throughputs move with α, latencies
    against it, baselines not at all."""
    out = frame.copy()
    groups = [row_group(row, profiles) for _, row in out.iterrows()]
    cached = {g: band(g, level, residuals) for g in set(groups)}   # a sweep has few groups and many rows
    bands = [cached[g] for g in groups]
    q = np.array([b.q for b in bands])
    factors = [_row_alpha_factors(row, alpha_measured, alpha_spread) for _, row in out.iterrows()]
    f_lo = np.array([f[0] for f in factors])
    f_hi = np.array([f[1] for f in factors])
    with np.errstate(over="ignore", invalid="ignore"):
        down, up = np.exp(-q), np.exp(q)
    for metric, direction in METRICS.items():
        if metric not in out:
            continue
        value = pd.to_numeric(out[metric], errors="coerce").to_numpy(float)
        lo_f = f_lo if direction > 0 else (1.0 / f_hi if direction < 0 else 1.0)
        hi_f = f_hi if direction > 0 else (1.0 / f_lo if direction < 0 else 1.0)
        out[f"{metric}_lo"] = value * down * lo_f
        out[f"{metric}_hi"] = value * up * hi_f
    out["interval_group"] = [b.group_used.label() for b in bands]
    out["interval_note"] = [
        "; ".join(p for p in (f"{level:.0%} interval ±{b.half_width:.0%} ({b.n} rows, {b.sources} sources)"
                              if math.isfinite(b.q) else f"{level:.0%} interval unbounded",
                              b.reason, f[2]) if p) for b, f in zip(bands, factors)]
    return out


def format_interval(value: float, lo: float, hi: float, digits: int = 3) -> str:
    """``1.46 [1.21, 1.76]``; an unbounded end is ``inf``."""
    def fmt(v: float) -> str:
        return "inf" if not math.isfinite(v) else f"{v:.{digits}g}"
    return f"{fmt(value)} [{fmt(lo)}, {fmt(hi)}]"


def coverage(frame: pd.DataFrame, level: float = LEVEL) -> pd.DataFrame:
    """Leave-one-source-out coverage of the intervals on validation residuals: each source's rows
    against the band computed from the other sources' rows alone (``band`` on the rest).
    Returns the rows with ``q`` and ``covered``."""
    out = []
    for source, rows in frame.groupby("source", sort=False):
        rest = frame[frame["source"] != source]
        for _, row in rows.iterrows():
            b = band(Group(row["kind"], row["profile"], row["load"]), level, rest)
            out.append({**row.to_dict(), "q": b.q, "covered": bool(abs(row["residual"]) <= b.q)})
    return pd.DataFrame(out)
