"""The tree certification suite: ``pytest stattests/test_trees.py --specgauge-tree-decoder NAME``.

Each test item is one (decoder, check, fixture, position); ids read like
``test_tree[specinfer-exactness-narrow-pos1]``. Without the option the three NumPy
references are certified. What each check means is in
``specgauge.stattests.tree.checks.TREE_CHECKS``; sample sizes are set by
``--specgauge-tv`` (default 0.03 at the root position for trees); ``--specgauge-false-fail``
is family-wise over one decoder's tree assertions (each gets its Bonferroni share). The
fixtures live here, not in the chain suite's conftest.
"""

from __future__ import annotations

import pytest

from specgauge.errors import DecoderLoadError
from specgauge.fixtures.trees import TREE_FIXTURES
from specgauge.stattests.chain.certify import DEFAULT_FALSE_FAIL, assert_certified
from specgauge.stattests.tree.checks import (DEFAULT_TREE_TV, TREE_CHECKS, TreeCertConfig,
                                             TreeCertificationSession, tree_plan, tree_plan_size)
from specgauge.stattests.core.tree_contract import DEFAULT_TREE_DECODERS, load_tree_decoder
from specgauge.stattests.plugin import TREE_SESSIONS, decoder_spec
from specgauge.stattests.tree.generate import GENERATION_CASES


def _specs(config: pytest.Config) -> list[str]:
    given = config.getoption("specgauge_tree_decoder", None)
    return [s.strip() for s in given.split(",") if s.strip()] if given else list(DEFAULT_TREE_DECODERS)


def _about_a_chain_decoder(config: pytest.Config) -> str | None:
    """A run naming a chain decoder (--specgauge-decoder or $SPECGAUGE_DECODER) and no tree
    decoder is about that decoder: the three tree references are not certified in it (no tree
    certificate printed or written). The reason the tree items skip with, else None."""
    chain = decoder_spec(config)
    if not chain or config.getoption("specgauge_tree_decoder", None):
        return None
    return (f"this run certifies the chain decoder {chain}; tree decoders are certified when named "
            "(--specgauge-tree-decoder NAME[,NAME])")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    skip = _about_a_chain_decoder(metafunc.config)
    for name in ("specgauge_tree_generation", "specgauge_tree_assertion"):
        if skip and name in metafunc.fixturenames:
            metafunc.parametrize(name, [pytest.param(None, marks=pytest.mark.skip(reason=skip))], ids=["chain-run"])
            return
    if "specgauge_tree_generation" in metafunc.fixturenames:
        items = [(spec, case) for spec in _specs(metafunc.config) for case in GENERATION_CASES]
        metafunc.parametrize("specgauge_tree_generation", items, ids=[f"{s}-{c}" for s, c in items])
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
    """The session certifying ``spec``, created on first use and kept in the config's stash
    (the plugin prints each certificate at the end of the run)."""
    if TREE_SESSIONS not in config.stash:
        config.stash[TREE_SESSIONS] = {}
    sessions = config.stash[TREE_SESSIONS]
    if spec not in sessions:
        try:
            decoder = load_tree_decoder(spec)
        except DecoderLoadError as exc:
            sessions[spec] = exc
        else:
            tv = config.getoption("specgauge_tv", None) or max(DEFAULT_TREE_TV,
                                                              float(getattr(decoder, "certification_tv", 0.0)))
            cert = TreeCertConfig(tv=tv, false_fail=config.getoption("specgauge_false_fail", DEFAULT_FALSE_FAIL),
                                  seed=config.getoption("specgauge_seed", 0),
                                  assertions=tree_plan_size() + len(GENERATION_CASES))
            sessions[spec] = TreeCertificationSession(decoder, spec, cert)
    session = sessions[spec]
    if isinstance(session, DecoderLoadError):
        pytest.skip(str(session))
    return session  # type: ignore[return-value]


def test_tree(specgauge_tree_assertion, request):
    """Contract, exactness at every depth, PIT, bonus, independence, greedy, the sibling rule and the law."""
    spec, check_name, fixture_name, position = specgauge_tree_assertion
    session = _session(spec, request.config)
    check, fixture = TREE_CHECKS[check_name], TREE_FIXTURES[fixture_name]
    if getattr(session.decoder, "greedy_only", False) and not fixture.greedy:
        pytest.skip(f"{spec} verifies greedily: certified on greedy trees only")
    assert_certified(check, fixture_name, session.assertion(check, fixture, position))


def test_tree_generation_joint_law(specgauge_tree_generation, request):
    """Toy LMs drafting trees by the decoder's scheme: the first L tokens follow the target exactly."""
    spec, case = specgauge_tree_generation
    session = _session(spec, request.config)
    if getattr(session.decoder, "greedy_only", False):
        pytest.skip(f"{spec} verifies greedily: no sampled generation to certify")
    outcomes = session.generation(case)  # end to end joins the tree certificate: its verdict is the run's
    failed = [o.describe() for o in outcomes if not o.passed]
    assert not failed, f"joint law of the first {GENERATION_CASES[case][1]} tokens\n" + "\n".join(failed)
