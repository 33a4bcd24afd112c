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


def speedup(alpha: np.ndarray | float, gamma: np.ndarray | int, cost_ratio: float) -> np.ndarray:
    """Leviathan's walltime improvement E[N] / (γc + 1) for a draft costing c target passes."""
    return tokens_per_pass(alpha, gamma) / (np.asarray(gamma, float) * cost_ratio + 1.0)


def law_frame(alphas, gammas, cost_ratio: float):
    """The closed-form law on a grid: one row per (γ, α), with tokens per pass and speed-up
    (a pandas DataFrame; ``specgauge law`` adds its Monte Carlo columns to it)."""
    import pandas as pd

    alpha_grid, gamma_grid = np.meshgrid(np.asarray(alphas, float), np.asarray(gammas, int))
    frame = pd.DataFrame({"gamma": gamma_grid.ravel(), "alpha": alpha_grid.ravel()})
    frame["cost_ratio"] = cost_ratio
    frame["tokens_per_pass"] = tokens_per_pass(frame["alpha"].to_numpy(), frame["gamma"].to_numpy())
    frame["speedup"] = speedup(frame["alpha"].to_numpy(), frame["gamma"].to_numpy(), cost_ratio)
    return frame


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


# ---------------------------------------------------------------- trees
#
# A tree of drafts is given by parent indices: ``parents[i]`` is the node that node i
# extends, −1 for the root's children, and every parent comes before its children.
# Siblings are tried in index order. One pass emits the accepted path and one correction
# or bonus token, so E[tokens per pass] = 1 + Σ_i P(node i is on the accepted path), and
# P(node i on the path) is the product, along its path, of each node's probability of
# being the child chosen once its parent is reached.

TREE_SCHEMES = ("iid", "without-replacement", "topk")


def validate_parents(parents: np.ndarray) -> np.ndarray:
    """``parents`` as int64 [N] after checking −1 ≤ parents[i] < i (topological order)."""
    parents = np.asarray(parents, dtype=np.int64)
    if parents.ndim != 1:
        raise ValueError(f"parents must be one-dimensional, got shape {parents.shape}")
    bad = (parents < -1) | (parents >= np.arange(parents.size))
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"node {i} has parent {parents[i]}: parents must be −1 or an earlier node")
    return parents


def tree_depths(parents: np.ndarray) -> np.ndarray:
    """Depth of every node (the root's children have depth 1)."""
    parents = validate_parents(parents)
    depth = np.zeros(parents.size, dtype=np.int64)
    for i, parent in enumerate(parents):  # N nodes, once per tree shape
        depth[i] = 1 if parent < 0 else depth[parent] + 1
    return depth


def sibling_ranks(parents: np.ndarray) -> np.ndarray:
    """Rank of each node among its siblings, in the order they are tried (0 first)."""
    parents = validate_parents(parents)
    ranks = np.zeros(parents.size, dtype=np.int64)
    seen: dict[int, int] = {}
    for i, parent in enumerate(parents):
        ranks[i] = seen.get(int(parent), 0)
        seen[int(parent)] = ranks[i] + 1
    return ranks


def full_tree_parents(branching: list[int] | tuple[int, ...]) -> np.ndarray:
    """Parents of the tree in which every node at depth d has ``branching[d]`` children
    (top-k × depth is ``[k] * depth``), nodes numbered breadth first."""
    parents: list[int] = []
    level = [-1]
    for width in branching:
        nxt = []
        for parent in level:
            for _ in range(int(width)):
                nxt.append(len(parents))
                parents.append(parent)
        level = nxt
    return np.asarray(parents, dtype=np.int64)


