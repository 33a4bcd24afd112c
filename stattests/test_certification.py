"""The certification suite: ``pytest stattests --specgauge-decoder NAME`` runs every assertion.

Each test item is one (check, fixture, position); its id reads like
``test_exactness[numpy-exactness-seed-six-token-pos0]``. What each check means is in
``specgauge.stattests.chain.checks.CHECKS``. The items are the certification plan
(``specgauge.stattests.chain.certify.plan``), whole-sequence cases included, so ``specgauge
certify`` writes the same certificate.
"""

from specgauge.stattests.chain.certify import ALL_FIXTURES, assert_certified
from specgauge.stattests.chain.checks import CHECKS


def _assert(specgauge_certification, specgauge_assertion) -> None:
    check_name, fixture_name, position = specgauge_assertion
    check, fixture = CHECKS[check_name], ALL_FIXTURES[fixture_name]
    assert_certified(check, fixture_name, specgauge_certification.assertion(check, fixture, position))


def test_exactness(specgauge_certification, specgauge_assertion):
    """Contract, exactness, PIT, independence, greedy and whole-sequence checks."""
    _assert(specgauge_certification, specgauge_assertion)


test_exactness.family = "exactness"


def test_optimality(specgauge_certification, specgauge_assertion):
    """Acceptance = 1 − TV(p, q) and the tokens-per-pass law (Leviathan's rule only)."""
    _assert(specgauge_certification, specgauge_assertion)


test_optimality.family = "optimality"
