"""SafeAILab's EAGLE-1 tree verifier (eagle-llm 1.2.1) certified on CPU through the tree contract."""

from __future__ import annotations

import random

import numpy as np
import pytest

from specgauge.stattests.tree.checks import TreeCertConfig, certify_tree

try:
    from specgauge.stattests.decoders.eagle import EagleDecoder, EagleTemperatureDecoder, tree_choices
    EagleDecoder()
except ImportError as exc:  # the import that failed is the reason
    pytest.skip(str(exc), allow_module_level=True)

FIXTURES = ["narrow", "eagle-choices", "equal-siblings", "zeros", "greedy"]


def test_choice_lists_follow_eagles_layout():
    assert tree_choices(np.array([-1, -1, 0, 0, 2])) == [[0], [1], [0, 0], [0, 1], [0, 0, 0]]


def test_python_random_is_seeded_from_the_rng_and_restored():
    from specgauge.fixtures.trees import TREE_FIXTURES
    from specgauge.stattests.tree.harness import draft_batch

    fx = TREE_FIXTURES["narrow"]
    b = draft_batch(fx, "without-replacement", 64, np.random.default_rng(1))
    random.seed(123)
    expected_next = random.Random(123).random()
    outs = [EagleDecoder().verify_tree(fx.parents, b.tokens, b.draft_probs, b.target_probs,
                                       np.random.default_rng(7)) for _ in range(2)]
    assert np.array_equal(outs[0], outs[1])
    assert random.random() == expected_next


@pytest.mark.slow
def test_eagle_is_exact_and_accepts_as_the_without_replacement_law():
    """About 6k trees a fixture (a Python call each): detects TV 0.06 at the root."""
    cert = certify_tree(EagleDecoder(), TreeCertConfig(tv=0.06), fixtures=FIXTURES)
    assert cert.verdicts["exact"], cert.summary()
    assert cert.verdicts["optimal_acceptance"], cert.summary()  # the law of recursive rejection w/o replacement


@pytest.mark.slow
def test_eagle_bonus_ignores_the_temperature():
    cert = certify_tree(EagleTemperatureDecoder(), TreeCertConfig(tv=0.06), fixtures=["narrow", "bushy"])
    assert "bonus" in cert.failed_checks, cert.summary()
