"""Exact servers that stop early or withhold a token pass every mode; the early test never stops them.

A sample that stopped at the end of sequence (finish_reason "stop") with k < L tokens drew
the end at position k: in production that is most samples' fate. Each fake here is exact
(specgauge.fixtures.fake_openai): an end token of mass 0.3 in every context, listed as the
last token (vLLM) or left out; tokens named ``token_id:N`` or as text; a trailing token
withheld (llama.cpp's partial character). Each passes the logprobs, reference and two-sample
modes; placing the ends in the wrong cell fails, so the passes are not vacuous.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

httpx2 = pytest.importorskip("httpx2")

from specgauge.fixtures.fake_openai import FakeOpenAI  # noqa: E402
from specgauge.stattests.server.compare import one_sample_logprobs, one_sample_reference, two_sample  # noqa: E402
from specgauge.stattests.server.probe import ClientConfig, ProbeConfig, probe, read_probe  # noqa: E402
from specgauge.stattests.server.sequential import EProcess  # noqa: E402

PROMPTS = ["one", "two"]
TV = 0.5  # what 1,000 draws of a 9-token law state at the first position (0.42-0.46 here)
BEHAVIOURS = {
    "end-ids": dict(eos=0.3),
    "end-text": dict(eos=0.3, naming="text"),
    "end-listed": dict(eos=0.3, eos_listed=True),
    "withheld-ids": dict(withhold_token=0),
    "withheld-text": dict(withhold_token=0, naming="text"),
    "end-and-withheld-text": dict(eos=0.3, withhold_token=1, naming="text"),
}


def _run(path, app, samples=1000, top=9, watchers=()):
    cfg = ProbeConfig("http://fake", max_tokens=3, samples_per_prompt=samples, top_logprobs=top)
    probe(cfg, PROMPTS, path, client_config=ClientConfig(concurrency=4), transport=httpx2.ASGITransport(app=app),
          watchers=watchers)
    return read_probe(path)


@pytest.mark.parametrize("name", BEHAVIOURS)
def test_an_exact_server_that_stops_or_withholds_passes_every_mode(tmp_path, name):
    kw = BEHAVIOURS[name]
    run = FakeOpenAI(seed=1, **kw).run(PROMPTS[:1], 1000)  # the replies read by the probe's own parser, no HTTP
    other = FakeOpenAI(seed=2, **kw).run(PROMPTS[:1], 1000)
    short = sum(len(r.get("tokens", [])) < 3 for r in run.records)
    assert short > 50, "the behaviour must show in the run"
    for cert in (one_sample_logprobs(run, target_tv=TV),
                 one_sample_reference(run, FakeOpenAI(**kw).reference(), target_tv=TV),
                 two_sample(other, run, target_tv=TV)):
        assert cert.passed, (name, cert.verdict(), cert.notes)
        if cert.mode != "two-sample":
            rows = cert.frame[cert.frame["check"] == "identity-at-context"]
            assert (rows["position"] == "prompt0/pos0/#0").sum() == 1, cert.frame.to_string()


def test_ends_placed_in_the_wrong_cell_fail():
    """The power check: the ends counted as 'any other token' (where an end left out was lost before)."""
    app = FakeOpenAI(seed=1, eos=0.3)
    run = _run_in_memory(app)
    assert one_sample_logprobs(run, target_tv=TV).passed
    assert not one_sample_logprobs(run, target_tv=TV, eos_tokens=["token_id:999"]).passed


def _run_in_memory(app):
    return app.run(PROMPTS, 1000)


def test_the_end_name_is_guessed_and_said():
    cert = one_sample_logprobs(_run_in_memory(FakeOpenAI(seed=3, eos=0.3, naming="text")), target_tv=TV)
    assert any("'</s>' (guessed" in note for note in cert.notes), cert.notes


def test_the_early_test_bets_on_the_end_and_never_stops_an_exact_server_that_ends_at_once(tmp_path):
    """A sample that stopped at once drew the end at the first position: skipping it biased the bet
    (an exact server with an end of mass 0.3 was stopped); counted as the end, the bet stays fair."""
    app = FakeOpenAI(seed=4, eos=0.3)
    laws = [app.law(app.logits(p), 1.0)[app.vocab] for p in PROMPTS]

    def first(record):
        ids = record["token_ids"]
        return ids[0] if ids else app.eos_id
    fair = EProcess(laws, 1e-6, first)
    _run(tmp_path / "run.jsonl", app, samples=3000, top=1, watchers=[fair])
    assert not fair.stopped and fair.seen == 3000 * len(PROMPTS)
    skipping = EProcess(laws, 1e-6, lambda r: r["token_ids"][0] if r["token_ids"] else -1)
    skipping.add(read_probe(tmp_path / "run.jsonl").records)  # -1: an impossible cell, as skipping it is wrong
    assert skipping.e_value == float("inf")


def test_the_early_test_stops_betting_where_a_token_is_not_known():
    """A record whose first token is unknown freezes its prompt's process: later records do not move it."""
    law = np.array([0.5, 0.5])
    e = EProcess([law], 0.01, lambda r: r["t"])
    e.add([{"p": 0, "t": 0}] * 3 + [{"p": 0, "t": None}])
    frozen = e.e_value
    e.add([{"p": 0, "t": 0}] * 50)
    assert e.e_value == frozen and e.frozen[0]


