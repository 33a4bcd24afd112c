"""Progress in a log: ``plan``, ``certify`` and ``simulate`` write no carriage-return frames when
stderr is not a terminal, but a line every few seconds, as ``probe`` does (specgauge/progress.py)."""

from __future__ import annotations

import io

from specgauge.progress import LineBar, bar
from specgauge.reports.cli import main


def test_a_bar_in_a_log_is_a_line_every_few_seconds():
    clock = iter(range(0, 1000, 3))
    log = io.StringIO()
    rows = LineBar(range(12), desc="certifying numpy", unit="assertion", file=log, every_s=10,
                   clock=lambda: next(clock))
    rows.set_postfix_str("seed-six-token")
    assert list(rows) == list(range(12))
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and 3 <= len(lines) <= 5, lines
    assert lines[-1].startswith("certifying numpy [seed-six-token]: 12/12 assertions (100%)") and "ETA" in lines[0]


def test_the_choice_follows_the_stream():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert isinstance(bar(total=3, file=io.StringIO()), LineBar)
    assert not isinstance(bar(total=3, file=Terminal()), LineBar)
    assert not isinstance(bar(total=3, file=io.StringIO(), disable=True), LineBar)


def test_plan_and_certify_write_no_carriage_returns_into_a_log(tmp_path, capsys):
    assert main(["plan", "--gamma", "2", "--batch-size", "1,4", "--requests", "10", "--output-len", "16",
                 "--no-plot", "--csv", str(tmp_path / "plan.csv")]) == 0
    assert main(["certify", "--fixture", "seed-six-token", "--csv", str(tmp_path / "cert.csv")]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err, err[:300]
