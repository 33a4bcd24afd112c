"""Tree mutants: the readings argued over in the projects' trackers, and bugs they shipped.

Each changes one step of :class:`specgauge.stattests.tree.reference.TreeVerifier` (the
sibling rule, the uniforms, or the row p is read from) and declares, as the chain zoo
does, the checks that must catch it and its source. ``tests/test_tree_zoo.py`` certifies
each one and fails when a declared check stops catching it. SGLang's relaxed thresholds
are lossy by design: the suite reports them as lossy with the TV it measured.
"""

from __future__ import annotations

import numpy as np

from specgauge.laws import recursive_rejection, tree_depths

from specgauge.stattests.core.contract import PAD
from specgauge.stattests.core.sampling import sample_rows
from specgauge.stattests.core.tree_contract import children_table
from specgauge.stattests.tree.reference import TopKCoinDecoder, TreeVerifier, first_hit


class TopKVerifiedWithDraftProbability(TreeVerifier):
    """Deterministic top-k siblings verified as if sampled: accept with min(1, p/q), residual
    max(p − q, 0) (SpecInfer's rule on top-k drafts).

    The reading the EAGLE threads warn against (SafeAILab/EAGLE #110, #171, #183, #221:
    "top-k drafting invalidates the proof"); the answer there is q = 1 after top-k.
    """

    name, scheme, rule = "topk-with-q", "topk", "iid"
    expected_failed_checks = {
        "exactness": "top-k drafts are not draws from q: min(1, p/q) and max(p − q, 0) do not give p",
        "pit-id": "the bias sits on the drafted tokens",
    }


class ResidualNotUpdated(TreeVerifier):
    """Every sibling verified against p itself, the residual never updated between rounds;
    after the last rejection the correction comes from max(p − q, 0).

    The step hand-written multi-round rejection most easily gets wrong. SGLang PR #3407
    ("fix EAGLE 2 non greedy case") and EAGLE #50 / PR #47 fixed non-greedy tree
    verification; whether their diffs were exactly this step was not checked here.
    """

    name, scheme, rule = "residual-not-updated", "iid", "iid"
    expected_failed_checks = {
        "exactness": "later siblings are accepted with min(1, p/q) where r_j/q is due: tokens drafted twice over-count",
        "sibling-rounds": "the root's later siblings are taken too often",
    }

    def select(self, p, q, siblings, u):
        columns = [recursive_rejection(p, q, siblings[:, j : j + 1], self.rule) for j in range(siblings.shape[1])]
        accept = np.concatenate([a for a, _ in columns], axis=1)
        choice = first_hit(u < accept)
        return choice, columns[-1][1][choice < 0]


class WithoutReplacementAsIid(TreeVerifier):
    """Siblings drafted without replacement (EAGLE-1's ``torch.multinomial(..., replacement=False)``)
    verified as if i.i.d.: q never masked nor renormalised.

    The issue the EAGLE threads (#110, #171) raise of EAGLE-1's sampler: SpecInfer's proof
    needs i.i.d. siblings.
    """

    name, scheme, rule = "without-replacement-as-iid", "without-replacement", "iid"
    expected_failed_checks = {
        "exactness": "the second sibling is not a draw from q: its acceptance and the residual are off",
        "sibling-rounds": "later rounds accept with the unmasked q",
    }


class SharedSiblingUniform(TreeVerifier):
    """One uniform for all the siblings of a node: round j accepts when u < a_j with the u
    that rejected rounds < j (top-k siblings, q = 1).

    The tree form of vLLM #47386 (one Philox draw reused); the shortcut a kernel that draws
    one coin per level takes when it compares the coin with each sibling's own ratio
    r_j(c_j) instead of with the cumulative mass, as SGLang's kernel does.
    """

    name, scheme, rule = "shared-sibling-uniform", "topk", "topk"
    expected_failed_checks = {
        "sibling-rounds": "given rounds < j rejected, u ≥ a_i: round j accepts with the wrong probability",
        "exactness": "siblings after a rejection are accepted too rarely",
    }

    def select(self, p, q, siblings, u):
        return super().select(p, q, siblings, np.repeat(u[:, :1], u.shape[1], axis=1))


class BonusFromWrongNode(TreeVerifier):
    """At a leaf, the bonus drawn from the leaf's parent's row of target probabilities.

    TensorRT-LLM PR #15098 (tree verification against the wrong logits slice); the bonus
    row is the one the tree's retrieve indices most easily shift by one level.
    """

    name, scheme, rule = "bonus-from-parent-row", "iid", "iid"
    expected_failed_checks = {
        "bonus": "the bonus follows p at the leaf's parent, not at the leaf",
        "exactness": "the positions the bonus lands on are off",
    }

    def target_row(self, target_probs, rows, node, parents, leaf):
        parent = np.where(leaf & (node >= 0), parents[np.maximum(node, 0)], node)
        return super().target_row(target_probs, rows, parent, parents, leaf)


