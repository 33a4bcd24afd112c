"""Tree drafts for the planner: a shape, what a round of it costs, and its accepted length.

A tree is given as ``topk:KxD`` (D levels of K siblings each, every level hanging from
the first sibling of the level above: K·D nodes, the static shape of EAGLE-2/3's and
SGLang's top-k × depth, ``--speculative-eagle-topk K --speculative-num-steps D``),
``full:KxD`` (every node has K children: K + K² + … nodes) or as EAGLE's choice lists, ``choices:[[0],[1],[0,0],[0,1]]``
(each list a path of sibling ranks from the root), written ``choices:0;1;0-0;0-1``
where a comma would split a swept option. A round drafts every node (D draft
passes, one per level) and verifies all of them at once: N nodes + 1 tokens per sequence.

Acceptance is per sibling rank: ``rank_chosen[r]`` is the probability that the r-th
sibling tried is the one accepted once its parent is (with top-k drafting and q = 1, the
target's probability of the r-th drafted token). From a chain's α the default is
α · (1 − α)^r: each further sibling takes a share α of the mass the earlier ones left, a
placeholder to replace with measured per-rank rates (``tree_acceptance``). The accepted
length's distribution and mean are the shared tree law's (``specgauge.laws``), exact.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import numpy as np

from specgauge.errors import ConfigError
from specgauge.laws import (expected_tree_tokens, full_tree_parents, positional_chosen, tree_accepted_length_pmf,
                            tree_depths, validate_parents)
from specgauge.simulator.acceptance import AcceptanceModel, Sampler, _AcceptanceBase, _Stateless
from specgauge.simulator.cost import Shape

TREE_FORMS = "topk:KxD | full:KxD | choices:0;1;0-0;0-1 (EAGLE's choice lists, paths of sibling ranks) | choices:[[0],[1],[0,0]]"


def _choices_parents(paths: list[list[int]], spec: str) -> np.ndarray:
    """Parents of EAGLE's choice lists, ordered by depth then path (parents before children)."""
    ordered = sorted({tuple(p) for p in paths}, key=lambda p: (len(p), p))
    index = {path: i for i, path in enumerate(ordered)}
    parents = []
    for path in ordered:
        if not path or any(r < 0 for r in path):
            raise ConfigError(f"invalid tree {spec!r}: every choice is a non-empty list of ranks >= 0")
        if len(path) > 1 and path[:-1] not in index:
            raise ConfigError(f"invalid tree {spec!r}: {list(path)} needs its parent {list(path[:-1])}")
        if path[-1] > 0 and path[:-1] + (path[-1] - 1,) not in index:
            raise ConfigError(f"invalid tree {spec!r}: {list(path)} needs its elder sibling "
                              f"{list(path[:-1] + (path[-1] - 1,))}")
        parents.append(index[path[:-1]] if len(path) > 1 else -1)
    return np.asarray(parents, dtype=np.int64)


def parse_tree(spec: str) -> np.ndarray:
    """Parent indices of ``topk:KxD`` or ``choices:[[...], ...]``."""
    text = str(spec).strip().lower().replace(" ", "")
    try:
        if text.startswith(("topk:", "full:")):
            k, d = (int(v) for v in text[5:].split("x"))
            if k < 1 or d < 1:
                raise ValueError
            if text.startswith("full:"):
                return full_tree_parents([k] * d)
            # level l (0-based) holds nodes l·K … l·K + K − 1, children of node (l − 1)·K
            return np.concatenate([np.full(k, -1 if level == 0 else (level - 1) * k, dtype=np.int64) for level in range(d)])
        if text.startswith("choices:") and not text[8:].startswith("["):
            paths = [[int(r) for r in path.split("-")] for path in text[8:].split(";") if path]
            if not paths:
                raise ValueError
            return _choices_parents(paths, spec)
        if text.startswith("choices:"):
            paths = ast.literal_eval(text[8:])
            if not isinstance(paths, (list, tuple)) or not paths:
                raise ValueError
            return _choices_parents([list(map(int, p)) for p in paths], spec)
    except (ValueError, SyntaxError, TypeError):
        pass
    raise ConfigError(f"invalid tree {spec!r}; valid: {TREE_FORMS}")


