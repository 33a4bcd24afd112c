"""The sweep journal: a resumable record of finished configurations, and the lock on it.

A sweep appends one JSON line per finished configuration to ``<csv>.partial.jsonl`` (a
single ``write`` on an ``O_APPEND`` descriptor, then fsync), so a ``kill -9`` loses at most
the row being written, and a torn last line is recognised and dropped on resume. Each
line is keyed by a hash of the configuration itself (and the command and version), not
by its position in the sweep: a rerun resumes every configuration already finished,
whatever else changed in its arguments, and one with other arguments simply computes
what it lacks, so an aborted run never blocks the corrected command and nothing
finished is thrown away. The journal is removed once the CSV is in place.

``sweep_lock`` keeps two runs off one output: an ``flock`` on ``<file>.lock``, which names
its holder (pid, host, command) for the run that is refused; the kernel drops the lock
when its holder dies, however it dies. Every writer holds it (sweeps, certificates,
``simulate``, ``calibrate``, ``acceptance``), not only the sweeps.

The CSV itself is written by ``specgauge.csvio`` (atomic, with its ``.meta.json``
sidecar), rows in configuration order, so the same arguments and seed give the same
bytes however the work was scheduled or interrupted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
from pathlib import Path
from typing import Any, Iterator, Mapping

from specgauge.csvio import CsvTarget, ReportOutputError, ensure_folder, normalise_row, specgauge_version, to_builtin

_JOURNAL_MAGIC = "specgauge-sweep-journal"


def item_key(context: Mapping[str, Any], item: Any) -> str:
    """The journal key of one configuration: its ``repr`` with the sweep's context and the version."""
    payload = {"context": dict(context), "item": repr(item), "version": specgauge_version()}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=to_builtin).encode()).hexdigest()[:32]


class Journal:
    """Append-only record of finished configurations: ``{"k": key, "i": index, "row": {...}}`` per line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows_written = 0  # finished rows on disk, from earlier runs included
        self._fd: int | None = None

    def load(self, restart: bool = False) -> dict[str, dict[str, Any]]:
        """Open the journal for appending and return its rows by key.

        ``restart`` discards it first (call it only while holding ``sweep_lock``); a torn
        last line (the process died inside a write) is cut off before appending resumes.
        """
        done: dict[str, dict[str, Any]] = {}
        if restart:
            self.path.unlink(missing_ok=True)
        if self.path.exists():
            raw = self.path.read_bytes()
            good_end = raw.rfind(b"\n") + 1
            lines = raw[:good_end].splitlines()
            header = _parse_line(lines[0]) if lines else None
            if header is None or header.get("journal") != _JOURNAL_MAGIC:
                raise ReportOutputError(f"{str(self.path)!r} is not a specgauge sweep journal; move it away or pass --restart")
            for line in lines[1:]:
                entry = _parse_line(line)
                if entry is not None and isinstance(entry.get("k"), str):
                    done[entry["k"]] = entry["row"]
            self.rows_written = len(done)
            if good_end < len(raw):
                with open(self.path, "r+b") as handle:
                    handle.truncate(good_end)
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ReportOutputError(f"cannot write the sweep journal {str(self.path)!r}: {exc.strerror}") from None
        if not done and os.fstat(self._fd).st_size == 0:
            self._write({"journal": _JOURNAL_MAGIC, "specgauge_version": specgauge_version()})
        return done

    def append(self, key: str, index: int, row: Mapping[str, Any]) -> dict[str, Any]:
        """Record one finished configuration durably; returns the row as it will be reloaded."""
        clean = normalise_row(row)
        self._write({"k": key, "i": index, "row": clean})
        self.rows_written += 1
        return clean

    def _write(self, entry: Mapping[str, Any]) -> None:
        assert self._fd is not None, "Journal.load() opens the journal"
        data = (json.dumps(entry, default=to_builtin, separators=(",", ":")) + "\n").encode()
        try:
            os.write(self._fd, data)
            os.fsync(self._fd)
        except OSError as exc:  # a full disk, an I/O error: what is on disk resumes, a torn line is dropped
            raise ReportOutputError(f"cannot write the sweep journal {str(self.path)!r}: {exc.strerror or exc}; "
                                    "rerun the command to resume from what it holds") from None

    def close(self, remove: bool = False) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if remove:
            self.path.unlink(missing_ok=True)


def _parse_line(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


@contextlib.contextmanager
def sweep_lock(target: CsvTarget | Path | str, command: str, flag: str = "--csv") -> Iterator[None]:
    """Hold ``<file>.lock`` for the whole run; a second run on the same output is refused,
    naming the holder (``flag``: the option that chose the file, for the refusal's advice).

    The default folder (``specgauge-out/``) is made here, at the run's first write, and removed
    again if the run leaves it empty."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no advisory locks, run unguarded
        yield
        return
    if not isinstance(target, CsvTarget):
        target = CsvTarget(Path(target))
    path = target.lock_path
    created = ensure_folder(path)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode(errors="replace").strip()
            os.close(fd)
            raise ReportOutputError(f"{str(target.path)!r} is being written by another run "
                                    f"({_describe_holder(holder)}); wait for it to finish or choose another {flag}") from None
        try:  # the previous holder unlinks the file as it lets go: lock the file that is there now
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": command}).encode())
    try:
        yield
    finally:
        path.unlink(missing_ok=True)  # while still holding the lock, so no one locks a file about to vanish
        os.close(fd)
        if created:
            with contextlib.suppress(OSError):  # only an empty folder: a run that wrote nothing leaves none
                path.parent.rmdir()


def _describe_holder(text: str) -> str:
    try:
        info = json.loads(text)
        return f"pid {info['pid']} on {info['host']}: {info['command']}"
    except (ValueError, KeyError, TypeError):
        return "a process that has not yet said who it is"
