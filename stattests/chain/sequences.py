"""Exact sequence-level distributions of toy language models, and their test statistics.

The second level of certification: the joint law of the first L generated tokens, and the
number of tokens the first verification round emits, both computed exactly from the
models' next-token tables, then compared with what a speculative generator produced.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specgauge.fixtures.toy_lm import load_toy_lm

from specgauge.stattests.core.lm import (NextTokenModel, all_sequences, sequence_counts,  # noqa: F401  (re-exported)
                                         sequence_distribution, sequence_index)
from specgauge.stattests.core.statistics import expected_tokens_per_pass  # noqa: F401  (the law, re-exported beside α_k)


def first_round_length_distribution(
    target: NextTokenModel, draft: NextTokenModel, prompt: tuple[int, ...], gamma: int
) -> np.ndarray:
    """P(the first round emits n tokens), n = 1..γ+1, under Leviathan's rule, exactly.

    A draft path x_1..x_k is drafted and accepted with probability Π_i min(p, q)(x_i | ·),
    so P(N > k) is that product summed over paths of length k (enumerated: V**γ paths).
    """
    survive = [1.0]
    for k in range(1, gamma + 1):
        seqs = all_sequences(target.vocab_size, k)
        full = np.concatenate(
            [np.broadcast_to(np.asarray(prompt, np.int64), (len(seqs), len(prompt))), seqs], axis=1
        )
        weight = np.ones(len(seqs))
        for i in range(k):
            rows = np.arange(len(seqs))
            p = target.next_probs(full[:, len(prompt) + i - target.order : len(prompt) + i])[rows, seqs[:, i]]
            q = draft.next_probs(full[:, len(prompt) + i - draft.order : len(prompt) + i])[rows, seqs[:, i]]
            weight *= np.minimum(p, q)
        survive.append(float(weight.sum()))
    survive.append(0.0)
    tail = np.array(survive)  # tail[k] = P(N > k), k = 0..γ+1
    return tail[:-1] - tail[1:]


def position_acceptance(length_probs: np.ndarray) -> np.ndarray:
    """α_k = P(draft k accepted | drafts 1..k−1 accepted), from P(N = n), n = 1..γ+1."""
    tail = np.cumsum(length_probs[::-1])[::-1]  # P(N >= n)
    return tail[1:] / np.where(tail[:-1] > 0, tail[:-1], 1.0)


def length_counts(lengths: np.ndarray, gamma: int) -> np.ndarray:
    """Histogram of tokens per round over n = 1..γ+1."""
    lengths = np.asarray(lengths)
    if lengths.size and (lengths.min() < 1 or lengths.max() > gamma + 1):
        raise ValueError(f"round lengths outside 1..{gamma + 1}: {np.unique(lengths)}")
    return np.bincount(lengths - 1, minlength=gamma + 1)


# ---------------------------------------------------------------- sequence cases of the certification

#: Most sequences one case draws (TV ≈ 0.015 detectable at the default rates).
MAX_SEQUENCES = 200_000
#: Fewest sequences a case draws, however coarse the TV asked for.
MIN_SEQUENCES = 5_000


@dataclass(frozen=True)
class SequenceCase:
    """A toy LM pair, L new tokens, γ drafts per round: one "fixture" of the plan.

    Whole sequences test what one verification round cannot: the hand-over between rounds,
    the bonus token and drafting from the right context.
    """

    pair: str
    new_tokens: int
    gamma: int
    kind = "sequence"
    tv_floor = 0.0
    slow = False

    @property
    def name(self) -> str:
        return f"{self.pair}-L{self.new_tokens}-g{self.gamma}"

    label = name


SEQUENCE_CASES: dict[str, SequenceCase] = {c.name: c for c in [
    SequenceCase("bigram-v6-mid", 4, 1),  # rounds of 1-2 tokens: up to four hand-overs
    SequenceCase("bigram-v6-far", 4, 2),  # α_k very uneven across positions (0.89, 0.27, 0.61)
    SequenceCase("trigram-v4", 4, 3),  # two tokens of context cross round boundaries
    SequenceCase("bigram-v5-sparse", 3, 2),  # zeros: drafts the target forbids, tokens the draft never proposes
    SequenceCase("bigram-v6-close", 3, 4),  # a full round overshoots L: the tail is discarded
]}


@dataclass(frozen=True, eq=False)
class SequenceRun:
    """Generated sequences of one case beside their exact laws (or the error that stopped them)."""

    case: SequenceCase
    n: int
    vocab_size: int
    tokens: np.ndarray  # [n, L]
    first_round_lengths: np.ndarray  # [n]
    exact: np.ndarray  # [V**L] the target's sequence distribution
    alphas: np.ndarray  # [γ] position-dependent acceptance of the first round
    error: str | None = None


def sequence_sample_size(case: SequenceCase, tv: float, false_fail_rate: float) -> int:
    """Sequences to draw: what ``tv`` needs at ``false_fail_rate``, within [MIN, MAX]_SEQUENCES.

    A function of the case and the rates alone, never of the clock, so one seed gives
    one certificate on any machine.
    """
    from specgauge.stattests.core.statistics import min_num_samples_for_goodness_of_fit

    pair = load_toy_lm(case.pair)
    exact = sequence_distribution(pair.target, pair.prompt, case.new_tokens)
    needed = min_num_samples_for_goodness_of_fit(tv, exact, false_fail_rate=false_fail_rate)
    return int(max(MIN_SEQUENCES, min(needed, MAX_SEQUENCES)))


def run_sequence_case(decoder, case: SequenceCase, n: int, seed: int, timeout: float | None = None) -> SequenceRun:
    """Generate ``n`` sequences of ``case`` with ``decoder`` inside the speculative generator."""
    from specgauge.stattests.core.deadline import DeadlineDecoder
    from specgauge.stattests.chain.generate import speculative_generate

    pair = load_toy_lm(case.pair)
    exact = sequence_distribution(pair.target, pair.prompt, case.new_tokens)
    alphas = position_acceptance(first_round_length_distribution(pair.target, pair.draft, pair.prompt, case.gamma))
    stream = np.random.SeedSequence([seed, *case.name.encode()])
    try:
        result = speculative_generate(pair.target, pair.draft, pair.prompt, DeadlineDecoder(decoder, timeout, case.name),
                                      new_tokens=case.new_tokens, gamma=case.gamma, num_sequences=n,
                                      rng=np.random.default_rng(stream))
    except Exception as exc:  # a decoder's failure is a finding, not a crash
        empty = np.empty((0, case.new_tokens), np.int64)
        return SequenceRun(case, 0, pair.vocab_size, empty, np.empty(0, np.int64), exact, alphas,
                           f"verify raised {type(exc).__name__}: {exc}")
    return SequenceRun(case, n, pair.vocab_size, result.tokens, result.first_round_lengths, exact, alphas)
