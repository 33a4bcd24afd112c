"""Dispersion of per-request counts: herding spread over all the choices of a request.

A server that draws a request's n uniforms one in each n-th of (0, 1) (stratified) gives every
choice the exact law and every pair a correlation of only −1/(n − 1): the pair rows miss it, the
counts' variance does not. Shared uniforms herd the other way. The bound's level is checked
against the exact permutation law and by simulation; the stated power by simulation.
"""

from __future__ import annotations

import numpy as np
import pytest

from specgauge.fixtures.fake_openai import FakeOpenAI
from specgauge.stattests.server.compare import one_sample_logprobs
from specgauge.stattests.server.dispersion import (band, critical_sums, dispersion, over_law, under_law,
                                                   under_rho, variance_ratio)

CHECK = "choices-within-request-dispersion"


@pytest.mark.parametrize("herd", [None, "stratified", "shared"])
def test_herded_choices_fail_the_dispersion_row(herd):
    """1,600 samples of one prompt in requests of 16: the exact fake passes with a stated figure at
    both positions, each herded one fails its dispersion row at the first position (stratified:
    that row alone among the dependence rows; the pair rows miss it)."""
    run = FakeOpenAI(seed=2, herd_choices=herd).run(["one"], 1600, n=16, length=2, top=9)
    cert = one_sample_logprobs(run, target_tv=0.5)
    rows = cert.frame[cert.frame["check"] == CHECK]
    assert list(rows["position"]) == ["pos0", "pos1"], cert.frame.to_string()
    if herd is None:
        assert cert.passed and (rows["min_detectable_tv"] < 0.25).all(), cert.frame.to_string()
        return
    failed = cert.frame[cert.frame["verdict"] == "fail"]
    assert "pos0" in set(failed.loc[failed["check"] == CHECK, "position"]), cert.frame.to_string()
    if herd == "stratified":
        assert set(failed["check"]) == {CHECK}, cert.frame.to_string()


def test_the_bound_holds_against_the_exact_permutation_law():
    """The critical values at rate 0.01 leave at most 0.01 of 20,000 permutations outside them."""
    rng = np.random.default_rng(0)
    n, r, k = 16, 100, 700
    lo, hi = critical_sums(n, r, k, 0.01)
    draws = np.zeros((20_000, n * r), np.int8)
    draws[:, :k] = 1
    s = (rng.permuted(draws, axis=1).reshape(-1, r, n).sum(axis=2).astype(float) ** 2).sum(axis=1)
    assert np.mean((s <= lo) | (s >= hi)) <= 0.01


def test_false_fail_rate_by_simulation():
    """300 sets of independent binomial counts at rate 0.05: rejections within the binomial margin."""
    rng = np.random.default_rng(1)
    rate, runs = 0.05, 300
    rejected = sum(not dispersion(rng.binomial(8, 0.4, size=50), 8, rate, figure=False).pvalue >= rate
                   for _ in range(runs))
    assert rejected <= rate * runs + 3 * np.sqrt(rate * (1 - rate) * runs), rejected


@pytest.mark.parametrize("side", [0, 1])
def test_stated_power_holds(side):
    """Counts drawn at the stated correlation (beta-binomial herded, stratified spread) are failed by
    the test itself (its own bound at the counts' pooled K) 300 times in 300, at rate 1e-6."""
    rng = np.random.default_rng(2 + side)
    n, r, p = 16, 200, 0.45
    counts = rng.binomial(n, p, size=r)
    stated = dispersion(counts, n, 1e-6)
    rho = stated.figure[side]
    assert 0 < rho < (0.2 if side == 0 else 1 / (n - 1))
    if side == 0:
        law = over_law(n, p, rho)
    else:
        share = np.linspace(0, 1, 2001)
        law = under_law(n, p, share[np.argmin([abs(abs(under_rho(n, p, s)) - rho) for s in share])])
    missed = 0
    for _ in range(300):
        c = rng.choice(n + 1, size=r, p=law / law.sum())
        k = int(c.sum())
        lo, hi = critical_sums(n, r, k, 1e-6)
        s = float((c.astype(float) ** 2).sum())
        missed += lo < s < hi
    assert missed <= 2, missed


def test_band_is_a_function_of_the_pooled_counts():
    labels = np.array([3, 3, 3, 1, 1, 2, 2, 2, 2, 5])
    inside = band(labels)
    assert inside.sum() in (4, 7) and inside[labels == 2].all()
    assert not band(np.zeros(5, np.int64)).any()
    assert variance_ratio(100 * 8 ** 2, 16, 100, 800) == 0  # every request 8 of 16: no spread at all


def sized_run(samples: int, seed: int = 3):
    """A sized probe's request sizes: a pilot of 20 a prompt (16 + 4) then the main draws (16s and a
    last partial request), so every prompt has two requests of 4 choices: a group too small to test."""
    from specgauge.stattests.server.probe import ProbeRun

    pilot = FakeOpenAI(seed=seed).run(["one", "two"], 20, n=16, length=2, top=9)
    main = FakeOpenAI(seed=seed + 1).run(["one", "two"], samples, n=16, length=2, top=9)
    shift = 1 + max(r["r"] for r in pilot.records)
    records = pilot.records + [{**r, "s": r["s"] + 20, "r": r["r"] + shift} for r in main.records]
    return ProbeRun(pilot.header, records), ProbeRun(pilot.header, [r for r in records if r["r"] >= shift])


def test_groups_too_small_are_left_out_and_the_figure_is_the_full_requests():
    """Two requests of 4 choices state no figure (inf) and made the row's figure inf; left out and
    counted, the row's figure is the one the full requests state on their own."""
    from specgauge.stattests.server.compare import independence_results

    run, full = sized_run(1604)
    rows = independence_results(run, 1e-6)["dispersion"]
    alone = independence_results(full, 1e-6)["dispersion"]
    for row, own in zip(rows, alone):
        assert np.isfinite(row.min_detectable_tv) and row.min_detectable_tv < 0.2, row.details["message"]
        assert row.min_detectable_tv == pytest.approx(own.min_detectable_tv, rel=0.15), (row, own)
        assert "2 groups too small to detect any herding or spreading left out untested" in row.details["message"]
