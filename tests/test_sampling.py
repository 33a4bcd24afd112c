"""The inverse-CDF sampler: the narrow-vocabulary path (column adds) draws exactly the tokens
numpy's cumsum gives, and leaves its input alone."""

from __future__ import annotations

import numpy as np
import pytest

from specgauge.stattests.core.sampling import NARROW_VOCAB, sample_rows_at


def _by_cumsum(probs: np.ndarray, u: np.ndarray) -> np.ndarray:
    cdf = np.cumsum(probs, axis=1)
    return np.minimum((cdf <= (u * cdf[:, -1])[:, None]).sum(axis=1), probs.shape[1] - 1)


@pytest.mark.parametrize("vocab", [1, 2, 8, NARROW_VOCAB, NARROW_VOCAB + 1, 300])
def test_same_tokens_as_the_cumsum_and_never_an_impossible_one(vocab):
    rng = np.random.default_rng(vocab)
    probs = rng.random((4_000, vocab)) * (rng.random((4_000, vocab)) < 0.5)
    probs[:, -1] += 1e-3
    u = rng.random(4_000)
    u[:50] = np.nextafter(1.0, 0.0)  # u·total can round up to the total: must step back, not land on p = 0
    tokens = sample_rows_at(probs, u)
    expected = _by_cumsum(probs, u)
    possible = probs[np.arange(4_000), expected] > 0
    assert np.array_equal(tokens[possible], expected[possible])
    assert (probs[np.arange(4_000), tokens] > 0).all()


@pytest.mark.parametrize("layout", ["one row", "fortran", "batched"])
def test_the_input_is_not_modified(layout):
    rng = np.random.default_rng(0)
    probs = {"one row": rng.random((1, 6)), "fortran": np.asfortranarray(rng.random((7, 6))),
             "batched": rng.random((3, 5, 6))}[layout]
    before = probs.copy()
    tokens = sample_rows_at(probs, rng.random(probs.size // 6))
    assert tokens.shape == probs.shape[:-1]
    assert np.array_equal(probs, before)
