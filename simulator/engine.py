"""The discrete-event engine: continuous batching with speculation, stepped a batch at a time.

Events sit on a heap as ``(time, priority, seq, kind)`` with ``seq`` from the run's own
``itertools.count`` (SimPy's rule: ties break deterministically, events are never
compared). Kinds: ARRIVAL (requests join the waiting queue), DONE (an iteration ends;
finished requests complete and free their KV blocks), SCHEDULE (the idle engine admits
waiting requests FIFO while a batch slot and enough KV blocks are free, then starts the
next iteration).

An iteration that carries prefill work (chunked, up to ``max_batched_tokens``) runs
alone. A pure decode batch is stepped as a *segment*: several rounds drawn and priced
at once with NumPy, cut at the first round in which a request completes or a waiting
arrival could join. Nothing in a segment can differ from stepping its rounds one by
one, because no event can change the batch in between.

KV blocks for a request's full prompt + output (+ gamma lookahead) are reserved at
admission, so no request is ever preempted.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from specgauge.simulator.acceptance import Sampler
from specgauge.simulator.cost import RoundCost
from specgauge.simulator.policies import Policy
from specgauge.simulator.workload import Workload

DONE, ARRIVAL, SCHEDULE = 0, 1, 2   # priorities at equal times: finish, then arrive, then schedule
MAX_SEGMENT_ROUNDS = 256


@dataclass(frozen=True)
class EngineParams:
    """What the engine needs besides the workload: capacity, costs and the speculation setting."""

    batch_cap: int
    total_blocks: int
    block_tokens: int
    lookahead: int
    max_batched_tokens: int
    costs: RoundCost
    policy: Policy
    speculative: bool
    tokens_per_pass: Callable[[int], float]


@dataclass
class RunStats:
    """Raw results of one run; ``metrics.summarise`` turns them into report columns."""

    first_token: np.ndarray
    finish: np.ndarray
    itl_values: list = field(default_factory=list)
    itl_weights: list = field(default_factory=list)
    passes: int = 0
    compute_bound_passes: int = 0
    sequences_in_passes: int = 0
    busy_s: float = 0.0
    kv_block_seconds: float = 0.0
    drafts: int = 0
    accepted: int = 0
    pos_drafted: np.ndarray | None = None
    pos_accepted: np.ndarray | None = None
    output_tokens: int = 0
    admitted: np.ndarray | None = None   # when each request joined the batch (a closed loop's send time)


class Engine:
    """One run over one workload. Create, ``run()``, read the stats; not reusable."""

    def __init__(self, workload: Workload, params: EngineParams, sampler: Sampler | None) -> None:
        self.w, self.p, self.sampler = workload, params, sampler
        n = len(workload)
        self.need = -(-(workload.prompt + workload.output + params.lookahead) // params.block_tokens)
        g = max(params.policy.max_gamma, 1)
        self.stats = RunStats(first_token=np.full(n, np.nan), finish=np.full(n, np.nan),
                              pos_drafted=np.zeros(g + 1, np.int64), pos_accepted=np.zeros(g + 1, np.int64),
                              admitted=np.full(n, np.nan))
        self.free_blocks = params.total_blocks
        # The running batch, in admission order.
        self.req = np.zeros(0, np.int64)
        self.ctx = np.zeros(0, np.int64)
        self.rem = np.zeros(0, np.int64)
        self.pre = np.zeros(0, np.int64)
        self.n_arrived = 0
        self.next_admit = 0
        self._heap: list = []
        self._seq = itertools.count()

    def _push(self, time: float, kind: int) -> None:
        heapq.heappush(self._heap, (time, kind, next(self._seq)))

    def run(self, progress: Callable[[int], None] | None = None) -> RunStats:
        """Run to the last completion; ``progress``, when given, is told the number of
        requests admitted so far after every engine iteration (a progress bar's hook)."""
        arrival = self.w.arrival
        n = len(arrival)
        self._push(float(arrival[0]), ARRIVAL)
        busy = scheduled = False
        while self._heap:
            t, kind, _ = heapq.heappop(self._heap)
            if kind == ARRIVAL:
                self.n_arrived = int(np.searchsorted(arrival, t, side="right"))
                if self.n_arrived < n:
                    self._push(float(arrival[self.n_arrived]), ARRIVAL)
            elif kind == DONE:
                busy = False
                if progress is not None:
                    progress(self.next_admit)
            else:
                scheduled = False
                if not busy:
                    end = self._start(t)
                    if end is not None:
                        busy = True
                        self._push(end, DONE)
                continue
            if not busy and not scheduled:
                scheduled = True
                self._push(t, SCHEDULE)
        if self.next_admit < n or len(self.req):
            raise RuntimeError(f"engine stopped with {n - self.next_admit} requests never admitted")  # pragma: no cover
        return self.stats

    # -- scheduling ---------------------------------------------------------------------

    def _admit(self, t: float) -> None:
        cap = self.p.batch_cap - len(self.req)
        first = self.next_admit
        last = first
        while last < self.n_arrived and last - first < cap and self.need[last] <= self.free_blocks:
            self.free_blocks -= int(self.need[last])
            last += 1
        if last > first:
            ids = np.arange(first, last)
            self.stats.admitted[ids] = t
            self.req = np.concatenate([self.req, ids])
            self.ctx = np.concatenate([self.ctx, np.zeros(last - first, np.int64)])
            self.rem = np.concatenate([self.rem, self.w.output[first:last]])
            self.pre = np.concatenate([self.pre, self.w.prompt[first:last]])
            self.next_admit = last

    def _start(self, t: float) -> float | None:
        self._admit(t)
        if not len(self.req):
            return None
        if self.pre.any():
            return self._mixed(t)
        return self._segment(t)

    def _gamma(self, batch: int, ctx: float) -> int:
        if not self.p.speculative or batch == 0:
            return 0
        costs = self.p.costs
        return self.p.policy.choose(batch, lambda g: float(costs.decode_round(batch, g, ctx)[0]), self.p.tokens_per_pass)

    def _record_acceptance(self, accepted: np.ndarray, gamma: int) -> None:
        s = self.stats
        s.drafts += accepted.size
        s.accepted += int(accepted.sum())
        counts = np.bincount(accepted.ravel(), minlength=gamma + 1)
        at_least = np.cumsum(counts[::-1])[::-1]          # at_least[k] = #rounds with >= k accepted
        s.pos_accepted[1:gamma + 1] += at_least[1:gamma + 1]
        s.pos_drafted[1:gamma + 1] += accepted.size

    def _complete(self, t_end: float) -> None:
        done = (self.rem <= 0) & (self.pre <= 0)
        if done.any():
            ids = self.req[done]
            self.stats.finish[ids] = t_end
            self.free_blocks += int(self.need[ids].sum())
            keep = ~done
            self.req, self.ctx, self.rem, self.pre = self.req[keep], self.ctx[keep], self.rem[keep], self.pre[keep]

    # -- an iteration with prefill work -------------------------------------------------

    def _mixed(self, t: float) -> float:
        s, p = self.stats, self.p
        dec = self.pre == 0
        batch = int(np.count_nonzero(dec))
        ctx_dec = int(self.ctx[dec].sum()) if batch else 0
        gamma = self._gamma(batch, ctx_dec)
        budget = max(p.max_batched_tokens - batch * (gamma + 1), 0)
        pidx = np.flatnonzero(self.pre)
        want = self.pre[pidx]
        if len(pidx) == 1:
            take = np.minimum(want, budget)
        else:
            take = np.minimum(np.maximum(budget - (np.cumsum(want) - want), 0), want)
        c0 = self.ctx[pidx]
        chunk = int(take.sum())
        prefill_ctx = float(c0 @ (take > 0))
        prefill_attn = float(take @ c0 + (take @ (take + 1)) / 2)
        seconds, bound = p.costs.mixed_round(batch, gamma, ctx_dec, chunk, prefill_ctx, prefill_attn, p.speculative)
        t_end = t + seconds
        if batch:
            if gamma > 0:
                accepted = self.sampler.draw(self.req[dec], 1, gamma)
                self.sampler.advance(self.req[dec], accepted)
                self._record_acceptance(accepted, gamma)
                emitted = np.minimum(accepted[0] + 1, self.rem[dec])
            else:
                emitted = np.minimum(1, self.rem[dec])
            self.rem[dec] -= emitted
            self.ctx[dec] += emitted
            s.output_tokens += int(emitted.sum())
            s.itl_values.append(np.array([seconds]))
            s.itl_weights.append(batch)
        self.pre[pidx] -= take
        self.ctx[pidx] += take
        finished = pidx[(self.pre[pidx] == 0) & (take > 0)]
        if len(finished):
            s.first_token[self.req[finished]] = t_end
            self.rem[finished] -= 1
            s.output_tokens += len(finished)
        s.passes += 1
        s.compute_bound_passes += int(bound)
        s.sequences_in_passes += batch + int((take > 0).sum())
        s.busy_s += seconds
        s.kv_block_seconds += (p.total_blocks - self.free_blocks) * seconds
        self._complete(t_end)
        return t_end

    # -- a run of pure decode rounds ----------------------------------------------------

    def _segment(self, t: float) -> float:
        s, p = self.stats, self.p
        batch = len(self.req)
        ctx0 = int(self.ctx.sum())
        gamma = self._gamma(batch, ctx0)
        min_rem = int(self.rem.min())
        per_pass = p.tokens_per_pass(gamma) if gamma else 1.0
        rounds = min(min_rem, math.ceil(min_rem / per_pass) + 1, MAX_SEGMENT_ROUNDS)
        arrival_at = None
        if batch < p.batch_cap and self.next_admit == self.n_arrived < len(self.w) \
                and self.need[self.n_arrived] <= self.free_blocks:
            arrival_at = float(self.w.arrival[self.n_arrived])
            one = float(p.costs.decode_round(batch, gamma, ctx0)[0])
            rounds = max(1, min(rounds, math.ceil((arrival_at - t) / one) + 1))
        if gamma > 0:
            accepted = self.sampler.draw(self.req, rounds, gamma)
            cum = np.cumsum(accepted + 1, axis=0)
            hit = (cum >= self.rem).any(axis=1)
            last = int(hit.argmax()) if hit.any() else rounds - 1
            per_round = cum.sum(axis=1)
            ctx = ctx0 + np.concatenate(([0], per_round[:-1]))
        else:
            accepted = cum = None
            last = rounds - 1
            ctx = ctx0 + batch * np.arange(rounds)
        seconds, bound = p.costs.decode_round(batch, gamma, ctx)
        ends = t + np.cumsum(seconds)
        if arrival_at is not None:
            last = min(last, int(np.searchsorted(ends, arrival_at, side="left")))
        used = last + 1
        if gamma > 0:
            emitted = np.minimum(cum[last], self.rem)
            self.sampler.advance(self.req, accepted[:used])
            self._record_acceptance(accepted[:used], gamma)
        else:
            emitted = np.minimum(used, self.rem)
        self.rem -= emitted
        self.ctx += emitted
        duration = float(ends[last] - t)
        s.output_tokens += int(emitted.sum())
        s.itl_values.append(seconds[:used])
        s.itl_weights.append(batch)
        s.passes += used
        s.compute_bound_passes += int(np.count_nonzero(bound[:used]))
        s.sequences_in_passes += batch * used
        s.busy_s += duration
        s.kv_block_seconds += (p.total_blocks - self.free_blocks) * duration
        t_end = float(ends[last])
        self._complete(t_end)
        return t_end
