"""Printing for the commands: a closed pipe (``specgauge plan | head -2``) ends the printing, not the work.

After the reader goes away, stdout is pointed at /dev/null, so the command still
writes its CSVs and figures and exits normally instead of dying with a BrokenPipe
traceback halfway through.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO


def silence(stream: TextIO) -> None:
    """Point ``stream`` at /dev/null: its reader has gone."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, stream.fileno())
    finally:
        os.close(devnull)


def say(*parts: object, file: TextIO | None = None) -> None:
    """``print`` that survives the reader closing the pipe."""
    stream = sys.stdout if file is None else file
    try:
        print(*parts, file=stream, flush=True)
    except BrokenPipeError:
        silence(stream)


def warn(command: str, message: str) -> None:
    """One warning line on stderr: ``specgauge COMMAND: warning: ...``."""
    say(f"specgauge {command}: warning: {message}", file=sys.stderr)
