"""The tree certification checks and the session that runs them.

Each check turns one :class:`TreeRun` into assertions built from the public statistics
(:mod:`specgauge.stattests.core.statistics`). Families as for chains: ``exactness`` checks hold
for every exact rule; ``optimality`` checks (the root's sibling rounds, the accepted
length against the scheme's exact law) hold for the scheme's reference rule.

Exactness at depth d is conditioned on the emitted prefix: the previous token and the
row's kind name the tree node the path is at (or the context it left the tree from), and
the token at position d must follow p there. Per-context chi-squares are summed (their
degrees of freedom too) into one assertion per depth; ``min_detectable_tv`` is that of
the most frequent context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np
import pandas as pd
from scipy import stats

from specgauge.fixtures.trees import TREE_FIXTURES, TreeFixture

from specgauge.stattests.core.certificate import DEFAULT_FALSE_FAIL, Certificate, Rates, failure, record
from specgauge.stattests.core.contract import PAD
from specgauge.stattests.core.statistics import (KS_PROVEN_BELOW, TestResult, goodness_of_fit, independence_test,
                                                 itemwise_error_rate, ks_uniformity, multinomial_kl_tail,
                         min_num_samples_for_ks_uniformity, pit_values)
from specgauge.stattests.core.tree_contract import TreeDecoder
from specgauge.stattests.tree.generate import GENERATION_CASES, generation_joint_law
from specgauge.stattests.tree.harness import TreeRun, TreeRunConfig, run_tree_fixture

TreeCheckFn = Callable[[TreeRun, Rates], dict[int | None, TestResult]]


@dataclass(frozen=True)
class TreeCheck:
    name: str
    family: str
    run: TreeCheckFn
    applies: Callable[[TreeFixture], bool]
    positions: Callable[[TreeFixture], list[int | None]]
    meaning: str


def _contexts(run: TreeRun, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows emitting position d, with the target row they must follow: ``(rows, tokens, probs)``."""
    rows = np.flatnonzero(run.tokens[:, d] != PAD)
    prev = run.tokens[rows, d - 1] if d > 0 else np.zeros(rows.size, dtype=np.int64)
    return rows, run.tokens[rows, d], run.fixture.target[run.kinds[rows], d, prev]


def _summed_fit(cells: np.ndarray, tokens: np.ndarray, probs: np.ndarray, rates: Rates, test: str) -> TestResult:
    """Goodness of fit in every context (``cells`` labels it), summed into one chi-square."""
    if tokens.size == 0:  # nothing drawn: the row cannot fail
        return TestResult(test, 0.0, 1.0, 0, rates.false_fail, math.inf, None, {"false_fail_basis": "exact"})
    labels, first, inverse = np.unique(cells, return_index=True, return_inverse=True)
    vocab = probs.shape[1]
    counts = np.zeros((labels.size, vocab))
    np.add.at(counts, (inverse, tokens), 1.0)
    results = [goodness_of_fit(counts[c], probs[first[c]], false_fail_rate=rates.false_fail,
                               false_pass_rate=rates.false_pass) for c in range(labels.size)]
    statistic = float(sum(r.statistic for r in results))
    df = float(sum(r.df or 0 for r in results))
    pvalue = 0.0 if math.isinf(statistic) else (float(stats.chi2.sf(statistic, df)) if df > 0 else 1.0)
    # given the contexts, their counts are independent multinomials: the gamma bounds on each
    # context's moment generating function multiply (shape Σ df), so the summed G's tail is proven
    proven = all(r.details.get("false_fail_basis") in ("proven", "exact") for r in results)
    if proven and 0 < pvalue <= KS_PROVEN_BELOW:
        g = float(sum(r.details.get("g_statistic", 0.0) for r in results))
        pvalue = max(pvalue, multinomial_kl_tail(g / 2.0, int(df) + 1))
    best = max(results, key=lambda r: r.n)
    measured = float(sum(r.n * r.details.get("measured_tv", 0.0) for r in results) / tokens.size)
    return TestResult(test, statistic, pvalue, int(tokens.size), rates.false_fail, best.min_detectable_tv, df,
                      {"measured_tv": measured, "contexts": float(labels.size),
                       "false_fail_basis": "proven" if proven else "estimated"})


