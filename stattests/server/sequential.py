"""Sized probes: how many draws a worst-case TV needs, and an early failure that keeps its rate.

Sizing. The laws of the contexts a prompt reaches (a prompt and the tokens before a
position) are known before any request (a local reference model's, by a forward pass per
context, breadth first) or after a pilot (the server's own top-k logprobs). Every context
the known law reaches with probability at least ``MIN_PLAN_MASS`` (``--context-mass``), at
every position up to L, is planned: :func:`draws_for` gives the draws the identity test needs
there to state the asked TV against every alternative, at the false-fail rate the
comparison will share out, and over its reach probability that is the draws the prompt
needs; the probe asks every prompt for the largest. Lighter contexts are named, with what
they would need.

Early failure. While the draws land, :class:`ContextEProcess` bets against the known law at
every planned context: per prompt, the product of q̂(x)/p(x) over the draws and their
positions, q̂ the estimate from the draws before at that context (over the law's heaviest
tokens and one cell for the rest), is a nonnegative martingale of mean 1 under an exact
server; the mean over prompts is one too. By Ville's inequality it ever reaches 1/rate with
probability at most ``rate``, however often it is looked at, so stopping the moment it
does keeps the false-fail rate. A server that truncates or re-tempers the law at any
watched position grows it by about KL(q‖p) nats a draw there: a few hundred draws, not the
budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from specgauge.progress import _duration
from specgauge.stattests.identity.instance import min_num_samples_for_identity_test
from specgauge.stattests.server.probe import ServerError
from specgauge.stattests.server.worstcase import lump

#: Tokens the early test bets on one by one at each prompt; the rest share one cell.
BET_TOKENS = 16


class BiasedServerError(ServerError):
    """The sequential test found the server's first tokens certainly off the known law."""


def planning_rate(false_fail_rate: float, prompts: int, length: int) -> float:
    """The rate a sized probe plans each context at: the comparison shares its total over
    the contexts it tests, so plan for a wide family (64 contexts a prompt and position, and
    the other tests); a smaller family gives each row more and states a finer figure."""
    return false_fail_rate / (prompts * 64 * length + length + 2)


def draws_for(tv: float, laws: Sequence[np.ndarray], false_fail_rate: float) -> list[int]:
    """Draws for the identity test to state ``tv`` against each of ``laws``: about
    ‖p^(−max)_(−tv)‖_(2/3) / tv², O(log 1/rate)."""
    return [min_num_samples_for_identity_test(tv, lump(np.asarray(p, np.float64) / np.sum(p),
                                                         np.zeros(len(p)), None)[0], false_fail_rate=false_fail_rate)
            for p in laws]


#: A context is planned (and watched) when the known law reaches it with at least this probability.
MIN_PLAN_MASS = 0.1
#: The key a sample's end takes where the end token's name is not known (it falls in the rest cell).
END_KEY = "<end of sample>"


@dataclass(frozen=True, eq=False)
class Context:
    """A context a sized probe plans for and its early test watches: a prompt and the tokens before
    a position, the known law there (over ``names``, then one cell for the rest), and the known
    law's probability of reaching it."""

    prompt: int
    prefix: tuple
    names: tuple
    law: np.ndarray         # the bet's: the heaviest names, then the rest
    mass: float
    plan_law: np.ndarray    # the law the comparison tests there (whole vocabulary, or top-k and the rest)

    @property
    def position(self) -> int:
        return len(self.prefix)


#: The margin a plan keeps at every planned context: the draws reaching it (binomial in the prompt's
#: draws, at the known law's reach probability) fall short of its need with probability at most
#: about 0.001 (the normal quantile 3.09), so sampling noise does not drop its row.
MARGIN_Z = 3.09


def with_margin(need: int, mass: float, z: float = MARGIN_Z) -> int:
    """Draws of a prompt whose count at a context reached with probability ``mass`` is at least
    ``need`` but for a z-sigma shortfall: the smallest S with S m − z √(S m (1 − m)) ≥ need."""
    m = min(max(mass, 1e-12), 1.0)
    spread = z * math.sqrt(m * (1 - m))
    root = (spread + math.sqrt(spread * spread + 4 * m * need)) / (2 * m)
    return max(need, math.ceil(root * root))


