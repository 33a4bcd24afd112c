"""The torch decoder: same rule as the reference, reproducible, vectorised, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from specgauge.stattests.core.contract import check_emitted, emitted_lengths, load_decoder  # noqa: E402
from specgauge.stattests.decoders import torch_decoder  # noqa: E402
from specgauge.stattests.decoders.torch_decoder import TorchDecoder, sample_rows_torch, verify_tensors  # noqa: E402
from specgauge.stattests.core.statistics import goodness_of_fit  # noqa: E402

V, GAMMA = 6, 3


def _round(batch: int, seed: int = 0, zero_target: bool = True):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(V), size=GAMMA + 1)
    q = rng.dirichlet(np.ones(V), size=GAMMA)
    if zero_target:
        p[0, 0] = 0.0
        p[0] /= p[0].sum()
    target = np.broadcast_to(p, (batch, GAMMA + 1, V)).copy()
    draft = np.broadcast_to(q, (batch, GAMMA, V)).copy()
    tokens = np.stack([rng.choice(V, size=batch, p=q[k]) for k in range(GAMMA)], axis=1)
    return p, q, target, draft, tokens


def test_loads_by_short_name():
    assert isinstance(load_decoder("torch"), TorchDecoder)


def test_output_is_exact_per_position_and_acceptance_is_one_minus_tv():
    p, q, target, draft, tokens = _round(60_000)
    emitted = check_emitted(TorchDecoder().verify(target, draft, tokens, np.random.default_rng(1)), tokens, V)
    n = emitted_lengths(emitted)
    for k in range(GAMMA + 1):
        counts = np.bincount(emitted[n > k, k], minlength=V)
        result = goodness_of_fit(counts, p[k])
        assert result.passed, result.describe()
    assert (emitted[:, 0] != 0).all(), "token 0 has p = 0 at position 0"
    accept0 = (n > 1).mean()
    assert abs(accept0 - (1 - 0.5 * np.abs(p[0] - q[0]).sum())) < 5 * np.sqrt(0.25 / len(n))


def test_same_rng_same_output_and_streams_differ():
    _, _, target, draft, tokens = _round(2_000)
    dec = TorchDecoder()
    a = dec.verify(target, draft, tokens, np.random.default_rng(7))
    b = dec.verify(target, draft, tokens, np.random.default_rng(7))
    c = dec.verify(target, draft, tokens, np.random.default_rng(8))
    np.testing.assert_array_equal(a, b)
    assert (a != c).any()


def test_identical_distributions_accept_everything_and_add_a_bonus():
    _, q, _, draft, tokens = _round(500)
    target = np.concatenate([draft, draft[:, :1]], axis=1)
    emitted = TorchDecoder().verify(target, draft, tokens, np.random.default_rng(0))
    np.testing.assert_array_equal(emitted[:, :GAMMA], tokens)
    assert (emitted[:, GAMMA] >= 0).all()


def test_zero_target_probability_rejects_at_once_and_never_emits_it():
    _, _, target, draft, tokens = _round(1_000)
    target[:, 0] = 0.0
    target[np.arange(len(tokens)), 0, (tokens[:, 0] + 1) % V] = 1.0
    emitted = TorchDecoder().verify(target, draft, tokens, np.random.default_rng(0))
    assert (emitted_lengths(emitted) == 1).all()
    assert (emitted[:, 0] != tokens[:, 0]).all()


def test_gamma_zero_is_a_bonus_token_only():
    target = np.full((4, 1, V), 1.0 / V)
    emitted = TorchDecoder().verify(target, np.zeros((4, 0, V)), np.zeros((4, 0), np.int64), np.random.default_rng(0))
    assert emitted.shape == (4, 1) and (emitted >= 0).all()


def test_tensor_entry_point_stays_on_the_device_and_matches_the_numpy_path():
    _, _, target, draft, tokens = _round(300)
    dec = TorchDecoder()
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    out = dec.verify_tensors(torch.from_numpy(target), torch.from_numpy(draft), torch.from_numpy(tokens),
                             dec.generator(rng_a))
    assert isinstance(out, torch.Tensor) and out.device.type == "cpu" and out.dtype == torch.int64
    np.testing.assert_array_equal(out.numpy(), dec.verify(target, draft, tokens, rng_b))


def test_sampling_never_returns_a_zero_probability_token():
    probs = torch.tensor([[0.5, 0.5, 0.0, 0.0]] * 10_000, dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    assert sample_rows_torch(probs, gen).max() <= 1


def test_bad_shapes_and_a_larger_draft_vocabulary_are_errors():
    _, _, target, draft, tokens = _round(10)
    dec = TorchDecoder()
    with pytest.raises(ValueError, match="draft_probs"):
        dec.verify(target, np.concatenate([draft, draft[..., :1]], axis=2), tokens, np.random.default_rng(0))
    with pytest.raises(ValueError, match="target_probs"):
        dec.verify(target[:, :GAMMA], draft, tokens, np.random.default_rng(0))


def test_tensors_on_another_device_are_refused():
    _, _, target, draft, tokens = _round(10)
    dec = TorchDecoder()
    meta = [torch.from_numpy(x).to("meta") for x in (target, draft, tokens)]
    with pytest.raises(ValueError, match="meta"):
        dec.verify_tensors(*meta, dec.generator(np.random.default_rng(0)))
    mixed = (torch.from_numpy(target), torch.from_numpy(draft).to("meta"), torch.from_numpy(tokens))
    with pytest.raises(ValueError, match="different devices"):
        verify_tensors(*mixed, torch.Generator())


def test_cuda_without_a_gpu_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(ValueError, match="CUDA"):
        TorchDecoder(device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_the_law():
    p, _, target, draft, tokens = _round(200_000)
    emitted = TorchDecoder(device="cuda").verify(target, draft, tokens, np.random.default_rng(5))
    emitted = check_emitted(emitted, tokens, V)
    n = emitted_lengths(emitted)
    for k in range(GAMMA + 1):
        result = goodness_of_fit(np.bincount(emitted[n > k, k], minlength=V), p[k])
        assert result.passed, result.describe()


def test_missing_torch_raises_import_error_naming_it(monkeypatch):
    monkeypatch.setattr(torch_decoder, "torch", None)
    with pytest.raises(ImportError, match="torch"):
        TorchDecoder()


def test_thread_setting_is_restored_and_validated():
    _, _, target, draft, tokens = _round(100)
    before = torch.get_num_threads()
    TorchDecoder(num_threads=1).verify(target, draft, tokens, np.random.default_rng(0))
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="num_threads"):
        TorchDecoder(num_threads=0)
