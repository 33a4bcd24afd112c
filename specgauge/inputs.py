"""The input checks: a kind per option value, one-line errors, and the schema helpers of file readers.

Every command-line option and every field of an input file is checked here, before any
work starts, so a bad value is one line naming what was given, what is allowed and where
(flag, or file, line and field), never a traceback minutes later. A *kind* (``Integer``,
``Real``, ``Choice``, ``OutputPath``...) is both an argparse ``type=`` (text in, value out,
``argparse.ArgumentTypeError`` on a bad value) and a checker of values already parsed from
a file (``kind.check(value)``, ``ValueError``); the schema helpers (``field``, ``where``,
``read_json``, ``read_toml``, ``read_jsonl``) turn the latter into a ``UsageError`` that
names the file, line and field. ``parser_errors_in_one_line`` makes argparse print one
line instead of its usage block. The module imports only the standard library, so the
pytest plugin can use it at start-up.

The exit codes: 2 for a usage error (argparse's, and every ``UsageError``), 1 for a
failed verdict or a failure while working.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from specgauge.errors import InputFileError, UsageError

#: The smallest family-wise false-fail rate accepted: the suite splits it over up to a
#: thousand assertions, and a per-assertion rate under ~1e-16 is lost in float64 next to 1
#: (the chi-square and KS quantiles at 1 − rate become NaN).
MIN_FALSE_FAIL = 1e-12


def _shown(value: object) -> str:
    return repr(value) if not isinstance(value, str) else repr(value.strip() if len(value) < 80 else value[:77] + "...")


class Kind:
    """A kind of value: ``kind(text)`` for argparse, ``kind.check(value)`` for a parsed value."""

    what = "a value"

    def check(self, value: Any) -> Any:  # pragma: no cover - every kind overrides it
        raise NotImplementedError

    def parse(self, text: str) -> Any:
        return self.check(text)

    def __call__(self, text: str) -> Any:
        try:
            return self.parse(text)
        except (ValueError, TypeError, OverflowError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    def refuse(self, value: object) -> ValueError:
        return ValueError(f"expected {self.what}, got {_shown(value)}")

    @property
    def __name__(self) -> str:  # argparse names a type in some messages
        return type(self).__name__.lower()


@dataclass(frozen=True)
class Integer(Kind):
    """A whole number in [minimum, maximum]; text may be ``1000``, ``1_000`` or ``1e3``."""

    minimum: int | None = None
    maximum: int | None = None
    noun: str = "an integer"

    @property
    def what(self) -> str:  # type: ignore[override]
        bounds = [f"≥ {self.minimum}" if self.minimum is not None else "",
                  f"≤ {self.maximum}" if self.maximum is not None else ""]
        return " ".join([self.noun, " and ".join(b for b in bounds if b)]).strip()

    def parse(self, text: str) -> int:
        text = str(text).strip()
        try:
            value: Any = int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                raise self.refuse(text) from None
            if not (math.isfinite(number) and number.is_integer()):
                raise self.refuse(text) from None
            value = int(number)
        return self.check(value)

    def check(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and math.isfinite(value) and value.is_integer():
                value = int(value)
            else:
                raise self.refuse(value)
        if (self.minimum is not None and value < self.minimum) or (self.maximum is not None and value > self.maximum):
            raise self.refuse(value)
        return value


@dataclass(frozen=True)
class Real(Kind):
    """A finite number between ``low`` and ``high``, each bound open or closed (None: no bound)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    noun: str = "a number"

    @property
    def what(self) -> str:  # type: ignore[override]
        if self.low is not None and self.high is not None:
            return (f"{self.noun} in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}"
                    f"{')' if self.high_open else ']'}")
        if self.low is not None:
            return f"{self.noun} {'>' if self.low_open else '≥'} {self.low:g}"
        if self.high is not None:
            return f"{self.noun} {'<' if self.high_open else '≤'} {self.high:g}"
        return f"a finite {self.noun.removeprefix('a ')}"

    def parse(self, text: str) -> float:
        try:
            value = float(str(text).strip())
        except ValueError:
            raise self.refuse(text) from None
        return self.check(value)

    def check(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.refuse(value)
        value = float(value)
        if not math.isfinite(value):
            raise self.refuse(value)
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            raise self.refuse(value)
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            raise self.refuse(value)
        return value


@dataclass(frozen=True)
class Choice(Kind):
    """One of a fixed set of names (the error lists them)."""

    names: tuple[str, ...]
    noun: str = "one of"

    @property
    def what(self) -> str:  # type: ignore[override]
        return f"{self.noun} {', '.join(self.names)}"

    def check(self, value: Any) -> str:
        if not isinstance(value, str) or value.strip() not in self.names:
            raise self.refuse(value)
        return value.strip()


@dataclass(frozen=True)
class Text(Kind):
    """Non-empty text of at most ``max_length`` characters, without control characters."""

    max_length: int = 4096
    what = "non-empty text"

    def check(self, value: Any) -> str:
        if not isinstance(value, str) or not value.strip() or len(value) > self.max_length:
            raise self.refuse(value)
        if any(ord(c) < 32 and c not in "\t" for c in value):
            raise ValueError(f"expected text without control characters, got {value!r}")
        return value


@dataclass(frozen=True)
class CommaList(Kind):
    """Comma-separated values of one kind: at least one, and no value twice."""

    item: Kind

    @property
    def what(self) -> str:  # type: ignore[override]
        return f"comma-separated values, each {self.item.what}"

    def parse(self, text: str) -> list:
        parts = [part.strip() for part in str(text).split(",")]
        if not any(parts):
            raise ValueError(f"expected at least one value ({self.what}), got {_shown(text)}")
        values = []
        for part in parts:
            if not part:
                raise ValueError(f"empty item in {_shown(text)}; expected {self.what}")
            values.append(self.item.parse(part))
        return self.check(values)

    def check(self, value: Any) -> list:
        values = [self.item.check(v) for v in value]
        if len(set(map(repr, values))) != len(values):
            raise ValueError(f"a value is listed twice in {values}")
        return values


@dataclass(frozen=True)
class _PathKind(Kind):
    """A path, optionally with one of ``suffixes``; never empty, never a folder."""

    suffixes: tuple[str, ...] = ()
    noun = "a path"

    @property
    def what(self) -> str:  # type: ignore[override]
        return self.noun + (f" ({' or '.join(self.suffixes)})" if self.suffixes else "")

    def path(self, value: Any) -> Path:
        if not str(value).strip():
            raise ValueError(f"expected {self.what}, got an empty path")
        path = Path(str(value))
        if path.is_dir():
            raise ValueError(f"{str(path)!r} is a folder; expected {self.what}")
        if self.suffixes and path.suffix.lower() not in self.suffixes:
            raise ValueError(f"expected {self.what}, got {str(path)!r}")
        return path


@dataclass(frozen=True)
class InputFile(_PathKind):
    """A path to an existing regular file of at most ``MAX_INPUT_BYTES`` (not a folder, pipe or device)."""

    noun = "an existing file"

    def check(self, value: Any) -> Path:
        path = self.path(value)
        problem = input_file_problem(path)
        if problem is not None:
            raise ValueError(f"{str(path)!r} {problem}; expected {self.what}")
        return path


@dataclass(frozen=True)
class OutputPath(_PathKind):
    """A file to write: its folder exists and it is not itself a folder (checked before any work)."""

    noun = "a file path in an existing folder"

    def check(self, value: Any) -> Path:
        path = self.path(value)
        if not path.parent.is_dir():
            raise ValueError(f"cannot write {str(path)!r}: folder {str(path.parent)!r} does not exist")
        return path


# ---------------------------------------------------------------- the kinds the commands use

positive_int = Integer(minimum=1)
non_negative_int = Integer(minimum=0)
seed = Integer(minimum=0, noun="a seed: an integer")
finite = Real()
positive = Real(low=0.0, low_open=True)
non_negative = Real(low=0.0)
fraction = Real(low=0.0, high=1.0)
probability = Real(low=0.0, high=1.0, low_open=True, high_open=True)
tv = Real(low=0.0, high=1.0, low_open=True, high_open=True, noun="a total-variation distance")
#: the finest TV a certification is sized for: finer needs over 10^12 rows, past any machine (and float range)
MIN_CERTIFIED_TV = 1e-6
certified_tv = Real(low=MIN_CERTIFIED_TV, high=1.0, high_open=True, noun="a total-variation distance")
false_fail = Real(low=MIN_FALSE_FAIL, high=1.0, high_open=True, noun="a false-fail rate")
seconds = Real(low=0.0, low_open=True, noun="a number of seconds")


# ---------------------------------------------------------------- argparse in one line


def one_line_error(parser: argparse.ArgumentParser, message: str) -> None:
    """argparse's ``error`` without the usage block: one line, exit status 2."""
    parser.exit(2, f"{parser.prog}: error: {message} (see {parser.prog} --help)\n")


#: actions that take an option any number of times by design
_REPEATABLE = (argparse._AppendAction, argparse._AppendConstAction, argparse._CountAction, argparse._HelpAction,
               argparse._VersionAction)


def repeated_option(parser: argparse.ArgumentParser, args: Sequence[str]) -> str | None:
    """The first single-valued option given twice (``--rate 30 --rate 40``, ``--plot --no-plot``), in
    words; None when there is none. argparse keeps the last silently; options made to repeat
    (``action="append"``) are left alone. Tokens after ``--`` are values, not options."""
    seen: dict[str, str] = {}
    tokens = list(args)
    for i, token in enumerate(tokens):
        if token == "--":
            break
        if not token.startswith("-") or token == "-":
            continue
        name, eq, inline = token.partition("=")
        action = parser._option_string_actions.get(name)
        if action is None or isinstance(action, _REPEATABLE):
            continue
        value = inline if eq else (tokens[i + 1] if action.nargs != 0 and i + 1 < len(tokens) else "")
        shown = f"{name} {' '.join(value.split())}".strip()[:80]   # one line whatever the value holds
        if action.dest in seen:
            return (f"argument {name}: given twice ({seen[action.dest]}, then {shown}); argparse would keep the "
                    "last silently: give it once")
        seen[action.dest] = shown
    return None


@contextlib.contextmanager
def parser_errors_in_one_line() -> Iterator[None]:
    """While a command runs, every argparse parser reports a bad option in one line, and refuses a
    single-valued option given twice (``repeated_option``)."""
    saved, saved_parse = argparse.ArgumentParser.error, argparse.ArgumentParser.parse_known_args

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[no-untyped-def]
        problem = repeated_option(self, sys.argv[1:] if args is None else args)
        if problem:
            self.error(problem)
        return saved_parse(self, args, namespace)

    argparse.ArgumentParser.error = one_line_error  # type: ignore[method-assign]
    argparse.ArgumentParser.parse_known_args = parse_known_args  # type: ignore[method-assign]
    try:
        yield
    finally:
        argparse.ArgumentParser.error = saved  # type: ignore[method-assign]
        argparse.ArgumentParser.parse_known_args = saved_parse  # type: ignore[method-assign]


# ---------------------------------------------------------------- file schemas


@dataclass(frozen=True)
class Where:
    """A place in an input file: the file, and optionally a line and a field."""

    file: str
    line: int | None = None
    field: str | None = None

    def at(self, field: str | None = None, line: int | None = None) -> "Where":
        """The same file, further in: a field (dotted onto the current one) or a line."""
        name = field if self.field is None or field is None else f"{self.field}.{field}"
        return Where(self.file, self.line if line is None else line, name if field is not None else self.field)

    def __str__(self) -> str:
        text = self.file + (f", line {self.line}" if self.line is not None else "")
        return text + (f", field {self.field!r}" if self.field is not None else "")

    def error(self, message: str) -> InputFileError:
        """A one-line ``InputFileError`` (exit status 2) located here."""
        return InputFileError(f"{self}: {' '.join(str(message).split())}")


def where(file: object, line: int | None = None, field: str | None = None) -> Where:
    return Where(str(file), line, field)


def check(value: Any, kind: Kind, place: Where) -> Any:
    """``kind.check(value)``, its error located at ``place``."""
    try:
        return kind.check(value)
    except (ValueError, TypeError, OverflowError) as exc:
        raise place.error(str(exc)) from None


def parse(text: Any, kind: Kind, place: Where) -> Any:
    """A text cell (CSV, ``key=value``) parsed as ``kind``, its error located at ``place``."""
    if text is None:
        raise place.error(f"missing; expected {kind.what}")
    try:
        return kind.parse(str(text))
    except (ValueError, TypeError, OverflowError) as exc:
        raise place.error(str(exc)) from None


def field(mapping: Any, name: str, kind: Kind, place: Where, default: Any = ...) -> Any:
    """The field ``name`` of a table, checked; missing and no ``default``: one-line error."""
    table(mapping, place)
    if name not in mapping:
        if default is ...:
            raise place.at(name).error(f"missing; expected {kind.what}")
        return default
    return check(mapping[name], kind, place.at(name))


def table(value: Any, place: Where, allowed: Sequence[str] | None = None) -> Mapping[str, Any]:
    """A table (JSON object, TOML table) with only ``allowed`` keys, when given."""
    if not isinstance(value, Mapping):
        raise place.error(f"expected a table of fields, got {type(value).__name__} {_shown(value)}")
    if allowed is not None:
        unknown = sorted(set(map(str, value)) - set(allowed))
        if unknown:
            raise place.error(f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    return value


# ---------------------------------------------------------------- reading input files

#: The largest input file read. Every input (measurements, traces, profiles, prompts, probe
#: files) is read whole, so a bound keeps a wrong path (a device, a multi-GB dump) from
#: filling memory; the largest real inputs (a probe of a certification's size) are tens of MB.
MAX_INPUT_BYTES = 1 << 30

_NOT_REGULAR = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                (stat.S_ISSOCK, "a socket"))


def file_kind(mode: int) -> str:
    """What a ``stat`` mode that is not a regular file's is, in words ("a named pipe (FIFO)")."""
    return next((name for test, name in _NOT_REGULAR if test(mode)), "not a regular file")


def _mode_problem(mode: int, size: int) -> str | None:
    if not stat.S_ISREG(mode):
        return f"is {file_kind(mode)}, not a regular file (input files are read whole)"
    if size > MAX_INPUT_BYTES:
        return (f"is {size / 2**30:,.1f} GiB, more than the {MAX_INPUT_BYTES / 2**30:g} GiB an input file may be "
                "(input files are read whole)")
    return None


def input_file_problem(path: Path | str) -> str | None:
    """Why ``path`` cannot be read as an input file (missing, not a regular file, too large), or None.

    Found with ``stat``, never by opening it: opening a FIFO blocks, and reading a device
    such as /dev/zero never ends."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "does not exist"
    except NotADirectoryError:
        return "does not exist (a part of the path is not a folder)"
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    except ValueError as exc:  # an embedded NUL byte
        return f"is not a usable path: {exc}"
    return _mode_problem(info.st_mode, info.st_size)


def _named(path: Path | str, what: str | None) -> Where:
    """The place of a whole file; with ``what`` (``"acceptance trace"``) the line names the kind."""
    return where(path if what is None else f"cannot read {what + ' ' if what else ''}{str(path)!r}")


def checked_input_file(path: Path | str, what: str | None = None) -> Path:
    """``path`` as a readable input file, or a one-line ``InputFileError`` (exit status 2) naming it."""
    problem = input_file_problem(path)
    if problem is not None:
        raise _named(path, what).error(problem)
    return Path(path)


def read_input_bytes(path: Path | str, what: str | None = None) -> bytes:
    """The bytes of an input file, checked first (``checked_input_file``) and read at most
    ``MAX_INPUT_BYTES``: the file is opened without blocking and checked again once open, so
    a path swapped for a pipe in between cannot hang the read."""
    checked_input_file(path, what)
    place = _named(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise place.error(f"cannot be read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        problem = _mode_problem(info.st_mode, info.st_size)
        if problem is not None:
            raise place.error(problem)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise place.error(f"cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_INPUT_BYTES:
        raise place.error(f"is more than the {MAX_INPUT_BYTES / 2**30:g} GiB an input file may be")
    return data


def decode_utf8(data: bytes, place: "Where") -> str:
    """Bytes as UTF-8 text; otherwise one line naming the line and byte of the first bad one."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise place.at(line=line).error(f"is not UTF-8 text (byte {exc.start}: {data[exc.start:exc.start + 1]!r})"
                                        ) from None


