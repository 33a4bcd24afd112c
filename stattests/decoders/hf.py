"""HF transformers as a contract decoder, and helpers to certify its assisted generation.

:class:`HFDecoder` feeds ``transformers.generation.utils._speculative_sampling`` (the rule
``generate(..., assistant_model=..., do_sample=True)`` runs) logits whose softmax is the
fixture's p and q: log p, which is −inf where p = 0; softmax maps that back to an exact 0.
It calls the function once per row because the function handles batch size 1 only.
Nothing HF computes is corrected here: what it gets wrong, the suite reports.

The end-to-end helpers build tiny Llama models from configs (no download), compute the
target's exact distribution over its first L new tokens from its own logits, and draw
sequences from assisted generation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from specgauge.stattests.core.contract import PAD

if TYPE_CHECKING:
    import torch


def _require(package: str):
    try:
        return __import__(package)
    except ImportError as exc:
        raise ImportError(
            f"the HF decoder needs the package '{package}': pip install 'specgauge[hf]' "
            "(torch==2.13.0, transformers==5.24.0)"
        ) from exc


def speculative_sampling_function():
    """transformers' own verification rule, or ImportError naming what is missing."""
    _require("torch")
    _require("transformers")
    try:
        from transformers.generation.utils import _speculative_sampling
    except ImportError as exc:
        import transformers

        raise ImportError(
            f"transformers {transformers.__version__} has no generation.utils._speculative_sampling; "
            "the adapter is written against transformers==5.24.0"
        ) from exc
    return _speculative_sampling


def probs_to_logits(probs: np.ndarray) -> "torch.Tensor":
    """float64 logits whose softmax is ``probs``: log p, −inf exactly where p = 0."""
    import torch

    with np.errstate(divide="ignore"):
        return torch.from_numpy(np.log(np.asarray(probs, dtype=np.float64)))


class HFDecoder:
    """The contract through ``_speculative_sampling``, one call per batch row.

    The function draws from torch's global generator (``torch.rand_like``,
    ``torch.multinomial``), so each ``verify`` forks that state, seeds it from the
    contract's rng, and restores it afterwards.
    """

    name = "hf"
    #: one Python call per row (about 5,000 rows/s on 2 cores): without --tv, certify at
    #: TV 0.05, a couple of minutes, rather than the hours 0.005 would take
    certification_tv = 0.05

    def __init__(self) -> None:
        self._sample = speculative_sampling_function()
        import torch

        self._torch = torch

    def verify(
        self,
        target_probs: np.ndarray,
        draft_probs: np.ndarray,
        draft_tokens: np.ndarray,
        rng: np.random.Generator,
    ) -> np.ndarray:
        torch = self._torch
        batch, gamma = draft_tokens.shape
        if gamma < 1:
            raise ValueError("_speculative_sampling needs at least one candidate token (gamma >= 1)")
        if target_probs.shape[0] != batch or target_probs.shape[1] != gamma + 1:
            raise ValueError(f"target_probs shape {target_probs.shape} does not fit draft_tokens {draft_tokens.shape}")
        if draft_probs.shape != (batch, gamma, target_probs.shape[2]):
            raise ValueError(
                f"draft_probs shape {draft_probs.shape}: expected {(batch, gamma, target_probs.shape[2])}"
                " (the draft vocabulary must be the target's)"
            )
        new_logits = probs_to_logits(target_probs)
        candidate_logits = probs_to_logits(draft_probs)
        candidates = torch.from_numpy(np.ascontiguousarray(draft_tokens, dtype=np.int64))
        emitted = np.full((batch, gamma + 1), PAD, dtype=np.int64)
        seed = int(np.random.default_rng(rng).integers(2**63))
        threads = torch.get_num_threads()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            torch.set_num_threads(1)  # tiny per-row ops: threads only add contention (10x slower)
            try:
                rows = self._rows(candidates, candidate_logits, new_logits, gamma)
            finally:
                torch.set_num_threads(threads)
        for b, row in enumerate(rows):
            emitted[b, : row.size] = row
        return emitted

    def _rows(self, candidates, candidate_logits, new_logits, gamma: int) -> list[np.ndarray]:
        out = []
        for b in range(candidates.shape[0]):
            valid, _ = self._sample(
                candidates[b : b + 1], candidate_logits[b : b + 1], gamma, new_logits[b : b + 1]
            )
            out.append(valid[0].numpy())
        return out


# ---------------------------------------------------------------- end to end


@dataclass(frozen=True)
class TinyLlamaSpec:
    """A tiny Llama target and a draft that is a noisy copy of it (no download)."""

    vocab_size: int = 8
    hidden_size: int = 16
    intermediate_size: int = 32
    initializer_range: float = 0.5
    draft_noise: float = 0.15
    seed: int = 0


