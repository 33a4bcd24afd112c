"""specgauge: certify speculative decoders, and plan speculative serving capacity.

The subpackages are ``specgauge.stattests`` (the correctness gate), ``specgauge.simulator``
(the capacity planner), ``specgauge.reports`` (CSV, figures and the command line) and
``specgauge.fixtures`` (data). This module stays empty of imports so that loading any of
them, or the pytest plugin, costs nothing else.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("specgauge")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
