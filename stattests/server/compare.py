"""Certify a server's samples: two-sample (on vs off), or one-sample (its logprobs, or a local model).

Each mode turns probe files into a family of assertions whose false-fail rates add up to
the declared total (split evenly, Bonferroni), written as rows of the gate's one
:class:`~specgauge.stattests.core.certificate.Certificate`.

- ``two-sample``: the joint law of the first L tokens per prompt (homogeneity chi-square,
  rare sequences pooled), then each position's law conditioned on the prompt and the
  tokens before it.
- ``logprobs``: each position's law given the emitted prefix, against the server's own
  top-k logprobs at that context: a chi-square over the top-k tokens plus a remainder
  cell, summed over contexts (:func:`~specgauge.stattests.server.stats.conditional_goodness_of_fit`).
  A randomized PIT of the ranks (KS) runs beside it; its figure is a KS distance along the
  probability order, not a TV. The logprobs must be those of the distribution sampled
  from (after temperature, top-k, top-p).
- ``reference``: the same conditional tests with the exact law of every position from a
  local model by teacher forcing (:mod:`specgauge.stattests.server.reference`), plus the
  PIT in probability order.

Every mode also tests, where a request returned several choices, that the choices of a
request are independent (a server copying one sample n times has the right marginals).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from specgauge.errors import InputFileError
from specgauge.stattests.core.certificate import Certificate, certificate_row
from specgauge.stattests.core.statistics import (DEFAULT_FALSE_FAIL, DEFAULT_FALSE_PASS, TestResult,
                                                 combine_bonferroni, independence_test, ks_uniformity)
from specgauge.stattests.server.closeness import FIGURE as CLOSENESS_FIGURE
from specgauge.stattests.server.closeness import MAX_REPLICATES, closeness, replicates_for
from specgauge.stattests.server.dispersion import FIGURE as DISPERSION_FIGURE
from specgauge.stattests.server.dispersion import dispersion_test
from specgauge.stattests.server.probe import ProbeRun
from specgauge.stattests.server.stats import conditional_goodness_of_fit, homogeneity, min_num_samples_for_homogeneity
from specgauge.stattests.server.stops import first_stop, overran, split_next
from specgauge.stattests.server.worstcase import (MIN_CONTEXT_DRAWS, ContextPlan, context_rows, coverage, joint_bound,
                                                  plan_contexts, refuse_contexts)

MODES = ("two-sample", "logprobs", "reference")
#: The request fields that decide the sampled law: two runs compared must agree on all of them.
LAW_FIELDS = ("model", "temperature", "top_p", "top_k", "min_p", "max_tokens", "stop", "top_logprobs")
#: What each server test's detectable figure bounds (the certificate's ``detectable`` column).
DETECTABLE = {
    "identity": "GUARANTEE: worst-case TV of this context's next-token law, detected against every alternative "
                "(the identity test; the full-vocabulary figure adds the lumped rest's mass, see message)",
    "identity-topk": "GUARANTEE over the top-k tokens plus the rest as one cell: worst-case TV of that lumped law "
                     "at this context (the full vocabulary adds the remainder's mass, see message)",
    "joint": "GUARANTEE: worst-case TV of the prompt's law of the first L tokens (chain rule over the tested "
             "contexts, weighted by the known law; untested contexts count as TV 1)",
    "joint-topk": "GUARANTEE over the top-k tokens plus the rest as one cell at each position: worst-case TV of "
                  "the prompt's lumped law of the first L tokens (chain rule; untested contexts count as TV 1)",
    "conditional": "sample-weighted RMS over contexts (prompt + emitted prefix) of the TV between binned laws "
                   "(top tokens + remainder); not a worst case: mass moved inside a pooled bin, or spread over many "
                   "contexts, escapes it (the identity rows state the worst case)",
    "homogeneity": "sample-weighted mean over contexts of the TV between the arms' binned laws; not a worst case: "
                   "mass moved inside a pooled bin, or spread over many contexts, escapes it (the closeness rows "
                   "state a per-context figure, calibrated by simulation)",
    "closeness": CLOSENESS_FIGURE,
    "pit": "not a TV: a KS distance of the randomized PIT along the probability order",
    "independence": "TV of the pooled joint of two draws (two choices of a request, or consecutive requests) from "
                    "the product of its margins, in the worst of the row's tests",
    "dispersion": DISPERSION_FIGURE,
    "honoured": "share of samples that run past a stop string or past max_tokens caught with power 0.999 (an exact "
                "server has none: one such sample fails the row)",
}
_WHAT = {"two-sample": "speculation on vs off, two samples",
         "logprobs": "one sample against the server's own top-k logprobs",
         "reference": "one sample against a local reference model"}


@dataclass(frozen=True)
class ServerRow:
    """One assertion of a server certificate: the test, where it looked, what it bounds."""

    result: TestResult
    check: str
    position: str
    kind: str                     # a key of DETECTABLE
    needed: int | None = None     # samples per prompt for the target TV, where the test has a TV


@dataclass(frozen=True)
class ServerCertificate:
    """A server comparison: the gate's :class:`Certificate` (one writer, one verdict logic)
    plus the mode, the token unit and the notes the CLI prints."""

    mode: str
    certificate: Certificate
    target_tv: float
    unit: str                      # what a token was: "ids", "tokens" or "words"
    notes: tuple[str, ...] = ()
    length: int = 0                # L: tokens per sample
    #: contexts or prompts left untested because a token or a law there was not known: (name, draws)
    unknown: tuple[tuple[str, int], ...] = ()

    @property
    def passed(self) -> bool:
        return self.certificate.passed

    @property
    def frame(self):
        return self.certificate.frame

    def verdict(self) -> str:
        """One PASS or FAIL line (a FAIL quotes the failing check's own p-value), what the worst-case
        rows state, and one plain line saying what the samples could and could not have missed."""
        f = self.frame
        total = float(f["false_fail_rate"].sum())
        what = _WHAT[self.mode]
        kinds = f["detectable"].map(_kind)
        failed = f[f["verdict"] == "fail"]
        if not failed.empty:
            first = failed.iloc[0]
            tv = float(first["observed"])
            size = (f"measured TV {tv:.3g}, " if _kind(first["detectable"]) in _MEASURED
                    and math.isfinite(tv) else f"statistic {float(first['statistic']):.4g}, ")
            where = f"[{first['position']}]" if first["position"] else ""
            return (f"FAIL ({self.mode}: {what}): {', '.join(dict.fromkeys(failed['check']))} rejected exactness "
                    f"at false-fail {total:.1g} ({first['check']}{where}: {size}p-value {float(first['pvalue']):.3g})"
                    f"\nthese samples are off {self._against(failed)}: an exact server fails this way with probability "
                    f"at most {total:.1g}" + (self._which_half(f, failed) if self.mode == "logprobs" else ""))
        joint = f[kinds.isin(("joint", "joint-topk"))]
        gaps = f[(f["verdict"] == "untested") & ~kinds.isin(("joint", "joint-topk", "independence", "dispersion"))]
        untested = [f"{c}[{p}]" if p else c for c, p in gaps[["check", "position"]].values]
        gap = (f"; untested (no sample reached them, or none whose token and law are known): {', '.join(untested)}"
               if untested else "")
        line = f"PASS ({self.mode}: {what}): no discrepancy found at false-fail {total:.1g}{gap}"
        extra = self._unknown() + _no_figure(f, kinds)  # lines of their own, after the PASS line
        if not joint.empty:
            return f"{line}{extra}\n{self._worst_case(f, kinds, joint)}"
        tv_rows = f[kinds.isin(("conditional", "homogeneity")) & (f["verdict"] == "pass")]
        head = tv_rows.iloc[0] if not tv_rows.empty else f.iloc[0]
        where = f"[{head['position']}]" if head["position"] else ""
        figure = float(head["min_detectable_tv"])
        return (f"{line}; {head['check']}{where} could detect {_SHORT[_kind(head['detectable'])]} >= {figure:.3g} "
                f"with power {1 - DEFAULT_FALSE_PASS:g} (n {int(head['n'])}, tokens as {self.unit}){extra}\n"
                + self._per_context(f, kinds) + self._plain(figure, "a binned difference (not a worst case) "))

    def _unknown(self) -> str:
        """The contexts and prompts left untested where a token or a law was not known, with their draws."""
        if not self.unknown:
            return ""
        ranked = sorted(self.unknown, key=lambda u: -u[1])
        named = ", ".join(f"{name} ({draws:,} draws)" for name, draws in ranked[:6])
        more = f" and {len(ranked) - 6} more ({sum(d for _, d in ranked[6:]):,} draws)" if len(ranked) > 6 else ""
        return f"\n  untested where a token or its law was not known (see the notes): {named}{more}"

    @staticmethod
    def _per_context(f, kinds) -> str:
        """The closeness rows' worst-case figure per context, where any row states one."""
        rows = f[(kinds == "closeness") & (f["verdict"] == "pass")]
        if rows.empty:
            return ""
        head = rows.iloc[int(np.argmax(rows["min_detectable_tv"].to_numpy(float)))]
        return (f"  closeness per context ({', '.join(rows['position'])}): each tested context's next-token law at "
                f"worst-case TV <= {float(head['min_detectable_tv']):.3g} (calibrated by simulation, not proven; "
                f"worst {head['position']}; the rows name the contexts left untested)\n")

    @staticmethod
    def _which_half(f, failed) -> str:
        """A logprobs FAIL: whether the sampling or the reported logprobs failed, from the cross-check
        rows where they ran (dependent draws are the sampler's alone)."""
        kinds = failed["detectable"].map(_kind)
        law = failed[~kinds.isin(("independence", "dispersion"))]
        own = bool((~law["check"].str.contains(":")).any())
        cross = bool(law["check"].str.contains(":").any())
        ran = bool(f["check"].str.contains(":").any())
        dependent = "; its draws are dependent too" if len(law) < len(failed) else ""
        if law.empty:
            return "\nthe sampling failed: its draws are dependent (each law may still be right)"
        if not ran:
            return ("\nwhich half failed is not known: the sampler, or the logprobs it reports (compare --mode logprobs "
                    f"--reference MODEL_DIR, or --baseline OFF.jsonl, cross-checks the reported law){dependent}")
        if own and not cross:
            return ("\nthe reporting failed, not the sampling: the samples follow the cross-check's law, and the "
                    "logprobs the server reports are off them (logprobs of another temperature, or before truncation: "
                    f"vLLM's --logprobs-mode processed_logprobs){dependent}")
        if cross and not own:
            return ("\nthe sampling failed: the samples are off the cross-check's law and follow the law the server "
                    f"reports, so its logprobs report the wrong law it samples{dependent}")
        return ("\nthe sampling failed: the samples are off the cross-check's law, and off the law the server reports "
                f"as well{dependent}")

    def _against(self, failed) -> str:
        """Which law the failing rows' draws are off: the mode's, or a cross-check's."""
        checks = list(failed["check"])
        names = [_AGAINST[self.mode]] if any(":" not in c for c in checks) else []
        names += [_AGAINST[mode] for mode, prefix in CROSS.items() if any(c.startswith(prefix + ":") for c in checks)]
        return " and ".join(names)

    def _plain(self, figure: float, kind: str = "") -> str:
        """The verdict's last line, in words."""
        if not figure < 1:
            return (f"with these samples no difference {_BETWEEN[self.mode]} is sure to be caught: more samples "
                    f"are needed (probe --guarantee TV plans them)")
        return (f"with these samples, {kind}smaller than {figure:.3g} {_BETWEEN[self.mode]} could go unnoticed; "
                f"at least {figure:.3g} would have been caught with probability {1 - DEFAULT_FALSE_PASS:g}")

    def _worst_case(self, f, kinds, joint) -> str:
        """What the identity rows state: the worst context tested, and the first tokens' law per prompt."""
        contexts = f[kinds.isin(("identity", "identity-topk"))]
        topk = _kind(joint.iloc[0]["detectable"]) == "joint-topk"
        over = " over the top-k tokens plus the rest as one cell" if topk else ""
        against = " against the law the server reports" if self.mode == "logprobs" else ""
        worst = joint.iloc[int(np.argmax(joint["min_detectable_tv"].to_numpy(float)))]
        bound = float(worst["min_detectable_tv"])
        if bound < 1:
            law = (f"  first {self.length} tokens' law of every prompt{over}{against}: worst-case TV <= {bound:.3g} "
                   f"(chain rule; worst {worst['position']}: {worst['message']})")
        else:
            law = (f"  first {self.length} tokens' law: no worst-case bound (untested contexts carry too much of "
                   f"the mass; worst {worst['position']}: {worst['message']})")
        if contexts.empty:
            return (f"  no context had the draws to state TV {self.target_tv:g}: no worst-case guarantee\n{law}\n"
                    + self._plain(1.0))
        head = contexts.iloc[int(np.argmax(contexts["min_detectable_tv"].to_numpy(float)))]
        figure = float(head["min_detectable_tv"])
        return (f"  {len(contexts)} contexts tested: each next-token law{against} at worst-case TV <= "
                f"{figure:.3g}{over} (worst {head['position']}, n {int(head['n'])}, tokens as {self.unit})\n{law}\n"
                + self._plain(figure, "a difference in any tested context's next-token law "))


def _no_figure(f, kinds) -> str:
    """A verdict line naming the dependence rows that state no figure (passed nothing), each check
    with its positions and why, or ""."""
    rows = f[(f["verdict"] == "untested") & kinds.isin(("independence", "dispersion"))]
    if rows.empty:
        return ""
    named = []
    for check, group in rows.groupby("check", sort=False):
        why = str(group.iloc[0]["message"])
        why = why.split("no figure: ", 1)[1] if "no figure: " in why else why
        why = why.split("; a bound of 1 states nothing")[0]
        named.append(f"{check}[{', '.join(group['position'])}] ({why})")
    return "\n  rows stating no figure (tested at their size, detecting nothing sure): " + "; ".join(named)


_AGAINST = {"two-sample": "the baseline's law", "logprobs": "the law the server reports",
            "reference": "the reference model's law"}
_BETWEEN = {"two-sample": "between speculation on and off", "logprobs": "from the law the server reports",
            "reference": "from the reference model's law"}
#: Appended to what every logprobs-mode row bounds: the law tested is the one the server reports.
REPORTED = " [against the law the server reports]"


def _kind(text: str) -> str:
    return _KIND[text.removesuffix(REPORTED)]


_KIND = {text: kind for kind, text in DETECTABLE.items()}
_MEASURED = ("conditional", "homogeneity", "identity", "identity-topk")
_SHORT = {"conditional": "a binned TV (RMS over contexts; not a worst case)",
          "homogeneity": "a binned TV (mean over contexts; not a worst case)",
          "pit": "a KS distance (not a TV)", "independence": "a dependence TV",
          "dispersion": "a correlation between choices (not a TV)"}


def _certificate(mode: str, decoder: str, rows: list[ServerRow], target_tv: float, unit: str,
                 notes: list[str], length: int = 0, unknown: tuple[tuple[str, int], ...] = ()) -> ServerCertificate:
    laws = [row for row in rows if row.kind in _MEASURED]
    if not any(row.result.n > 0 and row.result.df != 0 for row in laws):
        raise InputFileError(f"no context could be tested ({mode}): too few samples reach any context with a known "
                             "law; a certificate of zero samples would be vacuous, so none is written")
    built = []
    for row in rows:
        result = row.result
        if row.needed is not None:
            details = {**dict(result.details or {}),
                       "message": f"{row.needed} samples per prompt detect TV {target_tv:g} here"}
            result = TestResult(result.test, result.statistic, result.pvalue, result.n, result.false_fail_rate,
                                result.min_detectable_tv, result.df, details)
        out = certificate_row(decoder, row.check, "exactness", mode, row.position, result)
        out["detectable"] = DETECTABLE[row.kind] + (REPORTED if mode == "logprobs" and row.kind not in
                                                    ("independence", "dispersion", "honoured") else "")
        if out["verdict"] == "pass" and not result.min_detectable_tv < 1:  # detects nothing: no pass to claim
            out["verdict"] = "untested"
            out["message"] = (f"{out['message']}; " if out["message"] else "") + \
                "a bound of 1 states nothing: untested, not passed"
        built.append(out)
    return ServerCertificate(mode, Certificate.from_rows(built), target_tv, unit, tuple(notes), length, unknown)


# ---------------------------------------------------------------- like for like


def law_params(run: ProbeRun) -> dict[str, Any]:
    """The law-deciding request fields of a run (an engine field in extra_body counts too)."""
    params = run.header.get("params", {})
    extra = params.get("extra_body") or {}
    out = {k: extra.get(k, params.get(k)) for k in LAW_FIELDS}
    out["model"] = run.header.get("model", params.get("model"))
    return out


def check_like_for_like(baseline: ProbeRun, candidate: ProbeRun) -> None:
    """Refuse, in one line naming the field, two runs whose requests differ in law."""
    a, b = law_params(baseline), law_params(candidate)
    for key in LAW_FIELDS:
        if a[key] != b[key]:
            raise InputFileError(f"the runs differ in {key} (baseline {a[key]!r}, candidate {b[key]!r}): "
                              "probe both with the same request settings")
    if baseline.header.get("prompts") != candidate.header.get("prompts"):
        raise InputFileError("the runs differ in prompts: probe both with the same prompt set")


def _require_samples(run: ProbeRun, name: str) -> None:
    if not run.records:
        raise InputFileError(f"{name} holds no samples (a header only): nothing to certify")


def _same_notes(baseline: ProbeRun, candidate: ProbeRun) -> list[str]:
    if baseline.path and candidate.path and baseline.path.resolve() == candidate.path.resolve():
        return ["baseline and candidate are the same file: the two-sample test compares it with itself"]
    if baseline.records == candidate.records:
        return ["baseline and candidate hold the same samples: the two-sample test compares a run with itself"]
    return []


# ---------------------------------------------------------------- sequences


#: Maps a completion's text to the served model's token ids (a tokenizer), for servers that return
#: text only: positions and lengths are then counted in the model's tokens, not in words.
Tokenize = Callable[[str], Sequence[int]]


def _units(record: dict[str, Any], kind: str, tokenize: Tokenize | None = None) -> list:
    if kind == "ids":
        return list(record.get("token_ids", []))  # a sample that stopped at once lists nothing
    if kind == "tokens":
        return list(record["tokens"])
    if kind == "model tokens":
        return list(tokenize(record["text"]))
    return record["text"].split()


def unit_kind(*runs: ProbeRun, tokenize: Tokenize | None = None) -> str:
    """The finest token record every run has: server token ids, token strings, the served model's
    tokens re-counted from the text (with ``tokenize``), or whitespace words."""
    records = [r for run in runs for r in run.records]
    if records and all("token_ids" in r for r in records) and any(r["token_ids"] for r in records):
        return "ids"
    if records and all("tokens" in r for r in records):
        return "tokens"
    return "model tokens" if tokenize is not None else "words"


def stopped_at_end(record: dict[str, Any], stop_strings: bool) -> bool:
    """A sample with fewer than L tokens that ended because it drew the end of sequence: finish
    reason "stop" in a run that asked for no stop strings (with them, "stop" may be a string)."""
    return record.get("finish") == "stop" and not stop_strings


def _stop_strings(run: ProbeRun) -> bool:
    return bool(run.header.get("params", {}).get("stop"))


def text_stops(run: ProbeRun) -> tuple[str, ...]:
    """The run's stop strings where its token names are the pieces of text they add (every sample that
    ran to its length joins its names into its text): a stop is then placed as a draw
    (:mod:`~specgauge.stattests.server.stops`); () where it asked for none, or names tokens otherwise
    (``token_id:N``, or words: no text to find a stop string in, so a stop stays a token not known)."""
    stops = run.header.get("params", {}).get("stop") or ()
    stops = (stops,) if isinstance(stops, str) else tuple(stops)
    whole = [r for r in run.records if r.get("tokens") and r.get("finish") == "length"]
    pieces = bool(whole) and all("".join(r["tokens"]) == r["text"] for r in whole)  # names join into the text
    return stops if stops and pieces else ()


#: The end of a sample is a draw of its own at the position it ended (two-sample mode's category).
END = "<end of sample>"


def encode(runs: list[ProbeRun], length: int, kind: str,
           tokenize: Tokenize | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prompt, arm, sequences[N, length]) with tokens mapped to integers, -1 past the end.

    A sample of k < L units drew its end at position k: one category there, by why it ended
    (an end of sequence, a cap, a withheld token), a function of the sample, so two arms of
    one law draw it alike."""
    vocab: dict[Any, int] = {}
    prompt, arm, seqs = [], [], []
    for a, run in enumerate(runs):
        for r in run.records:
            units = _units(r, kind, tokenize)[:length]
            if len(units) < length:
                units = units + [(END, r.get("finish") or "")]
            seqs.append([vocab.setdefault(u, len(vocab)) for u in units] + [-1] * (length - len(units)))
            prompt.append(r["p"])
            arm.append(a)
    return np.asarray(prompt, np.int64), np.asarray(arm, np.int64), np.asarray(seqs, np.int64).reshape(-1, length)


def _rows(*columns: np.ndarray) -> np.ndarray:
    """An integer label per distinct row of the stacked columns."""
    table = np.column_stack(columns)
    return np.unique(table, axis=0, return_inverse=True)[1].ravel()


def _length(run: ProbeRun) -> int:
    return int(run.header["params"]["max_tokens"])


def truncation_note(run: ProbeRun, kind: str, name: str = "", tokenize: Tokenize | None = None,
                    mode: str = "two-sample") -> list[str]:
    """Samples with fewer than L tokens: how many, why, and what the tests did with them."""
    length = _length(run)
    short = [r for r in run.records if len(_units(r, kind, tokenize)) < length]
    if not short:
        return []
    stop_strings = _stop_strings(run)
    ended = sum(stopped_at_end(r, stop_strings) for r in short)
    capped = sum(r.get("finish") == "length" for r in short)
    other = len(short) - ended - capped
    parts = []
    if ended:
        parts.append(f"{ended} stopped at an end of sequence (finish_reason 'stop'): each is a draw of the end at "
                     f"the position it stopped, tested there")
    if capped and kind in ("words", "model tokens"):  # the server counted max_tokens of its own tokens
        parts.append(f"{capped} with finish_reason 'length': the server generated max_tokens {length} of its tokens "
                     f"but the text counts fewer {kind} (it re-tokenises differently), so they were not capped")
    elif capped:  # llama.cpp joins the byte tokens of one character into one entry, or withholds a partial one
        parts.append(f"{capped} with finish_reason 'length': the server generated max_tokens {length} tokens but listed "
                     f"fewer entries (a trailing token withheld, or the byte tokens of one character merged into "
                     f"one entry), so they were not capped")
    stopped = sum(r.get("finish") == "stop" for r in short) if stop_strings else 0
    if stopped and mode == "two-sample":
        parts.append(f"{stopped} stopped with finish_reason 'stop' (a stop string or an end of sequence)")
    elif stopped:
        parts.append(f"{stopped} stopped with finish_reason 'stop' (a stop string or an end of sequence, one cell: "
                     f"the stop, a draw at the position it stopped, where the stoppers are known: token ids in the "
                     f"reference mode, names that join into the text in the logprobs mode; else a token not known)")
    if other - stopped:
        parts.append(f"{other - stopped} ended otherwise (no finish reason)")
    if mode == "two-sample":
        then = ("the end of a sample is a category of its own at the position it ended, so both arms are "
                "compared on it; positions no sample reaches are untested")
    else:
        then = ("where the token a sample ended on is not known (not an end of sequence), the context it was drawn "
                "at and those under it are untested (counted below); positions no sample reaches are untested")
    return [f"{name}{len(short)} of {len(run.records)} samples have fewer than {length} tokens: {'; '.join(parts)}; "
            f"{then}"]


# ---------------------------------------------------------------- requests


def request_ids(run: ProbeRun) -> np.ndarray:
    """The request each sample came from: the probe's ``r`` field, else consecutive lines of
    one prompt with consecutive sample indices, at most ``n`` of them (older files)."""
    records = run.records
    if records and all("r" in r for r in records):
        return np.asarray([r["r"] for r in records], np.int64)
    n = run.header["params"].get("n", 1)
    per = n if isinstance(n, int) and n >= 1 and run.header.get("capabilities", {}).get("n") else 1
    ids, current, size, cap, prev = [], -1, 0, per, None
    for r in records:
        if prev is None or r["p"] != prev["p"] or r["s"] != prev["s"] + 1 or size >= cap:
            current, size = current + 1, 0
            cap = min(per, 2) if (r["p"], r["s"]) == (0, 0) else per  # the probe's first request asks for 2
        ids.append(current)
        size += 1
        prev = r
    return np.asarray(ids, np.int64)


def _offset_pairs(members: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """For requests of m choices (``members[R, m]``, sample rows in choice order): per distance d =
    1..m − 1, the disjoint pairs (j, j + d) with ⌊j/d⌋ even (for d > m/2 every j < m − d), from
    every request. Under independence each is a pair of independent draws, and every distance
    between two choices is tested on the pairs at that distance alone, so a dependence at one
    distance is not diluted by pairs at others."""
    out = {}
    m = members.shape[1]
    for d in range(1, m):
        j = np.arange(m - d)
        j = j[(j // d) % 2 == 0]
        out[d] = (members[:, j].ravel(), members[:, j + d].ravel())
    return out


def _request_pairs(groups: list[np.ndarray], prompt: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Consecutive requests of each prompt, choice j with choice j, at both offsets: the pairs of
    requests (0, 1), (2, 3), ... (offset 0) and (1, 2), (3, 4), ... (offset 1). Each offset's pairs
    are disjoint, so each is a set of independent pairs under independence; together they see a
    dependence between any two requests sent one after the other."""
    out = {}
    for offset in (0, 1):
        xs, ys = [], []
        for p in np.unique(prompt):
            mine = [g for g in groups if prompt[g[0]] == p]
            for a, b in zip(mine[offset::2], mine[offset + 1::2]):
                size = min(a.size, b.size)
                xs.append(a[:size])
                ys.append(b[:size])
        if xs:
            out[offset] = (np.concatenate(xs), np.concatenate(ys))
    return out


def _pair_tests(x: np.ndarray, y: np.ndarray, prompt: np.ndarray, rate: float) -> list[TestResult]:
    """The pairs (x[i], y[i]) tested for independence per prompt (a prompt's pairs share one law):
    the G test with y binned by x's observed margin, upper tail only, its level proven at a
    verdict's rates (:func:`~specgauge.stattests.core.statistics.independence_test`). A table
    closer to the product of its margins than chance is no sign of dependence."""
    return [independence_test(x[prompt == p], y[prompt == p], false_fail_rate=rate) for p in np.unique(prompt)]


def independence_results(run: ProbeRun, false_fail_rate: float) -> dict[str, list[TestResult]]:
    """Dependence between draws, at every position (the token there, the end of a sample, or not
    reached: a function of the sample, so independent draws give independent labels):

    - ``within``: the choices of one request, every distance between them (:func:`_offset_pairs`),
      per prompt; empty where no request had two choices;
    - ``across``: requests close in time: the k-th and (k+1)-th request of a prompt, for k even and
      for k odd (:func:`_request_pairs`), choice j with choice j;
    - ``dispersion``: per request, how many of its choices fall in a band of labels, against the
      binomial (:mod:`~specgauge.stattests.server.dispersion`): all pairs of a request at once,
      herded (over-dispersed) or spread (under-dispersed); empty where no request had two choices.

    Each position's tests share its rate (Bonferroni) into one result."""
    length = _length(run)
    labels = encode([run], length, unit_kind(run))[2]
    prompt = np.asarray([r["p"] for r in run.records], np.int64)
    req = request_ids(run)
    order = np.lexsort((np.asarray([r["s"] for r in run.records]), req))
    starts = np.flatnonzero(np.r_[True, req[order][1:] != req[order][:-1]])
    groups = np.split(order, starts[1:])  # the rows of each request, choice by choice, requests in time order
    by_distance: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    sizes: list[np.ndarray] = []
    for m in sorted({g.size for g in groups if g.size >= 2}):
        members = np.stack([g for g in groups if g.size == m])
        for d, pair in _offset_pairs(members).items():  # a distance's pairs from requests of every size
            by_distance.setdefault(d, []).append(pair)
        sizes.append(members)
    within = [(np.concatenate([x for x, _ in pairs]), np.concatenate([y for _, y in pairs]))
              for _, pairs in sorted(by_distance.items())]
    across = _request_pairs(groups, prompt)
    out: dict[str, list[TestResult]] = {"within": [], "across": [], "dispersion": []}
    for k in range(length):
        label = labels[:, k]
        if within:
            tests = [(x, y) for x, y in within]
            rate = false_fail_rate / (len(tests) * np.unique(prompt).size)
            parts = [t for x, y in tests for t in _pair_tests(label[x], label[y], prompt[x], rate)]
            out["within"].append(_combined(parts, false_fail_rate, f"{len(tests)} distances between the choices of a "
                                           f"request, each as disjoint pairs, per prompt"))
            out["dispersion"].append(dispersion_test(label, sizes, prompt, false_fail_rate))
        if across:
            rate = false_fail_rate / (len(across) * np.unique(prompt).size)
            parts = [t for x, y in across.values() for t in _pair_tests(label[x], label[y], prompt[x], rate)]
            out["across"].append(_combined(parts, false_fail_rate, "consecutive requests of a prompt, choice by choice, "
                                           f"at {len(across)} offsets ((0, 1), (2, 3), ... and (1, 2), (3, 4), ...), "
                                           "per prompt"))
    return out


def _combined(parts: list[TestResult], false_fail_rate: float, what: str) -> TestResult:
    """The row of one position: its tests Bonferroni-combined, its figure the worst test's. A test
    with pairs that pooled to one category (too few pairs, or one label nearly always) detects
    nothing, so the row states no figure then (inf), rather than one that holds for the others only."""
    result = combine_bonferroni(parts, "independence", false_fail_rate)
    pairs = sum(part.n for part in parts)
    with_pairs = [part for part in parts if part.n > 0]
    blind = sum(not (part.df and math.isfinite(part.min_detectable_tv)) for part in with_pairs)
    figure = max((part.min_detectable_tv if part.df else math.inf for part in with_pairs), default=math.inf)
    said = (f"a dependence of TV {figure:.3g} in any of them is caught with power {1 - DEFAULT_FALSE_PASS:g}"
            if math.isfinite(figure) else
            f"no figure: {blind} of its {len(with_pairs)} tests too small to detect any dependence at power "
            f"{1 - DEFAULT_FALSE_PASS:g} (their pairs pool to one category: too few pairs, or one label nearly "
            f"always); more samples a prompt give one")
    details = {**dict(result.details), "message": f"{what}: {pairs} pairs in {len(parts)} tests; {said}"}
    return TestResult(result.test, result.statistic, result.pvalue, pairs, result.false_fail_rate, figure,
                      result.df, details)


def honoured_row(run: ProbeRun, rate: float, where: str = "") -> ServerRow:
    """Whether the server honoured ``stop`` and ``max_tokens``: a sample whose text goes on after a stop
    string, or that lists more tokens than max_tokens, is one an exact server never gives, so one fails
    the row (p-value 0); its figure is the share of such samples caught with power 0.999."""
    params = run.header.get("params", {})
    stops = params.get("stop") or ()
    stops = (stops,) if isinstance(stops, str) else tuple(stops)
    length = _length(run)
    past_stop = sum(overran(r.get("text", ""), stops) for r in run.records) if stops else 0
    past_length = sum(len(r.get("token_ids") or r.get("tokens") or []) > length for r in run.records)
    n = len(run.records)
    figure = 1.0 - DEFAULT_FALSE_PASS ** (1.0 / n) if n else math.inf
    bad = past_stop + past_length
    asked = f"stop {list(stops)} and max_tokens {length}" if stops else f"max_tokens {length}"
    message = (f"{past_stop} samples go on after a stop string, {past_length} list more than {length} tokens: the "
               f"server did not honour the request ({asked})" if bad else
               f"every sample honoured {asked}; a share of {figure:.2g} of samples that did not would be caught with "
               f"power {1 - DEFAULT_FALSE_PASS:g}")
    result = TestResult("honoured", float(bad), 0.0 if bad else 1.0, n, rate, figure, 0, {"message": message})
    return ServerRow(result, "stop-and-length-honoured", where, "honoured")


def independence_count(run: ProbeRun) -> int:
    """How many independence rows :func:`_independence_rows` gives for ``run`` (the rate is shared before)."""
    multi = bool(run.header.get("capabilities", {}).get("n"))
    return _length(run) * (1 + 2 * multi)


# ---------------------------------------------------------------- two-sample


def two_sample(baseline: ProbeRun, candidate: ProbeRun, *, false_fail_rate: float = DEFAULT_FALSE_FAIL,
               target_tv: float = 0.1, tokenize: Tokenize | None = None, seed: int = 0) -> ServerCertificate:
    """Is the candidate (speculation on) drawing from the baseline's (speculation off) law?

    ``tokenize``: the served model's tokenizer, used where the server returns text only, so
    that positions are the model's tokens and no sample is called short that was not.
    """
    _require_samples(baseline, "the baseline")
    _require_samples(candidate, "the candidate")
    check_like_for_like(baseline, candidate)
    length = _length(candidate)
    kind = unit_kind(baseline, candidate, tokenize=tokenize)
    prompt, arm, seqs = encode([baseline, candidate], length, kind, tokenize)
    rate = false_fail_rate / (2 * length + 3 + independence_count(baseline) + independence_count(candidate))
    rng = np.random.default_rng(seed)
    joint = homogeneity(prompt, _rows(seqs), arm, false_fail_rate=rate, test=f"joint_first_{length}_tokens")
    n_prompts = len(baseline.header["prompts"])
    pilot = _pilot_law(prompt, _rows(seqs))
    rows = [ServerRow(joint, f"joint-first-{length}-tokens", "", "homogeneity",
                      min_num_samples_for_homogeneity(target_tv, pilot, groups=n_prompts, false_fail_rate=rate))]
    for k in range(length):
        context = _rows(prompt, seqs[:, :k]) if k else prompt
        reached = seqs[:, k] >= 0 if k else np.ones(len(seqs), bool)
        result = homogeneity(context[reached], seqs[reached, k], arm[reached], false_fail_rate=rate,
                             test="homogeneity")
        rows.append(ServerRow(result, "position-given-prefix", f"pos{k}", "homogeneity"))
        rows.append(ServerRow(_closeness_row(context[reached], seqs[reached, k], arm[reached], rate, rng),
                              "closeness-per-context", f"pos{k}", "closeness"))
    for a, run in enumerate((baseline, candidate)):
        rows += _independence_rows(run, rate, ("baseline", "candidate")[a])
        rows.append(honoured_row(run, rate, ("baseline", "candidate")[a]))
    notes = _same_notes(baseline, candidate) + truncation_note(baseline, kind, "baseline: ", tokenize) \
        + truncation_note(candidate, kind, "candidate: ", tokenize)
    return _certificate("two-sample", str(law_params(candidate)["model"]), rows, target_tv, kind, notes)


def _closeness_row(context: np.ndarray, token: np.ndarray, arm: np.ndarray, rate: float,
                   rng: np.random.Generator) -> TestResult:
    """Every context with :data:`MIN_CONTEXT_DRAWS` draws in each arm tested on its own (CDVV statistic,
    permutation level, or the Chernoff scan's proven level where the permutation cannot reach the rate),
    at ``rate`` shared among them; the figure is the worst context's, calibrated by simulation. Contexts
    with fewer draws are named in words."""
    cells, of = np.unique(np.stack([context, token]), axis=1, return_inverse=True)
    of = of.ravel()
    counts = np.zeros((2, cells.shape[1]), np.int64)
    np.add.at(counts, (arm, of), 1)
    groups, group_of = np.unique(cells[0], return_inverse=True)
    group_of = group_of.ravel()
    per_arm = np.zeros((2, groups.size), np.int64)
    np.add.at(per_arm, (slice(None), group_of), counts)
    heavy = np.flatnonzero(per_arm.min(axis=0) >= MIN_CONTEXT_DRAWS)
    few = int(((per_arm.min(axis=0) > 0) & (per_arm.min(axis=0) < MIN_CONTEXT_DRAWS)).sum())
    skipped = f"; {few} contexts reached by both arms with fewer than {MIN_CONTEXT_DRAWS} draws in one untested" \
        if few else ""
    if heavy.size == 0:
        return TestResult("closeness", 0.0, 1.0, 0, rate, math.inf, 0, {"message": (
            f"no per-context figure: no context has {MIN_CONTEXT_DRAWS} draws in each arm{skipped}")})
    each = rate / heavy.size
    results = [closeness(counts[0, group_of == g], counts[1, group_of == g], each, rng) for g in heavy]
    figures = np.asarray([r.figure for r in results])
    stated = np.isfinite(figures)
    pvalue = min(1.0, heavy.size * min(r.pvalue for r in results))
    n = int(per_arm[:, heavy].sum())
    small = (f"; {int((~stated).sum())} tested contexts too small for any figure (no TV detected at power "
             f"{1 - DEFAULT_FALSE_PASS:g} at their draws)" if (~stated).any() else "")
    if stated.any():
        worst = int(np.flatnonzero(stated)[np.argmax(figures[stated])])
        figure = float(figures[worst])
        said = (f"worst-case TV per context <= {figure:.3g} over {int(stated.sum())} contexts (calibrated by "
                f"simulation, not proven; worst at a context of {int(per_arm[0, heavy[worst]])} + "
                f"{int(per_arm[1, heavy[worst]])} draws)")
    else:
        figure, said = math.inf, "no per-context figure"
    permuted = replicates_for(each) <= MAX_REPLICATES
    level = (f"{replicates_for(each):,} permutation replicates, exact level" if permuted else
             f"Chernoff scan, proven level: {replicates_for(each):.3g} permutation replicates would be needed")
    message = (f"{heavy.size} contexts with {MIN_CONTEXT_DRAWS}+ draws an arm, each at false-fail {each:.2g} "
               f"({level}): {said}{small}{skipped}")
    return TestResult("closeness", float(max(r.statistic for r in results)), pvalue, n, rate, figure, 0,
                      {"contexts": float(stated.sum()), "message": message,
                       "false_fail_basis": "exact" if permuted else "proven"})


def _independence_rows(run: ProbeRun, rate: float, where: str = "") -> list[ServerRow]:
    """``independence_count(run)`` rows: per position, the choices of a request (pairs and the
    dispersion of per-request counts, where the server honours n) and consecutive requests, tested
    for dependence."""
    multi = bool(run.header.get("capabilities", {}).get("n"))
    results = independence_results(run, rate)
    rows = []
    for name, check in (("within", "choices-within-request-independent"),
                        ("dispersion", "choices-within-request-dispersion"), ("across", "requests-independent")):
        if name in ("within", "dispersion") and not multi:
            continue
        for k in range(_length(run)):
            found = results[name][k] if k < len(results[name]) else None
            if found is None:
                found = TestResult("independence", 0.0, 1.0, 0, rate, math.inf, 0,
                                   {"message": "fewer than two requests a prompt: nothing to test" if name == "across"
                                    else "one choice a request: nothing to test"})
            rows.append(ServerRow(found, check, f"{where}/pos{k}" if where else f"pos{k}",
                                  "dispersion" if name == "dispersion" else "independence"))
    return rows


def _pilot_law(group: np.ndarray, category: np.ndarray) -> np.ndarray:
    """The average over groups of each group's sorted category frequencies: a typical group's law."""
    cells, counts = np.unique(np.stack([group, category]), axis=1, return_counts=True)
    per_group = [np.sort(counts[cells[0] == g])[::-1] / counts[cells[0] == g].sum() for g in np.unique(cells[0])]
    width = max(len(p) for p in per_group)
    law = np.mean([np.pad(p, (0, width - len(p))) for p in per_group], axis=0)
    return law / law.sum()


# ---------------------------------------------------------------- one-sample, shared


def _position_rows(plan: ContextPlan, cells: np.ndarray, laws: np.ndarray, rate: float) -> list[ServerRow]:
    """Per position k: the cell drawn against the law at its context (prompt + the k tokens before),
    all contexts in one chi-square (directional: it adds power where contexts are many and small).

    ``cells[N, L]`` each draw's cell, ``laws[N, L, B]`` the law over the cells at that draw's
    context; draws whose context ``plan`` leaves untested (label −1) are left out.
    """
    rows = []
    for k in range(cells.shape[1]):
        reached = plan.label[:, k] >= 0
        labels, first = np.unique(plan.label[reached, k], return_index=True)
        context = np.searchsorted(labels, plan.label[reached, k])
        result = conditional_goodness_of_fit(context, cells[reached, k], laws[reached, k][first], false_fail_rate=rate)
        rows.append(ServerRow(result, "position-given-prefix", f"pos{k}", "conditional"))
    return rows


def _identity_rows(plan: ContextPlan, cells: np.ndarray, law_of, false_fail_rate: float, reserved: int,
                   target_tv: float, n_prompts: int, length: int, topk: bool,
                   seed: int) -> tuple[list[ServerRow], float, list[str]]:
    """An identity row per context that can state ``target_tv``, a worst-case row per prompt (the
    first L tokens' law, chain rule), the rate each test got, and a note naming the contexts too
    seldom reached for ``target_tv``."""
    rest_cell = int(np.asarray(law_of(0, 0)).size - 1) if topk else None
    short: list = []
    tested, rate = context_rows(plan, cells, law_of, false_fail_rate, target_tv, reserved=reserved,
                                rest_cell=rest_cell, seed=seed, short=short)
    over = "the top-k tokens and the rest as one cell" if topk else "the tokens and the lumped rest"
    rows = []
    for row in tested:
        result = row.result
        message = (f"worst-case TV {result.min_detectable_tv:.3g} over {over}, {row.full_tv:.3g} over the whole "
                   f"vocabulary (rest mass {row.rest:.2g}); the known law reaches this context with probability "
                   f"{row.mass:.3g}")
        result = TestResult(result.test, result.statistic, result.pvalue, result.n, result.false_fail_rate,
                            result.min_detectable_tv, result.df, {**dict(result.details or {}), "message": message})
        rows.append(ServerRow(result, "identity-at-context", f"prompt{row.prompt}/pos{row.position}/#{row.rank}",
                              "identity-topk" if topk else "identity"))
    for p in range(n_prompts):
        bound = joint_bound(tested, p, length, full=not topk)
        first = plan.label[:, 0]
        n = int(np.sum(plan.prompt[first[first >= 0]] == p))
        covered = ", ".join(f"pos{k} {coverage(tested, p, k):.0%}" for k in range(length))
        result = TestResult("joint_bound", bound, 1.0, n, 0.0, bound, None,
                            {"message": f"chain rule over the tested contexts; the known law's mass tested: {covered}"})
        rows.append(ServerRow(result, "first-tokens-law", f"prompt{p}", "joint-topk" if topk else "joint"))
    return rows, rate, _short_note(short, target_tv)


def _short_note(short: list, target_tv: float) -> list[str]:
    """The contexts reached often enough for a row but too seldom for the figure asked, named."""
    if not short:
        return []
    short = sorted(short, key=lambda s: -s[2])
    named = ", ".join(f"prompt{p}/pos{k} ({n} draws state {tv:.2g}; about {math.ceil(n * (tv / target_tv) ** 2)} "
                      f"would state {target_tv:g})" for p, k, n, tv in short[:5])
    return [f"{len(short)} contexts reached {MIN_CONTEXT_DRAWS}+ times are untested: too few draws to state TV "
            f"{target_tv:g} there (the chain-rule rows count them as TV 1; the draws needed scale as 1/TV²); the most "
            f"drawn: {named}" + (" ..." if len(short) > 5 else "")]


def _one_sample(mode: str, run: ProbeRun, kind: str, prompt: np.ndarray, seqs: np.ndarray, cells: np.ndarray,
                law_of, false_fail_rate: float, target_tv: float, notes: list[str],
                tokenize: Tokenize | None = None, laws: np.ndarray | None = None, seed: int = 0,
                chi_square: tuple[np.ndarray, np.ndarray] | None = None,
                usable: np.ndarray | None = None, refused_prompts: tuple[tuple[str, int], ...] = (),
                spell: Callable[[int, int], str] | None = None) -> ServerCertificate:
    """The one-sample certificate: identity rows per context and per prompt, then (where the laws are
    small enough to hold per draw: the logprobs mode) the directional chi-square per position, the PIT
    and the independence of draws; the false-fail rate is shared evenly over the tests."""
    length = seqs.shape[1]
    whole = plan_contexts(prompt, seqs)
    plan, unknown = refuse_contexts(whole, seqs != -2, below=True)
    if unknown:
        draws = int((seqs == -2).sum())
        notes = notes + [f"{unknown} contexts untested: {draws} samples generated a token there that the server did "
                         f"not return (a withheld or merged trailing token, a stop string), and that token could "
                         f"have belonged to any context under it; testing the others there would bias the law"]
    plan, refused = refuse_contexts(plan, usable if usable is not None else seqs != -2)
    if refused:
        notes = notes + [f"{refused} contexts untested: no draw there came back with the context's law (no top "
                         f"logprobs at that position, as llama.cpp gives none for accepted drafts), or the list names "
                         f"a partial character; the others' laws are shared by their draws, so none is biased"]
    named = tuple(refused_prompts) + _lost_contexts(whole, plan, seqs, spell)
    pit = _pit(plan, cells, law_of, seed)
    reserved = length + 2 + independence_count(run)  # the chi-square rows, the PIT, the honoured row
    rows, rate, short = _identity_rows(plan, cells, law_of, false_fail_rate, reserved, target_tv,
                                       len(run.header["prompts"]), length, laws is not None, seed)
    notes = notes + short
    rows += _position_rows(plan, *(chi_square if chi_square is not None else (cells, laws)), rate)
    rows.append(ServerRow(ks_uniformity(pit, false_fail_rate=rate, test="pit_ks"), "pit-probability-order", "",
                          "pit"))
    rows += _independence_rows(run, rate)
    rows.append(honoured_row(run, rate))
    notes = truncation_note(run, kind, tokenize=tokenize, mode=mode) + notes
    return _certificate(mode, str(law_params(run)["model"]), rows, target_tv, kind, notes, length, named)


def _lost_contexts(before: ContextPlan, after: ContextPlan, seqs: np.ndarray,
                   spell: Callable[[int, int], str] | None = None) -> tuple[tuple[str, int], ...]:
    """The contexts draws reached that the refusals left untested, named by their prompt, position and
    prefix (``spell(row, k)``: the first k tokens of sample ``row``; else its ids), with their draws."""
    size = before.prompt.size
    had = np.bincount(before.label[before.label >= 0], minlength=size)
    kept = np.bincount(after.label[after.label >= 0], minlength=size)
    lost = np.flatnonzero((had > 0) & (kept == 0))

    def name(c: int) -> str:
        k, row = int(before.position[c]), int(before.first[c])
        prefix = spell(row, k) if spell is not None else " ".join(str(int(t)) for t in seqs[row, :k])
        return f"prompt{int(before.prompt[c])}/pos{k}" + (f" after [{prefix}]" if k else "")
    return tuple((name(int(c)), int(had[c])) for c in lost)


def _pit(plan: ContextPlan, cells: np.ndarray, law_of, seed: int) -> np.ndarray:
    """Randomized PIT of every reached draw, each context's cells ordered by probability (largest first)."""
    uniforms = np.random.default_rng(seed).random(cells.shape)
    out = np.full(cells.shape, np.nan)
    for c in range(plan.prompt.size):
        k = int(plan.position[c])
        members = np.flatnonzero(plan.label[:, k] == c)
        if members.size == 0:  # left untested
            continue
        law = np.asarray(law_of(int(plan.first[c]), k), np.float64)
        law = law / law.sum()
        order = np.argsort(-law, kind="stable")
        before = np.empty_like(law)
        before[order] = np.cumsum(law[order]) - law[order]
        x = cells[members, k]
        out[members, k] = before[x] + uniforms[members, k] * law[x]
    return np.clip(out[plan.label >= 0], 0.0, 1.0)  # cumulative sums may pass 1 by a rounding error


# ---------------------------------------------------------------- one-sample: the server's logprobs


def logprob_cells(run: ProbeRun, eos: Sequence[str] = ()) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                                  np.ndarray, str | None]:
    """(prompt[N], seqs[N, L], cells[N, L], laws[N, L, K+1], usable[N, L], end) from the server's
    top-k logprobs; ``usable`` is False where a position came back without its top logprobs.

    A context's law is the top-k the server reported at the first draw that reached it (every
    draw of a context must see the same law), the last cell the remainder (any other token,
    of probability 1 − Σ top); cell j < K is that list's j-th token, matched by name. Positions
    past a sample's end have seqs −1. A sample that stopped at an end of sequence before L
    tokens without listing it drew the end at the position it stopped: placed by the end
    token's name (``eos``, else :func:`end_token`'s guess, ``end``), in the remainder where
    the context's list does not name it. A sample cut short otherwise (a withheld trailing
    token) has −2 there: a token generated, not known.
    """
    records = [r for r in run.records if "tokens" in r]
    length = _length(run)
    stop_strings = _stop_strings(run)
    stops = text_stops(run)  # stop strings whose stops are draws here: tokens named as text
    k = max((len(row) for r in records for row in r.get("top", [])), default=0)
    if k == 0:
        raise InputFileError("the run's top logprobs are empty: probe with --top-logprobs K >= 1")
    n = len(records)
    vocab: dict[str, int] = {}
    seqs = np.full((n, length), -1, np.int64)
    names: list[list[list[str]]] = []
    drawn: list[list[str | None]] = []
    laws = np.zeros((n, length, k + 1))
    usable = np.ones((n, length), bool)
    ends = set(eos) or listed_end(records, length, stop_strings)
    for i, r in enumerate(records):
        row_names, row_drawn = [], list(r["tokens"][:length])
        cut = first_stop(row_drawn, stops) if stops and r.get("finish") == "stop" else None
        row_drawn = row_drawn if cut is None else row_drawn[:cut]  # listed past the stop: not draws
        for j, token in enumerate(row_drawn):
            top = r.get("top", [])[j] if j < len(r.get("top", [])) else []
            usable[i, j] = bool(top)  # this draw reported its context's law
            top = sorted(top, key=lambda tl: -tl[1])[:k]
            row_names.append([t for t, _ in top])
            probs = np.exp(np.asarray([lp for _, lp in top], np.float64))
            laws[i, j, :len(top)] = probs
            laws[i, j, k] = max(0.0, 1.0 - probs.sum())
            seqs[i, j] = vocab.setdefault(token, len(vocab))
        if len(row_drawn) < length and not (row_drawn and row_drawn[-1] in ends):
            j = len(row_drawn)
            usable[i, j] = False  # its law comes from another draw at the context
            if stopped_at_end(r, stop_strings) or (stops and r.get("finish") == "stop"):
                row_drawn.append(END)
                seqs[i, j] = vocab.setdefault(END, len(vocab))
            else:
                row_drawn.append(None)
                seqs[i, j] = -2
            row_names.append([])
        names.append(row_names)
        drawn.append(row_drawn)
    laws /= np.where(laws.sum(axis=2, keepdims=True) > 0, laws.sum(axis=2, keepdims=True), 1.0)
    prompt = np.asarray([r["p"] for r in records], np.int64)
    plan = plan_contexts(prompt, seqs)
    cells = np.zeros((n, length), np.int64)
    reported = usable.copy()
    source = np.full(plan.prompt.size, -1)
    for c in range(plan.prompt.size):  # each context's law: the top-k of a draw that reported it
        pos = int(plan.position[c])
        members = np.flatnonzero(plan.label[:, pos] == c)
        with_law = members[reported[members, pos]]
        # a law is the context's, not the draw's: draws that came back without it are placed by name,
        # unless the list names a partial character ("\ufffd"), which a merged entry could hide behind
        if with_law.size == 0 or any("\ufffd" in t for t in names[with_law[0]][pos]):
            usable[members, pos] = False
            continue
        usable[members, pos] = True
        source[c] = with_law[0]
        laws[members, pos] = laws[with_law[0], pos]
    end = next(iter(sorted(ends)), None) or end_token(plan, source, names, drawn, laws)
    for c in np.flatnonzero(source >= 0):
        pos = int(plan.position[c])
        members = np.flatnonzero(plan.label[:, pos] == c)
        top = names[source[c]][pos]
        lookup = {t: j for j, t in enumerate(top)}
        if stops:  # the stop is a cell: the stoppers, the end and any unlisted token (which may stop too)
            head = "".join(drawn[source[c]][:pos])
            stopper, unclean = split_next(head, [head + t for t in top], stops)
            if unclean:  # a stop string could span draws here: not testable without bias
                usable[members, pos] = False
                continue
            merged = [j for j, t in enumerate(top) if stopper[j] or t == end]
            laws[members, pos, k] += laws[members][:, pos][:, merged].sum(axis=1)
            laws[np.ix_(members, [pos], merged)] = 0.0
            lookup = {t: j for t, j in lookup.items() if j not in merged}
        cells[members, pos] = [lookup.get(end if drawn[i][pos] == END else drawn[i][pos], k) for i in members]
    return prompt, seqs, cells, laws, usable, end


