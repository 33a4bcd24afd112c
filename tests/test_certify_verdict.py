"""The verdict says what was found, in words a reader takes at their value: a pass is "no deviation
of TV ≥ X from p found on these fixtures (false-fail rate Y)", never "exact: yes", and a run whose
fixtures all have one law at every position says what it cannot see. Certificates are built from
rows here, so no decoder runs."""

from __future__ import annotations

import pandas as pd

from specgauge.stattests.chain.diagnosis import blind_spots
from specgauge.stattests.chain.diagnosis import summary as chain_summary
from specgauge.stattests.core.certificate import Certificate, certificate_row
from specgauge.stattests.core.statistics import TestResult

RATE = 1e-4 / 4


def _rows(fixture: str, guarantee: float, failed: bool = False) -> list[dict]:
    """An identity row (the guarantee), an exactness row and an acceptance row of one fixture."""
    pvalue = 0.0 if failed else 0.5
    return [certificate_row("d", "identity", "exactness", fixture, "pos0",
                            TestResult("identity", 1.0, pvalue, 1000, RATE, guarantee)),
            certificate_row("d", "exactness", "exactness", fixture, "pos0",
                            TestResult("goodness_of_fit", 1.0, 0.5, 1000, RATE, guarantee / 2)),
            certificate_row("d", "acceptance", "optimality", fixture, "pos0",
                            TestResult("acceptance_rate", 1.0, 0.5, 1000, RATE, 0.01))]


def _flat(text: str) -> str:
    return " ".join(text.split())  # the summary folds at 100 characters


def test_a_pass_states_the_deviation_it_would_have_found_and_never_exact_yes():
    one = _flat(Certificate.from_rows(_rows("near-identical", 0.0083)).summary())
    assert ("exactness: no deviation of TV ≥ 0.0083 from p found on these fixtures (false-fail rate 7.5e-05, "
            "power 0.999)") in one, one
    assert "optimal acceptance (1 - TV, the law): no departure found" in one
    two = _flat(Certificate.from_rows(_rows("near-identical", 0.0083) + _rows("zipf-1k-tv0.2", 0.074)).summary())
    assert ("no deviation from p of at least each fixture's guaranteed TV found on these fixtures, "
            "0.0083 (near-identical) to 0.074 (zipf-1k-tv0.2)") in two, two
    unsized = _flat(Certificate.from_rows(_rows("seed-six-token", 0.004) + _rows("zipf-152k-tv0.2", 1.7)).summary())
    assert "on 1 of them (zipf-152k-tv0.2) no worst-case figure, only directional ones" in unsized, unsized
    for text in (one, two, unsized):
        assert "exact: yes" not in text and "exact: " not in text


def test_a_failure_is_a_finding_at_the_stated_rate():
    text = _flat(Certificate.from_rows(_rows("near-identical", 0.0083, failed=True)).summary())
    assert "exact: NO, a deviation from p found (false-fail rate 7.5e-05)" in text, text


def test_fixtures_with_one_law_at_every_position_say_what_they_cannot_see():
    seed = pd.DataFrame(_rows("seed-six-token", 0.004))
    note = _flat(" ".join(blind_spots(seed)))
    assert note.startswith("cannot see: seed-six-token has the same p at every position"), note
    assert "cannot see:" in _flat(chain_summary(Certificate(seed)))
    # one fixture whose law changes with the position sees what the others cannot
    assert blind_spots(pd.DataFrame(_rows("near-identical", 0.0083))) == []
    assert blind_spots(pd.DataFrame(_rows("seed-six-token", 0.004) + _rows("position-dependent", 0.0066))) == []
