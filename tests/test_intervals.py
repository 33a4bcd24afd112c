"""The planner's intervals (``reports.planning.intervals``): split conformal per pool (a ratio's never
from absolute figures' residuals), widened and never borrowed where a pool is small, α's spread on
speculative figures only, and every end inside what the deployment can do."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binomtest

from specgauge.reports.planning import intervals as I


def _residuals(values, figure="ratio", kind="dense", profile="prior", load="1", source=None,
               alpha_from="run") -> pd.DataFrame:
    n = len(values)
    return pd.DataFrame({"source": source or [f"[s{i}]" for i in range(n)], "figure": figure, "kind": kind,
                         "profile": profile, "load": load, "residual": values, "draft_kind": "eagle",
                         "alpha": np.nan, "alpha_from": alpha_from})


def test_the_quantile_is_the_conformal_rank_and_infinite_below_it():
    r = np.arange(1, 20) / 100.0                     # 19 residuals: rank ceil(20 * 0.9) = 18
    assert I.conformal_q(r, 0.9) == pytest.approx(0.18)
    assert I.needed_rows(0.9) == 9
    assert math.isfinite(I.conformal_q(r[:9], 0.9)) and I.conformal_q(r[:8], 0.9) == math.inf


def test_a_small_pool_widens_to_its_parent_and_never_below_its_own_residuals():
    big = _residuals(list(np.linspace(0.01, 0.1, 20)), load="over 16")
    small = _residuals([0.5, 0.02], load="1", source=["[a]", "[b]"])
    band = I.band(I.Group("ratio", "prior", "dense", "1"), 0.9, pd.concat([big, small], ignore_index=True))
    assert band.group_used == I.Group("ratio", "prior", "dense", None)
    assert band.q == pytest.approx(0.5)              # the pool's own 0.5, not the tighter parent's
    assert "only 2 validation rows" in band.reason
    alone = I.band(I.Group("ratio", "prior", "moe", "1"), 0.9, small)   # nothing anywhere is enough: unbounded, said
    assert alone.q == math.inf and "the 9 a 90% interval needs: unbounded" in alone.reason


def test_a_ratio_never_takes_an_absolute_figures_residuals():
    """Speed-ups with too few residuals of their own stay unbounded rather than borrow the absolute
    figures' pool; the absolute pool is what it is without the speed-ups."""
    absolute = _residuals(list(np.linspace(0.5, 1.0, 30)), figure="absolute")
    speedups = _residuals([0.05, 0.1], figure="ratio")
    both = pd.concat([absolute, speedups], ignore_index=True)
    assert I.band(I.Group("ratio", "prior", "dense", "1"), 0.9, both).q == math.inf
    assert I.band(I.Group("absolute", "prior", "dense", "1"), 0.9, both).q == pytest.approx(
        I.conformal_q(absolute["residual"].to_numpy()))
    wide_ratio = pd.concat([both, _residuals(list(np.linspace(0.01, 0.2, 20)), figure="ratio")], ignore_index=True)
    q = I.band(I.Group("ratio", "prior", "dense", "1"), 0.9, wide_ratio).q
    assert q < 0.5                                   # from the speed-ups alone


def test_a_pool_steps_down_to_less_knowledge_never_up():
    """Own runs and a speculative run with too few residuals take the calibrated pool, then the prior's."""
    assert I.Group("ratio", "runs", None, None).parent() == I.Group("ratio", "calibrated", None, None)
    assert I.Group("ratio", "calibrated", None, None).parent() == I.Group("ratio", "prior", None, None)
    assert I.Group("ratio", "prior", None, None).parent() == I.Group("ratio", None, None, None)
    assert I.Group("ratio", None, None, None).parent() is None
    assert (I.profile_of(False, True), I.profile_of(True, False), I.profile_of(True, True)) == (
        "prior", "calibrated", "runs")


def test_a_residual_whose_alpha_came_from_another_source_is_in_no_pool():
    clean = _residuals(list(np.linspace(0.01, 0.1, 20)))
    borrowed = _residuals([2.0] * 5, alpha_from="other")
    both = pd.concat([clean, borrowed], ignore_index=True)
    assert I.band(I.Group("ratio", "prior", "dense", "1"), 0.9, both).q == pytest.approx(
        I.band(I.Group("ratio", "prior", "dense", "1"), 0.9, clean).q)


