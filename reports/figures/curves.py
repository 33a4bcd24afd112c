"""PNG figures beside a report's CSV (matplotlib, an optional extra, on the Agg backend).

Three figures answer the three questions a deployment asks: up to which batch size (or
request rate) does speculation pay (speed-up against load, one line per γ, the best γ's
envelope and the load where it crosses the break-even line at 1),
how much does acceptance buy (tokens per pass against α), and what does each setting
trade (output throughput against p99 TPOT, with the Pareto front drawn).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from specgauge.plotting import png_beside, pyplot, save_figure


def law_curves(frame: pd.DataFrame, ax, column: str, mc_column: str | None) -> None:
    """One line per γ of ``column`` against α, with Monte Carlo points when present."""
    for gamma, group in frame.groupby("gamma"):
        line, = ax.plot(group["alpha"], group[column], label=f"γ = {gamma}")
        if mc_column and mc_column in group:
            ax.plot(group["alpha"], group[mc_column], "o", ms=3, color=line.get_color())
    ax.set_xlabel("acceptance rate α (= 1 − TV(p, q))")
    ax.grid(alpha=0.3)


def plot_law(frame: pd.DataFrame, csv_path: Path) -> list[Path]:
    """Tokens per pass and speed-up against α, one curve per γ (dots: Monte Carlo)."""
    plt = pyplot()
    out = []
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    law_curves(frame, ax, "tokens_per_pass", "mc_tokens_per_pass")
    ax.set_ylabel("tokens per target pass  (1 − α^(γ+1)) / (1 − α)")
    ax.set_title("Tokens per pass against acceptance (dots: Monte Carlo)")
    ax.legend(fontsize=8)
    out.append(save_figure(fig, png_beside(csv_path, "tokens_per_pass")))
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    law_curves(frame, ax, "speedup", "mc_speedup")
    ax.axhline(1.0, color="k", lw=1, ls="--", label="break-even")
    c = float(frame["cost_ratio"].iloc[0])
    ax.set_ylabel(f"walltime speed-up over no speculation (×, draft cost c = {c:g})")
    ax.set_title("Walltime speed-up against acceptance")
    ax.legend(fontsize=8)
    out.append(save_figure(fig, png_beside(csv_path, "speedup_vs_alpha")))
    plt.close(fig)
    return out


def pareto_front(throughput: np.ndarray, latency: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats on both (higher throughput, lower latency)."""
    order = np.lexsort((-throughput, latency))
    best = np.maximum.accumulate(throughput[order])
    keep = np.concatenate([[True], throughput[order][1:] > best[:-1]])
    return order[keep]


def _memory_cap(spec: pd.DataFrame) -> int | None:
    """The concurrency the draft's memory leaves, when one value holds for the whole figure."""
    if "max_concurrency" not in spec or spec["max_concurrency"].nunique() != 1:
        return None
    return int(spec["max_concurrency"].iloc[0])


SPEEDUP_FIGURES = (
    ("batch_size", "speedup_vs_no_spec", "batch cap (concurrent sequences)",
     "output-throughput speed-up over no speculation (×)", "speedup_vs_batch"),
    ("qps", "tpot_speedup_vs_no_spec", "request rate (requests/s)", "mean-TPOT speed-up over no speculation (×)",
     "speedup_vs_rate"),
)


#: configuration columns that make separate curves when they vary (never averaged together)
FACET_COLUMNS = ("gpu", "target", "draft", "tp", "dp", "ep", "acceptance", "policy", "tree", "tree_acceptance",
                 "draft_tp", "draft_kv_budget", "empty_proposals", "draft_cost_ratio", "spec_batch_size", "batch_size",
                 "qps", "requests", "prompt_len", "output_len", "length_dist", "arrival_cv", "max_batched_tokens",
                 "block_size", "gpu_memory_utilization", "seed")


def facet_columns(frame: pd.DataFrame, axis: str) -> list[str]:
    """The swept configuration columns besides γ and the figure's own axis: one panel per combination."""
    candidates = FACET_COLUMNS if "acceptance" in frame else (*FACET_COLUMNS, "alpha")
    return [c for c in candidates if c != axis and c in frame and frame[c].nunique(dropna=False) > 1]


def _facet_label(columns: list[str], key) -> str:
    key = key if isinstance(key, tuple) else (key,)
    return ", ".join(f"{c} {v:g}" if isinstance(v, float) else f"{c} {v}" for c, v in zip(columns, key))


