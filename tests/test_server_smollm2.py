"""`transformers serve` serving a real model, SmolLM2-135M-Instruct (fixtures/real_models.py).

Speculation is switched per request: `assistant_early_exit: k` in the request's generation
config drafts with the model's own first k layers (HF's self-speculative early exit), and
the baseline sends the same config without it. `transformers serve` refuses `n`, so every
sample is one request; and it returns text only, so tokens are counted with the model's
tokenizer (a word count would call samples short that were not).

The default tier keeps the token counting (no server). The served runs are the slow tier:
at TV 0.1 the two-sample test needs about a thousand requests per prompt and arm, which
on two cores is tens of minutes; ``SPECGAUGE_REAL_SERVER_SAMPLES`` sets the samples per
prompt (default: the size computed for TV 0.1 from a pilot's law, see ``_samples``).
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

from specgauge.fixtures import real_models
from specgauge.stattests.server.compare import one_sample_reference, truncation_note, two_sample, unit_kind
from specgauge.stattests.server.probe import ProbeRun

LENGTH = 2          # the first token comes from the prefill; speculation drafts from the second on
EARLY_EXIT = 24     # first 24 of 30 layers: α about 0.2 at T = 1 (drafts are rejected often)
PROMPTS = ["Name a primary color.", "Is the sun a star? Answer yes or no.", "What is 2 + 2?",
           "Say hello in French."]
TARGET_TV = 0.1
#: At the default size every certificate must state TV <= 0.1; a smaller SPECGAUGE_REAL_SERVER_SAMPLES
#: runs the mechanics only (a PASS there can be vacuous: the reference rows need enough samples per context).
AT_SIZE = not os.environ.get("SPECGAUGE_REAL_SERVER_SAMPLES")


def _stated_tv(cert) -> float:
    return float(cert.frame["min_detectable_tv"].iloc[0])


def _run(texts: list[str], length: int, finish: str = "length") -> ProbeRun:
    header = {"params": {"max_tokens": length, "temperature": 1.0, "model": "m", "endpoint": "chat"},
              "prompts": ["p"], "capabilities": {"n": False, "logprobs": False, "token_ids": False}}
    return ProbeRun(header, [{"p": 0, "s": i, "r": i, "text": t, "finish": finish} for i, t in enumerate(texts)])


def test_a_text_only_server_is_counted_in_the_models_tokens():
    """'Paris!' is one word but two tokens: counted in words, every sample looks capped short."""
    run = _run(["Paris!", "Rome."] * 3, 2)
    tokenize = list  # characters stand for a model's sub-word tokens here
    assert unit_kind(run) == "words" and unit_kind(run, tokenize=tokenize) == "model tokens"
    assert "6 of 6 samples have fewer than 2 tokens" in truncation_note(run, "words")[0]
    assert truncation_note(run, "model tokens", tokenize=tokenize) == []
    short = _run(["P"] * 2 + ["Pa"] * 4, 2, finish="stop")
    note = truncation_note(short, "model tokens", tokenize=tokenize)[0]
    assert "2 of 6 samples have fewer than 2 tokens" in note and "2 stopped at an end of sequence" in note
    merged = _run(["P"] * 2 + ["Pa"] * 4, 2)  # finish 'length': the server made 2 tokens, the text re-counts 1
    note = truncation_note(merged, "model tokens", tokenize=tokenize)[0]
    assert "not capped" in note and "the server capped them" not in note


def test_smollm2s_tokenizer_counts_what_words_miss():
    reason = real_models.available()
    if reason:
        pytest.skip(reason)
    from specgauge.stattests.server.reference import model_tokenizer

    folder = str(real_models.checkpoint_dir(real_models.SMOLLM2))
    tokenize = model_tokenizer(folder)
    run = _run(["Paris.", "Yes,", " Bonjour"], 2)
    assert [len(tokenize(r["text"])) for r in run.records] == [2, 2, 2]
    assert truncation_note(run, "model tokens", tokenize=tokenize) == []
    assert "3 of 3" in truncation_note(run, "words")[0]


# ---------------------------------------------------------------- the served model (slow tier)


def _generation_config(**fields) -> dict:
    return {"generation_config": json.dumps({"do_sample": True, "max_new_tokens": LENGTH, **fields})}


def _samples() -> int:
    """Samples per prompt and arm: the environment's, else what TV 0.1 needs for these prompts' law
    (measured once: about 12 categories of two tokens per prompt after pooling, 4 prompts)."""
    if os.environ.get("SPECGAUGE_REAL_SERVER_SAMPLES"):
        return int(os.environ["SPECGAUGE_REAL_SERVER_SAMPLES"])
    from specgauge.stattests.server.stats import min_num_samples_for_homogeneity

    rate = 1e-6 / (LENGTH + 1)
    return min_num_samples_for_homogeneity(TARGET_TV, np.full(12, 1 / 12), groups=len(PROMPTS), false_fail_rate=rate)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from specgauge.fixtures.serve import read_trace, transformers_serve
    from specgauge.stattests.server.probe import ClientConfig, ProbeConfig, probe, read_probe

    reason = real_models.available()
    if reason:
        pytest.skip(reason)
    for module in ("fastapi", "uvicorn", "accelerate"):
        pytest.importorskip(module)
    folder = real_models.checkpoint_dir(real_models.SMOLLM2)
    out = tmp_path_factory.mktemp("smollm2-serve")
    log = out / "serve.log"
    samples = _samples()
    arms = {"off": (1.0, _generation_config()),
            "early_exit": (1.0, _generation_config(assistant_early_exit=EARLY_EXIT)),
            "too_cold": (0.7, _generation_config(assistant_early_exit=EARLY_EXIT))}  # lossy: a wrong temperature
    runs, traces, seconds = {}, {}, {}
    with transformers_serve(folder, log=log, trace=True) as url:
        offset = 0
        for name, (temperature, extra) in arms.items():
            start = time.perf_counter()
            cfg = ProbeConfig(url, temperature=temperature, max_tokens=LENGTH, samples_per_prompt=samples,
                              extra_body=extra, endpoint="chat")
            probe(cfg, PROMPTS, out / f"{name}.jsonl", client_config=ClientConfig(concurrency=2))
            seconds[name] = time.perf_counter() - start
            generators, accepted, offset = read_trace(log, offset)
            runs[name], traces[name] = read_probe(out / f"{name}.jsonl"), (generators, accepted)
    print(f"\n{samples} samples per prompt; seconds per arm: { {k: round(v) for k, v in seconds.items()} }")
    return {"folder": str(folder), "runs": runs, "traces": traces, "samples": samples}


@pytest.mark.slow
def test_the_server_speculated_by_early_exit(served):
    requests = served["samples"] * len(PROMPTS)
    assert served["traces"]["off"][0] == {}
    assert served["traces"]["early_exit"][0] == {"EarlyExitCandidateGenerator": requests}
    assert served["traces"]["early_exit"][1] > 0, "no drafted token was ever accepted"


@pytest.mark.slow
def test_early_exit_passes_two_sample_at_the_stated_tv(served):
    from specgauge.stattests.server.reference import model_tokenizer

    cert = two_sample(served["runs"]["off"], served["runs"]["early_exit"], false_fail_rate=1e-6,
                      target_tv=TARGET_TV, tokenize=model_tokenizer(served["folder"]))
    print(cert.verdict(), *cert.notes, sep="\n")
    assert cert.passed, cert.verdict()
    assert cert.unit == "model tokens"
    assert _stated_tv(cert) <= TARGET_TV or not AT_SIZE, cert.verdict()
    assert not any("the server capped them" in n for n in cert.notes), cert.notes


@pytest.mark.slow
@pytest.mark.parametrize("arm", ["off", "early_exit"])
def test_both_arms_pass_against_the_reference(served, arm):
    from specgauge.stattests.server.reference import ReferenceModel

    cert = one_sample_reference(served["runs"][arm], ReferenceModel(served["folder"]), false_fail_rate=1e-6,
                                target_tv=TARGET_TV)
    print(cert.verdict(), *cert.notes, sep="\n")
    assert cert.passed, cert.verdict()
    assert _stated_tv(cert) <= TARGET_TV or not AT_SIZE, cert.verdict()


@pytest.mark.slow
def test_a_wrong_temperature_fails_both_modes(served):
    from specgauge.stattests.server.reference import ReferenceModel, model_tokenizer

    lossy = served["runs"]["too_cold"]
    lossy = ProbeRun({**lossy.header, "params": {**lossy.header["params"], "temperature": 1.0}}, lossy.records)
    two = two_sample(served["runs"]["off"], lossy, false_fail_rate=1e-6, target_tv=TARGET_TV,
                     tokenize=model_tokenizer(served["folder"]))
    ref = one_sample_reference(lossy, ReferenceModel(served["folder"], temperature=1.0), false_fail_rate=1e-6,
                               target_tv=TARGET_TV)
    print(two.verdict(), ref.verdict(), sep="\n")
    if not AT_SIZE:
        pytest.skip("a smaller sample than the TV 0.1 size: the lossy run need not fail")
    assert not two.passed and not ref.passed

