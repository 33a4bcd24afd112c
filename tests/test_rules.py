"""Other verification rules: two exact with lower acceptance, one lossy; certify tells them apart."""

from __future__ import annotations

import numpy as np
import pytest

from specgauge.stattests.chain.certify import CertConfig, certify
from specgauge.stattests.core.contract import check_emitted, emitted_lengths, load_decoder
from specgauge.stattests.decoders.rules import OneHotDraftDecoder, SampleAndMatchDecoder, TypicalAcceptanceDecoder
from specgauge.stattests.core.reference import NumpyDecoder
from specgauge.stattests.core.statistics import acceptance_rate_test, goodness_of_fit

V, GAMMA, B = 6, 2, 60_000
P = np.array([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
Q = np.array([0.35, 0.30, 0.20, 0.10, 0.03, 0.02])


def _round(seed: int = 0):
    rng = np.random.default_rng(seed)
    target = np.broadcast_to(P, (B, GAMMA + 1, V)).copy()
    draft = np.broadcast_to(Q, (B, GAMMA, V)).copy()
    tokens = rng.choice(V, size=(B, GAMMA), p=Q)
    return target, draft, tokens


@pytest.mark.parametrize("name, cls", [("onehot-q", OneHotDraftDecoder), ("match", SampleAndMatchDecoder),
                                       ("typical", TypicalAcceptanceDecoder)])
def test_short_names_load_the_rules(name, cls):
    assert isinstance(load_decoder(name), cls)


@pytest.mark.parametrize("decoder", [OneHotDraftDecoder(), SampleAndMatchDecoder()], ids=lambda d: d.name)
def test_exact_rules_emit_p_and_accept_sum_p_q(decoder):
    target, draft, tokens = _round()
    emitted = check_emitted(decoder.verify(target, draft, tokens, np.random.default_rng(1)), tokens, V)
    n = emitted_lengths(emitted)
    for k in range(GAMMA + 1):
        result = goodness_of_fit(np.bincount(emitted[n > k, k], minlength=V), P)
        assert result.passed, result.describe()
    rate = acceptance_rate_test(n > 1, float(P @ Q))
    assert rate.passed, rate.describe()
    assert float(P @ Q) < 1 - 0.5 * np.abs(P - Q).sum()  # lower than Leviathan's 1 - TV


def test_one_hot_rule_never_re_emits_the_rejected_token():
    target, draft, tokens = _round()
    emitted = OneHotDraftDecoder().verify(target, draft, tokens, np.random.default_rng(2))
    rejected_first = emitted_lengths(emitted) == 1
    assert (emitted[rejected_first, 0] != tokens[rejected_first, 0]).all()


def test_typical_acceptance_thresholds_are_medusas():
    rule = TypicalAcceptanceDecoder()
    uniform = np.full((1, 4), 0.25)  # H = ln 4: δ·e^{-H} = 0.075 < ε = 0.09
    peaked = np.array([[1.0, 0.0, 0.0, 0.0]])  # H = 0: threshold = ε
    np.testing.assert_allclose(rule.thresholds(uniform), [0.075])
    np.testing.assert_allclose(rule.thresholds(peaked), [0.09])
    with pytest.raises(ValueError, match="posterior_threshold"):
        TypicalAcceptanceDecoder(posterior_threshold=0.0)


def test_typical_acceptance_is_deterministic_in_the_draft_and_lossy():
    target, draft, tokens = _round()
    emitted = TypicalAcceptanceDecoder().verify(target, draft, tokens, np.random.default_rng(3))
    n = emitted_lengths(emitted)
    # every p(x) here exceeds the threshold (min p = 0.04 < 0.09 only for the last two tokens)
    plausible = P[tokens[:, 0]] > TypicalAcceptanceDecoder().thresholds(P[None])[0]
    assert ((n > 1) == plausible).all()
    result = goodness_of_fit(np.bincount(emitted[:, 0], minlength=V), P)
    assert not result.passed, result.describe()


FAST = dict(config=CertConfig(tv=0.03, seed=0), fixtures=["seed-six-token", "position-dependent"])


@pytest.mark.parametrize(
    "decoder, exact, optimal",
    [(NumpyDecoder(), True, True), (OneHotDraftDecoder(), True, False),
     (SampleAndMatchDecoder(), True, False), (TypicalAcceptanceDecoder(), False, False)],
    ids=lambda x: getattr(x, "name", None) or str(x),
)
def test_certify_separates_exact_optimal_and_lossy(decoder, exact, optimal):
    certificate = certify(decoder, **FAST)
    assert certificate.verdicts["exact"] is exact, certificate.summary()
    assert certificate.verdicts["optimal_acceptance"] is optimal, certificate.summary()
    assert certificate.verdicts["lossy"] is (not exact)
    if exact and not optimal:  # exact rules give up acceptance; typical acceptance may gain it
        assert certificate.acceptance_direction() == "below"
