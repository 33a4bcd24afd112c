"""The figure of ``specgauge acceptance``: α along the sequence, and tokens per pass against γ."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from specgauge.measurement.forcing import Measurement
from specgauge.plotting import pyplot, save_figure


def mean_along(alphas: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Mean α at each continuation position over the requests that reach it, and how many do."""
    width = max(len(a) for a in alphas)
    table = np.full((len(alphas), width), np.nan)
    for i, a in enumerate(alphas):
        table[i, :len(a)] = a
    return np.nanmean(table, axis=0), (~np.isnan(table)).sum(axis=0)


def plot_acceptance(m: Measurement, summary: pd.DataFrame, path: Path) -> Path:
    """Left: α_t averaged over requests per position (a dot per position). Right: the law's tokens
    per pass against γ with its interval, and the measured mean of ``--run`` with its interval."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for d in m.drafts:
        mean, _ = mean_along(d.alphas)
        left.plot(np.arange(1, len(mean) + 1), mean, label=d.label, lw=1)
    left.set_xlabel("position in the continuation (tokens)")
    left.set_ylabel("α_t = Σ min(p_t, q_t), mean over requests")
    left.set_ylim(-0.02, 1.02)
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    for label, rows in summary.groupby("draft", sort=False):
        line, = right.plot(rows["gamma"], rows["tokens_per_pass"], "-o", ms=3, label=f"{label} (law)")
        right.fill_between(rows["gamma"], rows["tokens_per_pass_ci_low"], rows["tokens_per_pass_ci_high"],
                           color=line.get_color(), alpha=0.2)
        if "measured_tokens_per_pass" in rows and rows["measured_tokens_per_pass"].notna().any():
            run = rows[rows["measured_tokens_per_pass"].notna()]
            err = np.vstack([run["measured_tokens_per_pass"] - run["measured_ci_low"],
                             run["measured_ci_high"] - run["measured_tokens_per_pass"]])
            right.errorbar(run["gamma"], run["measured_tokens_per_pass"], yerr=err, fmt="s", ms=4, capsize=3,
                           color=line.get_color(), label=f"{label} (measured, --run)")
    right.set_xlabel("γ (drafted tokens per round)")
    right.set_ylabel("tokens per target pass")
    right.grid(alpha=0.3)
    right.legend(fontsize=8)
    fig.suptitle(f"teacher-forced acceptance over {len(m.prompts)} requests", fontsize=10)
    return save_figure(fig, path)
