"""Worst-case figures for the one-sample server modes: an identity test per context, a bound per prompt.

A context is a prompt and the tokens emitted before a position. Every context that at least
``MIN_CONTEXT_DRAWS`` draws reached gets the instance-optimal identity test of
:mod:`specgauge.stattests.identity.instance` against its known law (a local reference model's, or
the server's own top-k logprobs with the rest of the vocabulary as one cell), and states the
worst-case TV that test detects against every alternative. The family-wise false-fail rate
is shared out evenly over the rows; the set of contexts depends on the prefixes drawn, but
given them each context's draws are a fresh multinomial, so the union bound holds.

The per-prompt figure bounds the TV of the whole law of the first L tokens (chain rule:
TV(P, Q) ≤ Σ_k E_{x<k ~ P} TV(P_k(·|x), Q_k(·|x)), with P the known law): each position adds
the known-law mass of every tested context times its worst-case figure, plus the mass of the
contexts not tested (or reached through the lumped rest, whose mass is not known) times 1.

Lumping is honest: with the lightest tokens holding mass r in one cell, any law q obeys
TV(q, p) ≤ TV_lumped(q, p) + min(p(rest), q(rest)) ≤ TV_lumped + r, so the full-vocabulary
figure is the lumped one plus r; in the logprobs mode r is the remainder beyond the top-k,
and the figure over the top-k tokens plus one cell is named as such.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from specgauge.stattests.identity.instance import identity_test, min_discrepancy_of_identity_test
from specgauge.stattests.core.statistics import TestResult

#: A context reached fewer times than this gets no row of its own: its mass counts as untested.
MIN_CONTEXT_DRAWS = 20
#: In a reference law over the whole vocabulary, the lightest tokens holding at most this mass share one cell.
REST_MASS = 1e-6


@dataclass(frozen=True)
class ContextRow:
    """One context's identity test and where it sits."""

    prompt: int
    position: int
    rank: int            # 0: the context most draws reached at this prompt and position
    result: TestResult
    rest: float          # mass of the lumped cell: the full-vocabulary figure adds it
    mass: float          # the known law's probability of reaching this context (nan: not known)

    @property
    def full_tv(self) -> float:
        return min(1.0, self.result.min_detectable_tv + self.rest)


@dataclass(frozen=True)
class ContextPlan:
    """The contexts of a run: for each, the draws' cells and the law over those cells."""

    prompt: np.ndarray     # [C] prompt of each context
    position: np.ndarray   # [C]
    label: np.ndarray      # [N, L] context of each draw (-1 past a sample's end)
    first: np.ndarray      # [C] a draw (row) that reached the context


def plan_contexts(prompt: np.ndarray, seqs: np.ndarray) -> ContextPlan:
    """Number the contexts: (prompt, emitted prefix) at every position a draw reached."""
    n, length = seqs.shape
    label = np.full((n, length), -1, np.int64)
    prompts, positions, firsts = [], [], []
    offset = 0
    for k in range(length):
        reached = np.flatnonzero(seqs[:, k] != -1)  # -2: generated there, token unknown
        if reached.size == 0:
            continue
        keys = np.column_stack([prompt[reached], seqs[reached, :k]])
        _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        label[reached, k] = offset + inverse.ravel()
        prompts.append(prompt[reached[first]])
        positions.append(np.full(first.size, k))
        firsts.append(reached[first])
        offset += first.size
    cat = (lambda parts: np.concatenate(parts) if parts else np.zeros(0, np.int64))
    return ContextPlan(cat(prompts), cat(positions), label, cat(firsts))


def refuse_contexts(plan: ContextPlan, usable: np.ndarray, below: bool = False) -> tuple[ContextPlan, int]:
    """The plan with every context that has a draw without its law or token (``usable[N, L]``
    False there) left untested (label −1), and how many: missingness may depend on the token
    drawn (an engine that reports no logprobs for accepted drafts, a withheld partial
    character), so testing the rest would bias it. ``below``: the contexts under a refused one
    too (a draw whose token is unknown could have belonged to any of them)."""
    bad = np.unique(plan.label[(~usable) & (plan.label >= 0)])
    if below and bad.size:
        for k in range(1, plan.label.shape[1]):
            under = np.isin(plan.label[:, :k], bad).any(axis=1) & (plan.label[:, k] >= 0)
            bad = np.union1d(bad, plan.label[under, k])
    if bad.size == 0:
        return plan, 0
    label = np.where(np.isin(plan.label, bad), -1, plan.label)
    return ContextPlan(plan.prompt, plan.position, label, plan.first), int(bad.size)


