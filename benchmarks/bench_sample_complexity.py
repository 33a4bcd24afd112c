"""Sample complexity on instances: rows the identity test needs for a worst-case TV ε.

Identity testing against a known p needs about ‖p^{-max}_{-ε}‖_{2/3} / ε² samples (Valiant &
Valiant 2014: p without its heaviest element and without the lightest tokens holding ε of
the mass, in the 2/3-quasinorm (Σ p^{2/3})^{3/2}), which is √V/ε² only when p is uniform;
learning p needs V/ε². The table gives ``min_num_samples_for_identity_test`` at the
default certification's per-assertion false-fail rate and false-pass rate 1e-3 for uniform
laws, Zipf laws (1.1: the fixtures' shape; 2: a peaked one) and SmolLM2-135M's real
next-token laws (the real-law fixtures, every position), with its ratio to both orders.
(The constants hold log(1/rate) terms: z_α + z_β ≈ 8.4 at these rates.)

It also measures what the identity rows' cost line assumes: the decoder input the harness
and the NumPy reference get through per CPU-second on the 152k fixture.

Run with ``pytest benchmarks/bench_sample_complexity.py -s``; the last test prints the
table that docs/gate.md shows, with the certified lower bound on draws beside each row
count (:mod:`specgauge.stattests.identity.lower_bound`) and their ratio.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from specgauge.fixtures.pairs import FIXTURES, zipf
from specgauge.stattests.chain.certify import CertConfig
from specgauge.stattests.identity.instance import min_num_samples_for_identity_test
from specgauge.stattests.identity.lower_bound import min_num_samples_lower_bound

VOCABS = (6, 1_000, 32_000, 151_936)
TVS = (0.05, 0.1, 0.2)
RATE = CertConfig().per_assertion
#: The aim: within a small constant of √V/ε² for every vocabulary (not growing like √V).
MAX_RATIO = 40.0


def instance_norm(p: np.ndarray, tv: float) -> float:
    """‖p^{-max}_{-ε}‖_{2/3}: p's heaviest token and its lightest tokens holding at most ε
    of the mass removed, (Σ p^{2/3})^{3/2} of the rest."""
    rest = np.sort(p[p > 0])[:-1]
    cut = int(np.searchsorted(np.cumsum(rest), tv, side="right"))
    return float((rest[cut:] ** (2.0 / 3.0)).sum() ** 1.5)


def laws() -> list[tuple[str, np.ndarray]]:
    """(label, p): uniform and Zipf laws per vocabulary, and the real laws by position."""
    out = []
    for vocab in VOCABS:
        out.append((f"uniform {vocab:,}", np.full(vocab, 1.0 / vocab)))
    for vocab in VOCABS[1:]:
        out.append((f"Zipf 1.1 {vocab:,}", zipf(vocab)))
    out.append(("Zipf 2 32,000", zipf(32_000, 2.0)))
    try:
        from specgauge.fixtures.real_laws import fixtures
    except ImportError:  # pragma: no cover - the real-law fixtures ship with the package
        return out
    for f in fixtures():
        for k, p in enumerate(f.target):
            out.append((f"{f.name} pos{k}", p))
    return out


def table(tvs=TVS) -> list[dict]:
    out = []
    for label, p in laws():
        vocab = int(np.count_nonzero(p))
        for tv in tvs:
            n = min_num_samples_for_identity_test(tv, p, false_fail_rate=RATE, tolerance=0.02)
            norm = instance_norm(p, tv)  # 0 when the heaviest token and the ε-tail are all of p
            low = min_num_samples_lower_bound(tv, p, false_fail_rate=RATE).draws
            out.append({"law": label, "support": vocab, "tv": tv, "rows": n,
                        "instance_ratio": n / (norm / tv ** 2) if norm > 0 else math.nan,
                        "sqrt_ratio": n / (math.sqrt(p.size) / tv ** 2), "lower_bound": low,
                        "bound_ratio": n / low})
    return out


@pytest.mark.parametrize("vocab", [1_000, 151_936])
def test_sizing_speed(benchmark, vocab):
    """Sizing a fixture is an O(V) bound per bisection step."""
    benchmark(min_num_samples_for_identity_test, 0.1, np.full(vocab, 1.0 / vocab), false_fail_rate=RATE)


class _Copies:
    """The reference without its views: the harness copies the law a row, as for any decoder."""

    def __init__(self) -> None:
        from specgauge.stattests.core.reference import NumpyDecoder

        self._decoder = NumpyDecoder()

    def verify(self, target, draft, tokens, rng):
        return self._decoder.verify(target, draft, tokens, rng)


def test_reference_throughput():
    """Decoder input per CPU-second through the harness and the NumPy reference on 152k, both
    ways the harness hands it over: copied a row (the cost line's 0.95 GB) and as broadcast
    views, the law counted once a call (11 GB); each within a factor 3 of this machine's."""
    from specgauge.stattests.chain.checks import REFERENCE_BYTES_PER_SECOND
    from specgauge.stattests.chain.harness import RunConfig, run_fixture
    from specgauge.stattests.chain.shards import REFERENCE_LAW_BYTES_PER_SECOND
    from specgauge.stattests.core.reference import NumpyDecoder

    f = FIXTURES["zipf-152k-tv0.2"]
    law = 8 * (2 * f.gamma + 1) * f.vocab_size
    for decoder, rows, stated in ((_Copies(), 80, REFERENCE_BYTES_PER_SECOND),
                                  (NumpyDecoder(), 800, REFERENCE_LAW_BYTES_PER_SECOND)):
        start = time.process_time()
        run_fixture(decoder, f, RunConfig(rows))  # one row a call on 152k: the law once a row either way
        rate = rows * law / (time.process_time() - start)
        print(f"\n{type(decoder).__name__}: {rate / 1e9:.2f} GB of decoder input per CPU-second (the cost line "
              f"assumes {stated / 1e9:.2f})")
        assert stated / 3 < rate < stated * 3


#: A sized run on a real law with the law taken as views, against copies: at least this much faster.
VIEWS_TARGET = 5.0


def test_views_against_copies_on_a_real_law(speed_target):
    """Rows of SmolLM2's chat law (49,152 tokens, 6 rows a call) through the harness and the
    reference, the law as broadcast views against copied a row, in one run: what made the
    sized chat run at 0.05 take seconds (docs/scale.md)."""
    from specgauge.fixtures.real_laws import fixtures as real_law_fixtures
    from specgauge.stattests.chain.harness import RunConfig, run_fixture
    from specgauge.stattests.core.reference import NumpyDecoder

    chat = next(f for f in real_law_fixtures() if f.name == "smollm2-chat-t1")
    seconds = {}
    for decoder in (_Copies(), NumpyDecoder()):
        run_fixture(decoder, chat, RunConfig(60))  # warm: the law's tables, the buffers
        start = time.process_time()
        run_fixture(decoder, chat, RunConfig(3_000))
        seconds[type(decoder).__name__] = time.process_time() - start
    ratio = seconds["_Copies"] / seconds["NumpyDecoder"]
    print(f"\n3,000 rows of smollm2-chat-t1: copies {seconds['_Copies']:.2f} CPU-s, views "
          f"{seconds['NumpyDecoder']:.2f} CPU-s: {ratio:.1f}x")
    speed_target(ratio >= VIEWS_TARGET, f"views only {ratio:.1f}x the copies (target {VIEWS_TARGET:g}x)")


def test_rows_against_the_instance_and_sqrt_v():
    rows = table()
    print(f"\nrows to certify a worst-case TV at per-assertion false-fail {RATE:.2g}, false-pass 1e-3")
    print(f"{'p':34s} {'support':>8s} {'TV':>5s} {'rows':>10s} {'/ (‖p‖_2/3/ε²)':>15s} {'/ (√V/ε²)':>10s} "
          f"{'lower bound':>12s} {'/ bound':>8s}")
    for r in rows:
        print(f"{r['law']:34s} {r['support']:>8,d} {r['tv']:>5g} {r['rows']:>10,d} {r['instance_ratio']:>15.1f} "
              f"{r['sqrt_ratio']:>10.3f} {r['lower_bound']:>12,d} {r['bound_ratio']:>8.2f}")
    # the certified lower bound is a floor under every row count (no test needs fewer)
    assert all(r["rows"] >= r["lower_bound"] for r in rows)
    uniform = [r for r in rows if r["law"].startswith("uniform") and r["support"] >= 1_000]
    assert max(r["sqrt_ratio"] for r in uniform) <= MAX_RATIO
    # the √V order on uniform p: from 1k to 152k the ratio stays within a factor 2 while V grows 152×
    for tv in TVS:
        ratios = [r["sqrt_ratio"] for r in uniform if r["tv"] == tv]
        assert max(ratios) / min(ratios) < 2.0, ratios