def _cell(run: TreeRun, rows: np.ndarray, depth: np.ndarray, prev: np.ndarray) -> np.ndarray:
    vocab = run.fixture.vocab_size
    return (run.kinds[rows] * (run.fixture.depth + 1) + depth) * vocab + prev


def contract(run: TreeRun, rates: Rates) -> dict[int | None, TestResult]:
    if run.error or run.reproducibility_error:
        return {None: failure("contract", run, rates, run.error or run.reproducibility_error)}  # type: ignore[arg-type]
    return {None: TestResult("contract", 0.0, 1.0, run.n, rates.false_fail, math.nan)}


def exactness(run: TreeRun, rates: Rates) -> dict[int | None, TestResult]:
    """Given the prefix, the token at depth d follows p at the node (kind, d, previous token)."""
    out = {}
    for d in range(run.fixture.depth + 1):
        rows, tokens, probs = _contexts(run, d)
        prev = run.tokens[rows, d - 1] if d > 0 else np.zeros(rows.size, dtype=np.int64)
        out[d] = _summed_fit(_cell(run, rows, np.full(rows.size, d), prev), tokens, probs, rates, "goodness_of_fit")
    return out


def pit(run: TreeRun, rates: Rates) -> dict[int | None, TestResult]:
    """Randomized PIT of every emitted token under p at its context is Uniform(0, 1)."""
    out = {}
    for d in range(run.fixture.depth + 1):
        rows, tokens, probs = _contexts(run, d)
        values = pit_values(tokens, probs, run.uniforms[rows, d]) if tokens.size else np.zeros(0)
        out[d] = ks_uniformity(values, false_fail_rate=rates.false_fail, false_pass_rate=rates.false_pass,
                               test="pit_ks")
    return out


def bonus(run: TreeRun, rates: Rates) -> dict[int | None, TestResult]:
    """After a path accepted down to a leaf, the bonus follows p at that leaf."""
    rows = np.flatnonzero(run.leaf_reached)
    last = run.lengths[rows] - 1
    prev = np.where(last > 0, run.tokens[rows, np.maximum(last - 1, 0)], 0)
    tokens = run.tokens[rows, last]
    probs = run.fixture.target[run.kinds[rows], last, prev]
    return {None: _summed_fit(_cell(run, rows, last, prev), tokens, probs, rates, "goodness_of_fit")}


def independence_rows(run: TreeRun, rates: Rates) -> dict[int | None, TestResult]:
    """First tokens of neighbouring rows (2i, 2i+1) and of rows half a run apart are independent."""
    first = run.tokens[:, 0]
    half = run.n // 2
    pairs = [(first[0:2 * half:2], first[1:2 * half:2]), (first[:half], first[half:2 * half])]
    # rows draw their kind at random, so first tokens are iid from the kinds' mixture of p at the
    # root: it bins y for the G test (a fixed law only bins; the bound holds whatever y's law)
    law = run.fixture.target[:, 0, 0].mean(axis=0)
    results = [independence_test(x, y, false_fail_rate=rates.false_fail / len(pairs),
                                 false_pass_rate=rates.false_pass, y_law=law) for x, y in pairs]
    worst = min(results, key=lambda r: r.pvalue)
    return {None: TestResult("independence", worst.statistic, min(1.0, len(pairs) * worst.pvalue), run.n,
                             rates.false_fail, max(r.min_detectable_tv for r in results), worst.df,
                             {"false_fail_basis": worst.details.get("false_fail_basis", "estimated")})}


