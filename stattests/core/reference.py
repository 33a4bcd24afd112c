"""The NumPy reference decoder: Leviathan et al. (2023) / Chen et al. (2023), exactly.

Vectorised over batch and positions: no Python loop per row or per token. The rule is
split in three steps (accept a prefix, pick the final distribution, assemble the
output) so that variants, such as the zoo's buggy decoders, change one step and reuse
the others.

Speed (benchmarks/bench_reference.py). Entries are read by flat index, never through
``take_along_axis``; where every row shares one law (inputs broadcast along the batch, as a
fixture's context-free laws are), the γ + 1 final distributions are built once and each
row's token is an inverse-CDF search in its position's row. Rows go in blocks that stay
in cache, through one set of buffers a thread keeps from call to call: every step is one
pass over a block, into a buffer (a gather of thresholds by flat index, one comparison,
the leading acceptances from a byte table, a guide table for the final token, the
padding as one OR of each row with its mask). The random numbers are drawn in the same
order and compared with the same sums, so a seed gives the same tokens as the
row-by-row form, and as before.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from specgauge.stattests.core.contract import PAD
from specgauge.stattests.core.sampling import sample_rows, sample_rows_at


def _at_tokens(probs: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """``probs[b, k, tokens[b, k]]`` for k < γ (``probs`` [B, ≥γ, V]), by flat index: one law
    shared by every row (batch stride 0) is read from its first row; a C-contiguous array
    through its flat view."""
    batch, gamma = tokens.shape
    vocab = probs.shape[2]
    if batch and probs.strides[0] == 0:
        offsets = np.tile(np.arange(gamma) * vocab, batch).reshape(batch, gamma)
        return np.ascontiguousarray(probs[0, :gamma]).reshape(-1).take(offsets + tokens)
    if probs.flags.c_contiguous:
        offsets = (np.arange(batch)[:, None] * (probs.shape[1] * vocab) + np.arange(gamma) * vocab)
        return probs.reshape(-1).take(offsets + tokens)
    return np.take_along_axis(probs[:, :gamma], tokens[..., None], axis=2)[..., 0]


#: The leading acceptances of a row, from its acceptance bytes packed into one integer
#: (byte k of the row's word is 1 when draft k is accepted), for γ ≤ 8: index by
#: (word × _PACK) >> _SHIFT, which gathers the bytes' low bits into one byte.
_PACK = {1: (np.uint8, 1, 0), 2: (np.uint16, 0x0102, 8), 4: (np.uint32, 0x01020408, 24),
         8: (np.uint64, 0x0102040810204080, 56)}


def _leading_table(width: int) -> np.ndarray:
    kind, mult, shift = _PACK[width]
    table = np.zeros(256, dtype=np.int64)
    for bits in range(1 << width):
        word = np.array([(bits >> k) & 1 for k in range(width)], dtype=np.uint8).view(kind)
        packed = int(((word * kind(mult)) >> kind(shift))[0]) if width > 1 else bits
        table[packed & 0xFF] = next((k for k in range(width) if not (bits >> k) & 1), width)
    return table


_LEADING = {w: _leading_table(w) for w in _PACK}


def leading_true(accept: np.ndarray) -> np.ndarray:
    """Per row of a bool [B, γ] array, how many entries are True before the first False."""
    batch, gamma = accept.shape
    width = next((w for w in _PACK if w >= gamma), None)
    if width is None:  # long drafts: γ passes over the batch
        n = np.zeros(batch, dtype=np.int64)
        alive = np.ones(batch, dtype=bool)
        for k in range(gamma):
            alive &= accept[:, k]
            n += alive
        return n
    if width != gamma:  # pad with rejections: the count stops there anyway
        padded = np.zeros((batch, width), dtype=bool)
        padded[:, :gamma] = accept
        accept = padded
    kind, mult, shift = _PACK[width]
    word = np.ascontiguousarray(accept).view(np.uint8).view(kind).reshape(batch)
    if width > 1:
        word = (word * kind(mult)) >> kind(shift)
    return _LEADING[width].take(word.astype(np.intp, copy=False) & 0xFF)


def accepted_prefix(target_probs: np.ndarray, draft_probs: np.ndarray, draft_tokens: np.ndarray,
                    uniforms: np.ndarray) -> np.ndarray:
    """Drafts accepted per row: accept x while ``u·q(x) < p(x)`` (probability min(1, p/q))."""
    return leading_true(uniforms * _at_tokens(draft_probs, draft_tokens) < _at_tokens(target_probs, draft_tokens))


def final_rows(target_probs: np.ndarray, draft_probs: np.ndarray,
               n_accepted: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(p, q, rejected)`` at the position of the last emitted token; q is 0 for a bonus row."""
    batch, gamma = draft_probs.shape[:2]
    rows = np.arange(batch)
    rejected = n_accepted < gamma
    final_p = target_probs[rows, n_accepted]
    if not gamma:
        return final_p, np.zeros_like(final_p), rejected
    final_q = draft_probs[rows, np.minimum(n_accepted, gamma - 1)]  # a gathered copy: zeroed in place
    final_q[~rejected] = 0.0
    return final_p, final_q, rejected


