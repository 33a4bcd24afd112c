"""The pytest plugin: ``--decoder``, ``--tv``, ``--false-fail``, ``--seed``, ``--certificate``.

Registered under ``pytest11``; it imports nothing heavy until a certification test asks
for one of its fixtures, so it costs nothing in other projects' test runs.
"""

from __future__ import annotations

import os

import pytest

GROUP = "specgauge certification"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("specgauge", GROUP)
    group.addoption("--decoder", default=None,
                    help="decoder to certify: a built-in short name (numpy, torch, hf, vllm, ...) or "
                         "MODULE:NAME; default $SPECGAUGE_DECODER, else numpy")
    group.addoption("--tv", type=float, default=None,
                    help="TV discrepancy that must be detectable (sets the sample size; default 0.005, "
                         "or the coarser certification_tv a slow decoder declares)")
    group.addoption("--false-fail", type=float, default=1e-6,
                    help="false-fail rate of each assertion (default 1e-6)")
    group.addoption("--seed", type=int, default=0, help="root seed of every random stream (default 0)")
    group.addoption("--certificate", default=None, metavar="PATH",
                    help="write the certificate CSV (one row per assertion) to PATH")


def _session(config: pytest.Config):
    """The certification session, created on first use (loads the decoder then)."""
    session = config.stash.get(_SESSION_KEY, None)
    if session is None:
        from .certify import CertConfig, CertificationSession, default_tv
        from .contract import BUILTIN_DECODERS, decoder_name, load_decoder
        from .errors import DecoderLoadError, SpecgaugeError

        spec = config.getoption("decoder")
        name = decoder_name(spec)
        try:
            decoder = load_decoder(spec)
            tv = config.getoption("tv") or default_tv(decoder)
            cert = CertConfig(tv=tv, false_fail=config.getoption("false_fail"), seed=config.getoption("seed"))
        except DecoderLoadError as exc:
            missing = name in BUILTIN_DECODERS and "missing" in str(exc) or "cannot import" in str(exc)
            session = (pytest.skip if missing and name in BUILTIN_DECODERS else pytest.fail, str(exc))
        except SpecgaugeError as exc:
            session = (pytest.fail, str(exc))
        else:
            session = CertificationSession(decoder, name, cert)
        config.stash[_SESSION_KEY] = session
    if isinstance(session, tuple):
        outcome, message = session
        outcome(message) if outcome is pytest.skip else outcome(message, pytrace=False)
    return session


_SESSION_KEY = pytest.StashKey[object]()


@pytest.fixture(scope="session")
def certification(request: pytest.FixtureRequest):
    """The session that runs fixtures once and records every assertion in the certificate."""
    return _session(request.config)


@pytest.fixture(scope="session")
def decoder(certification):
    return certification.decoder


@pytest.fixture(scope="session")
def decoder_name(certification) -> str:
    return certification.name


@pytest.fixture(scope="session")
def cert_config(certification):
    return certification.config


@pytest.fixture(scope="session")
def check_result(certification):
    """``check_result(result, check=, fixture=, position=, family=)``: record a row, assert it passed.

    ``family`` is "exactness" (the default) or "optimality" (acceptance and the law).
    """
    from .certify import record

    def check(result, *, check: str, fixture: str, position: int | str | None = None,
              family: str = "exactness") -> None:
        record(certification, result, check, fixture, position, family)
        assert result.passed, result.describe() + _error(result)

    return check


def _error(result) -> str:
    return f": {result.details['error']}" if result.details and "error" in result.details else ""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise ``assertion`` with every (check, fixture, position), ids like numpy-seed-six-token-pos0."""
    if "assertion" not in metafunc.fixturenames:
        return
    from .certify import plan
    from .checks import position_label
    from .contract import decoder_name

    only = getattr(metafunc.function, "family", None)
    name = decoder_name(metafunc.config.getoption("decoder"))
    items, ids = [], []
    for check, fixture, position in plan():
        if only and check.family != only:
            continue
        items.append((check.name, fixture.name, position))
        label = position_label(check, fixture, position)
        ids.append("-".join(x for x in (name, check.name, fixture.name, label) if x))
    metafunc.parametrize("assertion", items, ids=ids)


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    session = config.stash.get(_SESSION_KEY, None)
    if session is None or isinstance(session, tuple) or not session.rows:
        return
    cert = session.certificate()
    terminalreporter.section("specgauge certificate")
    terminalreporter.write_line(f"samples sized to detect TV {session.config.tv:g}")
    terminalreporter.write_line(cert.summary())
    path = config.getoption("certificate")
    if path:
        cert.to_csv(os.fspath(path))
        terminalreporter.write_line(f"certificate written to {path}")
