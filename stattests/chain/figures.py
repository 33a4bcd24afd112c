"""A certificate to look at: one PNG per fixture beside the certificate CSV.

People judge a calibration and a power claim from pictures. Each figure draws what the
fixture's checks saw, with the band an exact decoder stays inside:

- the randomized PIT of the emitted tokens (vocabulary by id, and by p/q), pooled over
  positions, against the uniform law with its band (binomial quantiles, the band's
  false-fail rate split over the bins);
- observed against expected counts of the bins the chi-square tests (rare tokens pooled
  as it pools them) and, on wide vocabularies, of the collisions in each decade band of
  rare tokens (the tail test), with ±z·sd bands;
- acceptance by position against 1 − TV(p, q), with Clopper-Pearson intervals;
- tokens per pass against the truncated-geometric law;
- the fixture's failing assertions, by check and position.

The title names the decoder, the fixture and the verdict, so a failing figure says at a
glance which family failed, and its panels show where (which position, which part of the
vocabulary order, which bins, which pass length).
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd

from specgauge.plotting import png_beside, pyplot, save_figure

#: False-fail rate of each panel's band as a whole: an exact decoder leaves it this rarely.
BAND_FALSE_FAIL = 1e-3
#: Bins of the PIT histograms.
PIT_BINS = 20
#: Observed / expected above this is drawn at it: the band near 1 stays readable.
RATIO_CAP = 3.0
#: Resolution of the PNGs: six panels stay legible, and a figure stays near 100 kB.
DPI = 100
#: Lines of failing assertions listed in the text panel.
MAX_LISTED = 12


def check_plotting() -> None:
    """Fail at once, before any certifying, when figures are asked for and matplotlib is missing."""
    pyplot()


def plot_certificate(runs: Mapping[str, object], certificate, csv_path: Path) -> list[Path]:
    """One PNG per fixture run, ``<csv stem>_<fixture>.png`` beside ``csv_path``.

    ``runs``: the session's runs by fixture name (``CertificationSession.runs``);
    ``certificate``: the :class:`~specgauge.stattests.core.certificate.Certificate` they produced.
    """
    plt = pyplot()
    frame = certificate.frame
    out = []
    for name, run in runs.items():
        rows = frame[frame["fixture"] == name]
        if rows.empty:  # run, but none of its assertions kept (e.g. an interrupted session)
            continue
        fig = fixture_figure(plt, run, rows)
        out.append(save_figure(fig, png_beside(Path(csv_path), name), dpi=DPI))
        plt.close(fig)
    return out


def figures_note(figures: list[Path]) -> str:
    """The line that tells a person where the figures went."""
    if not figures:
        return "figures: none"
    if len(figures) == 1:
        return f"figures: 1 PNG beside it, {figures[0].name}"
    return f"figures: {len(figures)} PNGs beside it, {figures[0].name} to {figures[-1].name}"


def fixture_verdict(rows: pd.DataFrame) -> str:
    """The fixture's verdict in words: what failed, by family. A pass is "no deviation found", not
    "exact": the rows say what they could detect, not that none exists."""
    failed = rows[rows["verdict"] == "fail"]
    if failed.empty:
        optimal = rows[rows["family"] == "optimality"]
        return "no deviation found, acceptance on the law" if len(optimal) else "no deviation found"
    checks = ", ".join(dict.fromkeys(failed["check"]))
    exact = not (failed["family"] == "exactness").any()
    return f"{'no deviation found, not optimal' if exact else 'NOT EXACT'}: {checks} failed"


def fixture_figure(plt, run, rows: pd.DataFrame):
    """The six panels of one fixture run (a pair fixture or a whole-sequence case)."""
    fixture = getattr(run, "fixture", None) or run.case
    decoder = str(rows["decoder"].iloc[0])
    verdict = fixture_verdict(rows)
    error = run.error
    fig, axes = plt.subplots(2, 3, figsize=(13, 7.2)) if not error else plt.subplots(figsize=(13, 1.6))
    fig.suptitle(textwrap.fill(f"{decoder} · {fixture.name} · {verdict}", 120), fontsize=12, fontweight="bold",
                 color="tab:red" if "failed" in verdict else "black")
    if error:  # nothing to draw: the run stopped at the decoder's first failure
        axes.set_axis_off()
        axes.text(0, 0.5, textwrap.fill(f"the decoder failed on this fixture: {error}", 150), va="center",
                  fontsize=10, color="tab:red")
        return fig
    failed = _failed_positions(rows)
    sequence = fixture.kind == "sequence"
    pit_panel(axes[0, 0], None if sequence else run.pit_id, "PIT, vocabulary by id", failed.get("pit-id"))
    pit_panel(axes[0, 1], None if sequence else run.pit_ratio, "PIT, vocabulary by p/q", failed.get("pit-ratio"))
    counts_panel(axes[0, 2], run, sequence)
    lengths = run.first_round_lengths if sequence else run.lengths
    alpha = (np.broadcast_to(run.alphas, (lengths.size, run.alphas.size)) if sequence else run.alpha)
    acceptance_panel(axes[1, 0], lengths, alpha, failed.get("acceptance"))
    tokens_per_pass_panel(axes[1, 1], lengths, alpha, "first round's " if sequence else "")
    text_panel(axes[1, 2], rows)
    fig.subplots_adjust(left=0.06, right=0.98, bottom=0.08, top=0.86, wspace=0.28, hspace=0.5)  # fixed: fast
    return fig


def _failed_positions(rows: pd.DataFrame) -> dict[str, list[str]]:
    failed = rows[rows["verdict"] == "fail"]
    return {check: [str(p) for p in group["position"]] for check, group in failed.groupby("check")}


def _not_applicable(ax, title: str, why: str) -> None:
    ax.set_title(title, fontsize=10)
    ax.text(0.5, 0.5, why, ha="center", va="center", fontsize=9, color="0.4", wrap=True, transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _z(points: int) -> float:
    """Two-sided normal quantile for a band over ``points`` points at BAND_FALSE_FAIL."""
    from scipy import stats

    return float(stats.norm.isf(BAND_FALSE_FAIL / (2 * max(points, 1))))


def pit_band(n: int, bins: int = PIT_BINS) -> tuple[float, float]:
    """Density band of a uniform histogram of ``n`` values in ``bins`` bins: every bin's
    count stays inside it with probability 1 − BAND_FALSE_FAIL (Bonferroni over the bins)."""
    from scipy import stats

    tail = BAND_FALSE_FAIL / (2 * bins)
    lo, hi = stats.binom.ppf([tail, 1 - tail], n, 1 / bins)
    return float(lo * bins / n), float(hi * bins / n)


def pit_panel(ax, pit: np.ndarray | None, title: str, failed: list[str] | None) -> None:
    """Histogram of the PIT values of every emitted token, pooled over positions."""
    values = np.asarray([] if pit is None else pit, dtype=np.float64).ravel()
    values = values[~np.isnan(values)]
    if values.size == 0:
        _not_applicable(ax, title, "no PIT values here\n(greedy fixtures and whole sequences have none)")
        return
    counts, edges = np.histogram(values, bins=PIT_BINS, range=(0.0, 1.0))
    density = counts * PIT_BINS / values.size
    lo, hi = pit_band(values.size)
    outside = (density < lo) | (density > hi)
    ax.axhspan(lo, hi, color="0.5", alpha=0.3, zorder=0, label=f"uniform, {1 - BAND_FALSE_FAIL:.1%} band")
    ax.step(edges, np.append(density, density[-1]), where="post", color="tab:blue", lw=1.5,
            label=f"emitted tokens, positions pooled (n {values.size:,})")
    ax.bar(edges[:-1][outside], density[outside], width=np.diff(edges)[outside], align="edge",
           color="tab:red", alpha=0.6, label="bins outside the band" if outside.any() else None)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, max(1.7, float(density.max()) * 1.35))
    ax.set_xlabel("randomized PIT of the emitted token")
    ax.set_ylabel("density (1 = uniform)")
    ax.set_title(f"{title}\n{_positions_note(failed)}", fontsize=10, color="tab:red" if failed else "black")
    ax.legend(fontsize=8, loc="upper left")


def _positions_note(failed: list[str] | None) -> str:
    if not failed:
        return "passes at every position"
    shown = ", ".join(failed[:4]) + (f" and {len(failed) - 4} more" if len(failed) > 4 else "")
    return f"fails at {shown}"


def _binned(counts: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(expected, observed) per bin of the chi-square, rare categories pooled as it pools them."""
    from specgauge.stattests.core.statistics import MIN_EXPECTED, _pool

    n = counts.sum()
    possible = probs > 0
    bins = _pool(n * probs[possible], MIN_EXPECTED)
    exp = np.bincount(bins, weights=n * probs[possible])
    obs = np.bincount(bins, weights=counts[possible], minlength=exp.size)
    return exp, obs