def _speedup_figure(plt, spec: pd.DataFrame, axis: str, metric: str, xlabel: str, ylabel: str, suffix: str,
                    memory: bool = False):
    """Speed-up against load, one line per γ, the best γ's envelope and where it crosses 1
    (``simulator.breakeven``: the best γ on each side is in the legend); one panel per value
    of every other swept option (draft, TP, α, …), so no two configurations share a line."""
    columns = facet_columns(spec, axis)
    if not columns:
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        _speedup_axes(ax, spec, axis, metric, xlabel, ylabel, _memory_cap(spec) if memory else None)
        ax.set_title("Where speculation stops paying" + suffix, fontsize=10)
        return fig
    groups = list(spec.groupby(columns, dropna=False, sort=False))
    ncols = min(3, len(groups))
    nrows = -(-len(groups) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.9 * nrows), squeeze=False)
    for ax, (key, group) in zip(axes.ravel(), groups):
        _speedup_axes(ax, group, axis, metric, xlabel, ylabel, _memory_cap(group) if memory else None)
        ax.set_title(_facet_label(columns, key), fontsize=9)
    for ax in axes.ravel()[len(groups):]:
        ax.set_visible(False)
    fig.suptitle("Where speculation stops paying" + suffix, fontsize=10)
    fig.tight_layout()
    return fig


