"""The break-even load: where speculation stops paying, and the best γ on each side of it.

``crossing`` finds where a speed-up curve falls to 1 along a load axis (batch cap or
request rate), interpolated in log load. ``break_even_load`` runs one configuration over
loads × γ (each run paired with its own no-speculation baseline, as ``simulate`` does),
takes the best γ at each load, and reports where the best speed-up crosses 1: below
that load some γ pays, above it none does. The answer is a ``BreakEven``, which the plan
writes as one decision row per configuration.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from specgauge.simulator.config import SimulationConfig


def crossing(x, speedup, log: bool = True) -> tuple[float | None, str]:
    """Where ``speedup`` first falls to 1 along increasing ``x`` (interpolated), and how it ended.

    Returns (value, kind): kind is ``crossed``, ``always`` (pays at every x) or ``never``
    (does not pay even at the smallest x). The crossing is interpolated linearly in log x
    between the last point that pays and the first that does not.
    """
    order = np.argsort(np.asarray(x, float), kind="stable")
    x, s = np.asarray(x, float)[order], np.asarray(speedup, float)[order]
    below = np.flatnonzero(s <= 1.0)
    if below.size == 0:
        return None, "always"
    first = int(below[0])
    if first == 0:
        return None, "never"
    x0, x1, s0, s1 = x[first - 1], x[first], s[first - 1], s[first]
    t = (s0 - 1.0) / (s0 - s1) if s0 != s1 else 1.0
    if log and x0 > 0:
        return float(np.exp(np.log(x0) + t * (np.log(x1) - np.log(x0)))), "crossed"
    return float(x0 + t * (x1 - x0)), "crossed"


@dataclass(frozen=True)
class BreakEven:
    """The answer for one configuration along one load axis.

    ``load``: where the best speed-up over γ falls to 1 (None: it pays everywhere swept, or
    nowhere: see ``kind``); ``gamma_below``: the best γ at the last swept load that pays;
    ``gamma_above``: at the first swept load where none pays, the γ that loses least (plain
    decoding is best there); ``best_gamma`` / ``best_speedup``: the best γ > 0 and its
    speed-up at each swept load.
    """

    axis: str
    load: float | None
    kind: str
    gamma_below: int | None
    gamma_above: int | None
    loads: tuple[float, ...]
    best_gamma: tuple[int, ...]
    best_speedup: tuple[float, ...]

    def describe(self) -> str:
        if self.kind == "always":
            return f"speculation pays at every swept {self.axis} (up to {self.loads[-1]:g}); best γ there {self.gamma_below}"
        if self.kind == "never":
            return (f"speculation does not pay even at {self.axis} {self.loads[0]:g} "
                    f"(γ {self.gamma_above} loses least)")
        return (f"speculation stops paying at {self.axis} ≈ {self.load:.3g}: best γ {self.gamma_below} below it; "
                f"above it no γ pays (γ {self.gamma_above} loses least)")


def best_over_gamma(table: np.ndarray, gammas: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Per load (rows), the best speed-up over γ (columns) and its γ."""
    table = np.asarray(table, float)
    idx = np.nanargmax(table, axis=1)
    return table[np.arange(len(table)), idx], np.asarray(gammas)[idx]


def break_even_from_table(axis: str, loads: Sequence[float], gammas: Sequence[int], table) -> BreakEven:
    """The break-even of a speed-up table (loads × γ): where the best γ's speed-up falls to 1."""
    best, which = best_over_gamma(table, gammas)
    order = np.argsort(np.asarray(loads, float), kind="stable")
    loads_sorted = np.asarray(loads, float)[order]
    best, which = best[order], which[order]
    value, kind = crossing(loads_sorted, best)
    pays = best > 1.0
    below = int(which[np.flatnonzero(pays)[-1]]) if pays.any() else None
    above = int(which[np.flatnonzero(~pays)[0]]) if (~pays).any() else None
    return BreakEven(axis, value, kind, below, above, tuple(map(float, loads_sorted)), tuple(map(int, which)),
                     tuple(map(float, best)))


def break_even_load(config: SimulationConfig, loads: Sequence[float], gammas: Sequence[int], axis: str = "batch_size",
                    run: Callable[[SimulationConfig], float] | None = None) -> BreakEven:
    """Simulate ``config`` at each load × γ and find where speculation stops paying.

    ``axis`` is ``batch_size`` (saturated, the batch cap swept: output-throughput speed-up)
    or ``qps`` (the request rate swept: mean-TPOT speed-up). ``run`` returns one
    configuration's speed-up (default: ``simulate``'s paired column for the axis).
    """
    from specgauge.simulator.core import simulate

    if axis not in ("batch_size", "qps"):
        raise ValueError(f"axis must be batch_size or qps, not {axis!r}")
    column = "speedup_vs_no_spec" if axis == "batch_size" else "tpot_speedup_vs_no_spec"
    run = run or (lambda c: float(simulate(c)[column]))
    table = np.array([[run(replace(config, **{axis: load}, gamma=g)) for g in gammas] for load in loads])
    return break_even_from_table(axis, loads, gammas, table)
