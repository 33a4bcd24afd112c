"""A zoo of buggy decoders: each reproduces a mistake shipped in a real implementation.

Every class here honours the decoder contract's signature and gets one thing wrong, the
way the implementation named in its docstring did. Each declares, in the manner of
scikit-learn's ``expected_failed_checks``, which certification checks must catch it and
why; ``tests/test_zoo.py`` certifies each one and fails the build when a declared check
stops catching its mutant. Load one with ``--specgauge-decoder specgauge.stattests.zoo:NAME`` (NAME is a key
of :data:`ZOO` or the class name).

Most mutants reuse :func:`specgauge.stattests.reference.leviathan_verify` with a wrong input (the
wrong p, the wrong q, the wrong row), so the mutation is the bug and nothing else.
"""

from __future__ import annotations

import numpy as np

from .contract import PAD
from .reference import accepted_prefix, assemble, final_rows, leviathan_verify
from .sampling import sample_rows, sample_rows_at


def _rule(target_probs, draft_probs, draft_tokens, accept_u, final_u, resample=None) -> np.ndarray:
    """Leviathan's rule with the final draw's uniforms given too (one per row).

    ``resample(final_p, final_q)`` replaces the residual normalize(max(p − q, 0)) when given.
    """
    if resample is None:
        return leviathan_verify(target_probs, draft_probs, draft_tokens, accept_u, None, final_u)
    n_accepted = accepted_prefix(target_probs, draft_probs, draft_tokens, accept_u)
    final_p, final_q, rejected = final_rows(target_probs, draft_probs, n_accepted)
    dist = np.where(rejected[:, None], resample(final_p, final_q), final_p)
    return assemble(draft_tokens, n_accepted, sample_rows_at(dist, final_u))


class _Mutant:
    """Base of the zoo: a named decoder and the checks that must catch it."""

    name: str = ""
    #: check name -> why that check must catch this mutant
    expected_failed_checks: dict[str, str] = {}

    def verify(self, target_probs, draft_probs, draft_tokens, rng):  # pragma: no cover - abstract
        raise NotImplementedError


class ResampleFromTarget(_Mutant):
    """On rejection, resample from p instead of the residual normalize(max(p − q, 0)).

    SafeAILab/EAGLE #329: the non-greedy replacement sampled from the target's p, not
    normalize(max(0, p − q)); the seed text warns of it ("the whole guarantee vanishes,
    silently"). Tokens the draft over-proposes come out too often: between q and p.
    """

    name = "resample-from-p"
    expected_failed_checks = {
        "exactness": "rejections re-deliver mass acceptance already delivered: emitted tokens are not ~ p",
        "pit-ratio": "the excess sits on tokens with p/q < 1, the start of the p/q order",
    }

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        u = rng.random(draft_tokens.shape)
        return _rule(target_probs, draft_probs, draft_tokens, u, rng.random(len(draft_tokens)),
                     resample=lambda p, q: p)


class DropBonusToken(_Mutant):
    """After γ acceptances, emit no bonus token from the target's last row.

    ohdearquant/lattice PR #509: on a full accept the target's bonus token was dropped
    (the seed text's "+1 ... free and easy to miss"). Every token is still ~ p, so only
    the optimality checks see it: a fully accepted round yields γ tokens, not γ + 1.
    """

    name = "drop-bonus"
    expected_failed_checks = {
        "tokens-per-pass": "N = γ+1 never occurs; P(N = γ) doubles up with α^γ",
        "law": "mean tokens per pass falls by α^γ below (1 − α^(γ+1)) / (1 − α)",
    }

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        emitted = leviathan_verify(target_probs, draft_probs, draft_tokens,
                                   rng.random(draft_tokens.shape), rng)
        emitted[:, -1] = PAD
        return emitted


class BonusFromDraft(_Mutant):
    """The bonus token drawn from the draft's last distribution q_γ−1 instead of p_γ.

    Listed in specgauge issue 2's zoo; no public report of exactly this was found. It is
    the bonus-row form of the wrong-logits-slice bugs (TensorRT-LLM PR #15098): the
    bonus is sampled from the draft's last row of probabilities.
    """

    name = "bonus-from-q"
    expected_failed_checks = {
        "exactness": "the bonus position is distributed as q, not p (tested on its own)",
        "pit-id": "the bonus token's PIT under p is not uniform",
    }

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        target = np.array(target_probs)
        target[:, -1] = draft_probs[:, -1]
        return leviathan_verify(target, draft_probs, draft_tokens, rng.random(draft_tokens.shape), rng)


