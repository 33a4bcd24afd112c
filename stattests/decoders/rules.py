"""Verification rules other than Leviathan's, as contract decoders.

Two are exact but accept less often than 1 − TV(p, q), so they must pass the exactness
checks and fail the acceptance-optimality ones; one is lossy by design and must fail
exactness. All are vectorised NumPy and draw every random number from the contract's rng.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specgauge.stattests.core.contract import PAD
from specgauge.stattests.core.reference import leviathan_verify
from specgauge.stattests.core.sampling import sample_rows


def _prefix_emitted(draft_tokens: np.ndarray, accepted: np.ndarray, final: np.ndarray) -> np.ndarray:
    """Emitted rows from per-position accept flags and the token that follows the prefix.

    ``final`` is [B, γ+1]: final[b, n] is emitted at the first rejection n (or n = γ).
    """
    batch, gamma = draft_tokens.shape
    n_accepted = np.cumprod(accepted, axis=1).sum(axis=1)
    rows = np.arange(batch)
    emitted = np.full((batch, gamma + 1), PAD, dtype=np.int64)
    keep = np.arange(gamma)[None, :] < n_accepted[:, None]
    emitted[:, :gamma][keep] = draft_tokens[keep]
    emitted[rows, n_accepted] = final[rows, n_accepted]
    return emitted


@dataclass(frozen=True)
class OneHotDraftDecoder:
    """Verify as if the draft were a point mass on its token (q = one-hot).

    What vLLM does when a drafter gives no probabilities, and EAGLE's q = 1: accept x with
    probability p(x); on rejection sample from p with x removed, renormalised. Exact for
    any drafting, but the acceptance is E_q[p(x)] = Σ p·q, below 1 − TV(p, q).
    """

    name: str = "onehot-q"

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        one_hot = np.zeros_like(draft_probs)
        np.put_along_axis(one_hot, draft_tokens[..., None], 1.0, axis=2)
        uniforms = rng.random(draft_tokens.shape)
        return leviathan_verify(target_probs, one_hot, draft_tokens, uniforms, rng)


@dataclass(frozen=True)
class SampleAndMatchDecoder:
    """Sample y from the target at every position and accept the draft while it equals y.

    The emitted token at each position is y itself, so the output is exactly p; the
    acceptance is P(x = y) = Σ p·q, the same as one-hot q and below 1 − TV(p, q).
    """

    name: str = "match"

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        gamma = draft_tokens.shape[1]
        samples = sample_rows(target_probs, rng)  # [B, γ+1]
        accepted = samples[:, :gamma] == draft_tokens
        return _prefix_emitted(draft_tokens, accepted, samples)


@dataclass(frozen=True)
class TypicalAcceptanceDecoder:
    """Medusa's typical acceptance (Cai et al. 2024): lossy by design.

    Accept draft x while p(x) > min(ε, δ·exp(−H(p))), H the entropy of p in nats; at the
    first rejection, and for the bonus, sample from p itself (no residual). Thresholds are
    Medusa's defaults, ε = ``posterior_threshold`` = 0.09 and δ = ``posterior_alpha`` = 0.3
    (= √ε, as the paper recommends). Deterministic acceptance of any plausible draft token
    over-represents what the draft proposes, so the output is not p.
    """

    name: str = "typical"
    posterior_threshold: float = 0.09
    posterior_alpha: float = 0.3

    def __post_init__(self) -> None:
        if not 0.0 < self.posterior_threshold <= 1.0:
            raise ValueError(f"posterior_threshold must be in (0, 1], got {self.posterior_threshold!r}")
        if not 0.0 < self.posterior_alpha:
            raise ValueError(f"posterior_alpha must be positive, got {self.posterior_alpha!r}")

    def thresholds(self, target_probs: np.ndarray) -> np.ndarray:
        """min(ε, δ·exp(−H(p))) per row of ``target_probs`` [..., V]."""
        with np.errstate(divide="ignore", invalid="ignore"):
            plogp = np.where(target_probs > 0, target_probs * np.log(target_probs), 0.0)
        entropy = -plogp.sum(axis=-1)
        return np.minimum(self.posterior_threshold, self.posterior_alpha * np.exp(-entropy))

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        gamma = draft_tokens.shape[1]
        p_x = np.take_along_axis(target_probs[:, :gamma], draft_tokens[..., None], axis=2)[..., 0]
        accepted = p_x > self.thresholds(target_probs[:, :gamma])
        samples = sample_rows(target_probs, rng)
        return _prefix_emitted(draft_tokens, accepted, samples)
