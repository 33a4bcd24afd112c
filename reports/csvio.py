"""Report files that are never half-written: atomic CSVs, their metadata, a resumable journal.

A sweep appends one JSON line per finished configuration to ``<csv>.partial.jsonl`` (a
single ``write`` on an ``O_APPEND`` descriptor, then fsync), so a ``kill -9`` loses at most
the row being written, and a torn last line is recognised and dropped on resume. The CSV
itself only ever appears through ``os.replace`` of a complete temporary file, rows sorted
by configuration order, so the same arguments and seed give the same bytes however the
work was scheduled or interrupted. The configuration and the specgauge version sit beside
each CSV in ``<stem>.meta.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from specgauge.errors import SpecgaugeError

DEFAULT_DIR = Path("reports")
JOURNAL_SUFFIX = ".partial.jsonl"
_JOURNAL_MAGIC = "specgauge-sweep-journal"


class ReportOutputError(SpecgaugeError):
    """A report cannot be written where it was asked to go, or a journal does not match."""


def specgauge_version() -> str:
    """The installed distribution's version, recorded in every report."""
    try:
        return version("specgauge")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


@dataclass(frozen=True)
class CsvTarget:
    """Where a report goes: the CSV, its metadata sidecar and its sweep journal."""

    path: Path

    @property
    def meta_path(self) -> Path:
        return meta_path_for(self.path)

    @property
    def journal_path(self) -> Path:
        return self.path.with_name(self.path.name + JOURNAL_SUFFIX)

    def sibling(self, suffix: str, ext: str = ".csv") -> Path:
        """A companion file beside the CSV: ``plan.csv`` → ``plan_<suffix><ext>``."""
        return self.path.with_name(f"{self.path.stem}_{suffix}{ext}")


def meta_path_for(csv_path: Path) -> Path:
    return csv_path.with_name(csv_path.stem + ".meta.json")


def resolve_csv_target(path: Path | str | None, default_name: str) -> CsvTarget:
    """Check, before any work, that the CSV can be written; create only the default folder.

    A user's ``--csv`` in a missing or read-only folder is refused (one clear line), not
    silently created somewhere else; the default ``reports/`` folder is created.
    """
    if path is None:
        folder = DEFAULT_DIR
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ReportOutputError(f"cannot create the report folder {str(folder)!r}: {exc.strerror}") from None
        target = folder / default_name
    else:
        target = Path(path)
        if target.suffix.lower() != ".csv":
            raise ReportOutputError(f"--csv must name a .csv file, got {str(target)!r}")
        if target.is_dir():
            raise ReportOutputError(f"--csv {str(target)!r} is a folder; name a .csv file inside it")
    folder = target.parent
    if not folder.is_dir():
        raise ReportOutputError(f"cannot write {str(target)!r}: folder {str(folder)!r} does not exist")
    try:  # os.access is wrong for root and for some mounts: try it for real
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{target.name}.", suffix=".probe"):
            pass
    except OSError as exc:
        raise ReportOutputError(f"cannot write {str(target)!r}: folder {str(folder)!r} is not writable ({exc.strerror})") from None
    return CsvTarget(target)


def _to_builtin(value: Any) -> Any:
    """JSON fallback for NumPy scalars and arrays, paths and other odd values in a row."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def normalise_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row as it survives a JSON round trip, so fresh and resumed sweeps agree bytewise."""
    return json.loads(json.dumps(dict(row), default=_to_builtin))


_UMASK = os.umask(0o022)
os.umask(_UMASK)


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; a report is as readable as any file
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def frame_to_csv_bytes(frame: pd.DataFrame) -> bytes:
    """The one CSV formatting of the project: no index, ``\\n`` line ends, repr floats."""
    return frame.to_csv(index=False, lineterminator="\n").encode()


def write_csv_atomic(frame: pd.DataFrame, path: Path, metadata: Mapping[str, Any]) -> None:
    """Write ``frame`` to ``path`` and its metadata sidecar, each by an atomic rename."""
    data = frame_to_csv_bytes(frame)
    meta = {
        "specgauge_version": specgauge_version(),
        **metadata,
        "csv": path.name,
        "rows": int(len(frame)),
        "columns": [str(c) for c in frame.columns],
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    try:
        _atomic_write_bytes(path, data)
        _atomic_write_bytes(meta_path_for(path), (json.dumps(meta, indent=2, sort_keys=True, default=_to_builtin) + "\n").encode())
    except OSError as exc:
        raise ReportOutputError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None


def rows_to_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Rows (already in configuration order) to a frame; columns in order of first appearance."""
    rows = [normalise_row(r) for r in rows]
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    return pd.DataFrame.from_records(rows, columns=list(columns))


def sweep_signature(command: str, configurations: list[Mapping[str, Any]], extra: Mapping[str, Any] | None = None) -> str:
    """A hash naming the sweep: a journal resumes only the sweep it was written for."""
    payload = {"command": command, "configurations": configurations, "extra": extra or {}, "version": specgauge_version()}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=_to_builtin).encode()).hexdigest()


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
        data = (json.dumps(entry, default=_to_builtin, separators=(",", ":")) + "\n").encode()
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
