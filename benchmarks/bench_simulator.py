"""Simulated output tokens per wall second: 10,000 requests, batch cap 64, gamma 4."""

from __future__ import annotations

from simulator import IIDAcceptance, SimulationConfig, simulate

CONFIG = SimulationConfig(gpu="h200", target="qwen3-32b", draft="qwen3-0.6b", gamma=4,
                          acceptance=IIDAcceptance(0.8), batch_size=64, requests=10_000,
                          prompt_len=512, output_len=256, seed=0)


def test_simulated_tokens_per_second(benchmark):
    row = benchmark.pedantic(simulate, args=(CONFIG,), rounds=3, iterations=1)
    # Both runs of the pair are simulated: the speculative one and the no-speculation baseline.
    tokens = 2 * row["total_output_tokens"]
    rate = tokens / benchmark.stats.stats.mean
    benchmark.extra_info["simulated_output_tokens"] = tokens
    benchmark.extra_info["simulated_output_tokens_per_s"] = rate
    print(f"\nsimulated output tokens per wall second: {rate:,.0f}")
    assert rate >= 1_000_000