def residual(final_p: np.ndarray, final_q: np.ndarray) -> np.ndarray:
    """normalize(max(p − q, 0)) up to its norm, or p where that is zero up to rounding."""
    dist = np.subtract(final_p, final_q)
    np.maximum(dist, 0.0, out=dist)
    empty = dist.sum(axis=1) <= 0.0
    if empty.any():
        dist[empty] = final_p[empty]
    return dist


def assemble(draft_tokens: np.ndarray, n_accepted: np.ndarray, final_token: np.ndarray,
             out: np.ndarray | None = None, at: np.ndarray | None = None,
             pad_mask: np.ndarray | None = None, place: np.ndarray | None = None) -> np.ndarray:
    """The contract's output: the accepted prefix, the final token, then -1 (into ``out``, a
    C-contiguous int64 [B, γ + 1], when given; with ``at`` = arange(B)·(γ + 1) and a [B]
    buffer of :func:`_pad_masks` rows, the padding is one pass; ``place``: a [B] intp buffer)."""
    batch, gamma = draft_tokens.shape
    emitted = np.empty((batch, gamma + 1), dtype=np.int64) if out is None else out
    if gamma:  # each row's drafts copied as one γ·8-byte item
        tokens = np.ascontiguousarray(draft_tokens, dtype=np.int64)
        head = np.dtype([("head", f"V{8 * gamma}"), ("tail", "<i8")])
        emitted.view(head).reshape(batch)["head"] = tokens.view(f"V{8 * gamma}").reshape(batch)
    flat = emitted.reshape(-1)
    if pad_mask is not None:  # every bit of −1 is set: OR each row with its mask of −1 after place n
        _pad_masks(gamma).take(n_accepted, out=pad_mask, mode="clip")
        np.bitwise_or(flat, pad_mask.view(np.int64), out=flat)
        flat[np.add(at, n_accepted, out=place)] = final_token
        return emitted
    short = np.flatnonzero(n_accepted < gamma)  # rows with a rejection: −1 after their final token
    pads = gamma - n_accepted[short]  # at places n + 1 … γ of the row
    ends = np.cumsum(pads)
    first = short * (gamma + 1) + (gamma + 1) - pads
    flat[np.repeat(first - (ends - pads), pads) + np.arange(int(ends[-1]) if ends.size else 0)] = PAD
    flat[np.arange(batch) * (gamma + 1) + n_accepted] = final_token
    return emitted


_PAD_MASKS: dict[int, np.ndarray] = {}


def _pad_masks(gamma: int) -> np.ndarray:
    """Row n: γ + 1 int64, −1 after place n and 0 up to it, as one item of 8(γ + 1) bytes."""
    if gamma not in _PAD_MASKS:
        places = np.arange(gamma + 1)
        masks = np.where(places[None, :] > places[:, None], PAD, 0).astype(np.int64)
        _PAD_MASKS[gamma] = masks.view(f"V{8 * (gamma + 1)}").reshape(gamma + 1)
    return _PAD_MASKS[gamma]


@dataclass(frozen=True, eq=False)
class _SharedLaw:
    """What the rule needs of one law shared by every row, built once per law."""

    thresholds: np.ndarray  # [γ·V]: accept draft x at k when u < thresholds[k·V + x]
    cdf: np.ndarray  # [γ + 1, V]: the final distributions' cumulative sums
    last: np.ndarray  # [γ + 1]: each final distribution's last possible token
    keys: np.ndarray  # the (law, m) search keys of :func:`_grid_tokens`
    token_at: np.ndarray
    guide: np.ndarray  # [(γ + 1)·2^GUIDE_BITS]: the token of each (law, u bucket), −1 where it varies
    offsets: np.ndarray  # [γ]: k·V, where draft k's thresholds start


