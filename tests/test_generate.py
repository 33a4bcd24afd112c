"""Our end-to-end generator, the toy language models and the exact sequence distributions."""

from __future__ import annotations

import numpy as np
import pytest

from specgauge.fixtures.toy_lm import MarkovLM, ToyLMPair, available_toy_lms, load_toy_lm, perturbed_pair
from specgauge.stattests.decoders.rules import SampleAndMatchDecoder
from specgauge.stattests.chain.generate import speculative_generate
from specgauge.stattests.core.reference import NumpyDecoder
from specgauge.stattests.chain.sequences import (
    all_sequences,
    expected_tokens_per_pass,
    first_round_length_distribution,
    position_acceptance,
    sequence_counts,
    sequence_distribution,
    sequence_index,
)
from specgauge.stattests.core.statistics import goodness_of_fit, tokens_per_pass_pmf
from specgauge.stattests.chain.zoo import BonusFromDraft, ResampleFromTarget


def test_shipped_toy_lms_load_from_package_data_and_span_the_acceptance_range():
    names = available_toy_lms()
    assert {"bigram-v6-close", "bigram-v6-far", "trigram-v4", "bigram-v5-sparse"} <= set(names)
    acceptance = np.concatenate([load_toy_lm(n).acceptance().ravel() for n in names])
    assert acceptance.min() < 0.3 and acceptance.max() > 0.95
    assert load_toy_lm("trigram-v4").target.order == 2
    with pytest.raises(ValueError, match="available"):
        load_toy_lm("no-such-model")


def test_markov_lm_validates_its_table_and_contexts():
    with pytest.raises(ValueError, match="all-zero"):
        MarkovLM(np.zeros((3, 3)))
    lm = MarkovLM(np.ones((3, 3)))
    np.testing.assert_allclose(lm.next_probs(np.array([[0], [2]])), np.full((2, 3), 1 / 3))
    with pytest.raises(ValueError, match="contexts of length"):
        lm.next_probs(np.array([[0, 1]]))
    with pytest.raises(ValueError, match="vocabulary"):
        ToyLMPair("x", lm, MarkovLM(np.ones((4, 4))), (0,))


def test_sequence_indexing_and_exact_distribution_agree():
    pair = load_toy_lm("trigram-v4")
    seqs = all_sequences(4, 3)
    np.testing.assert_array_equal(sequence_index(seqs, 4), np.arange(64))
    probs = sequence_distribution(pair.target, pair.prompt, 3)
    assert probs.shape == (64,) and abs(probs.sum() - 1) < 1e-12
    # marginal of the first token is the next-token table at the prompt
    np.testing.assert_allclose(probs.reshape(4, 16).sum(axis=1), pair.target.next_probs(np.array(pair.prompt)))


def test_first_round_law_reduces_to_the_truncated_geometric_for_context_free_models():
    p, q = np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.04]), np.array([0.35, 0.3, 0.2, 0.1, 0.03, 0.02])
    target, draft = MarkovLM(np.tile(p, (6, 1))), MarkovLM(np.tile(q, (6, 1)))
    alpha = 1 - 0.5 * np.abs(p - q).sum()
    lengths = first_round_length_distribution(target, draft, (0,), 4)
    np.testing.assert_allclose(lengths, tokens_per_pass_pmf(np.full(4, alpha)), atol=1e-12)
    assert abs(expected_tokens_per_pass(position_acceptance(lengths)) - (1 - alpha**5) / (1 - alpha)) < 1e-12


@pytest.mark.parametrize("name, gamma", [("bigram-v6-far", 2), ("trigram-v4", 3), ("bigram-v5-sparse", 1)])
def test_generator_with_the_reference_is_exact_over_whole_sequences(name, gamma):
    pair = load_toy_lm(name)
    result = speculative_generate(pair.target, pair.draft, pair.prompt, NumpyDecoder(), new_tokens=3,
                                  gamma=gamma, num_sequences=40_000, rng=1)
    assert result.tokens.shape == (40_000, 3)
    assert (result.round_lengths.sum(axis=1) >= 3).all() and (result.passes >= 1).all()
    outcome = goodness_of_fit(sequence_counts(result.tokens, pair.vocab_size),
                              sequence_distribution(pair.target, pair.prompt, 3))
    assert outcome.passed, outcome.describe()


def test_generator_is_reproducible_and_takes_any_contract_decoder():
    pair = load_toy_lm("bigram-v6-mid")
    run = lambda seed: speculative_generate(pair.target, pair.draft, pair.prompt, SampleAndMatchDecoder(),  # noqa: E731
                                            new_tokens=4, gamma=2, num_sequences=500, rng=seed)
    np.testing.assert_array_equal(run(3).tokens, run(3).tokens)
    assert (run(3).tokens != run(4).tokens).any()


@pytest.mark.parametrize("mutant", [ResampleFromTarget(), BonusFromDraft()], ids=lambda m: type(m).__name__)
def test_known_bugs_fail_the_sequence_level_test(mutant):
    pair = load_toy_lm("bigram-v6-far")
    result = speculative_generate(pair.target, pair.draft, pair.prompt, mutant, new_tokens=3, gamma=2,
                                  num_sequences=40_000, rng=2)
    outcome = goodness_of_fit(sequence_counts(result.tokens, pair.vocab_size),
                              sequence_distribution(pair.target, pair.prompt, 3))
    assert not outcome.passed, outcome.describe()


def test_generator_rejects_bad_arguments():
    pair = load_toy_lm("trigram-v4")
    args = dict(decoder=NumpyDecoder(), new_tokens=3, gamma=2, num_sequences=10)
    with pytest.raises(ValueError, match="at least 2 tokens"):
        speculative_generate(pair.target, pair.draft, (1,), **args)
    with pytest.raises(ValueError, match="vocabulary"):
        speculative_generate(pair.target, MarkovLM(np.ones((5, 5))), pair.prompt, **args)
    with pytest.raises(ValueError, match="gamma"):
        speculative_generate(pair.target, pair.draft, pair.prompt, **{**args, "gamma": 0})


def test_perturbed_pair_controls_acceptance():
    close = perturbed_pair("c", vocab_size=5, order=1, draft_mix=0.05, seed=0).acceptance()
    far = perturbed_pair("f", vocab_size=5, order=1, draft_mix=0.9, seed=0).acceptance()
    assert close.min() > far.max() or close.mean() > far.mean() + 0.3
