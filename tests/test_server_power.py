"""The one-sample server modes at their stated budget: level on the exact server, power on biased ones.

An in-process speculative fake (specgauge.fixtures.fake_openai, ``rule=...``) drafts two
tokens a round from a draft chain q and verifies them against the target p. The logprobs
and reference modes are run at the draws per prompt the identity test needs to state a
worst-case TV of 0.2 at the first position (sized as `probe --guarantee` sizes), against:

- the exact rule (must pass),
- a wrong residual: the correction drawn from p instead of max(0, p − q); the prompts are
  chosen so that its first-token TV is at least 0.1 on each (checked exactly here),
- a bonus token sampled at half the temperature (it shows at the third position),
- typical acceptance (Medusa's rule).

The default tier probes the exact rule and the wrong residual; the slow tier the other two.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

httpx2 = pytest.importorskip("httpx2")

from specgauge.fixtures.fake_openai import FakeOpenAI  # noqa: E402
from specgauge.stattests.core.statistics import DEFAULT_FALSE_FAIL  # noqa: E402
from specgauge.stattests.server.compare import one_sample_logprobs, one_sample_reference  # noqa: E402
from specgauge.stattests.server.probe import ClientConfig, ProbeConfig, probe, read_probe  # noqa: E402
from specgauge.stattests.server.sequential import draws_for  # noqa: E402
from specgauge.stattests.server.stats import (conditional_goodness_of_fit,  # noqa: E402
                                              min_num_samples_for_conditional_fit)

PROMPTS = ["prompt 0", "prompt 3", "prompt 5", "prompt 11"]  # wrong-residual first-token TV >= 0.1 on each
LENGTH, TOP = 3, 8
TARGET_TV = 0.2
#: Planned at the rate of the widest family the comparison can form (every context reached 20 times):
#: a smaller family gives each row a larger rate, so the stated figure can only be finer.
PLAN_RATE = DEFAULT_FALSE_FAIL / (len(PROMPTS) * (1 + TOP + TOP**2) + LENGTH + 2)


def budget() -> int:
    """Draws per prompt for the identity test to state TV 0.2 at every prompt's first position."""
    app = FakeOpenAI()
    return max(draws_for(TARGET_TV, [app.law(app.logits(p), 1.0)[app.vocab] for p in PROMPTS], PLAN_RATE))


def fake_reference(app: FakeOpenAI, temperature: float = 1.0):
    """The fake's exact target law at each sampled position: what a reference model gives."""
    def law(run):
        prompt = np.array([r["p"] for r in run.records])
        tokens = np.array([r["token_ids"] for r in run.records])
        prev = np.concatenate([np.full((len(tokens), 1), app.vocab), tokens[:, :-1]], axis=1)
        tables = np.stack([app.law(app.logits(p), temperature) for p in run.header["prompts"]])
        return prompt, tokens, tables[prompt[:, None], prev]
    return law


class _Runs(dict):
    """Each rule's run, probed the first time a test asks for it (the slow tier's rules only there)."""

    def __init__(self, folder) -> None:
        super().__init__()
        self.folder = folder

    def __missing__(self, rule: str):
        cfg = ProbeConfig("http://fake", max_tokens=LENGTH, samples_per_prompt=budget(), top_logprobs=TOP)
        probe(cfg, PROMPTS, self.folder / f"{rule}.jsonl", client_config=ClientConfig(concurrency=8),
              transport=httpx2.ASGITransport(app=FakeOpenAI(rule=rule, seed=11)))
        self[rule] = read_probe(self.folder / f"{rule}.jsonl")
        return self[rule]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return _Runs(tmp_path_factory.mktemp("power"))


@pytest.mark.parametrize("mode", ["logprobs", "reference"])
def test_every_first_position_states_the_worst_case_tv_it_was_sized_for(runs, mode):
    frame = _certify(runs["exact"], mode).frame
    first = frame[frame["position"].str.endswith("/pos0/#0")]
    assert len(first) == len(PROMPTS) and (first["min_detectable_tv"] <= TARGET_TV).all(), first.to_string()
    assert first["detectable"].str.startswith("GUARANTEE").all()
    assert budget() < 5000, "TV 0.2 on an 8-token law stays a few thousand draws a prompt"


