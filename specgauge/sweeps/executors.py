"""Run a function over many configurations: serially, on local processes, or on Dask.

Whatever the executor, each finished configuration is handed to the journal at once (in
this process, so only one writer ever appends) and the result comes back in
configuration order, which is what makes the CSVs byte-identical across executors.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

import pandas as pd

from specgauge import inputs
from specgauge.csvio import CsvTarget, rows_to_frame, write_csv_atomic
from specgauge.errors import SpecgaugeError, UsageError

from .journal import Journal, item_key, sweep_lock

EXECUTORS = ("serial", "process", "dask")
#: the schemes a scheduler address may name (Dask's own; a bare HOST:PORT means tcp)
SCHEDULER_SCHEMES = ("tcp", "tls")
#: seconds to reach a scheduler and hear its handshake before any work starts
SCHEDULER_CONNECT_S = 5.0

Row = dict[str, Any]


class SweepError(UsageError):
    """The sweep cannot run as asked (bad executor options, a missing optional package): exit status 2."""


@dataclass(frozen=True)
class SweepOptions:
    """How to spread a sweep: ``jobs`` > 1 with the default executor means local processes."""

    executor: str = "auto"
    jobs: int = 1
    scheduler: str | None = None
    progress: bool = True

    def resolved_executor(self) -> str:
        """``auto`` becomes ``process`` for ``--jobs`` > 1, else ``serial``; contradictions are refused."""
        if self.jobs < 1:
            raise SweepError(f"--jobs must be ≥ 1, got {self.jobs}")
        executor = self.executor
        if executor == "auto":
            executor = "dask" if self.scheduler else ("process" if self.jobs > 1 else "serial")
        if executor not in EXECUTORS:
            raise SweepError(f"unknown executor {self.executor!r}; choose from {', '.join(EXECUTORS)}")
        if executor == "dask" and not self.scheduler:
            raise SweepError("--executor dask needs --scheduler ADDRESS (e.g. tcp://10.0.0.1:8786)")
        if executor != "dask" and self.scheduler:
            raise SweepError(f"--scheduler only applies to --executor dask, not {executor!r}")
        if executor == "serial" and self.jobs > 1:
            raise SweepError(f"--executor serial contradicts --jobs {self.jobs}")
        return executor


def add_sweep_options(parser: Any, progress: bool = True) -> None:
    """The options every sweeping command shares (``progress``: with --no-progress, unless the command has its own)."""
    group = parser.add_argument_group("sweep execution")
    group.add_argument("--jobs", type=inputs.positive_int, default=1, help="local worker processes (default 1)")
    group.add_argument("--executor", choices=("auto",) + EXECUTORS, default="auto",
                       help="serial, process (local pool of --jobs) or dask (needs --scheduler); auto picks from --jobs")
    group.add_argument("--scheduler", type=scheduler_address, default=None,
                       help="Dask scheduler address, e.g. tcp://host:8786 (reached, with a "
                            f"{SCHEDULER_CONNECT_S:g} s timeout, before any work)")
    if progress:
        group.add_argument("--no-progress", action="store_true", help="no progress bar")
    group.add_argument("--restart", action="store_true", help="discard a partial sweep of this CSV instead of resuming it")


def scheduler_address(text: str) -> str:
    """An argparse type: ``tcp://HOST:PORT``, ``tls://HOST:PORT`` or ``HOST:PORT``, port in range."""
    import argparse

    scheme, sep, rest = text.partition("://")
    if scheme == "inproc" and rest:  # a cluster inside this process (tests, notebooks)
        return text
    if not sep:
        scheme, rest = "tcp", text
    host, colon, port = rest.rpartition(":")
    if (scheme not in SCHEDULER_SCHEMES or not colon or not host or "/" in rest
            or not port.isdigit() or not 0 < int(port) < 65536):
        raise argparse.ArgumentTypeError(
            f"expected a Dask scheduler address such as tcp://10.0.0.1:8786 or HOST:PORT "
            f"({'/'.join(SCHEDULER_SCHEMES)}), got {text!r}")
    return f"{scheme}://{host}:{port}"


