"""Sized and sharded runs: a fixture's rows split into shards that run anywhere and merge.

Shard k of a fixture draws from its own stream, keyed by the run's seed, the fixture's
name and k (a SeedSequence spawn key, never ``seed + k``), so its rows are the same on
whatever process or machine runs it and whatever the other shards do. A shard hands back
its rows packed (:func:`pack_rows`: each row's tokens as one small integer; 400 kB for
200,000 rows of six tokens, where the per-row arrays are 30 MB); the merge unpacks them
into the per-row arrays the checks read, bit for bit, lays them end to end in shard order,
and the checks run once on the merged run. So the certificate depends on the shard plan
(rows, rows per call, shards) and the seed, never on the executor: ``--jobs 1``, local
processes and a Dask cluster write the same bytes.

Shards run on the planner's sweep executors (``specgauge.sweeps.executors``);
each finished shard is kept in a folder beside the CSV, keyed by what it depends on, so
a rerun after an interrupt computes only the missing shards.
"""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from specgauge.errors import UsageError
from specgauge.fixtures.pairs import PairFixture

from specgauge.stattests.chain.checks import REFERENCE_BYTES_PER_SECOND
from specgauge.stattests.chain.harness import (FixtureRun, RowsPart, _reproducibility_error, _shape, assemble_run,
                                               call_step, context_free_pit, fixture_rows, fixture_seed,
                                               takes_broadcast_inputs, verify_rows)
from specgauge.stattests.core.contract import emitted_lengths

#: Child of the fixture's seed that shard streams hang under (an unsharded run uses children 0-3).
SHARD_STREAM = 4
#: What a shard sends back instead of the per-row arrays a run keeps for the checks (:func:`pack_rows`): its rows' tokens, packed, and where
#: rows have laws of their own, their PIT values and acceptances.
_PACKED_ARRAYS = ("codes", "pit_id", "pit_ratio", "alpha")
#: Harness and NumPy reference overheads on small vocabularies, where input bytes say little:
#: CPU-seconds a row and a verify call, measured on the project's 2-core machine under load
#: (benchmarks/bench_sharded.py: seed-six-token, 200,000 rows in 16 calls, 0.9-1.3e-6 s a row;
#: batch1-g5, 4,000 one-row calls, 2.0-2.2e-4 s a call). Constants, so an estimate never
#: depends on the clock; the checks' own time comes on top.
ROW_SECONDS = 1.3e-6
CALL_SECONDS = 2.2e-4


class ShardError(UsageError):
    """A sized or sharded run that cannot be made as asked: exit status 2, before any work."""


def shard_seed(seed: int, fixture: PairFixture, k: int) -> np.random.SeedSequence:
    """Shard k's stream: the fixture's seed, spawn key (SHARD_STREAM, k); the same for any shard count."""
    return np.random.SeedSequence(fixture_seed(seed, fixture).entropy, spawn_key=(SHARD_STREAM, k))


