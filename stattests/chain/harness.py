"""Runs a decoder on a fixture, chunk by chunk, and keeps what the checks need.

The harness draws the draft tokens itself (so the contract certifies the verification
rule), hands the decoder writable copies (or views it cannot make writable), and turns
whatever goes wrong (an exception, a contract violation, a mutated input) into an error
string the checks report: it never lets a decoder's traceback escape.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np

from specgauge.fixtures.pairs import PairFixture

from specgauge.stattests.core.deadline import CallTimeout, call_with_deadline
from specgauge.stattests.core.contract import PAD, ContractViolation, Decoder, check_emitted, check_possible, emitted_lengths
from specgauge.stattests.core.sampling import sample_rows
from specgauge.stattests.core.statistics import pit_values, total_variation

GREEDY_ROWS = 100_000  # greedy is checked row by row, exactly: no sample size to reach
REPRO_ROWS = 16  # rows verified twice with the same seed: the output must not change
MIN_CALLS = 16  # a fixture's rows are split over at least this many verify calls
#: A large run is split into this many calls, each of at least COUNT_CALL_ROWS rows: the whole-call
#: count test sees rows that share draws at no fixed lag (paired at random within a call) only
#: through how the calls' counts vary, which a few dozen calls cannot show.
COUNT_CALLS = 1024
COUNT_CALL_ROWS = 256


@dataclass(frozen=True)
class RunConfig:
    """How much work one fixture may cost: rows wanted and the memory a chunk may take."""

    rows: int
    chunk_bytes: int = 64 * 2**20
    seed: int = 0
    timeout: float | None = None  # seconds per verify call; None: wait for ever


@dataclass(frozen=True, eq=False)
class FixtureRun:
    """Per-row results of a decoder on a fixture (up to the first failure, if any)."""

    fixture: PairFixture
    n: int
    lengths: np.ndarray  # [n] tokens emitted per row
    tokens: np.ndarray  # [n, γ+1], -1 padded
    pit_id: np.ndarray  # [n, γ+1], NaN where not emitted
    pit_ratio: np.ndarray  # [n, γ], vocabulary ordered by p/q
    alpha: np.ndarray  # [n, γ] 1 − TV(p, q) per row and position
    greedy_mismatches: int
    greedy_example: str
    call_rows: int  # rows per verify call: row r is row r % call_rows of call r // call_rows
    error: str | None = None  # fatal: every check on the fixture reports it
    reproducibility_error: str | None = None  # the contract check reports it; statistics still run
    seed: int = 0  # the run's seed: simulated null laws are drawn from it (one seed, one certificate)


def fixture_seed(seed: int, fixture: PairFixture) -> np.random.SeedSequence:
    """One stream per fixture, keyed by name: adding a fixture does not shift another's draws."""
    return np.random.SeedSequence([seed, zlib.crc32(fixture.name.encode())])


