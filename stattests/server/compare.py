"""Certify a server's samples: two-sample (on vs off), or one-sample (its logprobs, or a local model).

Each mode turns probe files into a family of assertions whose false-fail rates add up to
the declared total (split evenly, Bonferroni), and a :class:`ServerCertificate` that says
which mode ran, what each assertion could detect and how many samples a target TV needs.

- ``two-sample``: the joint law of the first L tokens per prompt (homogeneity chi-square,
  rare sequences pooled), then each position's law conditioned on the prompt and the
  tokens before it.
- ``logprobs``: the server's top-k logprobs give, per position, the law of the sampled
  token's rank among the top k (or "other"); the randomized PIT of the ranks over all
  positions and prompts is Uniform(0, 1) for an exact sampler (KS test). The logprobs
  must be those of the distribution sampled from (after temperature, top-k, top-p).
- ``reference``: a local model gives the exact law of every position of every sample by
  teacher forcing (:mod:`specgauge.stattests.server.reference`); randomized PIT with the
  vocabulary ordered by probability (KS), and each prompt's first token by chi-square.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from specgauge.errors import ConfigError
from specgauge.stattests.server.probe import ProbeRun
from specgauge.stattests.server.stats import homogeneity, min_num_samples_for_homogeneity
from specgauge.stattests.core.statistics import (DEFAULT_FALSE_FAIL, DEFAULT_FALSE_PASS, TestResult, goodness_of_fit,
                                             ks_uniformity, min_num_samples_for_goodness_of_fit,
                                             min_num_samples_for_ks_uniformity, pit_values)

MODES = ("two-sample", "logprobs", "reference")
CERTIFICATE_COLUMNS = ["mode", "test", "passed", "statistic", "df", "pvalue", "false_fail_rate", "n",
                       "min_detectable_tv", "measured_tv", "target_tv", "needed_samples_per_prompt"]


@dataclass(frozen=True)
class ServerCertificate:
    """The outcome of one comparison: a row per assertion and a verdict naming the mode."""

    mode: str
    results: tuple[TestResult, ...]
    needed: tuple[int | None, ...]
    target_tv: float
    unit: str                      # what a token was: "ids", "tokens" or "words"
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def frame(self):
        import pandas as pd

        rows = [{"mode": self.mode, "test": r.test, "passed": r.passed, "statistic": r.statistic, "df": r.df,
                 "pvalue": r.pvalue, "false_fail_rate": r.false_fail_rate, "n": r.n,
                 "min_detectable_tv": r.min_detectable_tv, "measured_tv": r.details.get("measured_tv", math.nan),
                 "target_tv": self.target_tv, "needed_samples_per_prompt": need}
                for r, need in zip(self.results, self.needed)]
        return pd.DataFrame(rows, columns=CERTIFICATE_COLUMNS)

    def verdict(self) -> str:
        head = self.results[0]
        failed = [r.test for r in self.results if not r.passed]
        what = {"two-sample": "speculation on vs off, two samples",
                "logprobs": "one sample against the server's own top-k logprobs",
                "reference": "one sample against a local reference model"}[self.mode]
        total = sum(r.false_fail_rate for r in self.results)
        if failed:
            tv = head.details.get("measured_tv", math.nan)
            size = f"measured TV {tv:.3g}" if math.isfinite(tv) else f"KS distance {head.statistic:.3g}"
            return (f"FAIL ({self.mode}: {what}): {', '.join(failed)} rejected exactness at false-fail "
                    f"{total:.1g} ({head.test}: {size}, p-value {head.pvalue:.3g})")
        return (f"PASS ({self.mode}: {what}): no discrepancy found at false-fail {total:.1g}; "
                f"{head.test} could detect TV >= {head.min_detectable_tv:.3g} with power "
                f"{1 - DEFAULT_FALSE_PASS:g} (n {head.n}, tokens as {self.unit})")


# ---------------------------------------------------------------- sequences


def _units(record: dict[str, Any], kind: str) -> list:
    if kind == "ids":
        return list(record["token_ids"])
    if kind == "tokens":
        return list(record["tokens"])
    return record["text"].split()


def unit_kind(*runs: ProbeRun) -> str:
    """The finest token record every run has: server token ids, token strings, or whitespace words."""
    records = [r for run in runs for r in run.records]
    if records and all("token_ids" in r for r in records):
        return "ids"
    if records and all("tokens" in r for r in records):
        return "tokens"
    return "words"


def encode(runs: list[ProbeRun], length: int, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prompt, arm, sequences[N, length]) with tokens mapped to integers, -1 past the end."""
    vocab: dict[Any, int] = {}
    prompt, arm, seqs = [], [], []
    for a, run in enumerate(runs):
        for r in run.records:
            units = _units(r, kind)[:length]
            seqs.append([vocab.setdefault(u, len(vocab)) for u in units] + [-1] * (length - len(units)))
            prompt.append(r["p"])
            arm.append(a)
    return np.asarray(prompt, np.int64), np.asarray(arm, np.int64), np.asarray(seqs, np.int64).reshape(-1, length)


