"""Acceptance models: closed forms, the truncated-geometric law, and bad parameters.

Every statistical assertion uses a false-fail rate of 1e-6 (two-sided z = 4.89).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from specgauge.simulator import (ConfigError, IIDAcceptance, MarkovAcceptance, PerPositionAcceptance, PerRequestAcceptance,
                       TraceAcceptance)

FALSE_FAIL = 1e-6
Z = stats.norm.isf(FALSE_FAIL / 2)


def truncated_geometric_pmf(alpha: float, gamma: int) -> np.ndarray:
    k = np.arange(gamma + 1)
    pmf = alpha ** k * (1 - alpha)
    pmf[gamma] = alpha ** gamma
    return pmf


def assert_mean_close(samples: np.ndarray, expected: float) -> None:
    se = samples.std(ddof=1) / np.sqrt(samples.size)
    assert abs(samples.mean() - expected) <= Z * se + 1e-12, (samples.mean(), expected, se)


@pytest.mark.parametrize("alpha,gamma", [(0.8, 4), (0.5, 7), (0.95, 3)])
def test_iid_counts_follow_the_truncated_geometric(alpha, gamma):
    counts = IIDAcceptance(alpha).sample_accepted(1, gamma, rounds=20_000, requests=10).ravel()
    observed = np.bincount(counts, minlength=gamma + 1)
    expected = truncated_geometric_pmf(alpha, gamma) * counts.size
    assert stats.chisquare(observed, expected).pvalue > FALSE_FAIL


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.8, 1.0])
def test_iid_closed_form(alpha):
    model = IIDAcceptance(alpha)
    pmf = truncated_geometric_pmf(alpha, 5)
    assert model.expected_tokens_per_pass(5) == pytest.approx((np.arange(6) * pmf).sum() + 1)
    assert model.expected_tokens_per_pass(0) == 1.0


def test_per_position_closed_form_and_sampling():
    model = PerPositionAcceptance((0.9, 0.7, 0.5))
    assert model.expected_tokens_per_pass(3) == pytest.approx(1 + 0.9 + 0.63 + 0.315)
    assert model.expected_tokens_per_pass(4) == pytest.approx(1 + 0.9 + 0.63 + 0.315 + 0.1575)
    samples = model.sample_accepted(2, 4, rounds=20_000, requests=5) + 1
    assert_mean_close(samples.ravel(), model.expected_tokens_per_pass(4))


def test_per_request_closed_form_and_sampling():
    model = PerRequestAcceptance(4.0, 1.5)
    # One round per request, many requests: the mixture over alpha.
    samples = model.sample_accepted(3, 5, rounds=1, requests=100_000) + 1
    assert_mean_close(samples.ravel(), model.expected_tokens_per_pass(5))
    assert PerRequestAcceptance.from_mean(0.7, 20).mean_alpha == pytest.approx(0.7)


def test_markov_long_run_rate_and_burstiness():
    model = MarkovAcceptance(0.9, 0.3)
    sampler = model.sampler(np.random.default_rng(4), 1)
    decisions = 0
    accepted = 0
    for _ in range(2_000):
        draw = sampler.draw(np.array([0]), 1, 8)
        sampler.advance(np.array([0]), draw)
        accepted += int(draw.sum())
        decisions += int(draw.sum()) + (1 if draw[0, 0] < 8 else 0)
    # Per decision, acceptance is the chain's stationary rate (0.75) only in the long run; check loosely
    # by the sign of the burstiness: a run of accepts is longer than i.i.d. at the same rate would give.
    assert accepted / decisions > 0.6
    assert model.mean_alpha == pytest.approx(0.3 / 0.4)
    assert model.expected_tokens_per_pass(4) is None


def test_trace_replays_in_order_and_cuts_at_gamma():
    model = TraceAcceptance((5, 0, 2))
    sampler = model.sampler(np.random.default_rng(0), 2)
    first = sampler.draw(np.arange(2), 2, 3)
    assert first.tolist() == [[3, 0], [2, 3]]
    sampler.advance(np.arange(2), first[:1])
    assert sampler.draw(np.arange(2), 1, 3).tolist() == [[2, 3]]
    assert model.expected_tokens_per_pass(3) == pytest.approx(1 + 5 / 3)


@pytest.mark.parametrize("make", [lambda: IIDAcceptance(1.5), lambda: IIDAcceptance(-0.1),
                                  lambda: PerPositionAcceptance((0.5, 2.0)), lambda: PerRequestAcceptance(0, 1),
                                  lambda: MarkovAcceptance(1.2, 0.1), lambda: TraceAcceptance((1, -1)),
                                  lambda: IIDAcceptance(float("nan"))])
def test_bad_parameters_are_refused(make):
    with pytest.raises(ConfigError):
        make()