def read_input_text(path: Path | str, what: str | None = None) -> str:
    """An input file's UTF-8 text (``read_input_bytes``, then decoded with a one-line error)."""
    return decode_utf8(read_input_bytes(path, what), where(path))



def loads_json(text: str | bytes, place: "Where") -> Any:
    """``json.loads`` with its errors in one line at ``place``: a syntax error names the
    line and column, and nesting too deep for the parser is refused, not a crash."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise place.at(line=(place.line or 1) + exc.lineno - 1).error(
            f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise place.error("not valid JSON: nested too deeply") from None
    except (ValueError, TypeError) as exc:  # bytes that are not UTF-8, and other decoding errors
        raise place.error(f"not valid JSON: {one_line(exc)}") from None


def json_key_line(text: str, key: str) -> int | None:
    """The line of the first ``"key":`` in a JSON text, to name where a bad value stands."""
    import re

    match = re.search(r'"' + re.escape(key) + r'"\s*:', text)
    return None if match is None else text.count("\n", 0, match.start()) + 1


def read_json(path: Path | str, what: str | None = None) -> Any:
    """A JSON document; a syntax error names its line and column."""
    return loads_json(read_input_text(path, what), where(path))


def read_toml(path: Path | str) -> dict:
    """A TOML document; a syntax error says where."""
    import tomllib

    text = read_input_text(path)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise where(path).error(f"not valid TOML: {exc}") from None
    except RecursionError:
        raise where(path).error("not valid TOML: nested too deeply") from None


def read_jsonl(path: Path | str) -> Iterator[tuple[Where, Any]]:
    """(place, object) per non-blank line of a JSON-lines file; a bad line names its number."""
    for number, line in enumerate(read_input_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        yield where(path, number), loads_json(line, where(path, number))


def one_line(exc: BaseException) -> str:
    """The first line of an exception's message, for a one-line report of a foreign error."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
