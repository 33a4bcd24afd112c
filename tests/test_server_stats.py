"""The two-sample homogeneity test: its level, its power, and its sample-size companion."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from specgauge.errors import InvalidDistributionError
from specgauge.stattests.server.stats import homogeneity, min_discrepancy_of_homogeneity, min_num_samples_for_homogeneity

GROUPS, CATEGORIES = 5, 30


def _laws(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).dirichlet(np.full(CATEGORIES, 0.3), size=GROUPS)


def _draw(rng, laws: np.ndarray, n: int, arm: int):
    group = np.repeat(np.arange(len(laws)), n)
    category = (rng.random((len(laws), n, 1)) > np.cumsum(laws, axis=1)[:, None, :]).sum(axis=2).ravel()
    return group, np.minimum(category, laws.shape[1] - 1), np.full(group.size, arm)


def _test(rng, a: np.ndarray, b: np.ndarray, n: int, **kw):
    parts = [_draw(rng, a, n, 0), _draw(rng, b, n, 1)]
    return homogeneity(*(np.concatenate(x) for x in zip(*parts)), **kw)


def test_pvalues_are_uniform_under_the_null():
    rng, laws = np.random.default_rng(1), _laws()
    pvalues = [_test(rng, laws, laws, 300).pvalue for _ in range(300)]
    assert stats.kstest(pvalues, "uniform").pvalue > 1e-3  # rare categories pooled: the level holds


def test_detects_the_tv_its_companion_sized_it_for():
    rng, laws = np.random.default_rng(2), _laws()
    tv = 0.15
    colder = laws ** 2
    colder /= colder.sum(axis=1, keepdims=True)
    mix = 1 - tv / (0.5 * np.abs(colder - laws).sum(axis=1))  # move exactly TV 0.15 per group
    shifted = mix[:, None] * laws + (1 - mix[:, None]) * colder
    n = min_num_samples_for_homogeneity(tv, laws.mean(axis=0), groups=GROUPS)
    results = [_test(rng, laws, shifted, n) for _ in range(5)]
    assert all(not r.passed for r in results), [r.describe() for r in results]
    assert all(r.min_detectable_tv <= tv * 1.2 for r in results)
    assert _test(rng, laws, laws, n).passed


def test_detectable_tv_scales_as_one_over_root_n():
    assert min_discrepancy_of_homogeneity(400, 10) == pytest.approx(min_discrepancy_of_homogeneity(100, 10) / 2)
    assert min_num_samples_for_homogeneity(0.05, _laws()[0]) > 3.5 * min_num_samples_for_homogeneity(0.1, _laws()[0])


def test_groups_seen_in_one_arm_only_are_left_out():
    result = homogeneity([0, 0, 1, 1], [0, 1, 0, 1], [0, 0, 0, 0])
    assert result.df == 0 and result.passed and result.n == 0


def test_refuses_bad_arms():
    with pytest.raises(InvalidDistributionError, match="arm must be 0 or 1"):
        homogeneity([0, 0], [0, 1], [0, 2])
