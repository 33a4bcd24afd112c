"""Fixtures of the certification suite, visible to the tests in this folder alone.

The plugin (``plugin.py``) only registers the ``--specgauge-*`` options; everything the
suite's tests ask for (``specgauge_certification``, ``specgauge_decoder``,
``specgauge_cert_config``, ``specgauge_check_result``, the parametrised
``specgauge_assertion``) is defined here, so a foreign project's fixtures named
``decoder`` or ``assertion`` are never touched.
"""

from __future__ import annotations

import os

import pytest

from specgauge.stattests.plugin import decoder_spec

_SESSION_KEY = pytest.StashKey[object]()


def _session(config: pytest.Config):
    """The certification session, created on first use (loads the decoder then)."""
    session = config.stash.get(_SESSION_KEY, None)
    if session is None:
        from specgauge.errors import DecoderLoadError, SpecgaugeError
        from specgauge.stattests.chain.certify import CertificationSession, decoder_config, plan_size
        from specgauge.stattests.core.contract import BUILTIN_DECODERS, decoder_name, load_decoder

        spec = decoder_spec(config)
        name = decoder_name(spec)
        try:
            decoder = load_decoder(spec)
            slow = config.getoption("specgauge_slow")
            cert = decoder_config(decoder, config.getoption("specgauge_tv") or None,
                                  config.getoption("specgauge_guarantee", None),
                                  false_fail=config.getoption("specgauge_false_fail"),
                                  seed=config.getoption("specgauge_seed"), assertions=plan_size(slow),
                                  timeout=config.getoption("specgauge_timeout"))
        except DecoderLoadError as exc:
            missing = name in BUILTIN_DECODERS and ("missing" in str(exc) or "cannot import" in str(exc))
            session = (pytest.skip if missing else pytest.fail, str(exc))
        except SpecgaugeError as exc:
            session = (pytest.fail, str(exc))
        else:
            session = CertificationSession(decoder, name, cert)
        config.stash[_SESSION_KEY] = session
    if isinstance(session, tuple):
        outcome, message = session
        outcome(message) if outcome is pytest.skip else outcome(message, pytrace=False)
    return session


@pytest.fixture(scope="session")
def specgauge_certification(request: pytest.FixtureRequest):
    """The session that runs fixtures once and records every assertion in the certificate."""
    return _session(request.config)


@pytest.fixture(scope="session")
def specgauge_decoder(specgauge_certification):
    return specgauge_certification.decoder


@pytest.fixture(scope="session")
def specgauge_cert_config(specgauge_certification):
    return specgauge_certification.config


@pytest.fixture(scope="session")
def specgauge_check_result(specgauge_certification):
    """``check(result, check=, fixture=, position=, family=)``: record a row, assert it passed.

    ``family`` is "exactness" (the default) or "optimality" (acceptance and the law).
    """
    from specgauge.stattests.core.certificate import record

    def check(result, *, check: str, fixture: str, position: int | str | None = None,
              family: str = "exactness") -> None:
        record(specgauge_certification, result, check, fixture, position, family)
        error = f": {result.details['error']}" if result.details and "error" in result.details else ""
        assert result.passed, result.describe() + error

    return check


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise ``specgauge_assertion`` with every (check, fixture, position).

    Ids read like ``numpy-exactness-seed-six-token-pos0``, so ``-k`` can select them.
    """
    if "specgauge_assertion" not in metafunc.fixturenames:
        return
    from specgauge.stattests.chain.certify import plan
    from specgauge.stattests.chain.checks import position_label
    from specgauge.stattests.core.contract import decoder_name

    only = getattr(metafunc.function, "family", None)
    name = decoder_name(decoder_spec(metafunc.config))
    items, ids = [], []
    for check, fixture, position in plan(slow=metafunc.config.getoption("specgauge_slow")):
        if only and check.family != only:
            continue
        marks = [pytest.mark.slow] if fixture.slow else []
        items.append(pytest.param((check.name, fixture.name, position), marks=marks))
        label = position_label(check, fixture, position)
        ids.append("-".join(x for x in (name, check.name, fixture.name, label) if x))
    metafunc.parametrize("specgauge_assertion", items, ids=ids)


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    session = config.stash.get(_SESSION_KEY, None)
    if session is None or isinstance(session, tuple) or not session.rows:
        return
    from specgauge.stattests.chain.certify import sizing_note
    from specgauge.stattests.chain.diagnosis import summary as chain_summary
    from specgauge.stattests.core.certificate import fold

    cert = session.certificate()
    terminalreporter.section("specgauge certificate")
    path = config.getoption("specgauge_certificate")
    terminalreporter.write_line(fold(sizing_note(session.config)))
    terminalreporter.write_line(chain_summary(cert, os.fspath(path) if path else None))
    if path:
        cfg = session.config
        cert.to_csv(os.fspath(path), {"command": "pytest", "decoder": session.name, "tv": cfg.tv,
                                      "false_fail": cfg.false_fail, "seed": cfg.seed})
        terminalreporter.write_line(f"certificate written to {path}")
        terminalreporter.write_line(_figures(session, cert, path))


def _figures(session, cert, path) -> str:
    """One PNG per fixture beside the certificate; without matplotlib, a line saying so."""
    from specgauge.plotting import PlotError
    from specgauge.stattests.chain.figures import figures_note, plot_certificate

    try:
        return figures_note(plot_certificate(session.runs, cert, os.fspath(path)))
    except PlotError as exc:
        return f"no figures: {exc}"
