"""``specgauge calibrate`` recovers known coefficients and writes a profile the simulator uses."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from specgauge.reports.cli import main as cli_main
from specgauge.simulator import SimulationConfig, simulate
from specgauge.reports.calibrate import calibration_prior
from specgauge.simulator.fit import fit_step_model, latency_equation, step_equation
from specgauge.simulator.profiles import load_gpu, load_model, load_step_fit

PRIOR = calibration_prior(load_gpu("h100"), load_model("llama-3.1-8b"), 1)

Z = stats.norm.isf(1e-6 / 2)
TRUE = np.array([4.0e-3, 30e-6, 50e-9])      # c_fixed, c_token, c_kv in seconds


def synthetic_steps(rng, noise=0.02):
    rows = []
    for batch in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        for ctx in (256, 1024, 4096):
            for gamma in (0, 3):
                tokens, kv = batch * (gamma + 1), batch * ctx
                ms = TRUE @ [1, tokens, kv] * (1 + noise * rng.standard_normal()) * 1e3
                rows.append({"batch": batch, "batched_tokens": tokens, "kv_tokens": kv, "ms": ms,
                             "model": "llama-3.1-8b"})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fit_recovers_known_coefficients_within_its_stated_error(seed):
    frame = synthetic_steps(np.random.default_rng(seed))
    fit = fit_step_model([step_equation(r.batched_tokens, r.kv_tokens, r.ms * 1e-3, "x") for r in frame.itertuples()],
                         PRIOR)
    got = np.array([fit.c_fixed, fit.c_token, fit.c_kv])
    se = np.array([fit.se[k] for k in ("c_fixed", "c_token", "c_kv")])
    assert fit.knee == 1 and not fit.held                        # additive data: the additive form wins
    assert np.all(np.abs(got - TRUE) <= Z * se), (got, se)
    assert np.all(se < 0.1 * TRUE)                  # and the stated error is informative
    assert 0.02 < fit.worst_error < 0.12 and fit.rms_error == pytest.approx(0.02, rel=0.5)


def test_a_roofline_shaped_measurement_is_fitted_by_the_knee_not_the_sum():
    # Steps that cost max(memory, compute): the additive form misses them by > 15 %; the knee fits them.
    eqs = [step_equation(t, 2000 * (i % 3 + 1), PRIOR.c_fixed + max(8e-3, 40e-6 * t), str(t))
           for i, t in enumerate((1, 8, 32, 64, 128, 200, 256, 512, 1024))]
    assert fit_step_model(eqs, PRIOR, knees=(1.0,)).worst_error > 0.15
    fit = fit_step_model(eqs, PRIOR)
    assert fit.knee >= 6 and fit.worst_error < 0.03
    assert fit.c_weight == pytest.approx(8e-3, rel=0.03) and fit.c_token == pytest.approx(40e-6, rel=0.03)


def test_latency_json_is_summed_over_its_steps_and_recovered_exactly(tmp_path):
    argv = ["calibrate", "--gpu", "h100", "--target", "llama-3.1-8b", "--out", str(tmp_path / "p.toml")]
    for batch in (1, 8, 32, 128):
        for input_len in (128, 2048):
            eq = latency_equation(batch, input_len, 128, 1.0, "")
            seconds = float(TRUE @ np.array(eq.design)) * 128
            path = tmp_path / f"lat{batch}_{input_len}.json"
            path.write_text(json.dumps({"avg_latency": seconds, "latencies": [seconds] * 3}))
            argv += ["--latency", f"{path}:batch={batch},input={input_len},output=128"]
    assert cli_main(argv) == 0
    fit = load_step_fit("llama-3.1-8b", "h100-sxm", 1, str(tmp_path / "p.toml"))
    assert [fit.c_fixed_ms * 1e-3, fit.c_token_us * 1e-6, fit.c_kv_ns * 1e-9] == pytest.approx(TRUE, rel=1e-5)


def test_round_trip_through_the_profile_and_the_simulator(tmp_path, capsys):
    steps = tmp_path / "steps.csv"
    synthetic_steps(np.random.default_rng(5)).to_csv(steps, index=False)
    base, spec = tmp_path / "base.json", tmp_path / "spec.json"
    shape = {"completed": 100, "total_input_tokens": 51_200, "total_output_tokens": 25_600, "max_concurrency": 32}
    kv = 32 * (512 + 128)
    base.write_text(json.dumps({**shape, "mean_tpot_ms": float(TRUE @ [1, 32, kv]) * 1e3}))
    round_ms = float(TRUE @ [1, 32 * 4, kv]) * 1e3 + 2.5   # the verify pass + a 2.5 ms proposer
    spec.write_text(json.dumps({**shape, "mean_tpot_ms": round_ms / 2.5, "spec_decode_acceptance_length": 2.5,
                                "spec_decode_num_drafts": 1000, "spec_decode_draft_tokens": 3000}))
    out = tmp_path / "mine.toml"
    assert cli_main(["calibrate", "--gpu", "h100", "--target", "llama-3.1-8b", "--steps", str(steps),
                     "--serve", str(base), "--serve", f"{spec}:draft=eagle", "--out", str(out), "--plot"]) == 0
    printed = capsys.readouterr().out
    assert "worst-case error" in printed and (tmp_path / "mine.png").stat().st_size > 0
    points = pd.read_csv(tmp_path / "mine.points.csv")
    assert len(points) == 55 and points["relative_error"].abs().max() == pytest.approx(
        float(printed.split("worst-case error ")[1].split("%")[0]) / 100, abs=1e-3)
    fit = load_step_fit("llama-3.1-8b", "h100-sxm", 1, str(out))
    assert fit.source.startswith("fitted by specgauge calibrate")
    proposer = load_step_fit("eagle:llama-3.1-8b", "h100-sxm", 1, str(out))
    assert proposer.per_round and proposer.c_fixed_ms == pytest.approx(2.5, abs=0.3)
    row = simulate(SimulationConfig(gpu="h100", target="llama-3.1-8b", draft="eagle", gamma=3, requests=20,
                                    output_len=64, profiles=str(out)))
    assert row["step_model_source"] == fit.source


def test_bad_input_is_one_line(tmp_path, capsys):
    path = tmp_path / "lat.json"
    path.write_text(json.dumps({"avg_latency": 1.0}))
    assert cli_main(["calibrate", "--gpu", "h100", "--target", "llama-3.1-8b", "--latency", str(path),
                     "--out", str(tmp_path / "p.toml")]) == 2
    err = capsys.readouterr().err
    assert "batch=B,input=I,output=O" in err and len(err.strip().splitlines()) == 1
