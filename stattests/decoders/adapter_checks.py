"""Checks every adapter over an engine's verification kernel must pass, beside certification.

Quick, targeted cases that certification's fixtures do not isolate: inputs left untouched,
the same seed giving the same output, impossible tokens never emitted, a vocabulary larger
than a kernel's tile, and the all-zero residual. The backend tests (vLLM, SGLang) call
these on each adapter, in the manner of scikit-learn's ``estimator_checks``.
"""

from __future__ import annotations

import numpy as np

from specgauge.fixtures.pairs import SEED_DRAFT, SEED_TARGET

from specgauge.stattests.core.contract import PAD, Decoder, check_emitted
from specgauge.stattests.core.statistics import tokens_per_pass_mean_test, total_variation


def batch(p: np.ndarray, q: np.ndarray, rows: int, gamma: int, rng: np.random.Generator):
    """Contract inputs for ``rows`` rows of one (p, q) pair at every position, drafts drawn from q."""
    target = np.broadcast_to(p, (rows, gamma + 1, p.size)).copy()
    draft = np.broadcast_to(q, (rows, gamma, q.size)).copy()
    tokens = np.stack([rng.choice(q.size, size=rows, p=q) for _ in range(gamma)], axis=1)
    return target, draft, tokens.reshape(rows, gamma).astype(np.int64)


def seed_example_tokens_per_pass(decoder: Decoder, rows: int = 400, gamma: int = 2, seed: int = 1):
    """Mean tokens per pass on the seed's pair against the law, as a z-test at 1e-6."""
    rng = np.random.default_rng(seed)
    target, draft, tokens = batch(SEED_TARGET, SEED_DRAFT, rows, gamma, rng)
    out = check_emitted(decoder.verify(target, draft, tokens, rng), tokens, SEED_TARGET.size)
    alpha = np.full(gamma, 1.0 - float(total_variation(SEED_TARGET, SEED_DRAFT)))
    return tokens_per_pass_mean_test((out != PAD).sum(axis=1), alpha)


def check_inputs_untouched_and_reproducible(decoder: Decoder) -> None:
    target, draft, tokens = batch(SEED_TARGET, SEED_DRAFT, 64, 3, np.random.default_rng(2))
    copies = target.copy(), draft.copy(), tokens.copy()
    first = decoder.verify(target, draft, tokens, np.random.default_rng(7))
    second = decoder.verify(target, draft, tokens, np.random.default_rng(7))
    assert np.array_equal(first, second), "the same seed gave a different output"
    for label, before, after in zip(("target_probs", "draft_probs", "draft_tokens"), copies,
                                    (target, draft, tokens)):
        assert np.array_equal(before, after), f"verify modified {label}"


def check_zero_probability_never_emitted(decoder: Decoder) -> None:
    """Tokens of target probability 0 (logits −inf) stay impossible in every mode."""
    p = np.r_[0.4, 0.3, 0.0, 0.0, 0.2, 0.1, 0.0, 0.0]
    q = np.r_[0.2, 0.2, 0.15, 0.15, 0.1, 0.1, 0.05, 0.05]
    rng = np.random.default_rng(3)
    target, draft, tokens = batch(p, q, 300, 2, rng)
    out = check_emitted(decoder.verify(target, draft, tokens, rng), tokens, p.size)
    final = out[np.arange(out.shape[0]), (out != PAD).sum(axis=1) - 1]
    assert (p[final] > 0).all(), f"emitted impossible tokens {np.unique(final[p[final] <= 0]).tolist()}"


def check_vocabulary_beyond_tile(decoder: Decoder, vocab: int = 10_000) -> None:
    """Disjoint supports at both ends of a vocabulary larger than a kernel's tile: every draft
    is rejected and the correction must come from the last tile."""
    p = np.zeros(vocab); p[-8:] = 1 / 8
    q = np.zeros(vocab); q[:8] = 1 / 8
    rng = np.random.default_rng(4)
    target, draft, tokens = batch(p, q, 40, 1, rng)
    out = check_emitted(decoder.verify(target, draft, tokens, rng), tokens, vocab)
    assert (out[:, 0] >= vocab - 8).all() and (out[:, 1] == PAD).all(), np.unique(out).tolist()


def all_zero_residual_case(vocab: int):
    """p = q up to float32 rounding and a drafted token p cannot emit: always rejected, and
    max(p − q, 0) is zero in float32 (in float64 it is 1e-9 on token ``vocab − 4``).

    Returns ``(p, target_probs, draft_probs, draft_tokens)`` for 4 rows, γ = 1.
    """
    p = np.zeros(vocab); p[[vocab - 4, vocab - 3]] = 0.5
    q = np.zeros(vocab); q[vocab - 4] = 0.5 - 1e-9; q[vocab - 3] = 0.5; q[vocab - 2] = 1e-9
    target = np.broadcast_to(p, (4, 2, vocab)).copy()
    draft = np.broadcast_to(q, (4, 1, vocab)).copy()
    tokens = np.full((4, 1), vocab - 2, dtype=np.int64)
    return p, target, draft, tokens


def all_zero_residual_output(decoder: Decoder, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """``(p, emitted)`` for :func:`all_zero_residual_case`, checked against the contract.

    Every draft is rejected, so each row emits exactly one token: the kernel's answer to a
    residual that is zero in float32, which the caller compares with p.
    """
    p, target, draft, tokens = all_zero_residual_case(vocab)
    out = check_emitted(decoder.verify(target, draft, tokens, np.random.default_rng(5)), tokens, vocab)
    assert (out[:, 1] == PAD).all(), "a rejected draft must end the round"
    return p, out


def assert_declared_resolution(cert, decoder: Decoder) -> None:
    """The certificate reached the TVs ``decoder`` declares: at least its finer TV on each
    fixture of ``certification_tv_by_fixture`` (the first position's exactness check).

    (Other fixtures may reach finer figures than the coarse default: rows are also sized for
    the worst-case identity guarantee at every emitted position.)"""
    finer = dict(getattr(decoder, "certification_tv_by_fixture", None) or {})
    rows = cert.frame[(cert.frame["check"] == "exactness") & (cert.frame["verdict"] != "untested")]
    reached = rows.groupby("fixture")["min_detectable_tv"].min()
    for fixture, tv in reached.items():
        if fixture in finer:
            assert tv <= finer[fixture], f"{fixture}: detectable TV {tv:.3g}, declared {finer[fixture]:g}"


def assert_exact_and_optimal(cert, decoder: Decoder, declared: bool) -> None:
    """Exact, acceptance 1 − TV and tokens per pass on the law; with ``declared``, at the TVs
    the decoder declares (see :func:`assert_declared_resolution`)."""
    assert cert.verdicts["exact"], cert.summary()
    assert cert.verdicts["optimal_acceptance"], cert.summary()
    assert cert.passed
    if declared:
        assert_declared_resolution(cert, decoder)
