"""Prediction intervals for every figure the planner reports, from out-of-sample residuals.

Each residual is r = log(published / simulated) of one validation row predicted out of sample
(``specgauge validate``; the shipped ``data/residuals.csv``): a published row with its whole
source left out, or a point of a published curve that the user-runs protocol predicted from
a few of the curve's other runs, its source left out of every shipped constant. The interval
of a new figure ŷ is split conformal (Vovk, Gammerman & Shafer 2005; Lei et al., JASA 2018),
Mondrian by pool: with the n residuals of its pool, q is the ⌈(n + 1)·level⌉-th smallest |r|
and the interval is [ŷ·e^−q, ŷ·e^q]. It covers a new figure with probability at least
``level`` when the new deployment's residual is exchangeable with the pool's. Rows of one
source share an engine, a workload and a measuring habit, so they are not independent; the
check of that assumption is ``validate``'s coverage with whole sources held out.

Pools (``Group``) are what the planner knows about a figure:

- ``figure``: a ratio of two runs on one deployment (a speed-up: ``ratio``), an absolute
  figure (mean TPOT, throughput, latency: ``absolute``) or a tail (a 99th percentile:
  ``tail``). A ratio cancels most of what the step model gets wrong about an engine; an
  absolute figure carries all of it; a tail adds what a fixed-length simulation leaves out
  (length spread, scheduling). No figure's interval takes another kind's residuals.
- ``profile``, what the user gave: ``prior`` (the datasheet prior and the shipped
  constants; with or without a measured acceptance, which is α's own term below),
  ``calibrated`` (a step model fitted on their own runs without speculation: ``specgauge
  calibrate``, a published fit), ``runs`` (those runs and one speculative run with its
  acceptance: the user-runs protocol).
- ``kind`` (a dense or MoE target) and the ``load`` band of the batch.

A pool with fewer rows than a finite quantile needs (9 at 90 %) does not take a tighter
pool's bound: it takes the widest of its parent pool's (the load band dropped, then the
kind, then the profile stepped down to what less knowledge gives, never the figure), its own
largest residual and, where its profile has too few rows of its kind at any load, the pool
of the same kind and load one profile down (knowing more never borrows a narrower band than
knowing less), and says so in ``Band.reason``. Residuals whose α was borrowed from
another source are left out of every pool: α's uncertainty is not the step model's.

α is its own term, moved through the simulator's law of tokens a round: a speculative
figure's ends move by the tokens a pass at the ends of α's range over the tokens a pass at
the α simulated (speed-ups and throughputs with it, latencies against it). The range is the
draft kind's published one while α is a placeholder (``alpha_range``), the measured spread
once it is measured (``alpha_spread``; none given: no widening).

Every interval then stays inside what the deployment can do (``hard_bounds``): a speed-up
never above γ + 1, nor at batch 1 above what the draft's cost allows, (γ + 1) / (1 + γ·c);
a TPOT never below the time to read the target's active weights at the GPUs' peak bandwidth,
shared by the γ + 1 tokens a round can emit; a figure exact by construction (γ 0's speed-up,
1 against itself) has no interval: lo = hi = the value.

API (all pure; the residual table is read once):

- ``Group(figure, profile, kind, load)``; ``group_of(...)``; ``load_band(load) -> str``.
- ``band(group, level=0.9, residuals=None) -> Band``.
- ``add_intervals(frame, level=0.9, alpha_measured=False, alpha_spread=None, residuals=None,
  profiles=None) -> pd.DataFrame``: a copy of a ``plan``/``simulate`` result frame with
  ``<metric>_lo`` / ``<metric>_hi`` for each metric of ``METRICS`` it holds, and
  ``interval_group`` / ``interval_note`` columns.
- ``alpha_range(draft_kind)``, ``alpha_factors(alpha, gamma, low, high)``, ``tokens_per_pass``.
- ``format_interval(value, lo, hi, digits=3) -> str``: ``1.46 [1.21, 1.76]``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from importlib.resources import files

import numpy as np
import pandas as pd

#: The nominal coverage of every interval the planner prints.
LEVEL = 0.9
#: Load bands: a batch of one (latency-bound, fixed costs dominate), a few, many.
LOAD_BANDS = (("1", 1.0), ("2-16", 16.0), ("over 16", math.inf))
#: Step models the user did not calibrate: the datasheet prior and the fits specgauge ships
#: (another source's deployment and engine, as far from the user's as the prior).
SHIPPED_STEPS = ("datasheet prior", "published fit")
#: What the user gave the planner, from least to most (a pool too small steps down this list).
PROFILES = ("prior", "calibrated", "runs")
#: In words, for notes and the docs.
PROFILE_WORDS = {"prior": "the datasheet prior", "calibrated": "a step model calibrated on own runs",
                 "runs": "own runs and one speculative run"}
#: Figures of a plan/simulate row that get an interval, with (figure kind, how they move with α:
#: 1 with it, -1 against it, 0 not at all).
METRICS: dict[str, tuple[str, int]] = {
    "speedup_vs_no_spec": ("ratio", 1), "tpot_speedup_vs_no_spec": ("ratio", 1),
    "output_throughput": ("absolute", 1), "request_throughput": ("absolute", 1),
    "total_token_throughput": ("absolute", 1),
    "mean_tpot_ms": ("absolute", -1), "median_tpot_ms": ("absolute", -1), "p99_tpot_ms": ("tail", -1),
    "mean_itl_ms": ("absolute", -1), "mean_e2el_ms": ("absolute", -1), "p99_e2el_ms": ("tail", -1),
    "mean_ttft_ms": ("absolute", 0), "p99_ttft_ms": ("tail", 0),
    "no_spec_output_throughput": ("absolute", 0), "no_spec_mean_tpot_ms": ("absolute", 0),
    "no_spec_request_throughput": ("absolute", 0),
}
#: The engine is not priced apart: one engine's difference is shown by one source alone
#: (TensorRT-LLM's DeepSeek step, [9]), so vLLM, SGLang and TensorRT-LLM rows share every pool.
ENGINE_NOTE = "engine not priced apart (vLLM, SGLang and TensorRT-LLM runs share the pools)"
#: Speed-ups (exact at γ 0, capped by γ + 1) and TPOTs (floored by the weights' read time).
SPEEDUPS = ("speedup_vs_no_spec", "tpot_speedup_vs_no_spec")
TPOTS = ("mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms")
NO_SPEC_TPOTS = ("no_spec_mean_tpot_ms",)


@dataclass(frozen=True)
class Group:
    """A residual pool: ``figure`` (ratio, absolute), ``profile`` (``PROFILES``: what the user gave),
    target ``kind`` (dense, moe) and ``load`` band (``LOAD_BANDS``); None: any."""

    figure: str
    profile: str | None
    kind: str | None
    load: str | None

    def label(self) -> str:
        parts = [FIGURE_WORDS.get(self.figure, self.figure)]
        parts += [p for p in (self.profile and f"{self.profile} profile", self.kind,
                              self.load and f"batch {self.load}") if p]
        return ", ".join(parts)

    def parent(self) -> "Group | None":
        """The next coarser pool: the load band dropped first, then the kind, then the profile
        stepped down to what less knowledge gives; never the figure."""
        if self.load is not None:
            return Group(self.figure, self.profile, self.kind, None)
        if self.kind is not None:
            return Group(self.figure, self.profile, None, None)
        if self.profile is not None:
            i = PROFILES.index(self.profile) if self.profile in PROFILES else 0
            return Group(self.figure, PROFILES[i - 1] if i > 0 else None, None, None)
        return None

    def less_known(self) -> "Group | None":
        """The same figure, kind and load with the profile one step down (``runs`` → ``calibrated``
        → ``prior``): a pool whose profile has too few rows of its kind is never narrower."""
        if self.profile in PROFILES[1:]:
            return Group(self.figure, PROFILES[PROFILES.index(self.profile) - 1], self.kind, self.load)
        return None


@dataclass(frozen=True)
class Band:
    """A pool's conformal half-width in log units: the interval is [ŷ·e^−q, ŷ·e^q]."""

    q: float
    n: int          # rows and sources of the pool used (``group_used``)
    sources: int
    group: Group
    group_used: Group
    reason: str = ""
    origin: str = "shipped"     # whose residuals: the shipped validation's, or "yours" (plan --validation)

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


