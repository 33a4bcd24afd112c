"""End-to-end speculative generation over toy language models, with any contract decoder.

Each round drafts γ tokens from the draft model, asks the decoder to verify them against
the target's distributions (one ``verify`` call for every unfinished sequence at once),
appends the accepted prefix and the correction or bonus token, and continues from there
until every sequence has ``new_tokens`` tokens. So drafting, verification, the bonus token
and the hand-over between rounds are certified together.
"""

from __future__ import annotations


import numpy as np

from specgauge.stattests.core.contract import Decoder, check_emitted, emitted_lengths
from specgauge.stattests.core.lm import GenerationResult, NextTokenModel
from specgauge.stattests.core.sampling import sample_rows


def _contexts(buffer: np.ndarray, positions: np.ndarray, order: int) -> np.ndarray:
    """The ``order`` tokens before ``positions`` in each row of ``buffer``."""
    cols = positions[:, None] - order + np.arange(order)[None, :]
    return np.take_along_axis(buffer, cols, axis=1)


def speculative_generate(
    target: NextTokenModel,
    draft: NextTokenModel,
    prompt: tuple[int, ...] | np.ndarray,
    decoder: Decoder,
    *,
    new_tokens: int,
    gamma: int,
    num_sequences: int,
    rng: np.random.Generator | int | None = None,
) -> GenerationResult:
    """Generate ``num_sequences`` continuations of ``prompt`` speculatively.

    Drafting and verification draw from independent children of ``rng`` so a decoder
    change never shifts the draft tokens' stream. Every ``verify`` output is checked
    against the contract (:func:`specgauge.stattests.core.contract.check_emitted`) before it is used.
    """
    if target.vocab_size != draft.vocab_size:
        raise ValueError(f"target vocabulary {target.vocab_size} != draft vocabulary {draft.vocab_size}")
    if new_tokens < 1 or gamma < 1 or num_sequences < 1:
        raise ValueError(
            f"need new_tokens, gamma, num_sequences >= 1, got {new_tokens}, {gamma}, {num_sequences}"
        )
    prompt_arr = np.asarray(prompt, dtype=np.int64)
    order = max(target.order, draft.order)
    if prompt_arr.ndim != 1 or len(prompt_arr) < order:
        raise ValueError(f"prompt must be a 1-D sequence of at least {order} tokens, got {prompt!r}")
    vocab = target.vocab_size
    draft_rng, verify_rng = np.random.default_rng(rng).spawn(2)

    start = len(prompt_arr)
    width = start + new_tokens + gamma + 1
    buffer = np.zeros((num_sequences, width), dtype=np.int64)
    buffer[:, :start] = prompt_arr
    length = np.full(num_sequences, start, dtype=np.int64)
    rounds: list[np.ndarray] = []
    while True:
        active = np.flatnonzero(length - start < new_tokens)
        if active.size == 0:
            break
        work = buffer[active]
        pos = length[active]
        rows = np.arange(active.size)
        draft_probs = np.empty((active.size, gamma, vocab))
        target_probs = np.empty((active.size, gamma + 1, vocab))
        for k in range(gamma):  # a loop over draft positions only, each vectorised over rows
            draft_probs[:, k] = draft.next_probs(_contexts(work, pos + k, draft.order))
            work[rows, pos + k] = sample_rows(draft_probs[:, k], draft_rng)
        draft_tokens = work[rows[:, None], pos[:, None] + np.arange(gamma)[None, :]]
        for k in range(gamma + 1):
            target_probs[:, k] = target.next_probs(_contexts(work, pos + k, target.order))

        emitted = check_emitted(
            decoder.verify(target_probs, draft_probs, draft_tokens.copy(), verify_rng), draft_tokens, vocab
        )
        n = emitted_lengths(emitted)
        mask = np.arange(gamma + 1)[None, :] < n[:, None]
        cols = pos[:, None] + np.arange(gamma + 1)[None, :]
        r_idx = np.broadcast_to(active[:, None], cols.shape)
        buffer[r_idx[mask], cols[mask]] = emitted[mask]
        length[active] += n
        this_round = np.zeros(num_sequences, dtype=np.int64)
        this_round[active] = n
        rounds.append(this_round)

    return GenerationResult(
        tokens=buffer[:, start : start + new_tokens].copy(),
        round_lengths=np.stack(rounds, axis=1),
        gamma=gamma,
    )
