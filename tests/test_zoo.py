"""The suite checks itself: every buggy decoder of the zoo fails certification.

In the manner of scikit-learn's ``parametrize_with_checks``: each mutant declares
``expected_failed_checks`` (check -> why it must catch the bug), and those run as strict
expectations: a declared check that stops catching its mutant breaks the build. The
reference decoder passes the same certification. The checks that caught each mutant
are printed at the end of the module (``pytest tests/test_zoo.py``).

The certification here is sized for speed, not for small biases: ``TV`` 0.03 at the
default false-fail rate (1e-6 per assertion) on the fixtures that tell the mutants
apart: context-free (the seed's six tokens), position-dependent (an off-by-one between
draft position and target row), and heterogeneous rows (one row's q used for another).
"""

from __future__ import annotations

import re
from functools import lru_cache

import pytest

from specgauge.fixtures.pairs import NEAR_IDENTICAL_TV
from specgauge.stattests.chain.certify import CertConfig, Certificate, certify
from specgauge.stattests.chain.checks import CHECKS
from specgauge.stattests.chain.diagnosis import diagnose, summary
from specgauge.stattests.core.contract import load_decoder
from specgauge.stattests.core.reference import NumpyDecoder
from specgauge.stattests.plugin import slow_tier_requested
from specgauge.stattests.chain.zoo import EXACT_ALTERNATIVES, ZOO

TV = 0.03
SEED = 20261
FIXTURES = ("seed-six-token", "position-dependent", "heterogeneous", "batch8-g8")
#: Fixtures a mutant needs beyond FIXTURES (its bug lives on large vocabularies, say).
EXTRA = {"alternating-tail-bias": ("zipf-32k-tv0.2",), "large-vocab-bonus-from-q": ("zipf-32k-g4-tv0.2",),
         "stratified-rows": ("disjoint",), "band-tail-permutation": ("zipf-1k-tv0.2",),
         "small-residual-from-p": ("near-identical",)}
#: near-identical at its own floor, as the default tier sizes it: its residual mass is 1-2.5 %, so a
#: wrong correction moves TV 0.007-0.02 there, below what TV 0.03 resolves (about 1.6 CPU-s)
CONFIG = CertConfig(tv=TV, seed=SEED, fixture_tv={"near-identical": NEAR_IDENTICAL_TV})
ALL_EXTRA = tuple(sorted({f for extra in EXTRA.values() for f in extra}))

_CAUGHT: dict[str, str] = {}


def certificate(name: str, extras: bool = True) -> Certificate:
    """A mutant on FIXTURES and its own extras; the reference and an exact alternative on every
    extra too (``extras``; an alternative's extras, 10-20 CPU-s each, are the slow tier's)."""
    return _certificate(name, extras or name in ZOO)  # one cache entry however it is called


@lru_cache(maxsize=None)
def _certificate(name: str, extras: bool) -> Certificate:
    if name in ZOO:
        return certify(ZOO[name](), CONFIG, fixtures=FIXTURES + EXTRA.get(name, ()))
    decoder = NumpyDecoder() if name == "reference" else EXACT_ALTERNATIVES[name]()
    return certify(decoder, CONFIG, fixtures=FIXTURES + (ALL_EXTRA if extras else ()))


def _where(cert: Certificate, check: str) -> str:
    """``exactness×7``: how many assertions of ``check`` failed."""
    f = cert.frame
    rows = f[(f["check"] == check) & (f["verdict"] == "fail")]
    return f"{check}×{len(rows)}"


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    """After the module: which checks caught which mutant, in the terminal output."""
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or not _CAUGHT:
        return
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        reporter.write_line(f"zoo: checks that caught each mutant (TV {TV}, fixtures {', '.join(FIXTURES)})")
        for name, caught in _CAUGHT.items():
            reporter.write_line(f"  {name:28s} {caught}")


@pytest.mark.parametrize("name", list(ZOO))
def test_mutant_is_caught(name):
    cert = certificate(name)
    declared = ZOO[name].expected_failed_checks
    failed = cert.failed_checks
    caught = ", ".join(_where(cert, c) for c in CHECKS if c in failed)
    _CAUGHT[name] = caught
    print(f"{name}: caught by {caught}")
    assert not cert.passed, f"{name} passed certification: no check caught it\n{cert.summary()}"
    missed = {check: why for check, why in declared.items() if check not in failed}
    assert not missed, (f"{name}: declared checks no longer catch it: {missed}; it was caught by "
                        f"{caught or 'nothing'}\n{cert.summary()}")


@pytest.mark.parametrize("name, check", [(n, c) for n, cls in ZOO.items() for c in cls.expected_failed_checks],
                         ids=[f"{n}-{c}" for n, cls in ZOO.items() for c in cls.expected_failed_checks])
