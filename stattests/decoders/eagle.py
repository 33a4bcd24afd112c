"""SafeAILab's EAGLE tree verifier (``eagle-llm==1.2.1``, ``evaluate_posterior``) as a tree decoder.

EAGLE-1 drafts each node's children with ``torch.multinomial(probs, k, replacement=False)``
and verifies them depth by depth: sibling x accepted when ``random.random() <= p(x)/q'(x)``
(q' the draft probability renormalised after the earlier siblings, as its ``sample``
computes it), and on a rejection p ← normalize(max(p − q_masked, 0)). It is pure torch and
runs on a CPU.

The adapter builds EAGLE's inputs from the tree contract with EAGLE's own buffer builder
(``generate_tree_buffers`` from the tree's choice lists): the candidates and their
probabilities along every root-to-leaf path, the target's logits along them (log p, with
an identity logits processor), the draft distributions per parent (``op``) and the
indices of the siblings tried before (``b_indices``). It seeds Python's global
``random`` (which EAGLE draws from) from the contract's ``rng`` and restores its state
afterwards, then samples the correction or bonus token from the ``sample_p`` EAGLE
returns. One sequence a call, as EAGLE verifies: a Python loop over rows.

Install: ``pip install --no-deps eagle-llm==1.2.1`` (it needs torch and transformers,
which the ``hf`` extra brings).
"""

from __future__ import annotations

import random
from functools import lru_cache

import numpy as np

from specgauge.laws import sibling_ranks, tree_depths

from specgauge.stattests.core.contract import PAD
from specgauge.stattests.core.sampling import sample_rows


def _import_eagle():
    """EAGLE's utils module; ImportError names what failed."""
    try:
        import torch  # noqa: F401
        from eagle.model import utils
    except ImportError as exc:
        raise ImportError(f"EAGLE adapter: `from eagle.model import utils` failed ({exc}); "
                          "install it with `pip install --no-deps eagle-llm==1.2.1`") from exc
    return utils


def tree_choices(parents: np.ndarray) -> list[list[int]]:
    """EAGLE's choice lists: each node as the sibling ranks along its path."""
    ranks = sibling_ranks(parents)
    paths: list[list[int]] = []
    for i, parent in enumerate(parents):
        paths.append(([] if parent < 0 else paths[parent]) + [int(ranks[i])])
    return paths


@lru_cache(maxsize=32)
def _buffers(parents_key: tuple[int, ...]):
    """EAGLE's buffers for a tree shape, and where each of EAGLE's positions sits in ours."""
    utils = _import_eagle()
    parents = np.asarray(parents_key, dtype=np.int64)
    choices = tree_choices(parents)
    if max(max(c) for c in choices) >= utils.TOPK:
        raise ValueError(f"EAGLE's buffers hold at most {utils.TOPK} children a node")
    buffers = utils.generate_tree_buffers(choices, device="cpu")
    ordered = sorted(choices, key=lambda c: (len(c), c))
    position_node = np.array([-1] + [choices.index(c) for c in ordered], dtype=np.int64)  # EAGLE position -> node
    # op[d][g]: the q of the g-th parent group at depth d+1, groups numbered as EAGLE numbers them
    depth = tree_depths(parents)
    groups: list[list[int]] = [[] for _ in range(int(depth.max()))]
    for c in ordered:
        node = choices.index(c)
        level = groups[len(c) - 1]
        if not level or parents[level[-1]] != parents[node]:
            level.append(node)
    return buffers, position_node, groups