#: The figure kinds, each its own pool: ratios of two runs, absolute means and rates, tails (p99).
FIGURES = ("ratio", "absolute", "tail")
FIGURE_WORDS = {"ratio": "speed-ups", "absolute": "absolute figures", "tail": "p99 figures"}


def figure_of(metric_or_measure: str) -> str:
    """``ratio`` for a speed-up or another ratio of two runs, ``tail`` for a 99th percentile,
    ``absolute`` otherwise (a mean TPOT, a throughput, a latency)."""
    if metric_or_measure in METRICS:
        return METRICS[metric_or_measure][0]
    if metric_or_measure in ("speedup", "decode_speedup", "throughput_ratio"):
        return "ratio"
    return "tail" if metric_or_measure.startswith("p99_") else "absolute"


def profile_of(calibrated: bool, alpha_measured: bool) -> str:
    """What the user gave, as a pool names it: a calibrated step model with a measured acceptance
    is the user-runs protocol's ``runs``; a measured acceptance alone changes only α's term."""
    return ("runs" if alpha_measured else "calibrated") if calibrated else "prior"


def group_of(figure: str, profile: str, moe: bool, load: float) -> Group:
    return Group(figure, profile, "moe" if moe else "dense", load_band(float(load)))


RESIDUALS = ("planning", "data", "residuals.csv")


