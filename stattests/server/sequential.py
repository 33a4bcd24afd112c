"""Sized probes: how many draws a worst-case TV needs, and an early failure that keeps its rate.

Sizing. The first position's law at every prompt is known before any request (a local
reference model's, by one forward pass over the prompt) or after a pilot (the server's own
top-k logprobs). :func:`draws_for` gives the draws per prompt the identity test needs to
state the asked TV there against every alternative, at the false-fail rate the comparison
will share out; the probe then asks every prompt for the largest.

Early failure. While the draws land, :class:`EProcess` bets against the known first-position
law: per prompt, the product of q̂(x)/p(x) over the draws, q̂ the add-½ (Krichevsky-Trofimov)
estimate from the draws before (over the law's heaviest tokens and one cell for the rest),
is a nonnegative martingale of mean 1 under an exact server; the mean over prompts is one
too. By Ville's inequality it ever reaches 1/rate with probability at most ``rate``, however
often it is looked at, so stopping the moment it does keeps the false-fail rate. A server
that truncates or re-tempers the law grows it by about KL(q‖p) nats a draw: a few hundred
draws, not the budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from specgauge.stattests.core.identity import min_num_samples_for_identity_test
from specgauge.stattests.server.probe import ServerError
from specgauge.stattests.server.worstcase import lump

#: Tokens the early test bets on one by one at each prompt; the rest share one cell.
BET_TOKENS = 16


class BiasedServerError(ServerError):
    """The sequential test found the server's first tokens certainly off the known law."""


def planning_rate(false_fail_rate: float, prompts: int, length: int) -> float:
    """The rate a sized probe plans each first position at: the comparison shares its total over
    the contexts it tests, so plan for a wide family (64 contexts a prompt and position, and
    the other tests); a smaller family gives each row more and states a finer figure."""
    return false_fail_rate / (prompts * 64 * length + length + 2)


def draws_for(tv: float, laws: Sequence[np.ndarray], false_fail_rate: float) -> list[int]:
    """Draws per prompt for the identity test to state ``tv`` at each first position: about
    ‖p^(−max)_(−tv)‖_(2/3) / tv², O(log 1/rate)."""
    return [min_num_samples_for_identity_test(tv, lump(np.asarray(p, np.float64) / np.sum(p),
                                                         np.zeros(len(p)), None)[0], false_fail_rate=false_fail_rate)
            for p in laws]


@dataclass(frozen=True)
class SizedPlan:
    """What a sized probe asks for and why: draws per prompt, the figure asked, the rate planned at."""

    tv: float
    false_fail_rate: float
    per_prompt: tuple[int, ...]

    @property
    def samples_per_prompt(self) -> int:
        return max(self.per_prompt)

    def describe(self, rate_per_s: float | None = None) -> str:
        worst = int(np.argmax(self.per_prompt))
        total = self.samples_per_prompt * len(self.per_prompt)
        line = (f"TV {self.tv:g} needs {self.samples_per_prompt} draws a prompt at the first position (prompt "
                f"{worst}; the others {min(self.per_prompt)}-{self.samples_per_prompt}), {total} in all")
        if rate_per_s:
            seconds = total / rate_per_s
            line += f": about {seconds / 60:.0f} min at the measured {rate_per_s:.3g} samples/s"
        return line


class EProcess:
    """The early test on the first position (see the module docstring); a probe watcher.

    ``laws[p]`` the known first-token law at prompt ``p`` (over token ids, or over the cells
    ``token_of`` maps a record to; a sample that stopped at once drew the end of sequence, a
    token like any other); ``token_of(record)`` a record's first token. None: not known (a
    withheld or merged token); whether a token is known may depend on the token, so skipping
    that record and betting on would bias the bet: the prompt's process stops there instead
    (its values so far are those of the full process, so Ville's bound still holds).
    """

    def __init__(self, laws: Sequence[np.ndarray], false_fail_rate: float, token_of) -> None:
        self.rate = false_fail_rate
        self.token_of = token_of
        self.heads, self.cells, self.counts, self.log_e = [], [], [], np.zeros(len(laws))
        for p in laws:
            p = np.asarray(p, np.float64) / np.sum(p)
            head = np.argsort(-p, kind="stable")[:BET_TOKENS]
            cell = {int(t): j for j, t in enumerate(head)}
            self.heads.append(np.r_[p[head], max(0.0, 1.0 - p[head].sum())])
            self.cells.append(cell)
            self.counts.append(np.zeros(head.size + 1))
        self.seen = 0
        self.stopped = False
        self.frozen = np.zeros(len(laws), bool)  # a prompt whose bets stopped at a record of unknown token

    def add(self, records: Iterable[Mapping[str, Any]]) -> None:
        for r in records:
            p = r["p"]
            if self.frozen[p]:
                continue
            token = self.token_of(r)
            if token is None:  # not known (a withheld token): whether may depend on the token, so skipping
                self.frozen[p] = True  # it would bias the bet; stopping here keeps Ville's bound
                continue
            cell = self.cells[p].get(int(token), len(self.cells[p]))
            counts = self.counts[p]
            q = (counts[cell] + 0.5) / (counts.sum() + 0.5 * counts.size)  # predictable: before this draw
            law = self.heads[p][cell]
            self.log_e[p] += math.log(q / law) if law > 0 else math.inf
            counts[cell] += 1
            self.seen += 1

    @property
    def e_value(self) -> float:
        """The mean over prompts of each prompt's e-process."""
        top = float(np.max(self.log_e))
        return math.inf if top == math.inf else math.exp(top) * float(np.mean(np.exp(self.log_e - top)))

    def check(self) -> None:
        if self.e_value >= 1.0 / self.rate:
            self.stopped = True
            worst = int(np.argmax(self.log_e))
            raise BiasedServerError(
                f"the first tokens are off the known law: the sequential test's e-value reached "
                f"{self.e_value:.3g} >= 1/{self.rate:g} after {self.seen} draws (prompt {worst}); an exact server "
                f"gets there with probability at most {self.rate:g}")
