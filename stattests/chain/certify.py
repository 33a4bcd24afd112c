"""Certification: run every applicable check on every fixture and collect the certificate.

Used by ``pytest stattests`` (one test item per assertion) and ``specgauge certify``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from types import MappingProxyType
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from specgauge.errors import SpecgaugeError
from specgauge.fixtures.pairs import FIXTURES, PairFixture
from specgauge.fixtures.gemma3_laws import fixtures as gemma3_law_fixtures
from specgauge.fixtures.real_laws import fixtures as real_law_fixtures

from specgauge.stattests.chain.checks import CHECKS, Check, position_label
from specgauge.stattests.core.certificate import (  # noqa: F401  (re-exported: the suite's old names)
    COLUMNS, DEFAULT_FALSE_FAIL, DETECTABLE, FAMILIES, Certificate, Rates, assert_certified, certificate_row, failure,
    record, verdict)
from specgauge.stattests.core.contract import Decoder, decoder_name, load_decoder
from specgauge.stattests.chain.harness import FixtureRun, RunConfig, emission_probability, rows_for, run_fixture
from specgauge.stattests.identity.instance import min_num_samples_for_identity_test
from specgauge.stattests.chain.sequences import SEQUENCE_CASES, SequenceCase, SequenceRun, run_sequence_case, sequence_sample_size
from specgauge.stattests.core.statistics import (TestResult, itemwise_error_rate, min_num_samples_for_goodness_of_fit,
                         min_num_samples_for_ks_uniformity)

DEFAULT_TV = 0.005
#: Up to this vocabulary the rows are sized for the identity test's worst-case TV too.
IDENTITY_SIZED_VOCAB = 4096
#: Every fixture of the plan: distribution pairs and whole-sequence cases.
ALL_FIXTURES: dict[str, PairFixture | SequenceCase] = {**FIXTURES, **{f.name: f for f in real_law_fixtures()},
                                                        **{f.name: f for f in gemma3_law_fixtures()},  # slow tier
                                                        **SEQUENCE_CASES}


def default_tv(decoder: object) -> float:
    """The TV to size samples for when the user gave none: 0.005, or the coarser
    ``certification_tv`` a slow decoder declares (a per-row Python call cannot afford
    millions of rows); an explicit ``--tv`` always wins."""
    return max(DEFAULT_TV, float(getattr(decoder, "certification_tv", DEFAULT_TV)))


def default_fixture_tvs(decoder: object) -> dict[str, float]:
    """The finer TVs a slow decoder affords on some fixtures (``certification_tv_by_fixture``,
    fixture name -> TV: small vocabularies reach a fine TV in few rows), floored like
    :func:`default_tv`; fixtures not named get :func:`default_tv`."""
    declared = getattr(decoder, "certification_tv_by_fixture", None) or {}
    return {name: max(DEFAULT_TV, float(tv)) for name, tv in declared.items()}


def decoder_config(decoder: object, tv: float | None = None, guarantee: float | None = None,
                   **options) -> "CertConfig":
    """The certification config for ``decoder``: an explicit ``tv`` (``--tv``) everywhere, or
    else the decoder's declared default and per-fixture TVs. ``guarantee`` (``--guarantee``)
    sizes rows for that worst-case TV and, without ``tv``, the directional checks for it too
    (the user asked for a figure, so a slow decoder's declared TVs give way). ``options``: other fields."""
    if guarantee is not None:
        return CertConfig(tv=guarantee if tv is None else tv, guarantee=guarantee, **options)
    if tv is not None:
        return CertConfig(tv=tv, **options)
    return CertConfig(tv=default_tv(decoder), fixture_tv=default_fixture_tvs(decoder), **options)


def plan(fixtures: Iterable[str] | None = None, checks: Iterable[str] | None = None, slow: bool = False):
    """Every (check, fixture, position) assertion, in a stable order.

    The one list both ``pytest stattests`` and ``specgauge certify`` run, whole sequences
    included; ``slow`` adds the slow tier's fixtures (named ``fixtures`` always run).
    """
    fx = ([ALL_FIXTURES[n] for n in fixtures] if fixtures
          else [f for f in ALL_FIXTURES.values() if slow or not f.slow])
    ch = [CHECKS[n] for n in (checks or CHECKS)]
    for fixture in fx:
        for check in ch:
            if check.kind == fixture.kind and check.applies(fixture):
                for position in check.positions(fixture):
                    yield check, fixture, position


@lru_cache(maxsize=None)
def plan_size(slow: bool = False) -> int:
    """Assertions in the default plan: what the family-wise rate is split over."""
    return sum(1 for _ in plan(slow=slow))


@dataclass(frozen=True)
class CertConfig:
    """What a certificate must be able to detect, and what it may spend.

    ``tv`` sets the sample size (capped by ``max_rows`` and, outside the slow tier, by
    ``max_bytes`` of decoder input per fixture), ``fixture_tv`` overrides it per fixture
    name; the certificate reports what each assertion reached.
    ``false_fail`` is the family-wise rate over ``assertions`` assertions (0: the default
    plan's count), so each assertion runs at ``false_fail / assertions``. ``timeout``
    bounds each decoder call in seconds. Nothing here depends on the clock: one seed,
    one certificate.
    """

    tv: float = DEFAULT_TV
    false_fail: float = DEFAULT_FALSE_FAIL
    false_pass: float = 1e-3
    seed: int = 0
    max_rows: int = 2_000_000
    max_bytes: int = 2 * 2**30
    chunk_bytes: int = 64 * 2**20
    assertions: int = 0
    timeout: float | None = None
    fixture_tv: Mapping[str, float] = field(default_factory=dict)
    guarantee: float | None = None

    def __post_init__(self) -> None:
        guarantee = () if self.guarantee is None else (("--guarantee", self.guarantee),)
        for label, tv in (("--tv", self.tv), *guarantee, *((f"the TV of {n}", t) for n, t in self.fixture_tv.items())):
            if not 0 < tv < 1:
                raise SpecgaugeError(f"{label} must lie in (0, 1), got {tv!r}")
        for label, rate in (("--false-fail", self.false_fail), ("false_pass", self.false_pass)):
            if not 0 < rate < 1:
                raise SpecgaugeError(f"{label} must lie in (0, 1), got {rate!r}")
        if self.timeout is not None and not self.timeout > 0:
            raise SpecgaugeError(f"--timeout must be a positive number of seconds, got {self.timeout!r}")

    @property
    def per_assertion(self) -> float:
        """The false-fail rate of each assertion: the family-wise rate's Bonferroni share."""
        return itemwise_error_rate(self.false_fail, self.assertions or plan_size())

    @property
    def rates(self) -> Rates:
        return Rates(self.per_assertion, self.false_pass)

    def tv_for(self, fixture: str) -> float:
        """The TV samples are sized for on ``fixture``: its own, else ``tv``."""
        return float(self.fixture_tv.get(fixture, self.tv))

    def row_needs(self, fixture: PairFixture) -> dict[str, int]:
        """The rows each check's sizing asks for on ``fixture`` (within the row and byte caps), keyed
        by the check and what it is sized for; :meth:`rows` runs the largest, so the key of the
        largest names the check that set the run's rows."""
        tv = max(self.tv_for(fixture.name), fixture.tv_floor)
        rate = self.per_assertion
        # the slow tier streams in bounded memory (chunk_bytes a call): time-bound, not memory-bound
        max_bytes = 2**62 if fixture.slow else int(self.max_bytes * fixture.byte_share)
        ks = min_num_samples_for_ks_uniformity(tv, false_fail_rate=rate, false_pass_rate=self.false_pass)
        needs = {f"pit-id (KS, TV {tv:g})": rows_for(fixture, ks, self.max_rows, max_bytes)}
        if fixture.context_free:
            # wider vocabularies reach their byte budget first; small-batch fixtures pay per call
            # (thousands of 1-12-row calls) and keep the chi-square's size: their guarantee is 0.05-0.06
            fit = max(min_num_samples_for_goodness_of_fit(tv, p, false_fail_rate=rate, false_pass_rate=self.false_pass)
                      for p in fixture.target)
            needs[f"exactness (chi-square, TV {tv:g})"] = rows_for(fixture, fit, self.max_rows, max_bytes)
        if fixture.context_free and fixture.vocab_size <= IDENTITY_SIZED_VOCAB and not fixture.call_rows:
            # the worst-case guarantee at every emitted position, the rarest (the bonus) included
            worst = max(m / r for _, r, m in identity_draws(fixture, tv, rate, self.false_pass))
            needs[f"identity (TV {tv:g})"] = rows_for(fixture, math.ceil(worst), self.max_rows, max_bytes, reach=1.0)
        if self.guarantee is not None and fixture.context_free and not fixture.greedy:
            needs[f"identity (worst-case TV {self.guarantee:g})"] = guarantee_rows(
                fixture, self.guarantee, rate, self.false_pass)
        return needs

    def rows(self, fixture: PairFixture) -> int:
        return max(self.row_needs(fixture).values())

    def sequences(self, case: SequenceCase) -> int:
        return sequence_sample_size(case, max(self.tv_for(case.name), case.tv_floor), self.per_assertion)


#: A sized run's rarest position sees fewer emissions than its mean by this many standard
#: deviations at most, but with probability about 1e-3 (binomial, normal tail).
EMISSION_MARGIN_Z = 3.0


def identity_draws(fixture: PairFixture, tv: float, false_fail: float, false_pass: float
                   ) -> list[tuple[int, float, int]]:
    """(position, chance it is emitted, the identity test's draws there for worst-case ``tv``) at
    every emitted position of a context-free fixture."""
    return [(k, float(r), min_num_samples_for_identity_test(tv, p, false_fail_rate=false_fail,
                                                            false_pass_rate=false_pass))
            for k, (p, r) in enumerate(zip(fixture.target, emission_probability(fixture))) if float(r) > 0]


def identity_rows(fixture: PairFixture, tv: float, false_fail: float, false_pass: float) -> tuple[int, int, int]:
    """(rows, position, draws): the rows at which every emitted position's expected draws reach
    what the identity test needs there for worst-case ``tv`` (no margin, as the lower bound's
    rows are counted), the position that sets them and its draws."""
    return max((math.ceil(m / r), k, m) for k, r, m in identity_draws(fixture, tv, false_fail, false_pass))


def guarantee_rows(fixture: PairFixture, tv: float, false_fail: float, false_pass: float) -> int:
    """Rows for a worst-case ``tv`` at every emitted position of a context-free fixture: the
    identity test's draws at each position over the chance that the position is emitted, with
    EMISSION_MARGIN_Z standard deviations to spare, so the rarest one still gets its draws in
    the run actually made. Not capped by rows or bytes: a sized run streams (``chunk_bytes``
    a call), and :func:`specgauge.stattests.chain.shards.estimate` refuses what memory cannot hold."""
    rows = 1
    for _, r, m in identity_draws(fixture, tv, false_fail, false_pass):
        s = EMISSION_MARGIN_Z * math.sqrt(r * (1 - r))
        root = (s + math.sqrt(s * s + 4 * r * m)) / (2 * r)  # n r - z sqrt(n r (1 - r)) = m, in sqrt(n)
        rows = max(rows, math.ceil(root * root))
    if fixture.call_rows:  # whole calls: the row tests compare calls
        rows = -(-rows // fixture.call_rows) * fixture.call_rows
    return rows


class CertificationSession:
    """Runs each fixture once per decoder and each check once per fixture, on demand."""

    def __init__(self, decoder: Decoder, name: str, config: CertConfig,
                 runs: Mapping[str, FixtureRun | SequenceRun] | None = None) -> None:
        self.decoder, self.name, self.config = decoder, name, config
        self._runs: dict[str, FixtureRun | SequenceRun] = dict(runs or {})  # made elsewhere: a sharded run
        self._results: dict[tuple[str, str], dict[int | None, TestResult]] = {}
        self.rows: list[dict] = []

    @property
    def runs(self) -> Mapping[str, FixtureRun | SequenceRun]:
        """The fixtures run so far, by name, read-only: what the certificate's figures draw."""
        return MappingProxyType(self._runs)

    def run(self, fixture: PairFixture | SequenceCase) -> FixtureRun | SequenceRun:
        if fixture.name not in self._runs:
            c = self.config
            if fixture.kind == "sequence":
                self._runs[fixture.name] = run_sequence_case(self.decoder, fixture, c.sequences(fixture), c.seed,
                                                             c.timeout)
            else:
                cfg = RunConfig(c.rows(fixture), c.chunk_bytes, c.seed, c.timeout)
                self._runs[fixture.name] = run_fixture(self.decoder, fixture, cfg)
        return self._runs[fixture.name]

    def results(self, check: Check, fixture: PairFixture) -> dict[int | None, TestResult]:
        key = (check.name, fixture.name)
        if key not in self._results:
            run = self.run(fixture)
            if run.error:  # every check on this fixture reports the decoder's failure
                self._results[key] = {pos: failure(check.name, run, self.config.rates, run.error)
                                      for pos in check.positions(fixture)}
            else:
                self._results[key] = check.run(run, self.config.rates)
        return self._results[key]

    def assertion(self, check: Check, fixture: PairFixture, position: int | None) -> TestResult:
        """The result of one assertion, recorded in the certificate."""
        result = self.results(check, fixture)[position]
        self.rows.append(_row(self.name, check, fixture, position, result))
        return result

    def certificate(self) -> "Certificate":
        """The rows in plan order, however they were run (pytest runs families apart)."""
        order = {(c.name, f.name, position_label(c, f, pos)): i for i, (c, f, pos) in enumerate(plan(slow=True))}
        rows = sorted(self.rows, key=lambda r: order.get((r["check"], r["fixture"], r["position"]), len(order)))
        return Certificate.from_rows(rows)


def _row(name: str, check: Check, fixture, position: int | None, r: TestResult) -> dict:
    return certificate_row(name, check.name, check.family, fixture.name, position_label(check, fixture, position), r)


def sizing_note(config: CertConfig) -> str:
    """What the sample sizes were chosen for: the directional checks at the configured TV. The worst-case
    guarantee is coarser on some fixtures (small batches, capped sizes), so the header does not claim it."""
    finer = "".join(f", {name} {tv:g}" for name, tv in config.fixture_tv.items())
    return (f"samples sized for the directional checks to detect TV {config.tv:g}{finer}; the worst-case "
            "guarantee each fixture reaches is stated with the verdict")


def planned_config(config: CertConfig, fixtures: Iterable[str] | None = None, checks: Iterable[str] | None = None,
                   slow: bool = False) -> CertConfig:
    """``config`` with the family-wise rate split over the assertions actually run (unless it says)."""
    if config.assertions:
        return config
    return replace(config, assertions=plan_size(slow) if not (fixtures or checks)
                   else sum(1 for _ in plan(fixtures, checks, slow)))


def certify(decoder: Decoder | str | None = None, config: CertConfig | None = None,
            checks: Iterable[str] | None = None, fixtures: Iterable[str] | None = None,
            progress: bool = False, name: str | None = None, slow: bool = False) -> Certificate:
    """Certify ``decoder`` (an object with ``verify``, a short name or MODULE:NAME).

    ``slow`` adds the slow tier; ``progress`` shows a tqdm bar on stderr.
    """
    return certification(decoder, config, checks, fixtures, progress, name, slow).certificate()


def certification(decoder: Decoder | str | None = None, config: CertConfig | None = None,
                  checks: Iterable[str] | None = None, fixtures: Iterable[str] | None = None,
                  progress: bool = False, name: str | None = None, slow: bool = False,
                  runs: Mapping[str, FixtureRun | SequenceRun] | None = None) -> CertificationSession:
    """:func:`certify`, returning the session: its certificate and the runs behind it.
    ``runs``: fixtures already run (a sharded run's merges), used as they are."""
    config = config or CertConfig()
    if name is None:
        name = (decoder_name(decoder) if decoder is None or isinstance(decoder, str)
                else str(getattr(decoder, "name", type(decoder).__name__)))
    obj = load_decoder(decoder) if decoder is None or isinstance(decoder, str) else decoder
    unknown = set(checks or ()) - set(CHECKS) | set(fixtures or ()) - set(ALL_FIXTURES)
    if unknown:
        raise SpecgaugeError(f"unknown check or fixture {sorted(unknown)}; checks: {', '.join(CHECKS)}; "
                             f"fixtures: {', '.join(ALL_FIXTURES)}")
    items = list(plan(fixtures, checks, slow))
    config = planned_config(config, fixtures, checks, slow)  # the family-wise rate over the assertions run
    session = CertificationSession(obj, name, config, runs)
    from specgauge.progress import bar as progress_bar

    bar = progress_bar(items, desc=f"certifying {name}", unit="assertion", disable=not progress, leave=False)
    for check, fixture, position in bar:
        # a new fixture is sampled on its first assertion, which can take a while: name it at once
        bar.set_postfix_str(fixture.name, refresh=fixture.name != getattr(bar, "postfix", None))
        session.assertion(check, fixture, position)
    return session
