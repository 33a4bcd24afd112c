"""SGLang's tree verifier ``tree_speculative_sampling_target_only`` (a CUDA kernel) as a tree decoder.

UNTESTED on hardware: written without a GPU; ``scripts/certify-cuda.sh`` runs it. The
kernel is SGLang's EAGLE-2/3 verifier: deterministic top-k siblings, q = 1, one coin per
level compared with the cumulative target mass of the siblings tried, the correction
drawn from p with the tried siblings removed (``draft_probs`` all zero, as SGLang passes
them when it does not do rejection sampling). ``threshold_single`` and ``threshold_acc``
(``--speculative-accept-threshold-single/-acc``) relax acceptance: exact at 1, lossy by
design below.

Layout (per row, ``D = N + 1`` positions): position 0 is the last verified token, position
i + 1 is node i; ``retrive_next_token`` / ``retrive_next_sibling`` chain the tree,
``target_probs[b, i]`` is p after position i, and the emitted tokens are
``predicts[accept_index[b, :accept_token_num[b] + 1]]``.
"""

from __future__ import annotations

import numpy as np

from specgauge.laws import tree_depths

from ..contract import PAD
from ..tree_contract import children_table


def tree_links(parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(next_token, next_sibling)`` over positions 0 … N (−1: none), SGLang's tree links."""
    kids = children_table(parents)
    next_token = np.where(kids[:, 0] >= 0, kids[:, 0] + 1, -1)
    next_sibling = np.full(parents.size + 1, -1, dtype=np.int64)
    for group in kids:
        members = group[group >= 0]
        next_sibling[members[:-1] + 1] = members[1:] + 1
    return next_token.astype(np.int64), next_sibling


class SGLangTreeDecoder:
    """SGLang's ``tree_speculative_sampling_target_only`` behind the tree contract (needs CUDA)."""

    name = "sglang-tree"
    scheme = "topk"

    def __init__(self, threshold_single: float = 1.0, threshold_acc: float = 1.0) -> None:
        import torch
        from sglang.kernels.ops.speculative.sampling import tree_speculative_sampling_target_only

        if not torch.cuda.is_available():
            raise ImportError("sglang-tree: tree_speculative_sampling_target_only is a CUDA kernel; no GPU here")
        self.torch, self.kernel, self.device = torch, tree_speculative_sampling_target_only, "cuda"
        self.threshold_single, self.threshold_acc = threshold_single, threshold_acc

    def verify_tree(self, parents, tokens, draft_probs, target_probs, rng):
        torch = self.torch
        parents = np.asarray(parents, dtype=np.int64)
        batch, n_nodes = tokens.shape
        positions, depth = n_nodes + 1, int(tree_depths(parents).max(initial=0))
        next_token, next_sibling = tree_links(parents)
        dev = self.device
        candidates = np.concatenate([np.zeros((batch, 1), np.int64), tokens], axis=1)
        retrive_index = np.arange(batch * positions, dtype=np.int64).reshape(batch, positions)
        as_t = lambda a, dtype: torch.as_tensor(np.ascontiguousarray(a), dtype=dtype, device=dev)  # noqa: E731
        predicts = torch.full((batch * positions,), -1, dtype=torch.int32, device=dev)
        accept_index = torch.full((batch, depth + 1), -1, dtype=torch.int32, device=dev)
        accept_num = torch.zeros(batch, dtype=torch.int32, device=dev)
        target = as_t(target_probs, torch.float32)
        self.kernel(
            predicts=predicts, accept_index=accept_index, accept_token_num=accept_num,
            candidates=as_t(candidates, torch.int64), retrive_index=as_t(retrive_index, torch.int64),
            retrive_next_token=as_t(np.broadcast_to(next_token, (batch, positions)), torch.int64),
            retrive_next_sibling=as_t(np.broadcast_to(next_sibling, (batch, positions)), torch.int64),
            uniform_samples=as_t(rng.random((batch, positions)), torch.float32),
            uniform_samples_for_final_sampling=as_t(rng.random(batch), torch.float32),
            target_probs=target, draft_probs=torch.zeros_like(target),
            threshold_single=self.threshold_single, threshold_acc=self.threshold_acc, deterministic=True)
        n = accept_num.cpu().numpy().astype(np.int64)
        index = accept_index.cpu().numpy().astype(np.int64)
        predicted = predicts.cpu().numpy().astype(np.int64)
        emitted = np.full((batch, depth + 1), PAD, dtype=np.int64)
        cols = np.arange(depth + 1)[None, :]
        keep = cols <= n[:, None]
        emitted[keep] = predicted[np.maximum(index, 0)][keep]
        return emitted


class SGLangTreeRelaxedDecoder(SGLangTreeDecoder):
    """The same kernel with ``threshold_single = threshold_acc = 0.5``: lossy by design."""

    name = "sglang-tree-relaxed"

    def __init__(self) -> None:
        super().__init__(threshold_single=0.5, threshold_acc=0.5)
