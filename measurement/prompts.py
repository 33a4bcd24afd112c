"""Prompts for ``specgauge acceptance``: JSONL, ShareGPT JSON, or a ``specgauge probe`` file.

A JSONL line is a string (a completion prompt), a list of token ids, or an object with
``prompt``, ``prompt_token_ids``, ``messages`` (chat, OpenAI style) or ``conversations``
(ShareGPT's ``from``/``value`` turns). A ``.json`` file is a ShareGPT-style list of such
objects. A probe file (its ``specgauge-probe/1`` header) gives its prompts and, as each
request's continuation, the server's own samples (token ids where the server returned
them, else the text re-tokenised by the target's tokenizer). Chats go through the
tokenizer's chat template (the user turns up to the first assistant turn), or are joined
by newlines for a tokenizer without one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .models import MeasurementInputError

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}


@dataclass(frozen=True)
class Request:
    """One request: its prompt ids and, from a probe file, the server's continuation."""

    prompt: np.ndarray
    continuation: np.ndarray | None = None
    origin: str = ""


def _messages(turns: Any, where: str) -> list[dict[str, str]]:
    """The turns before the first assistant turn, as {role, content}."""
    if not isinstance(turns, list) or not turns:
        raise MeasurementInputError(f"{where}: a chat must be a non-empty list of turns")
    out = []
    for turn in turns:
        if not isinstance(turn, dict):
            raise MeasurementInputError(f"{where}: each turn must be an object")
        role = ROLES.get(str(turn.get("role", turn.get("from", ""))).lower())
        content = turn.get("content", turn.get("value"))
        if role is None or not isinstance(content, str):
            raise MeasurementInputError(f"{where}: a turn needs a role (user, assistant, system; or ShareGPT's "
                                       "from: human/gpt) and text content")
        if role == "assistant":
            break
        out.append({"role": role, "content": content})
    if not out:
        raise MeasurementInputError(f"{where}: the chat has no user turn before the first assistant turn")
    return out


class Tokenize:
    """Text and chats to ids with the target's tokenizer (None for a target without one)."""

    def __init__(self, tokenizer_path: str | None) -> None:
        self.tokenizer = None
        if tokenizer_path is not None:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)

    def _need(self, where: str):
        if self.tokenizer is None:
            raise MeasurementInputError(f"{where}: a text prompt needs a target with a tokenizer (an HF model "
                                       "directory); give token ids for toy and contract models")
        return self.tokenizer

    def text(self, text: str, where: str, special: bool = True) -> np.ndarray:
        return np.asarray(self._need(where)(text, add_special_tokens=special)["input_ids"], np.int64)

    def chat(self, messages: list[dict[str, str]], where: str) -> np.ndarray:
        tok = self._need(where)
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
            return np.asarray(ids, np.int64)
        return self.text("\n".join(m["content"] for m in messages), where)


def _ids(values: Any, where: str) -> np.ndarray:
    if not isinstance(values, list) or not values or not all(isinstance(v, int) and v >= 0 for v in values):
        raise MeasurementInputError(f"{where}: token ids must be a non-empty list of non-negative integers")
    return np.asarray(values, np.int64)


def _item(item: Any, tok: Tokenize, where: str) -> np.ndarray:
    if isinstance(item, str):
        return tok.text(item, where)
    if isinstance(item, list):
        return _ids(item, where)
    if isinstance(item, dict):
        if "prompt_token_ids" in item:
            return _ids(item["prompt_token_ids"], where)
        if isinstance(item.get("prompt"), str):
            return tok.text(item["prompt"], where)
        for key in ("messages", "conversations"):
            if key in item:
                return tok.chat(_messages(item[key], where), where)
    raise MeasurementInputError(f'{where}: expected a string, a list of token ids, or an object with "prompt", '
                               '"prompt_token_ids", "messages" or "conversations"')


def _probe(path: Path, tok: Tokenize) -> list[Request]:
    from specgauge.stattests.server.probe import read_probe

    run = read_probe(path)
    chat = run.header.get("params", {}).get("endpoint") == "chat"
    prompts = []
    for i, text in enumerate(run.header.get("prompts", [])):
        where = f"{path}: prompt {i}"
        prompts.append(tok.chat([{"role": "user", "content": text}], where) if chat else tok.text(text, where))
    out = []
    for r in run.records:
        where = f"{path}: sample {r['p']}/{r['s']}"
        ids = r.get("token_ids")
        cont = _ids(ids, where) if ids else tok.text(r.get("text", ""), where, special=False)
        if len(cont):
            out.append(Request(prompts[r["p"]], cont, f"probe p={r['p']} s={r['s']}"))
    if not out:
        raise MeasurementInputError(f"{path} holds no sample with a continuation")
    return out


def read_requests(path: str | Path, tokenizer_path: str | None) -> list[Request]:
    """The requests of a prompt file (see the module docstring); every error is one line."""
    from specgauge import inputs

    path = Path(path)
    raw = inputs.read_input_bytes(path, "prompts")  # a regular file of a sane size: else one line, exit 2
    tok = Tokenize(tokenizer_path)
    first = raw.split(b"\n", 1)[0]
    if b"specgauge-probe/" in first:
        return _probe(path, tok)
    text = inputs.decode_utf8(raw, inputs.where(path))
    if path.suffix.lower() == ".json":
        data = inputs.loads_json(text, inputs.where(path))
        if not isinstance(data, list) or not data:
            raise MeasurementInputError(f"{path}: a ShareGPT-style file is a non-empty JSON list")
        return [Request(_item(item, tok, f"{path}[{i}]"), origin=f"{path.name}[{i}]") for i, item in enumerate(data)]
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except (ValueError, RecursionError):
            raise MeasurementInputError(f"{path}:{number}: not a JSON line") from None
        out.append(Request(_item(item, tok, f"{path}:{number}"), origin=f"{path.name}:{number}"))
    if not out:
        raise MeasurementInputError(f"{path} holds no prompts")
    return out