@dataclass(frozen=True)
class Shard:
    """One shard of a fixture's rows: what it depends on, and nothing about where it runs."""

    decoder: Any  # a decoder spec (short name or MODULE:NAME; loaded where the shard runs) or the object
    fixture: str
    seed: int
    timeout: float | None
    rows: int  # the fixture's rows, all shards together
    step: int  # rows per verify call
    shards: int
    index: int

    @property
    def bounds(self) -> tuple[int, int]:
        """(first call, calls) of this shard: whole calls, split as evenly as they go."""
        calls = -(-self.rows // self.step)
        lo, hi = calls * self.index // self.shards, calls * (self.index + 1) // self.shards
        return lo, hi - lo

    @property
    def shard_rows(self) -> int:
        first, calls = self.bounds
        return max(0, min((first + calls) * self.step, self.rows) - first * self.step)

    def key_payload(self, decoder_name: str) -> dict[str, Any]:
        return {"decoder": decoder_name, "fixture": self.fixture, "seed": self.seed, "timeout": self.timeout,
                "rows": self.rows, "step": self.step, "shards": self.shards, "index": self.index}


#: A sized run without ``--shards`` cuts each fixture into shards of about this many
#: estimated CPU-seconds, so an interrupt loses about a minute of work a worker.
SHARD_SECONDS = 60.0


def plan_shards(decoder: Any, fixtures: Sequence[PairFixture], rows: Mapping[str, int], seed: int,
                timeout: float | None, chunk_bytes: int, shards: int | None) -> list[Shard]:
    """Every fixture's shards, fixture by fixture, in shard order: ``shards`` each, or (None)
    about SHARD_SECONDS of estimated work each, from constants, so the plan is a function of
    the arguments alone."""
    out, views = [], takes_views(decoder)
    for fixture in fixtures:
        n = fixture_rows(fixture, rows[fixture.name])
        step = call_step(fixture, n, chunk_bytes)
        seconds = reference_seconds(fixture, n, chunk_bytes, views)
        count = shards or max(1, min(-(-n // step), math.ceil(seconds / SHARD_SECONDS)))
        out += [Shard(decoder, fixture.name, seed, timeout, n, step, count, k) for k in range(count)]
    return out


#: A context-free fixture's law per CPU-second when the decoder takes it as broadcast views (the
#: NumPy reference): no copy a row, and each call compares its law with the last one's, so the
#: law counts once a call. Measured on the project's 2-core machine: zipf-152k at one row a call
#: 11.6 GB, SmolLM2's chat and prose laws at 6-8 rows a call 31-32 GB; the slowest is kept.
REFERENCE_LAW_BYTES_PER_SECOND = 11e9


def reference_seconds(fixture: PairFixture, rows: int, chunk_bytes: int, broadcast: bool = False) -> float:
    """Estimated CPU-seconds of ``rows`` verify rounds of ``fixture`` by the NumPy reference:
    its input copied a row (``broadcast`` False: as the harness gives any decoder that does not
    take views), or a context-free law taken as views, counted once a call."""
    calls = -(-rows // call_step(fixture, rows, chunk_bytes))
    law = 8.0 * (2 * fixture.gamma + 1) * fixture.vocab_size
    data = (calls * law / REFERENCE_LAW_BYTES_PER_SECOND if broadcast and fixture.context_free
            else rows * law / REFERENCE_BYTES_PER_SECOND)
    return data + rows * ROW_SECONDS + calls * CALL_SECONDS


def takes_views(decoder: Any) -> bool:
    """Whether a shard's decoder (an object, or its spec: None and "numpy" are the reference)
    takes broadcast views, without loading a spec here."""
    if decoder is None or isinstance(decoder, str):
        return (decoder or "numpy").strip() == "numpy"
    return takes_broadcast_inputs(decoder)


_DECODERS: dict[str, Any] = {}


def _decoder(spec: Any) -> Any:
    """The decoder a shard runs: loaded once per process from its spec, or the object itself."""
    if spec is not None and not isinstance(spec, str):
        return spec
    from specgauge.stattests.core.contract import load_decoder

    if spec not in _DECODERS:
        _DECODERS[spec] = load_decoder(spec)
    return _DECODERS[spec]


def run_shard(shard: Shard, progress: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """Verify one shard's rows; the reproducibility check (two calls on fixed inputs) runs in shard 0.
    ``progress(rows)`` after each call when given (the in-process executor's bar)."""
    from specgauge.stattests.chain.certify import ALL_FIXTURES

    fixture = ALL_FIXTURES[shard.fixture]
    decoder = _decoder(shard.decoder)
    repro = None
    if shard.index == 0:
        repro = _reproducibility_error(decoder, fixture, fixture_seed(shard.seed + 1, fixture), shard.timeout)
    fatal = bool(repro and repro.startswith("verify raised"))
    rngs = tuple(np.random.default_rng(s) for s in shard_seed(shard.seed, fixture, shard.index).spawn(4))
    first, _ = shard.bounds
    part = verify_rows(decoder if progress is None else _Counting(decoder, progress), fixture,
                       0 if fatal else shard.shard_rows, shard.step, rngs, shard.timeout, first_call=first + 1,
                       pit=False)
    return {"arrays": pack_rows(fixture, part.arrays), "rows": len(part.arrays["lengths"]),
            "greedy_mismatches": part.greedy_mismatches, "greedy_example": part.greedy_example,
            "error": repro if fatal else part.error, "repro_error": repro}


def pack_rows(fixture: PairFixture, arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A shard's rows as it sends them: each row's emitted tokens as one integer in base V + 1
    (token + 1 at place k, −1 padding as 0) in the fewest bytes that hold every row, or the
    tokens + 1 in the fewest bytes that hold V where rows are too wide for that; lengths
    follow from the tokens. A context-free fixture's PIT values follow from the tokens and
    the shard's pit stream, and its acceptances from the fixture (:func:`unpack_rows`), so
    only rows with laws of their own send theirs. Seed-six-token: 2 bytes a row, against 152."""
    tokens = np.asarray(arrays["tokens"], dtype=np.int64)
    base, places = fixture.vocab_size + 1, fixture.gamma + 1
    if base ** places <= 2 ** 63:
        codes = np.zeros(len(tokens), dtype=np.int64)
        for k in reversed(range(places)):
            codes *= base
            codes += tokens[:, k] + 1
        codes = codes.astype(_fewest_bytes(base ** places - 1))
    else:
        codes = (tokens + 1).astype(_fewest_bytes(base - 1))
    packed = {"codes": codes}
    if not fixture.context_free:
        packed.update({k: arrays[k] for k in ("pit_id", "pit_ratio", "alpha")})
    return packed


def unpack_rows(fixture: PairFixture, packed: Mapping[str, np.ndarray], step: int,
                pit_rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The per-row arrays :func:`verify_rows` keeps, from what :func:`pack_rows` sent: the same
    values, bit for bit (``pit_rng``: the shard's pit stream from its start)."""
    codes = np.asarray(packed["codes"])
    base, places, g = fixture.vocab_size + 1, fixture.gamma + 1, fixture.gamma
    if codes.ndim == 1:
        rest = codes.astype(np.int64)
        tokens = np.empty((len(codes), places), dtype=np.int64)
        for k in range(places):
            rest, digit = np.divmod(rest, base)
            tokens[:, k] = digit - 1
    else:
        tokens = codes.astype(np.int64) - 1
    arrays = {"lengths": emitted_lengths(tokens), "tokens": tokens}
    if not fixture.context_free:
        arrays.update({k: packed[k] for k in ("pit_id", "pit_ratio", "alpha")})
    elif fixture.greedy:  # greedy rows keep no PIT; a context-free fixture's acceptances are its own
        arrays.update({k: np.full((len(tokens),) + _shape(k, g), np.nan) for k in ("pit_id", "pit_ratio")})
    else:
        arrays["pit_id"], arrays["pit_ratio"] = context_free_pit(fixture, tokens, step, pit_rng)
    if fixture.context_free:
        arrays["alpha"] = np.full((len(tokens), g), np.nan)  # unread: assemble_run uses the fixture's
    return arrays


def _fewest_bytes(largest: int) -> np.dtype:
    return next(np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64) if largest <= np.iinfo(t).max)


class _Counting:
    """A decoder that reports the rows of each call it verifies (for the progress bar)."""

    def __init__(self, decoder: Any, progress: Callable[[int], Any]) -> None:
        self._decoder, self._progress = decoder, progress
        self.accepts_broadcast_inputs = takes_broadcast_inputs(decoder)

    def verify(self, target, draft, tokens, rng):
        out = self._decoder.verify(target, draft, tokens, rng)
        self._progress(len(tokens))
        return out


def merge(fixture: PairFixture, parts: Sequence[Mapping[str, Any]], step: int, seed: int) -> FixtureRun:
    """The fixture's run from its shards in shard order (``parts[k]`` is shard k's), up to and
    including the first that failed; each shard's rows unpacked with its own pit stream."""
    used = []
    for part in parts:
        used.append(part)
        if part["error"]:
            break
    error = next((p["error"] for p in used if p["error"]), None)
    rows = []
    for k, p in enumerate(used):
        pit_rng = np.random.default_rng(shard_seed(seed, fixture, k).spawn(4)[3])
        rows.append(RowsPart(unpack_rows(fixture, p["arrays"], step, pit_rng), p["greedy_mismatches"],
                             p["greedy_example"], p["error"]))
    return assemble_run(fixture, rows, step, error, parts[0]["repro_error"], seed)


class ShardCache:
    """Finished shards kept beside the CSV (``<csv>.shards/KEY.npz``), written whole or not at all.

    Plays the sweep journal's part for :func:`run_sweep` (``append`` is called in this process
    as each shard finishes), so only one process ever writes here."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.npz"

    def load(self, key: str) -> dict[str, Any] | None:
        try:
            with np.load(self.path(key), allow_pickle=False) as data:
                arrays = {k: data[k] for k in _PACKED_ARRAYS if k in data.files}
                text = {k: str(data[k]) for k in ("greedy_example", "error", "repro_error")}
                mismatches, rows = int(data["greedy_mismatches"]), int(data["rows"])
        except (OSError, KeyError, ValueError):
            return None  # absent, torn, or written before shards sent packed rows: computed again
        if "codes" not in arrays:
            return None
        return {"arrays": arrays, "rows": rows, "greedy_mismatches": mismatches, "greedy_example": text["greedy_example"],
                "error": text["error"] or None, "repro_error": text["repro_error"] or None}

    def append(self, key: str, index: int, row: Mapping[str, Any]) -> Mapping[str, Any]:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f".{key}.{os.getpid()}.tmp.npz"
        np.savez(tmp, **row["arrays"], rows=np.int64(row["rows"]), greedy_mismatches=np.int64(row["greedy_mismatches"]),
                 greedy_example=np.str_(row["greedy_example"]), error=np.str_(row["error"] or ""),
                 repro_error=np.str_(row["repro_error"] or ""))
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, self.path(key))
        return row

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def tidy(self) -> int:
        """After an interrupt: drop temporary files, and the folder when no shard finished;
        returns the finished shards kept (a rerun resumes them)."""
        if not self.folder.is_dir():
            return 0
        for tmp in self.folder.glob(".*.tmp.npz"):
            tmp.unlink(missing_ok=True)
        kept = sum(1 for p in self.folder.glob("*.npz") if not p.name.startswith("."))
        if not kept:
            shutil.rmtree(self.folder, ignore_errors=True)
        return kept


def run_shards(shards: Sequence[Shard], decoder_name: str, cache: ShardCache | None, options,
               progress: bool = False) -> tuple[dict[str, FixtureRun], int]:
    """Run what ``cache`` lacks of ``shards`` on ``options``' executor and merge each fixture;
    returns (runs by fixture, shards reused). One bar over rows, with its ETA: per call in
    this process, per finished shard on other processes or machines."""
    from dataclasses import replace

    from specgauge.progress import bar as progress_bar
    from specgauge.sweeps.executors import run_sweep
    from specgauge.sweeps.journal import item_key
    from specgauge.stattests.chain.certify import ALL_FIXTURES

    executor = options.resolved_executor()
    keys = [item_key(s.key_payload(decoder_name), "shard") for s in shards]
    done = {}
    for i, key in enumerate(keys):
        found = cache.load(key) if cache is not None else None
        if found is not None:
            done[i] = found
    bar = progress_bar(total=sum(s.shard_rows for s in shards), initial=sum(shards[i].shard_rows for i in done),
               desc="verifying", unit="row", unit_scale=True, disable=not progress, leave=False, dynamic_ncols=True)
    in_process = executor == "serial"
    func = partial(run_shard, progress=bar.update) if in_process else run_shard
    journal = _Sink(cache, None if in_process else (lambda row: bar.update(row["rows"])))
    try:
        results = run_sweep(func, shards, replace(options, progress=False), journal, done,
                            describe=lambda s: f"{s.fixture} shard {s.index + 1}/{s.shards}", keys=keys)
    finally:
        bar.close()
    runs: dict[str, FixtureRun] = {}
    for name in dict.fromkeys(s.fixture for s in shards):
        mine = [(s, r) for s, r in zip(shards, results) if s.fixture == name]
        runs[name] = merge(ALL_FIXTURES[name], [r for _, r in mine], mine[0][0].step, mine[0][0].seed)
    return runs, len(done)


class _Sink:
    """The journal :func:`run_sweep` appends each finished shard to: the cache when there is one."""

    def __init__(self, cache: ShardCache | None, on_append: Callable[[Mapping[str, Any]], Any] | None) -> None:
        self.cache, self.on_append = cache, on_append

    def append(self, key: str, index: int, row: Mapping[str, Any]) -> Mapping[str, Any]:
        if self.cache is not None:
            self.cache.append(key, index, row)
        if self.on_append is not None:
            self.on_append(row)
        return row


#: The checks' CPU time on one fixture, after its rows are verified: a fixed part (the
#: identity test's critical values, the figures each row states) and a part per emitted
#: position of a row. Measured on the project's 2-core machine (seed-six-token at 14,235 to
#: 271,857 rows: 0.31-0.76 CPU-s; position-dependent, batch8-g8, zipf-1k and zipf-32k
#: fixtures: 0.25-0.78 CPU-s); constants, so an estimate never depends on the clock.
CHECK_FIXTURE_SECONDS = 0.5
CHECK_ROW_POSITION_SECONDS = 3.5e-7


@dataclass(frozen=True)
class Estimate:
    """What a sized run will take, before it starts: rows, bytes and CPU time. The time is
    complete: ``spent_seconds`` already spent in this process (loading, sizing: measured),
    and the rest from constants (``cpu_seconds`` the verify calls at the NumPy reference's
    speed, ``check_seconds`` the checks), so it grows as the TV asked for shrinks."""

    rows: Mapping[str, int]
    input_bytes: float  # decoder input, all calls together
    held_bytes: float  # per-row arrays the checks read, all fixtures, plus one merge's copy
    cpu_seconds: float  # the verify calls, at the NumPy reference's measured speed
    check_seconds: float = 0.0  # the checks, once the rows are in
    spent_seconds: float = 0.0  # this process so far: imports and sizing, measured
    views: bool = False  # context-free laws reach the decoder as broadcast views, not copied a row

    @property
    def work_seconds(self) -> float:
        """The CPU time still to come: verify calls and checks (estimated from constants)."""
        return self.cpu_seconds + self.check_seconds

    @property
    def total_seconds(self) -> float:
        """The whole run's CPU time: what is spent and what is to come."""
        return self.spent_seconds + self.work_seconds

    def _speed(self) -> str:
        if self.views:
            return (f"{REFERENCE_BYTES_PER_SECOND / 1e9:g} GB of copied input a CPU-second, or a context-free law "
                    f"taken as views at {REFERENCE_LAW_BYTES_PER_SECOND / 1e9:g} GB a CPU-second once a call")
        return f"{REFERENCE_BYTES_PER_SECOND / 1e9:g} GB of input a CPU-second"

    def with_spent(self, seconds: float) -> "Estimate":
        return replace(self, spent_seconds=float(seconds))

    def lines(self, jobs: int, guarantees: Mapping[str, float], reference: bool = True) -> list[str]:
        per = "; ".join(f"{name} {n:,} rows" + (f" (sized for worst-case TV {guarantees[name]:.3g} at its rarest position)"
                                               if name in guarantees else "") for name, n in self.rows.items())
        total = _minutes(self.total_seconds)
        how = (f"about {total} CPU-minutes in all" if reference else
               f"at least {_minutes(self.spent_seconds + self.check_seconds)} CPU-minutes (sizing and checks), "
               f"{total} in all if your decoder is as fast as the NumPy reference")
        lines = [f"sized run: {per}",
                 f"estimate: {self.input_bytes / 1e9:,.3g} GB of decoder input, {self.held_bytes / 1e9:,.3g} GB held "
                 f"for the checks; {how}: {_minutes(self.spent_seconds)} spent loading and sizing, "
                 f"{_minutes(self.cpu_seconds)} verify calls at the NumPy reference's measured {self._speed()}, "
                 f"{_minutes(self.check_seconds)} checks; the verify calls about {_minutes(self.cpu_seconds / max(jobs, 1))} minutes on {jobs} "
                 "worker(s)"]
        if guarantees:
            lines.append("a sized run's rows are what the worst-case TV asked for needs, no more: its figure can be "
                         "coarser than a default run's on the same fixture, whose rows (up to 2,000,000) may reach "
                         "finer")
        return lines


def _minutes(seconds: float) -> str:
    """CPU-minutes to two significant figures, never written as 0 for work that takes time."""
    minutes = seconds / 60
    return f"{minutes:,.2g}" if minutes >= 0.01 or minutes == 0 else "<0.01"


def row_bytes(fixture: PairFixture) -> int:
    """Bytes a row holds for the checks (the per-row arrays of :class:`FixtureRun`)."""
    g = fixture.gamma
    return 8 * (1 + 2 * (g + 1) + g + (0 if fixture.context_free else g))


def estimate(fixtures: Sequence[PairFixture], rows: Mapping[str, int], chunk_bytes: int,
             views: bool = False) -> Estimate:
    """Bytes and time of a run of ``rows`` per fixture at the reference's measured throughput
    (``views``: context-free laws taken as broadcast views, as the reference takes them)."""
    sized = {f.name: fixture_rows(f, rows[f.name]) for f in fixtures}
    by = {f.name: f for f in fixtures}
    input_bytes = sum(n * 8.0 * (2 * by[k].gamma + 1) * by[k].vocab_size for k, n in sized.items())
    held = [n * float(row_bytes(by[k])) for k, n in sized.items()]
    seconds = sum(reference_seconds(by[k], n, chunk_bytes, views) for k, n in sized.items())
    checks = sum(check_seconds(by[k], n) for k, n in sized.items())
    return Estimate(sized, input_bytes, sum(held) + max(held, default=0.0), seconds, checks, views=views)


def check_seconds(fixture: PairFixture, rows: int) -> float:
    """Estimated CPU-seconds of the checks on ``rows`` rows of ``fixture``."""
    return CHECK_FIXTURE_SECONDS + CHECK_ROW_POSITION_SECONDS * rows * (fixture.gamma + 1)


def available_memory() -> float:
    """Bytes of memory free for the run (Linux's available pages; physical memory elsewhere)."""
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return math.inf


def refuse_unholdable(est: Estimate, cache_folder: Path | None, memory: float | None = None) -> None:
    """Refuse, in one line before any work, a run whose per-row arrays this machine cannot hold
    in memory (or, with finished shards kept, on disk)."""
    memory = available_memory() if memory is None else memory
    worst = max(est.rows, key=est.rows.get, default="")
    if est.held_bytes > memory:
        raise ShardError(f"this run needs about {est.held_bytes / 1e9:,.3g} GB of memory for the checks' per-row "
                         f"arrays ({worst}: {est.rows.get(worst, 0):,} rows) and this machine has "
                         f"{memory / 1e9:,.3g} GB free; ask for a coarser --guarantee or fewer --fixture")
    if cache_folder is not None:
        parent = cache_folder.parent
        free = float(shutil.disk_usage(parent).free) if parent.exists() else math.inf
        if est.held_bytes > free:
            raise ShardError(f"this run keeps about {est.held_bytes / 1e9:,.3g} GB of finished shards in "
                             f"{str(cache_folder)!r} and the disk has {free / 1e9:,.3g} GB free")


#: the CPU time a sized run may be estimated at before it must be asked for explicitly
DEFAULT_MAX_CPU_HOURS = 1.0


def refuse_over_budget(est: Estimate, max_cpu_hours: float, option: str = "--max-cpu-hours") -> None:
    """Refuse, in one line before any work, a run whose complete estimate (:attr:`Estimate.total_seconds`)
    is above ``max_cpu_hours`` of CPU time: a run of a day should be asked for, not started by a
    typo in the TV. The budget it suggests is above the estimate, so the same run with it is
    accepted (the estimate is the same but for the few seconds of sizing, measured)."""
    hours = est.total_seconds / 3600
    if hours > max_cpu_hours:
        raise ShardError(f"this run is estimated at {hours:,.3g} CPU-hours in all (the whole plan, every fixture "
                         f"sized), above the budget of {max_cpu_hours:g}; ask for a coarser TV or fewer fixtures, "
                         f"or run it with {option} {suggested_budget(hours):g}")


def suggested_budget(hours: float) -> float:
    """A budget a quarter above ``hours``, rounded up to two significant figures."""
    want = hours * 1.25
    scale = 10 ** (math.floor(math.log10(want)) - 1)
    return math.ceil(want / scale) * scale


def refuse_more_shards_than_calls(fixtures: Sequence[PairFixture], rows: Mapping[str, int], chunk_bytes: int,
                                  shards: int | None) -> None:
    """A shard is at least one decoder call: refuse ``--shards`` above a fixture's calls."""
    for fixture in fixtures if shards else ():
        n = fixture_rows(fixture, rows[fixture.name])
        calls = -(-n // call_step(fixture, n, chunk_bytes))
        if shards > calls:
            raise ShardError(f"--shards {shards:,} is more than the {calls:,} decoder call(s) {fixture.name} "
                             f"takes ({n:,} rows); a shard is at least one call: ask for at most {calls:,}")


def guarantee_reached(frame) -> dict[str, float]:
    """Worst-case TV per fixture as the certificate states it: the largest figure of its
    GUARANTEE rows that ran (inf where some position has none)."""
    rows = frame[frame["detectable"].astype(str).str.startswith("GUARANTEE") & (frame["verdict"] != "untested")]
    return {str(k): float(v) for k, v in rows.groupby("fixture", sort=False)["min_detectable_tv"].max().items()}


def sized_plan(config, fixtures: Sequence[str] | None = None, checks: Sequence[str] | None = None,
               slow: bool = False, progress: bool = False, refuse: Callable[[Estimate], Any] | None = None,
               items: Sequence[tuple[Any, Any, Any]] | None = None, views: bool = False,
               ) -> tuple[Any, list[PairFixture], dict[str, int], Estimate]:
    """(config as run, the distribution-pair fixtures, rows each, the estimate): what a sized
    run will do, computed before any decoder call (whole sequences are not sharded). Sizing
    calls the identity test's own sizing (``CertConfig.rows``, through
    ``min_num_samples_for_identity_test``) for every fixture, tens of seconds over the default
    fixtures: ``progress`` shows a bar over them. The estimate is complete (every fixture
    sized, the CPU time spent so far measured) before ``refuse`` sees it, so what a refusal
    says is the whole run's figure and the budget it suggests is then accepted.
    ``items``, when given, are the (check, fixture, position) assertions actually selected
    (pytest's ``-k``): only their fixtures are sized. ``views``: the decoder takes broadcast
    views (the reference), which the estimate prices once a call."""
    import time

    from specgauge.progress import bar as progress_bar
    from specgauge.stattests.chain.certify import plan, planned_config

    planned = planned_config(config, fixtures, checks, slow)
    chosen = plan(fixtures, checks, slow) if items is None else items
    pairs = list({f.name: f for _, f, _ in chosen if f.kind != "sequence"}.values())
    rows: dict[str, int] = {}
    for fixture in progress_bar(pairs, desc="sizing the samples", unit="fixture", disable=not progress, leave=False):
        rows[fixture.name] = planned.rows(fixture)
    est = estimate(pairs, rows, planned.chunk_bytes, views).with_spent(time.process_time())
    if refuse is not None:
        refuse(est)
    return planned, pairs, rows, est


@dataclass(frozen=True)
class RowsLowerBound:
    """The rows at which a fixture's expected draws reach, at every emitted position, the
    draws no identity test can do without (:mod:`specgauge.stattests.identity.lower_bound`)."""

    rows: int
    position: int  # the position that sets it
    draws: int  # the draws any test needs there
    prior: str

    def line(self, fixture: str, run_rows: int, tv: float, set_by: str = "",
             identity: tuple[int, int, int] | None = None) -> str:
        """``set_by``: the check whose sizing set the run's rows; ``identity``: (rows, position,
        draws) the identity test alone needs for ``tv``, its own ratio to the bound."""
        alone = ""
        if identity is not None:
            rows, position, draws = identity
            alone = (f"; the identity test alone needs {rows:,} rows, {rows / self.rows:.3g}x the bound "
                     f"({draws:,} draws at position {position})")
        return (f"limit: {fixture} {run_rows:,} rows" + (f", set by {set_by}" if set_by else "")
                + f", {run_rows / self.rows:.2g}x the lower bound {self.rows:,}{alone} "
                f"(any test needs {self.draws:,} draws at position {self.position} for worst-case TV {tv:g} at "
                f"these rates: Neyman-Pearson, mass moved {'either way ' if self.prior != 'one move' else ''}between "
                f"two halves of p)")


def guarantee_lower_bound(fixture: PairFixture, tv: float, false_fail: float, false_pass: float) -> RowsLowerBound:
    """The largest, over emitted positions, of the lower bound on draws there over the chance
    that the position is emitted: rows below it leave some position short of what any test needs."""
    from specgauge.stattests.chain.harness import emission_probability
    from specgauge.stattests.identity.lower_bound import min_num_samples_lower_bound

    best = RowsLowerBound(0, 0, 0, "one move")
    for k, (p, r) in enumerate(zip(fixture.target, emission_probability(fixture))):
        if float(r) <= 0:
            continue
        bound = min_num_samples_lower_bound(tv, p, false_fail_rate=false_fail, false_pass_rate=false_pass)
        rows = math.ceil(bound.draws / float(r))
        if rows > best.rows:
            best = RowsLowerBound(rows, k, bound.draws, bound.prior)
    return best
