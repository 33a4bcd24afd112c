"""Tree drafts: shapes, the exact accepted path (checked by Monte Carlo), cost and the planner."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from specgauge.laws import tokens_per_pass
from specgauge.reports.cli import plan
from specgauge.simulator import ConfigError, IIDAcceptance, SimulationConfig, simulate
from specgauge.simulator.core import prepare
from specgauge.simulator.trees import TreeAcceptance, parse_tree, tree_shape

FALSE_FAIL = 1e-6
Z = stats.norm.isf(FALSE_FAIL / 2)


def walk(parents: np.ndarray, rank_chosen: np.ndarray, rng: np.random.Generator, rounds: int) -> np.ndarray:
    """Accepted path lengths by walking the tree: at a reached node one child (or none) is chosen,
    the r-th with probability rank_chosen[r]. Independent of the law's recursion."""
    children: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        children.setdefault(int(p), []).append(i)
    lengths = np.zeros(rounds, dtype=np.int64)
    node = np.full(rounds, -1)
    alive = np.ones(rounds, dtype=bool)
    while alive.any():
        for parent in np.unique(node[alive]):
            kids = children.get(int(parent), [])
            idx = np.flatnonzero(alive & (node == parent))
            probs = np.append(rank_chosen[:len(kids)], 1 - rank_chosen[:len(kids)].sum())
            pick = rng.choice(len(kids) + 1, size=idx.size, p=probs)
            stop = pick == len(kids)
            alive[idx[stop]] = False
            go = idx[~stop]
            node[go] = np.asarray(kids)[pick[~stop]]
            lengths[go] += 1
    return lengths


@pytest.mark.parametrize("spec", ["topk:3x4", "full:2x3", "choices:0;1;2;0-0;0-1;1-0;0-0-0"])
def test_exact_accepted_path_agrees_with_monte_carlo(spec):
    tree = TreeAcceptance.build(spec, alpha=0.6)
    rounds = 40_000
    lengths = walk(parse_tree(spec), np.asarray(tree.rank_chosen), np.random.default_rng(7), rounds)
    se = lengths.std(ddof=1) / np.sqrt(rounds)
    exact = tree.expected_tokens_per_pass(0) - 1
    assert abs(lengths.mean() - exact) <= Z * se
    observed = np.bincount(lengths, minlength=tree.depth + 1)
    expected = tree.pmf() * rounds
    keep = expected > 5
    assert stats.chisquare(observed[keep], expected[keep] * observed[keep].sum() / expected[keep].sum()).pvalue > FALSE_FAIL
    # The same check rejects the chain's law at the same α: the tree's siblings add accepted tokens.
    chain = tokens_per_pass(0.6, tree.depth) - 1
    assert abs(lengths.mean() - chain) > Z * se


def test_shapes_and_choice_lists():
    assert list(parse_tree("topk:3x2")) == [-1, -1, -1, 0, 0, 0]
    assert list(parse_tree("choices:0;1;0-0")) == list(parse_tree("choices:[[0],[1],[0,0]]")) == [-1, -1, 0]
    shape = tree_shape(parse_tree("topk:4x5"))
    assert (shape.steps, shape.drafted, shape.verified) == (5, 20.0, 21.0)
    for bad in ("topk:0x3", "choices:0-0", "choices:1", "spiral:3"):
        with pytest.raises(ConfigError, match="tree"):
            SimulationConfig(tree=bad)
    assert SimulationConfig(tree="topk:2x3", gamma=5).gamma == 3
    with pytest.raises(ConfigError, match="policy fixed"):
        SimulationConfig(tree="topk:2x3", policy="goodput")


def test_a_round_verifies_every_node():
    config = SimulationConfig(gpu="h100", target="llama-3.1-8b", draft="eagle", tree="topk:4x3", requests=8)
    p = prepare(config)
    seconds, _ = p.costs.decode_round(16, config.gamma, 16_000)
    verify = p.target_cost.time(16 * 13, 16_000, 13 * 16_000)
    draft = p.costs.draft.round(16, 3, 12.0, 16_000, verify)
    assert seconds == pytest.approx(verify + draft + p.costs.overhead(16 * 13, True))


def test_engine_draws_the_tree_law():
    row = simulate(SimulationConfig(gpu="h100", target="llama-3.1-8b", draft="eagle", tree="topk:3x4",
                                    acceptance=IIDAcceptance(0.65), batch_size=16, requests=200, output_len=256))
    tree = TreeAcceptance.build("topk:3x4", 0.65)
    rounds = row["spec_decode_num_drafts"]
    sd = np.sqrt(((np.arange(tree.depth + 1) + 1) ** 2 * tree.pmf()).sum() - tree.expected_tokens_per_pass(0) ** 2)
    # Requests cut the last round short, so the engine's mean sits at or a little below the law.
    assert row["expected_acceptance_length"] == pytest.approx(tree.expected_tokens_per_pass(0))
    assert abs(row["spec_decode_acceptance_length"] - tree.expected_tokens_per_pass(0)) <= Z * sd / np.sqrt(rounds)


def test_plan_names_the_best_shape_per_load(tmp_path):
    csv = tmp_path / "p.csv"
    assert plan.main(["--gpu", "h100", "--target", "llama-3.1-8b", "--draft", "eagle", "--gamma", "2,4",
                      "--tree", "none,topk:2x4,topk:8x6", "--batch-size", "1,128", "--requests", "64",
                      "--output-len", "64", "--no-progress", "--csv", str(csv)]) == 0
    frame = pd.read_csv(csv)
    assert len(frame) == 2 * 4                      # γ 2, γ 4, and each tree once per batch size
    decisions = pd.read_csv(tmp_path / "p_decision.csv")
    best = decisions[decisions["decision"] == "best_gamma_throughput"].set_index("batch_size")["shape"]
    assert best[1].startswith("tree")               # at batch 1 a tree's extra tokens are nearly free
    assert not best[128].startswith("tree topk:8x6")  # at batch 128 the 48-node tree costs more than it brings
