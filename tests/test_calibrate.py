"""``specgauge calibrate`` recovers known coefficients and writes a profile the simulator uses."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from specgauge.reports.cli import main as cli_main
from specgauge.simulator import IIDAcceptance, SimulationConfig, simulate
from specgauge.reports.cli.calibrate import calibration_prior
from specgauge.simulator.fit import closed_loop_equation, fit_step_model, latency_equation, step_equation
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
    # A closed loop: each step also carries (32 - 1) / 256 prompt prefills of 512 tokens, inside the decode pass.
    m = 31 / 256
    base_eq = closed_loop_equation(32, 512, 256, 0.0, "", prefills=m, mixed=True)
    base.write_text(json.dumps({**shape, "mean_tpot_ms": float(TRUE @ np.array(base_eq.design)) * 1e3}))
    m *= 2.5   # a round emits 2.5 tokens a sequence, so it carries 2.5 times the prefills
    verify = float(TRUE @ [1, (32 - m) * 4 + m * 512, (32 - m) * (512 + 128)]) * 1e3
    round_ms = verify + 2.5   # the verify pass (with the prefills it carries) + a 2.5 ms proposer
    spec.write_text(json.dumps({**shape, "mean_tpot_ms": round_ms / 2.5,
                                "spec_decode_acceptance_length": 2.5,
                                "spec_decode_num_drafts": 1000, "spec_decode_draft_tokens": 3000}))
    out = tmp_path / "mine.toml"
    assert cli_main(["calibrate", "--gpu", "h100", "--target", "llama-3.1-8b", "--steps", str(steps),
                     "--serve", str(base), "--serve", f"{spec}:draft=eagle", "--out", str(out), "--plot"]) == 0
    printed = capsys.readouterr().out
    assert "worst-case error" in printed and (tmp_path / "mine.png").stat().st_size > 0
    points = pd.read_csv(tmp_path / "mine.points.csv")
    fitted = points[points["relative_error"].notna()]
    assert len(fitted) == 55 and fitted["relative_error"].abs().max() == pytest.approx(
        float(printed.split("worst-case error ")[1].split("%")[0]) / 100, abs=1e-3)
    # the serve runs simulated at their own conditions with the written profile come back (the steps are not replayed)
    served = points[points["measurement"].str.contains("serve")]
    assert len(served) == 2 and served["round_trip_error"].abs().max() < 0.03, served
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


# --------------------------------------------------------------------------- what users have


def _latency_files(tmp_path, batches, input_lens, output_len=128):
    args = []
    for batch in batches:
        for input_len in input_lens:
            eq = latency_equation(batch, input_len, output_len, 1.0, "")
            seconds = float(TRUE @ np.array(eq.design)) * output_len
            path = tmp_path / f"lat{batch}_{input_len}.json"
            path.write_text(json.dumps({"avg_latency": seconds}))
            args += ["--latency", f"{path}:batch={batch},input={input_len},output={output_len}"]
    return args


def test_a_batch_sweep_at_one_length_holds_the_kv_term_at_the_prior_and_says_so(tmp_path, capsys):
    out = tmp_path / "p.toml"
    argv = ["calibrate", "--gpu", "h100", "--target", "llama-3.1-8b", "--out", str(out)]
    assert cli_main(argv + _latency_files(tmp_path, (1, 8, 32, 128), (512,))) == 0
    printed = capsys.readouterr().out
    notes = [line for line in printed.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "c_kv" in notes[0] and "datasheet prior" in notes[0]
    assert "c_token" in printed and "±" in printed                    # the rest with standard errors
    fit = load_step_fit("llama-3.1-8b", "h100-sxm", 1, str(out))
    assert fit.c_kv_ns == pytest.approx(PRIOR.c_kv * 1e9, rel=1e-6) and "held at the datasheet prior" in fit.source
    # The docs' sweep (batch sizes x two prompt lengths) separates all three terms.
    out2 = tmp_path / "q.toml"
    assert cli_main(["calibrate", "--gpu", "h100", "--target", "llama-3.1-8b", "--out", str(out2)]
                    + _latency_files(tmp_path, (1, 8, 32, 128), (128, 2048))) == 0
    assert "note:" not in capsys.readouterr().out
    assert load_step_fit("llama-3.1-8b", "h100-sxm", 1, str(out2)).c_kv_ns == pytest.approx(TRUE[2] * 1e9, rel=1e-4)


def test_a_custom_gpu_calibrated_once_simulates_from_the_one_output_file(tmp_path):
    rtx = tmp_path / "rtx.toml"
    rtx.write_text('[gpus."rtx-6000"]\npeak_tflops = 364.0\nbandwidth_tb_s = 0.96\nmemory_gib = 95.0\n')
    out = tmp_path / "rtx-calibrated.toml"
    assert cli_main(["calibrate", "--gpu", "rtx-6000", "--target", "llama-3.1-8b", "--profiles", str(rtx),
                     "--out", str(out)] + _latency_files(tmp_path, (1, 16, 64), (128, 2048))) == 0
    row = simulate(SimulationConfig(gpu="rtx-6000", target="llama-3.1-8b", draft="eagle", gamma=3, requests=8,
                                    output_len=32, profiles=str(out)))
    assert row["step_model_source"].startswith("fitted by specgauge calibrate")
    # several files merge, later ones winning field by field
    faster = tmp_path / "faster.toml"
    faster.write_text('[gpus."rtx-6000"]\nbandwidth_tb_s = 1.5\n')
    from specgauge.simulator import load_gpu
    merged = load_gpu("rtx-6000", f"{out},{faster}")
    assert merged.bandwidth_tb_s == 1.5 and merged.peak_tflops == 364.0


def closed_loop_tpot_ms(c, prompt=512, output=128):
    """A closed loop's mean TPOT under TRUE: each step carries (c - 1) / output prefills inside its pass."""
    eq = closed_loop_equation(c, prompt, output, 0.0, "", (c - 1) / output, mixed=True)
    return float(TRUE @ np.array(eq.design)) * 1e3


