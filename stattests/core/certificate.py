"""The one certificate model of the gate: chain, tree and server runs write the same rows.

A certificate is a table with one row per assertion (the columns in :data:`COLUMNS`), and
its verdicts come from the rows alone: ``exact`` when no assertion of the exactness family
failed, ``optimal_acceptance`` when none of the optimality family failed. Every room builds
its rows with :func:`certificate_row` (or :func:`record`) and hands them to
:class:`Certificate`, so the verdict logic and the writer exist once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from specgauge.errors import SpecgaugeError
from specgauge.stattests.core.statistics import TestResult

FAMILIES = ("exactness", "optimality")
COLUMNS = ["decoder", "check", "family", "fixture", "position", "n", "statistic", "pvalue",
           "false_fail_rate", "false_fail_basis", "min_detectable_tv", "detectable", "observed", "expected", "verdict", "message"]
#: What each test's ``min_detectable_tv`` bounds, by test name (the certificate's ``detectable`` column).
DETECTABLE = {
    "identity": ("GUARANTEE: worst-case TV, proven to be detected against every alternative with independent "
                 "rows (exact binomials, Bernstein on Z's linear part, a fourth-moment bound on its degenerate "
                 "part; the normal-tail estimate is in the message; independence is the independence-calls row)"),
    "dispersion": "not a TV bound: the under-dispersion of counts across blocks of calls detected (see message)",
    "goodness_of_fit": "directional: TV between the pooled bins' distributions",
    "pit_ks": "directional: largest CDF gap along the vocabulary order (mass moved across one prefix)",
    "independence": "TV of the pooled joint from the product of its margins",
    "tail_collisions": "not a TV bound: a relative change of the rare tokens' collision rate (see message)",
    "acceptance_rate": "shift of the acceptance rate",
    "tokens_per_pass": "TV of the tokens-per-pass law",
    "tokens_per_pass_mean": "shift of mean tokens per pass, in tokens",
}
#: Why each test's false-fail rate holds, by test name (the certificate's ``false_fail_basis``):
#: "exact" (an exact law, or a check with no randomness), "proven" (a proven bound on the
#: null tail), "estimated" (an asymptotic law: chi-square, normal); a test may say otherwise
#: in ``details["false_fail_basis"]`` (the gate's goodness of fit and mean tokens per pass say
#: "proven" at the rates a verdict reads; summed or conditional fits that do not say stay estimated).
FALSE_FAIL_BASIS = {
    "identity": "proven", "pit_ks": "proven", "ks_uniformity": "proven", "accepted_length_ks": "proven",
    "sibling_rounds_ks": "proven", "pvalue_uniformity": "proven", "contract": "exact", "greedy": "exact",
    "optimal_bound": "exact", "acceptance_rate": "exact", "goodness_of_fit": "estimated",
    "independence": "proven", "dispersion": "proven", "tail_collisions": "proven",
    "tokens_per_pass": "estimated", "tokens_per_pass_mean": "estimated", "law": "estimated",
    "homogeneity": "estimated", "joint_bound": "estimated",
}
#: Family-wise false-fail rate of a whole default certification: the chance that an exact
#: decoder fails any assertion. Each assertion gets its Bonferroni share.
DEFAULT_FALSE_FAIL = 1e-4
#: failing assertions a summary lists; a line after them counts the rest
MAX_LISTED_FAILURES = 12


@dataclass(frozen=True)
class Rates:
    """The error rates one assertion runs at: its share of the family-wise false-fail
    rate, and the false-pass rate its detectable TV is stated at."""

    false_fail: float
    false_pass: float


def failure(test: str, run, rates: Rates, message: str) -> TestResult:
    """The result of an assertion whose run broke (the decoder raised, timed out, or
    violated the contract): a failure at p = 0 carrying the reason."""
    return TestResult(test, math.inf, 0.0, run.n, rates.false_fail, math.nan, None, {"error": message})


def verdict(result: TestResult) -> str:
    """"pass", "fail", or "untested" when the position was never reached (n = 0)."""
    if result.n == 0 and result.passed:
        return "untested"
    return "pass" if result.passed else "fail"


#: (observed key, expected key, how a FAIL line names the pair) in a test's details
_OBSERVED_EXPECTED = (("observed_rate", "expected_rate", "rate {o} observed, {e} expected by the law"),
                      ("observed_mean", "expected_mean", "mean {o} observed, {e} expected by the law"))


def certificate_row(decoder: str, check: str, family: str, fixture: str, position: str,
                    result: TestResult) -> dict:
    """One certificate row: the test's numbers, what its detectable TV bounds, and the
    observed and expected figures a person reads first."""
    details = dict(result.details or {})
    message = str(details.get("error", ""))
    observed = expected = float("nan")
    label = "observed {o}, expected {e}"
    for obs_key, exp_key, text in _OBSERVED_EXPECTED:
        if obs_key in details:
            observed, expected, label = float(details[obs_key]), float(details[exp_key]), text
    if "measured_tv" in details:  # goodness of fit: the measured TV against the expected 0
        observed, expected = float(details["measured_tv"]), 0.0
        label = "measured TV {o} from the expected law (0 when exact)"
    if "observed_collisions" in details:
        observed, expected = float(details["observed_collisions"]), float(details["expected_collisions"])
        label = "rare-token collisions {o} observed, {e} expected"
        message = message or f"detects a relative change of {details['detectable_relative_shift']:.2g} in sum r^2"
    if not message and "message" in details:
        message = str(details["message"])
    if not message and not result.passed and np.isfinite(observed):
        message = label.format(o=f"{observed:.4g}", e=f"{expected:.4g}")
    return {"decoder": decoder, "check": check, "family": family, "fixture": fixture, "position": position,
            "n": result.n, "statistic": result.statistic, "pvalue": result.pvalue,
            "false_fail_rate": result.false_fail_rate,
            "false_fail_basis": str(details.get("false_fail_basis", FALSE_FAIL_BASIS.get(result.test, "estimated"))),
            "min_detectable_tv": result.min_detectable_tv,
            "detectable": DETECTABLE.get(result.test, ""), "observed": observed, "expected": expected,
            "verdict": verdict(result), "message": message}


def record(session, result: TestResult, check: str, fixture: str, position: int | str | None,
           family: str = "exactness") -> None:
    """Add a row to ``session.rows`` (any object with ``name`` and ``rows``) for one assertion.

    ``family`` decides which verdict it counts towards: "exactness" or "optimality".
    """
    if family not in FAMILIES:
        raise SpecgaugeError(f"unknown family {family!r}; choose from {', '.join(FAMILIES)}")
    label = "" if position is None else (position if isinstance(position, str) else f"pos{position}")
    session.rows.append(certificate_row(session.name, check, family, fixture, label, result))


@dataclass(frozen=True)
class Certificate:
    """One row per assertion; verdicts split into exactness and acceptance optimality."""

    frame: pd.DataFrame = field(repr=False)

    @classmethod
    def from_rows(cls, rows: list[dict]) -> "Certificate":
        return cls(pd.DataFrame(rows, columns=COLUMNS))

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

    def _every_call_raised(self) -> str | None:
        """The first error when every assertion failed because the decoder raised (nothing was
        measured, so no statistical reading applies); else None."""
        f = self.frame
        messages = f["message"].astype(str)
        if f.empty or not (f["verdict"] == "fail").all() or not messages.str.startswith("verify raised").all():
            return None
        return (messages.iloc[0].removeprefix("verify raised ").strip().splitlines() or [""])[0]

    def _optimal_share(self) -> str | None:
        """Tree runs: the measured share of the optimal first-level acceptance."""
        f = self.frame
        bound = f[(f["check"] == "optimal-bound") & (f["verdict"] != "fail")]
        shares = bound["message"].str.extract(r"= ([0-9.]+)% of the optimal")[0].astype(float)
        if not self.verdicts["exact"] or shares.empty or not shares.notna().any():
            return None
        per = ", ".join(f"{fx} {v:.0f}%" for fx, v in zip(bound["fixture"], shares))
        return (f"  acceptance at {shares.min():.0f}-{shares.max():.0f}% of the optimal first-level acceptance "
                f"an exact verifier can reach (Hu et al. 2025 LP bound; {per})")

    def _false_fail_line(self, rate: pd.Series) -> str:
        """The family-wise false-fail rate: proven (Bonferroni over the rows whose own rate is
        exact or proven), and what the rows whose rate rests on an asymptotic law add."""
        basis = self.frame.get("false_fail_basis", pd.Series("estimated", index=self.frame.index)).astype(str)
        sure = basis.isin(("exact", "proven"))
        line = (f"  false-fail rate {rate.max():.2g} per assertion; family-wise at most "
                f"{min(1.0, rate[sure].sum()):.2g}, proven, over {int(sure.sum())} (exact or proven)")
        if (~sure).any():
            line += (f", plus {min(1.0, rate[~sure].sum()):.2g} estimated over {int((~sure).sum())} "
                     f"(asymptotic laws; column false_fail_basis)")
        return line

    def _exactness_verdict(self, rate: pd.Series) -> str:
        """The exactness verdict in words a reader takes at their value. A pass is not a proof that
        the decoder is exact: it says no deviation of the stated TV was found on these fixtures, at
        the stated false-fail rate. A fail is a finding ("exact: NO"), at that rate too."""
        f = self.frame
        family = min(1.0, float(rate[rate.notna()].sum())) if rate.notna().any() else math.nan
        ffr = f"false-fail rate {family:.2g}" if np.isfinite(family) else "false-fail rate not stated"
        if not self.verdicts["exact"]:
            return f"exact: NO, a deviation from p found ({ffr})"
        ran = f[f["verdict"] != "untested"]
        guarantee = ran[ran["detectable"].astype(str).str.startswith("GUARANTEE")]
        worst = guarantee.groupby("fixture")["min_detectable_tv"].max().astype(float)
        sized = worst[np.isfinite(worst) & (worst < 1)]
        others = sorted(set(ran.loc[ran["family"] == "exactness", "fixture"]) - set(sized.index))
        if sized.empty:
            return f"exactness: no deviation from p found by the checks on these fixtures ({ffr}; directional figures below)"
        unsized = (f"; on {len(others)} of them" + (f" ({', '.join(others)})" if len(others) <= 3 else "")
                   + " no worst-case figure, only directional ones" if others else "")
        if sized.min() == sized.max():
            return (f"exactness: no deviation of TV ≥ {sized.max():.3g} from p found on these fixtures "
                    f"({ffr}, power 0.999{unsized})")
        return (f"exactness: no deviation from p of at least each fixture's guaranteed TV found on these "
                f"fixtures, {sized.min():.3g} ({sized.idxmin()}) to {sized.max():.3g} ({sized.idxmax()}) "
                f"({ffr}, power 0.999{unsized})")

    def summary(self, csv_path: str | None = None, diagnosis: Sequence[str] = (), unseen: Sequence[str] = ()) -> str:
        """The verdict in a few lines, then the first failures; a longer listing ends with how many more
        there are and where (``csv_path``, the certificate's file, when it is written). ``diagnosis``:
        lines naming the likely cause of the failures, printed under the verdict (a room's reading of
        its own checks: ``specgauge.stattests.chain.diagnosis``); ``unseen``: lines saying what these
        fixtures cannot see, printed under the figures."""
        f = self.frame
        v = self.verdicts
        lines = [f"decoder {', '.join(sorted(set(f['decoder'])))}: {len(f)} assertions, "
                 f"{int((f['verdict'] == 'fail').sum())} failed"]
        raised = self._every_call_raised()
        rate = f["false_fail_rate"].astype(float)
        lines.append(f"  exact: NO; every call raised: {raised}" if raised else
                     f"  {self._exactness_verdict(rate)}; optimal acceptance (1 - TV, the law): "
                     f"{'no departure found' if v['optimal_acceptance'] else self._why_not_optimal()}")
        lines += [] if raised else list(diagnosis)
        guarantee = f["detectable"].astype(str).str.startswith("GUARANTEE")
        independence = f[(f["check"] == "independence-calls") & (f["verdict"] != "untested")]
        assumed = sorted(set(f.loc[guarantee & (f["verdict"] != "untested"), "fixture"]) - set(independence["fixture"]))
        rows_tested = ((f["check"] == "independence-rows") & (f["verdict"] != "untested")).any()
        tested = (["consecutive emissions"] if len(independence) else []) + (
            ["rows at lags 1, B/2 and across calls", "each call's count"] if rows_tested else [])
        scope = ("every alternative with independent rows"
                 + (f"; tested at every position: {', '.join(tested)}; other dependence assumed" if tested else "")
                 + (f" (assumed, not tested, on {', '.join(assumed)})" if assumed else ""))
        for rows, label, meaning in (
                (guarantee, "guaranteed TV", f"worst case over {scope}; worst position, GUARANTEE rows"),
                (f["check"] == "exactness", "directional detectable discrepancy",
                 "the other exactness checks, median over positions")):
            dist = f[rows & (f["verdict"] != "untested")]
            by_fixture = dist.groupby("fixture")["min_detectable_tv"]
            reached = (by_fixture.max() if rows is guarantee else by_fixture.median()).astype(float)
            finite = reached[np.isfinite(reached) & (reached < 1)] if rows is guarantee else reached[np.isfinite(reached)]
            if not finite.empty:
                blind = sorted(set(reached.index) - set(finite.index))
                span = (f"{finite.min():.3g} ({finite.idxmin()})" if len(finite) == 1 else
                        f"{finite.min():.3g} ({finite.idxmin()}) to {finite.max():.3g} ({finite.idxmax()})")
                lines.append(f"  {label}: {span}, power 0.999")
                lines.append(f"    ({meaning}"
                             + (f"; no guarantee at this sample size on {', '.join(blind)}" if blind else "") + ")")
        lines += list(unseen)
        if rate.notna().any():
            lines.append(self._false_fail_line(rate))
        share = self._optimal_share()
        if share:
            lines.append(share)
        failed = f[f["verdict"] == "fail"]
        listed = 0 if raised else MAX_LISTED_FAILURES
        for _, row in failed.head(listed).iterrows():
            where = f"{row['fixture']}{'-' + row['position'] if row['position'] else ''}"
            message = str(row["message"]).strip()
            lines.append(f"  FAIL {row['check']}[{where}]: p-value {row['pvalue']:.3g}" + (f"; {message}" if message else ""))
        if len(failed) > listed and not raised:
            lines.append(f"  ... and {len(failed) - listed} more failed assertion{'s' if len(failed) - listed > 1 else ''}"
                         + (f" in {Path(csv_path).name}" if csv_path else " in the certificate"))
        return "\n".join(fold(line) for line in lines)

    def to_csv(self, path, metadata: dict | None = None) -> None:
        """Write the certificate atomically with its ``.meta.json`` sidecar (version, TV, seed...)."""
        from specgauge.csvio import write_csv_atomic

        write_csv_atomic(self.frame, path, {"command": "certify", **(metadata or {})})


#: the longest line a summary prints: a terminal's or a log's width, never 300 characters
SUMMARY_WIDTH = 100


def fold(line: str) -> str:
    """A summary line folded at SUMMARY_WIDTH, its continuation indented two more than the line."""
    import textwrap

    indent = " " * (len(line) - len(line.lstrip()))
    return textwrap.fill(line, SUMMARY_WIDTH, subsequent_indent=indent + "  ", break_long_words=False,
                         break_on_hyphens=False)


def assert_certified(check, fixture_name: str, result: TestResult) -> None:
    """One assertion of a certification suite (chains or trees): skip a position the
    fixture never reaches, else fail with the check's meaning and the test's numbers."""
    import pytest

    if result.n == 0 and result.passed:
        why = (result.details or {}).get("reason") or "no samples, the position it tests is never reached"
        pytest.skip(f"{check.name} on {fixture_name}: {why}")
    message = f"{check.meaning}\n{result.describe()}"
    if result.details and "error" in result.details:
        message += f"\n{result.details['error']}"
    assert result.passed, message
