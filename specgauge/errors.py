"""The one exception family of the project: the CLI turns it into one line on stderr."""


class SpecgaugeError(Exception):
    """Base class for every error specgauge raises on purpose; ``exit_code`` is the CLI's exit status."""

    exit_code = 1


class UsageError(SpecgaugeError, ValueError):
    """An option value the command cannot take (out of range, wrong kind): exit status 2, as argparse's."""

    exit_code = 2


class DecoderLoadError(SpecgaugeError):
    """A decoder named by ``--decoder`` could not be loaded: a bad option value, exit status 2."""

    exit_code = 2


class InvalidDistributionError(SpecgaugeError, ValueError):
    """Probabilities handed to a statistic are negative, NaN or not normalised."""


class ConfigError(SpecgaugeError, ValueError):
    """A simulation configuration, profile or workload file is invalid; the message is one line."""


class InputFileError(ConfigError, UsageError):
    """A file or file argument the user gave is malformed (wrong type, bad cell, no rows): exit status 2."""

    exit_code = 2


def as_usage_error(exc: SpecgaugeError) -> UsageError:
    """``exc`` as a usage error (exit status 2): for a value the user gave on the command line."""
    return exc if isinstance(exc, UsageError) else UsageError(str(exc))
