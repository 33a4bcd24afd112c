"""``specgauge acceptance``: teacher-forced α against the exact rule, its edge cases, the n-gram path, the CLI.

Tiny local models only (the gate's toy LMs and a two-layer Llama saved to a temporary
folder); nothing is downloaded.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from specgauge.fixtures.toy_lm import MarkovLM, load_toy_lm
from specgauge.laws import tokens_per_pass, tokens_per_pass_pmf
from specgauge.measurement.models import NextTokenLaw, NgramProposer, Sampling
from specgauge.measurement.prompts import Request, read_requests
from specgauge.reports.cli import main
from specgauge.measurement.forcing import (law_sums, measure, overlap, rank_acceptance, run_speculative,
                                                  summary_rows, top_candidates)

FALSE_FAIL = 1e-6   # per assertion of this file's z-tests


def law(table, name: str) -> NextTokenLaw:
    return NextTokenLaw(MarkovLM(np.asarray(table, float), name), Sampling(), name)


def context_free(p) -> np.ndarray:
    """A bigram whose every row is p: tokens i.i.d., so α is the same at every position."""
    return np.tile(np.asarray(p, float), (len(p), 1))


P = [0.4, 0.3, 0.2, 0.05, 0.05, 0.0]
Q_NEAR = [0.3, 0.3, 0.1, 0.1, 0.1, 0.1]       # 1 − TV = 0.75
Q_FAR = [0.05, 0.05, 0.2, 0.3, 0.2, 0.2]      # 1 − TV = 0.35


def _mean_matches_law(rounds: list[np.ndarray], alpha: float, gamma: int) -> tuple[bool, float, float]:
    """z-test of the mean tokens per round against the law at constant α (rounds i.i.d. truncated geometric)."""
    n = np.concatenate(rounds)
    pmf = tokens_per_pass_pmf(np.full(gamma, alpha))
    values = np.arange(1, gamma + 2)
    mean, var = float(pmf @ values), float(pmf @ values**2 - (pmf @ values) ** 2)
    z = (n.mean() - mean) / np.sqrt(var / n.size)
    return abs(z) < stats.norm.isf(FALSE_FAIL / 2), float(n.mean()), mean


def test_teacher_forced_alpha_is_one_minus_tv_and_predicts_the_run_where_positions_are_independent():
    target, near = law(context_free(P), "target"), law(context_free(Q_NEAR), "near")
    requests = [Request(np.array([0]))] * 300
    m = measure(target, [near], requests, length=24, seed=1, k=2)
    alpha = 1 - 0.5 * np.abs(np.subtract(P, Q_NEAR)).sum()
    assert np.allclose(np.concatenate(m.drafts[0].alphas), alpha, atol=1e-12)
    sums, counts = law_sums(m.drafts[0].alphas, 3)
    assert sums.sum() / counts.sum() == pytest.approx(tokens_per_pass(alpha, 3))
    rounds = run_speculative(target, near, [r.prompt for r in requests], length=24, gamma=3, seed=2)
    ok, measured, predicted = _mean_matches_law(rounds, alpha, 3)
    assert ok, (measured, predicted)
    # the same check refuses a law that is not this draft's: the teacher-forced α of a far draft
    far_alpha = 1 - 0.5 * np.abs(np.subtract(P, Q_FAR)).sum()
    assert not _mean_matches_law(rounds, far_alpha, 3)[0]


def test_the_summary_interval_covers_the_run_where_independent():
    target, far = law(context_free(P), "target"), law(context_free(Q_FAR), "far")
    requests = [Request(np.array([1]))] * 200
    m = measure(target, [far], requests, length=16, seed=3, k=2)
    rounds = run_speculative(target, far, [r.prompt for r in requests], length=16, gamma=2, seed=4)
    row = summary_rows(m, [2], seed=5, k=2, measured={("far", 2): rounds})[0]
    assert row["measured_ci_low"] <= row["tokens_per_pass"] <= row["measured_ci_high"]
    assert row["tokens_per_pass_ci_low"] == pytest.approx(row["tokens_per_pass_ci_high"])  # constant α: no spread


def test_draft_equal_to_target_accepts_everything():
    pair = load_toy_lm("bigram-v6-mid")
    target = NextTokenLaw(pair.target, Sampling(), "target")
    m = measure(target, [NextTokenLaw(pair.target, Sampling(), "same")], [Request(np.array(pair.prompt))] * 20,
                length=30, seed=0, k=3)
    assert np.allclose(np.concatenate(m.drafts[0].alphas), 1.0, atol=1e-12)
    rounds = run_speculative(target, NextTokenLaw(pair.target, Sampling(), "same"), [np.array(pair.prompt)] * 5,
                             length=12, gamma=3, seed=0)
    assert all((r == 4).all() for r in rounds)


def test_disjoint_supports_accept_nothing():
    p = context_free([0.5, 0.5, 0.0, 0.0])
    q = context_free([0.0, 0.0, 0.3, 0.7])
    target, draft = law(p, "p"), law(q, "q")
    m = measure(target, [draft], [Request(np.array([0]))] * 5, length=10, seed=0, k=2)
    assert np.concatenate(m.drafts[0].alphas).max() == 0.0
    assert np.concatenate(m.drafts[0].ranks).max() == 0.0            # q's top tokens have p = 0
    rounds = run_speculative(target, draft, [np.array([0])] * 5, length=10, gamma=3, seed=0)
    assert all((r == 1).all() for r in rounds)


def test_sampling_transforms_apply_to_both_sides():
    pytest.importorskip("torch", reason="sampling transforms run HF's logits warpers: pip install 'specgauge[hf]'")
    pytest.importorskip("transformers", reason="sampling transforms run HF's logits warpers: pip install 'specgauge[hf]'")
    p = np.array([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]])
    q = np.array([[0.4, 0.5, 0.1], [0.2, 0.3, 0.5], [0.7, 0.2, 0.1]])
    greedy = Sampling(temperature=0.0)
    assert np.array_equal(greedy.apply(p), np.eye(3)[[0, 1, 2]])
    assert overlap(greedy.apply(p), greedy.apply(q)).tolist() == [0.0, 0.0, 0.0]   # argmaxes differ everywhere
    top1 = Sampling(top_k=1)
    assert overlap(top1.apply(p), top1.apply(p)).tolist() == [1.0, 1.0, 1.0]
    cooled = Sampling(temperature=0.5).apply(p)
    assert np.allclose(cooled, p**2 / (p**2).sum(axis=1, keepdims=True))


def test_top_candidates_are_ranked_by_q_ties_by_id():
    q = np.array([[0.1, 0.4, 0.1, 0.4], [0.25, 0.25, 0.25, 0.25]])
    assert top_candidates(q, 3).tolist() == [[1, 3, 0], [0, 1, 2]]
    rng = np.random.default_rng(5)  # many ties straddling the k-th place: a full sort decides
    for _ in range(200):
        v = int(rng.integers(1, 40))
        k = int(rng.integers(1, v + 1))
        q = rng.integers(0, 4, size=(3, v)).astype(float)
        expected = np.lexsort((np.tile(np.arange(v), (3, 1)), -q), axis=-1)[:, :k]
        assert np.array_equal(top_candidates(q, k), expected)


def test_ngram_on_text_with_known_repeats():
    seq = np.array([7, 1, 2, 3, 7, 1, 2, 9, 7, 1])
    cands = NgramProposer(max_n=3).candidates(seq, first=4, k=2)
    # after [7 1 2 3]: no earlier 3 -> none; after ...7: 7 was followed by 1; after ...7 1: 1 by 2;
    # after ...7 1 2: 2 by 3; after ...2 9: none; after ...9 7: 7 by 1 (most recent first, distinct);
    # after ...7 1: [7 1] was followed by 2 twice
    assert cands[:, 0].tolist() == [-1, 1, 2, 3, -1, 1, 2]
    # a target that cycles 0 1 2 3: once the cycle has been seen, the lookup is always right
    cycle = np.roll(np.eye(4), 1, axis=1)
    target = law(cycle, "cycle")
    m = measure(target, [NgramProposer(max_n=2)], [Request(np.array([0, 1, 2, 3]))], length=8, seed=0, k=2)
    assert m.continuations[0].tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    assert m.drafts[0].alphas[0].tolist() == [0.0] + [1.0] * 7
    assert m.drafts[0].ranks[0][:, 1].max() == 0.0                  # one follower only: no second rank
    # run for real: nothing to look up at first (one token from p), then every round is accepted whole
    rounds = run_speculative(target, NgramProposer(max_n=2), [np.array([0, 1, 2, 3])], length=12, gamma=3, seed=0)
    assert rounds[0].tolist() == [1, 4, 4, 4]


# ---------------------------------------------------------------- Hugging Face and the command line


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("transformers")
    from specgauge.fixtures.tiny_llama import build_tiny_llama

    root = tmp_path_factory.mktemp("tiny")
    target = build_tiny_llama(root / "target", seed=0)
    draft = build_tiny_llama(root / "draft", seed=0, sharpness=10.0)   # the target, flatter: α ≈ 0.7
    prompts = root / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps(x) for x in [
        {"prompt": "papa whiskey alpha charlie delta india papa whiskey alpha charlie"},
        "xray echo sierra kilo mike xray echo sierra kilo mike",
        {"messages": [{"role": "user", "content": "alpha bravo charlie alpha bravo"}]}]) + "\n")
    return root, target, draft, prompts


def test_hf_draft_equal_to_target_accepts_everything(tiny):
    from specgauge.measurement.models import HFLaw

    root, target, _, prompts = tiny
    model = HFLaw.load(str(target), Sampling(top_p=0.9), "t", "cpu", "float32", 4, threads=1)
    requests = read_requests(prompts, str(target))
    m = measure(model, [model], requests, length=8, seed=0, k=2, batch=2)
    assert np.allclose(np.concatenate(m.drafts[0].alphas), 1.0, atol=1e-9)


def test_cli_writes_traces_csv_and_png_that_plan_replays(tiny, tmp_path, capsys):
    root, target, draft, prompts = tiny
    csv = tmp_path / "acc.csv"
    assert main(["acceptance", "--target", str(target), "--draft", f"small={draft}", "--draft", "ngram",
                 "--prompts", str(prompts), "--samples", "2", "--max-new-tokens", "12", "--gamma", "1,2,4",
                 "--threads", "1", "--no-progress", "--csv", str(csv)]) == 0
    assert "Loading weights" not in capsys.readouterr().err  # --no-progress: transformers' bars off too
    summary = pd.read_csv(csv)
    assert set(summary["draft"]) == {"small", "ngram"} and sorted(set(summary["gamma"])) == [1, 2, 4]
    assert ((summary["mean_alpha_ci_low"] <= summary["mean_alpha"]) & (summary["mean_alpha"] <= summary["mean_alpha_ci_high"])).all()
    assert (tmp_path / "acc.png").stat().st_size > 0
    lines = (tmp_path / "acc.jsonl").read_text().splitlines()
    assert len(lines) == 6 and len(json.loads(lines[0])["acc_small"]["acc_len"]) == 12
    plan_csv = tmp_path / "plan.csv"
    assert main(["plan", "--gpu", "h200", "--target", "llama-3.1-8b", "--draft", "llama-3.2-1b", "--gamma", "2",
                 "--batch-size", "1", "--requests", "8", "--output-len", "32", "--no-progress",
                 "--acceptance", f"{tmp_path / 'acc.jsonl'}:small", "--csv", str(plan_csv)]) == 0
    assert pd.read_csv(plan_csv)["acceptance"].str.startswith("replay(acc.jsonl:small").all()


def test_probe_continuations_are_reused(tiny, tmp_path, capsys):
    root, target, draft, _ = tiny
    probe = tmp_path / "probe.jsonl"
    header = {"format": "specgauge-probe/1", "params": {"endpoint": "completions", "max_tokens": 3, "temperature": 0.7},
              "prompts": ["alpha bravo charlie"], "capabilities": {}}
    samples = [{"p": 0, "s": 0, "text": "delta echo foxtrot", "token_ids": [4, 5, 6]},
               {"p": 0, "s": 1, "text": "golf hotel india"}]          # no ids: re-tokenised
    probe.write_text("\n".join(json.dumps(x) for x in [header, *samples]) + "\n")
    csv = tmp_path / "a.csv"
    assert main(["acceptance", "--target", str(target), "--draft", str(draft), "--prompts", str(probe),
                 "--no-plot", "--no-progress", "--threads", "1", "--csv", str(csv)]) == 0
    records = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [r["generated_token_ids"] for r in records] == [[4, 5, 6], [7, 8, 9]]
    assert {r["continuation"] for r in records} == {"probe"}
    assert "sampled with other settings (temperature 0.7 there, 1.0 here" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["--draft", "nonsense"], "is not a model directory, ngram[:N], toy:NAME or MODULE:NAME"),
    (["--draft", "toy:no-such"], "unknown toy LM"),
    (["--draft", "ngram:x"], "ngram:MAX_N takes a positive integer"),
    (["--draft", "ngram", "--gamma", "0"], "argument --gamma: expected an integer ≥ 1, got 0"),
    (["--draft", "ngram", "--prompts", "missing.jsonl"], "cannot read prompts"),
    (["--draft", "ngram", "--prompts", "BAD"], "not a JSON line"),
    (["--draft", "ngram", "--plan"], "--plan needs --plan-target"),
    (["--draft", "ngram", "--plan", "--plan-target", "llama-3.1-8b", "--plan-draft", "x=llama-3.2-1b"], "no draft is labelled 'x'"),
    (["--draft", "ngram", "--top-p", "2"], "--top-p must lie in (0, 1]"),
    (["--draft", "ngram", "--max-new-tokens", "x"], "expected an integer ≥ 1, got 'x'"),
])
def test_bad_inputs_are_one_line_exit_2_and_write_nothing(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "BAD").write_text("{not json\n")
    out = tmp_path / "out"
    out.mkdir()
    assert main(["acceptance", "--target", "toy:bigram-v6-mid", *argv, "--csv", str(out / "a.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err
    assert list(out.iterdir()) == []


def test_plan_ranks_the_drafts(tmp_path, capsys):
    csv = tmp_path / "acc.csv"
    assert main(["acceptance", "--target", "toy:bigram-v6-mid", "--draft", "mid=toy:bigram-v6-mid",
                 "--draft", "same=toy:bigram-v6-mid/target", "--samples", "20", "--max-new-tokens", "32",
                 "--gamma", "1,3", "--no-plot", "--no-progress", "--csv", str(csv), "--plan",
                 "--plan-target", "llama-3.1-8b", "--plan-draft", "mid=llama-3.2-1b", "--plan-draft", "same=llama-3.2-1b",
                 "--plan-batch-size", "1,64", "--plan-requests", "16", "--plan-output-len", "32"]) == 0
    decisions = pd.read_csv(tmp_path / "acc_decision.csv")
    ranks = decisions[decisions["decision"] == "draft_rank"]
    assert len(ranks) == 4
    for _, level in ranks.groupby("batch_size"):
        assert level["scope"].iloc[0] == "measured_draft=same"                      # α = 1 beats α ≈ 0.69 at the same cost
        assert level["speedup"].is_monotonic_decreasing
    assert {"best_gamma_throughput", "draft_concurrency_cost"} <= set(decisions["decision"])


def test_laws_left_on_the_device_give_the_same_alpha_and_ranks():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.full(50, 0.3), size=7), rng.dirichlet(np.full(48, 0.3), size=7)
    q[0, :4] = q[0, 4]                                    # ties: broken by id on both paths
    tp, tq = torch.from_numpy(p), torch.from_numpy(q)
    assert np.allclose(overlap(tp, tq), overlap(p, q), atol=1e-15)
    assert np.array_equal(top_candidates(tq, 5), top_candidates(q, 5))
    cands = top_candidates(q, 5)
    cands[1, 2] = -1
    assert np.array_equal(rank_acceptance(tp, cands), rank_acceptance(p, cands))


@pytest.mark.slow
@pytest.mark.parametrize("independent", [True, False], ids=["iid-rows", "bigram-as-shipped"])
def test_where_the_law_and_the_run_part(independent):
    """bigram-v6-mid: tokens i.i.d. (every row the table's row 0), the run matches the law; as shipped
    (α depends on the last token, and rounds start after corrections), the run falls 0.06 below it."""
    pair = load_toy_lm("bigram-v6-mid")
    tables = [np.tile(m.table[0], (6, 1)) if independent else m.table for m in (pair.target, pair.draft)]
    target, draft = law(tables[0], "t"), law(tables[1], "d")
    prompt = np.array(pair.prompt)
    m = measure(target, [draft], [Request(prompt)] * 1000, length=32, seed=0, k=2)
    rounds = run_speculative(target, draft, [prompt] * 1000, length=32, gamma=4, seed=1)
    row = summary_rows(m, [4], seed=2, k=2, measured={("d", 4): rounds})[0]
    apart = row["measured_ci_high"] < row["tokens_per_pass_ci_low"] or row["tokens_per_pass_ci_high"] < row["measured_ci_low"]
    assert apart != independent, row


def test_sharegpt_chats_and_token_ids_are_read(tiny, tmp_path):
    root, target, _, _ = tiny
    sharegpt = tmp_path / "chats.json"
    sharegpt.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": "alpha bravo"}, {"from": "gpt", "value": "charlie"},
                           {"from": "human", "value": "delta"}]},
        {"messages": [{"role": "system", "content": "echo"}, {"role": "user", "content": "golf"}]},
        [3, 4, 5]]))
    requests = read_requests(sharegpt, str(target))
    # no chat template: the turns before the first assistant turn, joined by newlines
    assert [r.prompt.tolist() for r in requests] == [[1, 2], [5, 7], [3, 4, 5]]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"conversations": [{"from": "gpt", "value": "x"}]}]))
    with pytest.raises(Exception, match="no user turn before the first assistant turn"):
        read_requests(bad, str(target))


def test_replaying_without_a_label_names_the_labels_there(tmp_path, capsys):
    csv = tmp_path / "acc.csv"
    assert main(["acceptance", "--target", "toy:bigram-v6-mid", "--draft", "mid=toy:bigram-v6-mid", "--draft", "ngram",
                 "--max-new-tokens", "8", "--no-plot", "--no-progress", "--csv", str(csv)]) == 0
    capsys.readouterr()
    assert main(["simulate", "--alpha", str(tmp_path / "acc.jsonl"), "--requests", "4", "--output-len", "8"]) != 0
    assert "this trace has mid, ngram: name one as PATH.jsonl:mid" in capsys.readouterr().err