def check_scheduler(address: str, timeout: float = SCHEDULER_CONNECT_S) -> None:
    """Refuse, in one line and before any work, a scheduler that cannot be reached or does not speak
    Dask's protocol. A Dask listener writes its handshake as soon as it accepts, so a peer that
    stays silent for ``timeout`` (an HTTP server, a stalled process) is refused instead of hanging."""
    scheme, _, rest = address.partition("://")
    if scheme not in SCHEDULER_SCHEMES:  # an in-process cluster (a test's): nothing to reach over the network
        return
    host, _, port = rest.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
            if scheme == "tcp":
                sock.settimeout(timeout)
                if not sock.recv(8):
                    raise SweepError(f"the Dask scheduler at {address} closed the connection at once")
    except socket.timeout:
        raise SweepError(f"no Dask scheduler answered at {address} within {timeout:g} s "
                         "(unreachable, or a server that is not a Dask scheduler)") from None
    except OSError as exc:
        raise SweepError(f"cannot reach the Dask scheduler at {address}: {exc.strerror or exc}") from None


def options_from_args(args: Any) -> SweepOptions:
    return SweepOptions(executor=args.executor, jobs=args.jobs, scheduler=args.scheduler, progress=not args.no_progress)


def run_sweep(
    func: Callable[[Any], Mapping[str, Any]],
    items: Sequence[Any],
    options: SweepOptions = SweepOptions(),
    journal: Journal | None = None,
    done: Mapping[int, Row] | None = None,
    describe: Callable[[Any], str] = repr,
    keys: Sequence[str] | None = None,
) -> list[Row]:
    """``[func(item) for item in items]``, skipping indices in ``done``, journaling each result.

    A failing item stops the sweep with its index and description; rows finished before
    it stay in the journal (under ``keys[index]``) for the resumed run.
    """
    from specgauge.progress import bar as progress_bar

    executor = options.resolved_executor()
    results: dict[int, Row] = dict(done or {})
    todo = [i for i in range(len(items)) if i not in results]
    bar = progress_bar(total=len(items), initial=len(items) - len(todo), disable=not options.progress,
                       desc="sweep", unit="config", file=sys.stderr, dynamic_ncols=True)  # a named line in a log
    runner = {"serial": _serial, "process": _processes, "dask": _dask}[executor]
    # closing(): an interrupt or error in this loop stops the workers at once, not when its traceback is freed
    with contextlib.closing(runner(func, items, todo, options)) as outcomes:
        _collect(outcomes, items, results, journal, describe, keys, bar)
    return [results[i] for i in range(len(items))]


def _collect(outcomes, items, results, journal, describe, keys, bar) -> None:
    try:
        for index, outcome in outcomes:
            if isinstance(outcome, BaseException):
                if isinstance(outcome, SpecgaugeError):
                    raise SweepError(f"configuration {index} ({describe(items[index])}): {outcome}") from outcome
                raise outcome
            key = keys[index] if keys is not None else str(index)
            results[index] = journal.append(key, index, outcome) if journal is not None else dict(outcome)
            bar.update(1)
    finally:
        bar.close()


Outcome = Iterator[tuple[int, "Row | BaseException"]]


def _call(func: Callable[[Any], Mapping[str, Any]], item: Any) -> Row | BaseException:
    try:
        return dict(func(item))
    except Exception as exc:  # noqa: BLE001 - handed back to the main process, raised there
        return exc


def _serial(func, items, todo, options) -> Outcome:
    for index in todo:
        yield index, _call(func, items[index])


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_WATCH_INTERVAL_S = 0.5


def _die_with_parent() -> None:
    """Worker initializer: exit when the process that started the worker dies, however it dies.

    On Linux the kernel sends SIGTERM on the parent's death (``PR_SET_PDEATHSIG``, which
    also covers SIGKILL); a watchdog thread that notices the worker being re-parented
    covers other systems and the instant before ``prctl`` took effect.
    """
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_WATCH_INTERVAL_S)
        os._exit(1)

    threading.Thread(target=watch, name="specgauge-parent-watch", daemon=True).start()


