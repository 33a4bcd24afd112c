"""`specgauge law`: tokens per pass and speed-up against α, closed form and Monte Carlo.

The closed form is Leviathan et al.'s: a round drafting γ tokens that are each accepted
with probability α (i.i.d.) emits E[N] = (1 − α^(γ+1)) / (1 − α) tokens per target pass,
and with a draft step costing c target passes the walltime speed-up is
E[N] / (γc + 1). The Monte Carlo column runs the same rounds through a contract decoder
(``--decoder``, the NumPy reference by default) on p, q pairs built at TV = 1 − α, so
the curve a reader draws is checked against a real verification rule, not only algebra.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from specgauge import inputs
from specgauge.csvio import CsvTarget, resolve_csv_target, write_csv_atomic
from specgauge.stattests.core.contract import ContractViolation, check_emitted, emitted_lengths, load_decoder
from specgauge.errors import SpecgaugeError
from specgauge.laws import law_frame, speedup, tokens_per_pass  # noqa: F401  (speedup: re-exported)
from specgauge.stattests.core.sampling import sample_rows
from specgauge.sweeps.journal import sweep_lock

from .console import say, warn

#: The seed document's six-token example: TV(p, q) = 0.1, so α = 0.9.
SEED_TARGET = np.array([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
SEED_DRAFT = np.array([0.35, 0.30, 0.20, 0.10, 0.03, 0.02])

class LawInputError(SpecgaugeError):
    """An option of ``specgauge law`` is out of range."""


int_list = inputs.CommaList(inputs.positive_int)
float_list = inputs.CommaList(inputs.fraction)

#: Rounds per decoder call, so memory stays O(chunk·γ·V) however many rounds are asked.
_CHUNK = 50_000


def pair_at_tv(tv: float, vocab: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """A target p and draft q over ``vocab`` tokens with TV(p, q) = ``tv`` exactly.

    Both share a uniform body of weight 1 − tv; p puts the rest on token 0 and q on
    token 1, so they differ by exactly ``tv`` in total variation.
    """
    if not 0.0 <= tv <= 1.0:
        raise ValueError(f"total variation must lie in [0, 1], got {tv}")
    body = np.full(vocab, (1.0 - tv) / vocab)
    p, q = body.copy(), body.copy()
    p[0] += tv
    q[1] += tv
    return p, q


@dataclass(frozen=True)
class MonteCarloResult:
    """What ``rounds`` verification rounds through a decoder measured."""

    rounds: int
    tokens_per_pass: float
    tokens_per_pass_se: float
    acceptance_rate: float
    acceptance_rate_se: float


def monte_carlo(
    p: np.ndarray,
    q: np.ndarray,
    gamma: int,
    rounds: int,
    rng: np.random.Generator,
    decoder: object | None = None,
    on_chunk: Callable[[int], None] | None = None,
) -> MonteCarloResult:
    """Run ``rounds`` rounds of γ drafts from q verified against p; measure N and α.

    The acceptance rate is accepted drafts over drafts that were judged (those up to and
    including the first rejection), the maximum-likelihood α of the truncated geometric.
    """
    decoder = decoder if decoder is not None else get_decoder("numpy")
    rng = np.random.default_rng(rng)
    vocab = p.shape[-1]
    lengths = []
    for start in range(0, rounds, _CHUNK):
        batch = min(_CHUNK, rounds - start)
        target = np.tile(p, (batch, gamma + 1, 1))
        draft = np.tile(q, (batch, gamma, 1))
        draft_tokens = sample_rows(draft, rng).astype(np.int64)
        try:
            emitted = check_emitted(decoder.verify(target, draft, draft_tokens, rng), draft_tokens, vocab)
        except ContractViolation as exc:
            raise LawInputError(f"the decoder broke the verify contract: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - a user's decoder may raise anything; one line, not a traceback
            first = (str(exc).strip().splitlines() or [""])[0]
            raise LawInputError(f"the decoder's verify raised {type(exc).__name__}: {first}") from None
        lengths.append(emitted_lengths(emitted))
        if on_chunk is not None:
            on_chunk(batch)
    n = np.concatenate(lengths).astype(float)
    accepted = np.minimum(n - 1, gamma)
    judged = accepted + (n <= gamma)
    alpha_hat = accepted.sum() / judged.sum() if judged.sum() else float("nan")
    return MonteCarloResult(
        rounds=rounds,
        tokens_per_pass=float(n.mean()),
        tokens_per_pass_se=float(n.std(ddof=1) / np.sqrt(rounds)) if rounds > 1 else float("nan"),
        acceptance_rate=float(alpha_hat),
        acceptance_rate_se=float(np.sqrt(alpha_hat * (1 - alpha_hat) / judged.sum())) if judged.sum() else float("nan"),
    )


def get_decoder(spec: str | None) -> object:
    """``load_decoder``, instantiating a class it hands back (a class has ``verify`` too)."""
    decoder = load_decoder(spec)
    return decoder() if isinstance(decoder, type) else decoder


def law_table(
    alphas: list[float],
    gammas: list[int],
    cost_ratio: float,
    rounds: int,
    seed: int,
    decoder: object | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """One row per (γ, α): closed form beside the Monte Carlo measurement.

    Every (γ, α) point gets its own child of one SeedSequence, so adding a point never
    shifts another point's draws.
    """
    frame = law_frame(alphas, gammas, cost_ratio)
    if rounds > 0:
        from tqdm import tqdm

        children = np.random.SeedSequence(seed).spawn(len(frame))
        with tqdm(total=rounds * len(frame), desc="law", unit="round", unit_scale=True, disable=not progress,
                  leave=False) as bar:
            results = [
                monte_carlo(*pair_at_tv(1.0 - a), int(g), rounds, np.random.default_rng(child), decoder, bar.update)
                for a, g, child in zip(frame["alpha"], frame["gamma"], children)
            ]
        frame["mc_rounds"] = rounds
        frame["mc_tokens_per_pass"] = [r.tokens_per_pass for r in results]
        frame["mc_tokens_per_pass_se"] = [r.tokens_per_pass_se for r in results]
        frame["mc_acceptance_rate"] = [r.acceptance_rate for r in results]
        frame["mc_acceptance_rate_se"] = [r.acceptance_rate_se for r in results]
        frame["mc_speedup"] = frame["mc_tokens_per_pass"] / (frame["gamma"] * cost_ratio + 1.0)
    return frame


def seed_example(rounds: int, seed: int, decoder: object | None = None, gamma: int = 4) -> dict[str, float]:
    """The seed document's check: its six-token p, q at γ = 4 through a decoder."""
    alpha = 1.0 - 0.5 * float(np.abs(SEED_TARGET - SEED_DRAFT).sum())
    mc = monte_carlo(SEED_TARGET, SEED_DRAFT, gamma, rounds, np.random.default_rng(seed), decoder)
    return {
        "gamma": gamma,
        "alpha_from_tv": alpha,
        "tokens_per_pass": float(tokens_per_pass(alpha, gamma)),
        "mc_acceptance_rate": mc.acceptance_rate,
        "mc_tokens_per_pass": mc.tokens_per_pass,
        "mc_rounds": mc.rounds,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,  # a prefix is refused, never read as the option it begins (`--out`, `--output-len`)
        prog="specgauge law",
        description="Tokens per pass and speed-up against acceptance α for several γ: "
        "closed form and a Monte Carlo check through a contract decoder.",
    )
    parser.add_argument("--gamma", type=int_list, default=[1, 2, 3, 4, 5, 6, 8], help="comma-separated γ values")
    parser.add_argument(
        "--alpha", type=float_list, default=[round(a, 2) for a in np.arange(0.0, 1.0, 0.05)] + [0.99],
        help="comma-separated α values in [0, 1]",
    )
    parser.add_argument("--cost-ratio", type=inputs.non_negative, default=0.05, help="draft step cost c, in target passes")
    parser.add_argument("--rounds", type=inputs.non_negative_int, default=4000, help="Monte Carlo rounds per point (0: closed form only)")
    parser.add_argument("--decoder", default="numpy", help="decoder for the Monte Carlo check (short name or MODULE:NAME)")
    parser.add_argument("--seed", type=inputs.seed, default=0, help="root seed of the Monte Carlo draws")
    parser.add_argument("--csv", type=inputs.OutputPath((".csv",)), default=None, help="output CSV (default specgauge-out/law.csv)")
    parser.add_argument("--plot", action="store_true", help="also write tokens-per-pass and speed-up PNGs beside the CSV")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.add_argument("--example", action="store_true",
                        help="run the seed's six-token example (α = 0.9, γ = 4) and print what it measures")
    return parser


