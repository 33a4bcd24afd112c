"""``specgauge validate``: a team's own rows read at the door (vLLM and SGLang bench results, CSV
rows), refused in one line when they cannot be predicted; the full run prints shares and coverage."""

from __future__ import annotations

import json

import pytest

from specgauge.reports.cli import main
from specgauge.reports.planning import validation as V

VLLM_RESULT = {"completed": 64, "max_concurrency": 8, "total_input_tokens": 64 * 1000, "total_output_tokens": 64 * 250,
               "mean_tpot_ms": 14.2, "output_throughput": 530.0}


def _json(tmp_path, data, name="run.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_a_vllm_result_becomes_a_tpot_row_at_its_concurrency(tmp_path):
    path = _json(tmp_path, VLLM_RESULT)
    row = V.rows_from_result(f"{path}:gpu=h100,target=llama-3.1-8b,source=ours").iloc[0]
    assert (row["measured"], float(row["published"]), row["batch_size"]) == ("tpot_ms", 14.2, "8")
    assert (row["prompt_len"], row["output_len"], row["gamma"], row["source"]) == ("1000", "250", "0", "ours")


def test_a_serve_result_is_simulated_as_the_closed_loop_its_client_ran(tmp_path):
    """``--max-concurrency`` holds that many requests in flight: the row runs the simulator's closed
    loop in its steady state, not every request at once in lock-step waves."""
    path = _json(tmp_path, VLLM_RESULT)
    row = V.rows_from_result(f"{path}:gpu=h100,target=llama-3.1-8b").iloc[0]
    config = V.row_config(row)
    assert (row["arrival"], config.arrival, config.batch_size, config.qps) == ("closed", "closed", 8, None)


def test_the_shipped_rows_run_as_their_sources_sent_requests():
    """Runs at a max concurrency are closed loops; runs at a request rate Poisson; offline batches and
    runs sending every prompt at once keep the saturated default."""
    table = V.shipped_table()
    closed = table[table["arrival"] == "closed"]
    assert set(closed["source"]) == {"[10]", "[11]", "[19]", "[21]"} and (closed["qps"] == "").all()
    assert (table.loc[table["qps"] != "", "arrival"] == "poisson").all()
    assert V.row_config(closed.iloc[0]).arrival == "closed"


def test_the_coverage_is_printed_for_every_interval_group_with_its_load_bands():
    """The intervals are computed per figure, kind, profile and load band: each band's coverage and
    median half-width is printed under its figure, kind and profile."""
    import math

    import pandas as pd

    from specgauge.reports.cli.validate import coverage_lines

    rows = pd.DataFrame({"role": ["predicted"] * 4, "source": ["[a]", "[a]", "[b]", "[c]"],
                         "kind": ["moe"] * 4, "profile": ["prior"] * 4, "load": [1.0, 8.0, 8.0, 64.0],
                         "q": [math.log(2.0), math.log(1.2), math.log(1.4), math.inf],
                         "covered": [True, True, False, True]})
    lines = coverage_lines(rows, 0.9)
    assert "3 of 4 predicted rows covered" in lines[0]
    body = [line.split() for line in lines[2:]]
    assert body[0][:5] == ["absolute,", "moe,", "prior", "profile", "4"]
    assert body[1] == ["batch", "1", "1", "1", "100%", "±100%"]
    assert body[2] == ["batch", "2-16", "2", "2", "50%", "±30%"]
    assert body[3] == ["batch", "over", "16", "1", "1", "100%", "unbounded"]


def test_an_sglang_speculative_result_takes_alpha_from_its_accept_length(tmp_path):
    path = _json(tmp_path, {**VLLM_RESULT, "accept_length": 2.4})
    row = V.rows_from_result(f"{path}:gpu=h200,target=qwen3-32b,draft=eagle,gamma=3").iloc[0]
    assert (row["alpha"], float(row["accepted_length"]), row["draft"], row["gamma"]) == ("length", 2.4, "eagle", "3")


def test_a_speculative_run_and_its_baseline_are_labelled_apart(tmp_path):
    base = V.rows_from_result(f"{_json(tmp_path, VLLM_RESULT)}:gpu=h200,target=qwen3-32b").iloc[0]
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps({**VLLM_RESULT, "accept_length": 2.4}))
    spec = V.rows_from_result(f"{spec_path}:gpu=h200,target=qwen3-32b,draft=eagle,gamma=3").iloc[0]
    assert base["setup"] != spec["setup"] and "eagle γ=3" in spec["setup"] and "eagle" not in base["setup"]


