"""`specgauge probe` and `compare` against an in-process OpenAI-compatible fake with a known law.

The fake (specgauge.fixtures.fake_openai) honours `n` and returns top-k logprobs, which
`transformers serve` does not: the logprob mode is tested here, on an exact server and on
one that samples colder than the logprobs it reports.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

httpx2 = pytest.importorskip("httpx2")

from specgauge.errors import ConfigError  # noqa: E402
from specgauge.fixtures.fake_openai import FakeOpenAI  # noqa: E402
from specgauge.fixtures.serve import free_port  # noqa: E402
from specgauge.reports import cli  # noqa: E402
from specgauge.stattests.server.compare import (one_sample_logprobs, one_sample_reference, two_sample,  # noqa: E402
                                                unit_kind)
from specgauge.stattests.server.probe import (ClientConfig, ProbeConfig, ServerError,  # noqa: E402
                                              TemperatureIgnoredError, probe, read_probe)

URL = "http://fake"
PROMPTS = ["one", "two", "three", "four"]
FAST = ClientConfig(concurrency=4, backoff_s=0.001)


def _probe(path, app, *, samples=50, temperature=1.0, top_logprobs=0, chat=False, **kw):
    cfg = ProbeConfig(URL, temperature=temperature, max_tokens=3, samples_per_prompt=samples,
                      top_logprobs=top_logprobs, endpoint="chat" if chat else "completions")
    return probe(cfg, PROMPTS, path, client_config=kw.pop("client_config", FAST),
                 transport=httpx2.ASGITransport(app=app), **kw)


def test_probe_records_header_ids_and_every_sample_once(tmp_path):
    out = tmp_path / "run.jsonl"
    summary = _probe(out, FakeOpenAI(), top_logprobs=3)
    run = read_probe(out)
    assert summary.capabilities == {"n": True, "logprobs": True, "token_ids": True}
    assert run.header["params"]["temperature"] == 1.0 and run.header["models"]["data"][0]["id"] == "fake-markov"
    assert run.header["specgauge_version"] and run.header["prompts"] == PROMPTS
    keys = sorted((r["p"], r["s"]) for r in run.records)
    assert keys == [(p, s) for p in range(len(PROMPTS)) for s in range(50)]
    assert unit_kind(run) == "ids" and all(len(r["token_ids"]) == 3 for r in run.records)


def test_probe_falls_back_to_one_sample_a_request(tmp_path):
    app = FakeOpenAI(honour_n=False)
    _probe(tmp_path / "run.jsonl", app, samples=10)
    assert app.requests == 1 + 10 * len(PROMPTS)  # /v1/models, then one request per sample


def test_interrupted_probe_resumes_without_duplicates(tmp_path):
    out = tmp_path / "run.jsonl"
    first = _probe(out, FakeOpenAI(seed=1), max_samples=70)
    assert first.total < 50 * len(PROMPTS)
    with open(out, "ab") as fh:
        fh.write(b'{"p": 0, "s": 3, "text": "w1')  # torn by a kill
    second = _probe(out, FakeOpenAI(seed=2))
    keys = [(r["p"], r["s"]) for r in read_probe(out).records]
    assert len(keys) == len(set(keys)) == 50 * len(PROMPTS)
    assert second.drawn == 50 * len(PROMPTS) - first.total


def test_resume_with_other_parameters_is_refused(tmp_path):
    out = tmp_path / "run.jsonl"
    _probe(out, FakeOpenAI(), max_samples=10)
    with pytest.raises(ConfigError, match="temperature 1.0 vs 0.9"):
        _probe(out, FakeOpenAI(), temperature=0.9)


def test_retries_429_and_5xx(tmp_path):
    for status in (429, 503):
        app = FakeOpenAI(fail_every=3, fail_status=status)
        _probe(tmp_path / f"{status}.jsonl", app, samples=20)
        assert len(read_probe(tmp_path / f"{status}.jsonl").records) == 20 * len(PROMPTS)


def test_gives_up_after_the_retries(tmp_path):
    with pytest.raises(ServerError, match="HTTP 500 after 2 retries"):
        _probe(tmp_path / "run.jsonl", FakeOpenAI(fail_every=1, fail_status=500),
               client_config=ClientConfig(retries=2, backoff_s=0.001))


def test_temperature_ignored_is_one_clear_error_and_stops_early(tmp_path):
    app = FakeOpenAI(ignore_temperature=True, honour_n=False)
    with pytest.raises(TemperatureIgnoredError, match="ignored the temperature"):
        _probe(tmp_path / "run.jsonl", app, samples=200)
    assert app.requests < 50  # about five rounds over the 4 prompts, not the 800 samples asked for


def test_non_openai_reply_is_one_clear_error(tmp_path):
    with pytest.raises(ServerError, match="did not answer like an OpenAI-compatible server"):
        _probe(tmp_path / "run.jsonl", FakeOpenAI(html=True))


def test_cli_unreachable_url_prints_one_line(tmp_path, capsys):
    url = f"http://127.0.0.1:{free_port()}"
    status = cli.main(["probe", url, "--out", str(tmp_path / "run.jsonl"), "--retries", "0", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert status == 1 and len(err.splitlines()) == 1
    assert err.startswith("specgauge probe: error: cannot reach http://127.0.0.1:")


@pytest.mark.parametrize("out", ["missing/run.jsonl", "/dev/full", "."])
def test_cli_unwritable_out_is_a_usage_error_before_the_server_is_asked(tmp_path, capsys, out):
    """No server listens at the URL: the refusal must come from --out, checked first."""
    url = f"http://127.0.0.1:{free_port()}"
    status = cli.main(["probe", url, "--out", str(tmp_path / out) if out != "/dev/full" else out, "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1
    assert err.startswith("specgauge probe: error: cannot write "), err


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_logprob_mode_passes_an_exact_server(tmp_path, chat):
    _probe(tmp_path / "run.jsonl", FakeOpenAI(seed=3), samples=600, top_logprobs=4, chat=chat)
    cert = one_sample_logprobs(read_probe(tmp_path / "run.jsonl"), target_tv=0.3)
    assert cert.passed, cert.verdict()
    pos0 = cert.frame[cert.frame["check"] == "position-given-prefix"].set_index("position").loc["pos0"]
    assert pos0["min_detectable_tv"] < 0.12 and pos0["detectable"].startswith("sample-weighted RMS")


def test_logprob_mode_fails_a_server_sampling_colder_than_it_reports(tmp_path):
    run = FakeOpenAI(seed=3, sample_temperature_factor=0.9).run(PROMPTS, 1000, top=4)  # no HTTP: the law is the point
    cert = one_sample_logprobs(run, target_tv=0.3)
    assert not cert.passed, cert.verdict()
    assert cert.verdict().startswith("FAIL (logprobs")


def test_two_sample_passes_same_law_and_fails_a_server_sampling_at_0_9(tmp_path):
    runs = {name: app.run(PROMPTS, 3000, top=0) for name, app in  # no HTTP: the law is the point
            (("a", FakeOpenAI(seed=4)), ("b", FakeOpenAI(seed=5)),
             ("cold", FakeOpenAI(seed=6, sample_temperature_factor=0.9)))}
    same = two_sample(runs["a"], runs["b"])
    assert same.passed, same.verdict()
    cold = two_sample(runs["a"], runs["cold"])
    assert not cold.passed, cold.verdict()


def _fake_reference(app: FakeOpenAI, temperature: float):
    """The fake's exact law of each sampled position: what a reference model gives."""
    def law(run):
        prompt = np.array([r["p"] for r in run.records])
        tokens = np.array([r["token_ids"] for r in run.records])
        starts = np.full((tokens.shape[0], 1), app.vocab)
        prev = np.concatenate([starts, tokens[:, :-1]], axis=1)
        tables = np.stack([app.law(app.logits(p), temperature) for p in run.header["prompts"]])
        return prompt, tokens, tables[prompt[:, None], prev]
    return law