class ReusedUniform(_Mutant):
    """One uniform for acceptance and for the recovery draw (vLLM #47386, PR #54282).

    vLLM drew draft noise, the acceptance uniform and the recovery noise from the same
    Philox (seed, position), so recovery reused noise already conditioned by the rejection.
    Here the rejected position's acceptance uniform u ≥ p(x)/q(x) picks the residual token
    by inverse CDF: tokens late in id order are emitted far too often.
    """

    name = "reused-uniform"
    expected_failed_checks = {
        "exactness": "given a rejection, u is not Uniform(0, 1): the residual draw is biased",
        "pit-id": "corrections pile up at the end of the id order",
    }

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        batch, gamma = draft_tokens.shape
        u = rng.random((batch, gamma + 1))  # column γ: the bonus's own uniform
        n_accepted = accepted_prefix(target_probs, draft_probs, draft_tokens, u[:, :gamma])
        reused = u[np.arange(batch), n_accepted]  # the rejecting uniform, or the bonus's
        return _rule(target_probs, draft_probs, draft_tokens, u[:, :gamma], reused)


class TargetTemperatureIgnored(_Mutant):
    """The request's temperature not applied on the target side (vLLM #9834, PR #10198).

    The contract's p is the tempered target the user asked for, softmax(logits / T) with
    T = ``temperature``; the verifier works from the untempered softmax(logits), which is
    ∝ p^T. Nothing crashes: the output is exactly the T = 1 distribution.
    """

    name = "target-temperature-ignored"
    temperature = 0.5
    expected_failed_checks = {
        "exactness": "the output follows softmax(logits) instead of softmax(logits / T)",
    }

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        untempered = target_probs ** self.temperature
        untempered /= untempered.sum(axis=-1, keepdims=True)
        return leviathan_verify(untempered, draft_probs, draft_tokens, rng.random(draft_tokens.shape), rng)


class TopKDraftRenormalised(_Mutant):
    """q renormalised after top-k inside the verifier but not for drafting (HF #47932, PR #47961).

    HF's candidate generators drafted from one set of processed logits and returned
    another as q (measured TV to the target: median 0.0485, worst 0.31). Here the draft
    tokens come from the raw q while the verifier divides by top-k(q) renormalised: tokens
    outside the top k have q' = 0 and are always accepted, the others too rarely.
    """

    name = "topk-renormalised-q"
    top_k = 3
    expected_failed_checks = {
        "exactness": "acceptance and residual use a q' the drafts were not drawn from",
        "acceptance": "acceptance is 1 − TV(p, q') weighted by q, not 1 − TV(p, q)",
    }

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        k = min(self.top_k, draft_probs.shape[-1])
        kth = -np.sort(-draft_probs, axis=-1)[..., k - 1: k]
        truncated = np.where(draft_probs >= kth, draft_probs, 0.0)
        truncated /= truncated.sum(axis=-1, keepdims=True)
        return leviathan_verify(target_probs, truncated, draft_tokens, rng.random(draft_tokens.shape), rng)


class AcceptEveryDraft(_Mutant):
    """Every draft token accepted, then the bonus (HF #28508).

    A faulty ``n_matches`` check in HF's assisted generation accepted every candidate.
    The output at drafted positions is q; tokens per pass is always γ + 1.
    """

    name = "accept-all"
    expected_failed_checks = {
        "exactness": "drafted positions are distributed as q, not p",
        "acceptance": "acceptance is 1, not 1 − TV(p, q)",
        "tokens-per-pass": "every pass yields γ + 1 tokens",
    }

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        bonus = sample_rows(target_probs[:, -1], rng)
        return np.concatenate([draft_tokens, bonus[:, None]], axis=1).astype(np.int64)


