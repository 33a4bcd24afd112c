"""Replaying measured acceptance from JSONL traces (SpecDecode-Bench's layout and per-step counts)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from specgauge.reports.cli import plan
from specgauge.simulator import ConfigError, SimulationConfig, simulate
from specgauge.simulator.replay import ReplayAcceptance

ACC = [1, 7, 1, 2, 4, 3, 2, 1, 5, 4, 3, 2, 1, 1]


def write(path, records):
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


def test_specdecode_bench_layout_walks_positions(tmp_path):
    path = write(tmp_path / "t.jsonl", [{"id": "1", "prompt_token_ids": [1, 2], "generated_token_ids": [0] * len(ACC),
                                         "acc_eagle": {"acc_len": ACC}, "acc_ngram": {"acc_len": [1] * len(ACC)}}])
    model = ReplayAcceptance.from_jsonl(path, "eagle")
    got = model.sampler(np.random.default_rng(0), 1).draw(np.array([0]), 6, 3)[:, 0]
    # position 0: 1 -> 0 accepted; 1: 7 -> 3 (γ); 5: 3 -> 2; 8: 5 -> 3; 12: 1 -> 0; 13: 1 -> 0
    assert list(got) == [0, 3, 2, 3, 0, 0]
    assert model.expected_tokens_per_pass(3) == pytest.approx(np.mean([1, 4, 3, 4, 1, 1]))
    assert ReplayAcceptance.from_jsonl(path, "ngram").expected_tokens_per_pass(3) == 1.0


def test_draws_continue_where_the_used_rounds_ended(tmp_path):
    path = write(tmp_path / "t.jsonl", [{"acc_eagle": {"acc_len": ACC}}])
    sampler = ReplayAcceptance.from_jsonl(path).sampler(np.random.default_rng(0), 1)
    first = sampler.draw(np.array([0]), 6, 3)
    sampler.advance(np.array([0]), first[:2])                 # the engine used two of six rounds
    assert list(sampler.draw(np.array([0]), 2, 3)[:, 0]) == [2, 3]


def test_per_step_counts_and_the_engine(tmp_path):
    path = write(tmp_path / "v.jsonl", [{"accepted": [3, 0, 2]}, {"num_accepted_tokens_per_step": [1, 1]}])
    model = ReplayAcceptance.from_jsonl(path)
    assert not model.positional and model.expected_tokens_per_pass(3) == pytest.approx((4 + 1 + 3 + 2 + 2) / 5)
    row = simulate(SimulationConfig(gpu="h100", target="llama-3.1-8b", draft="eagle", gamma=3, acceptance=model,
                                    batch_size=2, requests=2, output_len=600, prompt_len=16))
    # request 0 cycles 3, 0, 2 (mean 2.67 tokens a pass), request 1 cycles 1 (2 tokens a pass)
    assert 2.0 < row["spec_decode_acceptance_length"] < 8 / 3 and row["acceptance"].startswith("replay(")


def test_plan_takes_a_trace(tmp_path):
    trace = write(tmp_path / "t.jsonl", [{"acc_ngram": {"acc_len": ACC}}, {"acc_ngram": {"acc_len": [2, 1, 6, 5]}}])
    csv = tmp_path / "p.csv"
    assert plan.main(["--gpu", "h100", "--target", "llama-3.1-8b", "--draft", "ngram", "--gamma", "3",
                      "--batch-size", "1,8", "--requests", "16", "--output-len", "64", "--no-progress",
                      "--acceptance", f"{trace}:ngram", "--csv", str(csv)]) == 0
    frame = pd.read_csv(csv)
    assert (frame["acceptance"] == "replay(t.jsonl:ngram, 2 requests)").all()   # empties come from the trace


@pytest.mark.parametrize("records,message", [
    ([{"acc_eagle": {"acc_len": []}}], "non-empty list"),
    ([{"other": 1}], "no acceptance found"),
    ([{"accepted": [1]}, {"acc_eagle": {"acc_len": [2]}}], "mixes"),
])
def test_bad_traces_are_refused(tmp_path, records, message):
    with pytest.raises(ConfigError, match=message):
        ReplayAcceptance.from_jsonl(write(tmp_path / "bad.jsonl", records))
