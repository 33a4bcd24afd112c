"""A failed certificate's likely cause, read from which checks fail and which pass.

A FAIL line says *that* a check failed; the author of the decoder wants to know *what* to
look at. The pattern of failures points there: a correction drawn from the wrong law moves
the drafted positions off while the bonus and the acceptance rate stay on the law; a bonus
drawn from q moves the bonus alone; rows that share random numbers keep every marginal
exact and fail only the independence checks. :func:`diagnose` reads that pattern from the
certificate's rows (the bug classes of the zoo, ``docs/gate.md``) and names the likely
class. It is a guess, said as one: several bugs can give one pattern, and a decoder with
two bugs shows both patterns at once. ``tests/test_zoo.py`` holds it to the zoo: the
right class for at least 80 % of the mutants that fail, none for a decoder that passes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from specgauge.stattests.chain.harness import emission_probability

#: The distribution checks read at each drafted position and at the bonus.
_MARGINAL = ("exactness", "identity", "pit-id", "pit-ratio")
_ACCEPTANCE = ("acceptance", "acceptance-rate")
_LAW = ("law", "tokens-per-pass")
#: A call of at most this many rows is a small call (a server's small batch).
SMALL_CALL_ROWS = 12


@dataclass(frozen=True)
class Cause:
    """One likely bug class: a short key (what the zoo's tests compare), what to look at,
    and the pattern that points there."""

    key: str
    text: str
    evidence: str

    def line(self) -> str:
        return f"{self.text} ({self.evidence})"


def _fixtures():
    from specgauge.stattests.chain.certify import ALL_FIXTURES  # certify imports the checks: import late

    return ALL_FIXTURES


def _drafted(position: str) -> int | None:
    return int(position[3:]) if position.startswith("pos") and position[3:].isdigit() else None


def _set(rows: pd.DataFrame) -> set[str]:
    return set(rows["fixture"].astype(str))


def _bonus_never_emitted(frame: pd.DataFrame) -> set[str]:
    """Fixtures whose bonus position was never reached although an exact decoder reaches it
    in a good share of rows (all drafts accepted): a decoder that emits no bonus token."""
    fixtures = _fixtures()
    bonus = frame[(frame["position"] == "bonus") & frame["check"].isin(_MARGINAL)]
    out = set()
    for name, rows in bonus.groupby("fixture"):
        fixture = fixtures.get(str(name))
        if fixture is None or fixture.kind != "pair" or not fixture.context_free:
            continue
        if float(emission_probability(fixture)[-1]) > 0.05 and (rows["n"].astype(float) == 0).all():
            out.add(str(name))
    return out


def _suffix_start(failed: pd.DataFrame, tested: pd.DataFrame, fixture: str) -> int | None:
    """k > 0 when on ``fixture`` every drafted position from k on failed a marginal check and
    every one before k passed them all; else None."""
    fail = {_drafted(p) for p in failed.loc[failed["fixture"] == fixture, "position"]} - {None}
    seen = {_drafted(p) for p in tested.loc[tested["fixture"] == fixture, "position"]} - {None}
    if not fail or not seen:
        return None
    k = min(fail)
    return k if k > 0 and fail == {p for p in seen if p >= k} else None


def _one_law(name: str) -> bool | None:
    """Whether every position of the fixture has one target law (None: unknown, rows differ)."""
    fixture = _fixtures().get(name)
    if fixture is None or fixture.kind != "pair" or not fixture.context_free:
        return None
    return bool(np.allclose(fixture.target, fixture.target[0]))


#: A fixture whose every drafted position leaves less residual mass max(p − q, 0) than this
#: has a near-identical draft: a wrong correction moves at most this much of its law.
SMALL_RESIDUAL = 0.05


def _small_residual(name: str) -> bool | None:
    """Whether every drafted position of the fixture leaves a residual mass (1 − α) below
    SMALL_RESIDUAL (None: no single law to read, or nothing drafted)."""
    fixture = _fixtures().get(name)
    if fixture is None or fixture.kind != "pair" or not fixture.context_free or not fixture.gamma:
        return None
    return bool((1.0 - fixture.acceptance()).max() < SMALL_RESIDUAL)


def diagnose(frame: pd.DataFrame) -> tuple[Cause, ...]:
    """The likely bug classes of a chain certificate's failures, most likely first (at most
    two); none when nothing failed, or when every call raised (then the error is the cause)."""
    f = frame
    failed = f[f["verdict"] == "fail"]
    if failed.empty:
        return ()
    messages = failed["message"].astype(str)
    if len(failed) == len(f) and messages.str.startswith("verify raised").all():
        return ()
    checks = set(failed["check"])
    tested = f[(f["verdict"] != "untested") & f["check"].isin(_MARGINAL)]
    marginal = failed[failed["check"].isin(_MARGINAL)]
    drafted = marginal[marginal["position"].str.startswith("pos")]
    bonus = marginal[marginal["position"] == "bonus"]
    accept = failed[failed["check"].isin(_ACCEPTANCE)]
    law = failed[failed["check"].isin(_LAW)]
    off = _set(drafted) | _set(bonus) | _set(accept) | _set(law)
    causes: list[Cause] = []

    def add(key: str, text: str, evidence: str) -> None:
        if key not in {c.key for c in causes}:
            causes.append(Cause(key, text, evidence))

    if "contract" in checks:
        add("contract", "the decoder breaks the contract: output shape, padding, token range, or it changes its "
            "inputs (fix this first: the statistical rows after it read a broken run)", "contract fails")
    if "greedy" in checks:
        add("greedy", "temperature 0 does not give the argmax prefix (a sampled path where the greedy one was asked)",
            "greedy fails")
    if "independence-rows" in checks:
        add("rows", "rows share random numbers: one stream, seed or uniform reused across the rows of a call or "
            "across calls (every marginal can still be exact)", "independence-rows fails")
    never = _bonus_never_emitted(f)
    if never and law.shape[0] and not drafted.shape[0]:
        add("no-bonus", "no bonus token after all drafts are accepted: tokens per pass one short of the law",
            f"the bonus position is never emitted on {', '.join(sorted(never))}; the law fails")
    tail = _set(failed[failed["check"] == "tail-collisions"])
    if tail and (_set(marginal) | _set(accept)) <= tail and not accept.shape[0]:
        # only where the rare tokens collide wrongly: a gross bug would move the other fixtures too
        add("tail", "the rare tokens' probabilities are moved among themselves (merged, swapped or permuted in the "
            "tail), a bias the pooled chi-square cannot see", f"tail-collisions fails on {', '.join(sorted(tail))}")
        off = off - tail
    if off:
        suffix = {fx: _suffix_start(drafted, tested, fx) for fx in _set(drafted)}
        late = {fx: k for fx, k in suffix.items() if k is not None}
        small = {n for n in off if 0 < getattr(_fixtures().get(n), "call_rows", 0) <= SMALL_CALL_ROWS}
        calm = _set(f[f["check"].isin(_MARGINAL + _ACCEPTANCE + _LAW)]) - off
        one_law_passed = {n for n in calm if _one_law(n)}
        one_law_failed = {n for n in off if _one_law(n)}
        rows_own = {n for n in off if getattr(_fixtures().get(n), "sampler", None) is not None}
        position_dependent = {n for n in off if _one_law(n) is False}
        near = {n for n in off if _small_residual(n)}
        # where the failures lie (a late position, the bonus, small calls, rows with their own
        # laws, laws that change with the position) names the path; else how they lie does
        if late and set(late) == _set(drafted):
            where = ", ".join(f"{fx} from position {k}" for fx, k in sorted(late.items()))
            add("long-drafts", "positions past the first few read the wrong law: a path taken only for long "
                "drafts, or a position index that runs past a table", f"drafted positions off only late: {where}")
        elif bonus.shape[0] and not drafted.shape[0] and not accept.shape[0]:
            add("bonus", "the bonus token (after every draft is accepted) is drawn from the wrong law: from q, or "
                "from another position's p", "the bonus off; the drafted positions and the acceptance on the law")
        elif small and off <= small and (calm - small):
            add("small-calls", "a path taken only for small calls (a few rows a call) is wrong, e.g. a fast path "
                "that resamples from p", f"off only on the small-call fixtures ({', '.join(sorted(small))})")
        elif rows_own and off <= rows_own and any(_one_law(n) is not None for n in calm):
            add("row-mixup", "a row reads another row's law (its q or p): wrong only where rows have their own laws",
                f"off only on {', '.join(sorted(rows_own))}, whose rows have their own laws")
        elif (near and off <= near and drafted.shape[0] and not bonus.shape[0] and not accept.shape[0]
              and any(_small_residual(n) is False for n in calm)):
            add("small-residual", "the correction is drawn from the wrong law only when the residual "
                "max(p - q, 0) is small (a near-identical draft): a guard for an empty residual whose "
                "threshold is too large, drawing from p", f"the drafted positions off only on {', '.join(sorted(near))}, "
                f"whose residual mass is under {SMALL_RESIDUAL:g}; on the law where it is larger")
        elif position_dependent and one_law_passed and not one_law_failed and drafted.shape[0]:
            add("position-shift", "a draft position is checked against another position's target row (an "
                "off-by-one between draft position and target row)",
                f"off where p changes with the position; on the law where it does not ({', '.join(sorted(one_law_passed))})")
        else:
            if drafted.shape[0] and bonus.shape[0]:
                add("target", "the target law itself is not the one asked for: temperature, top-k or top-p not "
                    "applied to p in the verifier, or the wrong target row", "the drafted positions and the bonus off")
            if drafted.shape[0] and accept.shape[0]:
                add("acceptance", "the accept/reject test is wrong: not min(1, p/q) on the drafted token (every "
                    "draft accepted, q renormalised or cut, another row's q)",
                    "the drafted positions and the acceptance off")
            if drafted.shape[0] and not bonus.shape[0] and not accept.shape[0]:
                add("correction", "the correction after a rejection is drawn from the wrong law: not "
                    "normalize(max(p - q, 0)), e.g. from p, or with the acceptance's uniform reused",
                    "the drafted positions off; the bonus and the acceptance on the law")
        if (accept.shape[0] or law.shape[0]) and not marginal.shape[0] and "no-bonus" not in {c.key for c in causes}:
            add("suboptimal", "exact, but the acceptance is not 1 - TV(p, q): the accept test differs from "
                "min(1, p/q) (one-hot draft probabilities accept with sum q p); lossless, only slower or faster "
                "than the per-token rule", "every marginal on the law; the acceptance or tokens per pass off")
    if "independence-positions" in checks:
        add("positions", "a row's positions share randomness: a later draw reuses an earlier position's uniform "
            "(each position's marginal exact, their joint law wrong)", "independence-positions fails")
    if "independence-calls" in checks:
        add("calls", "state carried from one call to the next (a stream, phase or remainder kept between calls): "
            "each call looks right, calls are not independent", "independence-calls fails")
    return tuple(causes[:2])


def diagnosis_lines(frame: pd.DataFrame) -> list[str]:
    """The summary's lines for :func:`diagnose` (none for a certificate that passed)."""
    causes = diagnose(frame)
    if not causes:
        return []
    lines = [f"  likely cause (a guess from which checks fail and which pass): {causes[0].line()}"]
    lines += [f"    or: {c.line()}" for c in causes[1:]]
    return lines


def blind_spots(frame: pd.DataFrame) -> list[str]:
    """What the run's fixtures cannot see, when every one of them has the same target law at every
    position: a token taken from the wrong position (a bonus or a correction read from another
    position's row, an off-by-one between draft and target rows) has the right law there and
    passes. One fixture whose laws differ by position (or rows with laws of their own) sees it."""
    names = sorted(set(frame["fixture"].astype(str)))
    if not names or not all(_one_law(n) for n in names):
        return []
    which = f"{names[0]} has" if len(names) == 1 else f"{', '.join(names)} have"
    return [f"  cannot see: {which} the same p at every position, so a token taken from the wrong "
            "position (a bonus or correction read from another position's row) passes here; "
            "position-dependent, near-identical and batchN-gγ have a law of their own at each position"]


def summary(cert, csv_path: str | None = None) -> str:
    """A chain certificate's summary with its likely cause under the verdict, and what its
    fixtures cannot see under the figures."""
    return cert.summary(csv_path, diagnosis_lines(cert.frame), blind_spots(cert.frame))
