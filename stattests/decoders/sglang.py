"""Adapters over SGLang's chain verification kernel (tested with SGLang 0.5.23).

``sglang/kernels/ops/speculative/reject_sampling.py:chain_speculative_sampling_triton`` is the
kernel SGLang's chain (DFlash / DSpark) verification calls; it depends only on triton, so the
adapter loads that one file (``importlib.util.spec_from_file_location``) and none of SGLang's
heavy imports. Two modes:

* classic (:class:`SGLangDecoder`): Leviathan's rule, accept while ``u·q(x) < p(x)``, the
  correction drawn from max(p − q, 0) by an inverse CDF over 4096-token tiles;
* block verification (:class:`SGLangBlockDecoder`, ``block_verification=True``): Sun et al.
  2024 (arXiv 2403.10444, Algorithm 2), exact, and accepting more than the per-token rule.

Inputs as SGLang builds them: the target's probabilities are the float32 softmax of the
target logits log p (−inf where p = 0; exp(−inf) = 0 keeps those tokens impossible), draft
probabilities float32 [B, γ, V], candidates [B, γ+1] int64 with slot 0 the root, the retrieve
index of a chain, acceptance uniforms [B, γ] and the final-sampling uniform [B] in float32
drawn from one ``torch.Generator`` seeded from the contract's rng. The emitted tokens are
``predicts[accept_index[b, :accept_token_num[b] + 1]]``: the accepted drafts, then the
correction or the bonus token.

On a machine without a GPU the kernel runs under Triton's interpreter; the environment for
that is set by :mod:`specgauge.stattests.decoders._triton_env` before the kernel file is loaded.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np

from specgauge.stattests.core.contract import PAD
from specgauge.stattests.decoders import _triton_env

_PURPOSE = "SGLang adapter"
_KERNEL_RELPATH = ("kernels", "ops", "speculative", "reject_sampling.py")
_MODULE_NAME = "specgauge_sglang_reject_sampling"


def _load_kernel():
    """Load SGLang's chain kernel file alone; ImportError names exactly what failed."""
    env = _triton_env.prepare(_PURPOSE)
    torch = _triton_env.import_backend("torch", _PURPOSE)
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError) as exc:  # a broken parent package
        raise ImportError(f"{_PURPOSE}: locating `sglang` failed ({exc})") from exc
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"{_PURPOSE}: `import sglang` failed (No module named 'sglang'); "
            "install the CPU backends with scripts/install-cpu-backends.sh"
        )
    root = list(spec.submodule_search_locations)[0]
    path = os.path.join(root, *_KERNEL_RELPATH)
    if not os.path.exists(path):
        raise ImportError(
            f"{_PURPOSE}: `import sglang.kernels.ops.speculative.reject_sampling` failed: "
            f"{path} is missing (half-installed SGLang, or a version other than 0.5.23)"
        )
    module = sys.modules.get(_MODULE_NAME)
    if module is None:
        kspec = importlib.util.spec_from_file_location(_MODULE_NAME, path)
        module = importlib.util.module_from_spec(kspec)
        try:
            kspec.loader.exec_module(module)
        except Exception as exc:
            raise ImportError(
                f"{_PURPOSE}: loading {path} failed ({type(exc).__name__}: {exc})"
            ) from exc
        sys.modules[_MODULE_NAME] = module
    fn = getattr(module, "chain_speculative_sampling_triton", None)
    if fn is None:
        raise ImportError(
            f"{_PURPOSE}: `from sglang.kernels.ops.speculative.reject_sampling import "
            f"chain_speculative_sampling_triton` failed: {path} has no such function"
        )
    version = "?"
    try:
        from importlib.metadata import version as _v

        version = _v("sglang")
    except Exception:
        pass
    return env, torch, fn, version, path


