"""Certification: run every applicable check on every fixture and collect the certificate.

Used by ``pytest stattests`` (one test item per assertion) and ``specgauge certify``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd

from specgauge.fixtures.pairs import FIXTURES, PairFixture

from .checks import CHECKS, Check, Rates, failure, position_label
from .contract import Decoder, decoder_name, load_decoder
from specgauge.errors import SpecgaugeError
from .harness import FixtureRun, RunConfig, rows_for, run_fixture
from .statistics import (TestResult, min_num_samples_for_goodness_of_fit,
                         min_num_samples_for_ks_uniformity)

FAMILIES = ("exactness", "optimality")
COLUMNS = ["decoder", "check", "family", "fixture", "position", "n", "statistic", "pvalue",
           "false_fail_rate", "min_detectable_tv", "verdict", "message"]


DEFAULT_TV = 0.005


def default_tv(decoder: object) -> float:
    """The TV to size samples for when the user gave none: 0.005, or the coarser
    ``certification_tv`` a slow decoder declares (a per-row Python call cannot afford
    millions of rows); an explicit ``--tv`` always wins."""
    return max(DEFAULT_TV, float(getattr(decoder, "certification_tv", DEFAULT_TV)))


@dataclass(frozen=True)
class CertConfig:
    """What a certificate must be able to detect, and what it may spend.

    ``tv`` sets the sample size (capped by ``max_rows`` and by ``max_bytes`` of decoder
    input per fixture); the certificate reports the TV actually reached.
    """

    tv: float = DEFAULT_TV
    false_fail: float = 1e-6
    false_pass: float = 1e-3
    seed: int = 0
    max_rows: int = 2_000_000
    max_bytes: int = 2 * 2**30
    chunk_bytes: int = 64 * 2**20

    def __post_init__(self) -> None:
        if not 0 < self.tv < 1:
            raise SpecgaugeError(f"--tv must lie in (0, 1), got {self.tv!r}")
        for label, rate in (("--false-fail", self.false_fail), ("false_pass", self.false_pass)):
            if not 0 < rate < 1:
                raise SpecgaugeError(f"{label} must lie in (0, 1), got {rate!r}")

    @property
    def rates(self) -> Rates:
        return Rates(self.false_fail, self.false_pass)

    def rows(self, fixture: PairFixture) -> int:
        tv = max(self.tv, fixture.tv_floor)
        needed = min_num_samples_for_ks_uniformity(tv, false_fail_rate=self.false_fail,
                                                   false_pass_rate=self.false_pass)
        if fixture.context_free:
            needed = max(needed, *(min_num_samples_for_goodness_of_fit(
                tv, p, false_fail_rate=self.false_fail, false_pass_rate=self.false_pass)
                for p in fixture.target))
        return rows_for(fixture, needed, self.max_rows, self.max_bytes)


class CertificationSession:
    """Runs each fixture once per decoder and each check once per fixture, on demand."""

    def __init__(self, decoder: Decoder, name: str, config: CertConfig) -> None:
        self.decoder, self.name, self.config = decoder, name, config
        self._runs: dict[str, FixtureRun] = {}
        self._results: dict[tuple[str, str], dict[int | None, TestResult]] = {}
        self.rows: list[dict] = []

    def run(self, fixture: PairFixture) -> FixtureRun:
        if fixture.name not in self._runs:
            cfg = RunConfig(self.config.rows(fixture), self.config.chunk_bytes, self.config.seed)
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
        return Certificate(pd.DataFrame(self.rows, columns=COLUMNS))


def _row(name: str, check: Check, fixture: PairFixture, position: int | None, r: TestResult) -> dict:
    message = str(r.details.get("error", "")) if r.details else ""
    if not message and r.details and "measured_tv" in r.details and not r.passed:
        message = f"measured TV {r.details['measured_tv']:.4g}"
    if not message and r.details and "observed_rate" in r.details:
        message = f"observed {r.details['observed_rate']:.4f}, expected {r.details['expected_rate']:.4f}"
    if not message and r.details and "observed_mean" in r.details:
        message = f"observed {r.details['observed_mean']:.4f}, expected {r.details['expected_mean']:.4f}"
    return {"decoder": name, "check": check.name, "family": check.family,
            "fixture": fixture.name if fixture else "",
            "position": position_label(check, fixture, position) if fixture else "", "n": r.n,
            "statistic": r.statistic, "pvalue": r.pvalue, "false_fail_rate": r.false_fail_rate,
            "min_detectable_tv": r.min_detectable_tv, "verdict": verdict(r),
            "message": message}


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
        rates = failed["message"].str.extract(r"observed ([0-9.]+), expected ([0-9.]+)").astype(float)
        return "above" if (rates[0] > rates[1]).mean() >= 0.5 else "below"

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
        dist = f[f["check"].isin(["exactness", "pit-id", "pit-ratio"]) & (f["verdict"] != "untested")]
        reached = dist.groupby("fixture")["min_detectable_tv"].median()
        finite = reached[np.isfinite(reached.astype(float))]
        if not finite.empty:
            lines.append(f"  detectable TV of the output distribution (median over positions): "
                         f"{finite.min():.3g} ({finite.idxmin()}) to {finite.max():.3g} ({finite.idxmax()}),"
                         f" power 0.999 at false-fail rate {f['false_fail_rate'].max():.1g} per assertion")
        for _, row in f[f["verdict"] == "fail"].head(12).iterrows():
            where = f"{row['fixture']}{'-' + row['position'] if row['position'] else ''}"
            lines.append(f"  FAIL {row['check']}[{where}]: p-value {row['pvalue']:.3g} {row['message']}")
        return "\n".join(lines)

    def to_csv(self, path, metadata: dict | None = None) -> None:
        """Write the certificate atomically with its ``.meta.json`` sidecar (version, TV, seed...)."""
        from specgauge.csvio import write_csv_atomic

        write_csv_atomic(self.frame, path, {"command": "certify", **(metadata or {})})


def plan(fixtures: Iterable[str] | None = None, checks: Iterable[str] | None = None):
    """Every (check, fixture, position) assertion, in a stable order."""
    fx = [FIXTURES[n] for n in (fixtures or FIXTURES)]
    ch = [CHECKS[n] for n in (checks or CHECKS)]
    for fixture in fx:
        for check in ch:
            if check.applies(fixture):
                for position in check.positions(fixture):
                    yield check, fixture, position


def certify(decoder: Decoder | str | None = None, config: CertConfig | None = None,
            checks: Iterable[str] | None = None, fixtures: Iterable[str] | None = None,
            progress: bool = False, name: str | None = None) -> Certificate:
    """Certify ``decoder`` (an object with ``verify``, a short name or MODULE:NAME)."""
    config = config or CertConfig()
    if name is None:
        name = (decoder_name(decoder) if decoder is None or isinstance(decoder, str)
                else str(getattr(decoder, "name", type(decoder).__name__)))
    obj = load_decoder(decoder) if decoder is None or isinstance(decoder, str) else decoder
    unknown = set(checks or ()) - set(CHECKS) | set(fixtures or ()) - set(FIXTURES)
    if unknown:
        raise SpecgaugeError(f"unknown check or fixture {sorted(unknown)}; checks: {', '.join(CHECKS)}; "
                             f"fixtures: {', '.join(FIXTURES)}")
    session = CertificationSession(obj, name, config)
    items = list(plan(fixtures, checks))
    if progress:
        from tqdm import tqdm
        items = tqdm(items, desc=f"certifying {name}", unit="assertion")
    for check, fixture, position in items:
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
