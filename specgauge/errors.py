"""The one exception family of the project: the CLI turns it into one line on stderr."""


class SpecgaugeError(Exception):
    """Base class for every error specgauge raises on purpose."""


class DecoderLoadError(SpecgaugeError):
    """A decoder named by ``--decoder`` could not be loaded."""


class InvalidDistributionError(SpecgaugeError, ValueError):
    """Probabilities handed to a statistic are negative, NaN or not normalised."""


class ConfigError(SpecgaugeError, ValueError):
    """A simulation configuration, profile or workload file is invalid; the message is one line."""
