"""The tree decoder contract, beside the chain contract, and the loader for ``--specgauge-tree-decoder``.

One round of tree verification for a batch of B sequences, vocabulary V, a static tree of
N drafted nodes (the same shape for every row, as EAGLE's choice lists and top-k × depth
give it)::

    verify_tree(parents, tokens, draft_probs, target_probs, rng) -> emitted
      parents       int64   [N]          parents[i] < i; −1 for a child of the root.
                                         Siblings are tried in index order.
      tokens        int64   [B, N]       the token drafted at each node
      draft_probs   float64 [B, N, V]    the distribution node i's token was drafted from
                                         (its parent's draft q; siblings share it)
      target_probs  float64 [B, N+1, V]  row 0: p at the root; row i+1: p after node i
                                         (for its children, or the bonus at a leaf)
      rng           numpy.random.Generator
      emitted       int64   [B, D+1]     D = the tree's depth: the accepted path's tokens,
                                         then the correction or bonus token, then −1

A tree decoder also names its drafting ``scheme``, which the harness uses to draft: ``iid``
(SpecInfer: siblings i.i.d. from q), ``without-replacement`` (EAGLE-1, RSD) or ``topk``
(EAGLE-2/3, SGLang: the siblings are q's top-k, deterministically). Optional attributes:
``certification_tv`` (the coarser TV a slow decoder is certified at by default) and
``greedy_only`` (a greedy verifier, certified on greedy trees only). A chain is the tree
with ``parents = [-1, 0, 1, …]``: then the arrays are the chain contract's.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from specgauge.errors import DecoderLoadError
from specgauge.plugins import load_named
from specgauge.laws import TREE_SCHEMES, tree_depths, validate_parents

from specgauge.stattests.core.contract import PAD, ContractViolation, validate_padded


@runtime_checkable
class TreeDecoder(Protocol):
    """Anything with a drafting ``scheme`` and a ``verify_tree`` method of the contract's signature."""

    scheme: str

    def verify_tree(self, parents: np.ndarray, tokens: np.ndarray, draft_probs: np.ndarray,
                    target_probs: np.ndarray, rng: np.random.Generator) -> np.ndarray: ...


#: Built-in short names of tree decoders; optional backends import lazily.
BUILTIN_TREE_DECODERS: dict[str, str] = {
    "specinfer": "specgauge.stattests.tree.reference:SpecInferDecoder",
    "rrsw": "specgauge.stattests.tree.reference:WithoutReplacementDecoder",
    "topk": "specgauge.stattests.tree.reference:TopKTargetOnlyDecoder",
    "topk-coin": "specgauge.stattests.tree.reference:TopKCoinDecoder",
    "chain-numpy": "specgauge.stattests.tree.reference:chain_numpy",
    "eagle": "specgauge.stattests.decoders.eagle:EagleDecoder",
    "eagle-t0.5": "specgauge.stattests.decoders.eagle:EagleTemperatureDecoder",
    "sglang-tree": "specgauge.stattests.decoders.sglang_tree:SGLangTreeDecoder",
    "sglang-tree-relaxed": "specgauge.stattests.decoders.sglang_tree:SGLangTreeRelaxedDecoder",
    "sglang-tree-greedy": "specgauge.stattests.decoders.sglang_tree:SGLangGreedyTreeDecoder",
}

#: The references the tree suite certifies when no ``--specgauge-tree-decoder`` is given.
DEFAULT_TREE_DECODERS = ("specinfer", "rrsw", "topk")


def load_tree_decoder(spec: str) -> TreeDecoder:
    """A built-in short name or ``MODULE:NAME`` (a class or a factory called with no argument)."""
    target = BUILTIN_TREE_DECODERS.get(spec.strip(), spec.strip())
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        known = ", ".join(BUILTIN_TREE_DECODERS)
        raise DecoderLoadError(f"unknown tree decoder {spec!r}: use one of the built-ins ({known}) or MODULE:NAME")
    obj = load_named(target, noun="tree decoder", needs=("verify_tree", "scheme"), error=DecoderLoadError)
    if getattr(obj, "scheme", None) not in TREE_SCHEMES:
        raise DecoderLoadError(f"{spec!r} has no scheme among {', '.join(TREE_SCHEMES)}")
    return obj