def listed_end(records: list[dict[str, Any]], length: int, stop_strings: bool) -> set[str]:
    """The end token's name where the server lists it (vLLM lists the end as a sample's last
    token): the one name every sample that stopped short ends on, and that no sample has
    anywhere else; else empty (the server leaves the end out)."""
    stopped = [r["tokens"] for r in records if stopped_at_end(r, stop_strings) and len(r["tokens"]) <= length]
    last = {t[-1] if t else None for t in stopped}
    if len(last) != 1 or None in last:
        return set()
    name = last.pop()
    inside = any(name in r["tokens"][:-1] or (name in r["tokens"] and r.get("finish") != "stop") for r in records)
    return set() if inside else {name}


def end_token(plan: ContextPlan, source: np.ndarray, names: list, drawn: list, laws: np.ndarray) -> str | None:
    """The end-of-sequence token's name, guessed where the server never lists it: among the names
    the top-k lists hold but no sample ever drew, the one most likely to have given the ends
    drawn (Σ log of its reported probability at each end's context, the remainder where a
    list does not name it), or None (the remainder) where none beats the remainder."""
    listed = {t for row in drawn for t in row if isinstance(t, str) and t != END}
    ended = []  # (stops, names, law) at each context where samples ended
    for c in np.flatnonzero(source >= 0):
        pos = int(plan.position[c])
        members = np.flatnonzero(plan.label[:, pos] == c)
        stops = sum(drawn[i][pos] == END for i in members)
        if stops:
            ended.append((stops, names[source[c]][pos], laws[source[c], pos]))
    candidates = [None, *sorted({t for _, top, _ in ended for t in top} - listed)]
    def score(t):
        return sum(stops * math.log(max(law[top.index(t)] if t in top else law[-1], 1e-300))
                   for stops, top, law in ended)
    scores = {t: score(t) for t in candidates}
    return max(candidates, key=lambda t: (scores[t], t is None))