def test_wrong_residual_has_first_token_tv_of_at_least_0_1():
    app = FakeOpenAI(rule="wrong_residual")
    tvs = [0.5 * np.abs(app.first_token_law(p) - app.law(app.logits(p), 1.0)[app.vocab]).sum() for p in PROMPTS]
    assert min(tvs) >= 0.1, tvs


@pytest.mark.parametrize("mode", ["logprobs", "reference"])
def test_exact_server_passes(runs, mode):
    cert = _certify(runs["exact"], mode)
    assert cert.passed, cert.verdict()
    assert cert.verdict().startswith(f"PASS ({mode}") and "contexts tested: each next-token law" in cert.verdict()
    assert "at worst-case TV <=" in cert.verdict()


@pytest.mark.parametrize("mode", ["logprobs", "reference"])
@pytest.mark.parametrize("rule, position", [("wrong_residual", "pos0"),
                                            pytest.param("bonus_temperature", "pos2", marks=pytest.mark.slow),
                                            pytest.param("typical", "pos0", marks=pytest.mark.slow)])
def test_biased_servers_fail_at_the_budget(runs, mode, rule, position):
    cert = _certify(runs[rule], mode)
    assert not cert.passed, cert.verdict()
    frame = cert.frame[cert.frame["check"] == "position-given-prefix"]
    row = frame.set_index("position").loc[position]
    assert row["verdict"] == "fail", cert.frame.to_string()
    assert f"p-value {cert.frame.loc[cert.frame['verdict'] == 'fail', 'pvalue'].iloc[0]:.3g}" in cert.verdict()


def test_the_pit_figure_is_not_called_a_tv(runs):
    frame = _certify(runs["exact"], "logprobs").frame
    assert frame.set_index("check").loc["pit-probability-order", "detectable"].startswith("not a TV")


def _certify(run, mode):
    if mode == "logprobs":
        return one_sample_logprobs(run, target_tv=TARGET_TV)
    return one_sample_reference(run, fake_reference(FakeOpenAI()), target_tv=TARGET_TV)


def test_conditional_fit_keeps_its_level_on_exact_draws():
    """Contexts of very different sizes (many with a handful of draws), laws drawn at random:
    the p-values of exact draws are Uniform(0, 1) (rare cells pooled per context)."""
    rng = np.random.default_rng(0)
    contexts, cells = 60, 6
    laws = rng.dirichlet(np.full(cells, 0.5), size=contexts)
    sizes = rng.geometric(0.02, size=contexts)
    context = np.repeat(np.arange(contexts), sizes)
    pvalues = []
    for _ in range(300):
        u = rng.random((context.size, 1))
        cell = np.minimum((u > np.cumsum(laws[context], axis=1)).sum(axis=1), cells - 1)
        pvalues.append(conditional_goodness_of_fit(context, cell, laws).pvalue)
    assert stats.kstest(pvalues, "uniform").pvalue > 1e-3


def test_conditional_fit_detects_the_tv_it_states():
    """Every context moved by TV 0.1 towards a colder law, at the sample size stated for 0.1."""
    rng = np.random.default_rng(1)
    contexts, cells = 8, 6
    laws = rng.dirichlet(np.full(cells, 1.0), size=contexts)
    colder = laws ** 3 / (laws ** 3).sum(axis=1, keepdims=True)
    mix = 0.1 / (0.5 * np.abs(colder - laws).sum(axis=1))
    moved = (1 - mix[:, None]) * laws + mix[:, None] * colder
    n = min_num_samples_for_conditional_fit(0.1, cells, contexts=contexts)
    context = np.repeat(np.arange(contexts), n)
    for _ in range(5):
        cell = np.minimum((rng.random((context.size, 1)) > np.cumsum(moved[context], axis=1)).sum(axis=1), cells - 1)
        result = conditional_goodness_of_fit(context, cell, laws)
        assert not result.passed and result.min_detectable_tv <= 0.1, result.describe()
