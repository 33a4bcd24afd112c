"""What a long server run tells its user while it works: a bar on a terminal, lines in a log.

The one implementation is :mod:`specgauge.progress`, shared with ``plan`` and ``certify``;
this module keeps the server room's names.
"""

from specgauge.progress import MODES, Progress, _duration, auto_mode  # noqa: F401  (the server room's names)
