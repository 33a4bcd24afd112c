"""Bad inputs to `specgauge probe` and `compare`, as a user meets them: one line or an honest verdict.

Each case once gave a traceback, a hang, or a PASS on data that cannot support one.
"""

from __future__ import annotations

import json
import sys

import pytest

httpx2 = pytest.importorskip("httpx2")

from specgauge.fixtures.fake_openai import FakeOpenAI  # noqa: E402
from specgauge.reports import cli  # noqa: E402
from specgauge.stattests.server.compare import one_sample_logprobs, two_sample  # noqa: E402
from specgauge.stattests.server.probe import ClientConfig, ProbeConfig, probe, read_probe  # noqa: E402

PROMPTS = ["one", "two", "three", "four"]


def _probe(path, app, *, samples=60, temperature=1.0, top_logprobs=4, n=16):
    cfg = ProbeConfig("http://fake", temperature=temperature, max_tokens=3, samples_per_prompt=samples,
                      top_logprobs=top_logprobs, n=n)
    probe(cfg, PROMPTS, path, client_config=ClientConfig(concurrency=4), transport=httpx2.ASGITransport(app=app))
    return path


def _one_line_error(capsys, argv) -> str:
    status = cli.main(argv)
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert status != 0 and len(err.splitlines()) == 1, (status, captured.err, captured.out)
    assert "Traceback" not in err
    return err


def test_top_logprobs_as_a_list_of_pairs_is_read(tmp_path):
    run = read_probe(_probe(tmp_path / "pairs.jsonl", FakeOpenAI(pairs=True, seed=1), samples=200))
    assert all(isinstance(pair, list) and len(pair) == 2 for r in run.records for row in r["top"] for pair in row)
    cert = one_sample_logprobs(run)
    assert cert.passed, cert.verdict()


def test_top_logprobs_in_an_unknown_shape_is_one_line():
    from specgauge.stattests.server.probe import ServerError, _top_pairs

    with pytest.raises(ServerError, match="top_logprobs in an unknown shape"):
        _top_pairs([["a", 0.1, "extra"]])


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0.5])
def test_a_top_logprob_that_is_no_log_probability_is_refused(value):
    from specgauge.stattests.server.probe import ServerError, _top_pairs

    with pytest.raises(ServerError, match="not a log-probability"):
        _top_pairs({"a": -0.1, "b": value})
    assert _top_pairs({"a": 0.0, "b": float("-inf")}) == [["a", 0.0], ["b", float("-inf")]]


@pytest.mark.parametrize("value", ["NaN", "Infinity", "0.5"])
def test_a_probe_file_with_a_top_logprob_that_is_no_log_probability_is_one_line(tmp_path, capsys, value):
    path = _probe(tmp_path / "run.jsonl", FakeOpenAI(seed=1), samples=20)
    lines = path.read_text().splitlines()
    sample = json.loads(lines[1])
    sample["top"][0][0][1] = "@"
    lines[1] = json.dumps(sample).replace('"@"', value)
    path.write_text("\n".join(lines) + "\n")
    err = _one_line_error(capsys, ["compare", str(path), "--mode", "logprobs", "--csv", str(tmp_path / "c.csv")])
    assert "a sample line is malformed" in err
    assert not (tmp_path / "c.csv").exists()


def test_temperature_mismatch_is_refused_naming_the_field(tmp_path, capsys):
    a = _probe(tmp_path / "a.jsonl", FakeOpenAI(), temperature=0.9)
    b = _probe(tmp_path / "b.jsonl", FakeOpenAI(), temperature=1.0)
    err = _one_line_error(capsys, ["compare", str(b), "--baseline", str(a), "--csv", str(tmp_path / "c.csv")])
    assert "differ in temperature (baseline 0.9, candidate 1.0)" in err


@pytest.mark.parametrize("field, value", [("top_p", 0.9), ("top_k", 5), ("min_p", 0.05), ("max_tokens", 4),
                                          ("stop", ["w1"]), ("top_logprobs", 2), ("model", "other")])
def test_every_law_field_is_compared(tmp_path, field, value):
    from specgauge.errors import ConfigError

    base = read_probe(_probe(tmp_path / "a.jsonl", FakeOpenAI(), samples=16))
    header = json.loads(json.dumps(base.header))
    if field == "model":
        header["model"] = value
    else:
        header["params"][field] = value
    other = type(base)(header, base.records, None)
    with pytest.raises(ConfigError, match=f"differ in {field}"):
        two_sample(base, other)