@functools.lru_cache(maxsize=1)
def shipped_residuals() -> pd.DataFrame:
    """The residuals ``specgauge validate --write-residuals`` wrote: one row per figure predicted
    out of sample (a published row with its source left out, a user-runs point)."""
    path = files("specgauge.reports").joinpath(*RESIDUALS)
    return pd.read_csv(path.open("r", encoding="utf-8"))


def pool_rows(residuals: pd.DataFrame) -> pd.DataFrame:
    """The rows a pool may use: every residual but those whose α was borrowed from another source."""
    if "alpha_from" not in residuals:
        return residuals
    return residuals[residuals["alpha_from"].astype(str) != "other"]


def _select(residuals: pd.DataFrame, group: Group) -> pd.DataFrame:
    mask = np.ones(len(residuals), bool)
    for column in ("figure", "profile", "kind", "load"):
        value = getattr(group, column)
        if value is not None and column in residuals:
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
    """The pool's half-width; a pool too small widens to its parent's (never below its own largest residual)."""
    residuals = pool_rows(shipped_residuals() if residuals is None else residuals)
    return _band(group, level, residuals)


def _band(group: Group, level: float, residuals: pd.DataFrame) -> Band:
    own = _select(residuals, group)
    r = own["residual"].to_numpy(float)
    q = conformal_q(r, level)
    if math.isfinite(q):
        return Band(q, len(r), own["source"].nunique(), group, group)
    parent = group.parent()
    if parent is None:
        return Band(math.inf, len(r), own["source"].nunique(), group, group,
                    f"{len(r)} validation rows of {group.label()}; a {level:.0%} interval needs {needed_rows(level)}")
    wider = _band(parent, level, residuals)
    lower = group.less_known()
    same_kind = Group(group.figure, group.profile, group.kind, None)
    if lower is not None and lower != parent and len(_select(residuals, same_kind)) < needed_rows(level):
        # no evidence at this profile for this kind: never a narrower band than knowing less gives
        alternative = _band(lower, level, residuals)
        if alternative.q > wider.q:
            wider = alternative
    if not math.isfinite(wider.q):
        return Band(math.inf, len(r), own["source"].nunique(), group, wider.group_used,
                    f"{len(r)} validation rows for {group.label()}, and no wider pool has the {needed_rows(level)} "
                    f"a {level:.0%} interval needs: unbounded")
    largest = float(np.max(np.abs(r))) if len(r) else 0.0
    reason = (f"only {len(r)} validation row{'s' if len(r) != 1 else ''} for {group.label()} "
              f"({needed_rows(level)} needed): the wider of the bound of {wider.group_used.label()} and "
              f"this pool's largest residual")
    return Band(max(wider.q, largest), wider.n, wider.sources, group, wider.group_used, reason)


