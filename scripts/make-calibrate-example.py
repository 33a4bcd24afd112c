"""Write the ten inputs of the ``specgauge calibrate`` example in docs/planner.md.

They are synthetic, made here from a known step model so that the example shows the fit
recovering it: c_fixed 4 ms, c_token 30 us, c_kv 50 ns per step on an H100 serving
Llama-3.1-8B, plus an n-gram proposer costing 1 ms per speculative step and 40 us per
token it drafts or ingests (the prompts of the requests a round admits; a 2024-era engine:
speculation pays at 8 concurrent requests and loses at 64). Serve runs are closed loops
whose prefills ride in the decode steps (``fit.closed_loop_equation``, mixed), as the
simulator's ``--arrival closed`` runs them. Six ``vllm bench latency --output-json`` files (batch 1, 16, 64 x prompt 128, 2048;
128 output tokens) and four ``vllm bench serve --save-result`` files (no speculation and
n-gram speculation with gamma 4 at concurrency 8 and 64), in vLLM's key names.

    python scripts/make-calibrate-example.py [FOLDER]   # default docs/examples/calibrate
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from specgauge.simulator.cost import PassCost
from specgauge.simulator.fit import closed_loop_equation, latency_equation, tpot_prefills

TRUE = PassCost(c_fixed=4.0e-3, c_token=30e-6, c_kv=50e-9)  # seconds per step: fixed, per token, per KV token read
SPEC_STEP_S, NGRAM_S_PER_TOKEN, GAMMA, LENGTH = 1.0e-3, 40e-6, 4, 2.0
PROMPT, OUTPUT, REQUESTS = 512, 128, 200


def seconds(equation) -> float:
    """What the calibrator's own forward model says the measurement took under ``TRUE``."""
    return float(sum(w * (TRUE.c_fixed + TRUE.linear(np.array([n]))[0] + TRUE.c_kv * kv) for w, n, kv in equation.passes))


def latency(batch: int, input_len: int, output_len: int = 128) -> dict:
    total = round(seconds(latency_equation(batch, input_len, output_len, 0.0, "")) * output_len, 6)
    return {"avg_latency": total, "latencies": [total] * 3,
            "percentiles": {str(p): total for p in (10, 25, 50, 75, 90, 99)}}


def serve(concurrency: int, speculative: bool) -> dict:
    """A closed-loop run at ``concurrency``: each decode step carries the prompt prefills of the
    requests that replace finished ones (vLLM's mean TPOT leaves the request's own prefill out)."""
    prefills = tpot_prefills(concurrency, OUTPUT)
    tpot = seconds(closed_loop_equation(concurrency, PROMPT, OUTPUT, 0.0, "", prefills=prefills, mixed=True))
    row = {"completed": REQUESTS, "total_input_tokens": REQUESTS * PROMPT, "total_output_tokens": REQUESTS * OUTPUT,
           "max_concurrency": concurrency, "mean_tpot_ms": round(tpot * 1e3, 6)}
    if speculative:  # a round: the verify pass over gamma + 1 tokens a sequence and the prefills it carries, the
        # engine's and the proposer's cost
        m = prefills * LENGTH
        kv = (concurrency - m) * (PROMPT + OUTPUT / 2)
        tokens = (concurrency - m) * (GAMMA + 1.0) + m * PROMPT
        verify = float(TRUE.c_fixed + TRUE.linear(np.array([tokens]))[0] + TRUE.c_kv * kv)
        round_s = verify + SPEC_STEP_S + NGRAM_S_PER_TOKEN * (concurrency * GAMMA + m * PROMPT)
        drafts = REQUESTS * OUTPUT // 2
        row.update(mean_tpot_ms=round(round_s / LENGTH * 1e3, 6), spec_decode_acceptance_length=LENGTH,
                   spec_decode_num_drafts=drafts, spec_decode_draft_tokens=drafts * GAMMA)
    return row


def main(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    files = {f"bs{b}-{'128' if n == 128 else '2k'}.json": latency(b, n) for b in (1, 16, 64) for n in (128, 2048)}
    files |= {f"base{c}.json": serve(c, False) for c in (8, 64)}
    files |= {f"ngram{c}.json": serve(c, True) for c in (8, 64)}
    for name, data in files.items():
        (folder / name).write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {len(files)} files to {folder}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "docs" / "examples" / "calibrate")