def _refused_note(bad: np.ndarray, why: str) -> list[str]:
    """One note naming the prompts refused and how many samples made them so."""
    prompts = np.flatnonzero(bad)
    if prompts.size == 0:
        return []
    named = ", ".join(f"prompt{p} ({bad[p]})" for p in prompts[:8]) + (" ..." if prompts.size > 8 else "")
    return [f"{prompts.size} prompts refused, every context of theirs untested: {named} {why}"]


def _without_prompts(run: ProbeRun, bad: np.ndarray) -> ProbeRun:
    """The run with the samples of the prompts marked bad left out."""
    return ProbeRun(run.header, [r for r in run.records if not bad[r["p"]]], run.path)


def one_sample_logprobs(run: ProbeRun, *, false_fail_rate: float = DEFAULT_FALSE_FAIL, target_tv: float = 0.1,
                        seed: int = 0, eos_tokens: Sequence[str] = ()) -> ServerCertificate:
    """Each context's draws against the server's own top-k law (no baseline run).

    ``eos_tokens``: how the server names its end-of-sequence token in the top logprobs (default:
    guessed, :func:`end_token`), where a sample that stopped before L tokens drew it."""
    _require_samples(run, "the run")
    if not any("top" in r for r in run.records):  # a server that ignores the request: say so, not "no samples"
        raise InputFileError("the run has no top logprobs: probe with --top-logprobs K on a server that returns them")
    stop_strings = _stop_strings(run)
    records = [{**r, "tokens": []} if "tokens" not in r and not r["text"] and stopped_at_end(r, stop_strings) else r
               for r in run.records]  # stopped at once: nothing to list
    run = ProbeRun(run.header, records, run.path)
    missing = np.bincount([r["p"] for r in run.records if "tokens" not in r], minlength=len(run.header["prompts"]))
    whole = _prompt_draws(run, missing > 0)
    if missing.any():  # a sample without its tokens cannot be placed in any context: its prompt is refused
        run = _without_prompts(run, missing > 0)
        _require_samples(run, "the run, once the prompts with samples without logprobs are refused,")
    prompt, seqs, cells, laws, usable, end = logprob_cells(run, eos_tokens)
    def law_of(i, k):
        return laws[i, k]
    notes = ["logprobs must be those of the sampled distribution (after temperature/top-k/top-p): every row holds "
             "against the law the server reports, which this mode takes on trust (cross-check it: compare --mode "
             "logprobs with --reference MODEL_DIR or --baseline OFF.jsonl)"]
    ended = int(sum(stopped_at_end(r, stop_strings) and len(r["tokens"]) < seqs.shape[1]
                    and not (r["tokens"] and r["tokens"][-1] == end) for r in run.records))
    if ended:
        how = "as given" if eos_tokens else "guessed: the name the lists hold, no sample drew, most likely to end them"
        notes.append(f"{ended} samples stopped at an end of sequence without listing it: each end is a draw of "
                     + (f"{end!r} ({how})" if end is not None else "the remainder cell (no listed name fits better)")
                     + " at the position it stopped; --eos-token NAME says which name it is")
    refused = _refused_note(missing, "samples without logprobs (whether a sample lacks them may depend on its "
                            "tokens: testing the rest would bias the law)")
    kind = "ids" if unit_kind(run) == "ids" else "tokens"
    tokens = [r["tokens"] for r in run.records if "tokens" in r]  # the rows of seqs, in order
    try:
        return _one_sample("logprobs", run, kind, prompt, seqs, cells, law_of, false_fail_rate, target_tv,
                           refused + notes, laws=laws, seed=seed, usable=usable, refused_prompts=whole,
                           spell=lambda row, k: " ".join(map(str, tokens[row][:k])))
    except InputFileError as exc:
        if not (_stop_strings(run) and not text_stops(run)):
            raise
        raise InputFileError(f"{exc} (the run asked for stop strings, and its token names do not join into the "
                             f"sample texts (token_id:N, or words): a stop cannot be placed, so the contexts where "
                             f"samples stopped are untested; compare --reference MODEL_DIR places it by token id)") \
            from None