def _speedup_axes(ax, spec: pd.DataFrame, axis: str, metric: str, xlabel: str, ylabel: str, cap: int | None) -> None:
    from specgauge.simulator.breakeven import break_even_from_table

    duplicated = spec.duplicated([axis, "gamma"])
    if duplicated.any():  # a caller's bug: two configurations on one line would be averaged silently
        raise ValueError(f"two rows share {axis} and γ in one panel: {spec[duplicated].iloc[0].to_dict()}")
    table = spec.pivot_table(index=axis, columns="gamma", values=metric, aggfunc="first")
    for gamma in table.columns:
        ax.plot(table.index, table[gamma].to_numpy(float), "o-", ms=3, label=f"γ = {gamma}")
    if "stable" in spec:
        stable = spec["stable"].map(lambda v: str(v).strip().lower() in ("true", "1", "1.0"))
        unstable = spec[~stable]
        if len(unstable):  # an overloaded run's speed-up describes the run's length, not the service
            ax.plot(unstable[axis].astype(float), unstable[metric].astype(float), "x", color="tab:red", ms=8,
                    label="unstable run (queue growing)")
    ax.axhline(1.0, color="k", lw=1, ls="--", label="break-even")
    answer = break_even_from_table(axis, table.index.to_numpy(float), [int(g) for g in table.columns],
                                   table.to_numpy(float))
    ax.plot(answer.loads, answer.best_speedup, "-", color="k", lw=3, alpha=0.25, label="best γ")
    if answer.load is not None:
        ax.axvline(answer.load, color="tab:green", lw=1.2, ls="-.",
                   label=f"stops paying ≈ {answer.load:.3g}: γ = {answer.gamma_below} below, none above")
    if cap is not None and cap < table.index.max():
        ax.axvline(cap, color="tab:red", lw=1, ls=":", label=f"draft's memory caps the batch at {cap}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def _rates(frame: pd.DataFrame) -> bool:
    return "qps" in frame and pd.to_numeric(frame["qps"], errors="coerce").notna().any()


def _load_label(row: pd.Series, rates: bool) -> str:
    """``64`` or ``64 @ 8 req/s``: which configuration a point of the Pareto front is."""
    cap = "" if "batch_size" not in row or pd.isna(row["batch_size"]) else f"{int(row['batch_size'])}"
    if rates and pd.notna(pd.to_numeric(row["qps"], errors="coerce")):
        return f"{cap} @ {float(row['qps']):g} req/s".strip()
    return cap


def plot_plan(frame: pd.DataFrame, csv_path: Path, scenario: str = "") -> list[Path]:
    """The plan's figures, titled with ``scenario``; each is drawn only when the sweep has the axes it needs."""
    suffix = f"\n{scenario}" if scenario else ""
    plt = pyplot()
    out = []
    spec = frame[frame["gamma"] > 0]
    for axis, metric, xlabel, ylabel, name in SPEEDUP_FIGURES:
        if axis in spec and spec[axis].notna().any() and spec[axis].nunique() > 1 and metric in spec:
            fig = _speedup_figure(plt, spec[spec[axis].notna()], axis, metric, xlabel, ylabel, suffix,
                                  memory=axis == "batch_size")
            out.append(save_figure(fig, png_beside(csv_path, name)))
            plt.close(fig)
    if {"alpha", "spec_decode_acceptance_length"} <= set(spec.columns) and len(spec):
        # x is the model's α (per-token, conditional), not vLLM's acceptance rate, which also
        # counts drafts after the first rejection and so sits below α for γ > 1
        from specgauge.laws import law_frame

        gammas = sorted(int(g) for g in spec["gamma"].unique())
        curves = law_frame(np.linspace(0.0, 0.99, 50), gammas, 0.0)
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        law_curves(curves, ax, "tokens_per_pass", None)
        ax.plot(spec["alpha"].astype(float), spec["spec_decode_acceptance_length"].astype(float), "kx",
                label="simulated (acceptance length)")
        ax.set_ylabel("tokens per target pass (acceptance length)")
        ax.set_title("Tokens per pass against α: the law and the simulation" + suffix, fontsize=10)
        ax.legend(fontsize=8)
        out.append(save_figure(fig, png_beside(csv_path, "tokens_per_pass")))
        plt.close(fig)
    if {"output_throughput", "p99_tpot_ms"} <= set(frame.columns):
        ok = frame[["output_throughput", "p99_tpot_ms"]].apply(pd.to_numeric, errors="coerce").notna().all(axis=1)
        data = frame[ok]
        if len(data):
            fig, ax = plt.subplots(figsize=(6.4, 4.4))
            sc = ax.scatter(data["p99_tpot_ms"], data["output_throughput"], c=data["gamma"], cmap="viridis", s=14)
            fig.colorbar(sc, ax=ax, label="γ")
            front = data.iloc[pareto_front(data["output_throughput"].to_numpy(float), data["p99_tpot_ms"].to_numpy(float))]
            front = front.sort_values("p99_tpot_ms")
            ax.step(front["p99_tpot_ms"], front["output_throughput"], "r-", where="post",
                    label="Pareto front (each point: its batch cap" + (" @ request rate)" if _rates(front) else ")"))
            for _, point in front.iterrows():
                ax.annotate(_load_label(point, _rates(front)), (point["p99_tpot_ms"], point["output_throughput"]),
                            textcoords="offset points", xytext=(4, -9), fontsize=7, color="tab:red")
            ax.set_xlabel("p99 TPOT (ms)")
            ax.set_ylabel("output throughput (tokens/s)")
            ax.set_title("Throughput against per-token latency" + suffix, fontsize=10)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
            out.append(save_figure(fig, png_beside(csv_path, "pareto")))
            plt.close(fig)
    return out


def plot_calibration(points: pd.DataFrame, path: Path, title: str) -> Path:
    """Measured against modelled step times for ``specgauge calibrate``: the fit's own points (its
    equation's value) and every measurement the written profile gives back when simulated, the
    speculative runs (priced after the fit, so with no fitted value) marked apart; the title's
    worst figures are the fit's and the round trip's, each over all its points."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.4, 5.4))
    fitted = points[points["fitted_ms"].notna()] if "fitted_ms" in points else points.iloc[:0]
    simulated = points[points["simulated_ms"].notna()] if "simulated_ms" in points else points.iloc[:0]
    speculative = simulated["fitted_ms"].isna() if "fitted_ms" in simulated else pd.Series(True, simulated.index)
    ax.scatter(fitted["measured_ms"], fitted["fitted_ms"], s=16, label="fit (its equation)")
    ax.scatter(simulated.loc[~speculative, "measured_ms"], simulated.loc[~speculative, "simulated_ms"], s=28,
               marker="x", label="simulated, without speculation")
    ax.scatter(simulated.loc[speculative, "measured_ms"], simulated.loc[speculative, "simulated_ms"], s=30,
               marker="^", label="simulated, with speculation")
    values = pd.concat([points["measured_ms"], fitted["fitted_ms"], simulated["simulated_ms"]]).dropna()
    lo, hi = float(values.min()), float(values.max())
    ax.plot([lo, hi], [lo, hi], color="grey", lw=1, label="modelled = measured")
    ax.set(xscale="log", yscale="log", xlabel="measured step time (ms)", ylabel="modelled step time (ms)")
    ax.set_title(calibration_title(points, title), fontsize=9)
    ax.legend(fontsize=7)
    out = save_figure(fig, path)
    plt.close(fig)
    return out


def calibration_title(points: pd.DataFrame, title: str) -> str:
    """The calibrate figure's title: the fit's worst error over its equations, and the round trip's over
    every measurement simulated (speculative runs included: they have no fitted value)."""
    fit = points["relative_error"].abs().dropna() if "relative_error" in points else pd.Series(dtype=float)
    trip = points["round_trip_error"].abs().dropna() if "round_trip_error" in points else pd.Series(dtype=float)
    worst = [f"fit {fit.max():.1%}" if len(fit) else "", f"round trip {trip.max():.1%} ({len(trip)} runs)"
             if len(trip) else ""]
    return f"{title}\nworst: " + ", ".join(w for w in worst if w) if any(worst) else title
