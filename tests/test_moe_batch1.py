"""A MoE step's fixed part: DeepSeek-V3 on 8x H200 at batch 1 without speculation within ±25 % of
the published SGLang TPOT, and the same deployment without MLA's fixed kernels (the known-bad
roofline) far below it."""

from __future__ import annotations

import pytest

from specgauge.simulator import SimulationConfig, simulate

#: SGLang pull request #3582: 77 tok/s at batch 1 with MTP, a 1.76x speed-up: 1000 / (77 / 1.76) ms
PUBLISHED_TPOT_MS = 1000 / (77 / 1.76)


def _tpot(profiles=None) -> float:
    config = SimulationConfig(gpu="h200", target="deepseek-v3", draft=None, gamma=0, tp=8, batch_size=1, requests=4,
                              prompt_len=1024, output_len=1024, profiles=profiles)
    return float(simulate(config)["mean_tpot_ms"])


def test_deepseek_v3_batch_1_tpot_is_within_a_quarter_of_the_published(tmp_path):
    assert _tpot() == pytest.approx(PUBLISHED_TPOT_MS, rel=0.25)
    roofline = tmp_path / "roofline.toml"
    roofline.write_text('[gpus."h200"]\nmla_layer_overhead_us = 0.0\nmoe_layer_overhead_us = 0.0\n')
    assert _tpot(str(roofline)) < 0.5 * PUBLISHED_TPOT_MS     # the roofline alone: about 5 ms


def test_the_mtp_draft_pass_carries_one_layer_of_the_fixed_cost():
    from specgauge.simulator.core import resolve

    setup = resolve(SimulationConfig(gpu="h200", target="deepseek-v3", draft="mtp", tp=8, gamma=1))
    one = float(setup.draft.cost.round(1, 1, 1.0, 1024.0, 0.02))
    assert setup.gpu.mla_layer_overhead_us * 1e-6 < one < 0.1 * float(setup.target_cost.c_fixed)