def test_header_only_file_is_refused(tmp_path, capsys):
    full = _probe(tmp_path / "full.jsonl", FakeOpenAI(), samples=16)
    empty = tmp_path / "empty.jsonl"
    empty.write_text(full.read_text().splitlines()[0] + "\n")
    for argv in (["compare", str(empty)], ["compare", str(empty), "--baseline", str(full)]):
        err = _one_line_error(capsys, argv + ["--csv", str(tmp_path / "c.csv")])
        assert "holds no samples" in err


def test_reference_folder_without_a_model_is_one_line(tmp_path, capsys):
    pytest.importorskip("torch")
    run = _probe(tmp_path / "run.jsonl", FakeOpenAI(), samples=16)
    (tmp_path / "nomodel").mkdir()
    err = _one_line_error(capsys, ["compare", str(run), "--reference", str(tmp_path / "nomodel"),
                                   "--csv", str(tmp_path / "c.csv")])
    assert "no model in" in err


def test_reference_without_torch_names_the_extra(tmp_path, capsys, monkeypatch):
    run = _probe(tmp_path / "run.jsonl", FakeOpenAI(), samples=16)
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    err = _one_line_error(capsys, ["compare", str(run), "--reference", str(tmp_path), "--csv", str(tmp_path / "c.csv")])
    assert "pip install 'specgauge[hf]'" in err


def test_samples_cut_to_two_tokens_give_an_honest_verdict(tmp_path, capsys):
    run = _probe(tmp_path / "cut.jsonl", FakeOpenAI(cut_to=2), samples=200)
    status = cli.main(["compare", str(run), "--csv", str(tmp_path / "c.csv")])
    out = capsys.readouterr().out
    assert "800 of 800 samples have fewer than 3 tokens" in out and "800 with finish_reason 'length'" in out
    assert "untested (no sample reached them, or none whose token and law are known): " \
           "position-given-prefix[pos2]" in out
    assert status == 0  # what was tested passed; the note and the untested position say what was not


def test_identical_choices_fail_within_request_independence(tmp_path):
    run = read_probe(_probe(tmp_path / "dup.jsonl", FakeOpenAI(duplicate_choices=True), samples=320))
    cert = one_sample_logprobs(run)
    assert not cert.passed, cert.verdict()
    assert "choices-within-request-independent" in cert.verdict()
    exact = one_sample_logprobs(read_probe(_probe(tmp_path / "ok.jsonl", FakeOpenAI(seed=2), samples=320)))
    assert exact.passed, exact.verdict()


def test_same_file_twice_is_warned(tmp_path, capsys):
    run = _probe(tmp_path / "run.jsonl", FakeOpenAI(), samples=40)
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(run.read_bytes())
    cli.main(["compare", str(run), "--baseline", str(run), "--csv", str(tmp_path / "c.csv")])
    assert "note: baseline and candidate are the same file" in capsys.readouterr().out
    cli.main(["compare", str(copy), "--baseline", str(run), "--csv", str(tmp_path / "c.csv")])
    assert "note: baseline and candidate hold the same samples" in capsys.readouterr().out


def test_a_fail_line_quotes_the_failing_checks_pvalue(tmp_path):
    cert = one_sample_logprobs(read_probe(_probe(tmp_path / "dup.jsonl", FakeOpenAI(duplicate_choices=True),
                                                 samples=320)))
    failed = cert.frame[cert.frame["verdict"] == "fail"].iloc[0]
    assert f"{failed['check']}" in cert.verdict() and f"p-value {failed['pvalue']:.3g})" in cert.verdict()


@pytest.mark.parametrize("flag, value, says", [
    ("--concurrency", "0", "an integer >= 1"), ("--concurrency", "-1", "an integer >= 1"),
    ("--top-p", "2", "a probability in (0, 1]"), ("--timeout", "-1", "a positive number of seconds"),
    ("--samples", "0", "an integer >= 1"), ("--temperature", "nan", "a number >= 0"),
])
def test_probe_options_are_checked_in_one_line(tmp_path, capsys, flag, value, says):
    err = _one_line_error(capsys, ["probe", "http://127.0.0.1:9", "--out", str(tmp_path / "x.jsonl"), flag, value])
    assert flag in err and says in err


def test_probe_timeout_zero_says_why(tmp_path, capsys):
    err = _one_line_error(capsys, ["probe", "http://127.0.0.1:9", "--out", str(tmp_path / "x.jsonl"),
                                   "--timeout", "0"])
    assert "--timeout" in err and "a request cannot finish in no time" in err


def test_probe_into_a_missing_folder_is_one_line(tmp_path, capsys):
    err = _one_line_error(capsys, ["probe", "http://127.0.0.1:9", "--out", "/nonexistent/x.jsonl", "--retries", "0"])
    assert "folder '/nonexistent' does not exist" in err


