"""The pytest plugin: specgauge's options, and nothing else, in every pytest run.

Registered under ``pytest11``. In the manner of hypothesis's plugin it imports nothing
heavy and registers only prefixed options (``--specgauge-decoder``, ``--specgauge-tv``,
``--specgauge-false-fail``, ``--specgauge-seed``, ``--specgauge-certificate``,
``--specgauge-timeout``, ``--specgauge-slow``, and the server URLs
``--specgauge-server-url`` / ``--specgauge-baseline-url``). The
fixtures and the parametrisation of the certification suite live in the suite's own
``conftest.py`` beside its tests, so no other project's tests ever see them.
"""

from __future__ import annotations

import os

GROUP = "specgauge certification"
try:  # pytest is there whenever the plugin is loaded; the guard keeps plain imports working
    import pytest as _pytest

    TREE_SESSIONS = _pytest.StashKey[dict]()
except ImportError:  # pragma: no cover
    TREE_SESSIONS = None
DECODER_ENV = "SPECGAUGE_DECODER"
SERVER_ENV = "SPECGAUGE_SERVER_URL"
BASELINE_ENV = "SPECGAUGE_BASELINE_URL"


def tv_type(text: str) -> float:
    """argparse type for --specgauge-tv: a number in (0, 1), refused once at start-up."""
    import argparse

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from None
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must lie in (0, 1) (a total-variation distance), got {text!r}")
    return value


def pytest_addoption(parser) -> None:
    group = parser.getgroup("specgauge", GROUP)
    group.addoption("--specgauge-decoder", default=None, metavar="NAME",
                    help="decoder to certify: a built-in short name (numpy, torch, hf, vllm, sglang, ...) or "
                         f"MODULE:NAME; default ${DECODER_ENV}, else numpy")
    group.addoption("--specgauge-tv", type=tv_type, default=None, metavar="TV",
                    help="total-variation discrepancy that must be detectable; sets the sample sizes "
                         "(default 0.005, or the coarser TVs a slow decoder declares, per fixture)")
    group.addoption("--specgauge-false-fail", type=float, default=1e-4, metavar="RATE",
                    help="family-wise false-fail rate: the chance that an exact decoder fails any assertion of "
                         "the suite; each assertion gets its Bonferroni share (default 1e-4)")
    group.addoption("--specgauge-timeout", type=float, default=None, metavar="SECONDS",
                    help="seconds each decoder call may take; a call past it fails the contract check "
                         "(default: no limit)")
    group.addoption("--specgauge-slow", action="store_true", default=False,
                    help="add the slow tier (production vocabularies streamed over many calls)")
    group.addoption("--specgauge-seed", type=int, default=0, metavar="N",
                    help="root seed of every random stream (default 0)")
    group.addoption("--specgauge-tree-decoder", default=None, metavar="NAME[,NAME]",
                    help="tree decoder(s) for the tree suite (stattests/test_trees.py): built-in short names "
                         "(specinfer, rrsw, topk, topk-coin, eagle, ...) or MODULE:NAME; default: the three references")
    group.addoption("--specgauge-certificate", default=None, metavar="PATH",
                    help="write the certificate CSV (one row per assertion) and its .meta.json to PATH")
    group.addoption("--specgauge-server-url", default=None, metavar="URL",
                    help=f"OpenAI-compatible server to certify (speculation on); default ${SERVER_ENV}")
    group.addoption("--specgauge-baseline-url", default=None, metavar="URL",
                    help=f"the same model served with speculation off, for the two-sample test; default ${BASELINE_ENV}")


def pytest_configure(config) -> None:
    """With --specgauge-certificate, check before any test runs that the CSV can be written."""
    path = config.getoption("specgauge_certificate", None)
    if path:
        import pytest

        from specgauge.errors import SpecgaugeError
        from specgauge.csvio import resolve_csv_target

        try:
            resolve_csv_target(path, "certificate.csv", flag="--specgauge-certificate")
        except SpecgaugeError as exc:
            raise pytest.UsageError(str(exc)) from None


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """The tree certificates of ``stattests/test_trees.py``, when it ran (it keeps its
    sessions in ``config.stash[TREE_SESSIONS]``); with --specgauge-certificate PATH each is
    also written beside PATH as PATH-stem.tree-NAME.csv."""
    sessions = config.stash.get(TREE_SESSIONS, None)
    if not sessions:
        return
    path = config.getoption("specgauge_certificate")
    for name, session in sessions.items():
        if not getattr(session, "rows", None):
            continue
        cert = session.certificate()
        terminalreporter.section(f"specgauge tree certificate: {name}")
        terminalreporter.write_line(f"samples sized to detect TV {session.config.tv:g} at the root")
        terminalreporter.write_line(cert.summary())
        if path:
            stem, _, _ = os.fspath(path).rpartition(".")
            out = f"{stem or path}.tree-{name.replace(':', '_')}.csv"
            cert.to_csv(out)
            terminalreporter.write_line(f"tree certificate written to {out}")


def decoder_spec(config) -> str | None:
    """The decoder asked for: the option, else the environment variable, else None (numpy)."""
    return config.getoption("specgauge_decoder") or os.environ.get(DECODER_ENV) or None


def server_urls(config) -> tuple[str | None, str | None]:
    """(server under test, baseline) URLs: the options, else the environment variables."""
    return (config.getoption("specgauge_server_url") or os.environ.get(SERVER_ENV) or None,
            config.getoption("specgauge_baseline_url") or os.environ.get(BASELINE_ENV) or None)
