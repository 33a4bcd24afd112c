"""A head's draft tensor-parallel size (``--draft-tp`` with ``--draft eagle|mtp``).

vLLM accepts ``draft_tensor_parallel_size`` 1 or the target's for an EAGLE head; the
simulator prices the head at that TP from its shape (weights, FLOPs, KV, launches) and
refuses any other value in one line, exit 2.
"""

from __future__ import annotations

import pytest

from specgauge.errors import ConfigError
from specgauge.reports.cli import main as cli_main
from specgauge.simulator import SimulationConfig
from specgauge.simulator.core import memory_plan, resolve
from specgauge.simulator.cost import PassCost, RoundCost
from specgauge.simulator.drafts import EAGLE_DRAFT_BYTES, _head_params, _priced_as_layers, head_shape
from specgauge.simulator.profiles import load_gpu, load_model

MINIMAX = dict(gpu="mi355x", target="minimax-m2.5", draft="eagle", tp=4, gamma=3, prompt_len=1024, output_len=1024)


def _round(config: SimulationConfig, batch: int) -> float:
    setup = resolve(config)
    return float(setup.draft.cost.round(batch, 3, 3.0, batch * 1536, 0.0))


def test_draft_tp_at_the_target_tp_is_the_default_and_changes_nothing():
    default, same = SimulationConfig(**MINIMAX), SimulationConfig(**MINIMAX, draft_tp=4)
    for batch in (1, 16, 64):
        assert _round(default, batch) == _round(same, batch)
    assert memory_plan(default).draft_weight_bytes == memory_plan(same).draft_weight_bytes
    # the target's own costs never move with the draft's TP
    assert resolve(SimulationConfig(**MINIMAX, draft_tp=1)).target_cost == resolve(default).target_cost


def test_head_at_tp1_is_its_whole_shape_on_one_gpu():
    config = SimulationConfig(**MINIMAX, draft_tp=1)
    setup = resolve(config)
    target, gpu = load_model("minimax-m2.5"), load_gpu("mi355x")
    resident, linear = _head_params(target, "eagle")
    assert setup.draft.tp == 1
    assert memory_plan(config).draft_weight_bytes == resident * EAGLE_DRAFT_BYTES   # not split
    assert setup.draft.kv_bytes_per_token == 2 * 8 * 128 * target.kv_dtype_bytes   # one layer, all KV heads
    step = setup.draft.cost.step
    # first principles at TP 1: every FLOP and weight byte on one GPU; the batch-1 pass is
    # draft_pass_layers of the target's layers, whatever the head's TP
    assert step.c_token == pytest.approx(2 * linear / (gpu.peak_flops * gpu.mfu))
    assert step.c_weight == pytest.approx(linear * EAGLE_DRAFT_BYTES / (gpu.bandwidth * gpu.efficiency))
    one = float(setup.target_cost.time(1.0, 0.0, 0.0))
    assert float(step.c_fixed + step.linear(1.0)) == pytest.approx(gpu.draft_pass_layers / target.layers * one)
    wide = resolve(SimulationConfig(**MINIMAX)).draft.cost.step
    assert wide == _priced_as_layers(head_shape(gpu, target, "eagle", 4), setup.target_cost, target.layers, gpu)
    assert head_shape(gpu, target, "eagle", 4) == PassCost.from_shape(
        gpu, linear_params=linear, kv_bytes_per_token=target.kv_bytes_per_token / target.layers,
        attn_flops_per_ctx=4.0 * target.heads * target.head_dim, layers=2, hidden=target.hidden,
        dtype_bytes=EAGLE_DRAFT_BYTES, tp=4)
    # per sequence the TP-1 head costs more as the batch grows (its tokens are not split), a
    # little: about 3 us a sequence a round against 1.2 us at TP 4 on MiniMax-M2.5's shape
    grow_1 = (_round(config, 64) - _round(config, 16)) / 48
    grow_4 = (_round(SimulationConfig(**MINIMAX), 64) - _round(SimulationConfig(**MINIMAX), 16)) / 48
    assert grow_1 > grow_4 > 0
    assert grow_1 < 10e-6


def test_mtp_head_takes_tp1_too():
    base = dict(gpu="h200", target="deepseek-v3", draft="mtp", tp=8, gamma=1)
    wide, one = resolve(SimulationConfig(**base)), resolve(SimulationConfig(**base, draft_tp=1))
    assert one.draft.tp == 1 and one.draft.weight_bytes == pytest.approx(8 * wide.draft.weight_bytes)
    costs = RoundCost(one.target_cost, one.draft.cost, one.overhead)
    assert costs.decode_round(32, 1, 32 * 2048)[0] > 0


@pytest.mark.parametrize("value", [2, 8])
def test_other_head_tps_are_refused(value):
    with pytest.raises(ConfigError, match=f"TP 1, not --draft-tp {value}"):
        resolve(SimulationConfig(**MINIMAX, draft_tp=value))


@pytest.mark.parametrize("command", ["simulate", "plan"])
@pytest.mark.parametrize("value,message", [("2", "at the target's TP (4) or at TP 1, not --draft-tp 2"),
                                           ("0", "draft_tp"), ("one", "draft")])
def test_cli_refuses_a_bad_draft_tp_in_one_line(command, value, message, tmp_path, capsys):
    csv = tmp_path / "out.csv"
    argv = [command, "--gpu", "mi355x", "--target", "minimax-m2.5", "--draft", "eagle", "--tp", "4",
            "--draft-tp", value, "--requests", "4", "--csv", str(csv)]
    if command == "plan":
        argv += ["--gamma", "3", "--batch-size", "4"]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
    assert not csv.exists()


def test_cli_takes_draft_tp_1_for_a_head(tmp_path, capsys):
    csv = tmp_path / "out.csv"
    argv = ["simulate", "--gpu", "mi355x", "--target", "minimax-m2.5", "--draft", "eagle", "--tp", "4",
            "--gamma", "3", "--batch-size", "8", "--requests", "16", "--output-len", "32", "--prompt-len", "64"]
    assert cli_main(argv + ["--draft-tp", "1", "--csv", str(csv)]) == 0
    header, row = csv.read_text().splitlines()
    assert dict(zip(header.split(","), row.split(",")))["draft_tp"] == "1"
