"""Stability before SLO, and `plan --rate`: the capacity a configuration holds, found by bisection."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from specgauge.reports.cli import plan
from specgauge.reports.planning.capacity import (CapacityQuery, Sizing, capacity_row, judge, merge_seeds, rate_notes,
                                                 replicas_for, sizing_lines, sizing_table)
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
    assert replicas_for(1e-9, 9.7) == 1          # a rate under one replica's capacity is one replica, never 0
    frame = pd.DataFrame({"gamma": [0, 3, 3], "draft": "eagle", "gpu": "h100-sxm", "tp": [4, 4, 2], "dp": 1, "ep": 1,
                          "batch_size": 256, "acceptance": "iid(0.75)", "capacity_rps": [9.2, 9.7, 2.4],
                          "gpus_per_replica": [4, 4, 2], "capacity_limit": ""})
    table = sizing_table(frame, Sizing(40.0, gpus_per_node=1))
    assert table["gpus"].tolist() == [20, 20, 34] and table.iloc[0]["speculation"] == "eagle γ=3"


def _seed_runs() -> pd.DataFrame:
    """Capacity rows as the search writes them: γ 0 and γ 3 at α 0.6 and 0.8, three seeds each (the 70B at TP 4
    on H100s, 2,000 + 500 tokens, p99 TPOT ≤ 50 ms, as the simulator gave them)."""
    caps = {(0, "iid(0.6)"): [3.931, 4.036, 4.057], (0, "iid(0.8)"): [3.931, 4.036, 4.057],
            (3, "iid(0.6)"): [4.444, 4.574, 4.662], (3, "iid(0.8)"): [5.084, 5.278, 5.381]}
    rows = [{"gpu": "h100-sxm", "target": "llama-3.1-70b", "draft": "eagle", "tp": 4, "dp": 1, "ep": 1,
             "gamma": gamma, "acceptance": alpha, "alpha": float(alpha[4:-1]), "batch_size": 256, "seed": seed,
             "capacity_rps": cap, "capacity_rps_lo": cap / 3, "capacity_rps_hi": cap * 3, "gpus_per_replica": 4,
             "capacity_limit": "tpot:50 missed"}
            for (gamma, alpha), values in caps.items() for seed, cap in enumerate(values)]
    return pd.DataFrame(rows)


def test_each_alpha_gets_its_own_answer_and_the_seeds_one_with_their_spread():
    merged = merge_seeds(_seed_runs())
    assert len(merged) == 4 and set(merged["seeds"]) == {"0,1,2"}
    spec8 = merged[(merged["gamma"] == 3) & (merged["acceptance"] == "iid(0.8)")].iloc[0]
    assert spec8["capacity_rps"] == pytest.approx(np.mean([5.084, 5.278, 5.381]))
    assert (spec8["capacity_rps_seed_min"], spec8["capacity_rps_seed_max"]) == (5.084, 5.381)
    assert spec8["capacity_rps_lo"] == pytest.approx(5.084 / 3) and spec8["capacity_rps_hi"] == pytest.approx(5.381 * 3)
    sizing = Sizing(30.0, gpus_per_node=1)
    table = sizing_table(merged, sizing, world=("acceptance",))
    lines = sizing_lines(table, sizing, world=("acceptance",))
    # one answer per α, each naming it: α 0.6 needs 28 GPUs (30 ÷ 4.56 = 6.6 replicas of 4), α 0.8 needs 24
    spec = [line for line in lines if "with speculation:" in line]
    assert [line.split(":")[0] for line in spec] == ["acceptance iid(0.6)", "acceptance iid(0.8)"]
    assert "28 × h100-sxm GPUs, 7 replicas" in spec[0] and "24 × h100-sxm GPUs, 6 replicas" in spec[1]
    assert all("seeds 0,1,2: " in line for line in spec)
    # every capacity and GPU figure carries its interval
    for figure in ("capacity_rps", "replicas", "gpus", "nodes", "node_gpus"):
        assert {f"{figure}_lo", f"{figure}_hi"} <= set(table) and (table[f"{figure}_lo"] <= table[figure]).all()
        assert (table[figure] <= table[f"{figure}_hi"]).all()
    # without speculation 30 ÷ 4.008 = 7.49 replicas at the mean, 7.39-7.63 across the seeds: no edge; at 31.7 req/s
    # the seeds straddle 8 (7.81-8.06 replicas)
    assert not table.loc[table["speculation"] == "none", "seed_rounding_edge"].any()
    edge = sizing_table(merged, Sizing(31.7, gpus_per_node=1), world=("acceptance",))
    edge = edge[edge["speculation"] == "none"].iloc[0]["seed_rounding_edge"]
    assert "7.81–8.06 replicas across the seeds: within run-to-run noise of a rounding edge (8 or 9 replicas)" in edge


def test_whole_nodes_headroom_and_spares_and_the_comparison_on_rounded_counts():
    merged = merge_seeds(_seed_runs()[lambda f: f["acceptance"] == "iid(0.8)"])
    sizing = Sizing(30.0, headroom=0.2, spare=1, gpus_per_node=8)
    table = sizing_table(merged, sizing)
    spec, base = table[table["speculation"] != "none"].iloc[0], table[table["speculation"] == "none"].iloc[0]
    # 36 ÷ 5.248 = 6.86 -> 7 replicas + 1 = 8 x 4 GPUs = 32 = 4 nodes; 36 ÷ 4.008 = 8.98 -> 9 + 1 = 10 x 4 = 40 = 5 nodes
    assert (spec["replicas"], spec["gpus"], spec["nodes"], spec["node_gpus"]) == (8, 32, 4, 32)
    assert (base["replicas"], base["gpus"], base["nodes"], base["node_gpus"]) == (10, 40, 5, 40)
    text = "\n".join(sizing_lines(table, sizing))
    assert "30 req/s × 1.2 headroom = 36 ÷ 5.248 = 6.86 → 7 replicas + 1 spare (N+1) = 8" in text
    assert "rounded up to whole 8-GPU nodes: 4 nodes, 32 GPUs" in text
    assert "speculation saves 8 GPUs in whole 8-GPU nodes (4 against 5 nodes, 32 against 40 GPUs)" in text
    # at 28 GPUs against 32 the saving vanishes in whole nodes, and the line says so
    flat = sizing_table(merged, Sizing(32.0, gpus_per_node=8))   # 28 GPUs against 32: 4 nodes each
    line = sizing_lines(flat, Sizing(32.0, gpus_per_node=8))[-1]
    assert line == ("speculation saves nothing once rounded to whole 8-GPU nodes (4 against 4 nodes, 32 against 32 "
                    "GPUs); before rounding it saved 4 GPUs.")
    assert Sizing.nodes(3, 16, 8) == 6 and Sizing.nodes(3, 3, 8) == 2 and Sizing(1.0).node_gpus("h200") == 8
    assert Sizing(1.0).node_gpus("a-user-gpu") == 1
    own = merge_seeds(_seed_runs().assign(gpu="a-user-gpu"))
    text = "\n".join(sizing_lines(sizing_table(own, Sizing(30.0)), Sizing(30.0)))
    assert "a-user-gpu has no known node size: single GPUs; --gpus-per-node N rounds to nodes" in text


def test_absurd_rates_get_a_note():
    merged = merge_seeds(_seed_runs())
    low = Sizing(1e-9)
    assert "fewer than one request an hour" in rate_notes(sizing_table(merged, low), low)[0]
    high = Sizing(1e12)
    assert "more than the largest deployments hold" in rate_notes(sizing_table(merged, high), high)[0]
    assert rate_notes(sizing_table(merged, Sizing(30.0)), Sizing(30.0)) == []


def test_a_capacity_s_run_kept_up_strictly():
    ok, why = judge({"stable": True, "served_fraction": 0.95, "queue_growth": 0.0}, parse_slo(None))
    assert not ok and "served 95.0%" in why
    assert not judge({"stable": True, "served_fraction": 1.0, "queue_growth": 0.05}, parse_slo(None))[0]
    assert judge({"stable": True, "served_fraction": 0.99, "queue_growth": 0.01}, parse_slo(None))[0]


def test_plan_rate_answers_per_alpha_states_the_seeds_and_lengthens_short_runs(tmp_path, capsys):
    csv = tmp_path / "size.csv"
    argv = ["--gpu", "h100", "--target", "llama-3.1-8b", "--draft", "eagle", "--gamma", "3", "--alpha", "0.6,0.8",
            "--seed", "0,1", "--output-len", "64", "--requests", "50", "--rate", "30", "--gpus-per-node", "8",
            "--headroom", "0.2", "--csv", str(csv), "--no-progress"]
    assert plan.main(argv) == 0
    out = capsys.readouterr().out
    assert "--requests 50 is too short for a capacity" in out and "running 200 requests a run instead" in out
    runs = pd.read_csv(csv, comment="#")
    assert sorted(set(runs["seed"])) == [0, 1] and set(runs["requests"]) == {200}
    assert {"capacity_rps_lo", "capacity_rps_hi"} <= set(runs) and runs["stable"].all()
    assert (runs["served_fraction"] >= 0.98).all() and (runs["queue_growth"] <= 0.02).all()   # what stable means
    sizing = pd.read_csv(tmp_path / "size_sizing.csv", comment="#")
    assert set(sizing["speculation"]) == {"none", "eagle γ=3"}          # γ 0 joins for the comparison
    assert set(sizing["acceptance"]) == {"iid(0.6)", "iid(0.8)"} and set(sizing["seeds"]) == {"0,1"}
    assert (sizing["gpus"] == sizing["replicas"] * sizing["gpus_per_replica"]).all()
    assert (sizing["node_gpus"] % 8 == 0).all()
    for figure in ("capacity_rps", "replicas", "gpus", "nodes", "node_gpus"):   # every capacity and GPU figure
        assert (sizing[f"{figure}_lo"] <= sizing[figure]).all() and (sizing[figure] <= sizing[f"{figure}_hi"]).all()
    for alpha in ("iid(0.6)", "iid(0.8)"):
        assert f"acceptance {alpha}: 30 req/s with speculation:" in out
        assert f"acceptance {alpha}: 30 req/s without speculation:" in out
    assert "seeds 0,1: " in out and "30 req/s × 1.2 headroom = 36" in out and "whole 8-GPU nodes" in out
    checks = pd.read_csv(tmp_path / "size_measure_next.csv", comment="#")   # the run that settles each answer
    assert len(checks) == 4 and set(checks["scope"]) == {"acceptance iid(0.6)", "acceptance iid(0.8)"}
    assert (checks["request_rate"] * checks["replicas"]).round(6).eq(36.0).all()   # each replica's share of 36
    assert (checks["after_lo"] == checks["interval_lo"]).all() and (checks["after_hi"] <= checks["interval_hi"]).all()
    assert all("--request-rate" in c and ("$SERVER" in c) == (s == "none")
               for c, s in zip(checks["command"], checks["speculation"]))
    assert "Measure next: one replica of " in out and "size_measure_next.csv" in out
    from specgauge.reports import cli

    assert cli.main(["plan", "--rate", "40", "--qps", "8,10", "--csv", str(tmp_path / "x.csv")]) == 2
    assert "drop --qps" in capsys.readouterr().err
    assert cli.main(["plan", "--rate", "40", "--arrival", "closed", "--csv", str(tmp_path / "x.csv")]) == 2
    assert "no rate to search" in capsys.readouterr().err
    assert cli.main(["plan", "--headroom", "0.2", "--csv", str(tmp_path / "x.csv")]) == 2
    assert "--headroom sizes the answer of --rate" in capsys.readouterr().err
    for bad in (["--gpus-per-node", "0"], ["--headroom", "-0.1"], ["--spare-replicas", "1.5"]):
        assert cli.main(["plan", "--rate", "40", *bad, "--csv", str(tmp_path / "x.csv")]) == 2
        assert bad[0] in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


def test_the_capacity_check_is_the_answer_tried_at_each_replica_s_share():
    from specgauge.reports.planning.capacity import Sizing
    from specgauge.reports.planning.capacity_check import check_line, rate_checks

    table = pd.DataFrame({
        "speculation": ["eagle γ=3", "eagle γ=3", "none"], "layout": ["tp 4", "tp 8", "tp 4"],
        "batch_size": [256, 256, 256], "replicas": [6.0, 3.0, float("nan")], "node_gpus": [24.0, 24.0, float("nan")],
        "node_gpus_lo": [8.0, 8.0, float("nan")], "node_gpus_hi": [80.0, 96.0, float("nan")]})
    sizing = Sizing(40.0, headroom=0.25, spare=1)
    checks = rate_checks(table, sizing, (1000, 300))
    assert len(checks) == 1                           # the first feasible row a side; no side without one
    row = checks.iloc[0]
    assert row["request_rate"] == pytest.approx(50.0 / 5)     # 40 × 1.25 over the 5 replicas that serve (one spare)
    assert (row["interval_lo"], row["interval_hi"], row["after_lo"], row["after_hi"]) == (8.0, 80.0, 8.0, 24.0)
    assert "--random-input-len 1000 --random-output-len 300 " in row["command"]
    assert "--request-rate 10 " in row["command"] and "$SPEC_SERVER" in row["command"]
    line = check_line(checks, "tpot:60", "plan_measure_next.csv")
    assert line.startswith("Measure next: one replica of tp 4 (eagle γ=3, batch cap 256) at 10 req/s")
    assert "does not grow and meets tpot:60, 24 GPUs are enough (8–80 now, 8–24 after)" in line
    assert check_line(rate_checks(table.iloc[2:], sizing, (1000, 300)), "", "x.csv") is None
