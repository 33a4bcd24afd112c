"""The planner's intervals (``reports.planning.intervals``): split conformal per group, widened and
never borrowed where a group is small, α's spread on speculative figures only."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest

from specgauge.reports.planning import intervals as I


def _residuals(values, kind="dense", profile="prior", load="1", source=None) -> pd.DataFrame:
    n = len(values)
    return pd.DataFrame({"source": source or [f"[s{i}]" for i in range(n)], "kind": kind, "profile": profile,
                         "load": load, "residual": values, "draft_kind": "eagle", "alpha": np.nan})


def test_the_quantile_is_the_conformal_rank_and_infinite_below_it():
    r = np.arange(1, 20) / 100.0                     # 19 residuals: rank ceil(20 * 0.9) = 18
    assert I.conformal_q(r, 0.9) == pytest.approx(0.18)
    assert I.needed_rows(0.9) == 9
    assert math.isfinite(I.conformal_q(r[:9], 0.9)) and I.conformal_q(r[:8], 0.9) == math.inf


def test_a_small_group_widens_to_its_parent_and_never_below_its_own_residuals():
    big = _residuals(list(np.linspace(0.01, 0.1, 20)), load="over 16")
    small = _residuals([0.5, 0.02], load="1", source=["[a]", "[b]"])
    band = I.band(I.Group("dense", "prior", "1"), 0.9, pd.concat([big, small], ignore_index=True))
    assert band.group_used == I.Group("dense", "prior", None)
    assert band.q == pytest.approx(0.5)              # the group's own 0.5, not the tighter parent's
    assert "only 2 validation rows" in band.reason
    alone = I.band(I.Group("moe", "prior", "1"), 0.9, small)   # nothing anywhere is enough: unbounded, said
    assert alone.q == math.inf and "the 9 a 90% interval needs: unbounded" in alone.reason


def _coverage(rng, method_level: float, n_sources=40, rows=3, trials=200) -> tuple[int, int]:
    """Held-out coverage of a 90 % band on exchangeable sources (each source's rows share an offset)."""
    hits = total = 0
    for _ in range(trials):
        offsets = rng.normal(0, 0.2, n_sources)
        values = (offsets[:, None] + rng.normal(0, 0.05, (n_sources, rows))).ravel()
        frame = _residuals(list(values), source=[f"[{i}]" for i in range(n_sources) for _ in range(rows)])
        rest, held = frame[frame["source"] != "[0]"], frame[frame["source"] == "[0]"]
        q = I.band(I.Group("dense", "prior", "1"), method_level, rest).q
        hits += int((held["residual"].abs() <= q).sum())
        total += len(held)
    return hits, total


def test_held_out_coverage_meets_the_nominal_level_and_a_too_narrow_band_fails():
    rng = np.random.default_rng(7)
    hits, n = _coverage(rng, 0.9)
    assert binomtest(hits, n, 0.9, alternative="less").pvalue > 1e-3       # reference: not below 90 %
    hits, n = _coverage(rng, 0.6)                                         # known-bad: a 60 % band called 90 %
    assert binomtest(hits, n, 0.9, alternative="less").pvalue < 1e-3


def test_alpha_moves_speculative_figures_only_and_in_the_right_direction():
    frame = pd.DataFrame({"target": ["qwen3-32b", "qwen3-32b"], "gamma": [3, 0], "alpha": [0.8, 0.8],
                          "draft_kind": ["model", "none"], "batch_size": [8, 8], "mean_batch_size": [8.0, 8.0],
                          "step_model_source": ["datasheet prior", "datasheet prior"],
                          "speedup_vs_no_spec": [1.5, 1.0], "mean_tpot_ms": [20.0, 30.0],
                          "no_spec_mean_tpot_ms": [30.0, 30.0]})
    wide = I.add_intervals(frame)
    narrow = I.add_intervals(frame, alpha_measured=True)
    assert (wide["speedup_vs_no_spec_lo"] <= narrow["speedup_vs_no_spec_lo"]).all()
    assert wide.loc[0, "speedup_vs_no_spec_hi"] > narrow.loc[0, "speedup_vs_no_spec_hi"]
    assert wide.loc[1, "speedup_vs_no_spec_hi"] == pytest.approx(narrow.loc[1, "speedup_vs_no_spec_hi"])  # γ = 0
    assert wide.loc[0, "no_spec_mean_tpot_ms_hi"] == pytest.approx(narrow.loc[0, "no_spec_mean_tpot_ms_hi"])
    for metric in ("speedup_vs_no_spec", "mean_tpot_ms"):
        assert (wide[f"{metric}_lo"] <= wide[metric]).all() and (wide[metric] <= wide[f"{metric}_hi"]).all()
    spread = I.add_intervals(frame, alpha_measured=True, alpha_spread=(0.78, 0.82))
    assert narrow.loc[0, "speedup_vs_no_spec_hi"] < spread.loc[0, "speedup_vs_no_spec_hi"] < wide.loc[0, "speedup_vs_no_spec_hi"]
    assert "α a placeholder" in wide.loc[0, "interval_note"] and "α given" in narrow.loc[0, "interval_note"]


def test_alpha_factors_are_the_tokens_a_pass_at_the_range_ends():
    lo, hi = I.alpha_factors(0.8, 3, 0.6, 0.9)
    assert lo == pytest.approx(I.tokens_per_pass(0.6, 3) / I.tokens_per_pass(0.8, 3))
    assert hi == pytest.approx(I.tokens_per_pass(0.9, 3) / I.tokens_per_pass(0.8, 3))
    assert I.alpha_factors(0.8, 0, 0.6, 0.9) == (1.0, 1.0)


def test_every_shipped_draft_kind_has_a_published_alpha_range():
    for kind in ("model", "eagle", "mtp", "ngram"):
        low, high, why = I.alpha_range(kind)
        assert 0 < low < high < 1, why


def test_a_row_group_reads_the_target_profile_and_the_load():
    row = pd.Series({"target": "deepseek-v3", "step_model_source": "datasheet prior", "mean_batch_size": 40.0,
                     "batch_size": 64})
    assert I.row_group(row) == I.Group("moe", "prior", "over 16")
    row = pd.Series({"target": "llama-3.1-8b", "step_model_source": "SpecDecode-Bench fit", "batch_size": 1})
    assert I.row_group(row) == I.Group("dense", "calibrated", "1")
    assert I.format_interval(1.4567, 1.2, math.inf) == "1.46 [1.2, inf]"
