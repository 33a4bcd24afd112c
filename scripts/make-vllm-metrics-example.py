"""Write two scrapes of a vLLM server's ``/metrics`` for the example in docs/acceptance.md.

The text is what vLLM itself exposes: its own Prometheus classes
(``vllm.v1.spec_decode.metrics.SpecDecodingProm`` with the ``model_name``/``engine`` labels
of ``PrometheusStatLogger``, two engines as a data-parallel server runs them) are fed
speculative rounds and rendered by ``prometheus_client.generate_latest``, on CPU. Each round
drafts 3 tokens; draft k is accepted with conditional probability 0.85, 0.7, 0.55 (seeded),
and vLLM's ``SpecDecodingStats.observe_draft`` counts it. ``before.txt`` is scraped after
a warm-up, ``after.txt`` after the benchmark's rounds; ``counters.json`` records what was
fed between them, so that a test can hold the parsed difference against it.

    python scripts/make-vllm-metrics-example.py [FOLDER]   # default docs/examples/vllm-metrics
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

GAMMA, CONDITIONAL, SEED = 3, (0.85, 0.7, 0.55), 0
WARMUP_ROUNDS, ROUNDS, STEP_ROUNDS = 1_500, 20_000, 64   # rounds per engine; rounds per scheduler step


def accepted_counts(rounds: int, rng: np.random.Generator) -> np.ndarray:
    """Accepted drafts per round: the first rejection ends the round (conditional rates)."""
    accept = rng.random((rounds, GAMMA)) < np.asarray(CONDITIONAL)
    return np.cumprod(accept, axis=1).sum(axis=1)


def main(argv: list[str]) -> int:
    import prometheus_client
    from vllm.v1.spec_decode.metrics import SpecDecodingProm, SpecDecodingStats

    folder = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "docs/examples/vllm-metrics"
    folder.mkdir(parents=True, exist_ok=True)
    engines = {0: ["Qwen/Qwen3-32B", "0"], 1: ["Qwen/Qwen3-32B", "1"]}
    # only num_speculative_tokens is read from the speculative config
    prom = SpecDecodingProm(SimpleNamespace(num_speculative_tokens=GAMMA), ["model_name", "engine"], engines)
    rng = np.random.default_rng(SEED)
    fed = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0, "accepted_per_pos": [0] * GAMMA}

    def run(rounds: int, count: bool) -> None:
        for engine in engines:
            counts = accepted_counts(rounds, rng)
            for start in range(0, rounds, STEP_ROUNDS):   # one SpecDecodingStats per scheduler step, as vLLM sends
                stats = SpecDecodingStats.new(GAMMA)
                for n in counts[start:start + STEP_ROUNDS]:
                    stats.observe_draft(GAMMA, int(n))
                prom.observe(stats, engine_idx=engine)
            if count:
                fed["num_drafts"] += rounds
                fed["num_draft_tokens"] += rounds * GAMMA
                fed["num_accepted_tokens"] += int(counts.sum())
                for k in range(GAMMA):
                    fed["accepted_per_pos"][k] += int((counts > k).sum())

    run(WARMUP_ROUNDS, count=False)
    (folder / "before.txt").write_bytes(prometheus_client.generate_latest())
    run(ROUNDS, count=True)
    (folder / "after.txt").write_bytes(prometheus_client.generate_latest())
    fed["acceptance_length"] = 1 + fed["num_accepted_tokens"] / fed["num_drafts"]
    fed["made_by"] = "scripts/make-vllm-metrics-example.py with vLLM's SpecDecodingProm and prometheus_client"
    (folder / "counters.json").write_text(json.dumps(fed, indent=1) + "\n")
    print(f"wrote {folder}/before.txt, after.txt, counters.json (acceptance length {fed['acceptance_length']:.4f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