class SGLangDecoder:
    """SGLang's ``chain_speculative_sampling_triton`` in its classic (per-token) mode."""

    name = "sglang"
    block_verification = False

    def __init__(self, device: str | None = None) -> None:
        self._env, self._torch, self._kernel, self.version, self.kernel_path = _load_kernel()
        self.device = self._torch.device(device or self._env.device)
        mode = "block verification" if self.block_verification else "classic"
        self.backend = f"SGLang {self.version} chain_speculative_sampling_triton ({mode}) on {self._env.describe()}"
        #: the TVs certified at when none is asked for (see _triton_env: coarse under the
        #: interpreter, finer on the small-vocabulary fixture; 0.01 on a GPU)
        self.certification_tv = self._env.certification_tv
        self.certification_tv_by_fixture = self._env.certification_tv_by_fixture

    def verify(
        self,
        target_probs: np.ndarray,
        draft_probs: np.ndarray,
        draft_tokens: np.ndarray,
        rng: np.random.Generator,
    ) -> np.ndarray:
        torch = self._torch
        dev = self.device
        batch, gamma = draft_tokens.shape
        slots = gamma + 1
        generator = torch.Generator(device=dev)
        generator.manual_seed(int(rng.integers(2**63)))

        with np.errstate(divide="ignore"):
            logits = np.log(np.asarray(target_probs, dtype=np.float64)).astype(np.float32)
        target = torch.softmax(torch.from_numpy(logits).to(dev), dim=-1).contiguous()
        draft = torch.from_numpy(np.ascontiguousarray(draft_probs, dtype=np.float32)).to(dev)
        candidates = torch.zeros((batch, slots), dtype=torch.int64, device=dev)
        candidates[:, 1:] = torch.from_numpy(np.asarray(draft_tokens, dtype=np.int64)).to(dev)
        retrive_index = torch.arange(batch * slots, dtype=torch.int64, device=dev).view(batch, slots)
        retrive_next_token = torch.arange(1, slots + 1, dtype=torch.int64, device=dev).repeat(batch, 1)
        retrive_next_token[:, -1] = -1
        retrive_next_sibling = torch.full((batch, slots), -1, dtype=torch.int64, device=dev)
        predicts = torch.full((batch * slots,), PAD, dtype=torch.int32, device=dev)
        accept_index = torch.full((batch, slots), PAD, dtype=torch.int32, device=dev)
        accept_token_num = torch.zeros((batch,), dtype=torch.int32, device=dev)
        uniform = torch.rand((batch, gamma), dtype=torch.float32, device=dev, generator=generator)
        uniform_final = torch.rand((batch,), dtype=torch.float32, device=dev, generator=generator)
        kwargs = {"block_verification": True} if self.block_verification else {}
        with torch.no_grad():
            self._kernel(
                predicts=predicts,
                accept_index=accept_index,
                accept_token_num=accept_token_num,
                candidates=candidates,
                retrive_index=retrive_index,
                retrive_next_token=retrive_next_token,
                retrive_next_sibling=retrive_next_sibling,
                uniform_samples=uniform,
                uniform_samples_for_final_sampling=uniform_final,
                target_probs=target,
                draft_probs=draft,
                threshold_single=1.0,
                threshold_acc=1.0,
                deterministic=True,
                **kwargs,
            )
        n_accepted = accept_token_num.to("cpu").numpy().astype(np.int64)
        index = accept_index.to("cpu").numpy().astype(np.int64)
        flat = predicts.to("cpu").numpy().astype(np.int64)
        emitted = np.full((batch, slots), PAD, dtype=np.int64)
        keep = np.arange(slots)[None, :] <= n_accepted[:, None]
        # Out-of-range accept counts or indices are the kernel's to answer for: pass on
        # whatever they point at (or PAD) and let the contract checks say what is wrong.
        safe = np.clip(index, 0, flat.size - 1)
        values = np.where(index >= 0, flat[safe], PAD)
        emitted[keep] = values[keep]
        return emitted


class SGLangBlockDecoder(SGLangDecoder):
    """SGLang's chain kernel with ``block_verification=True`` (arXiv 2403.10444, Algorithm 2).

    Exact, and its tokens per pass exceed the per-token law (1 − α^(γ+1)) / (1 − α): the
    certificate must report that as better than the law, not as a failure of exactness.
    """

    name = "sglang-block"
    block_verification = True
