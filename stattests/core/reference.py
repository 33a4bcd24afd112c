"""The NumPy reference decoder: Leviathan et al. (2023) / Chen et al. (2023), exactly.

Vectorised over batch and positions: no Python loop per row or per token. The rule is
split in three steps (accept a prefix, pick the final distribution, assemble the
output) so that variants, such as the zoo's buggy decoders, change one step and reuse
the others.
"""

from __future__ import annotations

import numpy as np

from specgauge.stattests.core.contract import PAD
from specgauge.stattests.core.sampling import sample_rows, sample_rows_at


def accepted_prefix(target_probs: np.ndarray, draft_probs: np.ndarray, draft_tokens: np.ndarray,
                    uniforms: np.ndarray) -> np.ndarray:
    """Drafts accepted per row: accept x while ``u·q(x) < p(x)`` (probability min(1, p/q))."""
    gamma = draft_tokens.shape[1]
    p_x = np.take_along_axis(target_probs[:, :gamma], draft_tokens[..., None], axis=2)[..., 0]
    q_x = np.take_along_axis(draft_probs, draft_tokens[..., None], axis=2)[..., 0]
    rejected_at = ~(uniforms * q_x < p_x)
    return np.where(rejected_at.any(axis=1), rejected_at.argmax(axis=1), gamma)


def final_rows(target_probs: np.ndarray, draft_probs: np.ndarray,
               n_accepted: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(p, q, rejected)`` at the position of the last emitted token; q is 0 for a bonus row."""
    batch, gamma = draft_probs.shape[:2]
    rows = np.arange(batch)
    rejected = n_accepted < gamma
    final_p = target_probs[rows, n_accepted]
    final_q = (np.where(rejected[:, None], draft_probs[rows, np.minimum(n_accepted, gamma - 1)], 0.0)
               if gamma else np.zeros_like(final_p))
    return final_p, final_q, rejected


def residual(final_p: np.ndarray, final_q: np.ndarray) -> np.ndarray:
    """normalize(max(p − q, 0)) up to its norm, or p where that is zero up to rounding."""
    dist = np.maximum(final_p - final_q, 0.0)
    empty = dist.sum(axis=1) <= 0.0
    if empty.any():
        dist[empty] = final_p[empty]
    return dist


def assemble(draft_tokens: np.ndarray, n_accepted: np.ndarray, final_token: np.ndarray) -> np.ndarray:
    """The contract's output: the accepted prefix, the final token, then -1."""
    batch, gamma = draft_tokens.shape
    emitted = np.full((batch, gamma + 1), PAD, dtype=np.int64)
    keep = np.arange(gamma)[None, :] < n_accepted[:, None]
    emitted[:, :gamma] = np.where(keep, draft_tokens, PAD)
    emitted[np.arange(batch), n_accepted] = final_token
    return emitted


def leviathan_verify(
    target_probs: np.ndarray,
    draft_probs: np.ndarray,
    draft_tokens: np.ndarray,
    uniforms: np.ndarray,
    rng: np.random.Generator,
    final_uniforms: np.ndarray | None = None,
) -> np.ndarray:
    """The rule with the acceptance uniforms given (and the final draw's, optionally).

    At the first rejection draw from normalize(max(p − q, 0)), or from p when that
    residual is zero up to rounding; after γ acceptances draw the bonus from row γ.
    """
    n_accepted = accepted_prefix(target_probs, draft_probs, draft_tokens, uniforms)
    final_p, final_q, _ = final_rows(target_probs, draft_probs, n_accepted)
    dist = residual(final_p, final_q)
    token = sample_rows(dist, rng) if final_uniforms is None else sample_rows_at(dist, final_uniforms)
    return assemble(draft_tokens, n_accepted, token)


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
