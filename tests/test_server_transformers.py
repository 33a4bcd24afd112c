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
from specgauge.fixtures.serve import read_trace, transformers_serve  # noqa: E402
from specgauge.fixtures.tiny_llama import build_tiny_llama, cyclic_prompts  # noqa: E402
from specgauge.stattests.server.compare import one_sample_logprobs, one_sample_reference, two_sample  # noqa: E402
from specgauge.stattests.server.probe import (ClientConfig, ProbeConfig, ServerError,  # noqa: E402
                                              TemperatureIgnoredError, probe, read_probe)
from specgauge.stattests.server.reference import ReferenceModel  # noqa: E402

# not the slow tier: the server gate against a real engine is what CI must see every run
# (about 80 s on one of two idle cores)

SAMPLES = 150   # per prompt: 600 requests a run, 20-50 s at concurrency 3 on 2 busy cores
LENGTH = 3
N_PROMPTS = 4
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
def prompts(model_dir) -> list[str]:
    """The model's own greedy cycles: prompt lookup finds n-grams whose drafts get accepted."""
    found = cyclic_prompts(model_dir, count=N_PROMPTS)
    assert len(found) == N_PROMPTS
    return found


@pytest.fixture(scope="module")
def server_log(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("serve") / "serve.log"


@pytest.fixture(scope="module")
def server(model_dir, server_log):
    with transformers_serve(model_dir, log=server_log, trace=True) as url:
        yield url
    port = int(url.rsplit(":", 1)[1])
    with socket.socket() as sock:  # nothing left running
        assert sock.connect_ex(("127.0.0.1", port)) != 0, "the server still listens after the tests"


def _config(url: str, temperature: float, extra: dict) -> ProbeConfig:
    return ProbeConfig(url, temperature=temperature, max_tokens=LENGTH, samples_per_prompt=SAMPLES,
                       extra_body=extra)


@pytest.fixture(scope="module")
def baseline(server, server_log, prompts, tmp_path_factory) -> dict:
    """Speculation off, drawn by the CLI, killed half-way (SIGKILL) and resumed."""
    folder = tmp_path_factory.mktemp("probe")
    out, prompt_file = folder / "off.jsonl", folder / "prompts.jsonl"
    prompt_file.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    extra = _generation_config()
    command = [sys.executable, "-m", "specgauge.reports.cli", "probe", server, "--out", str(out), "--prompts",
               str(prompt_file), "-L", str(LENGTH), "--samples", str(SAMPLES), "--concurrency", "3",
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
    summary = probe(_config(server, 1.0, extra), prompts, out, client_config=CLIENT)
    return {"path": out, "before": before, "summary": summary, "generators": read_trace(server_log)[0]}


@pytest.fixture(scope="module")
def traces(server, baseline, server_log, prompts, tmp_path_factory) -> dict:
    """Each run's probe file, and what the server's generation did meanwhile (traced)."""
    folder = tmp_path_factory.mktemp("runs")
    out = {"off": {"path": baseline["path"], "generators": baseline["generators"], "accepted": 0}}
    offset = read_trace(server_log)[2]
    for name, (temperature, extra) in RUNS.items():
        path = folder / f"{name}.jsonl"
        probe(_config(server, temperature, extra), prompts, path, client_config=CLIENT)
        generators, accepted, offset = read_trace(server_log, offset)
        out[name] = {"path": path, "generators": generators, "accepted": accepted}
    return out


@pytest.fixture(scope="module")
def runs(traces) -> dict:
    return {name: read_probe(t["path"]) for name, t in traces.items()}


def test_interrupted_probe_resumes_without_duplicates(baseline):
    run = read_probe(baseline["path"])
    keys = [(r["p"], r["s"]) for r in run.records]
    assert 0 < baseline["before"] < SAMPLES * N_PROMPTS, "the kill should land mid-run"
    assert len(keys) == len(set(keys)) == SAMPLES * N_PROMPTS
    assert baseline["summary"].drawn == SAMPLES * N_PROMPTS - baseline["before"]
    assert run.header["capabilities"] == {"n": False, "logprobs": False, "token_ids": False}
    assert run.header["models"]["data"], "the header records the server's /v1/models"


@pytest.mark.parametrize("name, generator", [("lookup", "PromptLookupCandidateGenerator"),
                                             ("early_exit", "EarlyExitCandidateGenerator")])
def test_the_server_really_speculated(traces, name, generator):
    """Every request of the run went through assisted generation, and drafts were accepted."""
    assert traces["off"]["generators"] == {}, "the baseline must not speculate"
    assert traces[name]["generators"] == {generator: SAMPLES * N_PROMPTS}
    print(f"{name}: {traces[name]['accepted']} drafted tokens accepted in {SAMPLES * N_PROMPTS} requests")
    assert traces[name]["accepted"] > 0.1 * SAMPLES * N_PROMPTS, "drafts were hardly ever accepted"


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


def test_a_server_ignoring_the_temperature_is_one_clear_error(server, prompts, tmp_path):
    """`do_sample: false` in the server's generation config: greedy whatever the temperature."""
    greedy = {"generation_config": json.dumps({"do_sample": False, "max_new_tokens": LENGTH})}
    cfg = ProbeConfig(server, temperature=1.0, max_tokens=LENGTH, samples_per_prompt=5, extra_body=greedy)
    with pytest.raises(TemperatureIgnoredError, match="ignored the temperature"):
        probe(cfg, prompts, tmp_path / "greedy.jsonl", client_config=CLIENT)


def test_a_url_that_is_not_the_api_is_one_clear_error(server, prompts, tmp_path):
    with pytest.raises(ServerError, match="did not answer like an OpenAI-compatible server"):
        probe(ProbeConfig(server + "/health", max_tokens=LENGTH, samples_per_prompt=5), prompts, tmp_path / "x.jsonl")


def test_a_refused_field_is_one_clear_error(server, prompts, tmp_path):
    """`transformers serve` refuses `top_k` in the body (it takes it inside generation_config)."""
    with pytest.raises(ServerError, match=r"refused the request \(HTTP 422\).*top_k"):
        probe(ProbeConfig(server, top_k=3, max_tokens=LENGTH, samples_per_prompt=5), prompts, tmp_path / "k.jsonl")


def test_pytest_integration_against_the_server(server, tmp_path):
    """stattests/test_server.py, run as a CI pipeline would, with this server as both URLs."""
    import specgauge.stattests

    module = Path(specgauge.stattests.__file__).parent / "test_server.py"
    certificate = tmp_path / "server.csv"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(module),
         "--specgauge-server-url", server, "--specgauge-baseline-url", server + "/v1",
         "--specgauge-certificate", str(certificate)],
        env={**os.environ, "SPECGAUGE_SERVER_SAMPLES": "20"}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:]
    assert "1 passed, 1 skipped" in result.stdout and "returns no logprobs" in result.stdout
    assert (tmp_path / "server_two-sample.csv").read_text().startswith("decoder,check,family")


def test_compare_cli_reference_mode(runs, traces, model_dir, tmp_path, capsys):
    from specgauge.reports import cli

    csv = tmp_path / "reference.csv"
    status = cli.main(["compare", str(traces["lookup"]["path"]), "--reference", str(model_dir), "--csv", str(csv)])
    out = capsys.readouterr().out
    assert status == 0 and "PASS (reference" in out and "note:" not in out
    status = cli.main(["compare", str(traces["top_k_3"]["path"]), "--reference", str(model_dir), "--csv", str(csv)])
    assert status == 1 and "FAIL (reference" in capsys.readouterr().out
