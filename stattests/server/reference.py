"""The exact law of every sampled position, by teacher forcing a local Hugging Face model.

For each distinct (prompt, completion) of a probe run, one forward pass over the prompt
and the completion gives the target's logits at each of the L positions; transformers' own
logits warpers (temperature, then top-k, then top-p, the order `generate` applies them)
turn them into the law the server should have sampled from. The token ids come from the
run when the server returned them, else from re-tokenising the text with the model's
tokenizer (exact for word-level vocabularies; a BPE tokenizer may split a completion
differently from how it was generated, and such samples are counted and left out).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

#: Distinct completions per forward pass.
BATCH = 64

import numpy as np

from specgauge.errors import ConfigError
from specgauge.stattests.server.probe import ProbeRun
from specgauge.stattests.server.progress import Progress


@dataclass(frozen=True)
class ReferenceModel:
    """A local model directory and the sampling settings whose law it should give."""

    path: str
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    add_special_tokens: bool = True  # how the server tokenises a completions prompt
    progress: str = "off"            # "bar", "lines" or "off": teacher forcing takes minutes on real models

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ConfigError(f"the reference law needs a positive temperature, got {self.temperature!r}")

    def __call__(self, run: ProbeRun) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return teacher_forced_law(self, run)

    def tokenize(self, text: str) -> list[int]:
        """A completion's text in the model's token ids (how a text-only server's samples are counted)."""
        return model_tokenizer(self.path)(text)


@lru_cache(maxsize=4)
def model_tokenizer(path: str) -> Callable[[str], list[int]]:
    """``text -> token ids`` with the tokenizer in model directory ``path`` (no special tokens added)."""
    if not (Path(path) / "config.json").is_file() and not (Path(path) / "tokenizer.json").is_file():
        raise ConfigError(f"no tokenizer in {path!r}: a Hugging Face model directory is needed")
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise ConfigError(f"counting tokens with a model's tokenizer needs transformers: pip install "
                          f"'specgauge[hf]' ({exc})") from None
    tokenizer = AutoTokenizer.from_pretrained(path)
    return lambda text: list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _load(path: str, say=lambda line: None):
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"the reference mode needs torch and transformers: install the extra with "
                          f"pip install 'specgauge[hf]' ({exc})") from None
    if not Path(path).is_dir():
        raise ConfigError(f"reference model {path!r} is not a local directory")
    if not (Path(path) / "config.json").is_file():
        raise ConfigError(f"no model in {path!r}: a Hugging Face model directory (config.json, weights, "
                          "tokenizer) is needed")
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ConfigError(f"the reference mode needs torch and transformers: install the extra with "
                          f"pip install 'specgauge[hf]' ({exc})") from None
    say(f"reference: loading {path}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path).eval()
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"no model in {path!r} (a Hugging Face model directory with config.json, weights and "
                          f"tokenizer is needed): {first[:160]}") from None
    return tokenizer, model


def _prompt_ids(tokenizer, prompts: list[str], chat: bool, add_special_tokens: bool) -> list[list[int]]:
    """Each prompt's token ids as the server sees them (chat: the model's template, rendered then tokenised)."""
    out = []
    for text in prompts:
        if chat:  # rendered, then tokenised: transformers 5 returns a BatchEncoding when it tokenises itself
            rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                     tokenize=False)
            ids = tokenizer(rendered, add_special_tokens=False)["input_ids"]
        else:
            ids = tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"]
        out.append(list(ids))
    return out


def _warpers(ref: ReferenceModel):
    """transformers' own logits warpers for the reference's sampling settings, in `generate`'s order."""
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    warpers = LogitsProcessorList([TemperatureLogitsWarper(ref.temperature)])
    if ref.top_k:  # None or 0: no top-k (llama.cpp reads 0 as off)
        warpers.append(TopKLogitsWarper(ref.top_k))
    if ref.top_p is not None and ref.top_p < 1.0:
        warpers.append(TopPLogitsWarper(ref.top_p))
    if ref.min_p:
        from transformers import MinPLogitsWarper

        warpers.append(MinPLogitsWarper(ref.min_p))
    return warpers


def _merged(ids: list[int], text_ids: list[int], length: int) -> list[int] | None:
    """The L token ids of a sample whose server listed fewer (llama.cpp joins the byte tokens of one
    character into one entry, keeping the last byte's id): the text's own tokens when they are L
    and hold the listed ids in order, else None (unknown)."""
    if len(text_ids) != length:
        return None
    it = iter(text_ids)
    return list(text_ids) if all(any(t == i for t in it) for i in ids) else None