class EagleDecoder:
    """EAGLE-1's ``evaluate_posterior`` behind the tree contract (scheme: without replacement)."""

    name = "eagle"
    scheme = "without-replacement"
    certification_tv = 0.06  # a Python call per row: about 7k rows a fixture at the root

    temperature = 1.0

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.utils = _import_eagle()
        from transformers.generation.logits_process import LogitsProcessorList, TemperatureLogitsWarper

        # The logits handed over are T·log p, and EAGLE's processor divides by T: the
        # processed distribution is the contract's p whatever T (identity at T = 1).
        warpers = [] if self.temperature == 1.0 else [TemperatureLogitsWarper(self.temperature)]
        self.processor = LogitsProcessorList(warpers)

    def verify_tree(self, parents, tokens, draft_probs, target_probs, rng):
        torch = self.torch
        parents = np.asarray(parents, dtype=np.int64)
        buffers, position_node, groups = _buffers(tuple(parents.tolist()))
        retrieve = buffers["retrieve_indices"]
        ranks = sibling_ranks(parents)
        depth = int(tree_depths(parents).max(initial=0))
        batch = tokens.shape[0]
        emitted = np.full((batch, depth + 1), PAD, dtype=np.int64)
        # EAGLE's sampled_probs: q(x_j) / (1 − Σ_{i<j} q(x_i)) over the siblings drawn before
        q_x = np.take_along_axis(draft_probs, tokens[..., None], axis=2)[..., 0]
        before = np.zeros_like(q_x)
        for i, parent in enumerate(parents):
            if ranks[i] > 0:
                before[:, i] = before[:, i - 1] + q_x[:, i - 1] if parents[i - 1] == parent else 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            cond = np.clip(np.nan_to_num(q_x / (1.0 - before), nan=-1.0, posinf=-1.0), 0.0, 1.0)
        nodes = position_node[1:]
        sample_p = np.empty((batch, target_probs.shape[-1]))
        accepted = np.zeros(batch, dtype=np.int64)
        best_paths = np.zeros((batch, retrieve.shape[1]), dtype=np.int64)
        state = random.getstate()
        random.seed(int(rng.integers(2**63)))
        try:
            with np.errstate(divide="ignore"):
                log_p = self.temperature * np.log(target_probs)
            for b in range(batch):  # EAGLE verifies one sequence a call
                tree_tokens = torch.as_tensor(np.concatenate([[0], tokens[b, nodes]]))[None]
                ext = torch.cat([tree_tokens[0], torch.tensor([-1])])
                candidates = ext[retrieve]
                prob_ext = torch.as_tensor(np.concatenate([[1.0], cond[b, nodes], [1.0]]))
                cart_prob = prob_ext[retrieve]
                rows = torch.as_tensor(log_p[b, position_node + 1])  # EAGLE position -> p after that node
                logits = rows[torch.where(retrieve >= 0, retrieve, 0)]
                op = [torch.as_tensor(draft_probs[b, level]) for level in groups]
                best, n_acc, p_final = self.utils.evaluate_posterior(
                    logits, candidates, self.processor, cart_prob, op, buffers["p_indices"], tree_tokens,
                    buffers["b_indices"])
                best = int(best)
                accepted[b] = int(n_acc)
                best_paths[b] = candidates[best].numpy()
                sample_p[b] = p_final.double().numpy()
        finally:
            random.setstate(state)
        final = sample_rows(sample_p / sample_p.sum(axis=1, keepdims=True), rng)
        cols = np.arange(depth + 1)[None, :]
        path = np.concatenate([best_paths[:, 1:], np.full((batch, 1), PAD)], axis=1)[:, : depth + 1]
        if path.shape[1] < depth + 1:
            path = np.concatenate([path, np.full((batch, depth + 1 - path.shape[1]), PAD)], axis=1)
        emitted[:] = np.where(cols < accepted[:, None], path, PAD)
        emitted[np.arange(batch), accepted] = final
        return emitted


class EagleTemperatureDecoder(EagleDecoder):
    """EAGLE at temperature 0.5: the logits are T·log p and the processor divides by T.

    ``evaluate_posterior`` applies the logits processor on its rejection path but returns
    ``softmax(logits)`` unprocessed when the last level saw no rejection (a full accept,
    or a leaf): the bonus token then ignores temperature (and top-p / top-k)."""

    name = "eagle-t0.5"
    temperature = 0.5
