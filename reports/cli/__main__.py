"""``python -m specgauge.reports.cli``: the ``specgauge`` command."""

from specgauge.reports.cli import main

raise SystemExit(main())
