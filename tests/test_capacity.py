"""Stability before SLO, and `plan --rate`: the capacity a configuration holds, found by bisection."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from specgauge.reports.cli import plan
from specgauge.reports.planning.capacity import CapacityQuery, capacity_row, judge, replicas_for, sizing_table
from specgauge.reports.planning.decisions import decide, slo_capacity
from specgauge.reports.planning.slo import parse_slo
from specgauge.simulator import SimulationConfig, simulate
from specgauge.simulator.metrics import stability

SEVENTY_B = dict(gpu="h100-sxm", target="llama-3.1-70b", draft="eagle", batch_size=256, prompt_len=1000,
                 output_len=300, requests=400)


def test_a_queue_served_too_slowly_is_unstable_and_a_kept_up_one_is_not():
    rng = np.random.default_rng(0)
    arrival = np.cumsum(rng.exponential(0.1, 1000))          # 10 req/s
    service = 0.5
    kept_up = arrival + service + rng.uniform(0, 0.05, 1000)  # reference: served as it comes
    assert stability(arrival, kept_up - 0.4, kept_up).stable
    slow = np.arange(1, 1001) / 9.0                           # known-bad: 9 req/s served of 10 offered
    slow = np.maximum(slow, arrival + service)
    result = stability(arrival, slow - 0.4, slow)
    assert not result.stable and result.served_fraction < 0.98 and result.queue_growth > 0.02
    # served within 2 % but the wait still grows: the queue's test catches what the rate's misses
    creeping = arrival + service + 0.03 * (arrival - arrival[0])
    assert not stability(arrival, creeping - 0.4, creeping).stable


def test_a_short_run_s_bursts_are_not_read_as_a_growing_queue():
    # 200 requests at 40 req/s on an H100 serving Llama-3.1-8B: batches of 6-20, 0.4 s a request, so the run
    # is stable, but a burst near its end lifts the count's slope to a 9 % shortfall; beyond 64 req/s (its
    # saturated rate) it is not
    config = SimulationConfig(gpu="h100", target="llama-3.1-8b", draft="eagle", gamma=3, batch_size=256,
                              output_len=64, requests=200)
    calm = simulate(replace(config, qps=40.0))
    assert calm["served_fraction"] < 0.98 and calm["stable"]
    assert not simulate(replace(config, qps=70.0))["stable"]


def test_an_overloaded_run_never_meets_an_slo():
    # TP 2 holds 12 sequences of 1,000 + 300 tokens: at 20 req/s it serves about 2.5; the TPOT alone looks fine
    rows = [simulate(SimulationConfig(tp=2, gamma=g, qps=q, **SEVENTY_B)) for g in (0, 3) for q in (1.0, 20.0)]
    frame = pd.DataFrame(rows)
    overloaded = frame[frame["qps"] == 20.0]
    assert not overloaded["stable"].any() and (overloaded["p99_tpot_ms"] < 60).all()
    assert frame[frame["qps"] == 1.0]["stable"].all()
    got = pd.DataFrame(slo_capacity(frame, [], parse_slo("tpot:60"))).set_index("decision")
    assert got.loc["max_slo_request_rate_spec", "qps"] == 1.0
    assert got.loc["max_slo_request_rate_no_spec", "qps"] == 1.0
    only_overloaded = pd.DataFrame(slo_capacity(overloaded, [], parse_slo("tpot:60")))
    assert only_overloaded["value"].isna().all()
    assert all("stable queue" in d for d in only_overloaded["detail"])
    ok, why = judge(overloaded.iloc[0].to_dict(), parse_slo("tpot:60"))
    assert not ok and why.startswith("unstable")
    # the best γ at an overloaded load says what it rests on
    best = decide(frame, ["gpu", "tp", "gamma", "batch_size", "qps"], parse_slo(None))
    best = best[best["decision"] == "best_gamma_latency"].set_index("qps")["detail"]
    assert "an unstable run" in best[20.0] and "unstable" not in best[1.0]


def _passes(config: SimulationConfig, qps: float, slo) -> bool:
    return judge(simulate(replace(config, qps=qps)), slo)[0]


def test_the_capacity_matches_a_bisection_by_hand_within_two_percent():
    config = SimulationConfig(tp=4, gamma=3, **{**SEVENTY_B, "requests": 1000})  # long enough to reach its steady state
    slo = parse_slo("tpot:60")
    row = capacity_row(CapacityQuery(config, str(slo)))
    found = row["capacity_rps"]
    # by hand: a grid, then halving the bracket between its last pass and first failure
    grid = [2.0, 4.0, 8.0, 16.0, 32.0]
    passed = [q for q in grid if _passes(config, q, slo)]
    lo, hi = max(passed), min(q for q in grid if q > max(passed))
    while hi - lo > 0.005 * lo:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _passes(config, mid, slo) else (lo, mid)
    assert found == pytest.approx(lo, rel=0.02)
    assert row["stable"] and row["p99_tpot_ms"] <= 60 and row["qps"] == found
    assert not _passes(config, found * 1.02, slo)


def test_replicas_and_the_cheapest_first():
    assert replicas_for(40, 9.7) == 5 and replicas_for(40, 10.0) == 4 and np.isnan(replicas_for(40, float("nan")))
    frame = pd.DataFrame({"gamma": [0, 3, 3], "draft": "eagle", "gpu": "h100-sxm", "tp": [4, 4, 2], "dp": 1, "ep": 1,
                          "batch_size": 256, "acceptance": "iid(0.75)", "capacity_rps": [9.2, 9.7, 2.4],
                          "gpus_per_replica": [4, 4, 2], "capacity_limit": ""})
    table = sizing_table(frame, 40.0)
    assert table["gpus"].tolist() == [20, 20, 34] and table.iloc[0]["speculation"] == "eagle γ=3"


def test_plan_rate_is_one_command_and_ignores_no_grid(tmp_path, capsys):
    csv = tmp_path / "size.csv"
    argv = ["--gpu", "h100", "--target", "llama-3.1-70b", "--draft", "eagle", "--tp", "4", "--prompt-len", "1000",
            "--output-len", "300", "--gamma", "3", "--requests", "400", "--slo", "tpot:60", "--rate", "40",
            "--csv", str(csv), "--no-progress"]
    assert plan.main(argv) == 0
    out = capsys.readouterr().out
    sizing = pd.read_csv(tmp_path / "size_sizing.csv")
    assert set(sizing["speculation"]) == {"none", "eagle γ=3"}          # γ 0 joins for the comparison
    assert (sizing["gpus"] == sizing["replicas"] * sizing["gpus_per_replica"]).all()
    assert sizing["gpus"].is_monotonic_increasing
    assert "40 req/s with speculation:" in out and "40 req/s without speculation:" in out
    from specgauge.reports import cli

    assert cli.main(["plan", "--rate", "40", "--qps", "8,10", "--csv", str(tmp_path / "x.csv")]) == 2
    assert "drop --qps" in capsys.readouterr().err
    assert cli.main(["plan", "--rate", "40", "--arrival", "closed", "--csv", str(tmp_path / "x.csv")]) == 2
    assert "no rate to search" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()