def test_reference_mode_on_the_fake(tmp_path):
    run = FakeOpenAI(seed=7).run(PROMPTS[:2], 1000, top=1)  # token ids; no HTTP
    assert one_sample_reference(run, _fake_reference(FakeOpenAI(), 1.0), target_tv=0.3).passed
    assert not one_sample_reference(run, _fake_reference(FakeOpenAI(), 0.9), target_tv=0.3).passed


def test_compare_cli_writes_certificate(tmp_path, capsys):
    for name in ("off", "on"):
        _probe(tmp_path / f"{name}.jsonl", FakeOpenAI(seed=len(name)), samples=200)
    csv = tmp_path / "cert.csv"
    status = cli.main(["compare", str(tmp_path / "on.jsonl"), "--baseline", str(tmp_path / "off.jsonl"),
                       "--csv", str(csv)])
    out = capsys.readouterr().out
    assert status == 0 and "PASS (two-sample" in out
    meta = json.loads(csv.with_name("cert.meta.json").read_text())
    assert meta["mode"] == "two-sample" and meta["command"] == "compare"
    assert csv.read_text().startswith("decoder,check,family,fixture,position")


def test_rate_limit_spaces_the_requests(tmp_path):
    app = FakeOpenAI(honour_n=False)
    summary = _probe(tmp_path / "run.jsonl", app, samples=5, client_config=ClientConfig(concurrency=4, max_rps=100))
    assert app.requests == 21
    assert summary.seconds >= 20 / 100  # 21 requests started at most 100 a second: 20 gaps of 10 ms


def test_a_server_reporting_the_colder_law_it_samples_fails_with_the_cross_check(tmp_path, capsys):
    """It samples at 0.6 x the temperature and reports that law: the logprobs rows pass (they hold against
    the reported law, and say so); cross-checked against the reference, or a run with speculation off, it fails."""
    from specgauge.stattests.server.compare import cross_checked

    cold = FakeOpenAI(seed=8, sample_temperature_factor=0.6, report_sampled=True).run(PROMPTS[:1], 500)
    own = one_sample_logprobs(cold, target_tv=0.5)
    assert own.passed and "from the law the server reports" in own.verdict().splitlines()[-1]
    against_reference = cross_checked(cold, law=FakeOpenAI().reference(), target_tv=0.5)
    assert not against_reference.passed
    assert "off the reference model's law" in against_reference.verdict(), against_reference.verdict()
    off = FakeOpenAI(seed=9).run(PROMPTS[:1], 500)
    against_baseline = cross_checked(cold, baseline=off, target_tv=0.5)
    assert not against_baseline.passed and "cross-check-baseline:" in " ".join(against_baseline.frame["check"])
    assert cross_checked(FakeOpenAI(seed=10).run(PROMPTS[:1], 500), baseline=off, target_tv=0.5).passed
    path, base = tmp_path / "cold.jsonl", tmp_path / "off.jsonl"
    for run, out in ((cold, path), (off, base)):
        out.write_text("".join(json.dumps(line) + "\n" for line in [run.header, *run.records]))
    status = cli.main(["compare", str(path), "--mode", "logprobs", "--baseline", str(base), "--tv", "0.5",
                       "--csv", str(tmp_path / "c.csv")])
    assert status == 1 and "FAIL (logprobs" in capsys.readouterr().out
