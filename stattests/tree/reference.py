"""NumPy reference tree verifiers, vectorised over rows: a loop over depth levels only.

At each level every live row sits at one node of the (static) tree; its children are
verified together with one uniform per round by the sibling rule that
:func:`specgauge.laws.recursive_rejection` specifies, written again here for speed
(:func:`sequential_select`; the law's own code is what the accepted-length checks compare
against, so the two are checked against each other). The first accepted child becomes the
next node, and a row with no accepted child emits its correction from the residual and
stops. A leaf's "children" are all absent, so the residual is p there: the bonus token.

The walk is written once (:class:`TreeVerifier`); the references and the tree zoo's
mutants change one step: the sibling rule (``select``) or the row p is read from
(``target_row``).
"""

from __future__ import annotations

from functools import cached_property, lru_cache

import numpy as np

from specgauge.laws import tree_depths

from specgauge.stattests.core.contract import PAD, Decoder
from specgauge.stattests.core.reference import NumpyDecoder
from specgauge.stattests.core.sampling import sample_rows_at
from specgauge.stattests.core.tree_contract import children_table


def first_hit(hits: np.ndarray) -> np.ndarray:
    """Index of the first True per row, −1 where none."""
    return np.where(hits.any(axis=1), hits.argmax(axis=1), -1)


@lru_cache(maxsize=64)
def _tree_shape(parents: bytes) -> tuple[np.ndarray, int]:
    kids = children_table(np.frombuffer(parents, dtype=np.int64))
    kids.setflags(write=False)
    return kids, int(tree_depths(np.frombuffer(parents, dtype=np.int64)).max(initial=0))


def tree_shape(parents: np.ndarray) -> tuple[np.ndarray, int]:
    """The children table and depth of a static tree, computed once per shape (a Python loop
    over nodes that would otherwise cost as much as a level of a large batch)."""
    return _tree_shape(np.ascontiguousarray(parents, dtype=np.int64).tobytes())


