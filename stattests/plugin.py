"""The pytest plugin: specgauge's options, and nothing else, in every pytest run.

Registered under ``pytest11``. In the manner of hypothesis's plugin it imports nothing
heavy and registers only prefixed options (``--specgauge-decoder``, ``--specgauge-tv``,
``--specgauge-false-fail``, ``--specgauge-guarantee``, ``--specgauge-seed``, ``--specgauge-certificate``,
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


def _kind(name: str):
    """argparse type: ``specgauge.inputs.<name>``, imported only when the option is given
    (the plugin loads nothing of specgauge into a run that does not use it)."""
    def parse(text: str):
        from specgauge import inputs

        return getattr(inputs, name)(text)

    parse.__name__ = name
    return parse




def pytest_addoption(parser) -> None:
    group = parser.getgroup("specgauge", GROUP)
    group.addoption("--specgauge-decoder", default=None, metavar="NAME",
                    help="decoder to certify: a built-in short name (numpy, torch, hf, vllm, sglang, ...) or "
                         f"MODULE:NAME; default ${DECODER_ENV}, else numpy")
    group.addoption("--specgauge-tv", type=_kind("certified_tv"), default=None, metavar="TV",
                    help="total-variation discrepancy that must be detectable; sets the sample sizes "
                         "(default 0.005, or the coarser TVs a slow decoder declares, per fixture)")
    group.addoption("--specgauge-guarantee", type=_kind("certified_tv"), default=None, metavar="TV",
                    help="size each fixture's rows for this worst-case TV at its rarest emitted position (the "
                         "identity rows' guarantee), and the directional checks for it unless --specgauge-tv is given")
    group.addoption("--specgauge-max-cpu-hours", type=_kind("positive"), default=None, metavar="H",
                    help="with --specgauge-guarantee: refuse a run estimated above H CPU-hours (default 1)")
    group.addoption("--specgauge-false-fail", type=_kind("false_fail"), default=1e-4, metavar="RATE",
                    help="family-wise false-fail rate: the chance that an exact decoder fails any assertion of "
                         "the suite; each assertion gets its Bonferroni share (default 1e-4)")
    group.addoption("--specgauge-timeout", type=_kind("seconds"), default=None, metavar="SECONDS",
                    help="seconds each decoder call may take; a call past it fails the contract check "
                         "(default: no limit)")
    group.addoption("--specgauge-slow", action="store_true", default=False,
                    help="add the slow tier (production vocabularies streamed over many calls)")
    group.addoption("--specgauge-seed", type=_kind("seed"), default=0, metavar="N",
                    help="root seed of every random stream (default 0)")
    group.addoption("--specgauge-tree-decoder", default=None, metavar="NAME[,NAME]",
                    help="tree decoder(s) for the tree suite (stattests/test_trees.py): built-in short names "
                         "(specinfer, rrsw, topk, topk-coin, eagle, ...) or MODULE:NAME; default: the three references")
    group.addoption("--specgauge-certificate", default=None, metavar="PATH",
                    help="write the certificate CSV (one row per assertion) and its .meta.json to PATH, "
                         "and beside it one PNG per fixture (with matplotlib)")
    group.addoption("--specgauge-server-url", default=None, metavar="URL",
                    help=f"OpenAI-compatible server to certify (speculation on); default ${SERVER_ENV}")
    group.addoption("--specgauge-baseline-url", default=None, metavar="URL",
                    help=f"the same model served with speculation off, for the two-sample test; default ${BASELINE_ENV}")


def pytest_configure(config) -> None:
    """Check before collection, once, what would otherwise fail every test: that the
    certificate CSV (--specgauge-certificate) can be written, by one process (under
    pytest-xdist no process sees every row), and that the decoder named
    (--specgauge-decoder or $SPECGAUGE_DECODER) exists. A built-in whose optional package
    is missing is not refused here: its tests skip, naming the package."""
    path = config.getoption("specgauge_certificate", None)
    spec = decoder_spec(config)
    guarantee = config.getoption("specgauge_guarantee", None)
    if not (path or spec or guarantee):
        return
    import pytest

    from specgauge.errors import SpecgaugeError

    if path and (getattr(config.option, "numprocesses", None) or hasattr(config, "workerinput")):
        # xdist's workers each hold part of the rows and their summaries are not shown
        raise pytest.UsageError("--specgauge-certificate needs the suite in one process: "
                                "drop -n (pytest-xdist), e.g. pytest stattests --specgauge-certificate PATH")
    try:
        if path:
            from specgauge.csvio import resolve_csv_target

            resolve_csv_target(path, "certificate.csv", flag="--specgauge-certificate")
        if spec:
            check_decoder_spec(spec)
        if guarantee is not None and _under_xdist(config) and not hasattr(config, "workerinput"):
            sized_estimate(config, guarantee)  # the controller collects nothing: the whole plan
    except SpecgaugeError as exc:
        raise pytest.UsageError(" ".join(str(exc).split())) from None


def _under_xdist(config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) or hasattr(config, "workerinput")


def pytest_collection_finish(session) -> None:
    """In one process, the ``--specgauge-guarantee`` estimate once the items are known, so that
    ``-k``, ``-m`` and file arguments size only the fixtures of the assertions selected."""
    config = session.config
    guarantee = config.getoption("specgauge_guarantee", None)
    if guarantee is None or _under_xdist(config):
        return
    import pytest

    from specgauge.errors import SpecgaugeError

    items = [item.callspec.params["specgauge_assertion"] for item in session.items
             if "specgauge_assertion" in getattr(getattr(item, "callspec", None), "params", {})]
    if not items:
        return
    try:
        sized_estimate(config, guarantee, items)
    except SpecgaugeError as exc:
        raise pytest.UsageError(" ".join(str(exc).split())) from None


def sized_estimate(config, guarantee: float, selected=None) -> None:
    """Print the rows, bytes and time a ``--specgauge-guarantee`` run will take, before any
    test runs, and refuse (one line) what this machine cannot hold or the CPU budget allows.
    ``selected``: the (check, fixture, position) names of the assertions selected; None, the
    whole plan (under pytest-xdist, whose controller sees no items)."""
    import sys

    from specgauge.stattests.chain.certify import ALL_FIXTURES, CertConfig, plan_size
    from specgauge.stattests.chain.checks import CHECKS
    from specgauge.stattests.chain.shards import (DEFAULT_MAX_CPU_HOURS, refuse_over_budget, refuse_unholdable,
                                                  sized_plan)

    slow = bool(config.getoption("specgauge_slow", False))  # as the suite's conftest sizes it
    tv = config.getoption("specgauge_tv", None)
    cert = CertConfig(tv=tv or guarantee, guarantee=guarantee, false_fail=config.getoption("specgauge_false_fail"),
                      assertions=plan_size(slow))
    budget = config.getoption("specgauge_max_cpu_hours", None) or DEFAULT_MAX_CPU_HOURS
    items = None if selected is None else [(CHECKS[c], ALL_FIXTURES[f], pos) for c, f, pos in selected]

    def refuse(est) -> None:
        refuse_unholdable(est, None)
        refuse_over_budget(est, budget, option="--specgauge-max-cpu-hours")

    reference = (decoder_spec(config) or "numpy").strip() == "numpy"  # else the verify calls' speed is unknown
    _, pairs, _, est = sized_plan(cert, slow=slow, refuse=refuse, items=items, views=reference)
    asked = {f.name: guarantee for f in pairs if CHECKS["identity"].applies(f)}
    workers = getattr(config.option, "numprocesses", None)
    scope = ("the assertions selected" if selected is not None else
             "the whole plan (under -n the selection is not known here)")
    print(f"specgauge: sizing {scope}", file=sys.stderr)
    for line in est.lines(workers if isinstance(workers, int) and workers > 0 else 1, asked, reference=reference):
        print(f"specgauge: {line}", file=sys.stderr)


def check_decoder_spec(spec: str) -> None:
    """Refuse a decoder name that can never load: an unknown short name, or MODULE:NAME
    whose module or attribute is missing (DecoderLoadError, one line)."""
    from specgauge.stattests.core.contract import BUILTIN_DECODERS, load_decoder, resolve_spec

    spec = spec.strip()
    resolve_spec(spec)  # an unknown short name: the error lists the built-ins
    if spec not in BUILTIN_DECODERS:
        load_decoder(spec)


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


def slow_tier_requested(config) -> bool:
    """Whether the run asked for the slow tier: ``--specgauge-slow``, or a ``-m`` expression
    selecting ``slow``."""
    markexpr = str(config.getoption("markexpr", "") or "")
    return bool(config.getoption("specgauge_slow", False)) or ("slow" in markexpr and "not slow" not in markexpr)


def skip_unless_slow_tier(config, reason: str) -> None:
    """Skip a slow-tier test unless the run asked for that tier; the default ``pytest`` run
    stays inside its budget."""
    import pytest

    if not slow_tier_requested(config):
        pytest.skip(f"slow tier ({reason}): run with --specgauge-slow or -m slow")


def decoder_spec(config) -> str | None:
    """The decoder asked for: the option, else the environment variable, else None (numpy)."""
    return config.getoption("specgauge_decoder") or os.environ.get(DECODER_ENV) or None


def server_urls(config) -> tuple[str | None, str | None]:
    """(server under test, baseline) URLs: the options, else the environment variables."""
    return (config.getoption("specgauge_server_url") or os.environ.get(SERVER_ENV) or None,
            config.getoption("specgauge_baseline_url") or os.environ.get(BASELINE_ENV) or None)
