"""The sweep journal: a resumable record of finished configurations, locked to one run.

A sweep appends one JSON line per finished configuration to ``<csv>.partial.jsonl`` (a
single ``write`` on an ``O_APPEND`` descriptor, then fsync), so a ``kill -9`` loses at most
the row being written, and a torn last line is recognised and dropped on resume. The CSV
itself is written by ``specgauge.csvio`` (atomic, with its ``.meta.json`` sidecar), rows
sorted by configuration order, so the same arguments and seed give the same bytes however
the work was scheduled or interrupted.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Mapping

from specgauge.csvio import (CsvTarget, ReportOutputError, normalise_row, resolve_csv_target,  # noqa: F401 - re-exported
                             rows_to_frame, specgauge_version, to_builtin, write_csv_atomic)

_JOURNAL_MAGIC = "specgauge-sweep-journal"


def sweep_signature(command: str, configurations: list[Mapping[str, Any]], extra: Mapping[str, Any] | None = None) -> str:
    """A hash naming the sweep: a journal resumes only the sweep it was written for."""
    payload = {"command": command, "configurations": configurations, "extra": extra or {}, "version": specgauge_version()}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=to_builtin).encode()).hexdigest()


class Journal:
    """Append-only record of finished configurations: ``{"i": index, "row": {...}}`` per line."""

    def __init__(self, path: Path, signature: str) -> None:
        self.path = path
        self.signature = signature
        self.rows_written = 0  # finished rows on disk, resumed ones included
        self._fd: int | None = None

    def load(self, restart: bool = False) -> dict[int, dict[str, Any]]:
        """Open the journal for appending and return the rows it already holds.

        A journal written for other arguments is refused unless ``restart``; a torn last
        line (the process died inside a write) is cut off before appending resumes.
        """
        done: dict[int, dict[str, Any]] = {}
        if restart:
            self.path.unlink(missing_ok=True)
        if self.path.exists():
            raw = self.path.read_bytes()
            good_end = raw.rfind(b"\n") + 1
            lines = raw[:good_end].splitlines()
            header = _parse_line(lines[0]) if lines else None
            if header is None or header.get("journal") != _JOURNAL_MAGIC:
                raise ReportOutputError(f"{str(self.path)!r} is not a specgauge sweep journal; move it away or pass --restart")
            if header.get("signature") != self.signature:
                raise ReportOutputError(
                    f"{str(self.path)!r} holds a partial sweep with different arguments; "
                    "rerun with the same arguments to resume, or pass --restart to discard it"
                )
            for line in lines[1:]:
                entry = _parse_line(line)
                if entry is not None and isinstance(entry.get("i"), int):
                    done[entry["i"]] = entry["row"]
            self.rows_written = len(done)
            if good_end < len(raw):
                with open(self.path, "r+b") as handle:
                    handle.truncate(good_end)
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ReportOutputError(f"cannot write the sweep journal {str(self.path)!r}: {exc.strerror}") from None
        if not done and os.fstat(self._fd).st_size == 0:
            self._write({"journal": _JOURNAL_MAGIC, "signature": self.signature, "specgauge_version": specgauge_version()})
        return done

    def append(self, index: int, row: Mapping[str, Any]) -> dict[str, Any]:
        """Record one finished configuration durably; returns the row as it will be reloaded."""
        clean = normalise_row(row)
        self._write({"i": index, "row": clean})
        self.rows_written += 1
        return clean

    def _write(self, entry: Mapping[str, Any]) -> None:
        assert self._fd is not None, "Journal.load() opens the journal"
        data = (json.dumps(entry, default=to_builtin, separators=(",", ":")) + "\n").encode()
        os.write(self._fd, data)
        os.fsync(self._fd)

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