def _prompt_draws(run: ProbeRun, bad: np.ndarray) -> tuple[tuple[str, int], ...]:
    """The prompts refused whole, named, with their samples (draws at the first position)."""
    counts = np.bincount([r["p"] for r in run.records], minlength=bad.size)
    return tuple((f"prompt{p} (every position)", int(counts[p])) for p in np.flatnonzero(bad))


# ---------------------------------------------------------------- one-sample: a local reference model


def one_sample_reference(run: ProbeRun, law: Callable[[ProbeRun], tuple], *,
                         false_fail_rate: float = DEFAULT_FALSE_FAIL, target_tv: float = 0.1,
                         seed: int = 0) -> ServerCertificate:
    """Test the samples against exact per-position laws from a reference model.

    ``law(run)`` gives ``(prompt[N], tokens[N, L], probs[N, L, V])`` (each sample's token ids,
    −1 past its end, and the reference's sampling law at each of its positions, by teacher
    forcing), or ``(prompt, tokens, index[N, L], table[C, V])`` with the laws stored once per
    distinct context (``probs[i, k] = table[index[i, k]]``).
    """
    _require_samples(run, "the run")
    out = law(run)
    if len(out) == 3:
        prompt, tokens, probs = out
        index, table = np.arange(tokens.size).reshape(tokens.shape), np.asarray(probs).reshape(tokens.size, -1)
        mismatched = np.zeros(len(run.header["prompts"]), np.int64)
    else:
        prompt, tokens, index, table, mismatched = out
    keep = mismatched[prompt] == 0  # a prompt with samples that re-tokenise differently is refused whole
    if not keep.any():
        raise InputFileError(f"every prompt has samples whose text re-tokenises to more than "
                             f"{tokens.shape[1]} tokens: nothing can be tested without bias")
    prompt, tokens, index = prompt[keep], tokens[keep], index[keep]
    cells = np.where(tokens >= 0, tokens, 0)
    usable = tokens != -2  # -2: generated, but the server did not list it (a withheld partial character)
    def law_of(i, k):
        return table[index[i, k]]
    top_cells, top_laws = _heaviest(plan_contexts(prompt, tokens), cells, law_of)
    tokenize = getattr(law, "tokenize", None)  # a reference model counts in its own tokens
    kind = "ids" if unit_kind(run) == "ids" else "model tokens" if tokenize else "words"
    notes = _refused_note(mismatched, "samples whose text re-tokenises to more than L tokens (the server's tokens "
                          "are not known: testing the rest would bias the law)")
    return _one_sample("reference", run, kind, prompt, tokens, cells, law_of, false_fail_rate, target_tv,
                       notes, tokenize, seed=seed, chi_square=(top_cells, top_laws), usable=usable,
                       refused_prompts=_prompt_draws(run, mismatched > 0))


