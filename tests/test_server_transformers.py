"""`specgauge probe` and `compare` against a real `transformers serve` on 127.0.0.1.

One server for the module (a tiny random Llama saved locally, no download). Speculation is
switched per request through the server's `generation_config` field: prompt lookup and
self-speculative early exit run HF's assisted generation; the baseline sends the same
config without them. The server ignores `n` and `logprobs`, so every sample is one request
and the logprob mode cannot run here (it is tested against an in-process fake in
test_probe.py). Negative control: top-k 3 against the full law. (Temperature 0.9 against 1
moves a TV of a few hundredths, below what these sample sizes detect; test_probe.py
catches it on the fake, with more samples.)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("accelerate")
pytest.importorskip("httpx2")

from specgauge.errors import ConfigError  # noqa: E402
from specgauge.fixtures.serve import transformers_serve  # noqa: E402
from specgauge.fixtures.tiny_llama import build_tiny_llama  # noqa: E402
from specgauge.stattests.server_compare import one_sample_logprobs, one_sample_reference, two_sample  # noqa: E402
from specgauge.stattests.server_probe import ClientConfig, ProbeConfig, probe, read_probe  # noqa: E402
from specgauge.stattests.server_reference import ReferenceModel  # noqa: E402

pytestmark = pytest.mark.slow

# repeated word patterns, so that prompt lookup finds n-grams to propose
PROMPTS = ["alpha bravo charlie alpha bravo charlie alpha bravo", "delta echo delta echo delta",
           "golf hotel india golf hotel", "kilo lima mike kilo lima mike kilo"]
SAMPLES = 150   # per prompt: 600 requests a run, 20-50 s at concurrency 3 on 2 busy cores
LENGTH = 3
CLIENT = ClientConfig(concurrency=3)


def _generation_config(**fields) -> dict:
    return {"generation_config": json.dumps({"do_sample": True, "max_new_tokens": LENGTH, **fields})}


RUNS = {
    "lookup": (1.0, _generation_config(prompt_lookup_num_tokens=3)),
    "early_exit": (1.0, _generation_config(assistant_early_exit=1)),
    "top_k_3": (1.0, _generation_config(top_k=3)),
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama") / "model")


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with transformers_serve(model_dir, log=log) as url:
        yield url
    port = int(url.rsplit(":", 1)[1])
    with socket.socket() as sock:  # nothing left running
        assert sock.connect_ex(("127.0.0.1", port)) != 0, "the server still listens after the tests"


def _config(url: str, temperature: float, extra: dict) -> ProbeConfig:
    return ProbeConfig(url, temperature=temperature, max_tokens=LENGTH, samples_per_prompt=SAMPLES,
                       extra_body=extra)


@pytest.fixture(scope="module")
def baseline(server, tmp_path_factory) -> dict:
    """Speculation off, drawn by the CLI, killed half-way (SIGKILL) and resumed."""
    folder = tmp_path_factory.mktemp("probe")
    out, prompts = folder / "off.jsonl", folder / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    extra = _generation_config()
    command = [sys.executable, "-m", "specgauge.reports.cli", "probe", server, "--out", str(out), "--prompts",
               str(prompts), "-L", str(LENGTH), "--samples", str(SAMPLES), "--concurrency", "3",
               "--extra-body", json.dumps(extra), "--no-progress"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while process.poll() is None and time.monotonic() < deadline:
        if out.exists() and out.read_bytes().count(b"\n") > SAMPLES:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    before = len(read_probe(out).records)
    with open(out, "ab") as fh:  # a torn line, as a kill during a write leaves
        fh.write(b'{"p": 3, "s": 7, "te')
    summary = probe(_config(server, 1.0, extra), PROMPTS, out, client_config=CLIENT)
    return {"path": out, "before": before, "summary": summary}


@pytest.fixture(scope="module")
def runs(server, baseline, tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("runs")
    paths = {"off": baseline["path"]}
    for name, (temperature, extra) in RUNS.items():
        paths[name] = folder / f"{name}.jsonl"
        probe(_config(server, temperature, extra), PROMPTS, paths[name], client_config=CLIENT)
    return {name: read_probe(path) for name, path in paths.items()}


def test_interrupted_probe_resumes_without_duplicates(baseline):
    run = read_probe(baseline["path"])
    keys = [(r["p"], r["s"]) for r in run.records]
    assert 0 < baseline["before"] < SAMPLES * len(PROMPTS), "the kill should land mid-run"
    assert len(keys) == len(set(keys)) == SAMPLES * len(PROMPTS)
    assert baseline["summary"].drawn == SAMPLES * len(PROMPTS) - baseline["before"]
    assert run.header["capabilities"] == {"n": False, "logprobs": False, "token_ids": False}
    assert run.header["models"]["data"], "the header records the server's /v1/models"


@pytest.mark.parametrize("name", ["lookup", "early_exit"])
def test_speculation_passes_two_sample(runs, name):
    cert = two_sample(runs["off"], runs[name])
    assert cert.passed, cert.verdict()
    assert cert.verdict().startswith("PASS (two-sample")


def test_top_k_fails_two_sample(runs):
    cert = two_sample(runs["off"], runs["top_k_3"])
    assert not cert.passed, cert.verdict()


@pytest.mark.parametrize("name", ["off", "lookup", "early_exit"])
def test_speculation_passes_against_reference(runs, model_dir, name):
    cert = one_sample_reference(runs[name], ReferenceModel(str(model_dir)))
    assert cert.passed, cert.verdict()


def test_top_k_fails_against_reference(runs, model_dir):
    cert = one_sample_reference(runs["top_k_3"], ReferenceModel(str(model_dir)))  # the law of top-k off
    assert not cert.passed, cert.verdict()


def test_logprob_mode_needs_logprobs_this_server_ignores(runs):
    with pytest.raises(ConfigError, match="no top logprobs"):
        one_sample_logprobs(runs["off"])