class OffByOneTargetRow(_Mutant):
    """Draft position k verified against target row k + 1 (an off-by-one in the logits slice).

    ohdearquant/lattice #243: verify_draft checked draft[i] against the logits of the
    position after it (TensorRT-LLM PR #15098 verified against a wrong logits slice too).
    Invisible when every position has the same p; wrong as soon as p changes.
    """

    name = "off-by-one-target-row"
    expected_failed_checks = {
        "exactness": "position k is accepted and corrected against p_(k+1)",
    }

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        shifted = np.concatenate([target_probs[:, 1:], target_probs[:, -1:]], axis=1)
        return leviathan_verify(shifted, draft_probs, draft_tokens, rng.random(draft_tokens.shape), rng)


class InPlaceDraftProbs(_Mutant):
    """Mutates ``draft_probs`` in place and reads it again (vLLM PR #16952).

    vLLM's ``probs.div_(q)`` overwrote draft probabilities that were read afterwards. Here
    the residual max(p − q, 0) is computed into draft_probs ahead of time, and the
    acceptance ratio then reads the overwritten array as if it were still q.
    """

    name = "in-place-draft-probs"
    expected_failed_checks = {
        "contract": "verify must not modify its inputs (the harness compares them after the call)",
    }

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        gamma = draft_tokens.shape[1]
        np.subtract(target_probs[:, :gamma], draft_probs, out=draft_probs)
        np.maximum(draft_probs, 0.0, out=draft_probs)
        return leviathan_verify(target_probs, draft_probs, draft_tokens, rng.random(draft_tokens.shape), rng)


class SharedRowRandomness(_Mutant):
    """Rows of a batch share random numbers (TensorRT-LLM #19487, PR #17599).

    TensorRT-LLM's one-model speculative path gave the requests of a batch one shared RNG
    stream ("identical/degenerate samples"); the same happens when the n parallel samples
    of one request are seeded with the request's seed. Here rows 2i and 2i + 1 use the
    same uniforms for acceptance and for the final draw. Each row's marginal distribution
    is exact, so only a test of independence across rows sees it.
    """

    name = "shared-row-randomness"
    group = 2
    expected_failed_checks = {
        "independence-rows": "rows 2i and 2i+1 draw with the same uniforms: their tokens are dependent",
    }

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        batch, gamma = draft_tokens.shape
        groups = -(-batch // self.group)
        shared = np.repeat(rng.random((groups, gamma + 1)), self.group, axis=0)[:batch]
        final_u = np.repeat(rng.random((groups, gamma + 1)), self.group, axis=0)[:batch]
        n_accepted = accepted_prefix(target_probs, draft_probs, draft_tokens, shared[:, :gamma])
        return _rule(target_probs, draft_probs, draft_tokens, shared[:, :gamma],
                     final_u[np.arange(batch), n_accepted])


class WrongRowDraftProbs(_Mutant):
    """One row's q used for another row's verification (vLLM PR #41044, review).

    vLLM packed MTP draft probabilities for the rejection sampler without following the
    batch's reordering, so a request could be verified against another request's q.
    Here row b reads draft_probs[b − 1]. Invisible when every row has the same q; wrong
    as soon as rows differ, as they do in any real batch.
    """

    name = "wrong-row-q"
    expected_failed_checks = {
        "pit-ratio": "accepting with a neighbour's q biases tokens along this row's p/q order",
        "acceptance-rate": "acceptance is min(1, p/q') averaged over q, not 1 − TV(p, q)",
    }

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        return leviathan_verify(target_probs, np.roll(draft_probs, 1, axis=0), draft_tokens,
                                rng.random(draft_tokens.shape), rng)


ZOO: dict[str, type[_Mutant]] = {cls.name: cls for cls in [
    ResampleFromTarget, DropBonusToken, BonusFromDraft, ReusedUniform, TargetTemperatureIgnored,
    TopKDraftRenormalised, AcceptEveryDraft, OffByOneTargetRow, InPlaceDraftProbs,
    SharedRowRandomness, WrongRowDraftProbs,
]}


def __getattr__(name: str):
    """``specgauge.stattests.zoo:NAME`` with NAME a zoo key (``resample-from-p`` is not an identifier)."""
    try:
        return ZOO[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
