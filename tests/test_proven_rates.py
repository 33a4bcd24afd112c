"""The proven false-fail rates of the pooled goodness of fit and of ``law``, checked by simulation.

The bounds are theorems (docs/gate.md, "The goodness of fit, proven" and "`law`, proven"):
here they are held to simulated null laws at the shapes the gate uses (the seed's six
tokens, a pooled Zipf tail, tokens per pass at γ = 4), small samples included, where the
chi-square law is least accurate. Every comparison is itself a one-sided binomial test at
``META_RATE``, never a guessed tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from specgauge.fixtures.pairs import SEED_TARGET, zipf
from specgauge.laws import tokens_per_pass_pmf
from specgauge.stattests.core.statistics import (goodness_of_fit, multinomial_kl_tail, tokens_per_pass_mean_test,
                                                 tokens_per_pass_test)

META_RATE = 1e-6
REPLICATES = 20_000  # vectorised draws of n KL
RUNS = 3_000  # calls of a test


def _n_kl(counts: np.ndarray, p: np.ndarray) -> np.ndarray:
    """n KL(p̂ ‖ p) of each row of counts."""
    n = counts.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(counts > 0, counts * np.log(counts / (n * p)), 0.0)
    return terms.sum(axis=1)


def _not_above(hits: int, runs: int, bound: float) -> bool:
    """hits of runs is consistent with a rate at most ``bound`` (one-sided binomial test)."""
    return stats.binomtest(hits, runs, min(bound, 1.0), alternative="greater").pvalue >= META_RATE


@pytest.mark.parametrize("shape, n", [("seed", 12), ("seed", 300), ("two", 5), ("zipf-20", 40)])
def test_the_kl_bound_holds_at_every_threshold(shape, n):
    """P(n KL ≥ x) ≤ e^{−x} (e x/(k − 1))^{k−1}, for small n too (no asymptotics)."""
    p = {"seed": SEED_TARGET, "two": np.array([0.9, 0.1]), "zipf-20": zipf(20)}[shape]
    rng = np.random.default_rng(11)
    kl = _n_kl(rng.multinomial(n, p, size=REPLICATES).astype(float), p)
    for x in np.linspace(p.size, 4 * p.size + 8, 12):
        bound = multinomial_kl_tail(float(x), p.size)
        hits = int((kl >= x - 1e-12).sum())
        assert _not_above(hits, REPLICATES, bound), f"{shape} n {n}: P(n KL >= {x:.3g}) ~ {hits / REPLICATES} > {bound:.3g}"


@pytest.mark.parametrize("probs, n", [(SEED_TARGET, 30), (SEED_TARGET, 2000), (zipf(200), 400)])
def test_goodness_of_fit_fails_no_more_than_its_rate_under_the_null(probs, n):
    """At the proven rates the rejections of exact draws stay at or below the rate (pooled
    bins included: the Zipf tail pools to a handful of bins at 400 draws)."""
    rate = 1e-3
    rng = np.random.default_rng(5)
    counts = rng.multinomial(n, probs, size=RUNS)
    results = [goodness_of_fit(c, probs, false_fail_rate=rate) for c in counts]
    assert {r.details["false_fail_basis"] for r in results} == {"proven"}
    fails = sum(not r.passed for r in results)
    assert _not_above(fails, RUNS, rate), f"{fails} of {RUNS} failed at rate {rate}"


def test_tokens_per_pass_fail_no_more_than_their_rate_under_the_null():
    """γ = 4, one acceptance law for every row (multinomial passes) and rows of their own laws
    (Bernstein holds for independent passes that are not identical: ``law``'s sum, and each
    length's count in ``tokens_per_pass``)."""
    rate = 1e-3
    rng = np.random.default_rng(9)
    same = np.array([[0.8, 0.7, 0.6, 0.5]])
    own = rng.uniform(0.2, 0.95, size=(60, 4))
    cdf = np.cumsum([tokens_per_pass_pmf(a) for a in own], axis=1)  # each row's own law
    fails = {"tokens_per_pass": 0, "tokens_per_pass_own": 0, "law_same": 0, "law_own": 0}
    for _ in range(RUNS):
        lengths = 1 + rng.choice(5, size=60, p=tokens_per_pass_pmf(same))
        fails["tokens_per_pass"] += not tokens_per_pass_test(lengths, same, false_fail_rate=rate).passed
        fails["law_same"] += not tokens_per_pass_mean_test(lengths, same, false_fail_rate=rate).passed
        draws = 1 + np.minimum((rng.random(60)[:, None] > cdf).sum(axis=1), 4)
        r = tokens_per_pass_mean_test(draws, own, false_fail_rate=rate)
        assert r.details["false_fail_basis"] == "proven"
        fails["law_own"] += not r.passed
        fails["tokens_per_pass_own"] += not tokens_per_pass_test(draws, own, false_fail_rate=rate).passed
    assert tokens_per_pass_test(lengths, np.repeat(own[:1], 60, axis=0), false_fail_rate=rate).details["false_fail_basis"] == "proven"
    # rows of their own laws: each length's Poisson-binomial count under Bernstein's bound (proven)
    assert tokens_per_pass_test(draws, own, false_fail_rate=rate).details["false_fail_basis"] == "proven"
    assert tokens_per_pass_test(draws, own, false_fail_rate=0.01).details["false_fail_basis"] == "estimated"
    for name, count in fails.items():
        assert _not_above(count, RUNS, rate), f"{name}: {count} of {RUNS} failed at rate {rate}"


def test_a_biased_law_still_fails():
    """The proven p-values keep the power the rows state: a move of the stated TV fails."""
    rate, n = 1e-6, 20_000
    result = goodness_of_fit(np.zeros(6), SEED_TARGET, false_fail_rate=rate)
    assert result.n == 0
    q = SEED_TARGET.copy()
    tv = 0.05
    q[0] += tv
    q[1] -= tv
    rng = np.random.default_rng(3)
    biased = goodness_of_fit(rng.multinomial(n, q), SEED_TARGET, false_fail_rate=rate)
    assert not biased.passed and biased.details["false_fail_basis"] == "proven"
    assert biased.min_detectable_tv < tv


def test_the_bound_holds_for_a_sum_over_contexts():
    """The tree suite sums G over contexts: independent multinomials given the contexts, so the
    gamma bounds multiply (shape Σ (k_c − 1)); held here to three small contexts."""
    laws = [SEED_TARGET, np.array([0.7, 0.3]), zipf(8)]
    sizes = [20, 9, 30]
    rng = np.random.default_rng(13)
    total = sum(_n_kl(rng.multinomial(m, p, size=REPLICATES).astype(float), p) for p, m in zip(laws, sizes))
    shape = sum(p.size - 1 for p in laws)
    for x in np.linspace(shape, 3 * shape + 8, 10):
        bound = multinomial_kl_tail(float(x), shape + 1)
        hits = int((total >= x - 1e-12).sum())
        assert _not_above(hits, REPLICATES, bound), f"P(sum n KL >= {x:.3g}) ~ {hits / REPLICATES} > {bound:.3g}"