#: (p, q) copied and their _SharedLaw, as one tuple (read and replaced whole, so threads never
#: pair one law's arrays with another's rule): a run repeats one law call after call.
_LAST_LAW: list = [None]


def _shared_law(p: np.ndarray, q: np.ndarray) -> _SharedLaw:
    gamma, vocab = q.shape
    last = _LAST_LAW[0]
    if last is not None and last[0].shape == p.shape and last[1].shape == q.shape and \
            (last[0] == p).all() and (last[1] == q).all():  # compared, never trusted by identity
        return last[2]
    table = np.empty((gamma + 1, vocab))
    table[:gamma] = np.maximum(p[:gamma] - q, 0.0)
    empty = table[:gamma].sum(axis=1) <= 0.0
    table[:gamma][empty] = p[:gamma][empty]
    table[gamma] = p[gamma]
    cdf = np.cumsum(table, axis=1)
    last = vocab - 1 - np.argmax(table[:, ::-1] > 0, axis=1)  # each row's last possible token
    keys, token_at = _grid_keys(cdf, last)
    law = _SharedLaw(_acceptance_thresholds(p[:gamma], q).reshape(-1), cdf, last, keys, token_at,
                     _guide(keys, token_at, gamma + 1), np.arange(gamma, dtype=np.intp) * vocab)
    _LAST_LAW[0] = (p.copy(), q.copy(), law)
    return law


def _shared_verify(target_probs: np.ndarray, draft_probs: np.ndarray, draft_tokens: np.ndarray,
                   uniforms: np.ndarray, rng: np.random.Generator, final_uniforms: np.ndarray | None) -> np.ndarray:
    """The rule when every row shares one law (batch stride 0): the acceptance tests read
    from one [γ, V] table of thresholds, the γ + 1 final distributions (residuals, then the
    bonus row) built once, and each row's final token the inverse CDF of its own, with the
    same products and comparisons as the row-by-row form. Blocks of rows reuse one set of
    buffers, written in place: each step is one pass over a block that stays in cache."""
    batch, gamma = draft_tokens.shape
    p, q = np.ascontiguousarray(target_probs[0]), np.ascontiguousarray(draft_probs[0])
    law = _shared_law(p, q)
    final_u = rng.random(batch) if final_uniforms is None else np.asarray(final_uniforms, dtype=np.float64).reshape(-1)
    tokens_all = np.ascontiguousarray(draft_tokens, dtype=np.int64)
    u_all = np.ascontiguousarray(uniforms, dtype=np.float64)
    emitted = np.empty((batch, gamma + 1), dtype=np.int64)
    block = _block(min(batch, CHUNK_ROWS), gamma, law.offsets)
    for start in range(0, batch, CHUNK_ROWS):  # blocks of rows: the temporaries stay small and in cache
        stop = min(batch, start + CHUNK_ROWS)
        b = block.first(stop - start)
        tokens = tokens_all[start:stop]
        np.add(tokens.reshape(-1), b.offsets, out=b.index.reshape(-1))  # entry k·V + x of the thresholds
        law.thresholds.take(b.index, out=b.threshold, mode="clip")
        np.less(u_all[start:stop], b.threshold, out=b.accept[:, :gamma])
        n_accepted = b.leading()
        if final_uniforms is None:  # drawn here, so on the 2^-53 grid: the search runs on integers
            final = _grid_tokens(law, n_accepted, final_u[start:stop], b)
        else:
            final = np.empty(n_accepted.size, dtype=np.int64)
            for k in range(gamma + 1):
                at = np.flatnonzero(n_accepted == k)
                if at.size:  # u·total rounded up to total lands past the last possible token: step back
                    found = np.searchsorted(law.cdf[k], final_u[start:stop][at] * law.cdf[k, -1], side="right")
                    final[at] = np.minimum(found, law.last[k])
        assemble(tokens, n_accepted, final, out=emitted[start:stop], at=b.row_starts, pad_mask=b.pad_mask,
                 place=b.place)
    return emitted


_BLOCKS = threading.local()  # each thread's last _Block: a run makes call after call of one shape


def _block(rows: int, gamma: int, offsets: np.ndarray) -> _Block:
    """A :class:`_Block` for blocks of ``rows`` rows, this thread's last one when it fits."""
    last = getattr(_BLOCKS, "block", None)
    if last is None or last.rows != rows or last.gamma != gamma or not np.array_equal(last.law_offsets, offsets):
        last = _BLOCKS.block = _Block(rows, gamma, offsets)
    return last