def sample_ids(record: dict, length: int, text_ids: Callable[[str], list[int]], decode: Callable[[list[int]], str],
               eos: Sequence[int], stop_strings: bool | Sequence[str] = False) -> list[int] | None:
    """A sample's token ids, at most L, with what ended it where it has fewer.

    Its listed ids (else its text's, re-tokenised); where fewer than L, position len(ids) is
    the end of sequence (``eos[0]``) when it stopped there (finish "stop", no stop strings
    asked for, its last listed token not already an end), else −2: a token generated there but
    not known (a withheld or merged trailing token, a stop string). A listed entry that is not
    one whole token (llama.cpp merges the byte tokens of a character under the last byte's id;
    an entry named ``token_id:N``, vLLM's spelling, is the whole token N) is −2 at its position, unless the text's own L ids hold the listed ones in order (no token
    list to check: −2 from the start). Any end id becomes ``eos[0]``. None: the text re-tokenises to more than L tokens (the server's
    tokens are not known; its prompt is refused rather than a biased subset tested).

    ``stop_strings`` given as the strings (not a flag): a sample that ended with "stop" drew the
    stop at the position it stopped, ``eos[0]``, the cell a stop shares with the end of sequence
    (the law must carry the stoppers' mass there: :func:`~specgauge.stattests.server.stops.apply_stops`),
    and listed tokens from the one that completes a stop string on are cut (a server may list them)."""
    listed = record.get("token_ids")
    stops = [s for s in stop_strings if s] if not isinstance(stop_strings, bool) else []
    if stops and listed and eos and record.get("finish") == "stop":
        from specgauge.stattests.server.stops import stops_in

        cut = next((j for j in range(len(listed)) if stops_in(decode(list(listed[:j + 1])), stops)), None)
        if cut is not None and cut < length:
            return list(listed[:cut]) + [eos[0]]
    ids = list(listed) if listed else list(text_ids(record["text"])) if record["text"] else []
    ends = set(eos)
    if listed and len(ids) < length and record.get("finish") == "length":
        fixed = _merged(ids, text_ids(record["text"]), length)
        if fixed is not None:
            return fixed
        tokens = record.get("tokens")
        if not tokens or len(tokens) != len(ids):
            return [-2]  # entries not known to be whole: no position of it is known
        whole = [t == f"token_id:{i}" or decode([i]) == t for i, t in zip(ids, tokens)]  # named by id: whole
        return ids[:whole.index(False) if not all(whole) else len(ids)] + [-2]
    if len(ids) > length:
        return None
    ids = [eos[0] if i in ends else i for i in ids]
    if len(ids) == length or (ids and eos and ids[-1] == eos[0]):
        return ids
    if record.get("finish") == "stop" and (not stop_strings or stops) and eos:
        return ids + [eos[0]]
    return ids + [-2]


def end_ids(path: str) -> tuple[int, ...]:
    """The model's end-of-sequence ids: the tokenizer's, then the generation config's (one or a list)."""
    from transformers import AutoTokenizer, GenerationConfig

    out = []
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.eos_token_id is not None:
        out.append(int(tokenizer.eos_token_id))
    try:
        config = GenerationConfig.from_pretrained(path).eos_token_id
    except OSError:
        config = None
    for i in (config if isinstance(config, (list, tuple)) else [config]):
        if i is not None and int(i) not in out:
            out.append(int(i))
    return tuple(out)


def lump_ends(laws: np.ndarray, eos: Sequence[int]) -> np.ndarray:
    """Laws (last axis: the vocabulary) with every end id's mass on the first: a sample that
    stopped says it drew an end, not which."""
    if len(eos) < 2:
        return laws
    laws = np.array(laws, copy=True)
    laws[..., eos[0]] += laws[..., list(eos[1:])].sum(axis=-1)
    laws[..., list(eos[1:])] = 0.0
    return laws


