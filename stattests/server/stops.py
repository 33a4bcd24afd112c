"""Stop strings as events of the law: a censored draw, and whether the server honoured them.

A server asked for stop strings cuts a sample's text where the first one starts and ends it
with finish_reason "stop". Its draws up to there are draws of the law; what it drew from
there on is censored at a known point. At a context y (the prompt and the tokens before a
position), the next token t is one of

- a *stopper*: text(y + t) holds a stop string that text(y) does not (the sample stops at
  this position, whether or not the server lists t);
- any other token, emitted as itself.

So the stop is one cell of the context's law, of mass Σ p(stoppers) (plus the end of
sequence's, which also ends with "stop": the two cannot be told apart and share the cell),
and the other tokens keep theirs: the law conditioned on not having stopped, times the
chance of going on. This holds where no stop string can *span* draws: where text(y) ends
with a proper prefix of a stop string, or some token t leaves text(y + t) ending in one
without holding it, a later token may complete the string and cut the sample at or before
this position, which this position's law alone cannot say. Such a context is *unclean*: the
comparison leaves it (and what lies under it) untested rather than test a biased subset.
A stop string of one character never spans.
"""

from __future__ import annotations

from typing import Sequence


def stops_in(text: str, stops: Sequence[str]) -> bool:
    """Whether ``text`` holds any of the stop strings."""
    return any(s and s in text for s in stops)


def ends_in_prefix(text: str, stops: Sequence[str]) -> bool:
    """Whether ``text`` ends with a nonempty proper prefix of a stop string (one a later token could complete)."""
    return any(text.endswith(s[:j]) for s in stops for j in range(1, len(s)))


def split_next(prefix: str, texts: Sequence[str], stops: Sequence[str]) -> tuple[list[bool], bool]:
    """(stopper per continuation, unclean): which continuations (``texts``: the whole text of the
    prefix and one more token) hold a stop string the ``prefix`` text does not, and whether a string
    could span draws here (the prefix ends in a proper prefix of one, or a continuation that is not
    a stopper does)."""
    stopper = [stops_in(t, stops) and not stops_in(prefix, stops) for t in texts]
    unclean = ends_in_prefix(prefix, stops) or any(not s and ends_in_prefix(t, stops) for s, t in zip(stopper, texts))
    return stopper, unclean


def apply_stops(tokens, index, table, decode_many, stops: Sequence[str], stop_id: int, lead=None):
    """A reference law (``tokens[N, L]``, ``index[N, L]`` rows of ``table[C, V]``) with the stop as a
    cell: at each context, the stoppers' mass moved onto ``stop_id`` (the end of sequence's cell: a
    sample that ended with "stop" drew either), and every draw at an unclean context, and under it,
    marked −2 (a token not known: the comparison leaves those contexts untested). Returns (tokens,
    index, table), one row per context now (rows a context-free law shared may differ by prefix).
    ``decode_many(list of id lists) -> texts``; one decode per vocabulary entry per context.
    ``lead(row)``: the prompt's ids of sample ``row``, decoded before the completion and cut off
    again, as a server detokenises a completion after its prompt (a tokenizer drops a first
    token's leading space when it decodes it alone)."""
    import numpy as np

    tokens = np.array(tokens, copy=True)
    index = np.array(index, copy=True)
    vocab = np.arange(table.shape[1])

    def context_law(i: int, k: int) -> np.ndarray | None:
        """The law at sample ``i``'s context ``k`` with its stoppers moved onto ``stop_id``; None
        where a stop could span draws (one decode per vocabulary entry, once per context)."""
        prefix = [int(t) for t in tokens[i, :k]]
        law = np.array(table[index[i, k]], dtype=np.float64, copy=True)
        if any(t < 0 for t in prefix):
            return law
        head = list(lead(i)) if lead is not None else []
        texts = decode_many([head + prefix] + [head + prefix + [int(t)] for t in vocab])
        head_text = decode_many([head])[0] if head else ""
        skip = len(head_text)
        if head and not all(t.startswith(head_text) for t in texts):
            texts, skip = decode_many([prefix] + [prefix + [int(t)] for t in vocab]), 0
        stopper, unclean = split_next(texts[0][skip:], [t[skip:] for t in texts[1:]], stops)
        if unclean:
            return None
        stopper = np.asarray(stopper) & (vocab != stop_id)
        law[stop_id] += law[stopper].sum()
        law[stopper] = 0.0
        return law

    # A context is (its row of ``table``, the tokens before it); positions run in order, since an
    # unclean context marks the tokens under it. Laws are numbered as the samples first reach them.
    found = []  # (first sample, position, law or None, the samples at it)
    for k in range(tokens.shape[1]):
        at = np.flatnonzero(index[:, k] >= 0)
        if not len(at):
            continue
        keys = np.column_stack([index[at, k], tokens[at, :k]])
        _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        inverse = inverse.ravel()
        for c, f in enumerate(first):
            samples = at[inverse == c]
            law = context_law(int(at[f]), k)
            if law is None:  # a stop could span draws here: the draw is not known, nor anything under it
                tokens[samples, k:] = np.where(tokens[samples, k:] == -1, -1, -2)
                index[samples, k] = 0
            found.append((int(at[f]), k, law, samples))
    rows = []
    for _, k, law, samples in sorted((f for f in found if f[2] is not None), key=lambda f: (f[0], f[1])):
        index[samples, k] = len(rows)
        rows.append(law)
    table = np.stack(rows).astype(np.float32) if rows else np.zeros((1, table.shape[1]), np.float32)
    return tokens, index, table


def first_stop(pieces: Sequence[str], stops: Sequence[str]) -> int | None:
    """The position of the first piece whose text completes a stop string (the pieces joined), or None:
    a server that lists the stopping token (vLLM) lists draws past the cut, which are not draws."""
    text = ""
    for k, piece in enumerate(pieces):
        if not stops_in(text, stops) and stops_in(text + piece, stops):
            return k
        text += piece
    return None


def overran(text: str, stops: Sequence[str]) -> bool:
    """Whether a sample's text goes on after a stop string: the server did not stop there (a text that
    ends with the string, as with vLLM's include_stop_str_in_output, is not an overrun)."""
    for s in stops:
        i = text.find(s) if s else -1
        if i >= 0 and i + len(s) < len(text):
            return True
    return False


class HonouredWatch:
    """A probe watcher counting the samples that did not honour the request: text going on after a
    stop string, or more tokens listed than ``max_tokens``. It never stops the probe (the comparison's
    ``stop-and-length-honoured`` row fails such a run); the probe's last line says what it saw."""

    stopped = False

    def __init__(self, stops: Sequence[str] | None, length: int) -> None:
        self.stops = tuple(stops or ())
        self.length = length
        self.past_stop = 0
        self.past_length = 0

    def add(self, records) -> None:
        for r in records:
            self.past_stop += bool(self.stops) and overran(r.get("text", ""), self.stops)
            self.past_length += len(r.get("token_ids") or r.get("tokens") or []) > self.length

    def check(self) -> None:
        return None

    def describe(self) -> str:
        """One clause for the probe's last line, or "" when every sample honoured the request."""
        parts = ([f"{self.past_stop} samples go on after a stop string"] if self.past_stop else []) + \
            ([f"{self.past_length} list more than max_tokens {self.length} tokens"] if self.past_length else [])
        return (f"; the server did not honour the request: {' and '.join(parts)} (compare fails its "
                f"stop-and-length-honoured row)" if parts else "")
