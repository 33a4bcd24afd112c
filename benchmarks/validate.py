"""The simulator against published measurements: writes the validation table of docs/validation.md.

    python benchmarks/validate.py [--csv validation.csv] [--specdecode-data DIR]

Each row: the setup, its source, the published figure, the simulated one, their ratio,
and the calibration used. Acceptance is never taken from the row being checked: where the
same source publishes a low-load point of the curve, α is calibrated there (bisection on
the simulated speed-up) and the other points are predictions; the rows say which.
Lengths the sources do not state are assumptions, named in the row.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import pandas as pd

from specgauge.simulator import IIDAcceptance, SimulationConfig, simulate
from specgauge.simulator.core import resolve
from specgauge.simulator.cost import PassCost, RoundCost

SPECDECODE, VLLM_BLOG, VLLM_V1, EAGLE3, MAGICDEC = "[1]", "[2]", "[3]", "[4]", "[5]"
SOURCES = {
    SPECDECODE: "SpecDecode-Bench, \"Speculative Decoding: Performance or Illusion?\", arXiv 2601.11580, and its "
                "simulator's predictor.py (github.com/SpecDecode-Bench/simulator): vLLM v0.10.1 on H100",
    VLLM_BLOG: "vLLM blog, \"How Speculative Decoding Boosts vLLM Performance by up to 2.8x\", "
               "blog.vllm.ai/2024/10/17/spec-decode.html: Llama-3-70B on 4x H100",
    VLLM_V1: "vLLM blog, V1 alpha release, Jan 2025: Llama-8B GPU step \"as low as ~5 ms\" on an H100",
    EAGLE3: "EAGLE-3, arXiv 2503.01840: 1.38x throughput at batch 64 in SGLang (H100)",
    MAGICDEC: "MagicDec, arXiv 2408.11049 v3: up to 1.84x for Llama-3.1-8B at batch 32-256 on 8x A100",
}


def speedup(config: SimulationConfig, alpha: float, decode: bool = False) -> float:
    """Paired speed-up: of output throughput when saturated, of mean TPOT under a request rate
    (at a low rate throughput only follows the arrivals; the sources' speed-ups there are
    latency). With ``decode`` (a source that times decoding of an already prefilled batch),
    the decode phase alone: tokens per pass × plain step ÷ speculative round, at the batch
    cap and the mid-output context."""
    config = replace(config, acceptance=IIDAcceptance(alpha))
    if not decode:
        row = simulate(config)
        return float(row["speedup_vs_no_spec" if config.qps is None else "tpot_speedup_vs_no_spec"])
    setup = resolve(config)
    costs = RoundCost(setup.target_cost, setup.draft.cost, setup.overhead)
    kv = config.batch_size * (config.prompt_len + config.output_len / 2)
    plain = float(costs.decode_round(config.batch_size, 0, kv)[0])
    spec = float(costs.decode_round(config.batch_size, config.gamma, kv)[0])
    return config.acceptance.expected_tokens_per_pass(config.gamma) * plain / spec


def calibrate_alpha(config: SimulationConfig, target: float, lo: float = 0.02, hi: float = 0.99,
                    decode: bool = False) -> float:
    """The i.i.d. α at which ``config``'s simulated speed-up equals ``target`` (bisection; clipped to [lo, hi])."""
    if speedup(config, hi, decode) < target:
        return hi
    if speedup(config, lo, decode) > target:
        return lo
    for _ in range(14):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if speedup(config, mid, decode) < target else (lo, mid)
    return (lo + hi) / 2


def alpha_label(alpha: float, where: str) -> str:
    """How α was set; an α at the bisection's bound means the published figure is out of reach."""
    bound = " (at the 0.99 bound: the figure is out of the simulator's reach)" if alpha >= 0.989 else ""
    return f"α = {alpha:.3f} {where}{bound}"