class LongestMatch(TreeVerifier):
    """Each root-to-leaf candidate checked against its own target sample; the longest match wins.

    foundation-model-stack/fms-extras #12: a multi-candidate exact-match scheme. Each path
    alone is exact (sample from p, keep while it matches), but taking the best of several
    independent samples favours drafted tokens.
    """

    name, scheme, rule = "longest-match", "iid", "iid"
    expected_failed_checks = {
        "exactness": "the maximum over candidates' independent samples favours the drafted tokens",
        "pit-id": "drafted tokens come out too often",
    }

    def verify_tree(self, parents, tokens, draft_probs, target_probs, rng):
        parents = np.asarray(parents)
        kids = children_table(parents)
        depth = int(tree_depths(parents).max(initial=0))
        leaves = np.flatnonzero(kids[1:, 0] < 0)
        batch = tokens.shape[0]
        best_len = np.full(batch, -1)
        best = np.full((batch, depth + 1), PAD, dtype=np.int64)
        for leaf in leaves:  # candidates (a few dozen at most); rows vectorised
            path = [int(leaf)]
            while parents[path[-1]] >= 0:
                path.append(int(parents[path[-1]]))
            path = path[::-1]
            contexts = [-1] + path
            out = np.full((batch, depth + 1), PAD, dtype=np.int64)
            matched = np.ones(batch, bool)
            length = np.zeros(batch, dtype=np.int64)
            for d, ctx in enumerate(contexts):
                y = sample_rows(target_probs[:, ctx + 1], rng)
                out[matched, d] = y[matched]
                if d < len(path):
                    still = matched & (y == tokens[:, path[d]])
                    length += still
                    matched = still
                else:
                    break
            better = length > best_len
            best[better] = out[better]
            best_len = np.where(better, length, best_len)
        return best


class RelaxedThresholds(TopKCoinDecoder):
    """SGLang's ``threshold_single`` / ``threshold_acc`` below 1
    (``--speculative-accept-threshold-single/-acc``): lossy by design, certified as such."""

    name = "sglang-thresholds-0.5"
    expected_failed_checks = {
        "exactness": "a sibling is accepted when p(c) ≥ threshold_single or the coin ≤ Σp/threshold_acc",
    }

    def __init__(self) -> None:
        super().__init__(threshold_single=0.5, threshold_acc=0.5)


class DuplicateSiblingsSkipped(TreeVerifier):
    """A sibling that repeats an earlier sibling's token is skipped without updating the residual.

    From specgauge issue 17's audit, marked plausible: i.i.d. siblings repeat tokens, and a
    verifier that dedupes them ("already rejected, no need to check again") skips the
    round, so the residual keeps the draft mass that round would have removed: the
    correction over-weights tokens q favours. The per-depth checks see the bias when it is
    large enough (not at the default tree tier: only the law fails there); the end-to-end
    joint law of whole generations sees it.
    """

    name, scheme, rule = "duplicates-skipped", "iid", "iid"
    expected_failed_checks = {
        "law": "a skipped round neither accepts nor updates: the accepted length falls short of the law",
    }
    #: caught end to end: the joint law of whole generations (``stattests/test_trees.py``), whose
    #: rows join the tree certificate, so ``pytest stattests`` reads "exact: NO"
    end_to_end = {"generation-joint-law": "the residual is one update short after a duplicate: "
                                          "the generated sequences are not ~ the target's law"}

    def select(self, p, q, siblings, u):
        repeated = np.zeros(siblings.shape, dtype=bool)
        for j in range(1, siblings.shape[1]):
            repeated[:, j] = (siblings[:, :j] == siblings[:, j : j + 1]).any(axis=1) & (siblings[:, j] >= 0)
        return super().select(p, q, np.where(repeated, -1, siblings), u)


TREE_ZOO: dict[str, type[TreeVerifier]] = {cls.name: cls for cls in [
    TopKVerifiedWithDraftProbability, ResidualNotUpdated, WithoutReplacementAsIid, SharedSiblingUniform,
    BonusFromWrongNode, LongestMatch, RelaxedThresholds, DuplicateSiblingsSkipped,
]}


def __getattr__(name: str):
    """``specgauge.stattests.tree.zoo:NAME`` with NAME a zoo key."""
    try:
        return TREE_ZOO[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
