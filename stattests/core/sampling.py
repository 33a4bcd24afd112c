"""Vectorised categorical sampling: one draw per row of a probability matrix."""

from __future__ import annotations

import numpy as np


#: Up to this many categories the inverse CDF is built one column at a time (numpy's
#: cumsum along a short last axis costs ~20 ns an entry; a column add, ~1 ns).
NARROW_VOCAB = 32


def sample_rows_at(probs: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """One token per row of ``probs`` ([..., V], rows need not be normalised) at the given
    uniforms: the inverse CDF of the row's cumulative sum; never a zero-probability token."""
    flat = probs.reshape(-1, probs.shape[-1])
    vocab = flat.shape[1]
    if vocab <= NARROW_VOCAB:  # same additions in the same order as cumsum: the same tokens
        cdf = flat.T.copy()  # a copy always: added to in place
        for j in range(1, vocab):
            np.add(cdf[j - 1], cdf[j], out=cdf[j])
        u = np.asarray(uniforms).reshape(-1) * cdf[-1]
        below = (cdf <= u).view(np.uint8)  # counted as bytes: twice as fast as a bool sum
        tokens = np.minimum(np.add.reduce(below, axis=0, dtype=np.intp), vocab - 1)
    else:
        cdf = np.cumsum(flat, axis=1)
        u = np.asarray(uniforms).reshape(-1) * cdf[:, -1]
        tokens = np.minimum((cdf <= u[:, None]).sum(axis=1), vocab - 1)
    rows = np.arange(flat.shape[0])
    stray = flat.reshape(-1)[rows * vocab + tokens] <= 0  # u·total rounded up to total: step back
    if stray.any():
        tail = flat[stray]
        tokens[stray] = tail.shape[1] - 1 - np.argmax(tail[:, ::-1] > 0, axis=1)
    return tokens.reshape(probs.shape[:-1])


def sample_rows(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One token per row of ``probs``, one uniform per row from ``rng``."""
    return sample_rows_at(probs, rng.random(int(np.prod(probs.shape[:-1]))))


def multinomial_counts(n: int, probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Multinomial(n, probs) counts; by drawing n tokens when n is far below the vocabulary
    (numpy's multinomial walks every category: slow for 150k categories and 500 draws)."""
    if n < probs.size // 4:
        tokens = np.searchsorted(np.cumsum(probs), rng.random(n) * probs.sum(), side="right")
        return np.bincount(np.minimum(tokens, probs.size - 1), minlength=probs.size)
    return rng.multinomial(n, probs)