def test_declared_check_catches(name, check):
    """One item per (mutant, declared check), so ``-k`` can select and a regression names both."""
    cert = certificate(name)
    assert check in cert.failed_checks, (f"{check} no longer catches {name} "
                                         f"({ZOO[name].expected_failed_checks[check]})\n{cert.summary()}")


def test_reference_passes_the_same_certification():
    cert = certificate("reference")
    assert cert.passed, cert.summary()
    assert cert.verdicts == {"exact": True, "optimal_acceptance": True, "lossy": False}
    f = cert.frame
    assert set(f["fixture"]) == set(FIXTURES + ALL_EXTRA)
    tested = f[f["verdict"] == "pass"]
    assert (tested["min_detectable_tv"].astype(float) <= TV + 1e-12).any()


@pytest.mark.parametrize("name", list(EXACT_ALTERNATIVES))
def test_exact_alternative_passes(name, request):
    """Exact rules other than the reference's (recycled uniforms, Gumbel-max, an inverse CDF
    over a shuffled vocabulary with shuffled rows) pass the certification the mutants fail:
    on FIXTURES in the default tier, on the large-vocabulary extras too in the slow tier."""
    cert = certificate(name, extras=slow_tier_requested(request.config))
    assert cert.passed, cert.summary()
    assert cert.verdicts == {"exact": True, "optimal_acceptance": True, "lossy": False}


#: The bug class a FAIL's diagnosis should name first for each mutant: the zoo table of
#: docs/gate.md, its mistakes grouped by what the author must look at.
BUG_CLASS = {
    "resample-from-p": "correction", "reused-uniform": "correction", "drop-bonus": "no-bonus",
    "bonus-from-q": "bonus", "bonus-from-position-4": "bonus", "large-vocab-bonus-from-q": "bonus",
    "target-temperature-ignored": "target", "topk-renormalised-q": "acceptance", "accept-all": "acceptance",
    "off-by-one-target-row": "position-shift", "in-place-draft-probs": "contract", "wrong-row-q": "row-mixup",
    "small-batch-fast-path": "small-calls", "long-draft-bug": "long-drafts", "alternating-tail-bias": "tail",
    "band-tail-permutation": "tail", "shared-row-randomness": "rows", "shared-at-half-batch": "rows",
    "reseed-without-advancing": "rows", "stratified-rows": "rows", "correction-from-earlier-token": "positions",
    "herded-remainder": "calls", "herded-bonus": "calls", "small-residual-from-p": "small-residual",
    "bonus-shared-at-half-batch": "rows", "bonus-paired-at-random": "rows",
}


def test_every_mutant_has_a_bug_class():
    assert set(BUG_CLASS) == set(ZOO)


def test_the_diagnosis_names_the_bug_class_of_most_failing_mutants():
    """A FAIL names its likely cause: the class named first is the mutant's for at least 80 %
    of the mutants that fail (the certificates above, reused)."""
    failing = [n for n in ZOO if not certificate(n).passed]
    named = {n: [c.key for c in diagnose(certificate(n).frame)] for n in failing}
    wrong = {n: keys for n, keys in named.items() if keys[:1] != [BUG_CLASS[n]]}
    print(f"diagnosis right for {len(failing) - len(wrong)} of {len(failing)} failing mutants; wrong: {wrong}")
    assert len(failing) - len(wrong) >= 0.8 * len(failing), wrong
    text = summary(certificate("resample-from-p"))
    assert "likely cause (a guess" in text and "correction after a rejection" in text, text
    flat = " ".join(text.split())  # the summary folds at 100 characters
    assert "; measured TV " in flat and "from the expected law (0 when exact)" in flat, text  # labelled figures


@pytest.mark.parametrize("name", ["reference", *EXACT_ALTERNATIVES])
def test_the_diagnosis_names_nothing_for_a_passing_decoder(name, request):
    cert = certificate(name, extras=name == "reference" or slow_tier_requested(request.config))
    assert cert.passed and diagnose(cert.frame) == ()
    assert "likely cause" not in summary(cert)


@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_entry_is_documented(name):
    cls = ZOO[name]
    assert cls.name == name
    assert cls.expected_failed_checks, f"{name} declares no check that must catch it"
    unknown = set(cls.expected_failed_checks) - set(CHECKS)
    assert not unknown, f"{name} declares unknown checks {unknown}; known: {', '.join(CHECKS)}"
    assert all(why.strip() for why in cls.expected_failed_checks.values())
    doc = cls.__doc__ or ""
    assert re.search(r"#\d+|issue \d+", doc), f"{name}'s docstring names no issue or PR"


@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_entry_loads_by_spec(name):
    by_key = load_decoder(f"specgauge.stattests.chain.zoo:{name}")
    by_class = load_decoder(f"specgauge.stattests.chain.zoo:{ZOO[name].__name__}")
    assert type(by_key) is type(by_class) is ZOO[name]
