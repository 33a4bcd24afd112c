"""Profiles, the shared options and ``specgauge simulate`` end to end."""

from __future__ import annotations

import argparse

import pytest

from specgauge.reports.cli import main as cli_main
from specgauge.reports.cli.options import add_simulation_options, configs_from_args
from specgauge.errors import UsageError
from specgauge.simulator import (ConfigError, IIDAcceptance, PerRequestAcceptance, SimulationConfig, known_gpus, known_models,
                       load_gpu, load_model, simulate)

PUBLISHED_PARAMS = {
    "llama-3.1-8b": 8_030_261_248, "llama-3.1-70b": 70_553_706_496, "llama-3.2-1b": 1_235_814_400,
    "qwen3-0.6b": 596_049_920, "qwen3-32b": 32_762_123_264,
}


@pytest.mark.parametrize("name,params", sorted(PUBLISHED_PARAMS.items()))
def test_model_shapes_reproduce_published_parameter_counts(name, params):
    assert load_model(name).params == params


def test_gpus_use_dense_figures():
    assert {"a100-80gb", "h100-sxm", "h200"} <= set(known_gpus())
    assert load_gpu("H100").peak_tflops == 989.0 and load_gpu("h200").bandwidth_tb_s == 4.8
    assert load_gpu("a100").peak_tflops == 312.0
    assert set(PUBLISHED_PARAMS) <= set(known_models())


def test_user_profiles_extend_the_catalogue(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('[gpus."mi300x"]\npeak_tflops = 1307.0\nbandwidth_tb_s = 5.3\nmemory_gb = 192.0\n'
                    '[models."tiny"]\nlayers = 2\nhidden = 256\nheads = 4\nkv_heads = 2\nhead_dim = 64\n'
                    'intermediate = 512\nvocab = 151936\n')
    assert "mi300x" in known_gpus(str(path)) and "tiny" in known_models(str(path))
    row = simulate(SimulationConfig(gpu="mi300x", draft="tiny", profiles=str(path), requests=16, output_len=32))
    assert row["completed"] == 16
    bad = tmp_path / "bad.toml"
    bad.write_text('[gpus."x"]\npeak_tflops = 1\nbandwidth = 2\nmemory_gb = 3\n')
    with pytest.raises(ConfigError, match="unknown field"):
        load_gpu("x", str(bad))


def _parse(argv, sweep):
    parser = argparse.ArgumentParser()
    add_simulation_options(parser, sweep=sweep)
    return parser.parse_args(argv)


def test_single_config_and_sweep_product():
    (one,) = configs_from_args(_parse(["--gamma", "3", "--alpha", "0.6", "--qps", "4"], sweep=False))
    assert one == SimulationConfig(gamma=3, acceptance=IIDAcceptance(0.6), qps=4.0)
    many = configs_from_args(_parse(["--gamma", "0,2,4", "--batch-size", "1,8", "--draft", "none"], sweep=True))
    assert [(c.gamma, c.batch_size) for c in many] == [(0, 1), (0, 8), (2, 1), (2, 8), (4, 1), (4, 8)]
    assert all(c.draft is None for c in many)
    override = configs_from_args(_parse(["--alpha", "0.3"], sweep=True), acceptance=PerRequestAcceptance(2, 2))
    assert [c.acceptance for c in override] == [PerRequestAcceptance(2, 2)]
    with pytest.raises(UsageError, match="--gamma"):  # a usage error: exit status 2
        configs_from_args(_parse(["--gamma", "two"], sweep=True))


def test_simulate_command_writes_a_byte_identical_csv(tmp_path, capsys):
    args = ["simulate", "--requests", "40", "--output-len", "32", "--batch-size", "8", "--qps", "5"]
    assert cli_main(args + ["--csv", str(tmp_path / "a.csv")]) == 0
    assert cli_main(args + ["--csv", str(tmp_path / "b.csv")]) == 0
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    import csv

    header, values = csv.reader((tmp_path / "a.csv").read_text().splitlines())   # the interval note is quoted
    assert "speedup_vs_no_spec" in header and len(header) == len(values)
    assert {"speedup_vs_no_spec_lo", "speedup_vs_no_spec_hi", "mean_tpot_ms_lo", "output_throughput_hi"} <= set(header)
    assert "speedup" in capsys.readouterr().out


@pytest.mark.parametrize("argv,message", [
    (["--alpha", "2"], "alpha must be in [0, 1]"),
    (["--gpu", "tpu"], "known: a100-80gb"),
    (["--qps", "-1"], "qps"),
])
def test_simulate_command_refuses_bad_input_in_one_line(argv, message, capsys):
    assert cli_main(["simulate", *argv]) == 2  # a usage error
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_simulate_shows_a_progress_bar_past_a_few_seconds_and_the_row_is_unchanged(monkeypatch, capsys):
    from specgauge.reports.cli import budget, simulate as command
    from specgauge.simulator.config import SimulationConfig
    from specgauge.simulator.core import simulate

    config = SimulationConfig(requests=200, output_len=16)
    calls: list[tuple[int, int]] = []
    assert simulate(config, lambda admitted, total: calls.append((admitted, total))) == simulate(config)
    assert calls and calls[-1] == (400, 400) and all(a <= b for (a, _), (b, _) in zip(calls, calls[1:]))
    monkeypatch.setattr(budget, "SLOW_SECONDS", 0.0)
    monkeypatch.setattr("specgauge.progress.auto_mode", lambda stream=None, enabled=True: "bar")  # a terminal
    assert command.main(["--requests", "200", "--output-len", "16"]) == 0
    assert "simulating" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "note"), [
    (["--draft", "none", "--draft-cost-ratio", "0.05", "--gamma", "5"],
     "(no draft memory; 337 without the 5 lookahead tokens each request reserves)"),
    (["--gamma", "0"], "(no speculation)"),
    (["--draft", "ngram", "--gamma", "5"], "(no draft memory; 337 without the 5 lookahead tokens each request reserves)"),
    ([], "(without draft 337)"),
])
def test_simulate_names_what_costs_concurrency(argv, note, capsys):
    """Without a draft model no concurrency is lost to a draft: only γ's lookahead slots cost any."""
    assert cli_main(["simulate", "--requests", "20", *argv]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "max concurrency" in ln)
    assert note in line, line
    assert ("without draft" in line) == (not argv)  # only a draft model (the default qwen3-0.6b) has memory