def _pass_ms(config: SimulationConfig, batch: int, gamma: int, ctx: int, prior: bool = False) -> float:
    """One forward pass (the published figures time the pass: no engine overhead), in ms;
    the prior's with its per-token sampling cost, which the fit's c_token holds."""
    setup = resolve(config)
    cost = PassCost.prior(setup.gpu, setup.target, config.tp) if prior else setup.target_cost
    tokens = batch * (gamma + 1)
    sampling = setup.gpu.sample_us_per_token * 1e-6 * tokens if prior else 0.0
    return float(cost.time(tokens, batch * ctx, (gamma + 1) * batch * ctx) + sampling) * 1e3


def _ratio(config: SimulationConfig) -> float:
    setup = resolve(config)
    return RoundCost(setup.target_cost, setup.draft.cost, setup.overhead).draft_step_ratio(512)


def rate_curve(add, setup: str, config: SimulationConfig, low: float, high: float, note: str, how: str) -> float:
    """A vLLM-blog request-rate curve: α calibrated at QPS 1, the high-QPS point predicted at saturation."""
    alpha = calibrate_alpha(config, low)
    add(f"speed-up, {setup}, QPS 1", VLLM_BLOG, low, speedup(config, alpha), alpha_label(alpha, how), note)
    add(f"speed-up, {setup}, high QPS", VLLM_BLOG, high, speedup(replace(config, qps=None, requests=768), alpha),
        alpha_label(alpha, "from QPS 1"), "'high QPS' simulated as saturation at batch cap 256")
    return alpha


REPLAYED: list[SimulationConfig] = []   # the replay row's configuration, for its break-even batch


def replay_rows(add, data_dir: str) -> None:
    """Rows whose acceptance is SpecDecode-Bench's own measured EAGLE-3 traces, replayed: nothing fitted."""
    import json
    from pathlib import Path

    from specgauge.simulator.replay import ReplayAcceptance

    path = Path(data_dir) / "combined_sharegpt.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    prompt = round(sum(len(r["prompt_token_ids"]) for r in records) / len(records))
    output = round(sum(len(r["acc_eagle"]["acc_len"]) for r in records) / len(records))
    trace = ReplayAcceptance.from_jsonl(path, "eagle")
    config = SimulationConfig(gpu="h100", target="llama-3.1-8b", draft="eagle", gamma=3, acceptance=trace,
                              prompt_len=prompt, output_len=output, batch_size=128, requests=384)
    row = simulate(config)
    REPLAYED.append(config)
    add("speed-up, Llama-3.1-8B + EAGLE-3, batch 128, measured acceptance", SPECDECODE, 1.29,
        float(row["speedup_vs_no_spec"]), "none: the source's ShareGPT EAGLE-3 traces replayed per request",
        f"{prompt} + {output} tokens (the traces' means), γ = 3; {trace.expected_tokens_per_pass(3):.2f} tokens a pass")


