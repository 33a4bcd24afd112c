"""Emitted tokens per second: the torch decoder beside the NumPy reference (target: ≥ 1/3).

Same inputs for both (a Zipf-like p and a perturbed q over V tokens, γ = 4, B rows),
``verify`` timed through the contract (NumPy in and out, so the torch side pays for the
conversion), the torch-native entry point on its own, and torch with all its CPU threads
(the decoder's default is one, like NumPy: threads contend on a small busy machine). The last test prints the
torch / NumPy ratio per batch size; nothing here asserts a time.

Run with ``pytest benchmarks/bench_torch.py --benchmark-enable``.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from specgauge.stattests.core.contract import emitted_lengths  # noqa: E402
from specgauge.stattests.decoders.torch_decoder import TorchDecoder  # noqa: E402
from specgauge.stattests.core.reference import NumpyDecoder  # noqa: E402

GAMMA = 4
CASES = [(1_000, 32), (20_000, 32), (4_000, 1_024)]  # (B, V)
_RATES: dict[tuple[str, int, int], float] = {}


def _inputs(batch: int, vocab: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, vocab + 1) ** 1.1
    p /= p.sum()
    target = rng.dirichlet(p * 50 + 0.01, size=(batch, GAMMA + 1))
    draft = 0.8 * target[:, :GAMMA] + 0.2 * rng.dirichlet(np.ones(vocab), size=(batch, GAMMA))
    cdf = draft.cumsum(axis=2)
    u = rng.random((batch, GAMMA, 1))
    tokens = np.minimum((cdf <= u).sum(axis=2), vocab - 1)
    return target, draft, tokens


def _bench(benchmark, key, fn, tokens_of):
    walls: list[float] = []

    def run():
        start = time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - start)
        return out

    out = benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    rate = tokens_of(out) / min(walls)
    _RATES[key] = rate
    benchmark.extra_info["emitted_tokens_per_s"] = rate
    print(f"\n{key}: {rate:,.0f} emitted tokens/s")


@pytest.mark.benchmark(group="torch vs numpy: emitted tokens per second")
@pytest.mark.parametrize("batch, vocab", CASES, ids=lambda x: str(x))
@pytest.mark.parametrize("name", ["numpy", "torch", "torch-all-threads"])
def test_verify(benchmark, name, batch, vocab):
    target, draft, tokens = _inputs(batch, vocab)
    decoder = {"numpy": NumpyDecoder, "torch": TorchDecoder,
               "torch-all-threads": lambda: TorchDecoder(num_threads=None)}[name]()
    rng = np.random.default_rng(1)
    _bench(benchmark, (name, batch, vocab), lambda: decoder.verify(target, draft, tokens, rng),
           lambda out: int(emitted_lengths(out).sum()))


@pytest.mark.benchmark(group="torch vs numpy: emitted tokens per second")
@pytest.mark.parametrize("batch, vocab", CASES, ids=lambda x: str(x))
def test_verify_tensors(benchmark, batch, vocab):
    target, draft, tokens = (torch.from_numpy(x) for x in _inputs(batch, vocab))
    decoder = TorchDecoder()
    gen = decoder.generator(np.random.default_rng(1))
    _bench(benchmark, ("torch-native", batch, vocab),
           lambda: decoder.verify_tensors(target, draft, tokens, gen),
           lambda out: int((out >= 0).sum()))


def test_ratio_report():
    """Print torch / NumPy per batch size (target ≥ 0.33); run after the benchmarks."""
    if not _RATES:
        pytest.skip("run with --benchmark-enable to time the decoders")
    for batch, vocab in CASES:
        numpy_rate = _RATES.get(("numpy", batch, vocab))
        for name in ("torch", "torch-native", "torch-all-threads"):
            rate = _RATES.get((name, batch, vocab))
            if numpy_rate and rate:
                print(f"B={batch} V={vocab}: {name} / numpy = {rate / numpy_rate:.2f} (target >= 0.33)")