def sibling_rounds(run: TreeRun, rates: Rates) -> dict[int | None, TestResult]:
    """The root's child taken (or none) follows Π_{i<j}(1 − a_i)·a_j: independent rounds,
    residual updated between siblings, as the scheme's rule says (randomized PIT, KS)."""
    chosen = run.root_chosen / run.root_chosen.sum(axis=1, keepdims=True)
    values = pit_values(run.root_choice, chosen, run.uniforms[:, -2]) if run.n else np.zeros(0)
    return {None: ks_uniformity(values, false_fail_rate=rates.false_fail, false_pass_rate=rates.false_pass,
                                test="sibling_rounds_ks")}


def accepted_length(run: TreeRun, rates: Rates) -> dict[int | None, TestResult]:
    """Accepted path lengths follow the scheme's exact law, row by row: a randomized PIT
    under each row's own law (a chi-square on the averaged law would be conservative, the
    rows' laws differing with their drafts), then KS."""
    pmf = run.length_pmf / run.length_pmf.sum(axis=1, keepdims=True)
    values = pit_values(run.lengths - 1, pmf, run.uniforms[:, -1]) if run.n else np.zeros(0)
    return {None: ks_uniformity(values, false_fail_rate=rates.false_fail, false_pass_rate=rates.false_pass,
                                test="accepted_length_ks")}


def law(run: TreeRun, rates: Rates) -> dict[int | None, TestResult]:
    """Mean accepted length equals the law's E = Σ_i P(node i on the path) (a z-test, never below
    Bernstein's bound wherever a verdict reads it: proven)."""
    support = np.arange(run.length_pmf.shape[1])
    means = run.length_pmf @ support
    variance = float((run.length_pmf @ support**2 - means**2).sum())
    observed, expected = float((run.lengths - 1).sum()), float(means.sum())
    details = {"observed_mean": observed / max(run.n, 1), "expected_mean": expected / max(run.n, 1)}
    if variance <= 1e-12:  # every row's length certain: no randomness to err on
        ok = abs(observed - expected) < 1e-6
        return {None: TestResult("law", observed - expected, 1.0 if ok else 0.0, run.n, rates.false_fail,
                                 0.0, None, {**details, "false_fail_basis": "exact"})}
    z = (observed - expected) / math.sqrt(variance)
    pvalue = float(2 * stats.norm.sf(abs(z)))
    # Bernstein: the rows' lengths are independent, each within `reach` of its mean, their
    # variances summing to `variance`; wherever a verdict reads the p-value it is never below
    # 2 exp(-t^2 / (2 (v + reach t / 3))), so the rate is proven, and the figure is past its critical value
    reach = float(support[-1])
    if pvalue <= KS_PROVEN_BELOW:
        t = abs(observed - expected)
        pvalue = max(pvalue, min(1.0, 2 * math.exp(-t * t / (2 * (variance + reach * t / 3)))))
    log_rate = math.log(2 / rates.false_fail)
    critical = reach * log_rate / 3 + math.sqrt((reach * log_rate / 3) ** 2 + 2 * variance * log_rate)
    detectable = (critical + stats.norm.isf(rates.false_pass) * math.sqrt(variance)) / max(run.n, 1)
    basis = "proven" if rates.false_fail <= KS_PROVEN_BELOW else "estimated"
    return {None: TestResult("law", z, pvalue, run.n, rates.false_fail, detectable, None,
                             {**details, "false_fail_basis": basis})}


def greedy(run: TreeRun, rates: Rates) -> dict[int | None, TestResult]:
    """With one-hot p the output is exactly the argmax path through the tree, row by row."""
    ok = run.greedy_mismatches == 0
    details = {} if ok else {"error": f"{run.greedy_mismatches} rows differ from greedy; {run.greedy_example}"}
    return {None: TestResult("greedy", float(run.greedy_mismatches), 1.0 if ok else 0.0, run.n,
                             rates.false_fail, 0.0, None, details)}


