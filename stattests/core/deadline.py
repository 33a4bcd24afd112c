"""Decoder calls with a deadline: a decoder that never returns must not hang certification.

The call runs in a daemon thread; past the deadline the caller gets :class:`CallTimeout`
and moves on (the stuck thread is abandoned: Python cannot kill a thread, and a daemon
thread does not keep the process alive). No deadline means a plain call in this thread.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from specgauge.errors import SpecgaugeError


class CallTimeout(SpecgaugeError):
    """A decoder call outlived its deadline."""


def call_with_deadline(fn: Callable[..., Any], args: tuple, timeout: float | None, what: str) -> Any:
    """``fn(*args)``, or :class:`CallTimeout` naming ``what`` after ``timeout`` seconds."""
    if timeout is None:
        return fn(*args)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=target, name=f"specgauge {what}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise CallTimeout(f"{what} did not return within --timeout {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


class DeadlineDecoder:
    """A decoder whose every ``verify`` call runs under ``timeout`` seconds, named by its count."""

    def __init__(self, decoder, timeout: float | None, where: str) -> None:
        self.decoder, self.timeout, self.where, self.calls = decoder, timeout, where, 0

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        self.calls += 1
        return call_with_deadline(self.decoder.verify, (target_probs, draft_probs, draft_tokens, rng), self.timeout,
                                  f"verify call {self.calls} ({len(draft_tokens)} rows) on {self.where}")
