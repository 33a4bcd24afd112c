"""`certify --guarantee` says what set a fixture's rows, and the identity test's own ratio to the
lower bound: the run's rows are often set by another check (the chi-square's sizing), so their
ratio to the bound says nothing of how near the identity test is to what any test needs."""

from __future__ import annotations

import re

from specgauge.reports.cli import main
from specgauge.stattests.chain.certify import ALL_FIXTURES, CertConfig, identity_rows, planned_config
from specgauge.stattests.chain.shards import guarantee_lower_bound

GUARANTEE = 0.05


def test_the_limit_line_names_the_check_that_set_the_rows_and_the_identity_ratio(tmp_path, capsys):
    args = ["--fixture", "seed-six-token", "--check", "identity"]
    assert main(["certify", *args, "--guarantee", str(GUARANTEE), "--no-progress",
                 "--csv", str(tmp_path / "c.csv")]) == 0
    err = " ".join(capsys.readouterr().err.split())  # the lines fold at 100 characters
    line = re.search(r"limit: seed-six-token ([\d,]+) rows, set by (.+?), ([\d.]+)x the lower bound ([\d,]+); "
                     r"the identity test alone needs ([\d,]+) rows, ([\d.]+)x the bound", err)
    assert line, err
    run_rows, set_by, ratio, bound_rows, alone, alone_ratio = line.groups()
    run_rows, bound_rows, alone = (int(x.replace(",", "")) for x in (run_rows, bound_rows, alone))

    fixture = ALL_FIXTURES["seed-six-token"]
    config = planned_config(CertConfig(tv=GUARANTEE, guarantee=GUARANTEE), ["seed-six-token"], ["identity"])
    needs = config.row_needs(fixture)
    assert set_by == max(needs, key=needs.get) and run_rows == max(needs.values())
    bound = guarantee_lower_bound(fixture, GUARANTEE, config.per_assertion, config.false_pass)
    assert bound_rows == bound.rows and float(ratio) == float(f"{run_rows / bound.rows:.2g}")
    rows, _, _ = identity_rows(fixture, GUARANTEE, config.per_assertion, config.false_pass)
    assert alone == rows and float(alone_ratio) == float(f"{rows / bound.rows:.3g}")
    # on six tokens the rows are the chi-square's, well above what the identity test alone needs
    assert set_by.startswith("exactness") and 1.0 <= float(alone_ratio) < float(ratio)


def test_a_cap_that_costs_no_resolution_is_not_reported():
    """Rows capped at what the KS checks need, below the chi-square's: the run is capped yet
    resolves TV 0.05, so no "sample sizes capped" note (it would read as a loss)."""
    from specgauge.reports.cli.certify import capped_note

    fixture = ALL_FIXTURES["seed-six-token"]
    needs = CertConfig(tv=GUARANTEE).row_needs(fixture)
    config = CertConfig(tv=GUARANTEE, max_rows=needs[f"pit-id (KS, TV {GUARANTEE:g})"])
    assert config.rows(fixture) < max(needs.values())  # capped
    assert capped_note(config, ["seed-six-token"], None, False) == ""
    coarse = CertConfig(tv=GUARANTEE, max_rows=1_000)  # a cap that does cost resolution is reported
    assert capped_note(coarse, ["seed-six-token"], None, False).startswith("sample sizes capped on 1 fixture(s)")