def optimal_bound(run: TreeRun, rates: Rates) -> dict[int | None, TestResult]:
    """No exact verifier accepts more of the root's drafts than the LP optimum of Hu et al.
    (2025): a one-sided binomial test. The message gives the share of the optimum reached."""
    from specgauge.stattests.tree.optimal import measured_share_of_optimal

    share = measured_share_of_optimal(run)
    hits = int(round(share["measured"] * run.n))
    pvalue = float(stats.binom.sf(hits - 1, run.n, min(share["optimal"], 1.0))) if run.n else 1.0
    message = (f"first-level acceptance {share['measured']:.4f} = {100 * share['share']:.1f}% "
               f"of the optimal {max(share['optimal'], 0.0):.4f}")
    return {None: TestResult("optimal_bound", float(hits), pvalue, run.n, rates.false_fail, math.nan, None,
                             {"message": message, "share": share["share"]})}


def _bounded(f: TreeFixture) -> bool:
    """The LP stays small: one kind of row, at most 3 siblings at the root."""
    return not f.greedy and f.kinds == 1 and int((f.parents < 0).sum()) <= 3


def _single(_: TreeFixture) -> list[int | None]:
    return [None]


def _depths(f: TreeFixture) -> list[int | None]:
    return list(range(f.depth + 1))


def _sampled(f: TreeFixture) -> bool:
    return not f.greedy


TREE_CHECKS: dict[str, TreeCheck] = {c.name: c for c in [
    TreeCheck("contract", "exactness", contract, lambda f: True, _single,
              "shape, dtype, -1 padding, the accepted prefix is a tree path, tokens possible under p, "
              "inputs untouched, same seed same output, no exception"),
    TreeCheck("exactness", "exactness", exactness, _sampled, _depths,
              "given the emitted prefix, the token at each depth follows p at that node"),
    TreeCheck("pit-id", "exactness", pit, _sampled, _depths,
              "randomized PIT of every emitted token under p at its node is uniform"),
    TreeCheck("bonus", "exactness", bonus, _sampled, _single,
              "after a path accepted to a leaf, the bonus token follows p at that leaf"),
    TreeCheck("independence-rows", "exactness", independence_rows, _sampled, _single,
              "rows of a batch do not share random numbers"),
    TreeCheck("greedy", "exactness", greedy, lambda f: f.greedy, _single,
              "with one-hot p the output is exactly the argmax path"),
    TreeCheck("optimal-bound", "exactness", optimal_bound, _bounded, _single,
              "the root's drafts are not accepted more often than the LP optimum allows any exact verifier"),
    TreeCheck("sibling-rounds", "optimality", sibling_rounds, _sampled, _single,
              "the root's child taken follows the scheme's rule: independent rounds, residual updated"),
    TreeCheck("accepted-length", "optimality", accepted_length, _sampled, _single,
              "accepted path lengths follow the scheme's exact law"),
    TreeCheck("law", "optimality", law, _sampled, _single,
              "mean accepted length is the scheme's exact expectation"),
]}


DEFAULT_TREE_TV = 0.03


@dataclass(frozen=True)
class TreeCertConfig:
    """What a tree certificate must detect at the root position; deeper positions report
    the TV their share of the rows reaches.

    ``false_fail`` is family-wise, as for chains: each of ``assertions`` assertions (0: the
    whole tree plan) runs at its Bonferroni share."""

    tv: float = DEFAULT_TREE_TV
    false_fail: float = DEFAULT_FALSE_FAIL
    false_pass: float = 1e-3
    seed: int = 0
    max_rows: int = 400_000
    assertions: int = 0

    @property
    def per_assertion(self) -> float:
        return itemwise_error_rate(self.false_fail, self.assertions or tree_plan_size())

    @property
    def rates(self) -> Rates:
        return Rates(self.per_assertion, self.false_pass)

    def rows(self, fixture: TreeFixture) -> int:
        needed = min_num_samples_for_ks_uniformity(max(self.tv, fixture.tv_floor), false_fail_rate=self.per_assertion,
                                                   false_pass_rate=self.false_pass)
        return min(needed, self.max_rows)