def reference_tokens(path: str, length: int, stop_strings: bool = False) -> Callable[[dict], list]:
    """``record -> its token ids`` (:func:`sample_ids`: the end of sequence where it stopped, None for a
    token not known) for the early test."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    eos = end_ids(path)

    def tokens_of(record: dict) -> list:
        ids = sample_ids(record, length, lambda text: tokenizer(text, add_special_tokens=False)["input_ids"],
                         tokenizer.decode, eos, stop_strings)
        return [None] if ids is None else [int(i) if i >= 0 else None for i in ids]
    return tokens_of


def reference_contexts(ref: ReferenceModel, prompts: list[str], chat: bool, length: int, min_mass: float) -> list:
    """Every context the reference law reaches with probability >= ``min_mass``, up to position L − 1,
    with its law over the whole vocabulary (one forward pass per context, breadth first): what a sized
    probe is planned on and its early test watches."""
    from specgauge.stattests.server.sequential import bet_context

    tokenizer, model = _load(ref.path)
    import torch

    warpers = _warpers(ref)
    eos = end_ids(ref.path)
    out = []
    for p, ids in enumerate(_prompt_ids(tokenizer, prompts, chat, ref.add_special_tokens)):
        frontier: list[tuple[tuple, float]] = [((), 1.0)]
        for k in range(length):
            if not frontier:
                break
            inputs = torch.tensor([list(ids) + list(prefix) for prefix, _ in frontier], dtype=torch.long)
            with torch.no_grad():
                logits = model(inputs).logits[:, -1].double()
            laws = lump_ends(torch.softmax(warpers(inputs, logits), dim=-1).numpy(), eos)
            below = []
            for (prefix, mass), law in zip(frontier, laws):
                out.append(bet_context(p, prefix, range(law.size), law, mass))
                if k + 1 < length:
                    below += [(prefix + (int(x),), mass * float(law[x])) for x in np.flatnonzero(mass * law >= min_mass)
                              if int(x) not in eos]
            frontier = below
    return out


def teacher_forced_law(ref: ReferenceModel, run: ProbeRun) -> tuple:
    """(prompt[N], tokens[N, L], index[N, L], table[C, V], mismatched[P]): each sample's ids (−1
    past its end), the row of ``table`` holding the law at each of its positions (one row per
    distinct context, float32), and per prompt the samples whose text re-tokenises to more
    than L tokens (left out here; the comparison refuses those prompts rather than test a
    biased subset)."""
    bar = Progress(len(run.records), "reference: teacher forcing", mode=ref.progress)
    tokenizer, model = _load(ref.path, bar.say)
    import torch

    length = run.header["params"]["max_tokens"]
    prompt_ids = _prompt_ids(tokenizer, run.header["prompts"], run.header["params"]["endpoint"] == "chat",
                             ref.add_special_tokens)
    warpers = _warpers(ref)
    eos = end_ids(ref.path)
    ends = set(eos)
    stops = run.header["params"].get("stop") or ()
    stops = (stops,) if isinstance(stops, str) else tuple(stops)
    prompts, completions, mismatched = [], [], np.zeros(len(run.header["prompts"]), np.int64)
    for r in run.records:
        ids = sample_ids(r, length, lambda text: tokenizer(text, add_special_tokens=False)["input_ids"],
                         tokenizer.decode, eos, stops or False)
        if ids is None:
            mismatched[r["p"]] += 1
            continue
        prompts.append(r["p"])
        completions.append(list(ids) + [-1] * (length - len(ids)))
    if not completions:
        raise ConfigError(f"no sample of at most {length} tokens after tokenisation: is {ref.path!r} the served model?")
    prompt = np.asarray(prompts, np.int64)
    tokens = np.asarray(completions, np.int64)
    index = np.full(tokens.shape, -1, np.int64)
    rows_of: dict[tuple, int] = {}
    table: list[np.ndarray] = []
    for p in np.unique(prompt):
        rows = np.flatnonzero(prompt == p)
        unique, inverse = np.unique(tokens[rows], axis=0, return_inverse=True)
        inverse = inverse.ravel()
        for start in range(0, unique.shape[0], BATCH):  # bounded memory: a batch's logits are [B, L, V]
            chunk = unique[start:start + BATCH]
            head = torch.tensor(prompt_ids[p], dtype=torch.long).expand(chunk.shape[0], -1)
            inputs = torch.cat([head, torch.from_numpy(np.maximum(chunk[:, :-1], 0))], dim=1)  # causal: padding after
            with torch.no_grad():
                logits = model(inputs).logits[:, len(prompt_ids[p]) - 1:].double()
            for k in range(length):
                laws = torch.softmax(warpers(inputs[:, :len(prompt_ids[p]) + k], logits[:, k]), dim=-1).numpy()
                for j, seq in enumerate(chunk):
                    if k and (seq[k - 1] < 0 or int(seq[k - 1]) in ends):
                        continue  # past the sample's end, or after a token not known
                    key = (int(p), *map(int, seq[:k]))
                    if key not in rows_of:  # one law per context, however many samples share it
                        rows_of[key] = len(table)
                        table.append(laws[j].astype(np.float32))
                    index[rows[inverse == start + j], k] = rows_of[key]
            bar.update(int(np.sum((inverse >= start) & (inverse < start + BATCH))))  # the samples this batch covers
    bar.close()
    law = lump_ends(np.stack(table), eos) if table else np.zeros((0, 0), np.float32)
    if stops and eos and table:  # the stop as a cell of each context's law, shared with the end of sequence
        from specgauge.stattests.server.stops import apply_stops

        tokens, index, law = apply_stops(tokens, index, law,
                                         lambda many: tokenizer.batch_decode(many, skip_special_tokens=True),
                                         stops, eos[0], lead=lambda row: prompt_ids[int(prompt[row])])
    return prompt, tokens, index, law, mismatched
