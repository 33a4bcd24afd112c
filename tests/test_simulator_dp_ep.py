"""DP attention and expert parallelism (--dp, --ep): attention and KV per data-parallel rank, the
routed experts over every GPU, the MoE layers' token exchange, and what refuses to run."""

from __future__ import annotations

import pandas as pd
import pytest

from specgauge.errors import ConfigError
from specgauge.reports.cli import main as cli_main
from specgauge.simulator import SimulationConfig, memory_plan, simulate
from specgauge.simulator.core import resolve
from specgauge.simulator.cost import PassCost
from specgauge.simulator.profiles import load_gpu, load_model

V3 = dict(gpu="h200", target="deepseek-v3", draft=None, gamma=0, prompt_len=2048, output_len=256)


def test_dense_targets_and_uneven_splits_are_refused():
    with pytest.raises(ConfigError, match="dense"):
        resolve(SimulationConfig(gpu="h100", target="llama-3.1-70b", draft=None, gamma=0, tp=4, dp=2))
    with pytest.raises(ConfigError, match="must divide the 8 GPUs"):
        SimulationConfig(**V3, tp=1, dp=8, ep=3)
    with pytest.raises(ConfigError, match="routed experts"):
        resolve(SimulationConfig(gpu="h200", target="qwen3-30b-a3b", draft=None, gamma=0, tp=1, dp=6, ep=6))


def test_dp_attention_keeps_each_ranks_kv_and_spreads_the_experts():
    model = load_model("deepseek-v3")
    tp8, dp8 = memory_plan(SimulationConfig(**V3, tp=8)), memory_plan(SimulationConfig(**V3, tp=1, dp=8))
    routed = model.moe_layers * model.experts * model.expert_params * model.dtype_bytes
    assert dp8.target_weight_bytes == pytest.approx((model.weight_bytes - routed) + routed / 8)
    # TP replicates MLA's latent on every GPU; DP ranks hold their own requests' KV only
    assert dp8.max_concurrency_no_draft > 4 * tp8.max_concurrency_no_draft


def test_dp_ranks_read_their_own_kv_so_a_long_context_batch_runs_faster_than_under_tp():
    """Known-bad case: TP 8 as a stand-in for DP 8 reads the whole MLA latent on every GPU."""
    def tpot(**kw):
        return simulate(SimulationConfig(**V3, batch_size=256, requests=512, **kw))["mean_tpot_ms"]
    assert tpot(tp=1, dp=8, ep=8) < 0.8 * tpot(tp=8)


def test_expert_parallelism_prices_a_dispatch_and_a_combine_per_token():
    gpu, model = load_gpu("h200"), load_model("deepseek-v3")
    base = PassCost.prior(gpu, model, 1).split_ranks(8)
    ep = PassCost.prior(gpu, model, 1, dp=8, ep=8)
    per_token = model.moe_layers * model.experts_per_token * (1 - 1 / 8) * model.hidden * 3 / 8
    assert ep.c_token - base.c_token == pytest.approx(per_token / gpu.link_bandwidth)
    assert ep.c_fixed - base.c_fixed == pytest.approx(2 * model.moe_layers * gpu.allreduce_latency_us * 1e-6)
    assert ep.c_expert == pytest.approx(PassCost.prior(gpu, model, 8).c_expert)   # each GPU reads 1/8 of the experts


def test_an_mtp_head_runs_on_each_rank_with_its_share_of_the_batch():
    wide = resolve(SimulationConfig(gpu="h200", target="deepseek-v3", draft="mtp", gamma=2, tp=1, dp=8, ep=8))
    alone = resolve(SimulationConfig(gpu="h200", target="deepseek-v3", draft="mtp", gamma=2, tp=1))
    assert wide.draft.cost.step.c_token == pytest.approx(alone.draft.cost.step.c_token / 8)
    assert wide.draft.cost.step.c_weight == alone.draft.cost.step.c_weight


def test_plan_sweeps_dp_and_writes_the_columns(tmp_path):
    out = tmp_path / "plan.csv"
    assert cli_main(["plan", "--gpu", "h200", "--target", "deepseek-v3", "--draft", "mtp", "--tp", "1", "--dp", "8",
                     "--ep", "1,8", "--gamma", "0,2", "--batch-size", "64", "--requests", "64", "--alpha", "0.8",
                     "--no-plot", "--csv", str(out)]) == 0
    frame = pd.read_csv(out, comment="#")
    assert set(frame["dp"]) == {8} and set(frame["ep"]) == {1, 8}
    assert cli_main(["simulate", "--gpu", "h100", "--target", "llama-3.1-8b", "--dp", "2", "--draft", "none",
                     "--gamma", "0", "--csv", str(tmp_path / "x.csv")]) == 2