@dataclass
class TreeCertificationSession:
    """Runs each fixture once and each check once per fixture; records every assertion."""

    decoder: TreeDecoder
    name: str
    config: TreeCertConfig
    rows: list[dict] = field(default_factory=list)
    _runs: dict[str, TreeRun] = field(default_factory=dict)
    _results: dict[tuple[str, str], dict[int | None, TestResult]] = field(default_factory=dict)

    def run(self, fixture: TreeFixture) -> TreeRun:
        if fixture.name not in self._runs:
            cfg = TreeRunConfig(self.config.rows(fixture), seed=self.config.seed)
            self._runs[fixture.name] = run_tree_fixture(self.decoder, fixture, cfg)
        return self._runs[fixture.name]

    def assertion(self, check: TreeCheck, fixture: TreeFixture, position: int | None) -> TestResult:
        key = (check.name, fixture.name)
        if key not in self._results:
            run = self.run(fixture)
            self._results[key] = ({p: failure(check.name, run, self.config.rates, run.error)  # type: ignore[arg-type]
                                   for p in check.positions(fixture)} if run.error else check.run(run, self.config.rates))
        result = self._results[key][position]
        record(self, result, check.name, fixture.name, position, check.family)
        return result

    def generation(self, case: str) -> list[TestResult]:
        """The end-to-end joint law of ``case`` (one assertion of the plan, two rows at half its rate each)."""
        cfg = self.config
        outcomes = generation_joint_law(self.decoder, case, cfg.tv, cfg.per_assertion, cfg.seed)
        for outcome in outcomes:
            record(self, outcome, "generation-joint-law", case, outcome.test.replace("_", "-"), "exactness")
        return outcomes

    def certificate(self) -> Certificate:
        return Certificate.from_rows(self.rows)


def tree_summary(cert: Certificate) -> str:
    """The certificate's summary (kept for callers of the first tree release)."""
    return cert.summary()


def tree_plan_size(fixtures=None, checks=None) -> int:
    """Assertions in the tree plan: what the family-wise rate is split over."""
    return sum(1 for _ in tree_plan(fixtures, checks))


def tree_plan(fixtures=None, checks=None):
    """Every (check, fixture, position) tree assertion, in a stable order."""
    for fixture in (TREE_FIXTURES[n] for n in (fixtures or TREE_FIXTURES)):
        for check in (TREE_CHECKS[n] for n in (checks or TREE_CHECKS)):
            if check.applies(fixture):
                for position in check.positions(fixture):
                    yield check, fixture, position


def certify_tree(decoder: TreeDecoder, config: TreeCertConfig | None = None, fixtures=None, checks=None,
                 name: str | None = None, generation=None) -> Certificate:
    """Certify a tree decoder on the tree fixtures (all, or those named) and end to end.

    ``generation`` names the end-to-end cases (:data:`GENERATION_CASES`) whose joint law
    joins the certificate, as in the pytest suite: all of them by default for the whole
    plan, none when ``fixtures`` or ``checks`` restrict it. A greedy-only decoder has no
    sampled generation to certify."""
    config = config or TreeCertConfig()
    if generation is None:
        generation = list(GENERATION_CASES) if fixtures is None and checks is None else []
    if getattr(decoder, "greedy_only", False):
        generation = []
    if not config.assertions:
        config = replace(config, assertions=tree_plan_size(fixtures, checks) + len(generation))
    session = TreeCertificationSession(decoder, name or getattr(decoder, "name", type(decoder).__name__), config)
    for check, fixture, position in tree_plan(fixtures, checks):
        session.assertion(check, fixture, position)
    for case in generation:
        session.generation(case)
    return session.certificate()