def _rows(*columns: np.ndarray) -> np.ndarray:
    """An integer label per distinct row of the stacked columns."""
    table = np.column_stack(columns)
    return np.unique(table, axis=0, return_inverse=True)[1].ravel()


def _length(runs: list[ProbeRun]) -> int:
    lengths = {run.header["params"]["max_tokens"] for run in runs}
    if len(lengths) != 1:
        raise ConfigError(f"the runs sampled different lengths (max_tokens {sorted(lengths)})")
    return lengths.pop()


# ---------------------------------------------------------------- two-sample


def two_sample(baseline: ProbeRun, candidate: ProbeRun, *, false_fail_rate: float = DEFAULT_FALSE_FAIL,
               target_tv: float = 0.1) -> ServerCertificate:
    """Is the candidate (speculation on) drawing from the baseline's (speculation off) law?"""
    if baseline.header["prompts"] != candidate.header["prompts"]:
        raise ConfigError("the two runs used different prompts; probe both with the same prompt set")
    length = _length([baseline, candidate])
    kind = unit_kind(baseline, candidate)
    prompt, arm, seqs = encode([baseline, candidate], length, kind)
    rate = false_fail_rate / (length + 1)
    joint = homogeneity(prompt, _rows(seqs), arm, false_fail_rate=rate, test=f"joint_first_{length}_tokens")
    results = [joint]
    for k in range(length):
        context = _rows(prompt, seqs[:, :k]) if k else prompt
        results.append(homogeneity(context, seqs[:, k], arm, false_fail_rate=rate, test=f"position_{k}_given_prefix"))
    n_prompts = len(baseline.header["prompts"])
    pilot = _pilot_law(prompt, _rows(seqs))
    needed = [min_num_samples_for_homogeneity(target_tv, pilot, groups=n_prompts, false_fail_rate=rate)]
    needed += [None] * length
    notes = _param_differences(baseline, candidate)
    return ServerCertificate("two-sample", tuple(results), tuple(needed), target_tv, kind, tuple(notes))


def _pilot_law(group: np.ndarray, category: np.ndarray) -> np.ndarray:
    """The average over groups of each group's sorted category frequencies: a typical group's law."""
    cells, counts = np.unique(np.stack([group, category]), axis=1, return_counts=True)
    per_group = [np.sort(counts[cells[0] == g])[::-1] / counts[cells[0] == g].sum() for g in np.unique(cells[0])]
    width = max(len(p) for p in per_group)
    law = np.mean([np.pad(p, (0, width - len(p))) for p in per_group], axis=0)
    return law / law.sum()


def _param_differences(baseline: ProbeRun, candidate: ProbeRun) -> list[str]:
    a, b = baseline.header["params"], candidate.header["params"]
    return [f"{k}: baseline {a.get(k)!r}, candidate {b.get(k)!r}" for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)]


# ---------------------------------------------------------------- one-sample: the server's logprobs


def rank_laws(run: ProbeRun) -> tuple[np.ndarray, np.ndarray]:
    """Per sampled position: the sampled token's rank (k for "other") and the law of the rank."""
    records = [r for r in run.records if "top" in r and "tokens" in r]
    if not records:
        raise ConfigError("the run has no top logprobs: probe with --top-logprobs K on a server that returns them")
    k = max(len(row) for r in records for row in r["top"])
    ranks, laws = [], []
    for r in records:
        for token, top in zip(r["tokens"], r["top"]):
            top = sorted(top, key=lambda tl: -tl[1])[:k]
            probs = np.full(k + 1, 0.0)
            probs[:len(top)] = np.exp([lp for _, lp in top])
            probs[k] = max(0.0, 1.0 - probs[:k].sum())
            names = [t for t, _ in top]
            ranks.append(names.index(token) if token in names else k)
            laws.append(probs / probs.sum())
    return np.asarray(ranks, np.int64), np.asarray(laws)