def _worker_init() -> None:
    """Workers leave Ctrl-C to the main process, which stops them; and die with it (SIGTERM
    kills a worker outright, whatever handler the command installed in its parent)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with_parent()


def _processes(func, items, todo, options) -> Outcome:
    pool = ProcessPoolExecutor(max_workers=options.jobs, initializer=_worker_init)
    pending: dict[Future, int] = {}
    try:
        pending = {pool.submit(_call, func, items[i]): i for i in todo}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in sorted(finished, key=pending.__getitem__):
                yield pending.pop(future), future.result()
    except BaseException:  # an interrupt, a failed item, or the consumer closing early: no waiting for running work
        _terminate(pool)
        raise
    pool.shutdown(wait=True)


def _terminate(pool: ProcessPoolExecutor) -> None:
    """Stop a pool's workers now: running items are abandoned (the journal keeps finished ones)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with contextlib.suppress(Exception):
            process.terminate()
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(timeout=5)


def _dask(func, items, todo, options) -> Outcome:
    try:
        from dask.distributed import Client, as_completed
    except ImportError:
        raise SweepError("--executor dask needs the dask extra: pip install 'specgauge[dask]'") from None
    try:
        client = Client(options.scheduler, timeout="10s", set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise SweepError(f"cannot reach the Dask scheduler at {options.scheduler!r}: {exc}") from None
    futures = []
    try:
        futures = client.map(_call, [func] * len(todo), [items[i] for i in todo], pure=False)
        index_of = {future.key: i for future, i in zip(futures, todo)}
        for future in as_completed(futures, loop=client.loop):
            yield index_of[future.key], future.result()
    except BaseException:  # as for local processes: the cluster stops this run's work now
        with contextlib.suppress(Exception):
            client.cancel(futures, force=True)
        raise
    finally:
        client.close(timeout=SCHEDULER_CONNECT_S)


def sweep_to_csv(
    func: Callable[[Any], Mapping[str, Any]],
    items: Sequence[Any],
    target: CsvTarget,
    signature_payload: Mapping[str, Any],
    metadata: Mapping[str, Any],
    options: SweepOptions = SweepOptions(),
    restart: bool = False,
    describe: Callable[[Any], str] = repr,
) -> tuple[pd.DataFrame, int]:
    """Run the sweep through its journal and write the CSV; returns (frame, rows resumed).

    ``signature_payload`` holds what shapes every result besides the item itself (the
    command, settings that are not part of an item); with the item's ``repr`` and the
    version it keys the journal, so any finished configuration is reused and no other.
    The CSV's lock is held throughout, so a second run on the same CSV, ``--restart``
    included, is refused while this one lives. The journal is removed once the CSV is in
    place; until then, it is the record of finished rows.
    """
    if options.resolved_executor() == "dask":  # contradictory options, an unreachable scheduler: before any file
        check_scheduler(options.scheduler)
    keys = [item_key(signature_payload, item) for item in items]
    command = str(metadata.get("command", signature_payload.get("command", "sweep")))
    arguments = metadata.get("arguments")
    holder = f"specgauge {command}" + (" " + " ".join(map(str, arguments)) if isinstance(arguments, list) else "")
    with sweep_lock(target, holder):
        journal = Journal(target.journal_path)
        journaled = journal.load(restart=restart)
        done = {i: journaled[k] for i, k in enumerate(keys) if k in journaled}
        try:
            rows = run_sweep(func, items, options, journal, done, describe, keys)
        except BaseException:
            journal.close(remove=journal.rows_written == 0)  # keep it only if it holds a finished row
            raise
        journal.close()
        frame = rows_to_frame(rows)
        write_csv_atomic(frame, target.path, metadata)
        journal.close(remove=True)
    return frame, len(done)