class _Block:
    """Buffers for one block of rows of the shared-law rule, reused call after call in a thread."""

    def __init__(self, rows: int, gamma: int, offsets: np.ndarray) -> None:
        self.gamma, self.law_offsets = gamma, offsets.copy()
        self._offsets = np.tile(offsets, rows)  # flat, so the add is one pass (a [γ] broadcast loops per row)
        self.width = next((w for w in _PACK if w >= gamma), None)
        self._index = np.empty((rows, gamma), dtype=np.intp)
        self._threshold = np.empty((rows, gamma))
        self._accept = np.zeros((rows, self.width or gamma), dtype=bool)  # padding columns stay False
        self._word = np.empty(rows, dtype=_PACK[self.width][0] if self.width else np.uint8)
        self._n = np.empty(rows, dtype=np.intp)
        self._scaled = np.empty(rows)
        self._bucket = np.empty(rows, dtype=np.int32)
        self._law_bucket = np.empty(rows, dtype=np.int32)
        self._place = np.empty(rows, dtype=np.intp)
        self._final = np.empty(rows, dtype=np.int64)
        self._row_starts = np.arange(rows, dtype=np.intp) * (gamma + 1)
        self._pad_mask = np.empty(rows, dtype=_pad_masks(gamma).dtype)
        self.rows = rows

    def first(self, rows: int) -> _Block:
        """Views of the first ``rows`` rows of every buffer."""
        self.m = rows
        self.index, self.threshold = self._index[:rows], self._threshold[:rows]
        self.accept, self.word, self.n = self._accept[:rows], self._word[:rows], self._n[:rows]
        self.bucket, self.law_bucket, self.final = self._bucket[:rows], self._law_bucket[:rows], self._final[:rows]
        self.scaled, self.place = self._scaled[:rows], self._place[:rows]
        self.row_starts, self.offsets = self._row_starts[:rows], self._offsets[:rows * self.gamma]
        self.pad_mask = self._pad_mask[:rows]
        return self

    def leading(self) -> np.ndarray:
        """:func:`leading_true` of the block's acceptances, into the block's buffers."""
        if self.width is None:
            return leading_true(self.accept)
        kind, mult, shift = _PACK[self.width]
        word = self.accept.view(kind).reshape(self.m)
        if self.width > 1:  # the bytes' low bits gathered into the word's top byte
            np.multiply(word, kind(mult), out=self.word)
            np.right_shift(self.word, kind(shift), out=self.word)
            word = self.word
        if word.dtype == np.uint64:  # below 256 by now; NumPy 1 will not take uint64 indices
            word = word.view(np.int64)
        return _LEADING[self.width].take(word, out=self.n, mode="clip")


#: Rows a block of the shared-law rule handles at once.
CHUNK_ROWS = 16_384