#: The reference law's heaviest tokens per context kept for the directional chi-square (the rest: one cell).
CHI_SQUARE_TOKENS = 64


def _heaviest(plan: ContextPlan, cells: np.ndarray, law_of) -> tuple[np.ndarray, np.ndarray]:
    """(cells[N, L], laws[N, L, M+1]): each draw's cell among its context's M heaviest tokens
    (M: the last cell, the rest), and that lumped law: a vocabulary-sized law held once per draw
    would not fit."""
    m = CHI_SQUARE_TOKENS
    out_cells = np.zeros(cells.shape, np.int64)
    out_laws = np.zeros((*cells.shape, m + 1))
    for c in range(plan.prompt.size):
        k = int(plan.position[c])
        members = plan.label[:, k] == c
        law = np.asarray(law_of(int(plan.first[c]), k), np.float64)
        law = law / law.sum()
        head = np.argsort(-law, kind="stable")[:m]
        lumped = np.zeros(m + 1)
        lumped[:head.size] = law[head]
        lumped[m] = max(0.0, 1.0 - lumped[:m].sum())
        where = np.full(law.size, m)
        where[head] = np.arange(head.size)
        out_cells[members, k] = where[cells[members, k]]
        out_laws[members, k] = lumped
    return out_cells, out_laws