def _coverage(rng, method_level: float, n_sources=40, rows=3, trials=200) -> tuple[int, int]:
    """Held-out coverage of a 90 % band on exchangeable sources (each source's rows share an offset)."""
    hits = total = 0
    for _ in range(trials):
        offsets = rng.normal(0, 0.2, n_sources)
        values = (offsets[:, None] + rng.normal(0, 0.05, (n_sources, rows))).ravel()
        frame = _residuals(list(values), source=[f"[{i}]" for i in range(n_sources) for _ in range(rows)])
        rest, held = frame[frame["source"] != "[0]"], frame[frame["source"] == "[0]"]
        q = I.band(I.Group("ratio", "prior", "dense", "1"), method_level, rest).q
        hits += int((held["residual"].abs() <= q).sum())
        total += len(held)
    return hits, total


def test_held_out_coverage_meets_the_nominal_level_and_a_too_narrow_band_fails():
    rng = np.random.default_rng(7)
    hits, n = _coverage(rng, 0.9)
    assert binomtest(hits, n, 0.9, alternative="less").pvalue > 1e-3       # reference: not below 90 %
    hits, n = _coverage(rng, 0.6)                                         # known-bad: a 60 % band called 90 %
    assert binomtest(hits, n, 0.9, alternative="less").pvalue < 1e-3


def _plan_rows(**extra) -> pd.DataFrame:
    frame = pd.DataFrame({"target": ["qwen3-32b", "qwen3-32b"], "gpu": ["h200", "h200"], "tp": [1, 1], "dp": [1, 1],
                          "gamma": [3, 0], "alpha": [0.8, 0.8], "draft_kind": ["model", "none"], "batch_size": [8, 8],
                          "mean_batch_size": [8.0, 8.0], "step_model_source": ["datasheet prior", "datasheet prior"],
                          "speedup_vs_no_spec": [1.5, 1.0], "mean_tpot_ms": [20.0, 30.0],
                          "no_spec_mean_tpot_ms": [30.0, 30.0]})
    return frame.assign(**extra)


def test_alpha_moves_speculative_figures_only_and_in_the_right_direction():
    frame = _plan_rows()
    wide = I.add_intervals(frame)
    narrow = I.add_intervals(frame, alpha_measured=True)
    # a measured α on the prior: the same pools, without α's term
    assert wide.loc[0, "speedup_vs_no_spec_hi"] > narrow.loc[0, "speedup_vs_no_spec_hi"]
    assert wide.loc[0, "no_spec_mean_tpot_ms_hi"] == pytest.approx(narrow.loc[0, "no_spec_mean_tpot_ms_hi"])
    for metric in ("speedup_vs_no_spec", "mean_tpot_ms"):
        assert (wide[f"{metric}_lo"] <= wide[metric]).all() and (wide[metric] <= wide[f"{metric}_hi"]).all()
    spread = I.add_intervals(frame, alpha_measured=True, alpha_spread=(0.78, 0.82))
    assert narrow.loc[0, "speedup_vs_no_spec_hi"] <= spread.loc[0, "speedup_vs_no_spec_hi"] <= wide.loc[0, "speedup_vs_no_spec_hi"]
    assert "α a placeholder" in wide.loc[0, "interval_note"] and "α given" in narrow.loc[0, "interval_note"]


def test_a_speedup_interval_stays_under_gamma_plus_one_and_gamma_0_has_none():
    """Known-bad first: the band alone would put the upper end past γ + 1 (the old planner printed
    7.83 at γ 5); the bounds cap it, and γ 0's speed-up of 1 by construction gets lo = hi = 1."""
    frame = _plan_rows(speedup_vs_no_spec=[3.5, 1.0])
    wide = pd.concat([_residuals([1.5] * 20, figure=f, profile=p) for f in ("ratio", "absolute")
                      for p in ("prior",)], ignore_index=True).assign(load="2-16")
    out = I.add_intervals(frame, residuals=wide)
    assert 3.5 * math.exp(1.5) > 4.0                                     # the band alone would pass γ + 1
    assert out.loc[0, "speedup_vs_no_spec_hi"] == pytest.approx(4.0)
    assert out.loc[1, "speedup_vs_no_spec_lo"] == out.loc[1, "speedup_vs_no_spec_hi"] == 1.0
    assert "1 by construction" in out.loc[1, "interval_note"]