def interval(value: float, group: Group, level: float = LEVEL, factors: tuple[float, float] = (1.0, 1.0),
             residuals: pd.DataFrame | None = None) -> tuple[float, float]:
    """One figure's interval before the hard bounds: [value·e^−q·factors[0], value·e^q·factors[1]]."""
    q = band(group, level, residuals).q
    if not math.isfinite(q):
        return 0.0, math.inf
    return value * math.exp(-q) * factors[0], value * math.exp(q) * factors[1]


# ----------------------------------------------------------------------------- α's own term


def tokens_per_pass(alpha: float, gamma: int) -> float:
    """Expected tokens a round with i.i.d. acceptance α and γ drafts: (1 − α^(γ+1)) / (1 − α)."""
    from specgauge.laws import tokens_per_pass as law

    return 1.0 if gamma <= 0 else float(law(min(max(alpha, 0.0), 1.0), gamma))


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


# ----------------------------------------------------------------------------- what the deployment allows


@functools.lru_cache(maxsize=64)
def weight_read_s(target: str, gpu: str, gpus: int, profiles: str | None = None) -> float:
    """The time to read the weights one token multiplies (a MoE target: its active experts) at the
    GPUs' peak bandwidth, shared by the ``gpus`` of a replica: no step can be faster (nan when the
    profiles do not know the deployment)."""
    from specgauge.simulator.profiles import load_gpu, load_model

    try:
        model, device = load_model(target, profiles), load_gpu(gpu, profiles)
    except Exception:  # noqa: BLE001 - a user's profile file gone: no floor rather than a wrong one
        return math.nan
    return model.linear_params * model.dtype_bytes / (max(gpus, 1) * device.bandwidth_tb_s * 1e12)


def hard_bounds(row: pd.Series, profiles: str | None = None) -> dict[str, tuple[float, float]]:
    """Per metric, the (lowest, highest) value the deployment allows: a speed-up at most γ + 1 and,
    at batch 1, at most (γ + 1) / (1 + γ·c) with c the draft's cost ratio; a TPOT at least the
    weights' read time over the γ + 1 tokens a round can emit."""
    gamma = int(row.get("gamma") or 0)
    out: dict[str, tuple[float, float]] = {}
    top = float(gamma + 1)
    c = pd.to_numeric(pd.Series([row.get("draft_cost_ratio_b1")]), errors="coerce").iloc[0]
    batch = pd.to_numeric(pd.Series([row.get("mean_batch_size", row.get("batch_size"))]), errors="coerce").iloc[0]
    if gamma > 0 and np.isfinite(c) and c > 0 and np.isfinite(batch) and batch <= 1.0 + 1e-9:
        top = min(top, (gamma + 1) / (1 + gamma * float(c)))
    for metric in SPEEDUPS:
        out[metric] = (0.0, top)
    gpus = int(row.get("tp") or 1) * int(row.get("dp") or 1)
    read = weight_read_s(str(row.get("target")), str(row.get("gpu")), gpus, profiles)
    if np.isfinite(read):
        for metric in TPOTS:
            out[metric] = (read * 1e3 / (gamma + 1), math.inf)
        for metric in NO_SPEC_TPOTS:
            out[metric] = (read * 1e3, math.inf)
    return out


# ----------------------------------------------------------------------------- a plan's rows


def row_group(row: pd.Series, figure: str = "absolute", alpha_measured: bool = False,
              profiles: str | None = None) -> Group:
    """A result row's pool: MoE from the target profile, calibrated when the step model is the
    user's own fit (``SHIPPED_STEPS`` are not; with a measured α: own runs and a speculative
    run), load from the mean batch the run held (the batch cap when absent)."""
    from specgauge.simulator.profiles import load_model

    try:
        moe = load_model(str(row["target"]), profiles).is_moe
    except Exception:  # noqa: BLE001 - an unknown target (a user's file gone): the dense rows' bound
        moe = False
    source = str(row.get("step_model_source") or "datasheet prior")
    load = row.get("mean_batch_size")
    if load is None or not np.isfinite(float(load)) or float(load) <= 0:
        load = row.get("batch_size") or 1
    calibrated = not source.startswith(SHIPPED_STEPS)
    return group_of(figure, profile_of(calibrated, alpha_measured), moe, max(float(load), 1.0))