def _tail_bands(counts: np.ndarray, probs: np.ndarray) -> list[tuple[float, float, float]]:
    """(expected, observed, sd) of the collisions in each decade band of rare tokens that
    the tail test can test (it expects at least 2 × MIN_COLLISIONS pairs there)."""
    from specgauge.stattests.core.statistics import MIN_COLLISIONS, MIN_EXPECTED, _collisions

    expected = counts.sum() * probs
    tail = (probs > 0) & (expected < MIN_EXPECTED)
    decade = np.floor(np.log10(np.where(tail, expected, MIN_EXPECTED) / MIN_EXPECTED)).astype(int)
    out = []
    for b in np.unique(decade[tail]):
        inside = tail & (decade == b)
        observed, mean, variance = _collisions(counts[inside], probs[inside])
        if mean >= 2 * MIN_COLLISIONS:
            out.append((mean, observed, math.sqrt(variance)))
    return out


def count_points(run, sequence: bool) -> tuple[list[tuple[str, np.ndarray, np.ndarray]], list[tuple]]:
    """The chi-square bins (per position, or of whole sequences) and the tail bands."""
    if sequence:
        from specgauge.stattests.chain.sequences import sequence_counts

        exp, obs = _binned(sequence_counts(run.tokens, run.vocab_size).astype(np.float64), run.exact)
        return [("sequences", exp, obs)], []
    fixture = run.fixture
    bins, tails = [], []
    for k in range(fixture.gamma + 1):
        column = run.tokens[:, k]
        counts = np.bincount(column[column >= 0], minlength=fixture.vocab_size).astype(np.float64)
        if counts.sum() == 0:
            continue
        exp, obs = _binned(counts, fixture.target[k])
        name = "bonus" if k == fixture.gamma else f"pos{k}"  # as the certificate names positions
        bins.append((name, exp, obs))
        if fixture.vocab_size >= 64:
            tails.extend((name, *band) for band in _tail_bands(counts, fixture.target[k]))
    return bins, tails