def one_sample_logprobs(run: ProbeRun, *, false_fail_rate: float = DEFAULT_FALSE_FAIL, target_tv: float = 0.1,
                        seed: int = 0) -> ServerCertificate:
    """Randomized PIT of the sampled ranks under the server's own top-k law (no baseline run)."""
    ranks, laws = rank_laws(run)
    rng = np.random.default_rng(seed)
    u = pit_values(ranks, laws, rng.random(ranks.size))
    result = ks_uniformity(u, false_fail_rate=false_fail_rate, test="rank_pit_ks")
    n_prompts = len(run.header["prompts"])
    length = run.header["params"]["max_tokens"]
    need = math.ceil(min_num_samples_for_ks_uniformity(target_tv, false_fail_rate=false_fail_rate) / (length * n_prompts))
    return ServerCertificate("logprobs", (result,), (need,), target_tv, "tokens",
                             ("logprobs must be those of the sampled distribution (after temperature/top-k/top-p)",))


# ---------------------------------------------------------------- one-sample: a local reference model


def one_sample_reference(run: ProbeRun, law: Callable[[ProbeRun], tuple[np.ndarray, np.ndarray, np.ndarray]], *,
                         false_fail_rate: float = DEFAULT_FALSE_FAIL, target_tv: float = 0.1,
                         seed: int = 0) -> ServerCertificate:
    """Test the samples against exact per-position laws from a reference model.

    ``law(run) -> (prompt[N], tokens[N, L], probs[N, L, V])``: each sample's token ids and
    the reference's sampling law at each of its positions (teacher forcing).
    """
    prompt, tokens, probs = law(run)
    n, length, vocab = probs.shape
    rng = np.random.default_rng(seed)
    flat_probs = probs.reshape(-1, vocab)
    flat_tokens = tokens.reshape(-1)
    prompts = np.unique(prompt)
    rate = false_fail_rate / (1 + prompts.size)
    # order the vocabulary by probability: a too-cold or truncated sampler piles onto the top
    u = pit_values(flat_tokens, flat_probs, rng.random(flat_tokens.size), sort_key=-flat_probs)
    results = [ks_uniformity(u, false_fail_rate=rate, test="pit_ks_all_positions")]
    needed: list[int | None] = [math.ceil(min_num_samples_for_ks_uniformity(target_tv, false_fail_rate=rate)
                                          / (length * prompts.size))]
    for p in prompts:
        rows = prompt == p
        counts = np.bincount(tokens[rows, 0], minlength=vocab)
        law0 = probs[rows, 0].mean(axis=0)  # the same context for every sample of a prompt
        law0 = law0 / law0.sum()
        res = goodness_of_fit(counts, law0, false_fail_rate=rate)
        results.append(TestResult(f"prompt_{int(p)}_first_token", res.statistic, res.pvalue, res.n, res.false_fail_rate,
                                  res.min_detectable_tv, res.df, res.details))
        needed.append(min_num_samples_for_goodness_of_fit(target_tv, law0, false_fail_rate=rate))
    unit = "ids" if unit_kind(run) == "ids" else "ids of the re-tokenised text"
    left_out = len(run.records) - n
    notes = (f"{left_out} of {len(run.records)} samples left out: not {length} tokens (an early stop, or text "
             "that re-tokenises differently); the test holds for the others",) if left_out else ()
    return ServerCertificate("reference", tuple(results), tuple(needed), target_tv, unit, notes)


def run_mode(mode: str, **kwargs) -> ServerCertificate:
    """Dispatch by mode name, refusing unknown ones with the valid choices."""
    table = {"two-sample": two_sample, "logprobs": one_sample_logprobs, "reference": one_sample_reference}
    if mode not in table:
        raise ConfigError(f"invalid mode {mode!r}; valid modes are {', '.join(MODES)}")
    return table[mode](**kwargs)