def tiny_llama_pair(spec: TinyLlamaSpec = TinyLlamaSpec()) -> tuple[Any, Any]:
    """(target, draft) in eval mode; draft weights = target's + draft_noise·std·N(0, 1).

    ``pad_token_id`` is None so no prompt token is treated as padding.
    """
    torch = _require("torch")
    _require("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        initializer_range=spec.initializer_range,
        pad_token_id=None,
        bos_token_id=None,
        eos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        target = LlamaForCausalLM(config).eval()
        draft = LlamaForCausalLM(config).eval()
        draft.load_state_dict(target.state_dict())
        with torch.no_grad():
            for param in draft.parameters():
                if param.numel() > 1:
                    param.add_(spec.draft_noise * param.std() * torch.randn_like(param))
    return target, draft


def vocab_size(model: Any) -> int:
    """The vocabulary of a causal LM, also for composite configs (Gemma-4's assistant)."""
    return int(model.config.get_text_config().vocab_size)


def _check_models(prompt: "torch.Tensor", *models: Any) -> None:
    """Clear errors for a model on another device than the prompt, or a 2-D prompt missing."""
    if prompt.ndim != 2 or prompt.shape[0] != 1:
        raise ValueError(f"prompt must be a [1, T] tensor (assisted generation is batch 1), got {tuple(prompt.shape)}")
    for model in models:
        device = next(model.parameters()).device
        if device != prompt.device:
            raise ValueError(f"{type(model).__name__} is on {device} but the prompt is on {prompt.device}")


def next_token_probs(model: Any, contexts: "torch.Tensor") -> np.ndarray:
    """float64 softmax of the model's last-position logits for each row of ``contexts`` [N, T].

    Logits that are all −inf or NaN in a row are an error, not a uniform distribution.
    """
    torch = _require("torch")
    with torch.no_grad():
        logits = model(input_ids=contexts).logits[:, -1].to(torch.float64)
    bad = ~torch.isfinite(logits).any(dim=-1) | torch.isnan(logits).any(dim=-1)
    if bad.any():
        raise ValueError(f"{int(bad.sum())} context(s) give logits with no finite entry or a NaN")
    return torch.softmax(logits, dim=-1).numpy()


def hf_sequence_distribution(model: Any, prompt: "torch.Tensor", length: int) -> np.ndarray:
    """P(first ``length`` new tokens = s) under plain sampling from ``model``, float64 [V**L].

    Runs the model on every prefix (V**(L−1) contexts, one batch per length); the order
    of sequences is :func:`specgauge.stattests.core.lm.sequence_index`'s.
    """
    torch = _require("torch")
    from specgauge.stattests.core.lm import all_sequences

    _check_models(prompt, model)
    vocab = vocab_size(model)
    probs = np.ones(1)
    for t in range(length):
        prefixes = torch.from_numpy(all_sequences(vocab, t)) if t else torch.zeros((1, 0), dtype=torch.long)
        contexts = torch.cat([prompt.expand(prefixes.shape[0], -1), prefixes.to(prompt.device)], dim=1)
        step = next_token_probs(model, contexts)  # [V**t, V]
        probs = (probs[:, None] * step).reshape(-1)
    return probs


def sample_generate(
    model: Any,
    prompt: "torch.Tensor",
    *,
    new_tokens: int,
    num_sequences: int,
    seed: int,
    assistant_model: Any | None = None,
) -> np.ndarray:
    """``num_sequences`` draws of ``model.generate(prompt, do_sample=True, ...)``: int64 [N, L].

    One call per sequence (assisted generation runs at batch size 1). torch's global
    generator is forked and seeded from ``seed``.
    """
    torch = _require("torch")
    _check_models(prompt, model, *([assistant_model] if assistant_model is not None else []))
    if assistant_model is not None and vocab_size(assistant_model) > vocab_size(model):
        raise ValueError(
            f"assistant vocabulary {vocab_size(assistant_model)} is larger than the target's "
            f"{vocab_size(model)}: its token ids would mean nothing to the target"
        )
    out = np.empty((num_sequences, new_tokens), dtype=np.int64)
    start = prompt.shape[1]
    kwargs = dict(do_sample=True, max_new_tokens=new_tokens, min_new_tokens=new_tokens)
    if assistant_model is not None:
        kwargs["assistant_model"] = assistant_model
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        for i in range(num_sequences):
            seq = model.generate(prompt, **kwargs)
            out[i] = seq[0, start : start + new_tokens].numpy()
    return out
