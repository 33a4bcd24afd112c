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

from specgauge.stattests.plugin import slow_tier_requested  # noqa: E402

# The default tier runs the server gate against the real engine at a small size (speculation
# by prompt lookup, its baseline and the top-k negative control, 40 requests of each of 2 prompts); the slow
# tier at the full size (150 a prompt: 600 requests a run, 20-50 s each at concurrency 3 on 2
# busy cores), early exit and the pytest integration included.

FULL_SAMPLES = 150
FAST_SAMPLES = 40
LENGTH = 3
N_PROMPTS = 4
CLIENT = ClientConfig(concurrency=3)


@pytest.fixture(scope="module")
def samples(request) -> int:
    """Samples per prompt of each run: the slow tier's full size, else the default tier's."""
    return FULL_SAMPLES if slow_tier_requested(request.config) else FAST_SAMPLES


@pytest.fixture(scope="module")
def n_prompts(request) -> int:
    return N_PROMPTS if slow_tier_requested(request.config) else 2


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
def prompts(model_dir, n_prompts) -> list[str]:
    """The model's own greedy cycles: prompt lookup finds n-grams whose drafts get accepted."""
    found = cyclic_prompts(model_dir, count=n_prompts)
    assert len(found) == n_prompts
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


def _config(url: str, temperature: float, extra: dict, samples: int) -> ProbeConfig:
    return ProbeConfig(url, temperature=temperature, max_tokens=LENGTH, samples_per_prompt=samples,
                       extra_body=extra)


@pytest.fixture(scope="module")
def baseline(server, server_log, prompts, samples, tmp_path_factory) -> dict:
    """Speculation off, drawn by the CLI, killed half-way (SIGKILL) and resumed."""
    folder = tmp_path_factory.mktemp("probe")
    out, prompt_file = folder / "off.jsonl", folder / "prompts.jsonl"
    prompt_file.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    extra = _generation_config()
    command = [sys.executable, "-m", "specgauge.reports.cli", "probe", server, "--out", str(out), "--prompts",
               str(prompt_file), "-L", str(LENGTH), "--samples", str(samples), "--concurrency", "3",
               "--extra-body", json.dumps(extra), "--no-progress"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while process.poll() is None and time.monotonic() < deadline:
        if out.exists() and out.read_bytes().count(b"\n") > samples:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    before = len(read_probe(out).records)
    with open(out, "ab") as fh:  # a torn line, as a kill during a write leaves
        fh.write(b'{"p": 3, "s": 7, "te')
    summary = probe(_config(server, 1.0, extra, samples), prompts, out, client_config=CLIENT)
    return {"path": out, "before": before, "summary": summary, "generators": read_trace(server_log)[0],
            "samples": samples}


@pytest.fixture(scope="module")
def traces(server, baseline, server_log, prompts, samples, request, tmp_path_factory) -> dict:
    """Each run's probe file, and what the server's generation did meanwhile (traced); early exit in the
    slow tier only."""
    folder = tmp_path_factory.mktemp("runs")
    out = {"off": {"path": baseline["path"], "generators": baseline["generators"], "accepted": 0}}
    offset = read_trace(server_log)[2]
    slow = slow_tier_requested(request.config)
    for name, (temperature, extra) in RUNS.items():
        if name == "early_exit" and not slow:
            continue
        path = folder / f"{name}.jsonl"
        probe(_config(server, temperature, extra, samples), prompts, path, client_config=CLIENT)
        generators, accepted, offset = read_trace(server_log, offset)
        out[name] = {"path": path, "generators": generators, "accepted": accepted}
    return out


@pytest.fixture(scope="module")
def runs(traces) -> dict:
    return {name: read_probe(t["path"]) for name, t in traces.items()}


def test_interrupted_probe_resumes_without_duplicates(baseline):
    run = read_probe(baseline["path"])
    keys = [(r["p"], r["s"]) for r in run.records]
    total = baseline["samples"] * len(run.header["prompts"])
    assert 0 < baseline["before"] < total, "the kill should land mid-run"
    assert len(keys) == len(set(keys)) == total
    assert baseline["summary"].drawn == total - baseline["before"]
    assert run.header["capabilities"] == {"n": False, "logprobs": False, "token_ids": False}
    assert run.header["models"]["data"], "the header records the server's /v1/models"


EARLY_EXIT = pytest.param("early_exit", marks=pytest.mark.slow)


@pytest.mark.parametrize("name, generator", [("lookup", "PromptLookupCandidateGenerator"),
                                             pytest.param("early_exit", "EarlyExitCandidateGenerator",
                                                          marks=pytest.mark.slow)])
def test_the_server_really_speculated(traces, samples, prompts, name, generator):
    """Every request of the run went through assisted generation, and drafts were accepted."""
    requests = samples * len(prompts)
    assert traces["off"]["generators"] == {}, "the baseline must not speculate"
    assert traces[name]["generators"] == {generator: requests}
    print(f"{name}: {traces[name]['accepted']} drafted tokens accepted in {requests} requests")
    assert traces[name]["accepted"] > 0.1 * requests, "drafts were hardly ever accepted"


@pytest.mark.parametrize("name", ["lookup", EARLY_EXIT])
def test_speculation_passes_two_sample(runs, name):
    cert = two_sample(runs["off"], runs[name])
    assert cert.passed, cert.verdict()
    assert cert.verdict().startswith("PASS (two-sample")


@pytest.mark.slow  # the default tier's 40 requests of 2 prompts are too few for the binned two-sample test
def test_top_k_fails_two_sample(runs):
    cert = two_sample(runs["off"], runs["top_k_3"])
    assert not cert.passed, cert.verdict()


@pytest.mark.parametrize("name", ["off", "lookup", EARLY_EXIT])
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


@pytest.mark.slow
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
    notes = [line for line in out.splitlines() if line.strip().startswith("note:")]
    # at the default tier's 40 samples a prompt the only note is the contexts too seldom drawn to
    # state a figure; no sample is incomplete and no prompt refused
    assert status == 0 and "PASS (reference" in out
    assert all("are untested: too few draws" in line for line in notes), notes
    status = cli.main(["compare", str(traces["top_k_3"]["path"]), "--reference", str(model_dir), "--csv", str(csv)])
    assert status == 1 and "FAIL (reference" in capsys.readouterr().out
