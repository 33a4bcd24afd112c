"""Measured acceptance by teacher forcing: exact per-position α of each draft on the user's prompts.

For every request, one forward pass of the target and of each draft over prompt +
continuation gives, at each continuation position t, the target's law p_t and the draft's
q_t after the same sampling transforms. Leviathan's rule accepts a token drawn from q_t
with probability Σ_v min(p_t(v), q_t(v)) = 1 − TV(p_t, q_t): that is α_t, exactly, with
no sampling noise. A proposer that offers ranked candidates c_r (prompt lookup, or a
top-k tree's children, the draft's k most likely tokens) is accepted at rank r with
probability p_t(c_r) (a one-hot q; top-k verification, as EAGLE-2/3 and SGLang run it).

The law that turns α_t into tokens per pass assumes that, along the target's path, a
round's positions are accepted independently: a round starting at s emits
1 + Σ_k Π_{i<k} α_{s+i} tokens on average. It is averaged here over every start s (every
window of γ positions), pooled over requests. A real run differs where acceptance and the
path are dependent: an accepted token is drawn from min(p, q)/α, not from p, so the next
context, and its α, shift; and rounds start after rejections, not uniformly.
:func:`run_speculative` measures that directly, through the certified reference rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from specgauge.laws import topk_depth_tokens

from .models import LawModel, MeasurementInputError, NgramProposer
from .prompts import Request

BOOTSTRAP = 2000
LEVEL = 0.95


# ---------------------------------------------------------------- per position


def _backend(x):
    """numpy, or torch for a tensor (laws kept on the model's device: a GPU computes α where the laws are)."""
    if isinstance(x, np.ndarray):
        return np
    import torch

    return torch


def to_numpy(x) -> np.ndarray:
    return x if isinstance(x, np.ndarray) else x.detach().cpu().numpy()


def overlap(p, q) -> np.ndarray:
    """α_t = Σ_v min(p_t(v), q_t(v)) per row; a token outside either vocabulary adds nothing."""
    width = min(p.shape[-1], q.shape[-1])
    if type(p) is not type(q):  # a torch model against a NumPy one: meet on the host
        p, q = to_numpy(p), to_numpy(q)
    return to_numpy(_backend(p).minimum(p[..., :width], q[..., :width]).sum(-1))


def top_candidates(q, k: int) -> np.ndarray:
    """The k most likely tokens of each row of q, ties by id: a top-k tree's children [L, k].

    A tensor's rows are cut to their 2k + 8 largest entries on its device first (ties by id
    are then exact unless more than k + 8 tokens tie at the k-th value)."""
    k = min(k, q.shape[-1])
    if isinstance(q, np.ndarray):  # every entry above the k-th largest, then its ties by id
        kth = np.partition(q, q.shape[-1] - k, axis=-1)[:, -k:-k + 1 or None]
        above, tied = q > kth, q == kth
        keep = above | (tied & (np.cumsum(tied, axis=-1) <= k - above.sum(axis=-1, keepdims=True)))
        ids = np.nonzero(keep)[1].reshape(len(q), k)
        score = np.take_along_axis(q, ids, axis=-1)
    else:
        values, index = q.topk(min(q.shape[-1], 2 * k + 8), dim=-1)
        score, ids = to_numpy(values), to_numpy(index)
    order = np.lexsort((ids, -score), axis=-1)[:, :k]
    return np.take_along_axis(ids, order, axis=-1)


def rank_acceptance(p, candidates: np.ndarray) -> np.ndarray:
    """p_t(c_r) [L, k]: the probability that rank r's candidate is the one top-k verification accepts."""
    xp = _backend(p)
    safe = np.clip(candidates, 0, p.shape[-1] - 1)
    got = to_numpy(xp.take_along_dim(p, xp.as_tensor(safe, device=p.device), dim=-1) if xp is not np
                   else np.take_along_axis(p, safe, axis=-1))
    return np.where((candidates >= 0) & (candidates < p.shape[-1]), got, 0.0)


@dataclass(frozen=True)
class DraftMeasure:
    """One draft's measurement: α_t and the per-rank acceptance, one array per request."""

    label: str
    kind: str                          # "distribution" or "ngram"
    alphas: list[np.ndarray] = field(repr=False)
    ranks: list[np.ndarray] = field(repr=False)   # [L, k] per request


@dataclass(frozen=True)
class Measurement:
    """Requests (prompt and continuation ids, where each continuation came from) and each draft's α."""

    prompts: list[np.ndarray] = field(repr=False)
    continuations: list[np.ndarray] = field(repr=False)
    sources: list[str]
    drafts: list[DraftMeasure]


def continuations(target: LawModel, requests: Sequence[Request], length: int, seed: int) -> tuple[list, list]:
    """Each request's continuation: the probe file's where it holds one, else the target's own sample."""
    own = [i for i, r in enumerate(requests) if r.continuation is None]
    sampled = target.sample([requests[i].prompt for i in own], length, seed) if own else []
    out: list[np.ndarray] = [r.continuation for r in requests]
    for i, seq in zip(own, sampled):
        out[i] = seq
    if any(len(c) == 0 for c in out):
        raise MeasurementInputError("a continuation is empty (the target ended at once): raise --max-new-tokens")
    return out, ["target" if r.continuation is None else "probe" for r in requests]


def measure(target: LawModel, drafts: Sequence[LawModel | NgramProposer], requests: Sequence[Request], *,
            length: int, seed: int, k: int, batch: int = 8,
            progress: Callable[[int], None] | None = None) -> Measurement:
    """Teacher-forced α of every draft on every request (``k`` ranked candidates per position)."""
    if any(len(r.prompt) == 0 for r in requests):
        raise MeasurementInputError("a prompt has no tokens: the first position needs a context")
    conts, sources = continuations(target, requests, length, seed)
    prompts = [r.prompt for r in requests]
    alphas: list[list[np.ndarray]] = [[] for _ in drafts]
    ranks: list[list[np.ndarray]] = [[] for _ in drafts]
    for lo in range(0, len(requests), batch):
        seqs = [np.concatenate([p, c[:-1]]) for p, c in zip(prompts[lo:lo + batch], conts[lo:lo + batch])]
        first = [len(p) for p in prompts[lo:lo + batch]]
        p_laws = target.laws(seqs, first, native=True)
        for d, draft in enumerate(drafts):
            if isinstance(draft, NgramProposer):
                for s, f, p in zip(seqs, first, p_laws):
                    cand = draft.candidates(s, f, k)
                    r = rank_acceptance(p, cand)
                    alphas[d].append(r[:, 0])
                    ranks[d].append(r)
            else:
                for p, q in zip(p_laws, draft.laws(seqs, first, native=True)):
                    alphas[d].append(overlap(p, q))
                    ranks[d].append(rank_acceptance(p, top_candidates(q, k)))
        if progress is not None:
            progress(len(seqs))
    return Measurement(prompts, conts, sources, [
        DraftMeasure(draft.name, "ngram" if isinstance(draft, NgramProposer) else "distribution", a, r)
        for draft, a, r in zip(drafts, alphas, ranks)])


# ---------------------------------------------------------------- the law, pooled over requests


def window_reach(alpha: np.ndarray, gamma: int) -> np.ndarray:
    """Π_{i≤k} α_{s+i} for every window start s and k < γ: [W, γ] (W = 0 if shorter than γ)."""
    if len(alpha) < gamma:
        return np.zeros((0, gamma))
    return np.cumprod(np.lib.stride_tricks.sliding_window_view(alpha, gamma), axis=1)


def law_sums(alphas: Sequence[np.ndarray], gamma: int) -> tuple[np.ndarray, np.ndarray]:
    """Per request: Σ over windows of the law's tokens per pass, and the number of windows."""
    reach = [window_reach(a, gamma) for a in alphas]
    return (np.array([len(r) + r.sum() for r in reach], float), np.array([len(r) for r in reach], float))


def conditional_by_position(alphas: Sequence[np.ndarray], gamma: int) -> np.ndarray:
    """α_k = P(draft k accepted | the drafts before it accepted), k = 1 … γ, pooled over windows."""
    reach = np.concatenate([window_reach(a, gamma) for a in alphas])
    if not len(reach):
        return np.full(gamma, np.nan)
    cum = reach.mean(axis=0)
    before = np.concatenate([[1.0], cum[:-1]])
    return np.divide(cum, before, out=np.zeros_like(cum), where=before > 0)


def bootstrap_ratio(sums: np.ndarray, counts: np.ndarray, seed: int, n: int = BOOTSTRAP,
                    level: float = LEVEL) -> tuple[float, float, float]:
    """Σ sums / Σ counts and its percentile bootstrap interval, requests resampled with replacement."""
    sums, counts = np.asarray(sums, float), np.asarray(counts, float)
    keep = counts > 0
    sums, counts = sums[keep], counts[keep]
    if not len(sums):
        return np.nan, np.nan, np.nan
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(len(sums), np.full(len(sums), 1.0 / len(sums)), size=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        stats = (weights @ sums) / (weights @ counts)
    lo, hi = np.nanquantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return float(sums.sum() / counts.sum()), float(lo), float(hi)


# ---------------------------------------------------------------- replayable traces


def accepted_runs(alpha: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """SpecDecode-Bench's ``acc_len``: one Bernoulli(α_t) draw per position, then at each position
    1 + the run of accepted positions that starts there (what a round starting there emits with unlimited γ)."""
    accepted = rng.random(len(alpha)) < alpha
    idx = np.arange(len(alpha))
    next_reject = np.minimum.accumulate(np.where(~accepted, idx, len(alpha))[::-1])[::-1]
    return (next_reject - idx + 1).astype(np.int64)


def trace_records(m: Measurement, seed: int, origins: Sequence[str]) -> list[dict]:
    """One JSON object per request, in the layout ``simulate --acceptance PATH.jsonl:LABEL`` replays."""
    rngs = np.random.default_rng(seed).spawn(len(m.drafts))
    records = []
    for i, (prompt, cont) in enumerate(zip(m.prompts, m.continuations)):
        rec: dict = {"id": i, "origin": origins[i], "continuation": m.sources[i],
                     "prompt_token_ids": prompt.tolist(), "generated_token_ids": cont.tolist()}
        for d, rng in zip(m.drafts, rngs):
            rec[f"acc_{d.label}"] = {"acc_len": accepted_runs(d.alphas[i], rng).tolist()}
            rec[f"alpha_{d.label}"] = np.round(d.alphas[i], 6).tolist()
            rec[f"rank_{d.label}"] = np.round(d.ranks[i], 6).tolist()
        records.append(rec)
    return records


# ---------------------------------------------------------------- summary


SUMMARY_COLUMNS = ["draft", "kind", "requests", "positions", "gamma", "mean_alpha", "mean_alpha_ci_low",
                   "mean_alpha_ci_high", "alpha_at_position", "tokens_per_pass", "tokens_per_pass_ci_low",
                   "tokens_per_pass_ci_high", "rank_acceptance", "topk_tree_tokens_per_pass", "measured_tokens_per_pass",
                   "measured_ci_low", "measured_ci_high", "measured_rounds"]


def summary_rows(m: Measurement, gammas: Sequence[int], seed: int, k: int,
                 measured: dict[tuple[str, int], np.ndarray] | None = None) -> list[dict]:
    """Per draft and γ: mean α, α at that position of the round, the law's tokens per pass, the
    per-rank acceptance and a top-k tree's tokens per pass, with bootstrap intervals over requests;
    ``measured`` (label, γ) → per-request round lengths from :func:`run_speculative`."""
    rows = []
    measured = measured or {}
    for d in m.drafts:
        positions = np.array([len(a) for a in d.alphas], float)
        mean_alpha = bootstrap_ratio(np.array([a.sum() for a in d.alphas]), positions, seed)
        by_position = conditional_by_position(d.alphas, max(gammas))
        rank_means = np.concatenate(d.ranks).mean(axis=0)
        for gamma in gammas:
            law = bootstrap_ratio(*law_sums(d.alphas, gamma), seed)
            row = {"draft": d.label, "kind": d.kind, "requests": len(d.alphas), "positions": int(positions.sum()),
                   "gamma": gamma, "mean_alpha": mean_alpha[0], "mean_alpha_ci_low": mean_alpha[1],
                   "mean_alpha_ci_high": mean_alpha[2], "alpha_at_position": float(by_position[gamma - 1]),
                   "tokens_per_pass": law[0], "tokens_per_pass_ci_low": law[1], "tokens_per_pass_ci_high": law[2],
                   # four digits: a mean over a few requests, whose sixth digit float32 kernels round otherwise
                   "rank_acceptance": "|".join(f"{r:.4g}" for r in rank_means),
                   "topk_tree_tokens_per_pass": topk_depth_tokens(rank_means, k, gamma)}
            rounds = measured.get((d.label, gamma))
            if rounds is not None:
                got = bootstrap_ratio(np.array([r.sum() for r in rounds]), np.array([len(r) for r in rounds]), seed)
                row.update(measured_tokens_per_pass=got[0], measured_ci_low=got[1], measured_ci_high=got[2],
                           measured_rounds=int(sum(len(r) for r in rounds)))
            rows.append(row)
    return rows


# ---------------------------------------------------------------- the real thing, for comparison


def _propose(draft: LawModel | NgramProposer, prefixes: list[np.ndarray], gamma: int, vocab: int,
             rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
    """Each row's drafts (γ from a law; from prompt lookup, up to γ, stopping where it finds
    nothing) and the laws q [rows, γ, V] they were drawn from (one-hot for prompt lookup)."""
    from specgauge.stattests.core.sampling import sample_rows

    q = np.zeros((len(prefixes), gamma, vocab))
    work = list(prefixes)
    if isinstance(draft, NgramProposer):
        drafts = []
        for r, seq in enumerate(work):  # a lookup per drafted token, as the proposer runs
            got: list[int] = []
            while len(got) < gamma and (c := int(draft.candidates(np.append(seq, got), len(seq) + len(got), 1)[-1, 0])) >= 0:
                q[r, len(got), c] = 1.0
                got.append(c)
            drafts.append(np.asarray(got, np.int64))
        return drafts, q
    for j in range(gamma):  # draft steps depend on each other; requests go together
        laws = draft.laws(work, [len(w) for w in work])
        q[:, j, :draft.vocab_size] = np.stack([law[-1] for law in laws])
        work = [np.append(w, t) for w, t in zip(work, sample_rows(q[:, j], rng))]
    return [w[-gamma:] for w in work], q


def run_speculative(target: LawModel, draft: LawModel | NgramProposer, prompts: Sequence[np.ndarray], *,
                    length: int, gamma: int, seed: int,
                    progress: Callable[[int], None] | None = None) -> list[np.ndarray]:
    """Speculative decoding through the reference rule (NumPy, Leviathan's): tokens emitted per
    round for each prompt, until each has ``length`` new tokens. One forward pass of the target over
    prefix + drafts gives the laws to verify; rows with the same number of drafts are verified
    together, and a row with none (prompt lookup found nothing) emits one token sampled from p."""
    from specgauge.stattests.core.contract import check_emitted, emitted_lengths
    from specgauge.stattests.core.reference import NumpyDecoder
    from specgauge.stattests.core.sampling import sample_rows

    vocab = target.vocab_size
    if not isinstance(draft, NgramProposer) and draft.vocab_size > vocab:
        raise MeasurementInputError(f"draft {draft.name!r} has {draft.vocab_size} tokens, more than the target's {vocab}")
    draft_rng, verify_rng = np.random.default_rng(seed).spawn(2)
    decoder = NumpyDecoder()
    seqs = [np.asarray(p, np.int64) for p in prompts]
    starts = [len(p) for p in prompts]
    rounds: list[list[int]] = [[] for _ in prompts]
    while active := [i for i, s in enumerate(seqs) if len(s) - starts[i] < length]:
        drafts, q = _propose(draft, [seqs[i] for i in active], gamma, vocab, draft_rng)
        sizes = np.array([len(d) for d in drafts])
        for g in np.unique(sizes):
            rows = np.flatnonzero(sizes == g)
            ids = [active[r] for r in rows]
            p = np.stack(target.laws([np.concatenate([seqs[i], drafts[r]]) for i, r in zip(ids, rows)],
                                     [len(seqs[i]) for i in ids]))
            if g == 0:
                emitted = sample_rows(p[:, 0], verify_rng)[:, None]
            else:
                tokens = np.stack([drafts[r] for r in rows])
                emitted = check_emitted(decoder.verify(p, q[rows, :g], tokens.copy(), verify_rng), tokens, vocab)
            counts = emitted_lengths(emitted)
            for i, row, n in zip(ids, emitted, counts):
                seqs[i] = np.concatenate([seqs[i], row[:n]])
                rounds[i].append(int(n))
            if progress is not None:
                progress(int(counts.sum()))
    return [np.asarray(r, np.int64) for r in rounds]