def _note(b: Band, level: float) -> str:
    what = FIGURE_WORDS.get(b.group.figure, b.group.figure)
    if not math.isfinite(b.q):
        return f"{what}: {level:.0%} interval unbounded ({b.reason})"
    whose = "your rows, " if b.origin == "yours" else ""
    text = f"{what} ±{b.half_width:.0%} ({whose}{b.group_used.label()}: {b.n} rows, {b.sources} sources)"
    return text + (f" [{b.reason}]" if b.reason else "")


OWN_COLUMNS = ("source", "figure", "profile", "kind", "load", "residual")


def read_own_residuals(path: str) -> pd.DataFrame:
    """A team's own residuals, as ``specgauge validate --add ... --mine PATH`` writes them (one row
    per run of theirs, predicted with the shipped constants); a file without them is refused in
    one line (exit status 2)."""
    import io

    from specgauge import inputs
    from specgauge.errors import InputFileError as ValidationInputError

    text = inputs.read_input_text(path, "validation residuals")
    try:
        frame = pd.read_csv(io.StringIO(text))
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as exc:
        raise ValidationInputError(f"{path!r} is not a CSV of residuals: {' '.join(str(exc).split())}") from None
    missing = [c for c in OWN_COLUMNS if c not in frame]
    if missing or not len(frame):
        raise ValidationInputError(f"{path!r} holds no residual rows (columns {', '.join(OWN_COLUMNS)}); write it with "
                                   f"specgauge validate --add RUN.json:gpu=...,target=... --mine {path}")
    bad = sorted(set(frame["figure"].astype(str)) - set(FIGURES)) + sorted(set(frame["profile"].astype(str)) - set(PROFILES))
    residual = pd.to_numeric(frame["residual"], errors="coerce")
    if bad or not np.isfinite(residual).all():
        raise ValidationInputError(f"{path!r}: unknown figure or profile {', '.join(bad)}" if bad else
                                   f"{path!r}: every residual must be a finite number")
    return frame.assign(residual=residual, load=frame["load"].astype(str))