def test_a_sized_probe_of_a_server_that_stops_is_not_stopped_early(tmp_path, capsys):
    """`probe --guarantee` sized on the server's own logprobs: the pilot names the end, the early test bets on it."""
    pytest.importorskip("uvicorn")
    from specgauge.fixtures.serve import serve_app
    from specgauge.reports import cli

    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    with serve_app(FakeOpenAI(seed=5, eos=0.4)) as url:
        status = cli.main(["probe", url, "--out", str(tmp_path / "run.jsonl"), "--prompts",
                           str(tmp_path / "prompts.jsonl"), "-L", "2", "--top-logprobs", "9", "--guarantee", "0.3",
                           "--no-progress"])
    err = capsys.readouterr().err
    assert status == 0 and "stayed below" in err, err
    run = read_probe(tmp_path / "run.jsonl")
    assert sum(not r["tokens"] for r in run.records) > 100  # stopped at once: the end drawn first


def test_a_withheld_token_id_leaves_only_its_contexts_untested_and_the_verdict_names_them():
    """A token named ``token_id:N`` withheld at the last position: a tokenizer decodes N to its text,
    never to "token_id:N", which made every sample unknown from its first position (the prompt hidden,
    the exact server refused). Now only the contexts it was drawn at are untested, named with their
    draws in the PASS line; a server biased exactly there passes only with those contexts named."""
    kw = dict(withhold_token=0)
    run = FakeOpenAI(seed=1, **kw).run(PROMPTS[:1], 1000)
    cert = one_sample_reference(run, FakeOpenAI(**kw).reference(), target_tv=TV)
    tested = set(cert.frame.loc[cert.frame["check"] == "identity-at-context", "position"])
    assert cert.passed and {"prompt0/pos0/#0", "prompt0/pos1/#0"} <= tested, cert.verdict()
    assert "untested where a token or its law was not known" in cert.verdict()
    assert "prompt0/pos2 after [" in cert.verdict() and "draws)" in cert.verdict()
    assert not any(u[0].startswith("prompt0/pos0") or u[0].startswith("prompt0/pos1") for u in cert.unknown)
    biased = dict(withhold_token=0, biased_position=2, sample_temperature_factor=0.3)
    hidden = one_sample_reference(FakeOpenAI(seed=2, **biased).run(PROMPTS[:1], 1000),
                                  FakeOpenAI(**biased).reference(), target_tv=TV)
    assert not hidden.passed or "prompt0/pos2 after [" in hidden.verdict().split("\n")[1], hidden.verdict()
