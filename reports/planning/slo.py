"""Service-level objectives as ``vllm bench serve --goodput`` takes them: ``ttft:200 tpot:50``.

vLLM judges each request against every objective (values in milliseconds). A simulated
configuration is summarised by its latency statistics, so here an objective is met when
the chosen statistic of the metric is at or below the bound: the 99th percentile by
default (``ttft:200`` means p99_ttft_ms ≤ 200), or the one named by a prefix
(``mean_tpot:40``, ``median_e2el:3000``, ``p99_itl:80``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np
import pandas as pd

from specgauge.errors import UsageError

METRICS = ("ttft", "tpot", "itl", "e2el")
STATISTICS = ("p99", "mean", "median")
DEFAULT_STATISTIC = "p99"


class SLOError(UsageError):
    """An SLO term that is not ``METRIC:MILLISECONDS`` with a known metric (exit status 2)."""


@dataclass(frozen=True)
class Objective:
    """One bound: ``statistic`` of ``metric`` at most ``limit_ms`` milliseconds."""

    metric: str
    statistic: str
    limit_ms: float

    @property
    def column(self) -> str:
        """The vLLM result column the bound is read from, e.g. ``p99_ttft_ms``."""
        return f"{self.statistic}_{self.metric}_ms"

    def __str__(self) -> str:
        prefix = "" if self.statistic == DEFAULT_STATISTIC else f"{self.statistic}_"
        return f"{prefix}{self.metric}:{self.limit_ms:g}"


@dataclass(frozen=True)
class SLO:
    """All objectives together; an empty SLO is met by every configuration."""

    objectives: tuple[Objective, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.objectives)

    def __str__(self) -> str:
        return " ".join(str(o) for o in self.objectives)

    def met(self, frame: pd.DataFrame) -> pd.Series:
        """A boolean per row: every objective met (a missing value never meets one)."""
        ok = pd.Series(True, index=frame.index)
        for objective in self.objectives:
            if objective.column not in frame:
                raise SLOError(f"the results have no column {objective.column!r} for SLO term {str(objective)!r}")
            values = pd.to_numeric(frame[objective.column], errors="coerce").to_numpy(float)
            ok &= np.nan_to_num(values, nan=np.inf) <= objective.limit_ms
        return ok


def _parse_term(term: str) -> Objective:
    name, sep, value = term.partition(":")
    valid = f"valid metrics: {', '.join(METRICS)}, optionally prefixed {', '.join(s + '_' for s in STATISTICS)}"
    if not sep or not name or not value:
        raise SLOError(f"SLO term {term!r} is not METRIC:MILLISECONDS (e.g. ttft:200); {valid}")
    name = name.strip().lower()
    statistic, metric = DEFAULT_STATISTIC, name
    for prefix in STATISTICS:
        if name.startswith(prefix + "_"):
            statistic, metric = prefix, name[len(prefix) + 1:]
    if metric.endswith("_ms"):
        metric = metric[:-3]
    if metric not in METRICS:
        raise SLOError(f"unknown SLO metric {name!r} in {term!r}; {valid}")
    try:
        limit = float(value)
    except ValueError:
        raise SLOError(f"SLO term {term!r}: {value!r} is not a number of milliseconds") from None
    if not np.isfinite(limit) or limit <= 0:
        raise SLOError(f"SLO term {term!r}: the bound must be a positive number of milliseconds")
    return Objective(metric, statistic, limit)


def parse_slo(terms: Iterable[str] | str | None) -> SLO:
    """Parse ``["ttft:200", "tpot:50"]`` (or one string, space- or comma-separated)."""
    if terms is None:
        return SLO()
    if isinstance(terms, str):
        terms = [terms]
    parts = [p for t in terms for p in t.replace(",", " ").split()]
    objectives = [_parse_term(p) for p in parts]
    columns = [o.column for o in objectives]
    duplicated = sorted({c for c in columns if columns.count(c) > 1})
    if duplicated:
        raise SLOError(f"SLO names {duplicated[0]!r} twice; give each bound once")
    return SLO(tuple(objectives))
