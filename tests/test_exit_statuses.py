"""One rule for exit statuses, walked over every subcommand's documented error cases.

2: what the user gave wrong, found before any work (and nothing written); 1: a failed
verdict or a failure while working; 70 never for input. Each case is one line on stderr.
A new subcommand must add its cases here: the table is checked against the dispatcher's.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from specgauge.reports.cli import SUBCOMMANDS, main

USER_MODULE = textwrap.dedent('''
    import numpy as np

    class ClassAttributes:
        vocab_size = 6
        order = 1

        def next_probs(self, contexts):
            return np.full((len(contexts), 6), 1 / 6)

    class SetInInit:
        def __init__(self):
            self.vocab_size, self.order = 6, 1

        def next_probs(self, contexts):
            return np.full((len(contexts), 6), 1 / 6)

    class Raises(SetInInit):
        def next_probs(self, contexts):
            raise RuntimeError("kernel failed\\nsecond line")

    class Small(SetInInit):
        def __init__(self):
            self.vocab_size, self.order = 4, 1
''')


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    """The files the cases name, in a folder of their own that is on the import path."""
    (tmp_path / "user_drafts.py").write_text(USER_MODULE)
    (tmp_path / "raises_at_import.py").write_text("raise ImportError('a missing optional package')\n")
    (tmp_path / "errors_at_import.py").write_text("1 / 0\n")
    (tmp_path / "ids.jsonl").write_text(json.dumps([1, 2, 3]) + "\n" + json.dumps([4, 6, 9]) + "\n")
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "garbled.jsonl").write_text("garbage{\n")
    (tmp_path / "steps.csv").write_text("batch_size,seconds\nx,y\n")
    (tmp_path / "good_steps.csv").write_text("batched_tokens,kv_tokens,ms\n" + "".join(
        f"{b * g},{b * c},{4 + 0.03 * b * g + 5e-5 * b * c:.4f}\n" for b in (1, 4, 16, 64) for c in (256, 2048)
        for g in (1, 4)))
    (tmp_path / "spec.json").write_text(json.dumps({
        "completed": 100, "total_input_tokens": 51200, "total_output_tokens": 12800, "max_concurrency": 8,
        "mean_tpot_ms": 9.5, "spec_decode_num_drafts": 10, "spec_decode_draft_tokens": 30}, indent=1)
        .replace('"mean_tpot_ms"', '"spec_decode_acceptance_length": 0.5,\n "mean_tpot_ms"'))
    (tmp_path / "eight_b.json").write_text(json.dumps({
        "model_id": "meta-llama/Llama-3.1-8B-Instruct", "completed": 100, "total_input_tokens": 51200,
        "total_output_tokens": 12800, "max_concurrency": 8, "mean_tpot_ms": 9.5}))
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "full.csv").symlink_to("/dev/full")  # a link to a device: written through, it would fail
    (tmp_path / "latin1.jsonl").write_bytes(b'"caf\xe9"\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    for name in ("user_drafts", "raises_at_import", "errors_at_import"):
        sys.modules.pop(name, None)
    return tmp_path


TOY = ["acceptance", "--target", "toy:bigram-v6-mid", "--samples", "2", "--max-new-tokens", "4", "--no-progress",
       "--no-plot", "--gamma", "1"]

#: (id, argv, status, words the one line must hold)
CASES = [
    # plan
    ("plan-gamma", ["plan", "--gamma", "1,-1"], 2, "gamma must be an integer >= 0, got -1"),
    ("plan-gpu", ["plan", "--gpu", "nosuch"], 2, "nosuch"),
    ("plan-requests-huge", ["plan", "--requests", "1e8", "--gamma", "0,2", "--batch-size", "1"], 2,
     "more than this machine's"),
    ("plan-acceptance-missing", ["plan", "--acceptance", "missing.jsonl"], 2, "missing.jsonl"),
    ("plan-acceptance-deep", ["plan", "--acceptance", "deep.json"], 2, "deep.json: not valid JSON: nested too deeply"),
    ("plan-acceptance-device", ["plan", "--acceptance", "/dev/zero"], 2, "character device, not a regular file"),
    ("plan-csv-device", ["plan", "--csv", "full.csv"], 2, "'full.csv': it is a character device, not a regular file"),
    ("simulate-csv-device", ["simulate", "--csv", "full.csv"], 2, "character device, not a regular file"),
    ("plan-csv-folder", ["plan", "--csv", "no/such/folder/plan.csv"], 2, "does not exist"),
    # simulate
    ("simulate-alpha", ["simulate", "--alpha", "2"], 2, "alpha must be in [0, 1], got 2.0"),
    ("simulate-requests-huge", ["simulate", "--requests", "1e9"], 2, "more than this machine's"),
    ("plan-tree-acceptance", ["plan", "--tree-acceptance", "a|b"], 2, "invalid tree acceptance 'a|b'"),
    ("plan-spec-batch-size", ["plan", "--batch-size", "1,64", "--spec-batch-size", "100"], 2,
     "--spec-batch-size 100 is above every swept --batch-size (the largest is 64)"),
    ("simulate-spec-batch-size", ["simulate", "--batch-size", "64", "--spec-batch-size", "100"], 2,
     "--spec-batch-size 100 is above --batch-size 64: the speculative run's cap can only lower the batch cap"),
    ("simulate-tree-acceptance-alone", ["simulate", "--tree-acceptance", "0.5|0.2"], 2,
     "--tree-acceptance 0.5|0.2 is read only for a tree draft"),
    # law
    ("law-decoder", ["law", "--decoder", "nosuch_module_xyz:X"], 2, "cannot import module 'nosuch_module_xyz'"),
    # certify
    ("certify-decoder", ["certify", "--decoder", "nosuch_module_xyz:X"], 2, "cannot import module"),
    ("certify-import-raises", ["certify", "--decoder", "errors_at_import:X", "--fixture", "seed-six-token"], 2,
     "ZeroDivisionError"),
    ("certify-false-fail", ["certify", "--false-fail", "1e-13"], 2, "--false-fail"),
    ("certify-fixture", ["certify", "--fixture", "nosuch"], 2, "nosuch"),
    # calibrate
    ("calibrate-out-unwritable", ["calibrate", "--gpu", "h100", "--target", "llama-3.1-8b", "--steps", "steps.csv",
                                  "--out", "/proc/calibrated.toml"], 2, "cannot write"),
    ("calibrate-gpu-unknown", ["calibrate", "--gpu", "nosuch", "--target", "llama-3.1-8b", "--steps", "good_steps.csv",
                               "--out", "out.toml"], 2, "unknown GPU 'nosuch'"),
    ("calibrate-model-unknown", ["calibrate", "--gpu", "h100", "--target", "nosuch", "--steps", "good_steps.csv",
                                 "--out", "out.toml"], 2, "unknown model 'nosuch'"),
    ("calibrate-out-device", ["calibrate", "--gpu", "h100", "--target", "llama-3.1-8b", "--steps", "good_steps.csv",
                              "--out", "/dev/full"], 2, "character device, not a regular file"),
    ("calibrate-serve-device", ["calibrate", "--gpu", "h100", "--target", "llama-3.1-8b", "--serve", "/dev/zero"], 2,
     "character device, not a regular file"),
    ("calibrate-accept-length", ["calibrate", "--gpu", "h100", "--target", "llama-3.1-8b", "--steps", "good_steps.csv",
                                 "--serve", "spec.json:draft=eagle", "--out", "out.toml"], 2,
     "spec.json, line 6, field 'spec_decode_acceptance_length': expected an accepted length"),
    ("calibrate-steps-missing", ["calibrate", "--gpu", "h100", "--target", "llama-3.1-8b", "--steps", "none.csv",
                                 "--out", "out.toml"], 2, "none.csv"),
    # validate: a team's rows read at the door, before any simulation
    ("validate-level", ["validate", "--level", "2"], 2, "--level must be in [0.5, 1)"),
    ("validate-no-deployment", ["validate", "--add", "spec.json"], 2, "does not record its deployment"),
    ("validate-model-id", ["validate", "--add", "eight_b.json:gpu=h100,target=llama-3.1-70b,tp=4"], 2,
     "model_id 'meta-llama/Llama-3.1-8B-Instruct' is not the profile 'llama-3.1-70b'"),
    ("validate-twice", ["validate", "--add", "eight_b.json:gpu=h100,target=llama-3.1-8b", "--add",
                        "eight_b.json:gpu=h100,target=llama-3.1-8b,source=again"], 2, "is given twice"),
    ("validate-bad-rows", ["validate", "--add", "steps.csv"], 2, "lacks column(s)"),
    ("validate-missing", ["validate", "--add", "none.csv"], 2, "none.csv"),
    # probe
    ("probe-url", ["probe", "not a url", "--samples", "1", "--out", "x.jsonl"], 2, "not a url"),
    # compare
    ("compare-missing", ["compare", "missing.jsonl"], 2, "missing.jsonl"),
    ("compare-empty", ["compare", "empty.jsonl"], 2, "not a specgauge probe file"),
    ("compare-garbled", ["compare", "garbled.jsonl"], 2, "not a specgauge probe file"),
    ("compare-two-modes", ["compare", "empty.jsonl", "--baseline", "garbled.jsonl", "--reference", "."], 2,
     "choose one with --mode"),
    ("compare-unused-reference-option", ["compare", "empty.jsonl", "--ref-temperature", "0.5"], 2,
     "--ref-temperature would be ignored in logprobs mode"),
    ("compare-mode-needs-baseline", ["compare", "empty.jsonl", "--mode", "two-sample"], 2, "needs --baseline"),
    # acceptance
    ("acceptance-import-raises", [*TOY, "--draft", "raises_at_import:X"], 2, "a missing optional package"),
    ("acceptance-import-errors", [*TOY, "--draft", "errors_at_import:X"], 2, "ZeroDivisionError"),
    ("acceptance-not-a-model", [*TOY, "--draft", "collections:OrderedDict"], 2, "has no next_probs method"),
    ("acceptance-token-id", [*TOY, "--draft", "ngram", "--prompts", "ids.jsonl"], 2,
     "ids.jsonl:2: token id 9 is outside the vocabulary"),
    ("acceptance-small-draft", [*TOY, "--draft", "user_drafts:Small"], 2, "fewer than the target's"),
    ("acceptance-huge", [*TOY[:3], "--draft", "ngram", "--samples", "1e8", "--max-new-tokens", "1e8", *TOY[7:]], 2,
     "lower --samples or --max-new-tokens"),
    ("acceptance-plan-huge", [*TOY, "--draft", "d=user_drafts:SetInInit", "--plan", "--plan-target", "llama-3.1-8b",
                              "--plan-draft", "d=llama-3.2-1b", "--plan-requests", "1e8"], 2, "lower --plan-requests"),
    ("acceptance-prompts-not-utf8", [*TOY, "--draft", "ngram", "--prompts", "latin1.jsonl"], 2,
     "latin1.jsonl, line 1: is not UTF-8 text (byte 4"),
    ("acceptance-dtype", [*TOY, "--draft", "ngram", "--dtype", "int8"], 2, "invalid choice: 'int8'"),
    ("acceptance-dtype-unused", [*TOY, "--draft", "ngram", "--dtype", "bfloat16"], 2, "applies only to HF models"),
    ("acceptance-device", [*TOY, "--draft", "ngram", "--device", "nosuch"], 2, "a torch device"),
    ("acceptance-gamma-twice", [*TOY[:-2], "--draft", "ngram", "--gamma", "1,1"], 2, "listed twice"),
    ("acceptance-run-option-alone", [*TOY, "--draft", "ngram", "--run-gamma", "2"], 2, "given without --run"),
    ("acceptance-plan-option-alone", [*TOY, "--draft", "ngram", "--plan-requests", "5"], 2, "given without --plan"),
    ("acceptance-next-probs-raises", [*TOY, "--draft", "user_drafts:Raises"], 1,
     "next_probs raised RuntimeError: kernel failed"),
    ("acceptance-class-attributes", [*TOY, "--draft", "user_drafts:ClassAttributes"], 0, ""),
    ("acceptance-set-in-init", [*TOY, "--draft", "user_drafts:SetInInit"], 0, ""),
]


def test_every_subcommand_has_its_error_cases():
    assert {argv[0] for _, argv, _, _ in CASES} == set(SUBCOMMANDS)


@pytest.mark.parametrize(("argv", "status", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_exit_status_follows_the_rule(inputs, capsys, argv, status, words):
    before = sorted(p.name for p in Path(inputs).iterdir())
    assert main(argv) == status
    err = capsys.readouterr().err.strip()
    if status == 0:
        return
    line = err.splitlines()[-1] if err else ""
    assert words in line and "internal error" not in err, err
    assert "\n" not in err or status == 1, err  # one line (a failure while working may follow a warning)
    if status == 2:  # found before any work: nothing written beside the inputs, not even the default folder
        after = sorted(p.name for p in Path(inputs).iterdir())
        assert after == before, after


def test_an_interrupted_run_resumes_and_gives_the_same_csv(inputs, capsys, monkeypatch):
    """``acceptance --run`` journals each (draft, γ) run as it finishes: after an interrupt
    the rerun computes only what is missing, and the CSV is the uninterrupted run's."""
    import specgauge.measurement.forcing as forcing

    argv = [*TOY, "--draft", "user_drafts:SetInInit", "--run", "--run-gamma", "1,2,3", "--seed", "3"]
    assert main([*argv, "--csv", "fresh.csv"]) == 0
    real, calls = forcing.run_speculative, []

    def interrupted(*args, **kwargs):
        calls.append(kwargs["gamma"])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(forcing, "run_speculative", interrupted)
    assert main([*argv, "--csv", "resumed.csv"]) == 130
    assert (inputs / "resumed.csv.partial.jsonl").exists() and not (inputs / "resumed.csv").exists()
    calls.clear()
    monkeypatch.setattr(forcing, "run_speculative", lambda *a, **k: calls.append(k["gamma"]) or real(*a, **k))
    assert main([*argv, "--csv", "resumed.csv"]) == 0
    assert calls == [2, 3]  # γ = 1 finished before the interrupt
    assert "1 of 3 runs resumed" in capsys.readouterr().out
    assert (inputs / "resumed.csv").read_bytes() == (inputs / "fresh.csv").read_bytes()
    assert not (inputs / "resumed.csv.partial.jsonl").exists() and not (inputs / "resumed.csv.lock").exists()