def add_intervals(frame: pd.DataFrame, level: float = LEVEL, alpha_measured: bool = False,
                  alpha_spread: tuple[float, float] | None = None, residuals: pd.DataFrame | None = None,
                  profiles: str | None = None, own: pd.DataFrame | None = None) -> pd.DataFrame:
    """``frame`` with ``<metric>_lo``/``<metric>_hi`` beside every metric of ``METRICS`` it holds.

    Per row and figure kind, the pool's conformal band (``own``: a team's own residuals,
    ``read_own_residuals``, set the band wherever they have the rows a finite quantile needs;
    elsewhere the shipped pool, said in the note); then, for a speculative figure (γ > 0),
    α's term: the draft kind's published range when α is a placeholder, ``alpha_spread``
    (low, high) when it was measured (none: no widening). Speed-ups and throughputs move with
    α, latencies against it, baselines not at all. Last, the hard bounds (``hard_bounds``)."""
    out = frame.copy()
    pool = pool_rows(shipped_residuals() if residuals is None else residuals)
    mine = pool_rows(own) if own is not None else None
    cache: dict[Group, Band] = {}

    def cached(group: Group) -> Band:   # a sweep has few pools and many rows
        if group not in cache:
            yours = _band(group, level, mine) if mine is not None else None
            if yours is not None and math.isfinite(yours.q):
                cache[group] = replace(yours, origin="yours")
            else:
                shipped = _band(group, level, pool)
                reason = (f"your rows: {len(_select(mine, Group(group.figure, None, None, None)))} of this figure, "
                          f"{needed_rows(level)} needed; the shipped validation's pool") if mine is not None else ""
                cache[group] = replace(shipped, reason="; ".join(p for p in (shipped.reason, reason) if p))
        return cache[group]

    bands = {figure: [cached(row_group(row, figure, alpha_measured, profiles)) for _, row in out.iterrows()]
             for figure in FIGURES}
    factors = [_row_alpha_factors(row, alpha_measured, alpha_spread) for _, row in out.iterrows()]
    bounds = [hard_bounds(row, profiles) for _, row in out.iterrows()]
    gamma = pd.to_numeric(out.get("gamma", pd.Series(0, index=out.index)), errors="coerce").fillna(0).to_numpy()
    f_lo = np.array([f[0] for f in factors])
    f_hi = np.array([f[1] for f in factors])
    for metric, (figure, direction) in METRICS.items():
        if metric not in out:
            continue
        q = np.array([b.q for b in bands[figure]])
        with np.errstate(over="ignore", invalid="ignore"):
            down, up = np.exp(-q), np.exp(q)
        value = pd.to_numeric(out[metric], errors="coerce").to_numpy(float)
        lo_f = f_lo if direction > 0 else (1.0 / f_hi if direction < 0 else 1.0)
        hi_f = f_hi if direction > 0 else (1.0 / f_lo if direction < 0 else 1.0)
        with np.errstate(invalid="ignore"):
            lo, hi = value * down * lo_f, value * up * hi_f
        floor = np.array([b.get(metric, (0.0, math.inf))[0] for b in bounds])
        ceiling = np.array([b.get(metric, (0.0, math.inf))[1] for b in bounds])
        lo, hi = np.maximum(lo, np.minimum(floor, value)), np.minimum(hi, np.maximum(ceiling, value))
        if metric in SPEEDUPS:   # γ 0 against itself: 1 by construction, no interval
            exact = gamma <= 0
            lo, hi = np.where(exact, value, lo), np.where(exact, value, hi)
        out[f"{metric}_lo"] = lo
        out[f"{metric}_hi"] = hi
    out["interval_group"] = ["; ".join(b.group_used.label() for b in row_bands)
                             for row_bands in zip(*(bands[f] for f in FIGURES))]
    notes = []
    for i, (r, a, t, f) in enumerate(zip(bands["ratio"], bands["absolute"], bands["tail"], factors)):
        parts = [] if gamma[i] <= 0 else [_note(r, level)]
        parts += [_note(a, level), _note(t, level), f[2]]
        if gamma[i] <= 0:
            parts.append("speed-up 1 by construction (no speculation)")
        parts.append(ENGINE_NOTE)
        notes.append("; ".join(p for p in parts if p))
    out["interval_note"] = notes
    return out


def format_interval(value: float, lo: float, hi: float, digits: int = 3) -> str:
    """``1.46 [1.21, 1.76]``; an unbounded end is ``inf``."""
    def fmt(v: float) -> str:
        return "inf" if not math.isfinite(v) else f"{v:.{digits}g}"
    return f"{fmt(value)} [{fmt(lo)}, {fmt(hi)}]"


def held_out_q(rows: pd.DataFrame, residuals: pd.DataFrame, level: float = LEVEL) -> np.ndarray:
    """Each row's q computed from the other sources' residuals alone (its own source held out of its
    interval too): ``rows`` need ``source``, ``figure``, ``profile``, ``kind`` and ``load`` (a band name)."""
    pool = pool_rows(residuals)
    out, cache = [], {}
    for _, row in rows.iterrows():
        key = (row["source"], row["figure"], row["profile"], row["kind"], row["load"])
        if key not in cache:
            rest = pool[pool["source"] != row["source"]]
            cache[key] = _band(Group(row["figure"], row["profile"], row["kind"], row["load"]), level, rest).q
        out.append(cache[key])
    return np.array(out, float)


def coverage(frame: pd.DataFrame, level: float = LEVEL) -> pd.DataFrame:
    """Leave-one-source-out coverage of the intervals on validation residuals: each source's rows
    against the band computed from the other sources' rows alone. Returns the rows with ``q``
    and ``covered``."""
    out = frame.copy()
    out["q"] = held_out_q(out, frame, level)
    out["covered"] = out["residual"].abs() <= out["q"]
    return out
