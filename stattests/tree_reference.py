"""NumPy reference tree verifiers, vectorised over rows: a loop over depth levels only.

At each level every live row sits at one node of the (static) tree; its children are
verified together by the sibling rule of :func:`specgauge.laws.recursive_rejection` with
one uniform per round, the first accepted child becomes the next node, and a row with no
accepted child emits its correction from the residual and stops. A leaf's "children" are
all absent, so the residual is p there: the bonus token.

The walk is written once (:class:`TreeVerifier`); the references and the tree zoo's
mutants change one step: the sibling rule (``select``) or the row p is read from
(``target_row``).
"""

from __future__ import annotations

import numpy as np

from specgauge.laws import recursive_rejection, tree_depths

from .contract import PAD, Decoder
from .reference import NumpyDecoder
from .sampling import sample_rows_at
from .tree_contract import children_table


def first_hit(hits: np.ndarray) -> np.ndarray:
    """Index of the first True per row, −1 where none."""
    return np.where(hits.any(axis=1), hits.argmax(axis=1), -1)


class TreeVerifier:
    """The walk down the tree shared by every rule; subclasses set ``scheme`` and ``rule``."""

    name = "tree"
    scheme = "iid"  # how the drafts were made (the harness drafts this way)
    rule = "iid"  # the sibling rule applied (a mutant may differ from the scheme)

    def select(self, p: np.ndarray, q: np.ndarray, siblings: np.ndarray,
               u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(choice [n], final [n, V])``: the accepted sibling's column (−1: none) and the
        distribution of the correction token should none be accepted."""
        accept, residual = recursive_rejection(p, q, siblings, self.rule)
        return first_hit(u < accept), residual

    def target_row(self, target_probs: np.ndarray, rows: np.ndarray, node: np.ndarray,
                   parents: np.ndarray, leaf: np.ndarray) -> np.ndarray:
        """p at ``node``'s context (−1: the root), rows ``rows``."""
        return target_probs[rows, node + 1]

    def verify_tree(self, parents, tokens, draft_probs, target_probs, rng):
        parents = np.asarray(parents, dtype=np.int64)
        kids = children_table(parents)
        depth = int(tree_depths(parents).max(initial=0))
        batch, width = tokens.shape[0], kids.shape[1]
        u = rng.random((batch, depth + 1, width))
        final_u = rng.random(batch)
        emitted = np.full((batch, depth + 1), PAD, dtype=np.int64)
        live = np.arange(batch)
        node = np.full(batch, -1, dtype=np.int64)
        for d in range(depth + 1):  # levels; the rows at every node are vectorised
            cand = kids[node[live] + 1]
            siblings = np.where(cand >= 0, tokens[live[:, None], np.maximum(cand, 0)], -1)
            leaf = cand[:, 0] < 0
            p = self.target_row(target_probs, live, node[live], parents, leaf)
            q = draft_probs[live, np.maximum(cand[:, 0], 0)]
            choice, final = self.select(p, q, siblings, u[live, d])
            stop = choice < 0
            emitted[live[stop], d] = sample_rows_at(final[stop], final_u[live[stop]])
            go = ~stop
            emitted[live[go], d] = siblings[go, choice[go]]
            node[live[go]] = cand[go, choice[go]]
            live = live[go]
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
        return choice, final


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
