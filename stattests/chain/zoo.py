"""A zoo of buggy decoders: each reproduces a mistake shipped in a real implementation.

Every class here honours the decoder contract's signature and gets one thing wrong, the
way the implementation named in its docstring did. Each declares, in the manner of
scikit-learn's ``expected_failed_checks``, which certification checks must catch it and
why; ``tests/test_zoo.py`` certifies each one and fails the build when a declared check
stops catching its mutant. Load one with ``--specgauge-decoder specgauge.stattests.chain.zoo:NAME`` (NAME is a key
of :data:`ZOO` or the class name).

Most mutants reuse :func:`specgauge.stattests.core.reference.leviathan_verify` with a wrong input (the
wrong p, the wrong q, the wrong row), so the mutation is the bug and nothing else.
"""

from __future__ import annotations

import math

import numpy as np

from specgauge.stattests.core.contract import PAD
from specgauge.stattests.core.reference import accepted_prefix, assemble, final_rows, leviathan_verify, residual
from specgauge.stattests.core.sampling import sample_rows, sample_rows_at


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


def _final_draw_by(draw, target_probs, draft_probs, draft_tokens, rng) -> np.ndarray:
    """Leviathan's acceptance, then the final token from ``draw(final_p, dist, rng)``, where
    dist is the residual after a rejection and p after a full accept."""
    n_accepted = accepted_prefix(target_probs, draft_probs, draft_tokens, rng.random(draft_tokens.shape))
    final_p, final_q, _ = final_rows(target_probs, draft_probs, n_accepted)
    return assemble(draft_tokens, n_accepted, draw(final_p, residual(final_p, final_q), rng))


class _FinalDraw:
    """A rule that differs from Leviathan's only in how it draws the final token (``_draw``)."""

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        return _final_draw_by(self._draw, target_probs, draft_probs, draft_tokens, rng)


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


# ---------------------------------------------------------------- the audit's bug classes
#
# An adversarial audit of the gate (specgauge issue 10) wrote plausible bugs that the
# certification of that time passed. Each lives where real engines keep special cases.


class SmallBatchFastPath(_Mutant):
    """A fast path for latency-bound batches (≤ 8 rows) that resamples rejections from p.

    From specgauge issue 10's audit. Engines keep separate paths for small batches (vLLM
    and SGLang capture CUDA graphs per batch size, FlashInfer picks kernels by batch): a
    bug confined to one (here EAGLE #329's resample-from-p) escapes fixtures whose calls
    hold hundreds of rows. The small-batch fixtures (1, 2, 3, 8 rows a call) catch it.
    """

    name = "small-batch-fast-path"
    max_rows = 8
    expected_failed_checks = {
        "exactness": "on calls of ≤ 8 rows rejections re-deliver p's mass: the output is not ~ p",
    }

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        u = rng.random(draft_tokens.shape)
        final_u = rng.random(len(draft_tokens))
        if len(draft_tokens) > self.max_rows:
            return _rule(target_probs, draft_probs, draft_tokens, u, final_u)
        return _rule(target_probs, draft_probs, draft_tokens, u, final_u, resample=lambda p, q: p)


class LongDraftBug(_Mutant):
    """Positions from the fifth on verified against the untempered target: a bug only at γ ≥ 5.

    From specgauge issue 10's audit: kernels unrolled for short drafts (γ ≤ 4) fall back to
    a generic loop for longer ones, and the project's own default deployment drafts 5.
    Here, when γ ≥ 5, positions k ≥ 4 (the bonus included) read p^T renormalised with
    T = 0.5, the target-temperature bug of vLLM #9834 confined to the long-draft path.
    """

    name = "long-draft-bug"
    first_wrong = 4
    expected_failed_checks = {
        "exactness": "at positions ≥ 4 of a γ ≥ 5 draft the output follows p^0.5, not p",
    }

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        gamma = draft_tokens.shape[1]
        target = np.array(target_probs)
        if gamma > self.first_wrong:
            k = self.first_wrong
            target[:, k:] = target_probs[:, k:] ** 0.5
            target[:, k:] /= target[:, k:].sum(axis=-1, keepdims=True)
        return leviathan_verify(target, draft_probs, draft_tokens, rng.random(draft_tokens.shape), rng)


