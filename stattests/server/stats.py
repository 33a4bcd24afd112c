"""Two-sample statistics for a server: is the law with speculation on the law with it off?

A homogeneity chi-square over many contexts at once. Each observation is a
``(group, category, arm)`` triple: the group is a context (a prompt, or a prompt and the
tokens before a position), the category what was drawn there (a whole sequence, or the
next token), the arm 0 (baseline) or 1 (candidate). Within each group, categories that
are too rare to be tested on their own share one bin; the groups' statistics and degrees
of freedom add up to one test. Pooling is decided by the arms' *combined* counts, which
carry no information about a difference between the arms, so the test keeps its level.

Same grammar and power discipline as :mod:`specgauge.stattests.core.statistics`:
:func:`homogeneity` returns a :class:`TestResult` with the smallest TV it detects with
probability ``1 - false_pass_rate``; :func:`min_discrepancy_of_homogeneity` and
:func:`min_num_samples_for_homogeneity` are its companions.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from specgauge.errors import InvalidDistributionError
from specgauge.stattests.core.statistics import (DEFAULT_FALSE_FAIL, DEFAULT_FALSE_PASS, TestResult,
                                             min_discrepancy_of_goodness_of_fit)

MIN_EXPECTED_2S = 5.0
MIN_EXPECTED_1S = 10.0  # as the chain gate's goodness of fit


def _unit_tv(df: int, false_fail_rate: float, false_pass_rate: float) -> float:
    """TV detectable from one effective draw on ``df`` degrees of freedom (scale by 1/√n).

    The same non-central chi-square power calculation as :func:`goodness_of_fit`:
    λ = n_eff Σ δ²/m ≥ 4 n_eff TV², with n_eff = n_a n_b / (n_a + n_b) for two samples.
    """
    uniform = np.full(df + 1, 1.0 / (df + 1))
    return min_discrepancy_of_goodness_of_fit(1, uniform, false_fail_rate=false_fail_rate,
                                              false_pass_rate=false_pass_rate, min_expected=0.0, proven=False)


def min_discrepancy_of_homogeneity(
    n_eff: float, df: int, *, false_fail_rate: float = DEFAULT_FALSE_FAIL,
    false_pass_rate: float = DEFAULT_FALSE_PASS,
) -> float:
    """Smallest TV (sample-weighted mean over the groups) :func:`homogeneity` detects: O(√(df / n_eff)).

    ``n_eff`` is Σ over groups of n_a n_b / (n_a + n_b): half the per-arm count for equal arms.
    """
    if df <= 0 or n_eff <= 0:
        return math.inf
    return _unit_tv(int(df), false_fail_rate, false_pass_rate) / math.sqrt(n_eff)


def min_num_samples_for_homogeneity(
    tv: float, probs: np.ndarray, *, groups: int = 1, false_fail_rate: float = DEFAULT_FALSE_FAIL,
    false_pass_rate: float = DEFAULT_FALSE_PASS, min_expected: float = MIN_EXPECTED_2S,
) -> int:
    """Draws per arm and per group for :func:`homogeneity` to detect ``tv``: O(df / tv²).

    ``probs`` is the law of one group's categories (a pilot run's frequencies will do);
    categories it expects fewer than ``min_expected`` times per arm are pooled, as the test
    pools them. With ``groups`` groups of the same size the degrees of freedom and the
    effective sample add up, so the count per group falls roughly as 1/groups.
    """
    if not tv > 0:
        raise InvalidDistributionError(f"tv must be positive, got {tv!r}")
    probs = np.sort(np.asarray(probs, dtype=np.float64).ravel())[::-1]
    probs = probs[probs > 0] / probs.sum()
    n, df = 2, max(probs.size - 1, 1)
    for _ in range(20):  # pooling depends on n: iterate to a fixed point
        n_new = max(2, math.ceil(2.0 * (_unit_tv(df * groups, false_fail_rate, false_pass_rate) / tv) ** 2 / groups))
        common = int((n_new * probs >= min_expected).sum())
        rest = probs[common:].sum() * n_new
        df_new = max(common + (1 if rest >= min_expected else 0) - 1, 1)
        if (n_new, df_new) == (n, df):
            break
        n, df = n_new, df_new
    return n


def homogeneity(
    group: np.ndarray, category: np.ndarray, arm: np.ndarray, *,
    false_fail_rate: float = DEFAULT_FALSE_FAIL, false_pass_rate: float = DEFAULT_FALSE_PASS,
    min_expected: float = MIN_EXPECTED_2S, test: str = "homogeneity",
) -> TestResult:
    """Chi-square that arm 0 and arm 1 draw each group's categories from the same law.

    ``group``, ``category``: integer labels per observation; ``arm``: 0 or 1. Groups seen in
    one arm only carry no evidence and are left out. ``details`` carries the measured TV
    (sample-weighted mean over groups of the empirical TV over the tested bins, still biased
    upward by noise, by about √(bins / n)), the number of groups tested and the effective
    sample ``n_eff``.
    """
    group = np.asarray(group, dtype=np.int64).ravel()
    category = np.asarray(category, dtype=np.int64).ravel()
    arm = np.asarray(arm, dtype=np.int64).ravel()
    if not group.shape == category.shape == arm.shape:
        raise InvalidDistributionError(
            f"group, category and arm must have one entry per observation: {group.shape}, {category.shape}, {arm.shape}")
    if arm.size and not np.isin(arm, (0, 1)).all():
        raise InvalidDistributionError(f"arm must be 0 or 1, got {np.unique(arm)[:5]}")
    return _homogeneity(group, category, arm, false_fail_rate, false_pass_rate, min_expected, test)


def _homogeneity(group, category, arm, false_fail_rate, false_pass_rate, min_expected, test) -> TestResult:
    # cells: (group, category) with counts per arm
    cells, cell_of = np.unique(np.stack([group, category]), axis=1, return_inverse=True)
    cell_of = cell_of.ravel()
    n_cells = cells.shape[1]
    a = np.bincount(cell_of, weights=arm == 0, minlength=n_cells)
    b = np.bincount(cell_of, weights=arm == 1, minlength=n_cells)
    g = np.unique(cells[0], return_inverse=True)[1].ravel()
    n_groups = int(g.max()) + 1 if g.size else 0
    na = np.bincount(g, weights=a, minlength=n_groups)
    nb = np.bincount(g, weights=b, minlength=n_groups)
    live = (na[g] > 0) & (nb[g] > 0)
    a, b, g = a[live], b[live], g[live]
    total = na + nb
    share = np.minimum(na, nb) / np.where(total > 0, total, 1)
    m = a + b
    rare = m * share[g] < min_expected
    # rare cells of a group share one bin; if that bin is itself too small, it joins the
    # group's smallest common cell
    rare_mass = np.bincount(g[rare], weights=m[rare], minlength=n_groups)
    weak_pool = (rare_mass * share < min_expected) & (rare_mass > 0)
    common_idx = np.flatnonzero(~rare)
    order = common_idx[np.lexsort((m[common_idx], g[common_idx]))]
    first_groups, first_pos = np.unique(g[order], return_index=True)
    smallest = np.full(n_groups, -1)
    smallest[first_groups] = order[first_pos]
    bin_id = np.arange(a.size)
    pooled_target = np.where(weak_pool[g] & (smallest[g] >= 0), smallest[g], -1 - g)  # -1-g: the group's pool
    bin_id = np.where(rare, pooled_target, bin_id)
    bin_of = np.unique(bin_id, return_inverse=True)[1].ravel()
    n_bins = int(bin_of.max()) + 1 if bin_of.size else 0
    ab = np.bincount(bin_of, weights=a, minlength=n_bins)
    bb = np.bincount(bin_of, weights=b, minlength=n_bins)
    bin_group = np.zeros(n_bins, dtype=np.int64)
    bin_group[bin_of] = g
    mb = ab + bb
    ea = na[bin_group] * mb / total[bin_group]
    eb = nb[bin_group] * mb / total[bin_group]
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(ea > 0, (ab - ea) ** 2 / ea, 0.0) + np.where(eb > 0, (bb - eb) ** 2 / eb, 0.0)
    bins_per_group = np.bincount(bin_group, minlength=n_groups)
    tested = bins_per_group >= 2
    df = int((bins_per_group[tested] - 1).sum())
    statistic = float(terms[tested[bin_group]].sum())
    pvalue = float(stats.chi2.sf(statistic, df)) if df > 0 else 1.0
    n_eff = float((na * nb / np.where(total > 0, total, 1))[tested].sum())
    with np.errstate(invalid="ignore", divide="ignore"):  # on the tested bins: pooling tames the small-count bias
        tv_group = 0.5 * np.bincount(bin_group, weights=np.abs(ab / na[bin_group] - bb / nb[bin_group]),
                                     minlength=n_groups)
    weight = total * tested
    measured = float((tv_group * weight).sum() / weight.sum()) if weight.sum() > 0 else 0.0
    details = {"measured_tv": measured, "groups": float(tested.sum()), "n_eff": n_eff,
               "n_baseline": float(na[tested].sum()), "n_candidate": float(nb[tested].sum())}
    return TestResult(test, statistic, pvalue, int(total[tested].sum()), false_fail_rate,
                      min_discrepancy_of_homogeneity(n_eff, df, false_fail_rate=false_fail_rate,
                                                     false_pass_rate=false_pass_rate), df, details)


# ---------------------------------------------------------------- one sample: a known law per context


def min_discrepancy_of_conditional_fit(
    n: int, df: int, *, false_fail_rate: float = DEFAULT_FALSE_FAIL, false_pass_rate: float = DEFAULT_FALSE_PASS,
) -> float:
    """Smallest sample-weighted RMS over contexts of the binned TV that
    :func:`conditional_goodness_of_fit` detects: O(√(df / n)).

    λ = Σ_c n_c Σ_b δ_cb² / p_cb ≥ 4 Σ_c n_c TV_c² (Cauchy–Schwarz per context), so a
    discrepancy whose per-context TVs have a weighted RMS of t gives λ ≥ 4 n t².
    """
    if df <= 0 or n <= 0:
        return math.inf
    return _unit_tv(int(df), false_fail_rate, false_pass_rate) / math.sqrt(n)


def min_num_samples_for_conditional_fit(
    tv: float, bins: int, *, contexts: int = 1, false_fail_rate: float = DEFAULT_FALSE_FAIL,
    false_pass_rate: float = DEFAULT_FALSE_PASS,
) -> int:
    """Draws per context for :func:`conditional_goodness_of_fit` over ``contexts`` contexts of
    ``bins`` bins each to detect a binned TV of ``tv`` in every context: O(bins / tv²)."""
    if not tv > 0:
        raise InvalidDistributionError(f"tv must be positive, got {tv!r}")
    df = max(bins - 1, 1) * max(contexts, 1)
    return max(1, math.ceil((_unit_tv(df, false_fail_rate, false_pass_rate) / tv) ** 2 / max(contexts, 1)))


def conditional_goodness_of_fit(
    context: np.ndarray, cell: np.ndarray, probs: np.ndarray, *,
    false_fail_rate: float = DEFAULT_FALSE_FAIL, false_pass_rate: float = DEFAULT_FALSE_PASS,
    min_expected: float = MIN_EXPECTED_1S, test: str = "goodness_of_fit",
) -> TestResult:
    """Pearson chi-square that each context's draws follow that context's known law, summed over contexts.

    ``context[N]`` labels each draw's context (0..C-1, e.g. a prompt and the tokens emitted
    before the position), ``cell[N]`` what was drawn (0..B-1: one of the law's top tokens,
    or the last cell, the remainder), ``probs[C, B]`` each context's law over the cells.
    Within a context, cells expected fewer than ``min_expected`` times share one bin (the
    expectations come from the null alone, so pooling keeps the level); contexts left with
    one bin add nothing. A draw on a cell of probability zero fails at once. ``details``:
    the sample-weighted mean binned TV (biased upward by noise), contexts tested and
    impossible draws.
    """
    context = np.asarray(context, dtype=np.int64).ravel()
    cell = np.asarray(cell, dtype=np.int64).ravel()
    probs = np.asarray(probs, dtype=np.float64)
    if context.shape != cell.shape or probs.ndim != 2:
        raise InvalidDistributionError(f"context {context.shape} and cell {cell.shape} must match; probs must be [C, B]")
    if context.size and (context.max() >= probs.shape[0] or cell.max() >= probs.shape[1] or min(context.min(), cell.min()) < 0):
        raise InvalidDistributionError("context or cell label outside probs")
    counts = np.zeros_like(probs)
    np.add.at(counts, (context, cell), 1.0)
    return _conditional_fit(counts, probs, false_fail_rate, false_pass_rate, min_expected, test)


def _conditional_fit(counts, probs, false_fail_rate, false_pass_rate, min_expected, test) -> TestResult:
    n_c = counts.sum(axis=1)
    probs = probs / np.where(probs.sum(axis=1, keepdims=True) > 0, probs.sum(axis=1, keepdims=True), 1.0)
    impossible = float(counts[probs <= 0].sum())
    expected = n_c[:, None] * probs
    rare = (expected < min_expected) & (probs > 0)
    # rare cells of a context share one bin, placed in column B; a pool still too small joins the
    # context's smallest common cell
    pool_obs, pool_exp = (counts * rare).sum(axis=1), (expected * rare).sum(axis=1)
    common = (~rare) & (probs > 0)
    weak = (pool_exp < min_expected) & (pool_exp > 0) & common.any(axis=1)
    smallest = np.argmin(np.where(common, expected, np.inf), axis=1)
    rows = np.flatnonzero(weak)
    obs = np.where(common, counts, 0.0)
    exp = np.where(common, expected, 0.0)
    obs[rows, smallest[rows]] += pool_obs[rows]
    exp[rows, smallest[rows]] += pool_exp[rows]
    keep_pool = ~weak & (pool_exp > 0)
    obs = np.column_stack([obs, np.where(keep_pool, pool_obs, 0.0)])
    exp = np.column_stack([exp, np.where(keep_pool, pool_exp, 0.0)])
    bins = (exp > 0).sum(axis=1)
    tested = bins >= 2
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(exp > 0, (obs - exp) ** 2 / exp, 0.0)
        tv_c = 0.5 * np.abs(np.where(exp > 0, (obs - exp) / n_c[:, None], 0.0)).sum(axis=1)
    df = int((bins[tested] - 1).sum())
    statistic = float(terms[tested].sum())
    pvalue = float(stats.chi2.sf(statistic, df)) if df > 0 else 1.0
    n = int(n_c[tested].sum())
    measured = float((tv_c * n_c)[tested].sum() / n) if n else 0.0
    if impossible > 0:
        statistic, pvalue = math.inf, 0.0
    details = {"measured_tv": measured, "contexts": float(tested.sum()), "impossible_hits": impossible}
    return TestResult(test, statistic, pvalue, n, false_fail_rate,
                      min_discrepancy_of_conditional_fit(n, df, false_fail_rate=false_fail_rate,
                                                         false_pass_rate=false_pass_rate), df, details)