def closed_loop_round_tpot_ms(c, gamma, length, beyond_ms, prompt=512, output=128):
    """A speculative closed loop's mean TPOT: a round's verify pass carries ``length`` times a step's
    prefills; ``beyond_ms(prompt_tokens)`` is what the round costs beyond it (engine and proposer),
    given the prompt tokens the proposer ingests."""
    m = (c - 1) / output * length
    verify = float(TRUE @ [1, (c - m) * (gamma + 1) + m * prompt, (c - m) * (prompt + output / 2)]) * 1e3
    return (verify + beyond_ms(m * prompt)) / length


def _serve(path, concurrency, tpot_ms, **spec):
    path.write_text(json.dumps({"completed": 100, "total_input_tokens": 100 * 512, "total_output_tokens": 100 * 128,
                                "max_concurrency": concurrency, "mean_tpot_ms": tpot_ms, **spec}))
    return str(path)


def test_serve_pairs_at_two_loads_calibrate_a_2024_ngram_slowdown(tmp_path, capsys):
    # A vLLM-0.6-like engine: each speculative step costs 1 ms more and the n-gram proposer
    # 40 us per drafted token (CPU work per sequence), so speculation pays at batch 1 and
    # loses at batch 128.
    steps = tmp_path / "steps.csv"
    synthetic_steps(np.random.default_rng(7), noise=0.0).to_csv(steps, index=False)
    gamma, length = 4, 2.0
    args = ["--steps", str(steps)]
    for c in (1, 128):
        args += ["--serve", _serve(tmp_path / f"base{c}.json", c, closed_loop_tpot_ms(c))]
        tpot = closed_loop_round_tpot_ms(c, gamma, length, lambda prompt_tokens: 1.0 + 0.040 * (c * gamma + prompt_tokens))
        spec = {"spec_decode_acceptance_length": length, "spec_decode_num_drafts": 1000,
                "spec_decode_draft_tokens": 1000 * gamma}
        args += ["--serve", _serve(tmp_path / f"spec{c}.json", c, tpot, **spec) + ":draft=ngram"]
    out = tmp_path / "old-vllm.toml"
    assert cli_main(["calibrate", "--gpu", "h100", "--target", "llama-3.1-8b", "--out", str(out)] + args) == 0
    assert "per speculative step" in capsys.readouterr().out
    target = load_step_fit("llama-3.1-8b", "h100-sxm", 1, str(out))
    proposer = load_step_fit("ngram:llama-3.1-8b", "h100-sxm", 1, str(out))
    assert target.spec_overhead_ms == pytest.approx(1.0, rel=0.05)
    assert proposer.c_token_us == pytest.approx(40.0, rel=0.05)

    def speedup(batch, profiles):
        return simulate(SimulationConfig(gpu="h100", target="llama-3.1-8b", draft="ngram", gamma=gamma,
                                         acceptance=IIDAcceptance(0.6), empty_proposals=0.0, batch_size=batch,
                                         requests=3 * batch, prompt_len=512, output_len=128,
                                         profiles=profiles))["speedup_vs_no_spec"]
    assert speedup(1, str(out)) > 1.3 and speedup(128, str(out)) < 0.9          # the 2024 slowdown
    assert speedup(128, None) > 1.0                                              # today's engine: none


