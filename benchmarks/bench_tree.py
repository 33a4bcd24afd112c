"""Emitted tokens per second: the vectorised tree references against a per-node Python loop.

The baseline verifies the same drafted trees (the ``narrow`` fixture: 2 siblings a node,
depth 3) with SpecInfer's rule written the direct way: row by row, node by node, one
sibling at a time, ``rng.choice`` for the correction. The references verify the whole
batch with a loop over depth levels only, 8,192 trees a call (engines verify a few hundred
sequences a step; at 100,000 trees the dense inputs, 1.9 kB a tree, leave the cache and
the ratio falls by a quarter to a third). The last test prints the ratios (target: ≥ 50×).

Where the references' time goes (V = 8, so numpy's per-call cost, not arithmetic, rules):
one flat gather of p (and q) at the first sibling's token per row, full rows only for the
rows that reject it, undecided rows carried by ``np.take`` (boolean masks cost three times
as much), and the correction's inverse CDF built by column adds (``cumsum`` along a short
last axis is ten times slower).

Run with ``pytest benchmarks/bench_tree.py --benchmark-enable``.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from specgauge.fixtures.trees import TREE_FIXTURES
from specgauge.stattests.core.tree_contract import children_table
from specgauge.stattests.tree.harness import draft_batch
from specgauge.stattests.tree.reference import SpecInferDecoder, TopKTargetOnlyDecoder, WithoutReplacementDecoder

FIXTURE = TREE_FIXTURES["narrow"]
LOOP_ROWS = 2_000
BATCH = 8_192
TARGET_RATIO = 50.0

_RATES: dict[str, float] = {}


def per_node_loop(parents, tokens, draft_probs, target_probs, rng) -> int:
    """SpecInfer's multi-round rejection, one row and one node at a time; returns tokens emitted."""
    kids = children_table(parents)
    emitted = 0
    for b in range(tokens.shape[0]):
        node = -1
        while True:
            r = target_probs[b, node + 1].copy()
            chosen = -1
            for child in kids[node + 1]:
                if child < 0:
                    break
                q = draft_probs[b, child]
                x = tokens[b, child]
                if rng.random() < min(1.0, r[x] / q[x]):
                    chosen = child
                    break
                nxt = np.maximum(r - q, 0.0)
                if nxt.sum() > 0:
                    r = nxt / nxt.sum()
            emitted += 1
            if chosen < 0:
                rng.choice(r.size, p=r / r.sum())
                break
            node = chosen
    return emitted


def _timed(fn, walls):
    """``fn`` timed in CPU seconds of this process, as benchmarks/bench_reference.py times its
    calls: other users' load on a shared machine preempts a long call more than a short one."""
    def run():
        start = time.process_time()
        out = fn()
        walls.append(time.process_time() - start)
        return out
    return run


def _record(benchmark, key, tokens, walls):
    rate = tokens / min(walls)
    _RATES[key] = rate
    benchmark.extra_info["emitted_tokens_per_s"] = rate
    print(f"\n{key}: {rate:,.0f} emitted tokens/s ({tokens:,} tokens, best of {len(walls)} calls)")


def _batch(scheme: str, rows: int):
    return draft_batch(FIXTURE, scheme, rows, np.random.default_rng(0))


@pytest.mark.benchmark(group="tree: emitted tokens per second")
def test_per_node_loop(benchmark):
    b, rng, walls = _batch("iid", LOOP_ROWS), np.random.default_rng(1), []
    tokens = benchmark.pedantic(_timed(lambda: per_node_loop(FIXTURE.parents, b.tokens, b.draft_probs,
                                                             b.target_probs, rng), walls), rounds=3, iterations=1)
    _record(benchmark, "per-node loop", tokens, walls)


@pytest.mark.parametrize("decoder", [SpecInferDecoder(), WithoutReplacementDecoder(), TopKTargetOnlyDecoder()],
                         ids=lambda d: d.name)
@pytest.mark.benchmark(group="tree: emitted tokens per second")
def test_reference(benchmark, decoder):
    b, rng, walls = _batch(decoder.scheme, BATCH), np.random.default_rng(1), []
    tokens = benchmark.pedantic(_timed(lambda: int((decoder.verify_tree(FIXTURE.parents, b.tokens, b.draft_probs,
                                                                        b.target_probs, rng) != -1).sum()), walls),
                                rounds=15, iterations=1, warmup_rounds=1)
    _record(benchmark, decoder.name, tokens, walls)


def test_speedup_over_the_per_node_loop(speed_target):
    """Side by side, from the same run."""
    needed = ("per-node loop", "specinfer", "rrsw", "topk")
    if not all(k in _RATES for k in needed):
        pytest.skip("run the whole file: the ratios need the benchmarks above")
    base = _RATES["per-node loop"]
    print("\n" + "\n".join(f"{k}: {_RATES[k]:,.0f} tokens/s = {_RATES[k] / base:,.0f}x the per-node loop"
                           for k in needed))
    worst = min(_RATES[k] / base for k in needed[1:])
    speed_target(worst >= TARGET_RATIO, f"a tree reference is only {worst:.0f}x the per-node loop (target {TARGET_RATIO:.0f}x)")