def rows(specdecode_data: str | None = None) -> list[dict]:
    out = []

    def add(setup, source, published, simulated, calibration, note=""):
        out.append({"setup": setup, "source": source, "published": published, "simulated": round(simulated, 3),
                    "ratio": round(simulated / published, 3), "calibration": calibration, "note": note})

    h100_8b = SimulationConfig(gpu="h100", target="llama-3.1-8b", draft="eagle", gamma=3)
    ctx = 1047  # the context at which the fit's two published passes agree (13.9 and 9.9 ms)
    add("Llama-3.1-8B decode step, batch 1, H100 (ms)", VLLM_V1, 5.0, _pass_ms(h100_8b, 1, 0, 512),
        "shipped fit (the pass, no engine overhead)", "'as low as ~5 ms': the blog's best case; the fit's c_fixed "
        "alone is 5.89 ms")
    add("Llama-3.1-8B decode step, batch 64, H100 (ms)", SPECDECODE, 9.9, _pass_ms(h100_8b, 64, 0, ctx, prior=True),
        "datasheet prior (no fit)", "prior constants were read off this source's 8B fit")
    add("Llama-3.1-8B verify pass, γ=3, batch 64, H100 (ms)", SPECDECODE, 13.9, _pass_ms(h100_8b, 64, 3, ctx, prior=True),
        "datasheet prior (no fit)", "same")
    add("draft cost ratio c, Qwen3-8B + Qwen3-0.6B, H100", SPECDECODE, 0.375,
        _ratio(SimulationConfig(gpu="h100", target="qwen3-8b", draft="qwen3-0.6b", gamma=3)),
        "datasheet prior", "one launch cost per eager draft layer (65 us) set for both c rows")
    add("draft cost ratio c, Llama-70B TP4 + Llama-3.2-1B (TP1), H100", SPECDECODE, 0.125,
        _ratio(SimulationConfig(gpu="h100", target="llama-3.1-70b", draft="llama-3.2-1b", tp=4, draft_tp=1, gamma=3)),
        "datasheet prior", "same constant")

    if specdecode_data:
        replay_rows(add, specdecode_data)

    # Batch-size curve, Llama-3.1-8B + EAGLE-3 on an H100: α calibrated at batch 64 (EAGLE-3 paper,
    # SGLang), batch 128 predicted (SpecDecode-Bench, vLLM). Lengths assumed: 512 in, 512 out.
    eagle = SimulationConfig(gpu="h100", target="llama-3.1-8b", draft="eagle", gamma=3, prompt_len=512,
                             output_len=512, requests=256)
    alpha_e = calibrate_alpha(replace(eagle, batch_size=64), 1.38)
    add("speed-up, Llama-3.1-8B + EAGLE-3, batch 64", EAGLE3, 1.38, speedup(replace(eagle, batch_size=64), alpha_e),
        alpha_label(alpha_e, "calibrated here"), "shipped fits; γ = 3 chain (SGLang drafts a tree); 512 + 512 tokens assumed")
    add("speed-up, Llama-3.1-8B + EAGLE-3, batch 128", SPECDECODE, 1.29,
        speedup(replace(eagle, batch_size=128, requests=384), alpha_e), alpha_label(alpha_e, "from the batch-64 row"),
        "prediction across engines (SGLang -> vLLM)")

    # Request-rate curves, Llama-3-70B TP 4 on 4x H100 (vLLM blog): α calibrated at QPS 1,
    # the high-QPS slowdown predicted at saturation (batch cap 256, vLLM's default).
    draft70 = SimulationConfig(gpu="h100", target="llama-3.1-70b", draft="llama-3.2-1b", tp=4, draft_tp=1, gamma=4,
                               prompt_len=256, output_len=256, requests=300, qps=1.0, batch_size=256)
    alpha_d = rate_curve(add, "Llama-3-70B TP4 + draft model, ShareGPT", draft70, 1.5, 1 / 1.4,
                         "Qwama-0.5B draft simulated as Llama-3.2-1B at TP 1; 256 + 256 tokens, γ=4 assumed",
                         "calibrated here")
    add("speed-up, Llama-3.1-70B TP4 + 1B draft, batch 128", SPECDECODE, 1.25,
        speedup(replace(draft70, qps=None, batch_size=128, gamma=3, prompt_len=512, output_len=512, requests=384),
                alpha_d), alpha_label(alpha_d, "from the vLLM-blog QPS-1 row"), "prediction across sources; γ = 3")
    ngram = SimulationConfig(gpu="h100", target="llama-3.1-70b", draft="ngram", tp=4, gamma=4, prompt_len=1024,
                             output_len=128, requests=300, qps=1.0, batch_size=256)
    rate_curve(add, "Llama-3-70B TP4 + n-gram, CNN/DailyMail", ngram, 2.8, 1 / 1.8, "1024 + 128 tokens, γ=4 assumed",
               "calibrated here (50 % empty proposals)")

    # Long context (MagicDec): the target drafts for itself reading a StreamingLLM window of
    # 512 tokens; verification reads the whole KV, so the KV bottleneck at large batch is
    # what speculation amortises. Prompt 8,192 + 256 out, γ = 3, window 512 assumed.
    magic = SimulationConfig(gpu="a100", target="llama-3.1-8b", draft="llama-3.1-8b", draft_kv_budget=512, tp=8,
                             gamma=3, prompt_len=8192, output_len=256, batch_size=256, requests=512)
    alpha_m = calibrate_alpha(magic, 1.84, decode=True)
    add("decode speed-up, Llama-3.1-8B self-speculation, sparse-KV draft, 8K context, batch 256", MAGICDEC, 1.84,
        speedup(magic, alpha_m, decode=True), alpha_label(alpha_m, "calibrated here"), "'up to 1.84x' over batch 32-256; 8K "
        "prompt, 512-token window, γ = 3 assumed; A100 prior uses the H100's fractions")
    small = speedup(replace(magic, batch_size=32, requests=128), alpha_m, decode=True)
    out.append({"setup": "same, batch 32: speed-up lower than at batch 256?", "source": MAGICDEC,
                "published": float("nan"), "simulated": round(small, 3), "ratio": float("nan"),
                "calibration": alpha_label(alpha_m, "from the batch-256 row"),
                "note": "MagicDec: the speed-up grows with batch size at long context; simulated "
                        + ("it grows" if small < out[-1]["simulated"] else "it does not grow")})
    return out


