"""The tree law in specgauge.laws: recursion over parents, the three sibling rules, the planner's forms."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from specgauge import laws

P = np.array([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
Q = np.array([0.35, 0.30, 0.20, 0.10, 0.03, 0.02])


def test_shapes_of_static_trees():
    parents = laws.full_tree_parents([2, 2])
    assert parents.tolist() == [-1, -1, 0, 0, 1, 1]
    assert laws.tree_depths(parents).tolist() == [1, 1, 2, 2, 2, 2]
    assert laws.sibling_ranks(parents).tolist() == [0, 1, 0, 1, 0, 1]
    with pytest.raises(ValueError):
        laws.validate_parents([0, -1])


def test_a_chain_is_the_one_child_tree():
    alphas = np.array([0.9, 0.5, 0.2])
    parents = np.array([-1, 0, 1])
    assert laws.expected_tree_tokens(parents, alphas) == pytest.approx(laws.expected_tokens_per_pass(alphas))
    assert laws.tree_accepted_length_pmf(parents, alphas) == pytest.approx(laws.tokens_per_pass_pmf(alphas))


def test_full_tree_closed_form_matches_the_recursion():
    rank = np.array([0.5, 0.2, 0.1])
    for k, depth in [(1, 4), (2, 3), (3, 2)]:
        parents = laws.full_tree_parents([k] * depth)
        chosen = laws.positional_chosen(parents, rank)
        assert laws.topk_depth_tokens(rank, k, depth) == pytest.approx(laws.expected_tree_tokens(parents, chosen))
        pmf = laws.tree_accepted_length_pmf(parents, chosen)
        assert pmf.sum() == pytest.approx(1.0) and (pmf >= -1e-12).all()


def test_topk_chooses_each_sibling_with_its_target_mass():
    tokens = np.array([1, 0, 3])
    accept, residual = laws.recursive_rejection(P, None, tokens, "topk")
    assert laws.chosen_from_accept(accept) == pytest.approx(P[tokens])
    rest = P.copy()
    rest[tokens] = 0
    assert residual == pytest.approx(rest / rest.sum())
    # q's top-3: tokens 0, 1, 2
    assert laws.rank_chosen(P, Q, 3, "topk") == pytest.approx(P[[0, 1, 2]])


def test_one_sibling_is_leviathans_rule():
    for scheme in ("iid", "without-replacement"):
        assert laws.rank_chosen(P, Q, 1, scheme)[0] == pytest.approx(1 - 0.5 * np.abs(P - Q).sum())


def _draws(scheme: str, k: int):
    """Every ordered k-tuple of drafts with its probability under the scheme."""
    for tokens in itertools.product(range(P.size), repeat=k):
        if scheme == "topk":
            continue
        prob, mask = 1.0, np.ones(P.size, bool)
        for x in tokens:
            q = Q * mask if scheme == "without-replacement" else Q
            prob *= q[x] / q.sum()
            if scheme == "without-replacement":
                mask[x] = False
        if prob > 0:
            yield np.array(tokens), prob


@pytest.mark.parametrize("scheme", ["iid", "without-replacement"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_sibling_rules_are_exact_and_rank_law_matches_enumeration(scheme, k):
    """Σ over draws of P(draw)·(Σ_j chosen_j δ_{c_j} + (1 − Σ chosen)·residual) = p, exactly."""
    output = np.zeros(P.size)
    rank = np.zeros(k)
    for tokens, prob in _draws(scheme, k):
        accept, residual = laws.recursive_rejection(P, Q, tokens, scheme)
        chosen = laws.chosen_from_accept(accept)
        np.add.at(output, tokens, prob * chosen)
        output += prob * (1 - chosen.sum()) * residual
        rank += prob * chosen
    assert output == pytest.approx(P, abs=1e-12)
    assert laws.rank_chosen(P, Q, k, scheme) == pytest.approx(rank, abs=1e-12)


def test_without_replacement_verified_as_iid_is_not_exact():
    """The known-bad reading: drafts drawn without replacement, q left unmasked."""
    output = np.zeros(P.size)
    for tokens, prob in _draws("without-replacement", 2):
        accept, residual = laws.recursive_rejection(P, Q, tokens, "iid")
        chosen = laws.chosen_from_accept(accept)
        np.add.at(output, tokens, prob * chosen)
        output += prob * (1 - chosen.sum()) * residual
    assert 0.5 * np.abs(output - P).sum() > 1e-3


def test_topk_tree_law_is_exact_over_a_two_level_tree():
    """Two levels of top-2 siblings: reach probabilities of the root's children are p(c)."""
    parents = laws.full_tree_parents([2, 2])
    chosen = laws.positional_chosen(parents, laws.rank_chosen(P, Q, 2, "topk"))
    reach = laws.tree_node_reach(parents, chosen)
    assert reach[:2] == pytest.approx(P[[0, 1]])
    assert reach[2:4] == pytest.approx(P[0] * P[[0, 1]])
    assert laws.expected_tree_tokens(parents, chosen) == pytest.approx(1 + 0.65 + 0.65 ** 2)


def test_missing_siblings_are_skipped():
    full, res_full = laws.recursive_rejection(P, Q, np.array([1, 2]), "without-replacement")
    padded, res_pad = laws.recursive_rejection(P, Q, np.array([1, -1, 2, -1]), "without-replacement")
    assert padded[[0, 2]] == pytest.approx(full) and padded[[1, 3]].tolist() == [0.0, 0.0]
    assert res_pad == pytest.approx(res_full)