class AlternatingTailBias(_FinalDraw, _Mutant):
    """Rare tokens merged pairwise on large vocabularies: odd ids of the tail emitted as their even neighbour.

    From specgauge issue 10's audit: a vocabulary-sharded or bucketed sampler that loses the
    low bit of rare token ids. The bias alternates token by token, so no prefix of any
    vocabulary order carries it (the PIT–KS tests) and it sits inside the chi-square's
    pooled bin; on the 32k fixture it moves TV 0.20 of the bonus token's law (the audit's
    wider tail: 0.25). Only an unpooled look at the tail, the collision count of rare
    tokens, sees it.
    """

    name = "alternating-tail-bias"
    min_vocab = 4096
    threshold = 30.0  # "rare": p below threshold / V (beyond rank 82 of the 32k Zipf fixture)
    expected_failed_checks = {
        "tail-collisions": "merging rare neighbours doubles the tail's collision rate",
    }

    def _draw(self, final_p, dist, rng):
        token = sample_rows(dist, rng)
        if dist.shape[-1] >= self.min_vocab:  # the sampler's large-vocabulary path
            rare = final_p[np.arange(len(token)), token] < self.threshold / dist.shape[-1]
            token = np.where(rare & (token % 2 == 1), token - 1, token)
        return token


class SharedAtHalfBatch(_Mutant):
    """Rows i and i + B/2 of a call draw the same uniforms.

    From specgauge issue 10's audit: a sampler that splits the batch in two halves (two
    streams, two devices) and seeds both halves' streams alike. Each row is exact; rows
    half a call apart are dependent (token-count correlation 0.375 in the audit).
    """

    name = "shared-at-half-batch"
    expected_failed_checks = {
        "independence-rows": "rows i and i + B/2 of a call share their uniforms",
    }

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        batch, gamma = draft_tokens.shape
        half = -(-batch // 2)
        u = np.tile(rng.random((half, gamma + 1)), (2, 1))[:batch]
        return _rule(target_probs, draft_probs, draft_tokens, u[:, :gamma], u[:, gamma])


class CorrectionFromEarlierToken(_Mutant):
    """The correction's uniform recycled from the first token: exact marginals, wrong joint.

    From specgauge issue 10's audit: a "recycle the randomness" optimisation that draws the
    correction at position k ≥ 1 with the randomized PIT of the accepted first token,
    G(x₀⁻) + v·g(x₀) with g = min(p₀, q₀)/α₀. That uniform is exactly Uniform(0, 1), so
    every position on its own is exact; but the correction is now a function of x₀.
    """

    name = "correction-from-earlier-token"
    expected_failed_checks = {
        "independence-positions": "the correction is a monotone function of the first token",
    }

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        batch, gamma = draft_tokens.shape
        u = rng.random(draft_tokens.shape)
        n_accepted = accepted_prefix(target_probs, draft_probs, draft_tokens, u)
        final_u = rng.random(batch)
        if gamma:
            accepted_law = np.minimum(target_probs[:, 0], draft_probs[:, 0])
            accepted_law /= np.maximum(accepted_law.sum(axis=1, keepdims=True), 1e-300)
            rows = np.arange(batch)
            x0 = draft_tokens[:, 0]
            below = np.cumsum(accepted_law, axis=1)[rows, x0] - accepted_law[rows, x0]
            recycled = np.clip(below + rng.random(batch) * accepted_law[rows, x0], 0.0, 1.0 - 1e-12)
            final_u = np.where(n_accepted >= 1, recycled, final_u)
        return _rule(target_probs, draft_probs, draft_tokens, u, final_u)


class ReseedWithoutAdvancing(_Mutant):
    """Seeds its own stream from the caller's generator state without advancing it.

    From specgauge issue 10's audit: an adapter that copies the caller's generator state
    into its own generator (to hand a seed to a device RNG, say) but never draws from the
    caller's. The same seed gives the same output, as the contract asks; but every call
    then repeats the previous call's uniforms, so row i of one call depends on row i of
    the next.
    """

    name = "reseed-without-advancing"
    expected_failed_checks = {
        "independence-rows": "row i of consecutive calls reuses the same uniforms",
    }

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        local = np.random.Generator(type(rng.bit_generator)())
        local.bit_generator.state = rng.bit_generator.state  # read, never advanced
        return leviathan_verify(target_probs, draft_probs, draft_tokens, local.random(draft_tokens.shape), local)


# ---------------------------------------------------------------- exact alternatives: must pass


class RecycledUniforms:
    """Leviathan's rule drawing the correction with the rejecting uniform, rescaled.

    Given a rejection at x, u is Uniform(r, 1) with r = min(1, p/q)(x), so (u − r)/(1 − r)
    is a fresh Uniform(0, 1); given a full accept, u/r of the last position is. Exact, and
    one uniform per drafted position is all it draws: what the reused-uniform mutant
    should have done.
    """

    name = "recycled-uniforms"

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        batch, gamma = draft_tokens.shape
        if gamma == 0:
            return leviathan_verify(target_probs, draft_probs, draft_tokens, rng.random((batch, 0)), rng)
        u = rng.random(draft_tokens.shape)
        n_accepted = accepted_prefix(target_probs, draft_probs, draft_tokens, u)
        rows = np.arange(batch)
        at = np.minimum(n_accepted, gamma - 1)
        p_x = target_probs[rows, at, draft_tokens[rows, at]]
        q_x = draft_probs[rows, at, draft_tokens[rows, at]]
        r = np.minimum(1.0, p_x / q_x)
        u_at = u[rows, at]
        with np.errstate(divide="ignore", invalid="ignore"):
            fresh = np.where(n_accepted < gamma, (u_at - r) / (1.0 - r), u_at / r)
        return _rule(target_probs, draft_probs, draft_tokens, u, np.clip(np.nan_to_num(fresh), 0.0, 1.0 - 1e-16))


class GumbelMaxResampler(_FinalDraw):
    """The correction and bonus drawn by Gumbel-max, argmax(log r + G), as many engines sample."""

    name = "gumbel-max"

    @staticmethod
    def _draw(_final_p, dist, rng):
        with np.errstate(divide="ignore"):
            return (np.log(dist) + rng.gumbel(size=dist.shape)).argmax(axis=1)


class PermutedInverseCdf(_FinalDraw):
    """The final draw by inverse CDF over a shuffled vocabulary, rows served in a shuffled order."""

    name = "permuted-inverse-cdf"

    @staticmethod
    def _draw(_final_p, dist, rng):
        vocab_order = rng.permutation(dist.shape[1])
        row_order = rng.permutation(dist.shape[0])
        u = np.empty(dist.shape[0])
        u[row_order] = rng.random(dist.shape[0])
        return vocab_order[sample_rows_at(dist[:, vocab_order], u)]


class BonusFromPositionFour(_Mutant):
    """The bonus read from a buffer sized for four drafts: at γ ≥ 5 the bonus uses row 4 of p.

    From specgauge issue 17's audit, marked plausible (no public report found): engines size
    per-step buffers for their common draft length and index the bonus row by
    min(γ, 4). With the same p at every position it has TV 0; the position-varying
    small-batch fixtures (γ 5 to 8, p rolled by one id per position) show it.
    """

    name = "bonus-from-position-4"
    buffer = 4
    expected_failed_checks = {
        "exactness": "at γ ≥ 5 the bonus follows p_4, not p_γ",
        "identity": "the bonus position's law is p_4's, far from p_γ in every direction",
    }

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        target = np.array(target_probs)
        if draft_tokens.shape[1] > self.buffer:
            target[:, -1] = target_probs[:, self.buffer]
        return leviathan_verify(target, draft_probs, draft_tokens, rng.random(draft_tokens.shape), rng)


class LargeVocabBonusFromDraft(_Mutant):
    """The bonus drawn from q on the large-vocabulary multi-draft path (V > 4096, γ ≥ 2).

    From specgauge issue 17's audit, marked plausible: issue 2's bonus-from-q (the
    wrong-logits-slice bugs of TensorRT-LLM PR #15098) confined to the path a 152k
    vocabulary at γ = 5 takes, which no fixture ran before (large vocabularies ran at γ = 1).
    """

    name = "large-vocab-bonus-from-q"
    min_vocab = 4097
    expected_failed_checks = {
        "identity": "on the 32k and 152k fixtures (γ 4, 5) the bonus follows q_{γ-1}, not p_γ",
    }

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        target = np.array(target_probs)
        if target.shape[-1] >= self.min_vocab and draft_tokens.shape[1] >= 2:
            target[:, -1] = draft_probs[:, -1]
        return leviathan_verify(target, draft_probs, draft_tokens, rng.random(draft_tokens.shape), rng)


class StratifiedRows(_Mutant):
    """The rows of a call share one stratified set of uniforms: exact marginals, negatively dependent rows.

    From specgauge issue 17's audit, marked plausible: a variance-reduction idea (one
    Latin-hypercube draw per call, row i taking stratum σ(i)) that keeps every row's law
    and breaks independence between rows: a call's token counts are under-dispersed. The
    two-sided independence tests see it.
    """

    name = "stratified-rows"
    expected_failed_checks = {
        "independence-rows": "a call's rows are negatively dependent: its table is under-dispersed (lower tail)",
    }

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        batch, gamma = draft_tokens.shape
        strata = np.argsort(rng.random((gamma + 1, batch)), axis=1).T  # [B, γ+1]: a permutation per column
        u = (strata + rng.random((batch, gamma + 1))) / batch
        return _rule(target_probs, draft_probs, draft_tokens, u[:, :gamma], u[:, gamma])


class BandPreservingTailPermutation(_FinalDraw, _Mutant):
    """Rare tokens emitted as another token of the same probability band: each band's mass
    and collision rate kept, the tokens' probabilities permuted.

    From specgauge issue 17's audit, marked plausible: a bucketed sampler that keys rare
    tokens by their probability band (×4 wide) and indexes the bucket with the wrong
    offset. Every band's collision count (Σr² is unchanged) and any pooled bin are blind to
    it: it is Paninski's hard direction, which an identity test with √V/ε² samples sees
    (the chi-square too, where its bins are fine enough not to pool the tail). It permutes
    TV 0.14 of p on zipf-1k (0.09 on the 32k bonus, where the default tier's rows are too
    few for any test to guarantee it: see the identity rows' guaranteed TV there).
    """

    name = "band-tail-permutation"
    threshold = 30.0  # "rare": p below threshold / V
    expected_failed_checks = {
        "identity": "the rare tokens' probabilities are permuted within bands: TV 0.14 of p on zipf-1k, "
                    "above its guaranteed TV",
    }

    def __init__(self) -> None:
        self._maps: dict[bytes, np.ndarray] = {}

    def _map(self, p: np.ndarray) -> np.ndarray:
        key = p.tobytes()
        if key not in self._maps:
            vocab = p.size
            sigma = np.arange(vocab)
            rare = (p > 0) & (p < self.threshold / vocab)
            band = np.floor(np.log2(np.where(rare, p, 1.0) * vocab / self.threshold) / 2).astype(np.int64)  # ×4 wide
            rng = np.random.default_rng(vocab)  # the same wrong offsets on every call
            for b in np.unique(band[rare]):
                members = np.flatnonzero(rare & (band == b))
                sigma[members] = members[rng.permutation(members.size)]
            self._maps[key] = sigma
        return self._maps[key]

    def _draw(self, final_p, dist, rng):
        token = sample_rows(dist, rng)
        if dist.shape[-1] < 64:
            return token
        # one map per distinct p row (a handful on context-free fixtures), rows told apart by a fingerprint
        fingerprint = final_p @ np.random.default_rng(1).random(final_p.shape[-1])
        _, first, which = np.unique(fingerprint, return_index=True, return_inverse=True)
        for j, row in enumerate(first):
            rows = which == j
            token[rows] = self._map(final_p[row])[token[rows]]
        return token


def hard_bias(p: np.ndarray, tv: float) -> np.ndarray:
    """p moved by TV ``tv`` in Valiant & Valiant's hard direction: tokens paired with their
    neighbour in p's order, ± p^(2/3) within each pair (fixed signs), no loss beyond p."""
    order = np.argsort(p, kind="stable")[::-1]
    order = order[p[order] > 0]
    delta = np.zeros_like(p)
    size = np.where(p > 0, p, 0.0) ** (2.0 / 3.0)
    for i in range(0, order.size - 1, 2):
        a, b = order[i], order[i + 1]
        d = min(size[a], size[b])
        delta[a], delta[b] = (d, -d) if i % 4 else (-d, d)
    for _ in range(60):  # shrink the pairs that would overdraw p
        scale = tv / max(0.5 * np.abs(delta).sum(), 1e-300)
        over = delta * scale < -p
        if not over.any():
            return np.clip(p + delta * scale, 0.0, None)
        partner = np.zeros_like(delta)
        for i in range(0, order.size - 1, 2):
            a, b = order[i], order[i + 1]
            if over[a] or over[b]:
                partner[a] = partner[b] = 1.0
        delta = np.where(partner > 0, delta * 0.5, delta)
    return p


class HerdedRemainder(_Mutant):
    """The bonus token drawn from a low-discrepancy stream carried from call to call, from
    a target law biased in the hard direction.

    The shape of a herded or quasi-random sampler: the bonus draws' uniforms are a Weyl
    sequence u_r = frac(φ + r α) whose phase φ, the remainder, is carried to the next call
    while the caller passes the same generator (so the same seed still gives the same
    output). Drafts are verified by Leviathan's rule with fresh uniforms, so positions
    before the bonus are exact and independent (position 0's row tests see nothing). The
    bonus's marginal is p biased by TV ``tv`` in Valiant & Valiant's paired direction (on
    vocabularies of 64 tokens or more): 1.3 × the identity row's worst-case TV at the
    bonus of zipf-1k-tv0.05 in the default tier (0.060). Its counts are under-dispersed
    (each token's count within about one of its expectation), which lowers the identity
    statistic and the chi-square; a test of the rows' independence at the bonus sees it.
    From specgauge issue 27's outside check: a decoder with under-dispersed draws across
    calls, biased at 1.26 × the stated guarantee, passed the whole default tier at three seeds.
    """

    name = "herded-remainder"
    tv = 0.078
    step = math.sqrt(2.0) % 1.0
    expected_failed_checks = {
        "independence-calls": "the bonus tokens' counts are under-dispersed (lower tail): a low-discrepancy "
                              "stream carried from call to call",
    }

    def __init__(self) -> None:
        self._rng = None
        self._phase = 0.0
        self._biased: dict[bytes, np.ndarray] = {}

    def _law(self, p: np.ndarray) -> np.ndarray:
        if p.size < 64:
            return p
        key = p.tobytes()
        if key not in self._biased:
            self._biased[key] = hard_bias(p, self.tv)
        return self._biased[key]

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        if rng is not self._rng:  # a new generator: a fresh phase
            self._rng, self._phase = rng, float(rng.random())
        n_accepted = accepted_prefix(target_probs, draft_probs, draft_tokens, rng.random(draft_tokens.shape))
        final_p, final_q, rejected = final_rows(target_probs, draft_probs, n_accepted)
        u = rng.random(len(draft_tokens))
        bonus = np.flatnonzero(~rejected)
        u[bonus] = (self._phase + np.arange(1, bonus.size + 1) * self.step) % 1.0
        self._phase = (self._phase + bonus.size * self.step) % 1.0
        dist = residual(final_p, final_q)
        dist[bonus] = final_p[bonus]
        if bonus.size:  # one biased law per distinct bonus row (few on context-free fixtures)
            fingerprint = final_p[bonus] @ np.random.default_rng(1).random(final_p.shape[-1])
            _, first, which = np.unique(fingerprint, return_index=True, return_inverse=True)
            for j, row in enumerate(first):
                dist[bonus[which == j]] = self._law(final_p[bonus[row]])
        return assemble(draft_tokens, n_accepted, sample_rows_at(dist, u))


class HerdedBonus(HerdedRemainder):
    """The bonus from the same carried low-discrepancy stream as ``herded-remainder``, from
    p itself: every marginal exact, so only the rows' independence across calls is wrong.
    No identity row can see it (each position's law is p); ``independence-calls`` must,
    by the under-dispersion of the bonus counts across blocks of calls. From specgauge
    issue 34: such a decoder passed ``independence-calls`` on all three SmolLM2 bonuses at
    the default size (dispersion 0.06–0.21 of an independent sample's).
    """

    name = "herded-bonus"
    tv = 0.0
    expected_failed_checks = {
        "independence-calls": "the bonus counts are under-dispersed across calls (a carried low-discrepancy "
                              "stream) while every marginal is exact",
    }

    def _law(self, p: np.ndarray) -> np.ndarray:
        return p


class SmallResidualFromTarget(_Mutant):
    """After a rejection, the correction drawn from p when the residual mass is below 0.03.

    From specgauge issue 47: a guard for an all-zero residual (the case where vLLM and SGLang
    emit a token of probability 0, docs/gate.md's finding; the reference falls back to p only
    when the residual sums to 0) written with a generous epsilon, sum(max(p − q, 0)) < 0.03,
    to dodge float32 rounding. It fires only where the draft is near-identical (α > 0.97),
    the regime high-acceptance drafts such as EAGLE-3 live in, and there it moves
    TV (1 − α)·TV(p, residual): 0.007-0.02 on ``near-identical``, whose guarantee is sized
    below that. Every other fixture's residual is larger, so they pass it.
    """

    name = "small-residual-from-p"
    threshold = 0.03
    expected_failed_checks = {
        "identity": "on near-identical the corrections follow p, not the residual: each position's law "
                    "moves by (1 − α)·TV(p, residual), above the guarantee sized there",
        "exactness": "the same shift seen by the pooled chi-square at every drafted position of near-identical",
    }

    def _resample(self, final_p: np.ndarray, final_q: np.ndarray) -> np.ndarray:
        dist = residual(final_p, final_q)
        small = np.maximum(final_p - final_q, 0.0).sum(axis=1) < self.threshold
        dist[small] = final_p[small]
        return dist

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        u = rng.random(draft_tokens.shape)
        return _rule(target_probs, draft_probs, draft_tokens, u, rng.random(len(draft_tokens)),
                     resample=self._resample)


#: Exact rules other than the reference's: the certification must pass them.
EXACT_ALTERNATIVES = {cls.name: cls for cls in [RecycledUniforms, GumbelMaxResampler, PermutedInverseCdf]}


ZOO: dict[str, type[_Mutant]] = {cls.name: cls for cls in [
    ResampleFromTarget, DropBonusToken, BonusFromDraft, ReusedUniform, TargetTemperatureIgnored,
    TopKDraftRenormalised, AcceptEveryDraft, OffByOneTargetRow, InPlaceDraftProbs,
    SharedRowRandomness, WrongRowDraftProbs, SmallBatchFastPath, LongDraftBug, AlternatingTailBias,
    SharedAtHalfBatch, CorrectionFromEarlierToken, ReseedWithoutAdvancing, BonusFromPositionFour,
    LargeVocabBonusFromDraft, StratifiedRows, BandPreservingTailPermutation, HerdedRemainder,
    HerdedBonus, SmallResidualFromTarget,
]}


def __getattr__(name: str):
    """``specgauge.stattests.chain.zoo:NAME`` with NAME a zoo key (``resample-from-p`` is not an identifier)."""
    try:
        return ZOO[name] if name in ZOO else EXACT_ALTERNATIVES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


# ---------------------------------------------------------------- rows that share their bonus draw


class _SharedBonusDraw(_Mutant):
    """Leviathan's rule, except that a row copies its partner's bonus draw when both reach the
    bonus: each row's law is exact (the partner's bonus is a draw from the same p), while the
    pair's bonus tokens are equal. ``_partners(B, rng)`` gives the pairs (rows a, rows b)."""

    def _partners(self, batch: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError  # pragma: no cover - abstract

    def verify(self, target_probs, draft_probs, draft_tokens, rng):
        n_accepted = accepted_prefix(target_probs, draft_probs, draft_tokens, rng.random(draft_tokens.shape))
        final_p, final_q, rejected = final_rows(target_probs, draft_probs, n_accepted)
        u = rng.random(len(draft_tokens))
        a, b = self._partners(len(draft_tokens), rng)
        both = ~rejected[a] & ~rejected[b]
        u[b[both]] = u[a[both]]
        dist = np.where(rejected[:, None], residual(final_p, final_q), final_p)
        return assemble(draft_tokens, n_accepted, sample_rows_at(dist, u))


class BonusSharedAtHalfBatch(_SharedBonusDraw):
    """Row i's bonus token copied into row i + B/2 of the call, where both reach the bonus.

    From specgauge issue 49's outside audit: a bonus sampler that draws one half of the batch
    and reuses the draws for the other half (two devices seeded alike, a buffer of B/2 uniforms
    read twice). Every position's law, the bonus's included, is exact; with position 0 alone
    tested for independence it passed every row of the gate at the default size.
    """

    name = "bonus-shared-at-half-batch"
    expected_failed_checks = {
        "independence-rows": "rows i and i + B/2 of a call emit the same bonus token (the lag-B/2 or "
                             "every-pair test at the bonus)",
    }

    def _partners(self, batch, rng):
        h = batch // 2
        return np.arange(h), np.arange(h) + h


class BonusPairedAtRandom(_SharedBonusDraw):
    """Rows paired at random within a call share their bonus draw, where both reach the bonus.

    From specgauge issue 49's outside audit: a sampler that draws one bonus uniform per pair of
    requests, the pairs made by a shuffle of the batch (a scheduler's order). No fixed lag
    holds the dependence; each call's count of bonus tokens in a band is over-dispersed
    (variance up to twice an independent sample's), which the whole-call count test sees where
    a run has enough calls (the small-batch fixtures: thousands); on a run of a few dozen
    calls of thousands of rows no test of the output can (the counts of each call are all that
    is left of a random pairing).
    """

    name = "bonus-paired-at-random"
    expected_failed_checks = {
        "independence-rows": "each call's bonus count in the band is over-dispersed (the whole-call count "
                             "test at the bonus; batch8-g8's 8-row calls)",
    }

    def _partners(self, batch, rng):
        order = rng.permutation(batch)
        h = batch // 2
        return order[:h], order[h:2 * h]


ZOO.update({cls.name: cls for cls in [BonusSharedAtHalfBatch, BonusPairedAtRandom]})