def test_a_tpot_interval_stays_above_the_weights_read_time_at_peak_bandwidth():
    from specgauge.simulator.profiles import load_gpu, load_model

    model, gpu = load_model("qwen3-32b"), load_gpu("h200")
    floor_ms = model.linear_params * model.dtype_bytes / (gpu.bandwidth_tb_s * 1e12) * 1e3
    frame = _plan_rows(mean_tpot_ms=[floor_ms, floor_ms * 1.2], no_spec_mean_tpot_ms=[floor_ms * 1.2] * 2)
    wide = pd.concat([_residuals([1.5] * 20, figure=f) for f in ("ratio", "absolute")], ignore_index=True)
    out = I.add_intervals(frame, residuals=wide.assign(load="2-16"))
    assert floor_ms * math.exp(-1.5) < floor_ms / 4                       # the band alone would pass the floor
    assert out.loc[0, "mean_tpot_ms_lo"] == pytest.approx(floor_ms / 4)   # γ 3: a round emits at most 4 tokens
    assert out.loc[1, "mean_tpot_ms_lo"] == pytest.approx(floor_ms)
    assert out.loc[0, "no_spec_mean_tpot_ms_lo"] == pytest.approx(floor_ms)


def test_at_batch_1_a_speedup_stays_under_what_the_drafts_cost_allows():
    frame = _plan_rows(speedup_vs_no_spec=[2.5, 1.0], batch_size=[1, 1], mean_batch_size=[1.0, 1.0],
                       draft_cost_ratio_b1=[0.2, np.nan])
    wide = pd.concat([_residuals([1.5] * 20, figure=f) for f in ("ratio", "absolute")], ignore_index=True)
    out = I.add_intervals(frame, residuals=wide)
    assert out.loc[0, "speedup_vs_no_spec_hi"] == pytest.approx(4 / (1 + 3 * 0.2))


def test_alpha_factors_are_the_tokens_a_pass_at_the_range_ends():
    lo, hi = I.alpha_factors(0.8, 3, 0.6, 0.9)
    assert lo == pytest.approx(I.tokens_per_pass(0.6, 3) / I.tokens_per_pass(0.8, 3))
    assert hi == pytest.approx(I.tokens_per_pass(0.9, 3) / I.tokens_per_pass(0.8, 3))
    assert I.alpha_factors(0.8, 0, 0.6, 0.9) == (1.0, 1.0)


def test_every_shipped_draft_kind_has_a_published_alpha_range():
    for kind in ("model", "eagle", "mtp", "ngram"):
        low, high, why = I.alpha_range(kind)
        assert 0 < low < high < 1, why


def test_a_row_group_reads_the_target_profile_the_load_and_what_was_given():
    row = pd.Series({"target": "deepseek-v3", "step_model_source": "datasheet prior", "mean_batch_size": 40.0,
                     "batch_size": 64})
    assert I.row_group(row, "ratio") == I.Group("ratio", "prior", "moe", "over 16")
    assert I.row_group(row, "ratio", alpha_measured=True) == I.Group("ratio", "prior", "moe", "over 16")
    row = pd.Series({"target": "llama-3.1-8b", "step_model_source": "fitted by specgauge calibrate from 3 measurements", "batch_size": 1})
    assert I.row_group(row) == I.Group("absolute", "calibrated", "dense", "1")
    assert I.row_group(row, alpha_measured=True) == I.Group("absolute", "runs", "dense", "1")
    shipped_fit = row.copy()
    shipped_fit["step_model_source"] = "published fit: SpecDecode-Bench simulator predictor.py"
    assert I.row_group(shipped_fit, alpha_measured=True) == I.Group("absolute", "prior", "dense", "1")   # not the user's
    assert I.format_interval(1.4567, 1.2, math.inf) == "1.46 [1.2, inf]"


def test_the_shipped_pools_keep_figures_and_paths_apart():
    residuals = I.shipped_residuals()
    assert set(residuals["figure"]) == {"ratio", "absolute", "tail"}
    assert set(residuals["profile"]) <= set(I.PROFILES) and set(residuals["path"]) == {"loso", "user runs"}
    ratio = residuals[residuals["figure"] == "ratio"]
    assert set(ratio["measured"]) <= {"speedup", "decode_speedup", "throughput_ratio"}


