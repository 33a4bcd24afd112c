"""An option's prefix is refused, never read as the option it begins: `plan --out DIR` once
parsed as `--output-len DIR`."""

from __future__ import annotations

import pytest

from specgauge.reports import cli


@pytest.mark.parametrize("argv", [["plan", "--out", "x"], ["simulate", "--out", "x"], ["certify", "--fix", "seed-six-token"],
                                  ["validate", "--ad", "x.csv"]])
def test_a_prefix_of_an_option_is_a_usage_error(argv, capsys):
    status = cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "unrecognized arguments" in err[0], err
