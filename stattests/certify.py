"""Certification: run every applicable check on every fixture and collect the certificate.

Used by ``pytest stattests`` (one test item per assertion) and ``specgauge certify``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from specgauge.errors import SpecgaugeError
from specgauge.fixtures.pairs import FIXTURES, PairFixture

from .checks import CHECKS, Check, Rates, failure, position_label
from .contract import Decoder, decoder_name, load_decoder
from .harness import FixtureRun, RunConfig, rows_for, run_fixture
from .sequences import SEQUENCE_CASES, SequenceCase, SequenceRun, run_sequence_case, sequence_sample_size
from .statistics import (TestResult, itemwise_error_rate, min_num_samples_for_goodness_of_fit,
                         min_num_samples_for_ks_uniformity)

FAMILIES = ("exactness", "optimality")
COLUMNS = ["decoder", "check", "family", "fixture", "position", "n", "statistic", "pvalue",
           "false_fail_rate", "min_detectable_tv", "detectable", "observed", "expected", "verdict", "message"]
#: What each test's ``min_detectable_tv`` bounds, by test name (the certificate's ``detectable`` column).
DETECTABLE = {
    "goodness_of_fit": "TV between the pooled bins' distributions",
    "pit_ks": "largest CDF gap along the vocabulary order (mass moved across one prefix)",
    "independence": "TV of the pooled joint from the product of its margins",
    "tail_collisions": "not a TV bound: a relative change of the rare tokens' collision rate (see message)",
    "acceptance_rate": "shift of the acceptance rate",
    "tokens_per_pass": "TV of the tokens-per-pass law",
    "tokens_per_pass_mean": "shift of mean tokens per pass, in tokens",
}

DEFAULT_TV = 0.005
#: Family-wise false-fail rate of a whole default certification: the chance that an exact
#: decoder fails any assertion. Each assertion gets its Bonferroni share.
DEFAULT_FALSE_FAIL = 1e-4
#: Every fixture of the plan: distribution pairs and whole-sequence cases.
ALL_FIXTURES: dict[str, PairFixture | SequenceCase] = {**FIXTURES, **SEQUENCE_CASES}


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


def decoder_config(decoder: object, tv: float | None = None, **options) -> "CertConfig":
    """The certification config for ``decoder``: an explicit ``tv`` (``--tv``) everywhere, or
    else the decoder's declared default and per-fixture TVs. ``options``: other fields."""
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

    def __post_init__(self) -> None:
        for label, tv in (("--tv", self.tv), *((f"the TV of {n}", t) for n, t in self.fixture_tv.items())):
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

    def rows(self, fixture: PairFixture) -> int:
        tv = max(self.tv_for(fixture.name), fixture.tv_floor)
        rate = self.per_assertion
        needed = min_num_samples_for_ks_uniformity(tv, false_fail_rate=rate, false_pass_rate=self.false_pass)
        if fixture.context_free:
            needed = max(needed, *(min_num_samples_for_goodness_of_fit(
                tv, p, false_fail_rate=rate, false_pass_rate=self.false_pass) for p in fixture.target))
        # the slow tier streams in bounded memory (chunk_bytes a call): time-bound, not memory-bound
        max_bytes = 2**62 if fixture.slow else self.max_bytes
        return rows_for(fixture, needed, self.max_rows, max_bytes)

    def sequences(self, case: SequenceCase) -> int:
        return sequence_sample_size(case, max(self.tv_for(case.name), case.tv_floor), self.per_assertion)


class CertificationSession:
    """Runs each fixture once per decoder and each check once per fixture, on demand."""

    def __init__(self, decoder: Decoder, name: str, config: CertConfig) -> None:
        self.decoder, self.name, self.config = decoder, name, config
        self._runs: dict[str, FixtureRun | SequenceRun] = {}
        self._results: dict[tuple[str, str], dict[int | None, TestResult]] = {}
        self.rows: list[dict] = []

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
        return Certificate(pd.DataFrame(rows, columns=COLUMNS))


_OBSERVED_EXPECTED = (("observed_rate", "expected_rate"), ("observed_mean", "expected_mean"))


def _row(name: str, check: Check, fixture, position: int | None, r: TestResult) -> dict:
    details = dict(r.details or {})
    message = str(details.get("error", ""))
    observed = expected = float("nan")
    for obs_key, exp_key in _OBSERVED_EXPECTED:
        if obs_key in details:
            observed, expected = float(details[obs_key]), float(details[exp_key])
    if "measured_tv" in details:  # goodness of fit: the measured TV against the expected 0
        observed, expected = float(details["measured_tv"]), 0.0
    if "observed_collisions" in details:
        observed, expected = float(details["observed_collisions"]), float(details["expected_collisions"])
        message = message or f"detects a relative change of {details['detectable_relative_shift']:.2g} in sum r^2"
    if not message and not r.passed and np.isfinite(observed):
        message = f"observed {observed:.4g}, expected {expected:.4g}"
    return {"decoder": name, "check": check.name, "family": check.family,
            "fixture": fixture.name if fixture else "",
            "position": position_label(check, fixture, position) if fixture else "", "n": r.n,
            "statistic": r.statistic, "pvalue": r.pvalue, "false_fail_rate": r.false_fail_rate,
            "min_detectable_tv": r.min_detectable_tv, "detectable": DETECTABLE.get(r.test, ""),
            "observed": observed, "expected": expected, "verdict": verdict(r), "message": message}


def verdict(result: TestResult) -> str:
    """"pass", "fail", or "untested" when the position was never reached (n = 0)."""
    if result.n == 0 and result.passed:
        return "untested"
    return "pass" if result.passed else "fail"