def test_a_teams_own_residuals_set_its_intervals_where_they_are_enough(tmp_path):
    """``plan --validation``: twelve runs of the team's own, each within 3 %, give a ±3 % band for
    their figure; three are too few for a 90 % quantile and leave the shipped pool, said so."""
    frame = _plan_rows()
    enough = _residuals(list(np.linspace(-0.03, 0.03, 12)), figure="absolute", load="2-16")
    ours = I.add_intervals(frame, own=enough)
    shipped = I.add_intervals(frame)
    assert ours.loc[1, "no_spec_mean_tpot_ms_hi"] == pytest.approx(30.0 * math.exp(0.03))
    assert shipped.loc[1, "no_spec_mean_tpot_ms_hi"] > ours.loc[1, "no_spec_mean_tpot_ms_hi"]
    assert "your rows, absolute figures" in ours.loc[1, "interval_note"]
    few = I.add_intervals(frame, own=enough.head(3))
    assert few.loc[1, "no_spec_mean_tpot_ms_hi"] == pytest.approx(shipped.loc[1, "no_spec_mean_tpot_ms_hi"])
    assert "your rows: 3 of this figure, 9 needed" in few.loc[1, "interval_note"]
    path = tmp_path / "mine.csv"
    enough.to_csv(path, index=False)
    assert I.read_own_residuals(str(path))["residual"].tolist() == pytest.approx(enough["residual"].tolist())


@pytest.mark.parametrize("body, words", [
    ("a,b\n1,2\n", "holds no residual rows"),
    ("source,figure,profile,kind,load,residual\n[x],speed,prior,dense,1,0.1\n", "unknown figure or profile speed"),
    ("source,figure,profile,kind,load,residual\n[x],ratio,prior,dense,1,abc\n", "every residual must be a finite"),
])
def test_a_bad_residual_file_is_refused_in_one_line_before_any_work(tmp_path, capsys, body, words):
    from specgauge.reports.cli import main

    path = tmp_path / "mine.csv"
    path.write_text(body)
    assert main(["plan", "--validation", str(path), "--gamma", "0,3", "--batch-size", "1", "--csv",
                 str(tmp_path / "p.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err and not (tmp_path / "p.csv").exists()


def test_every_note_says_the_engine_is_not_priced_apart():
    assert all(I.ENGINE_NOTE in note for note in I.add_intervals(_plan_rows())["interval_note"])


def test_knowing_more_never_borrows_a_narrower_band_than_knowing_less():
    """A calibrated dense figure with no calibrated rows does not take the all-kinds prior pool
    (narrow, from MoE rows) when the dense prior pool is wider."""
    moe = _residuals(list(np.linspace(0.01, 0.1, 20)), kind="moe")
    dense = _residuals(list(np.linspace(0.5, 0.9, 12)), kind="dense")
    both = pd.concat([moe, dense], ignore_index=True)
    prior = I.band(I.Group("ratio", "prior", "dense", "1"), 0.9, both)
    calibrated = I.band(I.Group("ratio", "calibrated", "dense", "1"), 0.9, both)
    assert I.Group("ratio", "calibrated", None, None).parent() == I.Group("ratio", "prior", None, None)
    assert I.band(I.Group("ratio", "prior", None, None), 0.9, both).q < prior.q   # the parent alone would narrow it
    assert calibrated.q == pytest.approx(prior.q)


def test_a_small_pool_borrows_only_its_own_figure_and_names_the_pool_it_borrowed():
    """Every pool the planner reads from the shipped residuals: a band too small borrows a pool of
    the same figure (never a speed-up's band for a TPOT), and ``validate``'s pool line names it."""
    from specgauge.reports.cli.validate import pool_lines

    residuals = I.shipped_residuals()
    lines = "\n".join(pool_lines(I.pool_rows(residuals), 0.9))
    for figure in I.FIGURES:
        for profile in I.PROFILES:
            for kind in ("dense", "moe"):
                for load, _ in I.LOAD_BANDS:
                    b = I.band(I.Group(figure, profile, kind, load), 0.9, residuals)
                    assert b.group_used.figure == figure
                    if b.group_used != b.group:
                        assert f"({b.group_used.label()})" in lines
