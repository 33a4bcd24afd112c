"""The tree certification suite: ``pytest stattests/test_trees.py --specgauge-tree-decoder NAME``.

Each test item is one (decoder, check, fixture, position); ids read like
``test_tree[specinfer-exactness-narrow-pos1]``. Without the option the three NumPy
references are certified. What each check means is in
``specgauge.stattests.tree_checks.TREE_CHECKS``; sample sizes are set by
``--specgauge-tv`` (default 0.03 at the root position for trees) at the false-fail rate
``--specgauge-false-fail`` per assertion. The fixtures live here, not in the chain
suite's conftest.
"""

from __future__ import annotations

import pytest

from specgauge.errors import DecoderLoadError
from specgauge.fixtures.trees import TREE_FIXTURES
from specgauge.stattests.tree_checks import (DEFAULT_TREE_TV, TREE_CHECKS, TreeCertConfig,
                                             TreeCertificationSession, tree_plan)
from specgauge.stattests.tree_contract import DEFAULT_TREE_DECODERS, load_tree_decoder

_SESSIONS: dict[str, object] = {}


def _specs(config: pytest.Config) -> list[str]:
    given = config.getoption("specgauge_tree_decoder", None)
    return [s.strip() for s in given.split(",") if s.strip()] if given else list(DEFAULT_TREE_DECODERS)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "specgauge_tree_assertion" not in metafunc.fixturenames:
        return
    items, ids = [], []
    for spec in _specs(metafunc.config):
        for check, fixture, position in tree_plan():
            items.append((spec, check.name, fixture.name, position))
            ids.append("-".join(x for x in (spec, check.name, fixture.name,
                                            "" if position is None else f"pos{position}") if x))
    metafunc.parametrize("specgauge_tree_assertion", items, ids=ids)


def _session(spec: str, config: pytest.Config) -> TreeCertificationSession:
    if spec not in _SESSIONS:
        try:
            decoder = load_tree_decoder(spec)
        except DecoderLoadError as exc:
            _SESSIONS[spec] = exc
        else:
            tv = config.getoption("specgauge_tv", None) or max(DEFAULT_TREE_TV,
                                                              float(getattr(decoder, "certification_tv", 0.0)))
            cert = TreeCertConfig(tv=tv, false_fail=config.getoption("specgauge_false_fail", 1e-6),
                                  seed=config.getoption("specgauge_seed", 0))
            _SESSIONS[spec] = TreeCertificationSession(decoder, spec, cert)
    session = _SESSIONS[spec]
    if isinstance(session, DecoderLoadError):
        pytest.skip(str(session))
    return session  # type: ignore[return-value]


def test_tree(specgauge_tree_assertion, request):
    """Contract, exactness at every depth, PIT, bonus, independence, greedy, the sibling rule and the law."""
    spec, check_name, fixture_name, position = specgauge_tree_assertion
    session = _session(spec, request.config)
    check, fixture = TREE_CHECKS[check_name], TREE_FIXTURES[fixture_name]
    result = session.assertion(check, fixture, position)
    if result.n == 0 and result.passed:
        pytest.skip(f"{check_name} on {fixture_name}: no samples, the position it tests is never reached")
    message = f"{check.meaning}\n{result.describe()}"
    if result.details and "error" in result.details:
        message += f"\n{result.details['error']}"
    assert result.passed, message
