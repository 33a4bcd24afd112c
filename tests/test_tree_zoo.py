"""Tree mutants fail with their declared checks; chain decoders keep their verdicts as one-child trees."""

from __future__ import annotations

import numpy as np
import pytest

from specgauge.stattests import zoo
from specgauge.stattests.chain.checks import CHECKS
from specgauge.stattests.core.contract import ContractViolation
from specgauge.stattests.core.reference import NumpyDecoder
from specgauge.stattests.tree.checks import TreeCertConfig, certify_tree
from specgauge.stattests.core.tree_contract import check_tree_emitted, load_tree_decoder
from specgauge.stattests.tree.reference import ChainAsTree
from specgauge.stattests.tree.zoo import TREE_ZOO


@pytest.mark.parametrize("name", list(TREE_ZOO))
def test_tree_mutant_fails_its_declared_checks(name):
    mutant = TREE_ZOO[name]()
    cert = certify_tree(mutant, TreeCertConfig())
    failed = cert.failed_checks
    missing = set(mutant.expected_failed_checks) - failed
    assert not missing, f"{name}: declared checks {sorted(missing)} did not fail; failed: {sorted(failed)}"
    assert not cert.verdicts["exact"], cert.summary()  # end to end included: certify_tree runs the joint law


@pytest.mark.parametrize("name, exact", [("duplicates-skipped", False), ("specinfer", True)])
def test_certify_tree_verdict_includes_the_end_to_end_joint_law(name, exact):
    """The library's tree certificate records the suite's joint-law rows: a rule lossy only
    end to end reads "exact: NO" there, the reference "no deviation ... found" (one fixture's
    contract and one generation case keep it fast)."""
    from specgauge.stattests.core.tree_contract import load_tree_decoder

    decoder = TREE_ZOO[name]() if name in TREE_ZOO else load_tree_decoder(name)
    cert = certify_tree(decoder, TreeCertConfig(), fixtures=["narrow"], checks=["contract"],
                        generation=["bigram-v5-sparse-L3-eagle"])
    assert "generation-joint-law" in set(cert.frame["check"]), cert.summary()
    assert cert.verdicts["exact"] is exact, cert.summary()


END_TO_END = [name for name, cls in TREE_ZOO.items() if getattr(cls, "end_to_end", None)]


@pytest.mark.parametrize("name", END_TO_END)
@pytest.mark.parametrize("seed", [0, 1])
def test_tree_mutant_fails_the_end_to_end_joint_law(name, seed):
    """Whole generations with the tree drafted every round (the joint-law rows of the tree
    certificate): the worst-case identity test rejects the mutant's sequences."""
    from specgauge.fixtures.toy_lm import load_toy_lm
    from specgauge.fixtures.trees import TREE_FIXTURES
    from specgauge.stattests.chain.sequences import sequence_counts, sequence_distribution
    from specgauge.stattests.identity.instance import identity_test
    from specgauge.stattests.tree.generate import speculative_tree_generate

    pair = load_toy_lm("bigram-v5-sparse")
    exact = sequence_distribution(pair.target, pair.prompt, 3)
    result = speculative_tree_generate(pair.target, pair.draft, pair.prompt, TREE_ZOO[name](),
                                       parents=TREE_FIXTURES["eagle-choices"].parents, new_tokens=3,
                                       num_sequences=20_000, rng=np.random.default_rng(seed))
    outcome = identity_test(sequence_counts(result.tokens, pair.vocab_size), exact, false_fail_rate=1e-7)
    assert not outcome.passed, outcome.describe()


def _chain_verdict(cls) -> bool:
    """Exact by the chain zoo's own declaration: no exactness-family check expected to fail."""
    return not any(CHECKS[c].family == "exactness" for c in getattr(cls, "expected_failed_checks", {}))


@pytest.mark.parametrize("name", [None, "resample-from-p", "bonus-from-q", "reused-uniform", "accept-all",
                                  "drop-bonus"])
def test_chain_decoders_get_their_chain_verdicts_as_one_child_trees(name):
    cls = NumpyDecoder if name is None else zoo.ZOO[name]
    cert = certify_tree(ChainAsTree(cls(), name or "numpy"), TreeCertConfig(), fixtures=["chain"])
    assert cert.verdicts["exact"] == _chain_verdict(cls), cert.summary()
    if name == "drop-bonus":
        assert {"accepted-length", "law"} <= cert.failed_checks


def test_contract_refuses_a_prefix_off_the_tree_and_an_impossible_token():
    parents = np.array([-1, -1, 0])
    tokens = np.array([[1, 2, 3]])
    target = np.full((1, 4, 5), 0.2)
    target[0, 3, 4] = 0.0
    target[0, 3] /= target[0, 3].sum()
    ok, nodes = check_tree_emitted(np.array([[1, 3, 0]]), parents, tokens, target)
    assert nodes.tolist() == [[0, 2]]
    with pytest.raises(ContractViolation, match="no node"):
        check_tree_emitted(np.array([[2, 3, 0]]), parents, tokens, target)
    with pytest.raises(ContractViolation, match="probability 0"):
        check_tree_emitted(np.array([[1, 3, 4]]), parents, tokens, target)
    with pytest.raises(ContractViolation, match="shape"):
        check_tree_emitted(np.array([[1, 3]]), parents, tokens, target)


def test_equal_token_siblings_walk_through_the_one_whose_subtree_matches():
    parents = np.array([-1, -1, 1])
    tokens = np.array([[4, 4, 2]])
    target = np.full((1, 4, 5), 0.2)
    _, nodes = check_tree_emitted(np.array([[4, 2, 0]]), parents, tokens, target)
    assert nodes.tolist() == [[1, 2]]


def test_built_in_tree_decoders_load():
    for name in ("specinfer", "rrsw", "topk", "topk-coin", "chain-numpy"):
        assert load_tree_decoder(name).scheme in ("iid", "without-replacement", "topk")


@pytest.mark.parametrize("name", ["topk-with-q", "longest-match"])
def test_lossy_tree_rules_fail_the_joint_law_end_to_end(name):
    from specgauge.fixtures.toy_lm import load_toy_lm
    from specgauge.laws import full_tree_parents
    from specgauge.stattests.chain.sequences import sequence_counts, sequence_distribution
    from specgauge.stattests.core.statistics import goodness_of_fit
    from specgauge.stattests.tree.generate import speculative_tree_generate

    pair = load_toy_lm("bigram-v6-mid")
    result = speculative_tree_generate(pair.target, pair.draft, pair.prompt, TREE_ZOO[name](),
                                       parents=full_tree_parents([2, 2]), new_tokens=3, num_sequences=20_000, rng=0)
    exact = sequence_distribution(pair.target, pair.prompt, 3)
    assert not goodness_of_fit(sequence_counts(result.tokens, pair.vocab_size), exact).passed