@pytest.mark.parametrize("content,suffix,message", [
    ("gpus = 5\n", ".toml", "'gpus' must be a table"),
    ('{"gpus": [1, 2]}', ".json", "'gpus' must be a table"),
    ('{"gpus": {"g": 5}}', ".json", "[gpus.g] must be a table"),
    ('[gpus."new-gpu"]\npeak_tflops = 100.0\n', ".toml", "missing field(s) bandwidth_tb_s"),
    ("[[gpus]]\n", ".toml", "'gpus' must be a table"),
])
def test_malformed_profile_files_are_one_line_exit_2_nothing_written(tmp_path, capsys, content, suffix, message):
    path = tmp_path / f"bad{suffix}"
    path.write_text(content)
    csv = tmp_path / "out.csv"
    gpu = "new-gpu" if "new-gpu" in content else "h100"
    assert cli_main(["simulate", "--gpu", gpu, "--target", "llama-3.1-8b", "--profiles", str(path),
                     "--requests", "4", "--csv", str(csv)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and not csv.exists()
    out = tmp_path / "p.toml"
    assert cli_main(["calibrate", "--gpu", gpu, "--target", "llama-3.1-8b", "--profiles", str(path),
                     "--out", str(out)] + _latency_files(tmp_path, (1, 8, 32), (128, 1024))) == 2
    assert message in capsys.readouterr().err and not out.exists()


def test_one_field_over_a_known_gpu_merges(tmp_path):
    from specgauge.simulator import load_gpu

    path = tmp_path / "h100.toml"
    path.write_text('[gpus.h100]\nbandwidth_tb_s = 3.0\n')
    gpu = load_gpu("h100-sxm", str(path))
    assert gpu.bandwidth_tb_s == 3.0 and gpu.peak_tflops == load_gpu("h100").peak_tflops
    row = simulate(SimulationConfig(gpu="h100", target="llama-3.1-8b", draft="ngram", gamma=2, requests=4,
                                    output_len=16, profiles=str(path)))
    assert row["completed"] == 4


@pytest.mark.parametrize("case", ["ms", "out-folder", "header-only", "batch-x", "kv"])
def test_bad_calibrate_inputs_are_one_line_exit_2_nothing_written(tmp_path, capsys, case):
    steps = tmp_path / "steps.csv"
    out = tmp_path / "p.toml"
    steps.write_text("batched_tokens,kv_tokens,ms\n1,100,5.0\n8,800,fast\n")
    argv = ["calibrate", "--gpu", "h100", "--target", "llama-3.1-8b", "--out", str(out)]
    expect = {"ms": ["steps.csv", "line 3", "column 3", "'fast'"]}
    if case == "out-folder":
        argv[-1] = str(tmp_path)
        argv += _latency_files(tmp_path, (1, 8, 32), (128, 1024))
        expect[case] = ["is a folder"]
    elif case == "header-only":
        steps.write_text("batched_tokens,kv_tokens,ms\n")
        argv += ["--steps", str(steps)]
        expect[case] = ["steps.csv", "no rows"]
    elif case == "batch-x":
        lat = tmp_path / "f.json"
        lat.write_text(json.dumps({"avg_latency": 1.0}))
        argv += ["--latency", f"{lat}:batch=x,input=512,output=128"]
        expect[case] = ["batch='x'", "integer"]
    elif case == "kv":
        steps.write_text("batched_tokens,kv_tokens,ms\n1,-5,5.0\n")
        argv += ["--steps", str(steps)]
        expect[case] = ["line 2", "column 2", "kv_tokens"]
    else:
        argv += ["--steps", str(steps)]
    before = set(tmp_path.iterdir())
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and all(text in err for text in expect[case]), err
    assert set(tmp_path.iterdir()) == before


def test_sglang_bench_serving_results_calibrate_like_vllms(tmp_path, capsys):
    """The same runs written as ``sglang.bench_serving`` writes them (``accept_length``, no draft
    counts, γ given in the suffix) give the same fit as vLLM's files; without ``gamma=`` the
    speculative file is refused in one line."""
    steps = tmp_path / "steps.csv"
    synthetic_steps(np.random.default_rng(7), noise=0.0).to_csv(steps, index=False)
    gamma, length = 4, 2.0
    vllm_args, sglang_args = ["--steps", str(steps)], ["--steps", str(steps)]
    for c in (1, 128):
        base = closed_loop_tpot_ms(c)
        tpot = closed_loop_round_tpot_ms(c, gamma, length, lambda prompt_tokens: 1.0 + 0.040 * (c * gamma + prompt_tokens))
        vllm_args += ["--serve", _serve(tmp_path / f"vb{c}.json", c, base),
                      "--serve", _serve(tmp_path / f"vs{c}.json", c, tpot,
                                        spec_decode_acceptance_length=length, spec_decode_num_drafts=1000,
                                        spec_decode_draft_tokens=1000 * gamma) + ":draft=ngram"]
        sglang_args += ["--serve", _serve(tmp_path / f"sb{c}.json", c, base, accept_length=None),
                        "--serve", _serve(tmp_path / f"ss{c}.json", c, tpot,
                                          accept_length=length) + f":draft=ngram,gamma={gamma}"]
    fits = []
    for name, args in (("vllm", vllm_args), ("sglang", sglang_args)):
        out = tmp_path / f"{name}.toml"
        assert cli_main(["calibrate", "--gpu", "h100", "--target", "llama-3.1-8b", "--out", str(out)] + args) == 0
        fits.append((load_step_fit("llama-3.1-8b", "h100-sxm", 1, str(out)),
                     load_step_fit("ngram:llama-3.1-8b", "h100-sxm", 1, str(out))))
    (vt, vp), (st, sp) = fits
    assert st.spec_overhead_ms == pytest.approx(vt.spec_overhead_ms) == pytest.approx(1.0, rel=0.05)
    assert sp.c_token_us == pytest.approx(vp.c_token_us) == pytest.approx(40.0, rel=0.05)
    capsys.readouterr()
    no_gamma = [a.replace(f",gamma={gamma}", "") for a in sglang_args]
    assert cli_main(["calibrate", "--gpu", "h100", "--target", "llama-3.1-8b", "--out",
                     str(tmp_path / "x.toml")] + no_gamma) == 2
    assert "gamma=N" in capsys.readouterr().err


@pytest.mark.parametrize("case", ["model-id", "same-path", "copy", "one-load-two-tpots", "falling"])
def test_runs_of_another_model_repeated_or_inconsistent_are_refused_with_the_reason(tmp_path, capsys, case):
    """Each of these wrote a profile and exited 0: an 8B's runs read into a 70B profile, one file counted twice,
    two runs at concurrency 8 measuring 33.5 and 90 ms, a TPOT that falls as the load rises."""
    argv = ["calibrate", "--gpu", "h100", "--target", "llama-3.1-70b", "--tp", "4", "--out", str(tmp_path / "p.toml")]
    base = _serve(tmp_path / "base8.json", 8, 33.5, model_id="meta-llama/Meta-Llama-3.1-70B-Instruct")
    other = {"model-id": lambda: (_serve(tmp_path / "b.json", 64, 60.0, model_id="meta-llama/Llama-3.1-8B-Instruct"),
                                  "model_id 'meta-llama/Llama-3.1-8B-Instruct' is not the profile 'llama-3.1-70b'"),
             "same-path": lambda: (base, "base8.json' is given twice: a run counts once"),
             "copy": lambda: (_serve(tmp_path / "copy.json", 8, 33.5, model_id="meta-llama/Meta-Llama-3.1-70B-Instruct"),
                              "holds the same bytes as"),
             "one-load-two-tpots": lambda: (_serve(tmp_path / "b.json", 8, 90.0), "mean TPOT 33.5 and 90 ms (2.69x)"),
             "falling": lambda: (_serve(tmp_path / "b.json", 64, 20.0), "mean TPOT falls with load")}
    path, words = other[case]()
    before = set(tmp_path.iterdir())
    assert cli_main([*argv, "--serve", base, "--serve", path]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1, err
    assert set(tmp_path.iterdir()) == before
    if case == "model-id":   # the same model under another name: the user says so
        assert cli_main([*argv, "--serve", base, "--serve", path, "--allow-model-mismatch"]) == 0


def test_the_calibrate_figure_counts_the_speculative_runs_in_its_worst_figure():
    from specgauge.reports.figures.curves import calibration_title

    points = pd.DataFrame({"measurement": ["base8", "base64", "eagle8"], "measured_ms": [5.0, 15.0, 4.0],
                           "fitted_ms": [5.05, 14.9, np.nan], "relative_error": [0.01, -0.0067, np.nan],
                           "simulated_ms": [5.05, 15.0, 4.152], "round_trip_error": [0.01, 0.0, 0.038]})
    assert calibration_title(points, "llama") == "llama\nworst: fit 1.0%, round trip 3.8% (3 runs)"
