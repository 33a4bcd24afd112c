"""Certify a running OpenAI-compatible server from CI: probe it, then compare.

    pytest --pyargs specgauge.stattests -k server \\
        --specgauge-server-url http://127.0.0.1:8001 --specgauge-baseline-url http://127.0.0.1:8000

(or $SPECGAUGE_SERVER_URL / $SPECGAUGE_BASELINE_URL). With a baseline (the same model,
speculation off) the two-sample test runs; when the server returns top-k logprobs the
one-sample logprob test runs too. Without a URL every test skips and says why. The
built-in prompts, L = 3 and $SPECGAUGE_SERVER_SAMPLES samples per prompt (default 500);
``--specgauge-false-fail`` is the total false-fail rate, ``--specgauge-certificate`` the CSV.
"""

from __future__ import annotations

import os

import pytest

from specgauge.stattests.plugin import server_urls

SAMPLES_ENV = "SPECGAUGE_SERVER_SAMPLES"


@pytest.fixture(scope="module")
def specgauge_server_runs(request, tmp_path_factory):
    """Probe files of the server (and of the baseline, when given), drawn once."""
    server, baseline = server_urls(request.config)
    if not server:
        pytest.skip("no server to certify: pass --specgauge-server-url URL or set $SPECGAUGE_SERVER_URL")
    pytest.importorskip("httpx2", reason="the probe needs httpx2")
    from specgauge.stattests.server.probe import BUILTIN_PROMPTS, ProbeConfig, probe, read_probe

    folder = tmp_path_factory.mktemp("specgauge-server")
    samples = int(os.environ.get(SAMPLES_ENV, "500"))
    runs = {}
    for name, url in (("server", server), ("baseline", baseline)):
        if url:
            cfg = ProbeConfig(url, max_tokens=3, samples_per_prompt=samples, top_logprobs=5)
            probe(cfg, list(BUILTIN_PROMPTS), folder / f"{name}.jsonl")
            runs[name] = read_probe(folder / f"{name}.jsonl")
    return runs


def _report(request, cert) -> None:
    """Print the verdict; write the certificate to --specgauge-certificate, suffixed by the mode."""
    path = request.config.getoption("specgauge_certificate")
    if path:
        stem, dot, ext = path.rpartition(".")
        cert.certificate.to_csv(f"{stem}_{cert.mode}.{ext}" if dot else f"{path}_{cert.mode}",
                                {"command": "pytest stattests -k server", "mode": cert.mode, "notes": list(cert.notes)})
    print(cert.verdict())


def test_server_matches_baseline(specgauge_server_runs, request):
    from specgauge.stattests.server.compare import two_sample

    if "baseline" not in specgauge_server_runs:
        pytest.skip("no baseline: pass --specgauge-baseline-url URL (speculation off) or set $SPECGAUGE_BASELINE_URL")
    cert = two_sample(specgauge_server_runs["baseline"], specgauge_server_runs["server"],
                      false_fail_rate=request.config.getoption("specgauge_false_fail"))
    _report(request, cert)
    assert cert.passed, cert.verdict()


def test_server_matches_its_logprobs(specgauge_server_runs, request):
    from specgauge.stattests.server.compare import one_sample_logprobs

    run = specgauge_server_runs["server"]
    if not run.header["capabilities"]["logprobs"]:
        pytest.skip("the server returns no logprobs: the one-sample logprob test cannot run")
    cert = one_sample_logprobs(run, false_fail_rate=request.config.getoption("specgauge_false_fail"))
    _report(request, cert)
    assert cert.passed, cert.verdict()
