"""Leviathan's rule in torch: the NumPy reference, batched on CPU or CUDA.

Mirrors :func:`specgauge.stattests.core.reference.leviathan_verify` operation for operation (float64,
inverse-CDF sampling), so the two differ only in where the random numbers come from:
here a ``torch.Generator`` seeded once per call from the contract's NumPy ``rng``.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

import numpy as np

from specgauge.stattests.core.contract import PAD

try:
    import torch
except ImportError:  # the constructor reports it; importing this module stays cheap
    torch = None  # type: ignore[assignment]

if TYPE_CHECKING:
    import torch as _torch


def _require_torch() -> None:
    if torch is None:
        raise ImportError(
            "the torch decoder needs the package 'torch': pip install 'specgauge[torch]' (torch==2.13.0)"
        )


def _check_shapes(target: "_torch.Tensor", draft: "_torch.Tensor", tokens: "_torch.Tensor") -> None:
    """Validation at the door: shapes agree and every tensor is on one device."""
    if tokens.ndim != 2:
        raise ValueError(f"draft_tokens must be [B, gamma], got shape {tuple(tokens.shape)}")
    batch, gamma = tokens.shape
    if target.ndim != 3 or target.shape[:2] != (batch, gamma + 1):
        raise ValueError(
            f"target_probs must be [B, gamma+1, V] = [{batch}, {gamma + 1}, V], got {tuple(target.shape)}"
        )
    if draft.shape != (batch, gamma, target.shape[2]):
        raise ValueError(
            f"draft_probs must be [B, gamma, V] = {(batch, gamma, target.shape[2])}, got {tuple(draft.shape)}"
            " (the draft's vocabulary must be the target's)"
        )
    devices = {target.device, draft.device, tokens.device}
    if len(devices) != 1:
        raise ValueError(f"tensors on different devices: {sorted(map(str, devices))}")


@contextmanager
def _cpu_threads(num_threads: int | None) -> Iterator[None]:
    """torch's intra-op CPU threads set to ``num_threads`` for the block, then restored."""
    if num_threads is None:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def sample_rows_torch(probs: "_torch.Tensor", generator: "_torch.Generator") -> "_torch.Tensor":
    """One token per row of ``probs`` [N, V] (unnormalised), by inverse CDF like the reference.

    Never returns a zero-probability token: the index is clamped to the last non-zero entry.
    """
    cdf = torch.cumsum(probs, dim=1)
    u = torch.rand(probs.shape[0], generator=generator, dtype=probs.dtype, device=probs.device)
    u = u * cdf[:, -1]
    tokens = torch.searchsorted(cdf, u[:, None], right=True)[:, 0]
    vocab = probs.shape[1]
    last_nonzero = vocab - 1 - torch.argmax((probs.flip(1) > 0).to(torch.uint8), dim=1)
    return torch.minimum(tokens, last_nonzero)


def verify_tensors(
    target_probs: "_torch.Tensor",
    draft_probs: "_torch.Tensor",
    draft_tokens: "_torch.Tensor",
    generator: "_torch.Generator",
) -> "_torch.Tensor":
    """The torch-native entry point: tensors in, int64 tensor [B, γ+1] out, on their device.

    Accept draft x at position k while ``u·q(x) < p(x)``; at the first rejection draw from
    normalize(max(p − q, 0)) (from p when that residual is zero up to rounding); after γ
    acceptances draw the bonus from row γ. No Python loop over rows or tokens.
    """
    _require_torch()
    _check_shapes(target_probs, draft_probs, draft_tokens)
    if generator.device != target_probs.device and not (
        generator.device.type == target_probs.device.type == "cuda"
    ):
        raise ValueError(
            f"generator on {generator.device} but tensors on {target_probs.device}: put both on one device"
        )
    batch, gamma = draft_tokens.shape
    device = target_probs.device
    rows = torch.arange(batch, device=device)
    tokens = draft_tokens.long()
    uniforms = torch.rand((batch, gamma), generator=generator, dtype=target_probs.dtype, device=device)
    p_x = torch.gather(target_probs[:, :gamma], 2, tokens[..., None])[..., 0]
    q_x = torch.gather(draft_probs, 2, tokens[..., None])[..., 0]
    accepted = uniforms * q_x < p_x
    n_accepted = torch.cumprod(accepted.to(torch.int64), dim=1).sum(dim=1)

    final_p = target_probs[rows, n_accepted]
    if gamma:
        rejected = n_accepted < gamma
        final_q = draft_probs[rows, torch.clamp(n_accepted, max=gamma - 1)]
        residual = torch.clamp(final_p - final_q * rejected[:, None], min=0.0)
        empty = residual.sum(dim=1) <= 0.0
        residual = torch.where(empty[:, None], final_p, residual)
    else:
        residual = final_p
    final_token = sample_rows_torch(residual, generator)

    positions = torch.arange(gamma + 1, device=device)[None, :]
    padded = torch.nn.functional.pad(tokens, (0, 1), value=PAD)
    emitted = torch.where(positions < n_accepted[:, None], padded, PAD)
    emitted[rows, n_accepted] = final_token
    return emitted


class TorchDecoder:
    """The contract in torch (float64), on ``device`` ("cpu", "cuda", "cuda:1", ...).

    ``verify`` takes and returns NumPy arrays like every contract decoder; the
    ``verify_tensors`` method is the torch-native path for callers already on the device.
    """

    name = "torch"

    def __init__(self, device: str = "cpu", num_threads: int | None = 1) -> None:
        _require_torch()
        self.device = torch.device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device {device!r} requested but torch sees no CUDA device")
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"num_threads must be a positive integer or None, got {num_threads!r}")
        #: CPU threads during a call (None: torch's own setting). One, like the NumPy
        #: reference: on a small busy machine OpenMP threads contend, 10-30x slower at 1k rows.
        self.num_threads = num_threads

    def generator(self, rng: np.random.Generator) -> "_torch.Generator":
        """A torch.Generator on this device, seeded from the contract's NumPy rng."""
        gen = torch.Generator(device=self.device)
        gen.manual_seed(int(np.random.default_rng(rng).integers(2**63)))
        return gen

    def verify_tensors(
        self,
        target_probs: "_torch.Tensor",
        draft_probs: "_torch.Tensor",
        draft_tokens: "_torch.Tensor",
        generator: "_torch.Generator",
    ) -> "_torch.Tensor":
        """Tensors on this decoder's device in and out; refuses tensors elsewhere."""
        for name, t in (("target_probs", target_probs), ("draft_probs", draft_probs), ("draft_tokens", draft_tokens)):
            if t.device.type != self.device.type or (
                self.device.index is not None and t.device.index != self.device.index
            ):
                raise ValueError(f"{name} is on {t.device} but this TorchDecoder runs on {self.device}")
        with _cpu_threads(self.num_threads):
            return verify_tensors(target_probs, draft_probs, draft_tokens, generator)

    def verify(
        self,
        target_probs: np.ndarray,
        draft_probs: np.ndarray,
        draft_tokens: np.ndarray,
        rng: np.random.Generator,
    ) -> np.ndarray:
        gen = self.generator(rng)
        to = dict(device=self.device)
        target = torch.as_tensor(np.asarray(target_probs, dtype=np.float64), **to)
        draft = torch.as_tensor(np.asarray(draft_probs, dtype=np.float64), **to)
        tokens = torch.as_tensor(np.asarray(draft_tokens, dtype=np.int64), **to)
        with _cpu_threads(self.num_threads):
            return verify_tensors(target, draft, tokens, gen).cpu().numpy()
