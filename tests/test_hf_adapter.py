"""The HF adapter: transformers' own ``_speculative_sampling`` behind the contract."""

from __future__ import annotations

import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from specgauge.stattests.core.contract import check_emitted, emitted_lengths, load_decoder  # noqa: E402
from specgauge.stattests.decoders.hf import HFDecoder, probs_to_logits, speculative_sampling_function  # noqa: E402
from specgauge.stattests.core.statistics import goodness_of_fit  # noqa: E402

V, GAMMA = 6, 2
PINNED = "5.24.0"


def _round(batch: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(V), size=GAMMA + 1)
    q = rng.dirichlet(np.ones(V), size=GAMMA)
    p[:, 0] = 0.0  # the target forbids token 0 everywhere: logits -inf
    p /= p.sum(axis=1, keepdims=True)
    target = np.broadcast_to(p, (batch, GAMMA + 1, V)).copy()
    draft = np.broadcast_to(q, (batch, GAMMA, V)).copy()
    tokens = np.stack([rng.choice(V, size=batch, p=q[k]) for k in range(GAMMA)], axis=1)
    return p, target, draft, tokens


def test_loads_by_short_name():
    assert isinstance(load_decoder("hf"), HFDecoder)


def test_logits_with_minus_infinity_give_back_p_exactly():
    p = np.array([0.0, 0.5, 0.25, 0.25])
    logits = probs_to_logits(p)
    assert torch.isneginf(logits[0]) and torch.isfinite(logits[1:]).all()
    np.testing.assert_allclose(logits.softmax(-1).numpy(), p, rtol=1e-15, atol=0)


def test_output_is_exact_and_never_a_forbidden_token():
    p, target, draft, tokens = _round(4_000)
    emitted = check_emitted(HFDecoder().verify(target, draft, tokens, np.random.default_rng(1)), tokens, V)
    n = emitted_lengths(emitted)
    for k in range(GAMMA + 1):
        result = goodness_of_fit(np.bincount(emitted[n > k, k], minlength=V), p[k])
        assert result.passed, result.describe()  # a forbidden token would be p-value 0
    assert (emitted != 0).all()


def test_all_equal_logits_accept_every_draft_and_add_a_uniform_bonus():
    tokens = np.random.default_rng(0).integers(V, size=(2_000, GAMMA))
    uniform = np.full((2_000, GAMMA + 1, V), 1.0 / V)
    emitted = HFDecoder().verify(uniform, uniform[:, :GAMMA], tokens, np.random.default_rng(0))
    np.testing.assert_array_equal(emitted[:, :GAMMA], tokens)
    assert goodness_of_fit(np.bincount(emitted[:, GAMMA], minlength=V), np.full(V, 1 / V)).passed


def test_reproducible_and_leaves_torch_state_alone():
    _, target, draft, tokens = _round(200)
    dec = HFDecoder()
    torch.manual_seed(123)
    before = torch.get_rng_state()
    threads = torch.get_num_threads()
    a = dec.verify(target, draft, tokens, np.random.default_rng(5))
    assert torch.equal(before, torch.get_rng_state()) and torch.get_num_threads() == threads
    np.testing.assert_array_equal(a, dec.verify(target, draft, tokens, np.random.default_rng(5)))


def test_a_larger_draft_vocabulary_and_no_candidates_are_clear_errors():
    _, target, draft, tokens = _round(5)
    with pytest.raises(ValueError, match="draft vocabulary"):
        HFDecoder().verify(target, np.concatenate([draft, draft[..., :1]], axis=2), tokens, np.random.default_rng(0))
    with pytest.raises(ValueError, match="gamma >= 1"):
        HFDecoder().verify(target[:, :1], draft[:, :0], tokens[:, :0], np.random.default_rng(0))


def test_missing_transformers_raises_import_error_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match="transformers"):
        HFDecoder()


@pytest.mark.skipif(transformers.__version__ != PINNED, reason=f"finding checked against transformers=={PINNED}")
@pytest.mark.xfail(strict=True, reason="transformers 5.24.0 accepts with `r_i <= p/q`: a uniform of exactly 0 "
                                       "accepts a token the target gives probability 0")
def test_a_token_the_target_forbids_is_never_accepted(monkeypatch):
    """White-box: force the acceptance uniform to 0 (torch.rand can return 0; P = 2^-24 in float32)."""
    sample = speculative_sampling_function()
    monkeypatch.setattr(torch, "rand_like", lambda x, **kw: torch.zeros_like(x))
    p = torch.tensor([[[0.0, 1.0], [0.5, 0.5]]])
    q = torch.tensor([[[1.0, 0.0]]])
    with np.errstate(divide="ignore"):
        valid, n_matches = sample(torch.tensor([[0]]), q.log(), 1, p.log())
    assert int(n_matches) == 0 and int(valid[0, 0]) == 1