class NodeRows:
    """Rows ``array[rows[i], cols[i]]`` of a contract array [B, M, V], read lazily.

    A verifier needs p and q in full only for the rows that reject their first sibling (or
    sit at a leaf); for the others one entry each is enough. ``np.asarray`` gives them all.
    """

    def __init__(self, array: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> None:
        self.flat = array.reshape(-1, array.shape[-1])
        self.rows, self.cols, self.width = rows, cols, array.shape[1]
        self.shape = (rows.size, array.shape[-1])

    @cached_property
    def index(self) -> np.ndarray:
        """Row of ``flat`` each row stands for; computed on first read (top-k never reads q)."""
        return self.rows * self.width + self.cols

    def at(self, which: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Entry ``tokens[i]`` of row ``which[i]``."""
        index = self.index if which.size == self.index.size else self.index.take(which)
        return self.flat.reshape(-1).take(index * self.shape[1] + tokens)

    def take(self, which: np.ndarray) -> np.ndarray:
        """Rows ``which`` in full, [len(which), V] (``np.take`` on axis 0: a third of ``flat[...]``'s time)."""
        return self.flat.take(self.index.take(which), axis=0)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        rows = self.flat.take(self.index, axis=0)
        return rows if dtype is None else rows.astype(dtype)


def sequential_select(p: NodeRows, q: NodeRows, siblings: np.ndarray, u: np.ndarray,
                      rule: str) -> tuple[np.ndarray, np.ndarray]:
    """The sibling rules of :func:`specgauge.laws.recursive_rejection`, in few array passes.

    The residual is kept unnormalised, r_j = R / Z (and q_j = Q / S without replacement),
    so round j accepts c when ``u·Z·q(c) < R(c)`` (``u·Z·Q(c) < R(c)·S``; ``u·Z < R(c)``
    for top-k) and a rejection sets R ← max(R − Z·q, 0) (R·S − Z·Q; R(c) ← 0 for top-k).
    Only the rows still undecided are carried from one sibling to the next, and p and q
    are read in full only for them. Returns the first accepted column (−1: none) and the
    unnormalised residual of the rows with none, in row order.
    """
    n, width = siblings.shape
    vocab = p.shape[1]
    if not (siblings[:, 0] >= 0).any():  # leaves: nothing to verify, the bonus follows p
        return np.full(n, -1), np.asarray(p)
    ones = np.ones(vocab)
    flat_siblings, flat_u = siblings.reshape(-1), u.reshape(-1)
    choice = None
    idx = np.arange(n)  # rows still undecided (carried by np.take: a third of a boolean mask's time)
    residual = draft = None  # read lazily: the first sibling needs one entry of p and q
    mass = draft_mass = None  # Z (and S) are 1 until the first rejection: the products skip them
    for j in range(width):  # siblings; the undecided rows vectorised
        x = flat_siblings.take(idx * width + j) if j else siblings[:, 0]
        present = x >= 0
        if residual is not None and not present.any():
            continue  # no undecided row has a j-th sibling: nothing to accept or update
        every = present.all()
        token = x if every else np.maximum(x, 0)
        if residual is None:
            r_c = p.at(idx, token)
            q_c = None if rule == "topk" else q.at(idx, token)
        else:
            at = np.arange(idx.size) * vocab + token
            r_c = residual.reshape(-1).take(at)
            q_c = None if rule == "topk" else draft.reshape(-1).take(at)
        u_j = flat_u.take(idx * width + j) if j else u[:, 0]
        if rule == "topk":
            hit = u_j < r_c if mass is None else u_j * mass < r_c
        else:
            hit = (u_j * q_c if mass is None else u_j * mass * q_c) < (r_c if draft_mass is None else r_c * draft_mass)
        if not every:
            hit &= present
        if choice is None:
            choice = np.where(hit, j, -1)
        else:
            choice[idx] = np.where(hit, j, -1)  # the undecided rows' choice is −1 until now
        keep = np.flatnonzero(~hit)
        idx, present, token, r_c = idx.take(keep), present.take(keep), token.take(keep), r_c.take(keep)
        mass = None if mass is None else mass.take(keep)
        q_c = None if q_c is None else q_c.take(keep)
        draft_mass = None if draft_mass is None else draft_mass.take(keep)
        if residual is None:
            residual = p.take(idx)
            mass = residual @ ones
            if rule != "topk" and present.any():
                draft = q.take(idx)
                if rule == "without-replacement":
                    draft_mass = draft @ ones
        else:
            residual = residual.take(keep, axis=0)
            draft = None if draft is None else draft.take(keep, axis=0)
        if idx.size == 0 or not present.any():
            continue
        every = present.all()
        last = j == width - 1  # after the last sibling only the residual itself is read
        at = np.arange(idx.size) * vocab + token
        if rule == "topk":
            residual.reshape(-1)[at if every else at[present]] = 0.0
            if not last:
                mass = mass - (r_c if every else np.where(present, r_c, 0.0))
            continue
        if draft_mass is None:
            nxt = np.maximum(residual - mass[:, None] * draft, 0.0)
        else:
            nxt = np.maximum(residual * draft_mass[:, None] - mass[:, None] * draft, 0.0)
            if not last:
                draft.reshape(-1)[at if every else at[present]] = 0.0
                draft_mass = draft_mass - q_c if every else np.where(present, draft_mass - q_c, draft_mass)
        nxt_mass = nxt @ ones
        moved = present & (nxt_mass > 0)
        if moved.all():
            residual, mass = nxt, nxt_mass
        else:
            residual, mass = np.where(moved[:, None], nxt, residual), np.where(moved, nxt_mass, mass)
    if residual is None:
        residual = p.take(idx)
    return choice, residual


class TreeVerifier:
    """The walk down the tree shared by every rule; subclasses set ``scheme`` and ``rule``."""

    name = "tree"
    scheme = "iid"  # how the drafts were made (the harness drafts this way)
    rule = "iid"  # the sibling rule applied (a mutant may differ from the scheme)

    def select(self, p: NodeRows, q: NodeRows, siblings: np.ndarray,
               u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(choice [n], final [k, V])``: the accepted sibling's column (−1: none) and, for
        the k rows with none, in order, the (unnormalised) distribution of their correction.
        p and q are lazy rows; ``np.asarray(p)`` gives them as [n, V]."""
        return sequential_select(p, q, siblings, u, self.rule)

    def target_row(self, target_probs: np.ndarray, rows: np.ndarray, node: np.ndarray,
                   parents: np.ndarray, leaf: np.ndarray) -> NodeRows:
        """p at ``node``'s context (−1: the root) for rows ``rows``, as lazy :class:`NodeRows`."""
        return NodeRows(target_probs, rows, node + 1)

    def verify_tree(self, parents, tokens, draft_probs, target_probs, rng):
        parents = np.asarray(parents, dtype=np.int64)
        kids, depth = tree_shape(parents)
        batch, width = tokens.shape[0], kids.shape[1]
        emitted = np.full((batch, depth + 1), PAD, dtype=np.int64)
        out = emitted.reshape(-1)  # written at row·(D+1) + level: 1-D scatters
        live = np.arange(batch)
        node = np.full(batch, -1, dtype=np.int64)  # the node of each live row, carried with ``live``
        n_nodes = parents.size
        flat_tokens = tokens.reshape(-1)
        for d in range(depth + 1):  # levels; the rows at every node are vectorised
            cand = kids.take(node + 1, axis=0)
            at = (live * n_nodes)[:, None] + cand
            siblings = flat_tokens.take(at) if cand.min() >= 0 else np.where(cand >= 0, flat_tokens.take(
                np.maximum(at, 0)), -1)
            leaf = cand[:, 0] < 0
            p = self.target_row(target_probs, live, node, parents, leaf)
            q = NodeRows(draft_probs, live, np.maximum(cand[:, 0], 0))
            choice, final = self.select(p, q, siblings, rng.random((live.size, width)))
            out[live.take(np.flatnonzero(choice < 0)) * (depth + 1) + d] = sample_rows_at(
                final, rng.random(final.shape[0]))
            go = np.flatnonzero(choice >= 0)
            picked = go * width + choice.take(go)
            live = live.take(go)
            out[live * (depth + 1) + d] = siblings.reshape(-1).take(picked)
            node = cand.reshape(-1).take(picked)
            if live.size == 0:
                break
        return emitted


class SpecInferDecoder(TreeVerifier):
    """SpecInfer (Miao et al. 2024): i.i.d. siblings, multi-round recursive rejection."""

    name, scheme, rule = "specinfer", "iid", "iid"


class WithoutReplacementDecoder(TreeVerifier):
    """Recursive rejection without replacement (EAGLE-1, RSD, Jeon et al. 2024): each
    rejected sibling is masked out of q, which is renormalised for the next round."""

    name, scheme, rule = "rrsw", "without-replacement", "without-replacement"


class TopKTargetOnlyDecoder(TreeVerifier):
    """Deterministic top-k siblings (EAGLE-2/3, SGLang) verified with q = 1: sibling c is
    accepted with the residual target mass r(c), then removed (sequential elimination)."""

    name, scheme, rule = "topk", "topk", "topk"


class TopKCoinDecoder(TreeVerifier):
    """SGLang's ``tree_speculative_sampling_target_only`` in NumPy: one coin per level,
    sibling j accepted when ``coin <= Σ_{i≤j} p(c_i) / threshold_acc`` or
    ``p(c_j) >= threshold_single``; the correction is drawn from p with the tried siblings
    removed. Exact at both thresholds 1 (inverse-CDF sampling of p, children first);
    lossy by design below 1.
    """

    name, scheme, rule = "topk-coin", "topk", "topk"

    def __init__(self, threshold_single: float = 1.0, threshold_acc: float = 1.0) -> None:
        self.threshold_single, self.threshold_acc = threshold_single, threshold_acc

    def select(self, p, q, siblings, u):
        p = np.asarray(p)
        present = siblings >= 0
        p_c = np.where(present, np.take_along_axis(p, np.maximum(siblings, 0), axis=1), 0.0)
        cumulative = np.cumsum(p_c, axis=1)
        hit = present & ((u[:, :1] <= cumulative / self.threshold_acc) | (p_c >= self.threshold_single))
        choice = first_hit(hit)
        tried = present & (np.arange(siblings.shape[1])[None, :] < np.where(choice < 0, siblings.shape[1], choice)[:, None])
        final = p.copy()
        rows = np.nonzero(tried)[0]
        final[rows, siblings[tried]] = 0.0
        empty = final.sum(axis=1) <= 0
        final[empty] = p[empty]
        return choice, final[choice < 0]


class ChainAsTree:
    """A chain decoder seen as a tree decoder of one-child trees: the arrays are the same."""

    scheme = "iid"

    def __init__(self, chain: Decoder, name: str = "chain") -> None:
        self.chain, self.name = chain, name

    def verify_tree(self, parents, tokens, draft_probs, target_probs, rng):
        parents = np.asarray(parents)
        if not np.array_equal(parents, np.arange(parents.size) - 1):
            raise ValueError("a chain decoder verifies one-child trees only (parents = [-1, 0, 1, ...])")
        return self.chain.verify(target_probs, draft_probs, tokens, rng)


def chain_numpy() -> ChainAsTree:
    """The chain reference (Leviathan's rule) on one-child trees."""
    return ChainAsTree(NumpyDecoder(), "chain-numpy")