def cross_checked(run: ProbeRun, *, law: Callable[[ProbeRun], tuple] | None = None, baseline: ProbeRun | None = None,
                  false_fail_rate: float = DEFAULT_FALSE_FAIL, target_tv: float = 0.1, seed: int = 0,
                  eos_tokens: Sequence[str] = ()) -> ServerCertificate:
    """The logprobs mode, with the reported law cross-checked: the same samples also against a
    reference model's law (``law``), or against a run with speculation off (``baseline``), each
    half at half the false-fail rate, in one certificate. A server that samples and reports one
    wrong law (colder, say) passes the logprobs rows and fails the cross-check's."""
    if (law is None) == (baseline is None):
        raise InputFileError("a cross-check needs one of a reference model or a baseline run")
    half = false_fail_rate / 2
    own = one_sample_logprobs(run, false_fail_rate=half, target_tv=target_tv, seed=seed, eos_tokens=eos_tokens)
    other = (one_sample_reference(run, law, false_fail_rate=half, target_tv=target_tv, seed=seed) if law is not None
             else two_sample(baseline, run, false_fail_rate=half, target_tv=target_tv))
    frame = other.frame.copy()
    frame["check"] = f"{CROSS[other.mode]}:" + frame["check"]
    merged = Certificate(pd.concat([own.frame, frame], ignore_index=True))
    notes = [*own.notes, *(f"{CROSS[other.mode]}: {note}" for note in other.notes),
             f"the reported law cross-checked: the rows named {CROSS[other.mode]}:... test the same samples against "
             f"{_AGAINST[other.mode]}, each half at false-fail {half:.1g}"]
    return ServerCertificate("logprobs", merged, target_tv, own.unit, tuple(notes), own.length)


#: The prefix of a cross-check's rows, by the mode that made them.
CROSS = {"reference": "cross-check-reference", "two-sample": "cross-check-baseline"}


def run_mode(mode: str, **kwargs) -> ServerCertificate:
    """Dispatch by mode name, refusing unknown ones with the valid choices."""
    table = {"two-sample": two_sample, "logprobs": one_sample_logprobs, "reference": one_sample_reference}
    if mode not in table:
        raise InputFileError(f"invalid mode {mode!r}; valid modes are {', '.join(MODES)}")
    return table[mode](**kwargs)