def chunk_rows(fixture: PairFixture, chunk_bytes: int) -> int:
    """Rows per verify call: the fixture's own batch size, else as many as ``chunk_bytes`` hold."""
    if fixture.call_rows:
        return fixture.call_rows
    cells = (2 * fixture.gamma + 1) * fixture.vocab_size
    return max(1, chunk_bytes // (8 * cells * 3))


def greedy_reference(target: np.ndarray, draft_tokens: np.ndarray) -> np.ndarray:
    """The exact greedy output: the draft's prefix that matches argmax p, then argmax p."""
    best = target.argmax(axis=2)
    gamma = draft_tokens.shape[1]
    n_accepted = np.cumprod(draft_tokens == best[:, :gamma], axis=1).sum(axis=1)
    return np.where(np.arange(gamma + 1)[None, :] <= n_accepted[:, None], best, PAD)


class _ContextFreeTables:
    """CDF lookup tables for a context-free fixture: PIT and draft sampling in O(1) per row."""

    def __init__(self, fixture: PairFixture) -> None:
        p, q = fixture.target, fixture.draft
        g = fixture.gamma
        self.p = p
        self.lower_id = np.cumsum(p, axis=1) - p
        with np.errstate(divide="ignore", invalid="ignore"):
            key = np.where(q > 0, p[:g] / q, np.inf)
        self.lower_ratio = np.empty((g, p.shape[1]))
        for k in range(g):  # γ rows, once per fixture
            order = np.lexsort((np.arange(p.shape[1]), key[k]))
            self.lower_ratio[k, order] = np.cumsum(p[k, order]) - p[k, order]
        self.draft_cdf = np.cumsum(q, axis=1)

    def draft_tokens(self, m: int, rng: np.random.Generator) -> np.ndarray:
        u = rng.random((m, self.draft_cdf.shape[0])) * self.draft_cdf[:, -1]
        cols = [np.searchsorted(self.draft_cdf[k], u[:, k], side="right") for k in range(u.shape[1])]
        return np.stack(cols, axis=1).astype(np.int64) if cols else np.empty((m, 0), np.int64)

    def pit(self, emitted: np.ndarray, lower: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        pad = emitted == PAD
        at = np.where(pad, 0, emitted) + np.arange(emitted.shape[1]) * self.p.shape[1]  # flat (position, token)
        u = lower.reshape(-1).take(at) + rng.random(emitted.shape) * self.p.reshape(-1).take(at)
        return np.where(pad, np.nan, np.clip(u, 0.0, 1.0))


def run_fixture(decoder: Decoder, fixture: PairFixture, config: RunConfig) -> FixtureRun:
    """Verify ``config.rows`` rounds of ``fixture`` with ``decoder``."""
    rngs = tuple(np.random.default_rng(s) for s in fixture_seed(config.seed, fixture).spawn(4))
    repro_error = _reproducibility_error(decoder, fixture, fixture_seed(config.seed + 1, fixture), config.timeout)
    error = repro_error if repro_error and repro_error.startswith("verify raised") else None
    rows = fixture_rows(fixture, config.rows)
    step = call_step(fixture, rows, config.chunk_bytes)
    part = verify_rows(decoder, fixture, 0 if error else rows, step, rngs, config.timeout)
    return assemble_run(fixture, [part], step, error or part.error, repro_error, config.seed)


def fixture_rows(fixture: PairFixture, rows: int) -> int:
    """Rows a run makes of the ``rows`` asked: greedy fixtures are checked exactly, on at most GREEDY_ROWS."""
    return min(rows, GREEDY_ROWS) if fixture.greedy else rows


def call_step(fixture: PairFixture, rows: int, chunk_bytes: int) -> int:
    """Rows per verify call of a run of ``rows``: the fixture's batch, else what a chunk holds,
    split over at least MIN_CALLS calls, and a large run over up to COUNT_CALLS calls of at least
    COUNT_CALL_ROWS rows (calls are what the row tests compare)."""
    step = chunk_rows(fixture, chunk_bytes)
    if not fixture.call_rows:
        step = min(step, max(1, -(-rows // MIN_CALLS)), max(COUNT_CALL_ROWS, -(-rows // COUNT_CALLS)))
    return step


@dataclass(frozen=True, eq=False)
class RowsPart:
    """What a stretch of verify calls leaves for the checks (up to its first failure)."""

    arrays: dict  # lengths, tokens, pit_id, pit_ratio, alpha: one array each (empty lists become empty arrays)
    greedy_mismatches: int
    greedy_example: str
    error: str | None


def verify_rows(decoder: Decoder, fixture: PairFixture, rows: int, step: int, rngs: tuple,
                timeout: float | None, first_call: int = 1, pit: bool = True) -> RowsPart:
    """Verify ``rows`` rounds in calls of ``step`` rows, drawing inputs, decoder seeds and PIT
    jitter from ``rngs`` (batch, draft, decoder, pit); calls are numbered from ``first_call``.
    ``pit=False`` leaves a context-free fixture's PIT values out (:func:`context_free_pit`
    makes them from the tokens and the pit stream alone)."""
    g, vocab = fixture.gamma, fixture.vocab_size
    batch_rng, draft_rng, decoder_rng, pit_rng = rngs
    tables = _ContextFreeTables(fixture) if fixture.context_free else None
    views = fixture.context_free and takes_broadcast_inputs(decoder)
    frozen = (frozen_copy(fixture.target), frozen_copy(fixture.draft)) if views else None  # what the views show
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("lengths", "tokens", "pit_id", "pit_ratio", "alpha")}
    mismatches, example, error = 0, "", None
    done, calls = 0, first_call - 1
    while done < rows and error is None:
        m = min(step, rows - done)
        target, draft = fixture.batch(m, batch_rng)
        draft_tokens = tables.draft_tokens(m, draft_rng) if tables else sample_rows(draft, draft_rng)
        if frozen is not None:  # the law broadcast from memory NumPy will not make writable
            inputs = (np.broadcast_to(frozen[0], target.shape), np.broadcast_to(frozen[1], draft.shape),
                      draft_tokens.copy())
        else:
            inputs = (np.array(target), np.array(draft), draft_tokens.copy())
        calls += 1
        try:
            emitted = call_with_deadline(decoder.verify, (*inputs, decoder_rng), timeout,
                                         f"verify call {calls} ({m} rows) on {fixture.name}")
        except CallTimeout as exc:
            error = f"contract violation: {exc}"
            break
        except Exception as exc:  # a decoder's failure is a finding, not a crash
            error = f"verify raised {type(exc).__name__}: {exc}"
            break
        try:
            emitted = check_emitted(emitted, draft_tokens, vocab)
            check_possible(emitted, target)
        except ContractViolation as exc:
            error = f"contract violation: {exc}"
            break
        for label, before, after in zip(("target_probs", "draft_probs", "draft_tokens"),
                                        (target, draft, draft_tokens), inputs):
            if after.flags.writeable and (before.shape != after.shape or not (before == after).all()):
                error = f"verify modified its input {label} in place"  # (np.array_equal, less overhead)
        if error:
            break
        parts["lengths"].append(emitted_lengths(emitted))
        parts["tokens"].append(emitted)
        if fixture.greedy:
            expected = greedy_reference(target, draft_tokens)
            wrong = (expected != emitted).any(axis=1)
            if wrong.any() and not example:
                b = int(np.argmax(wrong))
                example = f"drafts {draft_tokens[b].tolist()}: expected {expected[b].tolist()}, got {emitted[b].tolist()}"
            mismatches += int(wrong.sum())
            parts["alpha"].append(1.0 - total_variation(target[:, :g], draft))
        elif tables is not None:
            if pit:
                parts["pit_id"].append(tables.pit(emitted, tables.lower_id, pit_rng))
                parts["pit_ratio"].append(tables.pit(emitted[:, :g], tables.lower_ratio, pit_rng))
        else:
            parts["alpha"].append(1.0 - total_variation(target[:, :g], draft))
            parts["pit_id"].append(_pit_by_position(emitted, target, None, pit_rng))
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(draft > 0, target[:, :g] / draft, np.inf)
            parts["pit_ratio"].append(_pit_by_position(emitted[:, :g], target[:, :g], ratio, pit_rng))
        done += m
    if frozen is not None:  # written by a route NumPy does not guard (ctypes): the run fails
        for label, seen, law in (("target_probs", frozen[0], fixture.target), ("draft_probs", frozen[1], fixture.draft)):
            if not np.array_equal(seen, law):
                error = error or f"verify modified its input {label} in place (its read-only memory, by a raw pointer)"
    n = sum(len(x) for x in parts["lengths"])
    arrays = {k: (np.concatenate(v) if v else np.full((n,) + _shape(k, g), np.nan)) for k, v in parts.items()}
    return RowsPart(arrays, mismatches, example, error)


def frozen_copy(law: np.ndarray) -> np.ndarray:
    """A copy of ``law`` in immutable memory (an array over a ``bytes`` object): NumPy refuses
    ``setflags(write=True)`` on it and on every view of it, ``as_strided(writeable=True)`` gives a
    read-only array, and a buffer or memoryview of it is read-only. The checks read the fixture's
    own arrays, never this copy, so whatever a decoder does to it no check reads a modified law."""
    return np.frombuffer(np.ascontiguousarray(law, dtype=np.float64).tobytes(), dtype=np.float64).reshape(law.shape)


def takes_broadcast_inputs(decoder: Decoder) -> bool:
    """Whether ``decoder`` declares ``accepts_broadcast_inputs``: a context-free fixture's
    inputs then reach it as read-only views broadcast along the batch from a :func:`frozen_copy`
    of the law (one law, no copy of it per row; a write raises inside verify, which fails
    ``contract``); every other decoder gets writable copies, compared after each call."""
    return bool(getattr(decoder, "accepts_broadcast_inputs", False))


def context_free_pit(fixture: PairFixture, tokens: np.ndarray, step: int,
                     pit_rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(pit_id, pit_ratio) of a context-free fixture's emitted ``tokens``, verified in calls of
    ``step`` rows from the start of ``pit_rng``: the values :func:`verify_rows` computes, since
    the jitter it draws depends on the calls' shapes alone."""
    tables = _ContextFreeTables(fixture)
    g, n = fixture.gamma, len(tokens)
    pit_id, pit_ratio = np.empty((n, g + 1)), np.empty((n, g))
    for start in range(0, n, step):
        emitted = tokens[start:start + step]
        pit_id[start:start + step] = tables.pit(emitted, tables.lower_id, pit_rng)
        pit_ratio[start:start + step] = tables.pit(emitted[:, :g], tables.lower_ratio, pit_rng)
    return pit_id, pit_ratio


def assemble_run(fixture: PairFixture, parts: list[RowsPart], step: int, error: str | None,
                 repro_error: str | None, seed: int) -> FixtureRun:
    """One run from its parts in order: what a whole run, or the merge of its shards, hands the checks."""
    g = fixture.gamma
    arrays = {k: (parts[0].arrays[k] if len(parts) == 1 else np.concatenate([p.arrays[k] for p in parts]))
              for k in parts[0].arrays}
    n = len(arrays["lengths"])
    alpha = np.broadcast_to(fixture.acceptance(), (n, g)) if fixture.context_free else arrays["alpha"]
    example = next((p.greedy_example for p in parts if p.greedy_example), "")
    return FixtureRun(fixture, n, arrays["lengths"].astype(np.int64), arrays["tokens"].astype(np.int64),
                      arrays["pit_id"], arrays["pit_ratio"], alpha, sum(p.greedy_mismatches for p in parts), example,
                      step, error, None if error else repro_error, seed)


def _reproducibility_error(decoder: Decoder, fixture: PairFixture, seed: np.random.SeedSequence,
                           timeout: float | None = None) -> str | None:
    """The same inputs and the same seed must give the same output."""
    batch_seed, decoder_seed = seed.spawn(2)
    rng = np.random.default_rng(batch_seed)
    target, draft = fixture.batch(REPRO_ROWS, rng)
    tokens = sample_rows(draft, rng)
    try:
        first, second = (call_with_deadline(
            decoder.verify, (np.array(target), np.array(draft), tokens.copy(), np.random.default_rng(decoder_seed)),
            timeout, f"reproducibility call {i + 1} ({REPRO_ROWS} rows) on {fixture.name}") for i in range(2))
    except CallTimeout as exc:
        return f"verify raised {type(exc).__name__}: {exc}"
    except Exception as exc:  # reported like any failure of verify
        return f"verify raised {type(exc).__name__}: {exc}"
    if not (np.shape(first) == np.shape(second) and np.array_equal(first, second)):
        return "the same seed gave a different output (verify must draw only from the rng it is given)"
    return None


def _shape(key: str, gamma: int) -> tuple[int, ...]:
    return {"lengths": (), "tokens": (gamma + 1,), "pit_id": (gamma + 1,),
            "pit_ratio": (gamma,), "alpha": (gamma,)}[key]


def _pit_by_position(emitted, probs, sort_key, rng) -> np.ndarray:
    out = np.full(emitted.shape, np.nan)
    for k in range(emitted.shape[1]):  # a handful of positions; the rows are vectorised
        rows = np.flatnonzero(emitted[:, k] != PAD)
        if rows.size:
            key = None if sort_key is None else sort_key[rows, k]
            out[rows, k] = pit_values(emitted[rows, k], probs[rows, k], rng.random(rows.size), key)
    return out


def emission_probability(fixture: PairFixture) -> np.ndarray:
    """P(position k is emitted) = Π_{i<k} α_i for k = 0 … γ (a guess of 0.5 per position when heterogeneous)."""
    alpha = fixture.acceptance()
    if alpha is None:
        alpha = np.full(fixture.gamma, 0.5)
    return np.concatenate([[1.0], np.cumprod(alpha)])


def rows_for(fixture: PairFixture, samples_needed: int, max_rows: int, max_bytes: int,
             reach: float | None = None) -> int:
    """Rows to run so the positions emitted at least half the time (or with probability
    ``reach``) see ``samples_needed`` emissions each, within the row and memory budgets
    (rarer positions report what they reach)."""
    if reach is None:
        reach = max(float(emission_probability(fixture)[-1]), 0.5)
    by_memory = max_bytes // (8 * (2 * fixture.gamma + 1) * fixture.vocab_size)
    return int(max(1, min(math.ceil(samples_needed / reach), max_rows, by_memory)))
