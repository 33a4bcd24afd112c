"""What a long server run tells its user while it works: a bar on a terminal, lines in a log.

A probe or a comparison that waits on a server or a model must never look hung. On a
terminal the bar is tqdm's; when stderr is a file or a pipe (a log, CI) a bar's carriage
returns are noise, so one line is written every ``every_s`` seconds instead, with the
count, the rate and the time left. ``say`` writes one line either way (above the bar).
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