def children_table(parents: np.ndarray) -> np.ndarray:
    """``[N+1, K]`` node indices of each node's children in the order tried (row 0: the
    root's, row i+1: node i's), −1 padded; K is the widest sibling group (at least 1)."""
    parents = validate_parents(parents)
    groups: list[list[int]] = [[] for _ in range(parents.size + 1)]
    for i, parent in enumerate(parents):
        groups[parent + 1].append(i)
    width = max([1] + [len(g) for g in groups])
    table = np.full((parents.size + 1, width), -1, dtype=np.int64)
    for row, g in enumerate(groups):
        table[row, : len(g)] = g
    return table


def accepted_nodes(emitted: np.ndarray, parents: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """``[B, D]`` the node each accepted token stands for (−1 after the path ends).

    The accepted prefix (every token but the last emitted) must walk the tree: each token
    a child of the node before. Siblings may draft the same token (i.i.d. drafts), so the
    walk keeps every node the prefix can stand for and, at the end, reads back the path
    through the lowest-numbered one. Raises ContractViolation where the prefix leaves the tree.
    """
    parents = validate_parents(parents)
    node_depth = tree_depths(parents)
    depth = int(node_depth.max(initial=0))
    batch = emitted.shape[0]
    lengths = (emitted != PAD).sum(axis=1)
    at = np.zeros((batch, parents.size + 1), dtype=bool)  # column 0: the root, i+1: node i
    at[:, 0] = True
    last = np.full(batch, -1, dtype=np.int64)
    for d in range(depth):  # depth levels; rows and nodes are vectorised
        on_path = d < lengths - 1
        level = np.flatnonzero(node_depth == d + 1)
        reach = at[:, parents[level] + 1] & (tokens[:, level] == emitted[:, d : d + 1]) & on_path[:, None]
        lost = on_path & ~reach.any(axis=1)
        if lost.any():
            b = int(np.argmax(lost))
            raise ContractViolation(
                f"row {b} position {d}: emitted {emitted[b, d]} inside the accepted path, but no node the "
                "prefix stands for has a child that drafted it")
        at[:] = False
        at[:, level + 1] = reach
        last = np.where(on_path, level[reach.argmax(axis=1)], last)
    nodes = np.full((batch, depth), -1, dtype=np.int64)
    cur = last
    for d in range(depth - 1, -1, -1):  # back up the path from the last node
        here = (lengths - 1 > d) & (cur >= 0)
        nodes[here, d] = cur[here]
        cur = np.where(here, parents[np.maximum(cur, 0)], cur)
    return nodes


def check_tree_emitted(emitted: object, parents: np.ndarray, tokens: np.ndarray, target_probs: np.ndarray,
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Validate one ``verify_tree`` result; return it as int64 [B, D+1] with its node path [B, D].

    Checks shape, integer dtype, range, the −1 padding, at least one token per row, that
    the accepted prefix is a path of the tree, and that the last token is possible under p
    at the node it follows.
    """
    batch, vocab = tokens.shape[0], target_probs.shape[-1]
    depth = int(tree_depths(parents).max(initial=0))
    emitted, lengths = validate_padded(emitted, (batch, depth + 1), vocab, "verify_tree")
    nodes = accepted_nodes(emitted, parents, tokens)
    rows = np.arange(batch)
    last_node = np.where(lengths > 1, nodes[rows, np.maximum(lengths - 2, 0)], -1)
    last = emitted[rows, lengths - 1]
    impossible = target_probs[rows, last_node + 1, last] <= 0.0
    if impossible.any():
        b = int(np.argmax(impossible))
        raise ContractViolation(f"row {b}: emitted token {last[b]} after node {last_node[b]}, "
                                "which the target gives probability 0 there")
    return emitted, nodes
