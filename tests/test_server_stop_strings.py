"""Stop strings: an exact server under `stop` certified as a censored draw, and a server that ignores them failed.

Asked for stop strings, a server ends a sample's text where the first one starts. The draws
up to there are draws of the law; the stop is one more cell of the context's law (the
stoppers' mass, shared with the end of sequence: both end with finish_reason "stop"). Before,
a stop was a token not known: a stop at the first position refused the whole prompt, and a
server that ignored `stop` (the project's own fake did) went unnoticed. Each fake below draws
from a known law (specgauge.fixtures.fake_openai), its text cut as an OpenAI server cuts it.
"""

from __future__ import annotations

import pytest

from specgauge.errors import InputFileError
from specgauge.fixtures.fake_openai import FakeOpenAI
from specgauge.stattests.server.compare import one_sample_logprobs, one_sample_reference, two_sample

PROMPTS = ["one", "two"]
TV = 0.5
ROW = "stop-and-length-honoured"
CASES = {  # "w2" stops at any position, the first included; " w2" after the first
    "ids, at the first position": (dict(), ("w2",)),
    "pieces, after the first": (dict(naming="pieces"), (" w2",)),
    "pieces and an end of sequence": (dict(naming="pieces", eos=0.2), ("w2",)),
}


def certificates(kw, stop, seed=1, samples=1000):
    """The run and its one-sample certificates: the logprobs mode where token names join into the text
    (ids name no text: a stop is a token not known there, and a stop at the first position refuses the run)."""
    run = FakeOpenAI(seed=seed, **kw).run(PROMPTS[:1], samples, stop=stop)
    reference = FakeOpenAI(naming=kw.get("naming", "ids"), eos=kw.get("eos", 0.0)).reference()
    certs = [one_sample_reference(run, reference, target_tv=TV)]
    try:
        certs.append(one_sample_logprobs(run, target_tv=TV))
    except InputFileError as exc:
        assert kw.get("naming", "ids") == "ids" and "token names do not join into the sample texts" in str(exc), exc
    return run, certs


@pytest.mark.parametrize("case", CASES)
def test_an_exact_server_under_a_stop_string_passes_both_one_sample_modes(case):
    kw, stop = CASES[case]
    run, certs = certificates(kw, stop)
    assert sum(r.get("finish") == "stop" for r in run.records) > 150, "the stop must show in the run"
    for cert in certs:
        assert cert.passed, (case, cert.mode, cert.verdict())
        rows = cert.frame[cert.frame["check"] == "identity-at-context"]
        tested = set(rows["position"])
        if cert.mode == "reference" or kw.get("naming") == "pieces":  # the stop is placed: no prompt lost
            assert "prompt0/pos0/#0" in tested, cert.frame.to_string()
            assert any(p.split("/")[1] != "pos0" for p in tested), "contexts after a stop's position are tested"
        assert cert.frame.loc[cert.frame["check"] == ROW, "verdict"].tolist() == ["pass"]


def test_a_biased_server_under_a_stop_string_fails_both_modes():
    """The power check: sampling at half the temperature, its stops placed like an exact server's."""
    _, certs = certificates(dict(naming="pieces", sample_temperature_factor=0.5), ("w2",))
    for cert in certs:
        failed = set(cert.frame.loc[cert.frame["verdict"] == "fail", "check"])
        assert "identity-at-context" in failed and ROW not in failed, cert.verdict()


@pytest.mark.parametrize("naming", ["ids", "pieces"])
def test_a_server_that_ignores_stop_fails_the_named_row_in_every_mode(naming):
    kw = dict(naming=naming, ignore_stop=True)
    run, certs = certificates(kw, (" w2",), samples=300)
    other = FakeOpenAI(seed=2, naming=naming).run(PROMPTS[:1], 300, stop=(" w2",))
    for cert in [*certs, two_sample(other, run, target_tv=TV)]:
        row = cert.frame[(cert.frame["check"] == ROW) & (cert.frame["verdict"] == "fail")]
        assert len(row) == 1 and "go on after a stop string" in row.iloc[0]["message"], cert.frame.to_string()
        assert ROW in cert.verdict().split("\n")[0]


