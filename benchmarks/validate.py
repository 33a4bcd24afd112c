"""The simulator against published measurements: a thin caller of ``specgauge validate``.

    python benchmarks/validate.py [--csv FILE] [--add RESULT.json:gpu=...,target=...] [--knee-study]

The published rows live in ``reports/planning/data/validation.csv`` (their sources in
``sources.csv``); the logic in ``specgauge.reports.planning.validation``. This file stays so
that older instructions keep working.
"""

from __future__ import annotations

import sys

from specgauge.reports.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["validate", *sys.argv[1:]]))
