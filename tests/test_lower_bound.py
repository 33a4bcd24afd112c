"""The certified lower bound on draws (Neyman–Pearson on moves between two halves of p).

* the optimal type II error it computes is what an exhaustive search over randomised
  tests on the count gives, and no test the project ships beats it;
* the bound reproduces an independent outside study's figures on the shipped laws (its
  priors include these, so the bound here is never above them);
* it is a floor under the identity test's rows, and scales as 1/ε².
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from specgauge.errors import InvalidDistributionError
from specgauge.fixtures.pairs import FIXTURES, zipf
from specgauge.stattests.identity.instance import min_num_samples_for_identity_test
from specgauge.stattests.identity.lower_bound import min_num_samples_lower_bound, np_type_two


def _real(name: str, k: int) -> np.ndarray:
    from specgauge.fixtures.real_laws import fixtures
    return next(f for f in fixtures() if f.name == name).target[k]


def test_np_type_two_is_the_best_test_on_the_count():
    """Against one alternative the likelihood ratio is monotone in the count: the best test
    at level a rejects the top of Binomial(n, π), randomised at its edge; scanning every
    such test by brute force gives the same type II error."""
    n, pi, x, a = 60, 0.4, 0.55, 1e-3
    k = np.arange(n + 1)
    p0, p1 = stats.binom.pmf(k, n, pi), stats.binom.pmf(k, n, x)
    best = 1.0
    for c in range(n + 1):  # reject k > c, and k = c with probability g
        above0, above1 = p0[c + 1:].sum(), p1[c + 1:].sum()
        if above0 > a:
            continue
        g = min(1.0, (a - above0) / p0[c])
        best = min(best, 1 - above1 - g * p1[c])
    assert np_type_two(n, pi, (x,), a) == pytest.approx(best, rel=1e-6, abs=1e-12)


def test_the_mixture_costs_at_least_either_side():
    """The two-point prior makes a test watch both tails: its optimal type II error is at
    least the average of the one-sided ones at twice the level."""
    n, pi, eps, a = 2000, 0.5, 0.05, 1e-5
    mix = np_type_two(n, pi, (pi + eps, pi - eps), a)
    assert mix >= 0.5 * (np_type_two(n, pi, (pi + eps,), 2 * a) + np_type_two(n, pi, (pi - eps,), 2 * a)) - 1e-12


# the outside study's certified bounds, at the rates of a sized single-fixture run (draws at the position)
STUDY = [
    ("seed-six-token", 0, 0.05, 1 / 340_000, 6_010),
    ("smollm2-code-t0.7-p0.9", 1, 0.05, 1e-4 / 39, 6_053),
    ("smollm2-code-t0.7-p0.9", 2, 0.05, 1e-4 / 39, 5_553),
    ("smollm2-chat-t1", 0, 0.05, 1e-4 / 39, 3_635),
    ("smollm2-chat-t1", 2, 0.05, 1e-4 / 39, 6_732),
    ("smollm2-prose-t1", 2, 0.1, 1e-4 / 32, 4_469),
]


@pytest.mark.parametrize("name, k, tv, rate, study", STUDY)
def test_the_bound_agrees_with_the_study(name, k, tv, rate, study):
    p = FIXTURES[name].target[k] if name in FIXTURES else _real(name, k)
    bound = min_num_samples_lower_bound(tv, p, false_fail_rate=rate)
    # the study reports the largest impossible n, this the smallest one not ruled out: one apart
    assert bound.draws <= study + 1
    # on small laws the two halves are the study's hardest prior; pair priors win on long tails
    if np.count_nonzero(p) <= 50:
        assert bound.draws >= study
    assert bound.draws >= 0.3 * study


def test_the_bound_is_a_floor_under_the_identity_test_and_scales_as_one_over_eps_squared():
    p = zipf(1000)
    rate = 1e-6
    lows = [min_num_samples_lower_bound(tv, p, false_fail_rate=rate).draws for tv in (0.05, 0.1, 0.2)]
    assert lows[2] <= min_num_samples_for_identity_test(0.2, p, false_fail_rate=rate)
    assert 3.3 < lows[0] / lows[1] < 4.4 and 3.3 < lows[1] / lows[2] < 4.4
    # a binomial test at about (z_a + z_β)² π(1 − π) / ε² with π near ½
    z = stats.norm.isf(rate / 2) + stats.norm.isf(1e-3)
    assert lows[0] == pytest.approx(z * z * 0.25 / 0.05 ** 2, rel=0.1)


def test_one_token_and_bad_input():
    one = min_num_samples_lower_bound(0.1, np.array([1.0, 0.0]))
    assert one.draws == math.ceil(math.log(1e-3 / (1 - 1e-4)) / math.log(0.9) * (1 - 1e-6))
    with pytest.raises(InvalidDistributionError):
        min_num_samples_lower_bound(1.5, np.full(4, 0.25))
    assert "any test needs at least" in min_num_samples_lower_bound(0.1, np.full(4, 0.25)).describe()
