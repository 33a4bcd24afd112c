"""Leave-one-source-out validation (benchmarks/validate.py --loso): each fold refits what the table
taught the simulator without the held-out source, and the headline counts predicted rows only."""

from __future__ import annotations

import importlib.util
import math
import tomllib
from pathlib import Path

import pandas as pd
import pytest

from specgauge.simulator import SimulationConfig
from specgauge.simulator.core import resolve

spec = importlib.util.spec_from_file_location("validate", Path(__file__).parents[1] / "benchmarks" / "validate.py")
validate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(validate)

PASSES = {validate.SPECDECODE: 0.38, validate.VLLM_K: 0.68}
MOE = {validate.AMD_MTP: [3.0, 6.0], validate.AMD_EAGLE3: [1.5, 3.5]}


def _fold(tmp_path, held_out):
    path = validate.fold_profile(held_out, str(tmp_path / "fold.toml"), PASSES, MOE)
    return path, tomllib.loads(Path(path).read_text())


def test_a_fold_learns_nothing_from_its_held_out_source(tmp_path):
    _, amd = _fold(tmp_path, validate.AMD_MTP)
    assert amd["gpus"]["h100-sxm"]["moe_token_factor"] == pytest.approx(math.sqrt(1.5 * 3.5))
    assert amd["gpus"]["h100-sxm"]["draft_pass_overhead_ms"] == 0.38
    path, first = _fold(tmp_path, validate.SPECDECODE)
    assert first["gpus"]["h100-sxm"]["draft_pass_overhead_ms"] == 0.68          # from [14], not [1]
    assert first["gpus"]["h100-sxm"]["moe_token_factor"] == pytest.approx((3.0 * 6.0 * 1.5 * 3.5) ** 0.25)
    # [1]'s fits give way to the datasheet prior
    setup = resolve(SimulationConfig(gpu="h100", target="llama-3.1-8b", draft="eagle", gamma=3, profiles=path))
    assert setup.target_cost.source.startswith("datasheet prior")


def test_the_estimates_come_from_the_sources_numbers():
    passes = validate.pass_overhead_estimates()
    assert passes[validate.SPECDECODE] == pytest.approx(0.712 - validate._head_pass_s() * 1e3)
    assert passes[validate.VLLM_K] == pytest.approx(0.68, abs=0.02)    # slope of TPOT x length over K, less the head


def test_the_headline_counts_predicted_rows_only():
    folds = pd.DataFrame({"source": ["[1]", "[1]", "[2]", "[2]"], "role": ["predicted", "calibrated", "predicted",
                                                                       "predicted"],
                          "ratio": [1.1, 3.0, 1.2, 0.9]})
    shipped = folds.assign(ratio=[1.0, 1.0, 1.0, 1.0])
    lines = validate.loso_summary(folds, shipped)
    assert lines[0].startswith("leave one source out: 2 of 3 predicted rows within ±15 % (67%)")
    assert "in-sample (the shipped table): 3 of 3" in lines[0]
