"""The NumPy reference's two paths give the same tokens for a seed: rows sharing one law
(inputs broadcast along the batch: thresholds, guide table, blocks of rows) and rows with
laws of their own (the row-by-row form), on every edge-case fixture and at the
thresholds' edges."""

from __future__ import annotations

import numpy as np
import pytest

from specgauge.fixtures.pairs import FIXTURES
from specgauge.stattests.core import reference
from specgauge.stattests.core.reference import NumpyDecoder, leading_true, leviathan_verify
from specgauge.stattests.core.sampling import sample_rows


@pytest.mark.parametrize("name", ["seed-six-token", "q-zeros", "p-zeros", "onehot-target", "onehot-draft",
                                  "disjoint", "identical", "tiny", "position-dependent", "zipf-1k-tv0.2"])
@pytest.mark.parametrize("batch", [1, 7, 20_000])
def test_shared_and_per_row_laws_give_the_same_tokens(name, batch):
    f = FIXTURES[name]
    batch = min(batch, 2_000_000 // (f.vocab_size * (f.gamma + 1)))  # 2M entries at most (zipf-1k: 400 rows)
    target, draft = f.batch(batch, np.random.default_rng(3))
    tokens = sample_rows(draft, np.random.default_rng(5))
    shared = NumpyDecoder().verify(target, draft, tokens, np.random.default_rng(9))
    own = NumpyDecoder().verify(np.array(target), np.array(draft), tokens, np.random.default_rng(9))
    assert np.array_equal(shared, own)


def test_final_tokens_at_the_cdf_edges():
    """u on the 2^-53 grid next to every cdf entry: the guide table and the integer search
    agree with the inverse CDF of the row-by-row form."""
    p = np.array([[0.1, 0.0, 0.3, 0.6 - 1e-17, 0.0], [0.2, 0.2, 0.2, 0.2, 0.2]])
    q = np.array([[0.3, 0.1, 0.1, 0.5, 0.0]])
    target = np.broadcast_to(p, (1, 2, 5))
    law = reference._shared_law(np.ascontiguousarray(target[0]), q)
    cdf = np.cumsum(np.vstack([np.maximum(p[0] - q[0], 0), p[1]]), axis=1)
    m = np.floor(cdf / cdf[:, -1:] * 2.0 ** 53)
    u = np.unique(np.clip(np.concatenate([(m + d).ravel() for d in (-2, -1, 0, 1, 2)]), 0, 2 ** 53 - 1)) / 2.0 ** 53
    for k in range(2):
        rows = np.full(u.size, k)
        got = reference._grid_tokens(law, rows, u)
        # the row-by-row form: entries of the cdf at most u·total, past the last possible token stepped back
        want = np.minimum((cdf[k][None, :] <= (u * cdf[k, -1])[:, None]).sum(axis=1), law.last[k])
        assert np.array_equal(got, want)


def test_leading_true_and_given_uniforms():
    rng = np.random.default_rng(0)
    for gamma in range(0, 12):
        a = rng.random((3000, gamma)) < 0.8
        want = np.array([next((k for k in range(gamma) if not r[k]), gamma) for r in a])
        assert np.array_equal(leading_true(a), want)
    f = FIXTURES["seed-six-token"]
    target, draft = f.batch(500, rng)
    tokens = sample_rows(draft, rng)
    u, fu = rng.random(tokens.shape), rng.random(500)
    assert np.array_equal(leviathan_verify(target, draft, tokens, u, None, fu),
                          leviathan_verify(np.array(target), np.array(draft), tokens, u, None, fu))
