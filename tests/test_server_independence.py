"""Dependence between draws: every distance between the choices of a request, and consecutive requests.

A server whose choice j + n/2 reuses 1 − u of choice j gives every choice the exact law, and
only pairs at that distance are dependent: pairs (0, 1), (2, 3), ... of first tokens saw
nothing. Every position and every distance (1 to n − 1) is tested now; exact draws keep the declared rate
(simulated), the coupled server fails.
"""

from __future__ import annotations

import numpy as np
import pytest

from specgauge.fixtures.fake_openai import FakeOpenAI
from specgauge.stattests.server.compare import independence_results, one_sample_logprobs, two_sample
from specgauge.stattests.server.probe import ProbeRun

PROMPTS = ["one", "two"]


def fake_run(app: FakeOpenAI, samples: int, *, n: int = 16, length: int = 3, top: int = 9) -> ProbeRun:
    return app.run(PROMPTS, samples, n=n, length=length, top=top)


def test_choices_coupled_at_half_the_request_fail_every_mode():
    exact, coupled = FakeOpenAI(seed=1), FakeOpenAI(seed=2, couple_choices=True)
    runs = {name: fake_run(app, 400) for name, app in (("exact", exact), ("coupled", coupled))}
    other = fake_run(FakeOpenAI(seed=3), 400)
    assert one_sample_logprobs(runs["exact"], target_tv=0.5).passed
    assert two_sample(other, runs["exact"]).passed
    for cert in (one_sample_logprobs(runs["coupled"], target_tv=0.5), two_sample(other, runs["coupled"])):
        failed = cert.frame[cert.frame["verdict"] == "fail"]
        assert set(failed["check"]) == {"choices-within-request-independent"}, cert.frame.to_string()
        assert "pos0" in " ".join(failed["position"])
        rows = cert.frame[cert.frame["check"] == "choices-within-request-independent"]
        # 25 requests a prompt: distance 15 has 25 pairs, too few for any figure, and the row says so
        assert rows["message"].str.contains("no figure: ").all(), "a row states the dependence it detects, or none"


def test_exact_draws_keep_the_declared_rate():
    """100 exact runs, each position's row at rate 0.05: rejections within the binomial margin."""
    rate, runs = 0.05, 100
    app = FakeOpenAI(seed=4)
    rejected = {"within": 0, "across": 0}
    for _ in range(runs):
        results = independence_results(fake_run(app, 64, length=2), rate)
        for name in rejected:
            rejected[name] += not results[name][0].passed
    margin = rate * runs + 3 * np.sqrt(rate * (1 - rate) * runs)
    assert max(rejected.values()) <= margin, rejected


@pytest.mark.parametrize("n", [1, 16])
def test_consecutive_requests_are_tested_whether_or_not_the_server_honours_n(n):
    run = fake_run(FakeOpenAI(seed=5), 64, n=n)
    results = independence_results(run, 1e-6)
    assert len(results["across"]) == 3 and all(r.n > 0 for r in results["across"])
    assert (len(results["within"]) == 3) == (n > 1)


@pytest.mark.slow  # 300 exact runs, about 4 s of CPU
def test_the_new_rows_p_values_are_no_smaller_than_uniform_under_the_null():
    """Calibration of the rows as they now run (every distance 1..n-1, both request offsets): over 300
    exact runs each row's p-value falls below 0.01, 0.05 and 0.1 no more often than a uniform one would,
    within three binomial standard deviations (Bonferroni over the tests makes them conservative)."""
    app, runs = FakeOpenAI(seed=8), 300
    pvalues = {"within": [], "across": []}
    for _ in range(runs):
        results = independence_results(fake_run(app, 64, length=1), 0.05)
        for name in pvalues:
            pvalues[name].append(results[name][0].pvalue)
    for name, values in pvalues.items():
        values = np.asarray(values)
        for level in (0.01, 0.05, 0.1):
            bound = level * runs + 3 * np.sqrt(level * (1 - level) * runs)
            assert np.sum(values < level) <= bound, (name, level, np.sum(values < level))
