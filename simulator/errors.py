"""The simulator's one error type: bad configurations are refused before anything runs."""

from __future__ import annotations

from stattests.errors import SpecgaugeError


class ConfigError(SpecgaugeError, ValueError):
    """A simulation configuration, profile or workload file is invalid; the message is one line."""
