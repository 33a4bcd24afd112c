"""End-to-end speculative generation with draft trees over toy language models.

Each round drafts a static tree from the draft model (siblings by the decoder's scheme:
i.i.d., without replacement, or top-k), asks the target for p at the root and after
every node, verifies with any tree decoder (one ``verify_tree`` call for every unfinished
sequence), appends the accepted path and the correction or bonus token, and goes on
until every sequence has ``new_tokens`` tokens. The joint law of the first L tokens must
then be the target model's, as for chains.
"""

from __future__ import annotations

import math

import numpy as np

from specgauge.fixtures.toy_lm import load_toy_lm
from specgauge.fixtures.trees import TREE_FIXTURES
from specgauge.laws import full_tree_parents, tree_depths, validate_parents

from specgauge.stattests.core.contract import PAD
from specgauge.stattests.identity.instance import identity_test
from specgauge.stattests.core.lm import GenerationResult, NextTokenModel, sequence_counts, sequence_distribution
from specgauge.stattests.core.statistics import TestResult, goodness_of_fit, min_num_samples_for_goodness_of_fit
from specgauge.stattests.core.tree_contract import TreeDecoder, check_tree_emitted, children_table
from specgauge.stattests.tree.harness import draw_siblings


def speculative_tree_generate(
    target: NextTokenModel,
    draft: NextTokenModel,
    prompt: tuple[int, ...] | np.ndarray,
    decoder: TreeDecoder,
    *,
    parents: np.ndarray,
    new_tokens: int,
    num_sequences: int,
    rng: np.random.Generator | int | None = None,
) -> GenerationResult:
    """Generate ``num_sequences`` continuations of ``prompt`` with trees of shape ``parents``.

    Drafting and verification draw from independent children of ``rng``. Every output is
    checked against the tree contract before it is used.
    """
    parents = validate_parents(parents)
    if target.vocab_size != draft.vocab_size:
        raise ValueError(f"target vocabulary {target.vocab_size} != draft vocabulary {draft.vocab_size}")
    if new_tokens < 1 or num_sequences < 1 or parents.size < 1:
        raise ValueError("need new_tokens, num_sequences and tree nodes >= 1")
    prompt_arr = np.asarray(prompt, dtype=np.int64)
    order = max(target.order, draft.order)
    if prompt_arr.ndim != 1 or len(prompt_arr) < order:
        raise ValueError(f"prompt must be a 1-D sequence of at least {order} tokens, got {prompt!r}")
    draft_rng, verify_rng = np.random.default_rng(rng).spawn(2)
    vocab, n_nodes = target.vocab_size, parents.size
    depth = int(tree_depths(parents).max())
    kids = children_table(parents)
    start = len(prompt_arr)
    buffer = np.zeros((num_sequences, start + new_tokens + depth + 1), dtype=np.int64)
    buffer[:, :start] = prompt_arr
    length = np.full(num_sequences, start, dtype=np.int64)
    rounds: list[np.ndarray] = []
    while (active := np.flatnonzero(length - start < new_tokens)).size:
        m = active.size
        # the last `order` tokens before each context: row 0 the root, row i+1 after node i
        tails = np.empty((m, n_nodes + 1, order), dtype=np.int64)
        tails[:, 0] = buffer[active[:, None], length[active, None] - order + np.arange(order)[None, :]]
        tokens = np.zeros((m, n_nodes), dtype=np.int64)
        draft_probs = np.empty((m, n_nodes, vocab))
        for group, members in enumerate(kids):  # parents in order; rows vectorised
            members = members[members >= 0]
            if members.size == 0:
                continue
            q = draft.next_probs(tails[:, group, order - draft.order:])
            drawn = draw_siblings(q, members.size, decoder.scheme, draft_rng)
            tokens[:, members] = drawn
            draft_probs[:, members] = q[:, None]
            tails[:, members + 1] = np.concatenate(
                [np.repeat(tails[:, group : group + 1, 1:], members.size, axis=1), drawn[..., None]], axis=2)
        target_probs = target.next_probs(tails[..., order - target.order:].reshape(-1, target.order))
        target_probs = target_probs.reshape(m, n_nodes + 1, vocab)
        emitted = decoder.verify_tree(parents.copy(), tokens.copy(), draft_probs, target_probs, verify_rng)
        emitted, _ = check_tree_emitted(emitted, parents, tokens, target_probs)
        n = (emitted != PAD).sum(axis=1)
        mask = np.arange(depth + 1)[None, :] < n[:, None]
        cols = length[active, None] + np.arange(depth + 1)[None, :]
        buffer[np.broadcast_to(active[:, None], cols.shape)[mask], cols[mask]] = emitted[mask]
        length[active] += n
        this_round = np.zeros(num_sequences, dtype=np.int64)
        this_round[active] = n
        rounds.append(this_round)
    return GenerationResult(tokens=buffer[:, start : start + new_tokens].copy(),
                            round_lengths=np.stack(rounds, axis=1), gamma=depth)


#: End-to-end cases: toy LM pair, L new tokens, the tree drafted every round.
GENERATION_CASES = {
    "bigram-v6-mid-L3-2x2": ("bigram-v6-mid", 3, full_tree_parents([2, 2])),
    "trigram-v4-L4-3x1": ("trigram-v4", 4, full_tree_parents([3, 1])),
    "bigram-v5-sparse-L3-eagle": ("bigram-v5-sparse", 3, TREE_FIXTURES["eagle-choices"].parents),
}
MAX_SEQUENCES = 60_000


def generation_joint_law(decoder: TreeDecoder, case: str, tv: float, false_fail: float,
                         seed: int) -> list[TestResult]:
    """The joint law of the first L tokens of ``case``'s generations against the target's:
    a chi-square and the worst-case identity test, each at half of ``false_fail``. The
    tree certificate records both as exactness rows (library and pytest suite alike)."""
    pair_name, new_tokens, parents = GENERATION_CASES[case]
    pair = load_toy_lm(pair_name)
    exact = sequence_distribution(pair.target, pair.prompt, new_tokens)
    n = min(MAX_SEQUENCES, min_num_samples_for_goodness_of_fit(tv, exact, false_fail_rate=false_fail))
    try:
        result = speculative_tree_generate(pair.target, pair.draft, pair.prompt, decoder, parents=parents,
                                           new_tokens=new_tokens, num_sequences=n,
                                           rng=np.random.default_rng([seed, list(GENERATION_CASES).index(case)]))
    except Exception as exc:  # a decoder's failure (raised, broke the contract) is a finding, not a crash
        return [TestResult("contract", math.inf, 0.0, n, false_fail, math.nan, None,
                           {"error": f"{type(exc).__name__}: {exc}"})]
    counts = sequence_counts(result.tokens, pair.vocab_size)
    return [goodness_of_fit(counts, exact, false_fail_rate=false_fail / 2),
            identity_test(counts, exact, false_fail_rate=false_fail / 2, seed=seed)]
