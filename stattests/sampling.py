"""Vectorised categorical sampling: one draw per row of a probability matrix."""

from __future__ import annotations

import numpy as np


def sample_rows(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One token per row of ``probs`` (shape [..., V], rows need not be normalised).

    Inverse-CDF over the row's cumulative sum; never returns a zero-probability token.
    One uniform per row, so the cost is a single cumsum over the array.
    """
    flat = probs.reshape(-1, probs.shape[-1])
    cdf = np.cumsum(flat, axis=1)
    u = rng.random(flat.shape[0]) * cdf[:, -1]
    tokens = np.minimum((cdf <= u[:, None]).sum(axis=1), flat.shape[1] - 1)
    rows = np.arange(flat.shape[0])
    stray = flat[rows, tokens] <= 0  # u·total rounded up to total: step back to the last possible token
    if stray.any():
        tail = flat[stray]
        tokens[stray] = tail.shape[1] - 1 - np.argmax(tail[:, ::-1] > 0, axis=1)
    return tokens.reshape(probs.shape[:-1])
