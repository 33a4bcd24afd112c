"""PNG figures beside a report's CSV (matplotlib, an optional extra, on the Agg backend).

Three figures answer the three questions a deployment asks: up to which batch size does
speculation pay (speed-up against batch size, one line per γ, the break-even line at 1),
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
    if "batch_size" in frame and frame["batch_size"].nunique() > 1 and "speedup_vs_no_spec" in frame:
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        for gamma, group in spec.groupby("gamma"):
            mean = group.groupby("batch_size")["speedup_vs_no_spec"].mean()
            ax.plot(mean.index, mean.to_numpy(), "o-", ms=3, label=f"γ = {gamma}")
        ax.axhline(1.0, color="k", lw=1, ls="--", label="break-even")
        cap = _memory_cap(spec)
        if cap is not None and cap < frame["batch_size"].max():
            ax.axvline(cap, color="tab:red", lw=1, ls=":", label=f"draft's memory caps the batch at {cap}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch cap (concurrent sequences)")
        ax.set_ylabel("output-throughput speed-up over no speculation (×)")
        ax.set_title("Where speculation stops paying" + suffix, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        out.append(save_figure(fig, png_beside(csv_path, "speedup_vs_batch")))
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