def context_draws(contexts: Sequence[Context], tv: float, false_fail_rate: float,
                  min_mass: float = MIN_PLAN_MASS) -> tuple[dict[Context, tuple[int, int]], list[tuple[Context, int]]]:
    """Per heavy context (reach mass >= ``min_mass``): the draws per prompt that reach there the draws
    the identity test needs to state ``tv`` with a margin (:func:`with_margin`), and that need; the
    lighter ones with what they would need a prompt."""
    planned, rare = {}, []
    for c in contexts:
        need = draws_for(tv, [c.plan_law], false_fail_rate)[0]
        per_prompt = with_margin(need, c.mass)
        if c.mass >= min_mass:
            planned[c] = (per_prompt, need)
        else:
            rare.append((c, per_prompt))
    return planned, rare


@dataclass(frozen=True)
class ContextPlan:
    """A sized probe's plan over every heavy context at every position: draws per prompt, and why."""

    tv: float
    false_fail_rate: float
    per_prompt: tuple[int, ...]
    planned: tuple[tuple[Context, int], ...]   # each heavy context and the draws a prompt it asks for
    rare: tuple[tuple[Context, int], ...]
    min_mass: float
    needs: tuple[int, ...] = ()                # the draws each planned context needs there, in order

    @property
    def samples_per_prompt(self) -> int:
        return max(self.per_prompt)

    def describe(self, rate_per_s: float | None = None) -> str:
        worst, need = max(self.planned, key=lambda cn: cn[1])
        total = self.samples_per_prompt * len(self.per_prompt)
        positions = sorted({c.position for c, _ in self.planned})
        line = (f"TV {self.tv:g} needs {self.samples_per_prompt} draws a prompt, {total} in all: "
                f"{len(self.planned)} contexts planned at positions {', '.join(map(str, positions))} (every context "
                f"the known law reaches with probability >= {self.min_mass:g}, each with a margin: its draws fall "
                f"short of its need with probability about 0.001); the most demanding prompt "
                f"{worst.prompt} position {worst.position}, reached with probability {worst.mass:.3g}")
        if self.rare:
            most = max(n for _, n in self.rare)
            line += (f"; {len(self.rare)} lighter contexts seen are left untested (up to {most} draws a prompt "
                     f"would test them)")
        if rate_per_s:
            line += f": about {_duration(total / rate_per_s)} at the measured {rate_per_s:.3g} samples/s"
        return line


def plan_contexts(contexts: Sequence[Context], n_prompts: int, tv: float, false_fail_rate: float,
                  min_mass: float = MIN_PLAN_MASS) -> ContextPlan:
    """The plan: each prompt drawn as often as its most demanding heavy context needs."""
    planned, rare = context_draws(contexts, tv, false_fail_rate, min_mass)
    per_prompt = [max([n for c, (n, _) in planned.items() if c.prompt == p], default=1) for p in range(n_prompts)]
    return ContextPlan(tv, false_fail_rate, tuple(per_prompt), tuple((c, n) for c, (n, _) in planned.items()),
                       tuple(rare), min_mass, tuple(need for _, need in planned.values()))


def short_contexts(plan: ContextPlan, early: "ContextEProcess") -> list[str]:
    """The planned contexts whose draws (as the early test counted them, while it watched) fell short
    of their need, named with what they got: their rows may be missing from the comparison."""
    out = []
    for (c, _), need in zip(plan.planned, plan.needs):
        got = int(early.counts[(c.prompt, c.prefix)].sum())
        if got < need and not early.frozen[c.prompt]:
            where = f"prompt {c.prompt} position {c.position}" + (f" after {list(c.prefix)}" if c.prefix else "")
            out.append(f"{where} ({got:,} of {need:,} draws)")
    return out


