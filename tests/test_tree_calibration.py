"""The tree checks' own calibration: on an exact reference their p-values are Uniform(0, 1).

Second level, as for chains (tests/test_calibration.py): 40 independent runs of SpecInfer's
reference on a narrow tree and on heterogeneous rows, each check's p-values pooled and
tested for uniformity (KS). The row-by-row randomized PITs (sibling rounds, accepted
length) are exact whatever the rows' laws; the summed per-context chi-squares are
asymptotic. The independence check is left out: its p-values are discrete and pile up at
1 when the first tokens take few values (conservative, never anti-conservative).
"""

from __future__ import annotations

import numpy as np
import pytest

from specgauge.fixtures.trees import TREE_FIXTURES
from specgauge.stattests.chain.checks import Rates
from specgauge.stattests.core.statistics import pvalue_uniformity
from specgauge.stattests.tree.checks import TREE_CHECKS
from specgauge.stattests.tree.harness import TreeRunConfig, run_tree_fixture
from specgauge.stattests.tree.reference import SpecInferDecoder
from specgauge.stattests.tree.zoo import ResidualNotUpdated

CHECKS = ("exactness", "pit-id", "bonus", "sibling-rounds", "accepted-length", "law")
RUNS = 40


def _pvalues(decoder, fixture: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {c: [] for c in CHECKS}
    for seed in range(RUNS):
        run = run_tree_fixture(decoder, TREE_FIXTURES[fixture], TreeRunConfig(rows=3000, seed=seed))
        for name in CHECKS:
            out[name] += [r.pvalue for r in TREE_CHECKS[name].run(run, Rates(1e-6, 1e-3)).values() if r.n]
    return out


@pytest.mark.parametrize("fixture", ["narrow", "heterogeneous"])
def test_reference_pvalues_are_uniform(fixture):
    for name, values in _pvalues(SpecInferDecoder(), fixture).items():
        result = pvalue_uniformity(np.array(values), false_fail_rate=1e-3)
        assert result.passed, f"{name} on {fixture}: {result.describe()}"


def test_the_second_level_sees_a_biased_rule():
    values = _pvalues(ResidualNotUpdated(), "narrow")["sibling-rounds"]
    assert not pvalue_uniformity(np.array(values), false_fail_rate=1e-3).passed
