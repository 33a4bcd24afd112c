"""The SGLang tree-kernel adapter's plumbing, on CPU, against a transliteration of the kernel.

``tree_speculative_sampling_target_only`` is CUDA only; scripts/certify-cuda.sh certifies
the real kernel. Here the adapter's packing (positions, tree links, coins) and unpacking
(``predicts[accept_index]``) run against a line-by-line Python copy of the kernel's loop,
so a layout mistake in the adapter fails on any machine.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the SGLang tree adapter builds torch tensors")

from specgauge.stattests.decoders.sglang_tree import SGLangTreeDecoder, tree_links  # noqa: E402
from specgauge.stattests.tree.checks import TreeCertConfig, certify_tree  # noqa: E402


def test_tree_links_chain_children_and_siblings():
    next_token, next_sibling = tree_links(np.array([-1, -1, 0, 0, 1]))
    assert next_token.tolist() == [1, 3, 5, -1, -1, -1]
    assert next_sibling.tolist() == [-1, 2, -1, 4, -1, -1]


def kernel_in_python(predicts, accept_index, accept_token_num, candidates, retrive_index, retrive_next_token,
                     retrive_next_sibling, uniform_samples, uniform_samples_for_final_sampling, target_probs,
                     draft_probs, threshold_single=1.0, threshold_acc=1.0, deterministic=True):
    """SGLang's TreeSpeculativeSamplingTargetOnly, one row at a time, as its CUDA source reads."""
    batch, positions = candidates.shape
    spec = accept_index.shape[1]
    for bx in range(batch):
        prob_acc, offset = 0.0, 0
        coin = float(uniform_samples[bx, 0])
        last = int(retrive_index[bx, 0])
        accept_index[bx, 0] = last
        accepted, cur = 0, 0
        for _ in range(1, spec):
            cur = int(retrive_next_token[bx, cur])
            while cur != -1:
                token = int(candidates[bx, cur])
                single = float(target_probs[bx, offset, token])
                prob_acc += single
                if coin <= prob_acc / max(threshold_acc, 1e-9) or single >= threshold_single:
                    prob_acc, offset, coin = 0.0, cur, float(uniform_samples[bx, cur])
                    predicts[last] = token
                    accepted += 1
                    accept_index[bx, accepted] = int(retrive_index[bx, cur])
                    last = int(retrive_index[bx, cur])
                    break
                draft_probs[bx, offset, token] = target_probs[bx, offset, token]
                cur = int(retrive_next_sibling[bx, cur])
            if cur == -1:
                break
        accept_token_num[bx] = accepted
        rest = torch.clamp(target_probs[bx, offset] - draft_probs[bx, offset], min=0).double()
        cdf = torch.cumsum(rest, 0)
        u = float(uniform_samples_for_final_sampling[bx]) * float(cdf[-1])
        predicts[last] = int(min(int((cdf <= u).sum()), rest.numel() - 1))


def _cpu_adapter(threshold: float) -> SGLangTreeDecoder:
    decoder = object.__new__(SGLangTreeDecoder)
    decoder.torch, decoder.kernel, decoder.device = torch, kernel_in_python, "cpu"
    decoder.threshold_single = decoder.threshold_acc = threshold
    decoder.name = f"sglang-tree-in-python-{threshold}"
    return decoder


def test_adapter_plumbing_is_exact_at_thresholds_one():
    cert = certify_tree(_cpu_adapter(1.0), TreeCertConfig(tv=0.1), fixtures=["eagle-choices", "greedy"])
    assert cert.verdicts["exact"] and cert.verdicts["optimal_acceptance"], cert.summary()


def test_relaxed_thresholds_are_reported_lossy():
    cert = certify_tree(_cpu_adapter(0.5), TreeCertConfig(tv=0.1), fixtures=["narrow"])
    assert not cert.verdicts["exact"], cert.summary()


def test_sglang_triton_greedy_tree_kernel_is_exact_on_greedy_trees():
    """SGLang 0.5.23's own Triton greedy tree verifier, under the interpreter on a CPU."""
    from specgauge.stattests.decoders.sglang_tree import SGLangGreedyTreeDecoder

    try:
        decoder = SGLangGreedyTreeDecoder()
    except ImportError as exc:
        pytest.skip(str(exc))
    config = TreeCertConfig(tv=0.2, assertions=2)
    cert = certify_tree(decoder, config, fixtures=["greedy"])
    assert cert.verdicts["exact"], cert.summary()
    from specgauge.fixtures.trees import TREE_FIXTURES

    assert int(cert.frame["n"].max()) == config.rows(TREE_FIXTURES["greedy"])  # every tree verified