def lump(law: np.ndarray, counts: np.ndarray, rest_cell: int | None) -> tuple[np.ndarray, np.ndarray, float]:
    """(law, counts, rest mass) with the lightest tokens holding ≤ REST_MASS in one last cell,
    or, with ``rest_cell``, that cell as the rest (the logprobs mode's remainder)."""
    if rest_cell is not None:
        return law, counts, float(law[rest_cell])
    order = np.argsort(-law, kind="stable")
    tail = np.cumsum(law[order][::-1])[::-1]  # tail[j]: mass of order[j:]
    cut = int(np.searchsorted(-tail, -REST_MASS, side="left"))  # first j with tail[j] <= REST_MASS
    keep, drop = order[:cut], order[cut:]
    if drop.size == 0:
        return law[keep], counts[keep], 0.0
    rest = float(law[drop].sum())  # kept even at mass 0: a draw on an impossible token must fail
    return np.r_[law[keep], rest], np.r_[counts[keep], counts[drop].sum()], rest


def context_rows(plan: ContextPlan, cells: np.ndarray, law_of, false_fail_rate: float, target_tv: float, *,
                 reserved: int = 0, rest_cell: int | None = None, seed: int = 0,
                 short: list | None = None) -> tuple[list[ContextRow], float]:
    """Identity rows for the contexts whose draws can state ``target_tv``, and the rate each row got.

    ``cells[N, L]`` each draw's cell, ``law_of(row, k)`` the law over the cells at draw
    ``row``'s context at position ``k`` (all draws of a context share it). The family is fixed
    from the draws' counts and the laws alone, before any context's draws are looked at: a
    context gets a row when at least ``MIN_CONTEXT_DRAWS`` reached it and the identity test's
    planning figure at that count is at most ``target_tv``. ``false_fail_rate`` is shared
    evenly over those rows and ``reserved`` other tests. A row's mass is the known law's
    probability of its prefix, unknown (nan) when the prefix went through the lumped rest.
    ``short``: where given, each context reached at least ``MIN_CONTEXT_DRAWS`` times but too
    seldom for ``target_tv`` is appended as (prompt, position, draws, the figure those draws state).
    """
    n, length = cells.shape
    laws = {}
    prob = np.full((n, length), np.nan)
    for c in range(plan.prompt.size):
        k = int(plan.position[c])
        members = plan.label[:, k] == c
        if not members.any():  # left untested
            continue
        law = np.asarray(law_of(int(plan.first[c]), k), np.float64)
        laws[c] = law / law.sum()
        prob[members, k] = laws[c][cells[members, k]]
    draws = np.bincount(plan.label[plan.label >= 0], minlength=plan.prompt.size)
    candidates = [int(c) for c in np.argsort(-draws, kind="stable") if draws[c] >= MIN_CONTEXT_DRAWS]
    widest = false_fail_rate / (len(candidates) + reserved) if candidates else false_fail_rate
    lumps = {}
    family = []
    for c in candidates:
        lumps[c] = lump(laws[c], np.zeros_like(laws[c]), rest_cell)[::2]
        figure = min_discrepancy_of_identity_test(int(draws[c]), lumps[c][0], false_fail_rate=widest)
        if figure <= target_tv:
            family.append(c)
        elif short is not None:  # reached often, yet too few draws for the figure asked: named untested
            short.append((int(plan.prompt[c]), int(plan.position[c]), int(draws[c]), float(figure)))
    rate = false_fail_rate / (len(family) + reserved)
    rows, ranks = [], {}
    for c in family:
        k, i = int(plan.position[c]), int(plan.first[c])
        counts = np.bincount(cells[plan.label[:, k] == c, k], minlength=laws[c].size).astype(np.float64)
        lumped, lumped_counts, rest = lump(laws[c], counts, rest_cell)
        result = identity_test(lumped_counts, lumped, false_fail_rate=rate, seed=seed + c)
        where = (int(plan.prompt[c]), k)
        ranks[where] = ranks.get(where, -1) + 1
        through_rest = rest_cell is not None and bool((cells[i, :k] == rest_cell).any())
        mass = math.nan if through_rest else float(np.prod(prob[i, :k]))
        rows.append(ContextRow(where[0], k, ranks[where], result, rest, mass))
    return rows, rate


def coverage(rows: list[ContextRow], prompt: int, position: int) -> float:
    """The known law's mass of the contexts tested at this prompt and position (0 to 1)."""
    return float(sum(r.mass for r in rows if r.prompt == prompt and r.position == position and math.isfinite(r.mass)))


def joint_bound(rows: list[ContextRow], prompt: int, length: int, full: bool = True) -> float:
    """Worst-case TV of prompt ``prompt``'s law of the first ``length`` tokens (chain rule):
    Σ_k [Σ_tested mass·figure + (1 − Σ_tested mass)], capped at 1."""
    total = 0.0
    for k in range(length):
        tested = [r for r in rows if r.prompt == prompt and r.position == k and math.isfinite(r.mass)]
        covered = sum(r.mass for r in tested)
        total += sum(r.mass * (r.full_tv if full else min(1.0, r.result.min_detectable_tv)) for r in tested)
        total += max(0.0, 1.0 - covered)
    return min(1.0, total)
