"""The textbook case: ``--draft none --draft-cost-ratio c`` at batch 1 is Leviathan's formula.

c is whole step against whole step: a draft step costs c plain decode steps, engine
overhead included. With the textbook's flat pass (``fixtures/hardware/textbook.toml``:
verifying γ + 1 tokens costs what one does) the speed-up is (1 − α^(γ+1)) /
((1 − α)(γc + 1)) with the default engine overheads (1.21 ms a step, 1 µs a token) left on.
On a dense target's datasheet prior the pass is nearly flat at batch 1 (below its knee),
so the formula holds there too for the γ engines use.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from importlib.resources import files

from specgauge.laws import tokens_per_pass
from specgauge.simulator import IIDAcceptance, SimulationConfig, simulate
from specgauge.simulator.core import prepare
from specgauge.simulator.drafts import RatioDraft

ALPHAS = (0.1, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
GAMMAS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16)
RATIOS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
TEXTBOOK = str(files("specgauge.fixtures") / "hardware" / "textbook.toml")
#: The textbook's flat pass, the default engine overheads on.
SETUPS = (dict(profiles=TEXTBOOK), dict(gpu="h100", target="llama-3.1-8b", profiles=TEXTBOOK))
#: Dense targets on their datasheet prior.
PRIORS = (dict(), dict(gpu="a100", target="llama-3.1-8b"), dict(gpu="h100", target="qwen3-8b"),
          dict(gpu="b200", target="llama-3.1-70b", tp=2))


def worst_error(setup: dict, bare_pass: bool = False, gammas=GAMMAS) -> float:
    """Largest |simulated / Leviathan − 1| over the grid, from the engine's own round costs."""
    worst = 0.0
    for gamma in gammas:
        for c in RATIOS:
            p = prepare(SimulationConfig(draft=None, gamma=gamma, draft_cost_ratio=c, batch_size=1, **setup))
            costs = p.costs
            assert p.costs.overhead.step_s == pytest.approx(1.21e-3)          # the default overhead is on
            if bare_pass:   # c priced against the bare pass, as before: the engine overhead breaks the formula
                costs = replace(costs, draft=RatioDraft(c, costs.target))
            for ctx in (16, 512, 4096):
                plain = float(costs.decode_round(1, 0, ctx)[0])
                spec = float(costs.decode_round(1, gamma, ctx)[0])
                n = np.array([tokens_per_pass(a, gamma) for a in ALPHAS])
                worst = max(worst, float(np.abs((n * plain / spec) / (n / (gamma * c + 1)) - 1).max()))
    return worst


@pytest.mark.parametrize("setup", SETUPS, ids=lambda s: s.get("target", "default"))
def test_leviathan_within_one_percent_over_the_grid(setup):
    assert worst_error(setup) < 0.01


@pytest.mark.parametrize("setup", PRIORS, ids=lambda s: s.get("target", "default"))
def test_a_dense_prior_is_flat_enough_at_batch_one_for_the_gammas_engines_use(setup):
    assert worst_error(setup, gammas=(1, 2, 3, 4)) < 0.01


def test_pricing_c_against_the_bare_pass_misses_the_formula():
    assert worst_error(SETUPS[0], bare_pass=True) > 0.05


def test_a_simulated_run_at_batch_one_lands_on_the_formula():
    alpha, gamma, c = 0.8, 4, 0.1
    row = simulate(SimulationConfig(draft=None, gamma=gamma, acceptance=IIDAcceptance(alpha), draft_cost_ratio=c,
                                    batch_size=1, requests=2, prompt_len=16, output_len=30_000, seed=0,
                                    profiles=TEXTBOOK))
    mean_n = tokens_per_pass(alpha, gamma)
    p = alpha ** np.arange(gamma + 1) * (1 - alpha)
    p[gamma] = alpha ** gamma
    sd = math.sqrt(((np.arange(gamma + 1) + 1) ** 2 * p).sum() - mean_n ** 2)
    se = sd / math.sqrt(row["spec_decode_num_drafts"]) / (gamma * c + 1)
    expected = mean_n / (gamma * c + 1)
    # sampling error of tokens per pass (false-fail 1e-6) plus the formula's 1 % allowance
    assert abs(row["speedup_vs_no_spec"] - expected) <= stats.norm.isf(5e-7) * se + 0.01 * expected