@pytest.mark.parametrize("value", ["nan", "-1", "0", "2"])
def test_compare_false_fail_is_a_rate(tmp_path, capsys, value):
    err = _one_line_error(capsys, ["compare", str(tmp_path / "x.jsonl"), f"--false-fail={value}"])
    assert "--false-fail" in err and "a rate in (0, 1)" in err


def test_the_library_refuses_what_the_cli_refuses():
    """Called from Python, a concurrency of 0 would wait on a semaphore forever: refused at the door."""
    from specgauge.errors import ConfigError

    for bad in ({"concurrency": 0}, {"concurrency": -1}, {"timeout_s": 0.0}, {"max_rps": float("nan")}):
        with pytest.raises(ConfigError):
            ClientConfig(**bad)
    for bad in ({"top_p": 2.0}, {"top_p": 0.0}, {"min_p": -0.1}, {"temperature": float("nan")}, {"top_k": -1}):
        with pytest.raises(ConfigError):
            ProbeConfig("http://x", **bad)


def test_requests_of_an_older_file_are_inferred_from_consecutive_lines(tmp_path):
    from specgauge.stattests.server.compare import request_ids

    run = read_probe(_probe(tmp_path / "run.jsonl", FakeOpenAI(), samples=40, n=8))
    with_r = request_ids(run)
    old = type(run)(run.header, [{k: v for k, v in r.items() if k != "r"} for r in run.records], None)
    inferred = request_ids(old)
    assert len(set(zip(with_r, inferred))) == len(set(with_r)) == len(set(inferred))  # the same partition


def test_a_pass_is_not_over_read(tmp_path, capsys):
    """A row that detects nothing (a bound of 1) is untested, not passed; measured TV shows beside a FAIL only;
    the verdict ends with one plain line; a run of token ids says so."""
    run = _probe(tmp_path / "run.jsonl", FakeOpenAI(seed=2), samples=60)
    status = cli.main(["compare", str(run), "--csv", str(tmp_path / "c.csv")])
    out = capsys.readouterr().out
    table = [line.split() for line in out.splitlines() if line.lstrip().startswith(("first-tokens-law",
                                                                                      "position-given-prefix"))]
    assert status == 0 and table
    assert all(row[2] == "untested" for row in table if row[0] == "first-tokens-law"), out
    assert all(row[-1] == "NaN" for row in table), out  # no measured TV on a row that did not fail
    assert "worst-case TV <= 1 " not in out and "no worst-case bound" in out
    last = out.strip().splitlines()[-2]  # then the certificate's path
    assert last.startswith("with these samples") and "from the law the server reports" in last, out
    cert = one_sample_logprobs(read_probe(run))
    assert cert.unit == "ids"


def test_the_plain_line_names_the_figure_that_could_go_unnoticed(tmp_path):
    a = read_probe(_probe(tmp_path / "a.jsonl", FakeOpenAI(seed=3), samples=200))
    b = read_probe(_probe(tmp_path / "b.jsonl", FakeOpenAI(seed=4), samples=200))
    lines = two_sample(a, b).verdict().splitlines()
    assert lines[-1].startswith("with these samples, a binned difference (not a worst case) smaller than ")
    assert "between speculation on and off could go unnoticed; at least " in lines[-1]
    assert lines[-1].endswith("would have been caught with probability 0.999")


def test_every_logprobs_row_names_the_reported_law(tmp_path):
    cert = one_sample_logprobs(read_probe(_probe(tmp_path / "a.jsonl", FakeOpenAI(seed=3), samples=100)))
    dependence = ["choices-within-request-independent", "choices-within-request-dispersion", "requests-independent",
                  "stop-and-length-honoured"]  # about the draws or the request, not the law
    rows = cert.frame[~cert.frame["check"].isin(dependence)]
    assert rows["detectable"].str.endswith("[against the law the server reports]").all()
    assert "against the law the server reports" in " ".join(cert.notes)


def test_the_fake_server_without_uvicorn_names_the_extra(monkeypatch, capsys):
    from specgauge.fixtures import fake_openai

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # not installed
    with pytest.raises(SystemExit) as stop:
        fake_openai.main(["8765"])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1 and "pip install 'specgauge[serve]'" in err


def test_probe_help_says_the_inexact_run_is_stopped(capsys):
    try:
        cli.main(["probe", "--help"])
    except SystemExit:
        pass
    text = " ".join(capsys.readouterr().out.split())
    assert "a run that looks inexact is stopped early" in text