def test_a_sample_past_max_tokens_fails_the_named_row():
    run = FakeOpenAI(seed=3).run(PROMPTS, 200)
    record = run.records[5]
    record["token_ids"] = record["token_ids"] + [1]
    record["tokens"] = record["tokens"] + ["token_id:1"]
    cert = one_sample_logprobs(run, target_tv=TV)
    row = cert.frame[cert.frame["check"] == ROW].iloc[0]
    assert row["verdict"] == "fail" and "1 list more than 3 tokens" in row["message"], row.to_dict()


def test_a_stop_string_that_can_span_draws_is_left_untested_not_failed():
    """"3 w" can start in one token and end in the next: no position's law alone says where the text is
    cut, so those contexts are untested (here every one: the run is refused), never failed."""
    run = FakeOpenAI(seed=4, naming="pieces").run(PROMPTS[:1], 500, stop=("3 w",))
    for mode in (lambda: one_sample_logprobs(run, target_tv=TV),
                 lambda: one_sample_reference(run, FakeOpenAI(naming="pieces").reference(), target_tv=TV)):
        try:
            cert = mode()
        except InputFileError as exc:
            assert "no context could be tested" in str(exc)
        else:
            assert cert.passed, cert.verdict()


@pytest.mark.parametrize("ignore", [False, True])
def test_the_probe_says_when_the_server_ignored_stop(tmp_path, capsys, ignore):
    """The fake ignored `--stop " w2"` and neither command said so: the probe's last line now does."""
    pytest.importorskip("httpx2")
    pytest.importorskip("uvicorn")
    from specgauge.fixtures.serve import serve_app
    from specgauge.reports import cli

    with serve_app(FakeOpenAI(seed=6, ignore_stop=ignore)) as url:
        status = cli.main(["probe", url, "--out", str(tmp_path / "run.jsonl"), "--samples", "64", "--stop", " w2",
                           "--no-progress"])
    out = capsys.readouterr().out
    assert status == 0 and out.startswith("probe: ")
    assert ("go on after a stop string" in out) == ignore and ("stop-and-length-honoured" in out) == ignore, out


def test_the_stop_cell_reads_the_text_after_the_prompt_as_a_server_does():
    """A tokenizer drops a first token's leading space when it decodes it alone; a server's text after
    the prompt keeps it, so " w2" stops at the first position there: the stoppers are read after the
    prompt's ids, cut off again."""
    import numpy as np

    from specgauge.stattests.server.stops import apply_stops

    def decode_many(many):
        return [" ".join(f"w{i}" for i in ids) for ids in many]
    tokens = np.array([[0, 1], [2, -1]])
    index = np.zeros((2, 2), np.int64)
    table = np.array([[0.5, 0.3, 0.2, 0.0]])  # the last id: the stop's cell
    _, where, laws = apply_stops(tokens, index, table, decode_many, (" w2",), 3, lead=lambda row: [1])
    assert laws[where[0, 0]].tolist() == pytest.approx([0.5, 0.3, 0.0, 0.2])
    _, where, laws = apply_stops(tokens, index, table, decode_many, (" w2",), 3)  # decoded alone: no stop there
    assert laws[where[0, 0]].tolist() == pytest.approx([0.5, 0.3, 0.2, 0.0])


@pytest.mark.parametrize("biased", [False, True])
def test_a_sized_probe_under_stop_keeps_betting_through_the_stops(tmp_path, capsys, biased):
    """The early test bets on the stop as a cell (names that join into the text): an exact server under
    a stop at the first position is watched to the end, never stopped; one sampling colder is stopped.
    Before, its first stop froze each prompt's bets, without a word."""
    pytest.importorskip("httpx2")
    pytest.importorskip("uvicorn")
    import json

    from specgauge.fixtures.serve import serve_app
    from specgauge.reports import cli

    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    app = FakeOpenAI(seed=7, naming="pieces", **(dict(sample_temperature_factor=0.5) if biased else {}))
    with serve_app(app) as url:
        status = cli.main(["probe", url, "--out", str(tmp_path / "run.jsonl"), "--prompts",
                           str(tmp_path / "prompts.jsonl"), "-L", "2", "--top-logprobs", "9", "--stop", "w2",
                           "--guarantee", "0.4", "--context-mass", "0.3", "--no-progress"])
    captured = capsys.readouterr()
    if biased:
        assert status == 1 and "FAIL (probe --guarantee 0.4" in captured.out, captured.err + captured.out
    else:
        assert status == 0 and "stayed below" in captured.err and "stopped watching" not in captured.err, captured.err
