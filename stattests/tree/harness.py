"""Drafts trees by the decoder's scheme, runs a tree decoder on them, keeps what the checks need.

As for chains, the harness draws the drafts itself (so the certificate is about the
verification rule), hands the decoder copies, and turns exceptions, contract violations
and mutated inputs into an error string. Alongside each output it records the scheme's
exact law for that row, given the drafted tokens (:mod:`specgauge.laws`): the
accepted-length distribution and the root's sibling-choice probabilities.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from specgauge.fixtures.trees import TreeFixture
from specgauge.laws import chosen_from_accept, recursive_rejection, tree_accepted_length_pmf_rows, tree_depths

from specgauge.stattests.core.contract import PAD, ContractViolation
from specgauge.stattests.core.sampling import sample_rows
from specgauge.stattests.core.tree_contract import TreeDecoder, check_tree_emitted, children_table

REPRO_ROWS = 16
GREEDY_ROWS = 20_000  # greedy is checked row by row, exactly


@dataclass(frozen=True)
class TreeRunConfig:
    rows: int
    chunk_rows: int = 8192
    seed: int = 0


@dataclass(frozen=True)
class TreeBatch:
    """One batch of drafted trees in the contract's arrays, and each row's kind."""

    tokens: np.ndarray  # [B, N]
    draft_probs: np.ndarray  # [B, N, V]
    target_probs: np.ndarray  # [B, N+1, V]
    kinds: np.ndarray  # [B]


@dataclass(frozen=True, eq=False)
class TreeRun:
    """Per-row results of a tree decoder on a fixture (up to the first failure, if any)."""

    fixture: TreeFixture
    scheme: str
    n: int
    tokens: np.ndarray  # [n, D+1] emitted, −1 padded
    kinds: np.ndarray  # [n]
    leaf_reached: np.ndarray  # [n] bool: the last token is a bonus
    length_pmf: np.ndarray  # [n, D+1] exact P(accepted path length = d) for the row's drafts
    root_choice: np.ndarray  # [n] the root's child taken, by rank (width: none)
    root_chosen: np.ndarray  # [n, width+1] its exact probabilities
    uniforms: np.ndarray  # [n, D+3] for the randomized PITs, from the run's own seed
    greedy_mismatches: int
    greedy_example: str
    error: str | None = None
    reproducibility_error: str | None = None

    @property
    def lengths(self) -> np.ndarray:
        return (self.tokens != PAD).sum(axis=1)


def fixture_seed(seed: int, fixture: TreeFixture, scheme: str) -> np.random.SeedSequence:
    return np.random.SeedSequence([seed, zlib.crc32(f"{fixture.name}/{scheme}".encode())])


def draw_siblings(q: np.ndarray, m: int, scheme: str, rng: np.random.Generator) -> np.ndarray:
    """``[n, m]`` sibling tokens from q [n, V]: i.i.d., without replacement (Gumbel top-m,
    which draws them in order), or q's top-m (ties by token id)."""
    if scheme == "iid":
        return sample_rows(np.repeat(q[:, None], m, axis=1), rng)
    if scheme == "without-replacement":
        with np.errstate(divide="ignore"):
            keys = np.log(q) + rng.gumbel(size=q.shape)
        return np.argsort(-keys, axis=1, kind="stable")[:, :m]
    return np.argsort(-q, axis=1, kind="stable")[:, :m]


def draft_batch(fixture: TreeFixture, scheme: str, n: int, rng: np.random.Generator) -> TreeBatch:
    """Draft ``n`` trees: each node's children from q at its context, by ``scheme``."""
    parents, vocab = fixture.parents, fixture.vocab_size
    depth = tree_depths(parents)
    kinds = rng.integers(fixture.kinds, size=n)
    tokens = np.zeros((n, parents.size), dtype=np.int64)
    draft = np.empty((n, parents.size, vocab))
    target = np.empty((n, parents.size + 1, vocab))
    target[:, 0] = fixture.target[kinds, 0, 0]
    for group, kids in enumerate(children_table(parents)):  # parents in order; rows vectorised
        kids = kids[kids >= 0]
        if kids.size == 0:
            continue
        d = int(depth[kids[0]])
        prev = tokens[:, group - 1] if group > 0 else np.zeros(n, dtype=np.int64)
        q = fixture.draft[kinds, d - 1, prev]
        drawn = draw_siblings(q, kids.size, scheme, rng)
        tokens[:, kids] = drawn
        draft[:, kids] = q[:, None]
        target[:, kids + 1] = fixture.target[kinds[:, None], d, drawn]
    return TreeBatch(tokens, draft, target, kinds)


def scheme_law(parents: np.ndarray, batch: TreeBatch, scheme: str) -> tuple[np.ndarray, np.ndarray]:
    """``(length_pmf [B, D+1], root_chosen [B, width+1])``: the scheme's exact law given the drafts."""
    kids = children_table(parents)
    chosen = np.zeros(batch.tokens.shape)
    root = None
    for group, members in enumerate(kids):
        members = members[members >= 0]
        if members.size == 0:
            continue
        accept, _ = recursive_rejection(batch.target_probs[:, group], batch.draft_probs[:, members[0]],
                                        batch.tokens[:, members], scheme)
        chosen[:, members] = chosen_from_accept(accept)
        if group == 0:
            root = chosen[:, members]
    pmf = tree_accepted_length_pmf_rows(parents, chosen)
    width = kids.shape[1]
    root_full = np.zeros((batch.tokens.shape[0], width + 1))
    root_full[:, : root.shape[1]] = root
    root_full[:, width] = 1.0 - root.sum(axis=1)
    return pmf, np.clip(root_full, 0.0, 1.0)