def tree_node_reach(parents: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """P(node i is on the accepted path) [..., N] from ``chosen`` [..., N], the probability
    that node i is the child accepted once its parent is reached (rows broadcast)."""
    parents = validate_parents(parents)
    chosen = np.asarray(chosen, dtype=np.float64)
    reach = np.empty_like(chosen)
    for i, parent in enumerate(parents):  # over nodes; rows are vectorised
        reach[..., i] = chosen[..., i] if parent < 0 else chosen[..., i] * reach[..., parent]
    return reach


def tree_accepted_length_pmf_rows(parents: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """P(accepted path length = d), d = 0 … depth, for every row of ``chosen`` [B, N]."""
    depth = tree_depths(parents)
    reach = np.atleast_2d(tree_node_reach(parents, chosen))
    reach = reach.reshape(-1, reach.shape[-1])
    at_least = np.ones((reach.shape[0], int(depth.max(initial=0)) + 2))
    at_least[:, -1] = 0.0
    for d in range(1, at_least.shape[1] - 1):
        at_least[:, d] = reach[:, depth == d].sum(axis=1)
    return np.clip(at_least[:, :-1] - at_least[:, 1:], 0.0, 1.0)


def tree_accepted_length_pmf(parents: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """P(accepted path length = d), d = 0 … depth, averaged over rows of ``chosen``.

    Tokens per pass is that length plus one."""
    return tree_accepted_length_pmf_rows(parents, chosen).mean(axis=0)


def expected_tree_tokens(parents: np.ndarray, chosen: np.ndarray) -> float:
    """E[tokens per pass] = 1 + Σ_i P(node i on the accepted path), averaged over rows."""
    reach = np.atleast_2d(tree_node_reach(parents, chosen))
    return float(1.0 + reach.reshape(-1, reach.shape[-1]).sum(axis=1).mean())


def positional_chosen(parents: np.ndarray, rank_chosen: np.ndarray) -> np.ndarray:
    """Per-node ``chosen`` when it depends only on the sibling rank (context-free p and q,
    or the planner's positional acceptance model): ``rank_chosen[r]`` = P(the r-th sibling
    tried is the one accepted | parent reached); ranks past its end get 0."""
    ranks = sibling_ranks(parents)
    rank_chosen = np.asarray(rank_chosen, dtype=np.float64)
    padded = np.concatenate([rank_chosen, np.zeros(max(0, int(ranks.max(initial=-1)) + 1 - rank_chosen.size))])
    return padded[ranks]


def topk_depth_tokens(rank_chosen: np.ndarray, k: int, depth: int) -> float:
    """E[tokens per pass] of the full k-ary tree of the given depth under positional
    acceptance: 1 + Σ_{d=1..depth} s^d with s = Σ_{r<k} rank_chosen[r]."""
    s = float(np.sum(np.asarray(rank_chosen, dtype=np.float64)[:k]))
    return float(1.0 + sum(s ** d for d in range(1, depth + 1)))


def _normalised(x: np.ndarray) -> np.ndarray:
    total = x.sum(axis=-1, keepdims=True)
    return np.divide(x, total, out=np.zeros_like(x), where=total > 0)


def recursive_rejection(target: np.ndarray, draft: np.ndarray | None, tokens: np.ndarray,
                        scheme: str) -> tuple[np.ndarray, np.ndarray]:
    """One node's sibling verification, exactly: ``(accept [..., m], residual [..., V])``.

    ``target`` [..., V] is p at the parent's context, ``draft`` [..., V] the q its children
    were drawn from (unused for ``topk``), ``tokens`` [..., m] the children in the order
    tried, −1 where a node has fewer siblings (such a round is skipped: it accepts nothing and
    changes nothing). Round j accepts sibling c_j with probability min(1, r_j(c_j) / q_j(c_j)), and a
    rejection updates r_{j+1} = normalize(max(r_j − q_j, 0)), r_0 = p:

    - ``iid`` (SpecInfer): q_j = q for every round;
    - ``without-replacement`` (EAGLE-1, RSD): q_j is q with c_0 … c_{j−1} masked out,
      renormalised;
    - ``topk`` (EAGLE-2/3, SGLang): q_j is one-hot at c_j (q = 1), so r_{j+1} is r_j with
      c_j removed and sibling j is chosen with probability p(c_j) (distinct tokens).

    ``residual`` is r_m, the distribution of the correction token when every sibling is
    rejected. ``accept`` is conditional on reaching round j.
    """
    if scheme not in TREE_SCHEMES:
        raise ValueError(f"unknown tree scheme {scheme!r}; choose from {', '.join(TREE_SCHEMES)}")
    r = np.array(target, dtype=np.float64)
    tokens = np.asarray(tokens, dtype=np.int64)
    q = None if scheme == "topk" else np.array(draft, dtype=np.float64)
    accept = np.zeros(tokens.shape)
    for j in range(tokens.shape[-1]):  # over siblings (a handful); rows are vectorised
        present = tokens[..., j] >= 0
        c = np.maximum(tokens[..., j : j + 1], 0)
        if scheme == "topk":
            q_j = np.zeros_like(r)
            np.put_along_axis(q_j, c, 1.0, axis=-1)
        else:
            q_j = q
        r_c = np.take_along_axis(r, c, axis=-1)[..., 0]
        q_c = np.take_along_axis(q_j, c, axis=-1)[..., 0]
        accept[..., j] = present * np.where(q_c > 0, np.minimum(1.0, r_c / np.where(q_c > 0, q_c, 1.0)), r_c > 0)
        nxt = _normalised(np.maximum(r - q_j, 0.0))
        r = np.where(present[..., None] & (nxt.sum(axis=-1, keepdims=True) > 0), nxt, r)
        if scheme == "without-replacement":
            masked = q.copy()
            np.put_along_axis(masked, c, 0.0, axis=-1)
            q = np.where(present[..., None], _normalised(masked), q)
    return accept, r


def chosen_from_accept(accept: np.ndarray) -> np.ndarray:
    """P(sibling j is the one chosen) = Π_{i<j} (1 − a_i) · a_j from conditional acceptances."""
    survive = np.cumprod(1.0 - accept, axis=-1)
    before = np.concatenate([np.ones_like(accept[..., :1]), survive[..., :-1]], axis=-1)
    return before * accept


def rank_chosen(target: np.ndarray, draft: np.ndarray, k: int, scheme: str,
                max_states: int = 2_000_000) -> np.ndarray:
    """P(the r-th sibling tried is chosen | parent reached), r < k, averaged over the draft
    draws, for context-free p = ``target`` and q = ``draft`` [V]: the planner's exact
    per-branch acceptance.

    ``iid``: round j accepts with 1 − TV(r_j, q), the residuals being deterministic.
    ``topk``: p of q's j-th most likely token (ties by id). ``without-replacement``: exact
    enumeration of the tokens drawn (V^k states, refused above ``max_states``).
    """
    p = np.asarray(target, dtype=np.float64)
    q = np.asarray(draft, dtype=np.float64)
    if scheme == "topk":
        order = np.lexsort((np.arange(q.size), -q))[:k]
        out = np.zeros(k)
        out[: order.size] = p[order]
        return out
    if scheme == "iid":
        out, r, alive = np.zeros(k), p.copy(), 1.0
        for j in range(k):
            accept = float(np.minimum(r, q).sum())
            out[j] = alive * accept
            alive *= 1.0 - accept
            nxt = _normalised(np.maximum(r - q, 0.0))
            r = nxt if nxt.sum() > 0 else r
        return out
    if scheme != "without-replacement":
        raise ValueError(f"unknown tree scheme {scheme!r}; choose from {', '.join(TREE_SCHEMES)}")
    if q.size ** max(k - 1, 0) > max_states:
        raise ValueError(f"exact enumeration needs {q.size}^{k - 1} states; above {max_states}")
    weight, r, qs = np.ones(1), p[None, :], q[None, :]
    out = np.zeros(k)
    for j in range(k):
        hit = np.minimum(r, qs)  # [S, V]: token x drawn and accepted
        out[j] = float((weight * hit.sum(axis=1)).sum())
        if j == k - 1:
            break
        miss = (qs - hit) * weight[:, None]  # token x drawn and rejected: a new state each
        s_idx, x_idx = np.nonzero(miss > 0)
        r_next = _normalised(np.maximum(r - qs, 0.0))[s_idx]
        q_next = qs[s_idx].copy()
        q_next[np.arange(s_idx.size), x_idx] = 0.0
        weight, r, qs = miss[s_idx, x_idx], r_next, _normalised(q_next)
    return out
