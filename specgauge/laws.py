"""The tokens-per-pass law, written once for the gate and the planner.

One verification pass over γ drafts emits N tokens: the accepted prefix plus one
correction or bonus token. With acceptance α_k at draft position k,
P(N = n) = Π_{i<n} α_i · (1 − α_n) for n ≤ γ and P(N = γ + 1) = Π α_i, so
E[N] = 1 + Σ_k Π_{i≤k} α_i, which is (1 − α^(γ+1)) / (1 − α) for a constant α = 1 − TV(p, q).
"""

from __future__ import annotations

import numpy as np


def tokens_per_pass(alpha: np.ndarray | float, gamma: np.ndarray | int) -> np.ndarray | float:
    """E[N] = (1 − α^(γ+1)) / (1 − α), with its limit γ + 1 at α = 1; broadcasts over arrays."""
    alpha_arr, gamma_arr = np.broadcast_arrays(np.asarray(alpha, float), np.asarray(gamma, float))
    with np.errstate(divide="ignore", invalid="ignore"):
        value = (1.0 - alpha_arr ** (gamma_arr + 1)) / (1.0 - alpha_arr)
    value = np.where(alpha_arr >= 1.0, gamma_arr + 1.0, value)
    return float(value) if value.ndim == 0 else value


def tokens_per_pass_pmf(alphas: np.ndarray) -> np.ndarray:
    """P(N = n), n = 1 … γ+1, for per-position acceptance α_1 … α_γ (rows of ``alphas`` averaged)."""
    alphas = np.atleast_2d(np.asarray(alphas, dtype=np.float64))
    reach = np.concatenate([np.ones((alphas.shape[0], 1)), np.cumprod(alphas, axis=1)], axis=1)
    stop = np.concatenate([1.0 - alphas, np.ones((alphas.shape[0], 1))], axis=1)
    return (reach * stop).mean(axis=0)


def expected_tokens_per_pass(alphas: np.ndarray) -> float:
    """E[N] = 1 + Σ_k Π_{i≤k} α_i for per-position acceptance (rows of ``alphas`` averaged)."""
    alphas = np.atleast_2d(np.asarray(alphas, dtype=np.float64))
    return float(1.0 + np.cumprod(alphas, axis=1).sum(axis=1).mean())
