"""`specgauge law`: the closed form, the seed's example through a decoder, the CLI files."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specgauge.reports.cli import law


def test_closed_form_matches_its_limits_and_the_seed_number():
    assert law.tokens_per_pass(0.9, 4) == pytest.approx(4.0951)
    assert law.tokens_per_pass(1.0, 4) == 5.0
    assert law.tokens_per_pass(0.0, 7) == 1.0
    # Leviathan's speed-up: E[N] / (γc + 1)
    assert law.speedup(0.8, 3, 0.1) == pytest.approx((1 - 0.8**4) / 0.2 / 1.3)


@pytest.mark.parametrize("tv", [0.0, 0.1, 0.37, 1.0])
def test_pairs_have_the_asked_total_variation(tv):
    p, q = law.pair_at_tv(tv)
    assert p.sum() == pytest.approx(1) and q.sum() == pytest.approx(1)
    assert 0.5 * np.abs(p - q).sum() == pytest.approx(tv)


def test_seed_example_reproduces_acceptance_and_tokens_per_pass():
    ex = law.seed_example(rounds=400_000, seed=0)
    assert ex["alpha_from_tv"] == pytest.approx(0.9)
    assert f"{ex['mc_acceptance_rate']:.3f}" == "0.900"
    assert f"{ex['tokens_per_pass']:.2f}" == "4.10"
    # 1.3 is sd(N) at α = 0.9, γ = 4 rounded up: a 5-sigma band around the law
    assert abs(ex["mc_tokens_per_pass"] - 4.0951) < 5 * 1.3 / np.sqrt(400_000)


def test_monte_carlo_agrees_with_the_law_on_a_grid():
    frame = law.law_table([0.3, 0.6, 0.9], [1, 3, 6], cost_ratio=0.05, rounds=20_000, seed=1)
    z = (frame["mc_tokens_per_pass"] - frame["tokens_per_pass"]) / frame["mc_tokens_per_pass_se"]
    assert z.abs().max() < 5
    za = (frame["mc_acceptance_rate"] - frame["alpha"]) / frame["mc_acceptance_rate_se"]
    assert za.abs().max() < 5


def test_a_biased_decoder_is_seen_by_the_check():
    class AlwaysAccept:
        def verify(self, target_probs, draft_probs, draft_tokens, rng):
            batch, gamma = draft_tokens.shape
            return np.concatenate([draft_tokens, np.zeros((batch, 1), np.int64)], axis=1)

    mc = law.monte_carlo(*law.pair_at_tv(0.5), gamma=3, rounds=2000, rng=np.random.default_rng(0), decoder=AlwaysAccept())
    assert mc.tokens_per_pass == 4.0 and mc.acceptance_rate == 1.0


def test_cli_writes_csv_meta_and_pngs(tmp_path, capsys):
    out = tmp_path / "law.csv"
    assert law.main(["--gamma", "2,4", "--alpha", "0.5,0.9", "--rounds", "500", "--csv", str(out), "--plot"]) == 0
    frame = pd.read_csv(out)
    assert list(frame["gamma"]) == [2, 2, 4, 4]
    assert (tmp_path / "law.meta.json").exists()
    assert (tmp_path / "law_tokens_per_pass.png").stat().st_size > 1000
    first = out.read_bytes()
    law.main(["--gamma", "2,4", "--alpha", "0.5,0.9", "--rounds", "500", "--csv", str(out)])
    assert out.read_bytes() == first


@pytest.mark.parametrize("argv, message", [
    (["--gamma", ""], "expected at least one value"),
    (["--alpha", "1.5"], "--alpha: expected a number in [0, 1], got 1.5"),
    (["--gamma", "0"], "--gamma: expected an integer ≥ 1, got 0"),
    (["--cost-ratio", "nan"], "--cost-ratio: expected a number ≥ 0, got nan"),
    (["--seed", "-1"], "--seed: expected a seed: an integer ≥ 0, got -1"),
])
def test_cli_refuses_bad_input_in_one_line(argv, message, tmp_path, capsys):
    from specgauge.reports.cli import main

    assert main(["law", *argv, "--csv", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err and "Traceback" not in err, err
    assert not list(tmp_path.iterdir())


def test_a_decoder_breaking_the_contract_is_one_clear_error():
    class WrongShape:
        def verify(self, target_probs, draft_probs, draft_tokens, rng):
            return draft_tokens

    with pytest.raises(law.LawInputError, match="broke the verify contract"):
        law.monte_carlo(*law.pair_at_tv(0.2), gamma=2, rounds=10, rng=np.random.default_rng(0), decoder=WrongShape())