def bet_context(prompt: int, prefix: tuple, names: Sequence, probs: np.ndarray, mass: float) -> Context:
    """A context whose known law gives ``probs`` to ``names`` (the rest, if they sum below 1, to any
    other token): the bet keeps the ``BET_TOKENS`` heaviest names and one cell for the rest."""
    probs = np.asarray(probs, np.float64)
    order = np.argsort(-probs, kind="stable")[:BET_TOKENS]
    head = probs[order]
    rest = max(0.0, 1.0 - float(probs.sum()))
    return Context(prompt, tuple(prefix), tuple(names[i] for i in order), np.r_[head, max(0.0, 1.0 - head.sum())],
                   float(mass), np.r_[probs, rest] if rest > 0 else probs)


def reported_contexts(records: Iterable[Mapping[str, Any]], length: int, stops: Sequence[str] = (),
                      end: str | None = None) -> list[Context]:
    """The contexts a pilot reached, each with the top-k law the server reported there first, and the
    reported law's probability of reaching it (None where a token before it is not in a list: left out).

    ``stops``: the run's stop strings, where its token names join into the texts: at each context the
    stoppers and the end (``end``) leave the bet's named cells for its rest cell, where a stopped sample
    is counted (:func:`reported_tokens`), and a context where a stop string could span draws is not
    watched (:mod:`~specgauge.stattests.server.stops`)."""
    from specgauge.stattests.server.stops import first_stop, split_next

    laws: dict[tuple, tuple[list, np.ndarray]] = {}
    for r in records:
        tokens, top = r.get("tokens") or [], r.get("top") or []
        cut = first_stop(tokens, stops) if stops and r.get("finish") == "stop" else None
        tokens = tokens if cut is None else tokens[:cut]
        for k in range(min(len(tokens), length, len(top))):
            key = (r["p"], tuple(tokens[:k]))
            if key not in laws and top[k]:
                pairs = sorted(top[k], key=lambda tl: -tl[1])
                laws[key] = ([t for t, _ in pairs], np.exp([lp for _, lp in pairs]))
    out = []
    for (p, prefix), (names, probs) in laws.items():
        mass = 1.0
        for j, token in enumerate(prefix):
            above = laws.get((p, prefix[:j]))
            if above is None or token not in above[0]:
                mass = math.nan
                break
            mass *= float(above[1][above[0].index(token)])
        if not math.isfinite(mass):
            continue
        if stops:
            head = "".join(prefix)
            stopper, unclean = split_next(head, [head + t for t in names], stops)
            if unclean:
                continue
            keep = [j for j, t in enumerate(names) if not stopper[j] and t != end]
            names, probs = [names[j] for j in keep], np.asarray(probs)[keep]
        out.append(bet_context(p, prefix, names, probs, mass))
    return out


def reported_tokens(length: int, end: str | None, stop_strings: bool = False, stops: Sequence[str] = ()):
    """``record -> its tokens`` as the reported laws name them, for :class:`ContextEProcess`: a
    sample that stopped short drew the end (``end``, or :data:`END_KEY`, the rest cell, where
    its name is not known); one cut short otherwise ends in None (a token not known). With
    ``stops`` (names that join into the text), a sample that ended with "stop" drew the stop: the
    rest cell, where :func:`reported_contexts` put the stoppers and the end."""
    from specgauge.stattests.server.stops import first_stop

    def tokens_of(record: Mapping[str, Any]) -> list:
        tokens = list(record.get("tokens") or [])[:length]
        if stops and record.get("finish") == "stop":
            cut = first_stop(tokens, stops)
            tokens = tokens if cut is None else tokens[:cut]
            if end is not None and tokens and tokens[-1] == end:
                tokens = tokens[:-1]  # a listed end (vLLM): the stop
            return tokens + [END_KEY] if len(tokens) < length else tokens
        if len(tokens) < length and not (end is not None and tokens and tokens[-1] == end):
            stopped = record.get("finish") == "stop" and not stop_strings
            tokens.append((end if end is not None else END_KEY) if stopped else None)
        return tokens
    return tokens_of


