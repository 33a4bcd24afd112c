"""Exact sequence-level distributions of toy language models, and their test statistics.

The second level of certification: the joint law of the first L generated tokens, and the
number of tokens the first verification round emits, both computed exactly from the
models' next-token tables, then compared with what a speculative generator produced.
"""

from __future__ import annotations

import numpy as np

from .generate import NextTokenModel
from .statistics import expected_tokens_per_pass  # noqa: F401  (the law, re-exported beside α_k)


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