@pytest.mark.parametrize("suffix, words", [
    (":gpu=h100", "does not record its deployment"),
    (":gpu=h100,target=no-such-model", "unknown model"),
    (":gpu=h100,target=llama-3.1-8b,colour=blue", "unknown option 'colour'"),
])
def test_a_bad_result_is_one_line_and_exit_status_2(tmp_path, capsys, suffix, words):
    path = _json(tmp_path, VLLM_RESULT)
    assert main(["validate", "--add", f"{path}{suffix}"]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err


@pytest.mark.parametrize("suffix", ["", ":gpu=h100,target=llama-3.1-70b"])
def test_a_missing_result_file_is_named_as_missing(tmp_path, capsys, suffix):
    """Whether or not its deployment is given, a missing file is refused for being missing."""
    assert main(["validate", "--add", str(tmp_path / "absent.json") + suffix]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not exist" in err[0] and "deployment" not in err[0], err


def test_a_speculative_result_without_its_draft_is_refused(tmp_path, capsys):
    path = _json(tmp_path, {**VLLM_RESULT, "spec_decode_acceptance_length": 2.1})
    assert main(["validate", "--add", f"{path}:gpu=h100,target=llama-3.1-8b"]) == 2
    assert "say what drafted" in capsys.readouterr().err


@pytest.mark.parametrize("body, words", [
    ("source,setup\n[x],a row\n", "lacks column(s) measured, published, gpu, target"),
    ("source,setup,measured,published,gpu,target\n[x],r,speed,1.2,h100,llama-3.1-8b\n", "measured 'speed' is not one of"),
    ("source,setup,measured,published,gpu,target\n[x],r,speedup,-1,h100,llama-3.1-8b\n", "published must be a number > 0"),
    ("source,setup,measured,published,gpu,target,alpha\n[x],r,speedup,1.2,h100,llama-3.1-8b,row:nope\n", "names no row id"),
    ("source,setup,measured,published,gpu,target\n", "header but no rows"),
    ("source,setup,measured,published,gpu,target,arrival\n[x],r,tpot_ms,7,h100,llama-3.1-8b,burst\n",
     "arrival 'burst' is not one of closed, poisson"),
    ("source,setup,measured,published,gpu,target,arrival,qps\n[x],r,tpot_ms,7,h100,llama-3.1-8b,closed,2\n",
     "arrival closed holds batch_size requests in flight; drop qps"),
    ("source,setup,measured,published,gpu,target,arrival\n[x],r,tpot_ms,7,h100,llama-3.1-8b,poisson\n",
     "arrival poisson needs a qps"),
])
def test_a_bad_csv_is_one_line_and_exit_status_2(tmp_path, capsys, body, words):
    path = tmp_path / "rows.csv"
    path.write_text(body)
    assert main(["validate", "--add", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "\n" not in err


def test_the_level_is_checked(capsys):
    assert main(["validate", "--level", "1.5"]) == 2
    assert "--level must be in [0.5, 1)" in capsys.readouterr().err


def test_a_csv_in_the_shipped_schema_is_read(tmp_path):
    path = tmp_path / "rows.csv"
    path.write_text("source,setup,measured,published,gpu,target,tp,batch_size,gamma,draft\n"
                    "ours,TPOT batch 1,tpot_ms,7.5,h100,llama-3.1-8b,1,1,0,none\n")
    table = V.rows_from_result(str(path))
    assert table.iloc[0]["role"] == "predicted" and table.iloc[0]["id"] == "row1"


@pytest.mark.slow
def test_validate_prints_shares_and_coverage_with_a_users_row(tmp_path, capsys):
    path = _json(tmp_path, VLLM_RESULT)
    assert main(["validate", "--no-table", "--add", f"{path}:gpu=h100,target=llama-3.1-8b"]) == 0
    out = capsys.readouterr().out
    assert "in sample:" in out and "leave one source out:" in out
    assert "90% intervals, each source held out:" in out and "your rows: " in out
    covered = out.split("intervals, each source held out: ")[1]
    hits, n = (int(x) for x in covered.split(" predicted")[0].split(" of "))
    assert hits / n >= 0.88