class ContextEProcess:
    """The early test on every watched context (see the module docstring); a probe watcher.

    ``contexts``: the contexts bet on, each with its known law; ``tokens_of(record)``: the
    record's tokens as the contexts name them, ending with the end's key where it stopped
    before L (None: a token not known). Per prompt, the product over its records and their
    positions of q̂(x)/p(x) at each watched context, q̂ = (N + m p)/(n + m) from the draws
    before there (m twice the cells: no bet until draws accrue), is a nonnegative martingale of mean
    1 under an exact server; the mean over prompts too. A position at a context not watched
    is not bet on (which context it is, its earlier tokens decide). A token not known stops
    that prompt's bets for good: whether a token is known may depend on the token, so
    skipping it and betting on would bias the bet, while the values so far are the full
    process's, so Ville's bound still holds.
    """

    def __init__(self, contexts: Sequence[Context], n_prompts: int, false_fail_rate: float, tokens_of) -> None:
        self.rate = false_fail_rate
        self.tokens_of = tokens_of
        self.contexts = {(c.prompt, c.prefix): c for c in contexts}
        self.cells = {key: {name: j for j, name in enumerate(c.names)} for key, c in self.contexts.items()}
        self.counts = {key: np.zeros(c.law.size) for key, c in self.contexts.items()}
        self.growth = {key: 0.0 for key in self.contexts}
        self.log_e = np.zeros(n_prompts)
        self.frozen = np.zeros(n_prompts, bool)
        self.per_prompt = np.zeros(n_prompts, np.int64)   # records seen of each prompt
        self.frozen_at: dict[int, tuple[int, int]] = {}   # prompt -> (its record, the position) where a token was unknown
        self.seen = 0
        self.stopped = False

    def add(self, records: Iterable[Mapping[str, Any]]) -> None:
        for r in records:
            p = r["p"]
            if self.frozen[p]:
                continue
            self.seen += 1
            self.per_prompt[p] += 1
            tokens = list(self.tokens_of(r))
            for k, token in enumerate(tokens):
                key = (p, tuple(tokens[:k]))
                if key not in self.contexts:
                    break  # a lighter context: not watched, nor anything under it
                if token is None:
                    self.frozen[p] = True
                    self.frozen_at[p] = (int(self.per_prompt[p]), k)
                    break
                law, counts = self.contexts[key].law, self.counts[key]
                cell = self.cells[key].get(token, law.size - 1)
                m = 2.0 * law.size
                q = (counts[cell] + m * law[cell]) / (counts.sum() + m)  # predictable: before this draw
                step = math.log(q / law[cell]) if law[cell] > 0 else math.inf
                self.log_e[p] += step
                self.growth[key] += step
                counts[cell] += 1

    def stopped_watching(self) -> list[str]:
        """The prompts whose bets stopped for good at a token not known, each with the draw and position."""
        return [f"prompt {p} at its draw {n:,} (position {k}: a token not known)"
                for p, (n, k) in sorted(self.frozen_at.items())]

    @property
    def e_value(self) -> float:
        """The mean over prompts of each prompt's e-process."""
        top = float(np.max(self.log_e))
        return math.inf if top == math.inf else math.exp(top) * float(np.mean(np.exp(self.log_e - top)))

    def check(self) -> None:
        if self.e_value >= 1.0 / self.rate:
            self.stopped = True
            worst = max(self.growth, key=self.growth.get)
            where = f"prompt {worst[0]}, position {len(worst[1])}" + (f" after {list(worst[1])}" if worst[1] else "")
            raise BiasedServerError(
                f"the draws are off the known law: the sequential test's e-value reached {self.e_value:.3g} >= "
                f"1/{self.rate:g} after {self.seen} samples (most at {where}); an exact server gets there with "
                f"probability at most {self.rate:g}")


class EProcess(ContextEProcess):
    """The early test on the first position only: ``laws[p]`` the first-token law at prompt ``p``
    (over token ids, or the cells ``token_of`` maps a record to; a sample that stopped at once drew
    the end, a token like any other); ``token_of(record)`` its first token, None where not known."""

    def __init__(self, laws: Sequence[np.ndarray], false_fail_rate: float, token_of) -> None:
        contexts = [bet_context(p, (), range(len(law)), law, 1.0) for p, law in enumerate(laws)]
        super().__init__(contexts, len(laws), false_fail_rate, lambda r: [token_of(r)])
