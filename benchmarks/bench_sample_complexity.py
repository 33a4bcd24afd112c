"""Sample complexity: rows the identity test needs to certify a worst-case TV ε, per vocabulary.

Identity testing against a known p needs Θ(√V/ε²) samples (Paninski 2008; Valiant &
Valiant 2014; Acharya, Daskalakis & Kamath 2015), learning p needs Θ(V/ε²). The table
gives ``min_num_samples_for_identity_test`` at the default certification's per-assertion
false-fail rate (the family-wise 1e-4 split over the default plan) and false-pass rate
1e-3, for the uniform distribution (the hardest p of its size) and the Zipf shape of the
fixtures, and its ratio to √V/ε²: a constant that does not grow with V is the optimal
order. (The constant holds log(1/rate) terms: z_α + z_β ≈ 8.4 at these rates.)

Run with ``pytest benchmarks/bench_sample_complexity.py -s``; the last test prints the
table that docs/gate.md shows.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from specgauge.fixtures.pairs import zipf
from specgauge.stattests.chain.certify import CertConfig
from specgauge.stattests.core.identity import min_num_samples_for_identity_test

VOCABS = (6, 100, 1_000, 10_000, 32_000, 151_936)
TVS = (0.05, 0.1, 0.2)
RATE = CertConfig().per_assertion
#: The aim: within a small constant of √V/ε² for every vocabulary (not growing like √V).
MAX_RATIO = 40.0


def rows_needed(vocab: int, tv: float, shape: str) -> int:
    p = np.full(vocab, 1.0 / vocab) if shape == "uniform" else zipf(vocab)
    return min_num_samples_for_identity_test(tv, p, false_fail_rate=RATE)


def table() -> list[dict]:
    out = []
    for shape in ("uniform", "zipf"):
        for vocab in VOCABS:
            for tv in TVS:
                n = rows_needed(vocab, tv, shape)
                out.append({"shape": shape, "vocab": vocab, "tv": tv, "rows": n,
                            "ratio": n / (math.sqrt(vocab) / tv ** 2), "learning_ratio": n / (vocab / tv ** 2)})
    return out


@pytest.mark.parametrize("vocab", [1_000, 151_936])
def test_sizing_speed(benchmark, vocab):
    """Sizing a 152k fixture takes well under a second (an O(V) bound per bisection step)."""
    benchmark(rows_needed, vocab, 0.1, "uniform")


def test_rows_stay_within_a_constant_of_sqrt_v_over_eps_squared():
    rows = table()
    print(f"\nrows to certify a worst-case TV at per-assertion false-fail {RATE:.2g}, false-pass 1e-3")
    print(f"{'p':8s} {'V':>8s} {'TV':>5s} {'rows':>12s} {'rows/(√V/ε²)':>13s} {'rows/(V/ε²)':>12s}")
    for r in rows:
        print(f"{r['shape']:8s} {r['vocab']:>8,d} {r['tv']:>5g} {r['rows']:>12,d} {r['ratio']:>13.2f} "
              f"{r['learning_ratio']:>12.4f}")
    uniform = [r for r in rows if r["shape"] == "uniform" and r["vocab"] >= 100]
    assert max(r["ratio"] for r in uniform) <= MAX_RATIO
    # the √V order: from 1k to 152k the ratio stays within a factor 2 while V grows 152×
    for tv in TVS:
        ratios = [r["ratio"] for r in uniform if r["tv"] == tv and r["vocab"] >= 1_000]
        assert max(ratios) / min(ratios) < 2.0, ratios
