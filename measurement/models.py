"""The models ``specgauge acceptance`` measures: a target and its drafts, each behind one small interface.

Every model answers ``laws(sequences, first)``: for each token sequence s, the next-token
law after each prefix s[:first], s[:first+1], …, s[:len(s)], after the deployment's
sampling transforms (temperature, then top-k, then top-p: the order transformers'
``generate`` applies them, through its own logits warpers). One call is one teacher-forced
forward pass per sequence. Three kinds:

- a Hugging Face causal LM by directory (batched, on ``--device`` in ``--dtype``);
- a contract drafter: anything with the gate's next-token interface (``vocab_size``,
  ``order``, ``next_probs(contexts)``), named ``MODULE:NAME`` or ``toy:PAIR[/target|/draft]``
  for the shipped toy LMs whose laws are exact;
- a prompt-lookup n-gram proposer (``ngram[:MAX_N]``), which has no law of its own: it
  proposes ranked candidates, the tokens that followed earlier occurrences of the
  longest suffix that occurs earlier (most recent first), a one-hot q at the first.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from specgauge.errors import SpecgaugeError, UsageError
from specgauge.plugins import load_named


class MeasurementInputError(UsageError):
    """A model, prompt file or option ``specgauge acceptance`` cannot use: one line, exit status 2, nothing written."""


@dataclass(frozen=True)
class Sampling:
    """The deployment's sampling settings; temperature 0 is greedy (a one-hot law at the argmax)."""

    temperature: float = 1.0
    top_p: float | None = None
    top_k: int | None = None

    def __post_init__(self) -> None:
        if not (np.isfinite(self.temperature) and self.temperature >= 0):
            raise MeasurementInputError(f"--temperature must be a finite number >= 0, got {self.temperature!r}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise MeasurementInputError(f"--top-p must lie in (0, 1], got {self.top_p!r}")
        if self.top_k is not None and self.top_k < 1:
            raise MeasurementInputError(f"--top-k must be at least 1, got {self.top_k!r}")

    @property
    def identity(self) -> bool:
        return self.temperature == 1.0 and self.top_k is None and (self.top_p is None or self.top_p >= 1.0)

    def warp(self, logits):
        """Laws (float64 torch [N, V]) from logits [N, V] through transformers' own warpers."""
        import torch
        from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

        logits = logits.to(torch.float64)
        if self.temperature == 0:
            return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(torch.float64)
        warpers = LogitsProcessorList()
        if self.temperature != 1.0:
            warpers.append(TemperatureLogitsWarper(self.temperature))
        if self.top_k is not None:
            warpers.append(TopKLogitsWarper(self.top_k))
        if self.top_p is not None and self.top_p < 1.0:
            warpers.append(TopPLogitsWarper(self.top_p))
        return torch.softmax(warpers(None, logits), dim=-1)

    def apply(self, probs: np.ndarray) -> np.ndarray:
        """The same transforms on laws given as probabilities (a contract drafter's)."""
        if self.identity:
            return probs
        try:
            import torch
        except ImportError:
            raise MeasurementInputError("sampling transforms need torch and transformers: "
                                       "pip install 'specgauge[hf]'") from None
        with np.errstate(divide="ignore"):
            logits = torch.from_numpy(np.log(np.asarray(probs, np.float64)))
        return self.warp(logits).numpy()


class LawModel(Protocol):
    """What the measurement needs of a target or a distribution draft."""

    name: str
    vocab_size: int

    def laws(self, sequences: Sequence[np.ndarray], first: Sequence[int], native: bool = False) -> list[np.ndarray]: ...

    def sample(self, prompts: Sequence[np.ndarray], length: int, seed: int) -> list[np.ndarray]: ...


# ---------------------------------------------------------------- contract drafters


@dataclass(frozen=True, eq=False)
class NextTokenLaw:
    """A contract next-token model (the gate's toy LMs, a user's drafter) as a :class:`LawModel`."""

    model: Any
    sampling: Sampling
    name: str = "contract"

    @property
    def vocab_size(self) -> int:
        return int(self.model.vocab_size)

    def laws(self, sequences: Sequence[np.ndarray], first: Sequence[int], native: bool = False) -> list[np.ndarray]:
        order = int(self.model.order)
        out = []
        for seq, start in zip(sequences, first):
            if start < order:
                raise MeasurementInputError(f"{self.name}: a prompt of {start} tokens is shorter than its context of {order}")
            ends = np.arange(start, len(seq) + 1)
            contexts = np.asarray(seq, np.int64)[ends[:, None] - order + np.arange(order)[None, :]]
            out.append(self._next_probs(contexts))
        return out

    def _next_probs(self, contexts: np.ndarray) -> np.ndarray:
        """The model's laws at ``contexts``; a user's model that raises is one line naming it."""
        try:
            return self.sampling.apply(self.model.next_probs(contexts))
        except SpecgaugeError:
            raise
        except Exception as exc:  # noqa: BLE001 - a user's next_probs may raise anything: one line, exit 1
            first = (str(exc).strip().splitlines() or [""])[0]
            raise SpecgaugeError(f"{self.name}: next_probs raised {type(exc).__name__}: {first}") from exc

    def sample(self, prompts: Sequence[np.ndarray], length: int, seed: int) -> list[np.ndarray]:
        from specgauge.stattests.core.sampling import sample_rows

        rng = np.random.default_rng(seed)
        order = int(self.model.order)
        if min(len(p) for p in prompts) < order:
            raise MeasurementInputError(f"{self.name}: a prompt is shorter than its context of {order} tokens")
        tails = np.stack([np.asarray(p, np.int64)[len(p) - order:] for p in prompts])
        out = np.empty((len(prompts), length), dtype=np.int64)
        for t in range(length):  # positions depend on each other; requests are vectorised
            out[:, t] = sample_rows(self._next_probs(tails), rng)
            tails = np.concatenate([tails[:, 1:], out[:, t:t + 1]], axis=1)
        return list(out)


def _toy(spec: str, role: str, sampling: Sampling, label: str) -> NextTokenLaw:
    from specgauge.fixtures.toy_lm import available_toy_lms, load_toy_lm

    name, _, which = spec.partition("/")
    which = which or role
    if name not in available_toy_lms() or which not in ("target", "draft"):
        raise MeasurementInputError(f"unknown toy LM {spec!r}: toy:NAME[/target|/draft] with NAME one of "
                                   f"{', '.join(available_toy_lms())}")
    pair = load_toy_lm(name)
    return NextTokenLaw(getattr(pair, which), sampling, label)


def _contract(spec: str, sampling: Sampling, label: str) -> NextTokenLaw:
    model = load_named(spec, noun="next-token model", needs=("next_probs", "vocab_size", "order"),
                       error=MeasurementInputError)
    return NextTokenLaw(model, sampling, label)


# ---------------------------------------------------------------- Hugging Face


@dataclass(frozen=True, eq=False)
class HFLaw:
    """A local transformers causal LM; forward passes in batches of ``batch_size`` sequences."""

    path: str
    sampling: Sampling
    name: str
    device: str = "cpu"
    dtype: str = "float32"
    batch_size: int = 8
    threads: int | None = None
    model: Any = field(default=None, repr=False)

    @classmethod
    def load(cls, path: str, sampling: Sampling, name: str, device: str, dtype: str, batch_size: int,
             threads: int | None = None) -> "HFLaw":
        try:
            import torch
            from transformers import AutoModelForCausalLM
        except ImportError as exc:
            raise MeasurementInputError(f"HF models need torch and transformers: pip install 'specgauge[hf]' ({exc})") from None
        if not hasattr(torch, dtype):
            raise MeasurementInputError(f"--dtype {dtype!r} is not a torch dtype (float32, bfloat16, float16)")
        try:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).to(device).eval()
        except (OSError, ValueError, RuntimeError, AssertionError) as exc:  # torch without CUDA asserts
            raise MeasurementInputError(f"cannot load {path!r} on {device}: {str(exc).splitlines()[0]}") from None
        return cls(path, sampling, name, device, dtype, batch_size, threads, model)

    @contextmanager
    def _threads(self):
        """torch's CPU threads for this model's calls only (tiny models on shared cores run 20x faster on one)."""
        import torch

        before = torch.get_num_threads()
        if self.threads:
            torch.set_num_threads(self.threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    def laws(self, sequences: Sequence[np.ndarray], first: Sequence[int], native: bool = False) -> list:
        """NumPy laws, or with ``native`` torch tensors left on the model's device (α is computed there)."""
        import torch

        out: list[np.ndarray] = []
        for lo in range(0, len(sequences), self.batch_size):
            batch, starts = sequences[lo:lo + self.batch_size], first[lo:lo + self.batch_size]
            width = max(len(s) for s in batch)
            ids = torch.zeros((len(batch), width), dtype=torch.long)
            mask = torch.zeros_like(ids)
            for i, s in enumerate(batch):  # right padding: causal attention never reads it
                ids[i, :len(s)] = torch.as_tensor(np.asarray(s, np.int64))
                mask[i, :len(s)] = 1
            with torch.no_grad(), self._threads():
                logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
                rows = [logits[i, start - 1:len(s)] for i, (s, start) in enumerate(zip(batch, starts))]
                laws = self.sampling.warp(torch.cat(rows))
            sizes = [len(s) - start + 1 for s, start in zip(batch, starts)]
            out += [law if native else law.cpu().numpy() for law in laws.split(sizes)]
        return out

    def sample(self, prompts: Sequence[np.ndarray], length: int, seed: int) -> list[np.ndarray]:
        """The target's own continuations through ``generate`` at the same settings; prompts of one
        length go together in batches, and a continuation ends at its first end-of-sequence token."""
        import torch

        s = self.sampling
        kwargs: dict[str, Any] = dict(max_new_tokens=length, do_sample=s.temperature > 0)
        if s.temperature > 0:
            kwargs.update(temperature=s.temperature, top_k=s.top_k or 0, top_p=s.top_p or 1.0)
        eos = self.model.generation_config.eos_token_id
        stops = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        out: list[np.ndarray] = [np.zeros(0, np.int64)] * len(prompts)
        groups: dict[int, list[int]] = {}
        for i, prompt in enumerate(prompts):
            groups.setdefault(len(prompt), []).append(i)
        with torch.random.fork_rng(devices=[]), torch.no_grad(), self._threads():
            torch.manual_seed(seed)
            for members in groups.values():
                for lo in range(0, len(members), self.batch_size):
                    rows = members[lo:lo + self.batch_size]
                    ids = torch.as_tensor(np.stack([np.asarray(prompts[i], np.int64) for i in rows])).to(self.device)
                    seq = self.model.generate(ids, attention_mask=torch.ones_like(ids),
                                              pad_token_id=next(iter(stops), 0), **kwargs)
                    for i, cont in zip(rows, seq[:, ids.shape[1]:].cpu().numpy().astype(np.int64)):
                        ends = [j for j, t in enumerate(cont) if int(t) in stops]
                        out[i] = cont[:ends[0] + 1] if ends else cont
        return out


# ---------------------------------------------------------------- n-gram


@dataclass(frozen=True)
class NgramProposer:
    """Prompt lookup: the tokens that followed earlier occurrences of the longest matching suffix."""

    max_n: int = 3
    min_n: int = 1
    name: str = "ngram"

    def candidates(self, seq: np.ndarray, first: int, k: int) -> np.ndarray:
        """int64 [len(seq) − first + 1, k]: ranked proposals after each prefix, −1 where none."""
        seq = np.asarray(seq, np.int64)
        out = np.full((len(seq) - first + 1, k), -1, dtype=np.int64)
        for row, end in enumerate(range(first, len(seq) + 1)):  # one lookup per prefix, as the proposer runs
            for n in range(min(self.max_n, end - 1), self.min_n - 1, -1):
                windows = np.lib.stride_tricks.sliding_window_view(seq[:end - 1], n)  # occurrences with a follower
                hits = np.flatnonzero((windows == seq[end - n:end]).all(axis=1))
                if hits.size:
                    followers = seq[hits[::-1] + n]
                    _, idx = np.unique(followers, return_index=True)
                    ranked = followers[np.sort(idx)][:k]
                    out[row, :ranked.size] = ranked
                    break
        return out


# ---------------------------------------------------------------- parsing


@dataclass(frozen=True)
class Loader:
    """How HF models are loaded: device, dtype, batch size."""

    sampling: Sampling
    device: str = "cpu"
    dtype: str = "float32"
    batch_size: int = 8
    threads: int | None = None


def split_label(spec: str) -> tuple[str, str]:
    """``LABEL=SPEC`` or ``SPEC`` (the label then made from the spec)."""
    label, eq, rest = spec.partition("=")
    if eq and label and "/" not in label and ":" not in label:
        return label, rest
    base = Path(spec.rstrip("/")).name if Path(spec).exists() else spec.replace("/", "-")
    return base.replace(":", "-"), spec


def load_model(spec: str, role: str, loader: Loader) -> LawModel | NgramProposer:
    """A target or draft from its spec (see the module docstring); ``role`` is ``target`` or ``draft``."""
    label, spec = split_label(spec)
    if spec.startswith("ngram"):
        if role == "target":
            raise MeasurementInputError("an n-gram proposer cannot be the target")
        n = spec.partition(":")[2]
        if n and not (n.isdigit() and int(n) >= 1):
            raise MeasurementInputError(f"{spec!r}: ngram:MAX_N takes a positive integer")
        return NgramProposer(int(n) if n else 3, 1, label)
    if spec.startswith("toy:"):
        return _toy(spec[4:], role, loader.sampling, label)
    if Path(spec).is_dir():
        return HFLaw.load(spec, loader.sampling, label, loader.device, loader.dtype, loader.batch_size, loader.threads)
    if ":" in spec and not Path(spec).exists():
        return _contract(spec, loader.sampling, label)
    raise MeasurementInputError(f"{role} {spec!r} is not a model directory, ngram[:N], toy:NAME or MODULE:NAME")