def counts_panel(ax, run, sequence: bool) -> None:
    """Observed over expected for every chi-square bin and tail band, against the expected
    count (log): an exact decoder stays inside 1 ± z/√expected, a bias leaves it."""
    title = "observed against expected counts"
    fixture = getattr(run, "fixture", None)
    if not sequence and (not fixture.context_free or fixture.greedy):
        _not_applicable(ax, title, "greedy fixture: the output must be the argmax prefix" if fixture.greedy
                        else "heterogeneous rows: the PIT is the exactness test")
        return
    bins, tails = count_points(run, sequence)
    z = _z(sum(e.size for _, e, _ in bins) + len(tails))
    right = max([e.max() for _, e, _ in bins] + [t[1] for t in tails] + [100.0]) * 2
    grid = np.geomspace(5.0, right, 100)
    ax.fill_between(grid, np.maximum(1 - z / np.sqrt(grid), 0), 1 + z / np.sqrt(grid), color="0.5", alpha=0.3,
                    zorder=0, label=f"1 ± {z:.1f}/√expected, {1 - BAND_FALSE_FAIL:.1%} band")
    ax.axhline(1.0, color="k", lw=0.8)
    outside_total = 0
    ratios = [obs / exp for _, exp, obs in bins] + [np.array([t[2] / t[1]]) for t in tails]
    top = min(max(2.0, 1.1 * max(float(r.max()) for r in ratios)), RATIO_CAP)
    colors = dict(zip((label for label, _, _ in bins), plt_colors(len(bins))))
    for label, exp, obs in bins:
        color = colors[label]
        outside = np.abs(obs - exp) > z * np.sqrt(exp)
        outside_total += int(outside.sum())
        ax.scatter(exp, np.minimum(obs / exp, top), s=14, color=color, edgecolors=np.where(outside, "tab:red", "none"),
                   linewidths=1.2, label="sequences (pooled bins)" if label == "sequences" else label)
    for k, mean, observed, sd in tails:
        outside = abs(observed - mean) > z * sd
        outside_total += int(outside)
        ax.errorbar(mean, min(observed / mean, top), yerr=z * sd / mean, fmt="^", ms=7, capsize=2, color=colors[k],
                    mec="tab:red" if outside else "0.2", ecolor="tab:red" if outside else "0.2")
    if tails:
        ax.plot([], [], "^", color="0.2", label="tail band: equal pairs of rare tokens")
    ax.set_xscale("log")
    ax.set_xlabel("expected (chi-square bin: draws; tail band: equal pairs)")
    ax.set_ylim(0, top * 1.05)
    ax.set_ylabel("observed / expected" + (f" (clipped at {top:g})" if top == RATIO_CAP else ""))
    note = f"{outside_total} outside the band" if outside_total else "all inside the band"
    ax.set_title(f"{title}\n{note}", fontsize=10, color="tab:red" if outside_total else "black")
    ax.legend(fontsize=7, loc="lower left", ncol=2 if len(bins) > 5 else 1, framealpha=0.9)