@dataclass(frozen=True)
class Certificate:
    """One row per assertion; verdicts split into exactness and acceptance optimality."""

    frame: pd.DataFrame = field(repr=False)

    @property
    def passed(self) -> bool:
        return bool((self.frame["verdict"] != "fail").all())

    @property
    def failed_checks(self) -> set[str]:
        return set(self.frame.loc[self.frame["verdict"] == "fail", "check"])

    def _family_passed(self, family: str) -> bool:
        rows = self.frame[self.frame["family"] == family]
        return bool((rows["verdict"] != "fail").all())

    @property
    def verdicts(self) -> dict[str, bool]:
        """``exact``: every exactness check passed; ``optimal_acceptance``: acceptance is
        1 − TV and tokens per pass follow the law; ``lossy``: not exact."""
        exact = self._family_passed("exactness")
        return {"exact": exact, "optimal_acceptance": self._family_passed("optimality"), "lossy": not exact}

    def acceptance_direction(self) -> str:
        """"equal", "above" or "below" the per-token law, from the pooled acceptance rows."""
        rows = self.frame[self.frame["check"] == "acceptance-rate"]
        failed = rows[rows["verdict"] == "fail"]
        if failed.empty:
            return "equal"
        above = failed["observed"].astype(float) > failed["expected"].astype(float)
        return "above" if above.mean() >= 0.5 else "below"

    def _why_not_optimal(self) -> str:
        direction = self.acceptance_direction()
        if direction == "equal":
            return "no (tokens per pass off the law)"
        better = direction == "above" and self._family_passed("exactness")
        return f"no, acceptance {direction} 1 - TV" + (" (exact, and better than the per-token rule)" if better else "")

    def summary(self) -> str:
        f = self.frame
        v = self.verdicts
        lines = [f"decoder {', '.join(sorted(set(f['decoder'])))}: {len(f)} assertions, "
                 f"{int((f['verdict'] == 'fail').sum())} failed",
                 f"  exact: {'yes' if v['exact'] else 'NO'}; optimal acceptance (1 - TV, the law): "
                 f"{'yes' if v['optimal_acceptance'] else self._why_not_optimal()}"]
        dist = f[(f["check"] == "exactness") & (f["verdict"] != "untested")]
        reached = dist.groupby("fixture")["min_detectable_tv"].median()
        finite = reached[np.isfinite(reached.astype(float))]
        rate = f["false_fail_rate"].astype(float)
        if not finite.empty:
            lines.append(f"  detectable discrepancy of the exactness checks (median over positions; the column "
                         f"'detectable' says what each bounds): {finite.min():.3g} ({finite.idxmin()}) to "
                         f"{finite.max():.3g} ({finite.idxmax()}), power 0.999")
        if rate.notna().any():
            lines.append(f"  false-fail rate {rate.max():.2g} per assertion; family-wise over the "
                         f"{len(f)} assertions at most {min(1.0, rate.sum()):.2g}")
        for _, row in f[f["verdict"] == "fail"].head(12).iterrows():
            where = f"{row['fixture']}{'-' + row['position'] if row['position'] else ''}"
            lines.append(f"  FAIL {row['check']}[{where}]: p-value {row['pvalue']:.3g} {row['message']}")
        return "\n".join(lines)

    def to_csv(self, path, metadata: dict | None = None) -> None:
        """Write the certificate atomically with its ``.meta.json`` sidecar (version, TV, seed...)."""
        from specgauge.csvio import write_csv_atomic

        write_csv_atomic(self.frame, path, {"command": "certify", **(metadata or {})})


def certify(decoder: Decoder | str | None = None, config: CertConfig | None = None,
            checks: Iterable[str] | None = None, fixtures: Iterable[str] | None = None,
            progress: bool = False, name: str | None = None, slow: bool = False) -> Certificate:
    """Certify ``decoder`` (an object with ``verify``, a short name or MODULE:NAME).

    ``slow`` adds the slow tier; ``progress`` shows a tqdm bar on stderr.
    """
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
    if not config.assertions:  # the family-wise rate is split over the assertions actually run
        config = replace(config, assertions=plan_size(slow) if not (fixtures or checks) else len(items))
    session = CertificationSession(obj, name, config)
    from tqdm import tqdm

    bar = tqdm(items, desc=f"certifying {name}", unit="assertion", disable=not progress, leave=False)
    for check, fixture, position in bar:
        bar.set_postfix_str(fixture.name, refresh=False)
        session.assertion(check, fixture, position)
    return session.certificate()


def record(session: CertificationSession, result: TestResult, check: str, fixture: str,
           position: int | str | None, family: str = "exactness") -> None:
    """Add a row for an assertion computed outside the fixture checks (whole sequences, say).

    ``family`` decides which verdict it counts towards: "exactness" or "optimality".
    """
    if family not in FAMILIES:
        raise SpecgaugeError(f"unknown family {family!r}; choose from {', '.join(FAMILIES)}")
    label = "" if position is None else (position if isinstance(position, str) else f"pos{position}")
    row = _row(session.name, Check(check, family, None, None, None, ""), None, None, result)  # type: ignore[arg-type]
    row.update(fixture=fixture, position=label)
    session.rows.append(row)


def assert_certified(check, fixture_name: str, result: TestResult) -> None:
    """One assertion of a certification suite (chains or trees): skip a position the
    fixture never reaches, else fail with the check's meaning and the test's numbers."""
    import pytest

    if result.n == 0 and result.passed:
        pytest.skip(f"{check.name} on {fixture_name}: no samples, the position it tests is never reached")
    message = f"{check.meaning}\n{result.describe()}"
    if result.details and "error" in result.details:
        message += f"\n{result.details['error']}"
    assert result.passed, message