def _acceptance_thresholds(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """t with ``u < t`` exactly when ``u·q < p`` in floating point, for every float u ≥ 0:
    fl(u·q) grows with u, so the u it accepts are those below the least float it rejects."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(q > 0, p / q, np.where(p > 0, np.inf, 0.0))
    finite = np.isfinite(t) & (q > 0)
    q1 = np.where(finite, q, 1.0)
    for _ in range(8):  # p / q is within an ulp or two: step to the least rejected float
        down = np.nextafter(t, 0.0)
        t = np.where(finite & (t > 0) & ~(down * q1 < p), down, t)
        t = np.where(finite & (t * q1 < p), np.nextafter(t, np.inf), t)
    return t


_GRID = 2.0 ** 53  # numpy's random() is (a 53-bit integer) / 2^53


def _grid_keys(cdf: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Search keys for :func:`_grid_tokens`: entry j of law k is counted from the least m with
    cdf[k, j] ≤ fl((m / 2^53)·total) (fl(u·total) grows with m), keyed k·2^54 + m; each law's
    keys stop below its last possible token, then a stop key, and ``token_at`` maps a search
    position to the count it stands for."""
    laws = cdf.shape[0]
    total = cdf[:, -1:]
    m = np.ceil(cdf / total * _GRID)  # then corrected to the least such m
    for _ in range(4):
        m = np.where((m > 0) & (cdf <= ((m - 1) / _GRID) * total), m - 1, m)
        m = np.where(cdf <= (m / _GRID) * total, m, m + 1)
    keys, starts = [], np.zeros(laws + 1, dtype=np.int64)
    for k in range(laws):
        keys.append((k << 54) + m[k, :last[k]].astype(np.int64))
        keys.append(np.array([(k << 54) + (1 << 54) - 1], dtype=np.int64))
        starts[k + 1] = starts[k] + last[k] + 1
    keys = np.concatenate(keys)
    return keys, np.arange(keys.size) - np.repeat(starts[:-1], last + 1)


#: u's leading bits that pick a bucket of the guide table.
GUIDE_BITS = 12


def _guide(keys: np.ndarray, token_at: np.ndarray, laws: int) -> np.ndarray:
    """The token of every (law, bucket of 2^(53 − GUIDE_BITS) values of m), −1 where a key
    falls inside the bucket (the search decides those rows)."""
    width = 1 << (53 - GUIDE_BITS)
    starts = (np.arange(laws)[:, None] << 54) + np.arange(1 << GUIDE_BITS)[None, :] * width
    low = token_at.take(np.searchsorted(keys, starts, side="right"))
    high = token_at.take(np.searchsorted(keys, starts + width - 1, side="right"))
    return np.where(low == high, low, -1).reshape(-1)


def _grid_tokens(law: _SharedLaw, rows_law: np.ndarray, uniforms: np.ndarray, block: _Block | None = None) -> np.ndarray:
    """Token of each row for u = m / 2^53 (numpy's ``random()``): the number of its law's
    cdf entries at most u·total, capped at the law's last possible token. The guide table
    gives it from u's leading bits (u·2^GUIDE_BITS is exact); where a bucket holds a key,
    one integer search over the (law, m) keys does."""
    if block is None:
        bucket = (uniforms * (1 << GUIDE_BITS)).astype(np.int64)
        bucket += rows_law << GUIDE_BITS
    else:  # in the block's buffers: u·2^GUIDE_BITS truncated, plus the law's first bucket
        scaled = np.multiply(uniforms, 1 << GUIDE_BITS, out=block.scaled)
        bucket = block.bucket  # int32: a float's conversion to it is vectorised, to int64 it is not
        np.copyto(bucket, scaled, casting="unsafe")
        np.left_shift(rows_law, GUIDE_BITS, out=block.law_bucket, casting="unsafe")
        bucket += block.law_bucket
    tokens = law.guide.take(bucket) if block is None else law.guide.take(bucket, out=block.final, mode="clip")
    unsure = np.flatnonzero(tokens < 0)  # a bucket holding a key: a few rows in a thousand
    if unsure.size:
        key = (uniforms[unsure] * _GRID).astype(np.int64) | (rows_law[unsure] << 54)
        tokens[unsure] = law.token_at.take(np.searchsorted(law.keys, key, side="right"))
    return tokens


def leviathan_verify(
    target_probs: np.ndarray,
    draft_probs: np.ndarray,
    draft_tokens: np.ndarray,
    uniforms: np.ndarray,
    rng: np.random.Generator,
    final_uniforms: np.ndarray | None = None,
) -> np.ndarray:
    """The rule with the acceptance uniforms given (and the final draw's, optionally).

    At the first rejection draw from normalize(max(p − q, 0)), or from p when that
    residual is zero up to rounding; after γ acceptances draw the bonus from row γ.
    """
    batch, gamma = draft_tokens.shape
    if batch and gamma and target_probs.strides[0] == 0 and draft_probs.strides[0] == 0:  # one law for every row
        return _shared_verify(target_probs, draft_probs, draft_tokens, np.asarray(uniforms), rng, final_uniforms)
    n_accepted = accepted_prefix(target_probs, draft_probs, draft_tokens, uniforms)
    final_p, final_q, _ = final_rows(target_probs, draft_probs, n_accepted)
    dist = residual(final_p, final_q)
    token = sample_rows(dist, rng) if final_uniforms is None else sample_rows_at(dist, final_uniforms)
    return assemble(draft_tokens, n_accepted, token)


class NumpyDecoder:
    """Reference implementation of the contract in float64 NumPy."""

    name = "numpy"
    #: Read-only inputs broadcast along the batch are taken as they are (one law for every
    #: row: the shared-law rule); the harness then passes a context-free fixture's views.
    accepts_broadcast_inputs = True

    def verify(
        self,
        target_probs: np.ndarray,
        draft_probs: np.ndarray,
        draft_tokens: np.ndarray,
        rng: np.random.Generator,
    ) -> np.ndarray:
        uniforms = rng.random(draft_tokens.shape)
        return leviathan_verify(target_probs, draft_probs, draft_tokens, uniforms, rng)