#: a bar and an estimate are shown when the Monte Carlo work is expected to take longer than this
SLOW_SECONDS = 5.0


def rounds_per_second(decoder: object, gamma: int, probe: int = 2000) -> float:
    """Rounds a second ``decoder`` verifies at ``gamma`` here and now: a short timed run."""
    import time

    start = time.perf_counter()
    monte_carlo(*pair_at_tv(0.1), gamma, probe, np.random.default_rng(0), decoder)
    return probe / max(time.perf_counter() - start, 1e-9)


def _announce(total: int, gamma: int, decoder: object) -> bool:
    """Estimate the Monte Carlo time before starting; True when a progress bar is worth showing."""
    seconds = total / rounds_per_second(decoder, gamma)
    if seconds <= SLOW_SECONDS:
        return False
    from .budget import duration as _duration

    message = f"{total:,} Monte Carlo rounds at γ up to {gamma}: about {_duration(seconds)} (measured rate)"
    if seconds > 3600:
        warn("law", message + "; lower --rounds (4,000 a point give a standard error near 0.02)")
    else:
        say(f"specgauge law: {message}", file=sys.stderr)
    return True


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    decoder = get_decoder(args.decoder) if args.rounds or args.example else None
    if args.example:
        rounds = max(args.rounds, 1_000_000)
        ex = seed_example(rounds, args.seed, decoder)
        say(f"seed example, γ = {ex['gamma']}, {rounds:,} rounds through decoder {args.decoder!r}")
        say(f"  acceptance rate      : {ex['mc_acceptance_rate']:.3f}   (1 − TV = {ex['alpha_from_tv']:.3f})")
        say(f"  tokens per pass      : {ex['mc_tokens_per_pass']:.3f}   (formula {ex['tokens_per_pass']:.3f} ≈ {ex['tokens_per_pass']:.2f})")
        return 0
    target: CsvTarget = resolve_csv_target(args.csv, default_name="law.csv")
    total = args.rounds * len(args.alpha) * len(args.gamma)
    slow = bool(total) and _announce(total, max(args.gamma), decoder)
    with sweep_lock(target, "specgauge law " + " ".join(sys.argv[2:] if argv is None else argv)):  # one run a CSV
        frame = law_table(args.alpha, args.gamma, args.cost_ratio, args.rounds, args.seed, decoder,
                          progress=slow and not args.no_progress)
        metadata = {"command": "law",
                    "arguments": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}}
        write_csv_atomic(frame, target.path, metadata)
        say(f"wrote {target.path} ({len(frame)} rows)")
        if args.plot:
            from specgauge.reports.figures.curves import plot_law

            for path in plot_law(frame, target.path):
                say(f"wrote {path}")
    if args.rounds:
        worst = ((frame["mc_tokens_per_pass"] - frame["tokens_per_pass"]) / frame["mc_tokens_per_pass_se"].where(
            frame["mc_tokens_per_pass_se"] > 0)).abs().max()
        say(f"Monte Carlo vs closed form: largest |z| of tokens per pass = {0.0 if np.isnan(worst) else worst:.2f}")
    return 0
