"""The one way specgauge writes a CSV: checked up front, written atomically, with a sidecar.

``resolve_csv_target`` runs before any work, so a missing or read-only folder, or a
folder, pipe or device given where a file belongs, is one clear line and not a traceback
after minutes of computing; it creates nothing (the default ``specgauge-out/`` folder is made
at the first write, so a refusal leaves nothing on disk). ``write_csv_atomic`` writes the
CSV, then ``<stem>.meta.json`` beside it (specgauge version, the command, its arguments,
seed, row count and the CSV's sha256), each through a temporary file renamed into place
(``write_bytes_atomic``), so a reader never sees half a file, no ``*.tmp`` is left behind,
and a write that fails (a full disk, an I/O error) is one line, exit status 1. Nothing time-dependent goes into either file: the same
arguments and seed give the same bytes. Shared by the certificate (``stattests``) and
the reports, which is why it lives in the core and imports neither.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from specgauge import __version__
from specgauge.errors import SpecgaugeError, UsageError

#: Where a report goes when no path is given: a folder of its own in the current directory,
#: never among the sources (run inside the checkout, `reports/` is specgauge's own package).
DEFAULT_DIR = Path("specgauge-out")
JOURNAL_SUFFIX = ".partial.jsonl"


class ReportOutputError(SpecgaugeError):
    """A report cannot be written where it was asked to go, or a journal does not match."""


class ReportPathError(ReportOutputError, UsageError):
    """The path given for a report cannot take it (a folder, a missing or unwritable one),
    found before any work: a usage error, exit status 2. A report held by another run or a
    write that fails while working stays a :class:`ReportOutputError` (exit status 1)."""

    exit_code = 2


def specgauge_version() -> str:
    """The installed distribution's version, recorded in every report."""
    return __version__


@dataclass(frozen=True)
class CsvTarget:
    """Where a report goes: the CSV, its metadata sidecar and (for sweeps) its journal."""

    path: Path

    @property
    def meta_path(self) -> Path:
        return meta_path_for(self.path)

    @property
    def journal_path(self) -> Path:
        return self.path.with_name(self.path.name + JOURNAL_SUFFIX)

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    def sibling(self, suffix: str, ext: str = ".csv") -> Path:
        """A companion file beside the CSV: ``plan.csv`` → ``plan_<suffix><ext>``."""
        return self.path.with_name(f"{self.path.stem}_{suffix}{ext}")


def meta_path_for(csv_path: Path) -> Path:
    return csv_path.with_name(csv_path.stem + ".meta.json")


def resolve_csv_target(path: Path | str | None, default_name: str, flag: str = "--csv") -> CsvTarget:
    """Check, before any work, that the CSV can be written; create nothing.

    A user's path in a missing or read-only folder is refused (one clear line), not
    silently created somewhere else; the default ``specgauge-out/`` folder is checked here and
    created at the first write (``ensure_folder``).
    """
    if path is None:
        target = DEFAULT_DIR / default_name
        check_writable(target, create_folder=True)
        return CsvTarget(target)
    target = Path(path)
    if target.is_dir():
        raise ReportPathError(f"{flag} {str(target)!r} is a folder; name a .csv file inside it")
    if target.suffix.lower() != ".csv":
        raise ReportPathError(f"{flag} must name a .csv file, got {str(target)!r}")
    check_writable(target)
    return CsvTarget(target)


def check_writable(target: Path, create_folder: bool = False) -> None:
    """Refuse, before any work, an output file that cannot be written (a usage error): its
    folder missing (unless ``create_folder``: then the nearest existing one must take it) or
    read-only, the file itself read-only, or not a regular file (a device such as /dev/full,
    a pipe: a report is written beside and renamed into place, which a device cannot take)."""
    target = Path(target)
    folder = target.parent
    if create_folder and not folder.exists():
        folder = next((p for p in folder.parents if p.exists()), Path("."))
    if not folder.is_dir():
        why = f"{str(folder)!r} is a file, not a folder" if folder.exists() else f"folder {str(folder)!r} does not exist"
        raise ReportPathError(f"cannot write {str(target)!r}: {why}")
    if target.exists() or target.is_symlink():
        problem = output_file_problem(target)
        if problem:
            raise ReportPathError(f"cannot write {str(target)!r}: {problem}")
    try:  # os.access is wrong for root and for some mounts: try it for real
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{target.name}.", suffix=".probe"):
            pass
    except OSError as exc:
        raise ReportPathError(f"cannot write {str(target)!r}: folder {str(folder)!r} is not writable ({exc.strerror})") from None
    if target.exists() and not os.access(target, os.W_OK) and os.geteuid() != 0:
        raise ReportPathError(f"cannot write {str(target)!r}: the file exists and is read-only")


def to_builtin(value: Any) -> Any:
    """JSON fallback for NumPy scalars and arrays, paths and other odd values in a row."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def normalise_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row as it survives a JSON round trip, so fresh and resumed sweeps agree bytewise."""
    return json.loads(json.dumps(dict(row), default=to_builtin))


def output_file_problem(target: Path) -> str | None:
    """Why an existing ``target`` cannot be replaced by a report (not a regular file), or None."""
    import stat

    from specgauge.inputs import file_kind

    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:  # a dangling link: the report replaces the link
        return None
    except OSError as exc:
        return exc.strerror or str(exc)
    if stat.S_ISREG(mode):
        return None
    return f"it is {file_kind(mode)}, not a regular file; name a file to write"


def ensure_folder(path: Path) -> bool:
    """Create the folder ``path`` goes in, at the first write (the default ``specgauge-out/``);
    True when it was created here. A folder the user named was checked up front and exists."""
    folder = Path(path).parent
    if folder.is_dir():
        return False
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReportOutputError(f"cannot create the report folder {str(folder)!r}: {exc.strerror or exc}") from None
    return True


_UMASK = os.umask(0o022)
os.umask(_UMASK)


def write_bytes_atomic(path: Path | str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file renamed into place: a reader sees the
    old file or the whole new one. A failed write (a full disk, an I/O error) removes the
    temporary file and is one line, exit status 1 (``ReportOutputError``)."""
    path = Path(path)
    ensure_folder(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise ReportOutputError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from None
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; a report is as readable as any file
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError):
            raise ReportOutputError(f"cannot write {str(path)!r}: {exc.strerror or exc}; nothing was written "
                                    "there") from None
        raise


def frame_to_csv_bytes(frame: pd.DataFrame) -> bytes:
    """The one CSV formatting of the project: no index, ``\\n`` line ends, repr floats."""
    return frame.to_csv(index=False, lineterminator="\n").encode()


def write_csv_atomic(frame: pd.DataFrame, path: Path | str, metadata: Mapping[str, Any]) -> None:
    """Write ``frame`` to ``path`` and its metadata sidecar, each by an atomic rename.

    ``metadata`` should name the ``command`` and its ``arguments`` (and ``seed`` where one
    applies); the version, row count, columns and the CSV's sha256 are added here.
    """
    path = Path(path)
    data = frame_to_csv_bytes(frame)
    meta = {
        "specgauge_version": specgauge_version(),
        **metadata,
        "csv": path.name,
        "rows": int(len(frame)),
        "columns": [str(c) for c in frame.columns],
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    write_bytes_atomic(path, data)
    write_bytes_atomic(meta_path_for(path), (json.dumps(meta, indent=2, sort_keys=True, default=to_builtin) + "\n").encode())


def rows_to_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Rows (already in configuration order) to a frame; columns in order of first appearance."""
    rows = [normalise_row(r) for r in rows]
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    return pd.DataFrame.from_records(rows, columns=list(columns))