def tree_shape(parents: np.ndarray) -> Shape:
    """A round of this tree: one draft pass per level, every node drafted and verified."""
    depth = int(tree_depths(parents).max())
    return Shape(steps=depth, drafted=float(len(parents)), verified=float(len(parents) + 1))


def default_rank_chosen(alpha: float, width: int) -> np.ndarray:
    """α · (1 − α)^r for ranks r < width: the placeholder per-rank acceptance from a chain's α."""
    return alpha * (1.0 - alpha) ** np.arange(width)


@dataclass(frozen=True)
class TreeAcceptance(_AcceptanceBase):
    """Accepted path lengths of a tree draft under per-rank acceptance, drawn from the exact law."""

    parents: tuple[int, ...]
    rank_chosen: tuple[float, ...]
    spec: str = "tree"

    def __post_init__(self) -> None:
        validate_parents(np.asarray(self.parents))
        chosen = np.asarray(self.rank_chosen, dtype=float)
        if chosen.size == 0 or np.any(chosen < 0) or chosen.sum() > 1 + 1e-12:
            raise ConfigError(f"tree acceptance per rank must be >= 0 and sum to at most 1, got {self.rank_chosen}")

    @classmethod
    def build(cls, spec: str, alpha: float | None, per_rank: tuple[float, ...] | None = None) -> "TreeAcceptance":
        parents = parse_tree(spec)
        width = int(np.bincount(parents + 1).max())
        if per_rank is None:
            if alpha is None:
                raise ConfigError("a tree draft needs an acceptance rate α or per-rank rates")
            per_rank = tuple(default_rank_chosen(alpha, width))
        return cls(tuple(int(p) for p in parents), tuple(float(c) for c in per_rank), spec)

    def _chosen(self) -> np.ndarray:
        return positional_chosen(np.asarray(self.parents), np.asarray(self.rank_chosen))

    @property
    def depth(self) -> int:
        return int(tree_depths(np.asarray(self.parents)).max())

    def pmf(self) -> np.ndarray:
        """P(accepted path length = d), d = 0 … depth."""
        return tree_accepted_length_pmf(np.asarray(self.parents), self._chosen())

    @property
    def mean_alpha(self) -> float:
        return float(self.rank_chosen[0])

    def expected_tokens_per_pass(self, gamma: int) -> float:
        return expected_tree_tokens(np.asarray(self.parents), self._chosen())

    def sampler(self, rng: np.random.Generator, n_requests: int) -> Sampler:
        return _TreeSampler(np.cumsum(self.pmf()), rng)

    def label(self) -> str:
        return f"{self.spec}@" + ",".join(f"{c:.3g}" for c in self.rank_chosen)


class _TreeSampler(_Stateless):
    def __init__(self, cdf: np.ndarray, rng: np.random.Generator) -> None:
        self.cdf, self.rng = cdf, rng

    def draw(self, requests: np.ndarray, rounds: int, gamma: int) -> np.ndarray:
        u = self.rng.random((rounds, len(requests)))
        return np.minimum(np.searchsorted(self.cdf, u, side="right"), len(self.cdf) - 1).astype(np.int64)


def tree_acceptance(spec: str, acceptance: AcceptanceModel, per_rank: tuple[float, ...] | None) -> TreeAcceptance:
    """The tree's acceptance from the run's chain acceptance (its mean α) or explicit per-rank rates."""
    return TreeAcceptance.build(spec, acceptance.mean_alpha, per_rank)


def tree_depth(spec: str) -> int:
    return int(tree_depths(parse_tree(spec)).max())


def rank_rates(text: str | None) -> tuple[float, ...] | None:
    """``0.7|0.15|0.05`` -> per-rank acceptance; None stays None."""
    if text is None:
        return None
    try:
        rates = tuple(float(v) for v in str(text).split("|") if v.strip())
    except ValueError:
        raise ConfigError(f"invalid tree acceptance {text!r}: give per-rank rates as r0|r1|..., e.g. 0.7|0.15|0.05") from None
    if not rates or any(r < 0 for r in rates) or sum(rates) > 1 + 1e-12:
        raise ConfigError(f"tree acceptance {text!r}: per-rank rates must be >= 0 and sum to at most 1")
    return rates
