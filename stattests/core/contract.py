"""The decoder contract and the loader for ``--decoder``.

One round of verification for a batch of B sequences, vocabulary V, γ drafted tokens::

    verify(target_probs, draft_probs, draft_tokens, rng) -> emitted
      target_probs  float64 [B, γ+1, V]   row γ is the bonus position
      draft_probs   float64 [B, γ, V]     what each draft token was drawn from
      draft_tokens  int64   [B, γ]        draft_tokens[b, k] ~ draft_probs[b, k]
      rng           numpy.random.Generator
      emitted       int64   [B, γ+1]      accepted prefix, then correction or bonus; then -1
"""

from __future__ import annotations

import os
from typing import Protocol, runtime_checkable

import numpy as np

from specgauge.errors import DecoderLoadError
from specgauge.plugins import load_named

PAD = -1


@runtime_checkable
class Decoder(Protocol):
    """Anything with a ``verify`` method of the contract's signature."""

    def verify(
        self,
        target_probs: np.ndarray,
        draft_probs: np.ndarray,
        draft_tokens: np.ndarray,
        rng: np.random.Generator,
    ) -> np.ndarray: ...


#: Built-in short names and where they live; optional backends import lazily.
BUILTIN_DECODERS: dict[str, str] = {
    "numpy": "specgauge.stattests.core.reference:NumpyDecoder",
    "torch": "specgauge.stattests.decoders.torch_decoder:TorchDecoder",
    "hf": "specgauge.stattests.decoders.hf:HFDecoder",
    "vllm": "specgauge.stattests.decoders.vllm:VLLMDecoder",
    "vllm-onehot": "specgauge.stattests.decoders.vllm:VLLMOneHotDecoder",
    "vllm-greedy": "specgauge.stattests.decoders.vllm:VLLMGreedyDecoder",
    "sglang": "specgauge.stattests.decoders.sglang:SGLangDecoder",
    "sglang-block": "specgauge.stattests.decoders.sglang:SGLangBlockDecoder",
    "onehot-q": "specgauge.stattests.decoders.rules:OneHotDraftDecoder",
    "match": "specgauge.stattests.decoders.rules:SampleAndMatchDecoder",
    "typical": "specgauge.stattests.decoders.rules:TypicalAcceptanceDecoder",
}

DECODER_ENV = "SPECGAUGE_DECODER"
DEFAULT_DECODER = "numpy"


def resolve_spec(spec: str | None) -> str:
    """Turn a short name or ``MODULE:NAME`` (or None: the environment, then numpy) into ``MODULE:NAME``."""
    spec = (spec or os.environ.get(DECODER_ENV) or DEFAULT_DECODER).strip()
    if spec in BUILTIN_DECODERS:
        return BUILTIN_DECODERS[spec]
    if ":" not in spec:
        known = ", ".join(BUILTIN_DECODERS)
        raise DecoderLoadError(
            f"unknown decoder {spec!r}: use one of the built-ins ({known}) or MODULE:NAME"
        )
    return spec


def load_decoder(spec: str | None = None) -> Decoder:
    """Load and instantiate the decoder named by ``spec`` (see :func:`resolve_spec`).

    NAME may be a class or any callable with no required argument returning an object
    with ``verify``; an object that already has ``verify`` is used as it is.
    """
    return load_named(resolve_spec(spec), noun="decoder", needs=("verify",),  # type: ignore[return-value]
                      error=DecoderLoadError)


def decoder_name(spec: str | None) -> str:
    """The name a certificate shows: the short name when there is one, else MODULE:NAME."""
    spec = (spec or os.environ.get(DECODER_ENV) or DEFAULT_DECODER).strip()
    return spec


class ContractViolation(AssertionError):
    """The decoder's output breaks the contract; the message names the defect."""


def validate_padded(emitted: object, shape: tuple[int, int], vocab_size: int,
                    who: str = "verify") -> tuple[np.ndarray, np.ndarray]:
    """``(emitted as int64, tokens per row)`` after checking the type, ``shape``, an integer
    dtype, the range, the -1 padding (nothing after it) and at least one token per row.

    Shared by the chain contract and the tree contract (``who`` names the method)."""
    batch, width = shape
    if not isinstance(emitted, np.ndarray):
        raise ContractViolation(f"{who} returned {type(emitted).__name__}, not a numpy array")
    if emitted.shape != (batch, width):
        raise ContractViolation(f"{who} returned shape {emitted.shape}, expected {(batch, width)}")
    if not np.issubdtype(emitted.dtype, np.integer):
        raise ContractViolation(f"{who} returned dtype {emitted.dtype}, expected int64")
    emitted = emitted.astype(np.int64, copy=False)
    pad = emitted == PAD
    bad = (~pad) & ((emitted < 0) | (emitted >= vocab_size))
    if bad.any():
        b, k = np.argwhere(bad)[0]
        raise ContractViolation(
            f"token {emitted[b, k]} out of range [0, {vocab_size}) at row {b}, position {k}"
        )
    lengths = np.argmax(np.concatenate([pad, np.ones((batch, 1), bool)], axis=1), axis=1)
    after = np.arange(width)[None, :] >= lengths[:, None]
    garbage = after & ~pad
    if garbage.any():
        b, k = np.argwhere(garbage)[0]
        raise ContractViolation(f"token {emitted[b, k]} after the -1 padding at row {b}, position {k}")
    if (lengths == 0).any():
        b = int(np.argmax(lengths == 0))
        raise ContractViolation(f"row {b} emitted no token (every round emits at least one)")
    return emitted, lengths


def check_emitted(emitted: object, draft_tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    """Validate one ``verify`` result and return it as int64 [B, γ+1].

    Checks shape, integer dtype, range, the -1 padding (nothing after it), at least one
    token per row, and that the accepted prefix repeats the draft tokens.
    """
    batch, gamma = draft_tokens.shape
    emitted, lengths = validate_padded(emitted, (batch, gamma + 1), vocab_size)
    prefix = np.arange(gamma)[None, :] < (lengths[:, None] - 1)
    mismatch = prefix & (emitted[:, :gamma] != draft_tokens)
    if mismatch.any():
        b, k = np.argwhere(mismatch)[0]
        raise ContractViolation(
            f"row {b} position {k}: emitted {emitted[b, k]} inside the accepted prefix "
            f"but the draft token was {draft_tokens[b, k]}"
        )
    return emitted


def check_possible(emitted: np.ndarray, target_probs: np.ndarray) -> None:
    """Every emitted token must have target probability > 0 at its position: an exact
    decoder emits an impossible token with probability zero, whatever it drew."""
    rows, cols = np.nonzero(emitted != PAD)
    impossible = target_probs[rows, cols, emitted[rows, cols]] <= 0.0
    if impossible.any():
        i = int(np.argmax(impossible))
        raise ContractViolation(
            f"row {rows[i]} position {cols[i]}: emitted token {emitted[rows[i], cols[i]]}, "
            f"which the target gives probability 0")


def emitted_lengths(emitted: np.ndarray) -> np.ndarray:
    """Tokens emitted per row (the -1 padding excluded), for a validated result."""
    return (emitted != PAD).sum(axis=1)
