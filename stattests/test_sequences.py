"""Sequence-level certification: the selected decoder inside our speculative generator.

Whole sequences test what one verification round cannot: the hand-over between rounds,
the bonus token and drafting from the right context. For each case the joint law of the
first L new tokens must equal the target model's exact sequence distribution (rare
sequences pooled), and the first round's tokens per pass must follow the law with
position-dependent acceptance, P(N > k) = Σ_paths Π min(p, q), E[N] = 1 + Σ_k Π_{i≤k} α_i.
Different γ make rounds end at different places inside the L tokens.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pytest

from specgauge.fixtures.toy_lm import load_toy_lm
from specgauge.stattests.generate import GenerationResult, speculative_generate
from specgauge.stattests.sequences import (
    first_round_length_distribution,
    position_acceptance,
    sequence_counts,
    sequence_distribution,
)
from specgauge.stattests.statistics import (
    goodness_of_fit,
    min_num_samples_for_goodness_of_fit,
    tokens_per_pass_test,
)

#: Most sequences one case draws (fast decoders stop here: TV ≈ 0.015 detectable).
MAX_SEQUENCES = 200_000
#: Fewest sequences a case draws, however slow the decoder.
MIN_SEQUENCES = 5_000
#: Seconds of generation one case may take; a slow decoder (one Python call per row)
#: gets fewer sequences, and the certificate states the TV that sample size reaches.
CASE_BUDGET_S = 6.0
PILOT_SEQUENCES = 500


@dataclass(frozen=True)
class Case:
    """A toy LM pair, L new tokens, γ drafts per round."""

    pair: str
    new_tokens: int
    gamma: int

    @property
    def label(self) -> str:
        return f"{self.pair}-L{self.new_tokens}-g{self.gamma}"


CASES = [
    Case("bigram-v6-mid", 4, 1),  # rounds of 1-2 tokens: up to four hand-overs
    Case("bigram-v6-far", 4, 2),  # α_k very uneven across positions (0.89, 0.27, 0.61)
    Case("trigram-v4", 4, 3),  # two tokens of context cross round boundaries
    Case("bigram-v5-sparse", 3, 2),  # zeros: drafts the target forbids, tokens the draft never proposes
    Case("bigram-v6-close", 3, 4),  # a full round overshoots L: the tail is discarded
]


def _sample_size(case: Case, decoder, cert_config, exact: np.ndarray) -> int:
    """What cert_config.tv needs, capped by MAX_SEQUENCES and by a time budget from a pilot."""
    needed = min_num_samples_for_goodness_of_fit(
        cert_config.tv, exact, false_fail_rate=cert_config.false_fail
    )
    pair = load_toy_lm(case.pair)
    start = time.perf_counter()
    speculative_generate(pair.target, pair.draft, pair.prompt, decoder, new_tokens=case.new_tokens,
                         gamma=case.gamma, num_sequences=PILOT_SEQUENCES, rng=np.random.default_rng([cert_config.seed, 99]))
    per_sequence = (time.perf_counter() - start) / PILOT_SEQUENCES
    affordable = int(CASE_BUDGET_S / max(per_sequence, 1e-9))
    return int(max(MIN_SEQUENCES, min(needed, MAX_SEQUENCES, affordable)))


@pytest.fixture(scope="module")
def generated(specgauge_decoder, specgauge_cert_config):
    """One generation per case, shared by that case's assertions."""
    decoder, cert_config = specgauge_decoder, specgauge_cert_config
    cache: dict[Case, tuple[GenerationResult, np.ndarray]] = {}

    def run(case: Case) -> tuple[GenerationResult, np.ndarray]:
        if case not in cache:
            pair = load_toy_lm(case.pair)
            exact = sequence_distribution(pair.target, pair.prompt, case.new_tokens)
            n = _sample_size(case, decoder, cert_config, exact)
            seed = np.random.SeedSequence([cert_config.seed, CASES.index(case)])
            result = speculative_generate(pair.target, pair.draft, pair.prompt, decoder,
                                          new_tokens=case.new_tokens, gamma=case.gamma,
                                          num_sequences=n, rng=np.random.default_rng(seed))
            cache[case] = (result, exact)
        return cache[case]

    return run


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.label)
def test_sequence_distribution_is_exact(case, generated, specgauge_check_result, specgauge_cert_config):
    result, exact = generated(case)
    vocab = load_toy_lm(case.pair).vocab_size
    counts = sequence_counts(result.tokens, vocab)
    outcome = goodness_of_fit(counts, exact, false_fail_rate=specgauge_cert_config.false_fail)
    specgauge_check_result(outcome, check="sequence-exactness", fixture=case.label)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.label)
def test_tokens_per_pass_law_with_position_dependent_acceptance(case, generated, specgauge_check_result, specgauge_cert_config):
    result, _ = generated(case)
    pair = load_toy_lm(case.pair)
    alphas = position_acceptance(first_round_length_distribution(pair.target, pair.draft, pair.prompt, case.gamma))
    outcome = tokens_per_pass_test(result.first_round_lengths, alphas, false_fail_rate=specgauge_cert_config.false_fail)
    specgauge_check_result(outcome, check="sequence-tokens-per-pass", fixture=case.label, family="optimality")
