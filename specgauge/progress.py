"""What a long run tells its user while it works: a bar on a terminal, lines in a log.

A run that waits on a server, a model or many configurations must never look hung. On a
terminal the bar is tqdm's; when stderr is a file or a pipe (a log, CI) a bar's carriage
returns are noise, so one line is written every ``every_s`` seconds instead, with the
count, the rate and the time left. ``say`` writes one line either way (above the bar).
:func:`bar` gives the same choice behind tqdm's interface, for the commands whose loops
drive a tqdm bar (``plan``'s sweep, ``certify``'s assertions and shards, ``simulate``).
"""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO

MODES = ("bar", "lines", "off")


def auto_mode(stream: TextIO | None = None, enabled: bool = True) -> str:
    """``bar`` on a terminal, ``lines`` in a log, ``off`` when not wanted."""
    stream = sys.stderr if stream is None else stream
    if not enabled:
        return "off"
    try:
        return "bar" if stream.isatty() else "lines"
    except (AttributeError, ValueError):
        return "lines"


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else \
        f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Progress:
    """Counts work done out of ``total`` and shows it in the chosen ``mode`` (see :data:`MODES`)."""

    def __init__(self, total: int, desc: str, *, mode: str = "off", unit: str = "sample",
                 stream: TextIO | None = None, every_s: float = 10.0, talk: bool | None = None,
                 clock=time.monotonic) -> None:
        if mode not in MODES:
            raise ValueError(f"invalid progress mode {mode!r}; valid modes are {', '.join(MODES)}")
        self.total, self.desc, self.mode, self.unit = int(total), desc, mode, unit
        self.stream = sys.stderr if stream is None else stream
        self.every_s, self.clock = every_s, clock
        self.talk = mode != "off" if talk is None else talk  # `say` lines (waits) even without a bar
        self.done = 0
        self.started = self._last = clock()
        self._bar = None
        if mode == "bar":
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, desc=desc, unit=unit, file=self.stream, dynamic_ncols=True)

    def line(self) -> str:
        """``desc: done/total unit (pct), rate/s, ETA``: what the log mode prints."""
        elapsed = self.clock() - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else math.inf
        pct = 100.0 * self.done / self.total if self.total else 100.0
        return (f"{self.desc}: {self.done}/{self.total} {self.unit}s ({pct:.0f}%), {rate:.3g}/s, "
                f"{_duration(elapsed)} elapsed, ETA {_duration(left)}")

    def update(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif self.mode == "lines" and self.clock() - self._last >= self.every_s:
            self._last = self.clock()
            self.say(self.line())

    def say(self, text: str) -> None:
        """One line on the stream, above the bar if there is one."""
        if not self.talk:
            return
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self.mode == "lines" and self.total and self._last > self.started:  # a short run stays quiet
            self.say(self.line())


#: seconds between two lines of a bar written to a log
LOG_EVERY_S = 10.0


class LineBar:
    """tqdm's interface as the commands use it (``update``, ``set_postfix_str``, ``write``,
    ``close``, iteration, ``with``), written as a :class:`Progress` line every ``every_s``
    seconds: what a bar becomes when stderr is a log."""

    def __init__(self, iterable=None, *, total=None, desc: str = "", unit: str = "it", initial: int = 0,
                 file: TextIO | None = None, every_s: float = LOG_EVERY_S, clock=time.monotonic, **_ignored) -> None:
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self.iterable = iterable
        self._progress = Progress(int(total or 0), desc, mode="lines", unit=unit, stream=file, every_s=every_s,
                                  clock=clock)
        self._progress.done = int(initial)
        self.desc, self.postfix = desc, None

    @property
    def n(self) -> int:
        return self._progress.done

    @property
    def total(self) -> int:
        return self._progress.total

    @total.setter
    def total(self, value) -> None:
        self._progress.total = int(value or 0)

    def __iter__(self):
        for item in self.iterable:
            yield item
            self.update(1)
        self.close()

    def __enter__(self) -> "LineBar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        self._progress.update(n)

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        self.postfix = text
        self._progress.desc = f"{self.desc} [{text}]" if text else self.desc

    def write(self, text: str, file: TextIO | None = None) -> None:
        self._progress.say(text)

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        self._progress.close()


def bar(iterable=None, *, disable: bool = False, file: TextIO | None = None, **kwargs):
    """A tqdm bar on a terminal, a :class:`LineBar` in a log (stderr not a terminal), or a
    disabled tqdm bar: the one place the commands choose how progress shows."""
    from tqdm import tqdm

    stream = sys.stderr if file is None else file
    if disable or auto_mode(stream) == "bar":
        return tqdm(iterable, disable=disable, file=stream, **kwargs)
    return LineBar(iterable, file=stream, **kwargs)
