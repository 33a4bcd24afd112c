"""The NumPy reference decoder: Leviathan et al. (2023) / Chen et al. (2023), exactly.

Vectorised over batch and positions: no Python loop per row or per token.
"""

from __future__ import annotations

import numpy as np

from .contract import PAD
from .sampling import sample_rows


def leviathan_verify(
    target_probs: np.ndarray,
    draft_probs: np.ndarray,
    draft_tokens: np.ndarray,
    uniforms: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """The rule with the acceptance uniforms given, so variants can reuse it.

    Accept draft x at position k while ``u·q(x) < p(x)`` (probability min(1, p/q));
    at the first rejection draw from normalize(max(p − q, 0)), or from p when that
    residual is zero up to rounding; after γ acceptances draw the bonus from row γ.
    """
    batch, gamma = draft_tokens.shape
    rows = np.arange(batch)
    p_x = np.take_along_axis(target_probs[:, :gamma], draft_tokens[..., None], axis=2)[..., 0]
    q_x = np.take_along_axis(draft_probs, draft_tokens[..., None], axis=2)[..., 0]
    rejected_at = ~(uniforms * q_x < p_x)
    n_accepted = np.where(rejected_at.any(axis=1), rejected_at.argmax(axis=1), gamma)

    final_p = target_probs[rows, n_accepted]
    rejected = n_accepted < gamma
    final_q = draft_probs[rows, np.minimum(n_accepted, max(gamma - 1, 0))] if gamma else 0.0
    residual = np.maximum(final_p - np.where(rejected[:, None], final_q, 0.0), 0.0)
    empty = residual.sum(axis=1) <= 0.0
    if empty.any():
        residual[empty] = final_p[empty]
    final_token = sample_rows(residual, rng)

    emitted = np.full((batch, gamma + 1), PAD, dtype=np.int64)
    keep = np.arange(gamma)[None, :] < n_accepted[:, None]
    emitted[:, :gamma] = np.where(keep, draft_tokens, PAD)
    emitted[rows, n_accepted] = final_token
    return emitted


class NumpyDecoder:
    """Reference implementation of the contract in float64 NumPy."""

    name = "numpy"

    def verify(
        self,
        target_probs: np.ndarray,
        draft_probs: np.ndarray,
        draft_tokens: np.ndarray,
        rng: np.random.Generator,
    ) -> np.ndarray:
        uniforms = rng.random(draft_tokens.shape)
        return leviathan_verify(target_probs, draft_probs, draft_tokens, uniforms, rng)