def greedy_expected(parents: np.ndarray, batch: TreeBatch) -> np.ndarray:
    """The exact greedy output: follow the child drafting argmax p while there is one, then argmax p."""
    kids = children_table(parents)
    depth = int(tree_depths(parents).max(initial=0))
    n = batch.tokens.shape[0]
    rows = np.arange(n)
    out = np.full((n, depth + 1), PAD, dtype=np.int64)
    node = np.full(n, -1)
    live = np.ones(n, bool)
    for d in range(depth + 1):
        best = batch.target_probs[rows, node + 1].argmax(axis=1)
        cand = kids[node + 1]
        cand_tok = np.where(cand >= 0, batch.tokens[rows[:, None], np.maximum(cand, 0)], -1)
        match = cand_tok == best[:, None]
        out[live, d] = best[live]
        nxt = cand[rows, match.argmax(axis=1)]
        live = live & match.any(axis=1)
        node = np.where(live, nxt, node)
    return out


def _reproducibility_error(decoder: TreeDecoder, fixture: TreeFixture, seed: np.random.SeedSequence) -> str | None:
    batch_seed, decoder_seed = seed.spawn(2)
    b = draft_batch(fixture, decoder.scheme, REPRO_ROWS, np.random.default_rng(batch_seed))
    try:
        first, second = (decoder.verify_tree(fixture.parents.copy(), b.tokens.copy(), b.draft_probs.copy(),
                                             b.target_probs.copy(), np.random.default_rng(decoder_seed))
                         for _ in range(2))
    except Exception as exc:  # reported like any failure of verify_tree
        return f"verify_tree raised {type(exc).__name__}: {exc}"
    if not (np.shape(first) == np.shape(second) and np.array_equal(first, second)):
        return "the same seed gave a different output (verify_tree must draw only from the rng it is given)"
    return None


def run_tree_fixture(decoder: TreeDecoder, fixture: TreeFixture, config: TreeRunConfig) -> TreeRun:
    """Verify ``config.rows`` drafted trees of ``fixture`` with ``decoder``, chunk by chunk."""
    scheme = decoder.scheme
    draft_rng, decoder_rng, pit_rng = (np.random.default_rng(s)
                                       for s in fixture_seed(config.seed, fixture, scheme).spawn(3))
    repro = _reproducibility_error(decoder, fixture, fixture_seed(config.seed + 1, fixture, scheme))
    error = repro if repro and repro.startswith("verify_tree raised") else None
    rows = min(config.rows, GREEDY_ROWS) if fixture.greedy else config.rows
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("tokens", "kinds", "leaf", "pmf", "choice", "chosen")}
    mismatches, example, done = 0, "", 0
    kids = children_table(fixture.parents)
    width = kids.shape[1]
    while done < rows and error is None:
        m = min(config.chunk_rows, rows - done)
        b = draft_batch(fixture, scheme, m, draft_rng)
        inputs = (fixture.parents.copy(), b.tokens.copy(), b.draft_probs.copy(), b.target_probs.copy())
        try:
            emitted = decoder.verify_tree(*inputs, decoder_rng)
        except Exception as exc:  # a decoder's failure is a finding, not a crash
            error = f"verify_tree raised {type(exc).__name__}: {exc}"
            break
        try:
            emitted, nodes = check_tree_emitted(emitted, fixture.parents, b.tokens, b.target_probs)
        except ContractViolation as exc:
            error = f"contract violation: {exc}"
            break
        for label, before, after in zip(("parents", "tokens", "draft_probs", "target_probs"),
                                        (fixture.parents, b.tokens, b.draft_probs, b.target_probs), inputs):
            if not np.array_equal(before, after):
                error = f"verify_tree modified its input {label} in place"
        if error:
            break
        lengths = (emitted != PAD).sum(axis=1)
        last_node = np.where(lengths > 1, nodes[np.arange(m), np.maximum(lengths - 2, 0)], -1)
        parts["leaf"].append(kids[last_node + 1, 0] < 0)
        parts["tokens"].append(emitted)
        parts["kinds"].append(b.kinds)
        first = np.where(lengths > 1, nodes[:, 0], -1)
        rank = np.full(m, width)
        on_tree = first >= 0
        rank[on_tree] = np.argmax(kids[0][None, :] == first[on_tree, None], axis=1)
        parts["choice"].append(rank)
        if fixture.greedy:
            expected = greedy_expected(fixture.parents, b)
            wrong = (expected != emitted).any(axis=1)
            if wrong.any() and not example:
                i = int(np.argmax(wrong))
                example = f"expected {expected[i].tolist()}, got {emitted[i].tolist()}"
            mismatches += int(wrong.sum())
        pmf, chosen = scheme_law(fixture.parents, b, scheme)
        parts["pmf"].append(pmf)
        parts["chosen"].append(chosen)
        done += m
    depth = fixture.depth
    shapes = {"tokens": (depth + 1,), "kinds": (), "leaf": (), "pmf": (depth + 1,), "choice": (),
              "chosen": (width + 1,)}
    arr = {k: (np.concatenate(v) if v else np.zeros((0,) + shapes[k])) for k, v in parts.items()}
    n = arr["tokens"].shape[0]
    return TreeRun(fixture, scheme, n, arr["tokens"].astype(np.int64), arr["kinds"].astype(np.int64),
                   arr["leaf"].astype(bool), arr["pmf"], arr["choice"].astype(np.int64), arr["chosen"],
                   pit_rng.random((n, depth + 3)),
                   mismatches, example, error, None if error else repro)