def break_even_cases():
    """The two SpecDecode-Bench Llama curves, with the α their validation rows used."""
    eagle = SimulationConfig(gpu="h100", target="llama-3.1-8b", draft="eagle", gamma=3, prompt_len=512, output_len=512)
    draft = SimulationConfig(gpu="h100", target="llama-3.1-70b", draft="llama-3.2-1b", tp=4, draft_tp=1, gamma=3,
                             prompt_len=512, output_len=512)
    alpha_e = calibrate_alpha(replace(eagle, batch_size=64, requests=256), 1.38)
    alpha_d = calibrate_alpha(replace(draft, prompt_len=256, output_len=256, gamma=4, requests=300, qps=1.0,
                                      batch_size=256), 1.5)
    return [("Llama-3.1-8B + EAGLE-3", eagle, alpha_e, "1.29x"), ("Llama-3.1-70B TP4 + 1B draft", draft, alpha_d, "1.25x")]


def breakeven(config: SimulationConfig, alpha: float | None, batches=(1, 8, 32, 64, 128, 192, 256, 384, 512)
              ) -> float | None:
    """Batch size where the simulated speed-up falls to 1 (interpolated in log batch), or None.
    ``alpha`` None keeps the configuration's own acceptance (a replayed trace)."""
    import numpy as np

    from specgauge.reports.plan import crossing

    def one(b: int) -> float:
        c = replace(config, batch_size=b, requests=max(3 * b, 64))
        return speedup(c, alpha) if alpha is not None else float(simulate(c)["speedup_vs_no_spec"])

    values = [one(b) for b in batches]
    value, _ = crossing(np.asarray(batches, float), np.asarray(values))
    return value


def markdown(frame: pd.DataFrame) -> str:
    """A GitHub table (no extra dependency)."""
    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(("—" if v != v else f"{v:.3g}") if isinstance(v, float) else str(v) for v in row) + " |"
              for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", default=None, help="also write the rows to this CSV")
    parser.add_argument("--specdecode-data", default=None, metavar="DIR",
                        help="SpecDecode-Bench's data/llama3.1-8B (github.com/SpecDecode-Bench/simulator): adds the "
                             "row that replays its measured EAGLE-3 acceptance")
    args = parser.parse_args(argv)
    frame = pd.DataFrame(rows(args.specdecode_data))
    print(markdown(frame))
    print()
    for key, text in SOURCES.items():
        print(f"{key} {text}  ")
    numeric = frame["ratio"].notna()
    within = (frame["ratio"][numeric] - 1).abs() <= 0.15
    print(f"\n{int(within.sum())} of {int(numeric.sum())} rows within ±15 %")
    cases = break_even_cases() + [("Llama-3.1-8B + EAGLE-3, measured acceptance replayed", c, None, "1.29x")
                                  for c in REPLAYED]
    for label, config, alpha, measured in cases:
        value = breakeven(config, alpha)
        print(f"break-even batch, {label}: simulated {value:.3g} (measured: speed-up still {measured} at batch 128, "
              f"so beyond 128)" if value else f"break-even batch, {label}: none up to batch 512")
    if args.csv:
        frame.to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
