"""The language-model side of the contract: what end-to-end certification generates from.

Chains and trees both generate whole sequences from toy language models whose exact
sequence law is known. This module holds what they share: the next-token model's
interface, what a batch of generations produced, and the space of token sequences.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


class NextTokenModel(Protocol):
    """A model that gives next-token distributions from its last ``order`` tokens."""

    @property
    def vocab_size(self) -> int: ...

    @property
    def order(self) -> int: ...

    def next_probs(self, contexts: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class GenerationResult:
    """What a batch of generations produced.

    tokens        int64 [B, L]   the first L new tokens of each sequence
    round_lengths int64 [B, R]   tokens each verification round emitted (0 once finished);
                                 column 0 is the first round, started at the prompt
    """

    tokens: np.ndarray
    round_lengths: np.ndarray
    gamma: int

    @property
    def first_round_lengths(self) -> np.ndarray:
        """Tokens emitted by the first round (not truncated to L)."""
        return self.round_lengths[:, 0]

    @property
    def passes(self) -> np.ndarray:
        """Target verification passes per sequence."""
        return (self.round_lengths > 0).sum(axis=1)

    def tokens_per_pass(self) -> float:
        """Mean tokens per target pass over every round of every sequence."""
        used = self.round_lengths[self.round_lengths > 0]
        return float(used.mean())


def all_sequences(vocab_size: int, length: int) -> np.ndarray:
    """Every sequence of ``length`` tokens, int64 [V**L, L], in the order of :func:`sequence_index`."""
    grids = np.indices((vocab_size,) * length).reshape(length, -1)
    return grids.T.astype(np.int64)


def sequence_index(tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    """Row-major index of each sequence in ``tokens`` [N, L] (token 0 most significant)."""
    weights = vocab_size ** np.arange(tokens.shape[1] - 1, -1, -1, dtype=np.int64)
    return tokens.astype(np.int64) @ weights


def sequence_counts(tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    """Histogram of the sequences in ``tokens`` [N, L] over all V**L sequences."""
    return np.bincount(sequence_index(tokens, vocab_size), minlength=vocab_size ** tokens.shape[1])


def sequence_distribution(model: NextTokenModel, prompt: tuple[int, ...], length: int) -> np.ndarray:
    """P(first ``length`` new tokens = s) for every s, float64 [V**L], from the exact tables."""
    vocab = model.vocab_size
    seqs = all_sequences(vocab, length)
    full = np.concatenate([np.broadcast_to(np.asarray(prompt, np.int64), (len(seqs), len(prompt))), seqs], axis=1)
    start = len(prompt)
    probs = np.ones(len(seqs))
    for t in range(length):
        ctx = full[:, start + t - model.order : start + t]
        probs *= model.next_probs(ctx)[np.arange(len(seqs)), seqs[:, t]]
    return probs