def plt_colors(n: int) -> list:
    """One colour per position (tab10: distinct on white, red excepted, which marks failures)."""
    from matplotlib import colormaps

    palette = [c for i, c in enumerate(colormaps["tab10"].colors) if i != 3]
    return [palette[i % len(palette)] for i in range(n)]


def acceptance_by_position(lengths: np.ndarray, alpha: np.ndarray) -> pd.DataFrame:
    """Per drafted position k: rows reaching it, the rate accepted, 1 − TV averaged over those
    rows, and the Clopper-Pearson interval at BAND_FALSE_FAIL split over the positions."""
    from scipy import stats

    gamma = alpha.shape[1]
    accepted = np.asarray(lengths)[:, None] - 1
    k = np.arange(gamma)[None, :]
    reached = accepted >= k
    n = reached.sum(axis=0)
    hits = (accepted > k).sum(axis=0)
    expected = (alpha * reached).sum(axis=0) / np.maximum(n, 1)
    a = BAND_FALSE_FAIL / max(gamma, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        lo = np.where(hits > 0, stats.beta.ppf(a / 2, hits, n - hits + 1), 0.0)
        hi = np.where(hits < n, stats.beta.ppf(1 - a / 2, hits + 1, n - hits), 1.0)
        rate = hits / np.maximum(n, 1)
    return pd.DataFrame({"position": np.arange(gamma), "n": n, "observed": rate, "expected": expected,
                         "low": lo, "high": hi})


def acceptance_panel(ax, lengths: np.ndarray, alpha: np.ndarray, failed: list[str] | None) -> None:
    title = "acceptance by position against 1 − TV"
    if alpha.shape[1] == 0:
        _not_applicable(ax, title, "no drafted positions")
        return
    table = acceptance_by_position(lengths, alpha)
    table = table[table["n"] > 0]
    outside = (table["expected"] < table["low"]) | (table["expected"] > table["high"])
    ax.plot(table["position"], table["expected"], "k--o", ms=4, mfc="white", label="1 − TV(p, q)")
    ax.errorbar(table["position"], table["observed"],
                yerr=[table["observed"] - table["low"], table["high"] - table["observed"]],
                fmt="o", capsize=3, color="tab:blue", ecolor="tab:blue",
                label=f"observed, {1 - BAND_FALSE_FAIL:.1%} intervals")
    if outside.any():
        ax.scatter(table["position"][outside], table["observed"][outside], s=80, facecolors="none",
                   edgecolors="tab:red", lw=1.5, label="interval misses 1 − TV")
    ax.set_xticks(table["position"])
    ax.set_xlabel("drafted position k (rows that reached it)")
    ax.set_ylabel("acceptance rate")
    ax.set_ylim(-0.03, 1.03)
    note = _positions_note(failed) if failed else ("misses at some position" if outside.any() else "agrees")
    bad = bool(failed) or bool(outside.any())
    ax.set_title(f"{title}\n{note}", fontsize=10, color="tab:red" if bad else "black")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def tokens_per_pass_panel(ax, lengths: np.ndarray, alpha: np.ndarray, what: str) -> None:
    from specgauge.laws import expected_tokens_per_pass, tokens_per_pass_pmf

    title = f"{what}tokens per pass against the law"
    gamma = alpha.shape[1]
    if gamma == 0 or lengths.size == 0:
        _not_applicable(ax, title, "no drafted positions")
        return
    support = np.arange(1, gamma + 2)
    observed = np.bincount(np.asarray(lengths) - 1, minlength=gamma + 1)[: gamma + 1] / lengths.size
    law = tokens_per_pass_pmf(alpha)
    sd = np.sqrt(law * (1 - law) / lengths.size)
    z = _z(gamma + 1)
    ax.bar(support, observed, color="tab:blue", alpha=0.7, label=f"observed (mean {lengths.mean():.3f})")
    ax.errorbar(support, law, yerr=z * sd, fmt="k_", ms=14, capsize=4,
                label=f"law (mean {expected_tokens_per_pass(alpha):.3f}), ±{z:.1f} sd")
    outside = np.abs(observed - law) > z * sd
    if outside.any():
        ax.bar(support[outside], observed[outside], color="none", edgecolor="tab:red", lw=1.5)
    ax.set_xticks(support)
    ax.set_xlabel("tokens emitted by one target pass")
    ax.set_ylabel("share of passes")
    ax.set_title(f"{title}\n{'differs' if outside.any() else 'agrees'}", fontsize=10,
                 color="tab:red" if outside.any() else "black")
    ax.legend(fontsize=8, loc="best")


def text_panel(ax, rows: pd.DataFrame) -> None:
    """The fixture's failing assertions, or that all passed and what they could detect."""
    ax.set_axis_off()
    failed = rows[rows["verdict"] == "fail"]
    lines = [f"{len(rows)} assertions, {len(failed)} failed"]
    for _, row in failed.head(MAX_LISTED).iterrows():
        where = f"[{row['position']}]" if str(row["position"]) not in ("", "nan") else ""
        lines.append(f"FAIL {row['check']}{where}: p-value {float(row['pvalue']):.3g}")
    if len(failed) > MAX_LISTED:
        lines.append(f"... and {len(failed) - MAX_LISTED} more (see the CSV)")
    exact = rows[(rows["check"] == "exactness") & (rows["verdict"] != "untested")]
    tv = pd.to_numeric(exact["min_detectable_tv"], errors="coerce")
    if tv.notna().any():
        lines.append(f"exactness detects TV ≥ {tv.median():.3g} (median over positions), power 0.999")
    ax.text(0, 1, "\n".join(lines), va="top", ha="left", fontsize=9, family="monospace",
            color="tab:red" if len(failed) else "black", transform=ax.transAxes)
