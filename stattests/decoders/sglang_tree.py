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

from specgauge.stattests.core.contract import PAD
from specgauge.stattests.core.tree_contract import children_table


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
        return _unpack(predicts, accept_index, accept_num, depth)


class SGLangTreeRelaxedDecoder(SGLangTreeDecoder):
    """The same kernel with ``threshold_single = threshold_acc = 0.5``: lossy by design."""

    name = "sglang-tree-relaxed"

    def __init__(self) -> None:
        super().__init__(threshold_single=0.5, threshold_acc=0.5)


_GREEDY_FUNCTIONS = ("verify_tree_greedy_kernel_triton", "verify_tree_greedy_triton")


def _load_greedy_kernel():
    """SGLang's Triton greedy tree verifier, taken out of ``spec_tree.py`` alone.

    That module imports SGLang's server stack and, on a CPU, routes greedy verification to
    ``sgl_kernel``'s C++ op; the Triton kernel itself needs only triton. Its two functions'
    source is copied verbatim into a cached file and imported from there (Triton reads a
    kernel's source), under the interpreter when no GPU is present.
    """
    import ast
    import importlib.util
    import os
    import sys
    import tempfile

    from specgauge.stattests.decoders import _triton_env

    purpose = "SGLang greedy tree adapter"
    env = _triton_env.prepare(purpose)
    torch = _triton_env.import_backend("torch", purpose)
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"{purpose}: `import sglang` failed (No module named 'sglang'); "
                          "install the CPU backends with scripts/install-cpu-backends.sh")
    path = os.path.join(list(spec.submodule_search_locations)[0], "kernels", "ops", "speculative", "spec_tree.py")
    if not os.path.exists(path):
        raise ImportError(f"{purpose}: {path} is missing (a version other than 0.5.23?)")
    name = "specgauge_sglang_verify_tree_greedy"
    module = sys.modules.get(name)
    if module is None:
        with open(path, encoding="utf-8") as handle:
            source = handle.read()
        tree = ast.parse(source)
        found = {n.name: ast.get_source_segment(source, n) for n in tree.body
                 if isinstance(n, ast.FunctionDef) and n.name in _GREEDY_FUNCTIONS}
        missing = set(_GREEDY_FUNCTIONS) - set(found)
        if missing:
            raise ImportError(f"{purpose}: {path} has no {', '.join(sorted(missing))}")
        decorated = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in found}
        parts = ["import torch", "import triton", "import triton.language as tl", ""]
        for fn in _GREEDY_FUNCTIONS:
            node = decorated[fn]
            start = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
            parts.append("\n".join(source.splitlines()[start:node.end_lineno]))
            parts.append("")
        folder = os.path.join(tempfile.gettempdir(), "specgauge-kernels")
        os.makedirs(folder, exist_ok=True)
        file = os.path.join(folder, f"{name}.py")
        with open(file, "w", encoding="utf-8") as handle:
            handle.write(f"# copied from {path}\n" + "\n".join(parts))
        kspec = importlib.util.spec_from_file_location(name, file)
        module = importlib.util.module_from_spec(kspec)
        kspec.loader.exec_module(module)
        sys.modules[name] = module
    return env, torch, module.verify_tree_greedy_triton


class SGLangGreedyTreeDecoder:
    """SGLang 0.5.23's Triton greedy tree verifier (``verify_tree_greedy_kernel_triton``):
    follows the child whose token is the target's argmax. Certified on greedy trees only."""

    name = "sglang-tree-greedy"
    scheme = "iid"  # greedy verification ignores how the drafts were made; i.i.d. trees vary most
    greedy_only = True
    certification_tv = 0.2  # one interpreted Triton program per row: about 540 trees

    def __init__(self) -> None:
        self.env, self.torch, self.kernel = _load_greedy_kernel()

    def verify_tree(self, parents, tokens, draft_probs, target_probs, rng):
        torch, dev = self.torch, self.env.device
        parents = np.asarray(parents, dtype=np.int64)
        batch, n_nodes = tokens.shape
        positions, depth = n_nodes + 1, int(tree_depths(parents).max(initial=0))
        next_token, next_sibling = tree_links(parents)
        as_t = lambda a, dtype: torch.as_tensor(np.ascontiguousarray(a), dtype=dtype, device=dev)  # noqa: E731
        candidates = np.concatenate([np.zeros((batch, 1), np.int64), tokens], axis=1)
        predicts = torch.full((batch * positions,), -1, dtype=torch.int32, device=dev)
        accept_index = torch.full((batch, depth + 1), -1, dtype=torch.int32, device=dev)
        accept_num = torch.zeros(batch, dtype=torch.int32, device=dev)
        self.kernel(predicts, accept_index, accept_num, as_t(candidates, torch.int64),
                    as_t(np.arange(batch * positions).reshape(batch, positions), torch.int64),
                    as_t(np.broadcast_to(next_token, (batch, positions)), torch.int64),
                    as_t(np.broadcast_to(next_sibling, (batch, positions)), torch.int64),
                    as_t(target_probs.argmax(axis=2), torch.int64))
        return _unpack(predicts, accept_index, accept_num, depth)


def _unpack(predicts, accept_index, accept_num, depth: int) -> np.ndarray:
    """The emitted tokens, ``predicts[accept_index[b, :accept_num[b] + 1]]``, −1 padded."""
    n = accept_num.cpu().numpy().astype(np.int64)
    index = accept_index.cpu().numpy().astype(np.int64)
    predicted = predicts.cpu().numpy().astype(np.int64)
    emitted = np.full((index.shape[0], depth + 1), PAD, dtype=np.int64)
    keep = np.arange(depth + 1)[None, :] <= n[:, None]
    emitted[keep] = predicted[np.maximum(index, 0)][keep]
    return emitted
