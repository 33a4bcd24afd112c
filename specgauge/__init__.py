"""specgauge: certify speculative decoders, and plan speculative serving capacity.

The subpackages are ``specgauge.stattests`` (the correctness gate), ``specgauge.simulator``
(the capacity planner), ``specgauge.measurement`` (acceptance measured by teacher forcing),
``specgauge.reports`` (the command line, its figures and sweeps) and ``specgauge.fixtures``
(data). This module stays empty of imports so that loading any of
them, or the pytest plugin, costs nothing else.
"""

from importlib.metadata import PackageNotFoundError, version
from os.path import dirname, exists as _exists

try:
    __version__ = version("specgauge")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"

# In a source checkout the subpackages are the repository's top-level folders, which the
# wheel and the editable install map with package-dir. Searching there too keeps the
# checkout importable when it shadows an installed copy (`python -m pytest` run from the
# repository root puts the checkout's `specgauge/` first on sys.path).
_here = __path__[0]
_root = dirname(_here)
if not _exists(f"{_here}/stattests") and _exists(f"{_root}/stattests/plugin.py"):
    __path__.append(_root)
del _here, _root
