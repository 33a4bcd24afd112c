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

from specgauge.errors import InputFileError
from specgauge.stattests.core.certificate import Certificate, certificate_row
from specgauge.stattests.core.statistics import (DEFAULT_FALSE_FAIL, DEFAULT_FALSE_PASS, TestResult,
                                                 combine_bonferroni, independence_test, ks_uniformity,
                                                 pit_values)
from specgauge.stattests.server.probe import ProbeRun
from specgauge.stattests.server.stats import (conditional_goodness_of_fit, homogeneity,
                                              min_num_samples_for_conditional_fit, min_num_samples_for_homogeneity)

MODES = ("two-sample", "logprobs", "reference")
#: The request fields that decide the sampled law: two runs compared must agree on all of them.
LAW_FIELDS = ("model", "temperature", "top_p", "top_k", "min_p", "max_tokens", "stop", "top_logprobs")
#: What each server test's detectable figure bounds (the certificate's ``detectable`` column).
DETECTABLE = {
    "conditional": "sample-weighted RMS over contexts (prompt + emitted prefix) of the TV between binned laws "
                   "(top tokens + remainder)",
    "homogeneity": "sample-weighted mean over contexts of the TV between the arms' binned laws",
    "pit": "not a TV: a KS distance of the randomized PIT along the probability order",
    "independence": "TV of a request's pooled joint of two choices from the product of its margins",
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

    @property
    def passed(self) -> bool:
        return self.certificate.passed

    @property
    def frame(self):
        return self.certificate.frame

    def verdict(self) -> str:
        """One PASS or FAIL line; a FAIL quotes the failing check's own p-value."""
        f = self.frame
        total = float(f["false_fail_rate"].sum())
        what = _WHAT[self.mode]
        kinds = f["detectable"].map(_KIND)
        failed = f[f["verdict"] == "fail"]
        if not failed.empty:
            first = failed.iloc[0]
            tv = float(first["observed"])
            size = (f"measured TV {tv:.3g}, " if _KIND[first["detectable"]] in ("conditional", "homogeneity")
                    and math.isfinite(tv) else f"statistic {float(first['statistic']):.4g}, ")
            where = f"[{first['position']}]" if first["position"] else ""
            return (f"FAIL ({self.mode}: {what}): {', '.join(dict.fromkeys(failed['check']))} rejected exactness "
                    f"at false-fail {total:.1g} ({first['check']}{where}: {size}p-value {float(first['pvalue']):.3g})")
        tv_rows = f[kinds.isin(("conditional", "homogeneity")) & (f["verdict"] == "pass")]
        head = tv_rows.iloc[0] if not tv_rows.empty else f.iloc[0]
        untested = [f"{c}[{p}]" if p else c for c, p in f.loc[f["verdict"] == "untested", ["check", "position"]].values]
        gap = f"; untested (no sample reached them): {', '.join(untested)}" if untested else ""
        where = f"[{head['position']}]" if head["position"] else ""
        return (f"PASS ({self.mode}: {what}): no discrepancy found at false-fail {total:.1g}; {head['check']}{where} "
                f"could detect {_SHORT[_KIND[head['detectable']]]} >= {float(head['min_detectable_tv']):.3g} with "
                f"power {1 - DEFAULT_FALSE_PASS:g} (n {int(head['n'])}, tokens as {self.unit}){gap}")


_KIND = {text: kind for kind, text in DETECTABLE.items()}
_SHORT = {"conditional": "a binned TV (RMS over contexts)", "homogeneity": "a TV (mean over contexts)",
          "pit": "a KS distance (not a TV)", "independence": "a dependence TV"}


def _certificate(mode: str, decoder: str, rows: list[ServerRow], target_tv: float, unit: str,
                 notes: list[str]) -> ServerCertificate:
    laws = [row for row in rows if row.kind in ("conditional", "homogeneity", "identity")]
    if not any(row.result.n > 0 and row.result.df != 0 for row in laws):
        raise InputFileError(f"no context could be tested ({mode}): too few samples reach any context to compare "
                             "laws; a certificate of zero samples would be vacuous, so none is written")
    built = []
    for row in rows:
        result = row.result
        if row.needed is not None:
            details = {**dict(result.details or {}),
                       "message": f"{row.needed} samples per prompt detect TV {target_tv:g} here"}
            result = TestResult(result.test, result.statistic, result.pvalue, result.n, result.false_fail_rate,
                                result.min_detectable_tv, result.df, details)
        out = certificate_row(decoder, row.check, "exactness", mode, row.position, result)
        out["detectable"] = DETECTABLE[row.kind]
        built.append(out)
    return ServerCertificate(mode, Certificate.from_rows(built), target_tv, unit, tuple(notes))


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
        return list(record["token_ids"])
    if kind == "tokens":
        return list(record["tokens"])
    if kind == "model tokens":
        return list(tokenize(record["text"]))
    return record["text"].split()


def unit_kind(*runs: ProbeRun, tokenize: Tokenize | None = None) -> str:
    """The finest token record every run has: server token ids, token strings, the served model's
    tokens re-counted from the text (with ``tokenize``), or whitespace words."""
    records = [r for run in runs for r in run.records]
    if records and all("token_ids" in r for r in records):
        return "ids"
    if records and all("tokens" in r for r in records):
        return "tokens"
    return "model tokens" if tokenize is not None else "words"


def encode(runs: list[ProbeRun], length: int, kind: str,
           tokenize: Tokenize | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prompt, arm, sequences[N, length]) with tokens mapped to integers, -1 past the end."""
    vocab: dict[Any, int] = {}
    prompt, arm, seqs = [], [], []
    for a, run in enumerate(runs):
        for r in run.records:
            units = _units(r, kind, tokenize)[:length]
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


def truncation_note(run: ProbeRun, kind: str, name: str = "", tokenize: Tokenize | None = None) -> list[str]:
    """Samples with fewer than L tokens: how many, why, and what the tests did with them."""
    length = _length(run)
    short = [r for r in run.records if len(_units(r, kind, tokenize)) < length]
    if not short:
        return []
    capped = sum(r.get("finish") == "length" for r in short)
    if capped and kind in ("words", "model tokens"):  # the server counted max_tokens of its own tokens
        why = (f"{capped} with finish_reason 'length': the server generated max_tokens {length} of its tokens "
               f"but the text counts fewer {kind} (it re-tokenises differently), so they were not capped; ")
    else:
        why = (f"{capped} with finish_reason 'length': the server capped them below max_tokens {length}; "
               if capped else "")
    return [f"{name}{len(short)} of {len(run.records)} samples cut short (fewer than {length} tokens; {why}"
            f"the rest stopped early); each position is tested on the samples that reach it, and "
            f"positions no sample reaches are untested"]


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


def within_request_independence(run: ProbeRun, seqs: np.ndarray, prompt: np.ndarray,
                                false_fail_rate: float) -> TestResult | None:
    """The choices of a request independent, per prompt, on disjoint pairs (None: no request had two)."""
    req = request_ids(run)
    order = np.lexsort((np.arange(req.size), req))
    req_sorted = req[order]
    starts = np.flatnonzero(np.r_[True, req_sorted[1:] != req_sorted[:-1]])
    sizes = np.diff(np.r_[starts, req_sorted.size])
    # disjoint pairs (0, 1), (2, 3), ... of each request: independent draws of (X, Y) under the null
    pair_start = np.concatenate([starts[i] + np.arange(0, sizes[i] - 1, 2) for i in range(starts.size)])
    if pair_start.size == 0:
        return None
    first, second = order[pair_start], order[pair_start + 1]
    multi = np.unique(req[first])
    label = seqs[:, 0]  # the first token: the coarsest label, so the fewest categories are pooled away
    prompts = np.unique(prompt[first])
    rate = false_fail_rate / prompts.size
    parts = [independence_test(label[first][prompt[first] == p], label[second][prompt[first] == p],
                               false_fail_rate=rate) for p in prompts]
    result = combine_bonferroni(parts, "independence", false_fail_rate)
    details = {**dict(result.details), "requests": float(multi.size),
               "message": f"{multi.size} requests with several choices: the first tokens of {first.size} disjoint pairs "
                          "of choices tested for independence"}
    return TestResult(result.test, result.statistic, result.pvalue, result.n, result.false_fail_rate,
                      result.min_detectable_tv, result.df, details)


# ---------------------------------------------------------------- two-sample


def two_sample(baseline: ProbeRun, candidate: ProbeRun, *, false_fail_rate: float = DEFAULT_FALSE_FAIL,
               target_tv: float = 0.1, tokenize: Tokenize | None = None) -> ServerCertificate:
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
    multi = [a for a, run in enumerate((baseline, candidate)) if run.header.get("capabilities", {}).get("n")]
    rate = false_fail_rate / (length + 1 + len(multi))
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
    for a in multi:
        rows += _independence_rows((baseline, candidate)[a], seqs[arm == a], prompt[arm == a], rate,
                                   ("baseline", "candidate")[a])
    notes = _same_notes(baseline, candidate) + truncation_note(baseline, kind, "baseline: ", tokenize) \
        + truncation_note(candidate, kind, "candidate: ", tokenize)
    return _certificate("two-sample", str(law_params(candidate)["model"]), rows, target_tv, kind, notes)


def _independence_rows(run: ProbeRun, seqs: np.ndarray, prompt: np.ndarray, rate: float,
                       where: str = "") -> list[ServerRow]:
    result = within_request_independence(run, seqs, prompt, rate)
    if result is None:
        result = TestResult("independence", 0.0, 1.0, 0, rate, math.inf, 0,
                            {"message": "one choice a request: nothing to test"})
    return [ServerRow(result, "choices-within-request-independent", where, "independence")]


def _pilot_law(group: np.ndarray, category: np.ndarray) -> np.ndarray:
    """The average over groups of each group's sorted category frequencies: a typical group's law."""
    cells, counts = np.unique(np.stack([group, category]), axis=1, return_counts=True)
    per_group = [np.sort(counts[cells[0] == g])[::-1] / counts[cells[0] == g].sum() for g in np.unique(cells[0])]
    width = max(len(p) for p in per_group)
    law = np.mean([np.pad(p, (0, width - len(p))) for p in per_group], axis=0)
    return law / law.sum()


# ---------------------------------------------------------------- one-sample, shared


def _position_rows(prompt: np.ndarray, seqs: np.ndarray, cells: np.ndarray, laws: np.ndarray, rate: float,
                   target_tv: float, n_prompts: int) -> list[ServerRow]:
    """Per position k: the cell drawn against the law at its context (prompt + the k tokens before).

    ``seqs[N, L]`` the emitted tokens as integers (-1 past the end), ``cells[N, L]`` each
    draw's cell, ``laws[N, L, B]`` the law over the cells at that draw's context.
    """
    rows = []
    length = seqs.shape[1]
    for k in range(length):
        reached = seqs[:, k] >= 0
        context = (_rows(prompt, seqs[:, :k]) if k else prompt)[reached]
        labels, first = np.unique(context, return_index=True)
        context = np.searchsorted(labels, context)
        law = laws[reached, k][first]
        result = conditional_goodness_of_fit(context, cells[reached, k], law, false_fail_rate=rate)
        bins = int(np.median((law > 0).sum(axis=1))) if law.size else 1
        needed = min_num_samples_for_conditional_fit(target_tv, bins, contexts=n_prompts, false_fail_rate=rate) \
            if k == 0 else None
        rows.append(ServerRow(result, "position-given-prefix", f"pos{k}", "conditional", needed))
    return rows


def _one_sample(mode: str, run: ProbeRun, kind: str, prompt: np.ndarray, seqs: np.ndarray, cells: np.ndarray,
                laws: np.ndarray, pit: np.ndarray, false_fail_rate: float, target_tv: float,
                notes: list[str], tokenize: Tokenize | None = None) -> ServerCertificate:
    multi = bool(run.header.get("capabilities", {}).get("n"))
    length = seqs.shape[1]
    rate = false_fail_rate / (length + 1 + multi)
    rows = _position_rows(prompt, seqs, cells, laws, rate, target_tv, len(run.header["prompts"]))
    rows.append(ServerRow(ks_uniformity(pit, false_fail_rate=rate, test="pit_ks"), "pit-probability-order", "",
                          "pit"))
    if multi:
        rows += _independence_rows(run, seqs, prompt, rate)
    notes = truncation_note(run, kind, tokenize=tokenize) + notes
    return _certificate(mode, str(law_params(run)["model"]), rows, target_tv, kind, notes)


def _pit(cells: np.ndarray, laws: np.ndarray, reached: np.ndarray, seed: int) -> np.ndarray:
    """Randomized PIT of every reached draw, the cells ordered by probability (largest first)."""
    flat_laws = laws[reached]
    flat_cells = cells[reached]
    rng = np.random.default_rng(seed)
    return pit_values(flat_cells, flat_laws, rng.random(flat_cells.size), sort_key=-flat_laws)


# ---------------------------------------------------------------- one-sample: the server's logprobs


def logprob_cells(run: ProbeRun) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(prompt[N], seqs[N, L], cells[N, L], laws[N, L, K+1]) from the server's top-k logprobs.

    Cell j < K is the j-th most likely of the K top tokens reported at that draw; cell K is
    the remainder (any other token), of probability 1 − Σ top. Positions past a sample's
    end have seqs −1.
    """
    records = [r for r in run.records if "top" in r and "tokens" in r]
    if not records:
        raise InputFileError("the run has no top logprobs: probe with --top-logprobs K on a server that returns them")
    if len(records) < len(run.records):
        raise InputFileError(f"{len(run.records) - len(records)} of {len(run.records)} samples have no top logprobs: "
                          "the logprobs mode needs them on every sample")
    length = _length(run)
    k = max((len(row) for r in records for row in r["top"]), default=0)
    if k == 0:
        raise InputFileError("the run's top logprobs are empty: probe with --top-logprobs K >= 1")
    n = len(records)
    vocab: dict[str, int] = {}
    seqs = np.full((n, length), -1, np.int64)
    cells = np.zeros((n, length), np.int64)
    laws = np.zeros((n, length, k + 1))
    for i, r in enumerate(records):
        for j, (token, top) in enumerate(list(zip(r["tokens"], r["top"]))[:length]):
            top = sorted(top, key=lambda tl: -tl[1])[:k]
            names = [t for t, _ in top]
            probs = np.exp(np.asarray([lp for _, lp in top], np.float64))
            laws[i, j, :len(top)] = probs
            laws[i, j, k] = max(0.0, 1.0 - probs.sum())
            cells[i, j] = names.index(token) if token in names else k
            seqs[i, j] = vocab.setdefault(token, len(vocab))
    laws /= np.where(laws.sum(axis=2, keepdims=True) > 0, laws.sum(axis=2, keepdims=True), 1.0)
    return np.asarray([r["p"] for r in records], np.int64), seqs, cells, laws


def one_sample_logprobs(run: ProbeRun, *, false_fail_rate: float = DEFAULT_FALSE_FAIL, target_tv: float = 0.1,
                        seed: int = 0) -> ServerCertificate:
    """Each position given its prefix against the server's own top-k law (no baseline run)."""
    _require_samples(run, "the run")
    prompt, seqs, cells, laws = logprob_cells(run)
    pit = _pit(cells, laws, seqs >= 0, seed)
    note = "logprobs must be those of the sampled distribution (after temperature/top-k/top-p)"
    return _one_sample("logprobs", run, "tokens", prompt, seqs, cells, laws, pit, false_fail_rate, target_tv,
                       [note])


# ---------------------------------------------------------------- one-sample: a local reference model


def one_sample_reference(run: ProbeRun, law: Callable[[ProbeRun], tuple[np.ndarray, np.ndarray, np.ndarray]], *,
                         false_fail_rate: float = DEFAULT_FALSE_FAIL, target_tv: float = 0.1,
                         seed: int = 0) -> ServerCertificate:
    """Test the samples against exact per-position laws from a reference model.

    ``law(run) -> (prompt[N], tokens[N, L], probs[N, L, V])``: each sample's token ids (−1
    past its end) and the reference's sampling law at each of its positions (teacher forcing).
    """
    _require_samples(run, "the run")
    prompt, tokens, probs = law(run)
    reached = tokens >= 0
    cells = np.where(reached, tokens, 0)
    pit = _pit(cells, probs, reached, seed)
    tokenize = getattr(law, "tokenize", None)  # a reference model counts in its own tokens
    kind = "ids" if unit_kind(run) == "ids" else "model tokens" if tokenize else "words"
    left_out = len(run.records) - len(prompt)
    notes = [f"{left_out} of {len(run.records)} samples left out: their text re-tokenises differently from how "
             "it was sampled"] if left_out else []
    return _one_sample("reference", run, kind, prompt, tokens, cells, probs, pit, false_fail_rate, target_tv, notes,
                       tokenize)


def run_mode(mode: str, **kwargs) -> ServerCertificate:
    """Dispatch by mode name, refusing unknown ones with the valid choices."""
    table = {"two-sample": two_sample, "logprobs": one_sample_logprobs, "reference": one_sample_reference}
    if mode not in table:
        raise InputFileError(f"invalid mode {mode!r}; valid modes are {', '.join(MODES)}")
    return table[mode](**kwargs)
