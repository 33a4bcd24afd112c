"""Simulation options shared by ``specgauge simulate`` (one value each) and ``specgauge plan`` (swept).

``add_simulation_options(parser, sweep)`` adds them; with ``sweep=True`` every option takes
a comma-separated list. ``configs_from_args(args)`` returns the Cartesian product as
``SimulationConfig`` objects, in a fixed order (the options' order, last one fastest).
"""

from __future__ import annotations

import argparse
import itertools
from typing import Any, Callable

from specgauge.simulator import IIDAcceptance, SimulationConfig
from specgauge.simulator.acceptance import AcceptanceModel
from specgauge.errors import ConfigError


def _none_or(cast: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        return None if text.strip().lower() in ("none", "", "saturated") else cast(text)
    return parse


def _int(text: str) -> int:
    return int(text)


def _float(text: str) -> float:
    return float(text)


# (flag, config field, parser of one value, help); defaults come from SimulationConfig.
_OPTIONS: list[tuple[str, str, Callable[[str], Any], str]] = [
    ("--gpu", "gpu", str, "GPU profile (h200, h100-sxm, a100-80gb, ...)"),
    ("--target", "target", str, "target model profile"),
    ("--draft", "draft", _none_or(str), "draft model profile, or 'none'"),
    ("--tp", "tp", _int, "tensor-parallel degree"),
    ("--gamma", "gamma", _int, "drafted tokens per round (0 = no speculation; the maximum for adaptive policies)"),
    ("--alpha", "alpha", _float, "i.i.d. per-token acceptance rate in [0, 1]"),
    ("--draft-cost-ratio", "draft_cost_ratio", _none_or(_float), "fixed draft/target step cost c instead of the draft roofline"),
    ("--batch-size", "batch_size", _int, "batch cap (running requests)"),
    ("--qps", "qps", _none_or(_float), "request rate (requests/s); 'none' keeps the batch full (saturated)"),
    ("--requests", "requests", _int, "number of requests"),
    ("--prompt-len", "prompt_len", _int, "prompt length (mean for non-fixed distributions)"),
    ("--output-len", "output_len", _int, "output length (mean for non-fixed distributions)"),
    ("--length-dist", "length_dist", str, "fixed | uniform | exponential"),
    ("--policy", "policy", str, "none | fixed | disable-above:B | table:B:g,... | goodput"),
    ("--arrival", "arrival", str, "poisson | gamma | trace"),
    ("--arrival-cv", "arrival_cv", _float, "coefficient of variation of gamma inter-arrival gaps"),
    ("--trace", "trace", _none_or(str), "CSV of arrivals (arrival_s[, prompt_len, output_len]) for --arrival trace"),
    ("--max-batched-tokens", "max_batched_tokens", _int, "token budget per iteration (chunked prefill)"),
    ("--gpu-memory-utilization", "gpu_memory_utilization", _float, "fraction of GPU memory for the engine"),
    ("--seed", "seed", _int, "root seed of every random stream"),
]
_FIELDS = [field for _, field, _, _ in _OPTIONS]


def add_simulation_options(parser: argparse.ArgumentParser, sweep: bool) -> argparse.ArgumentParser:
    """Add the simulation options; with ``sweep`` each accepts a comma-separated list."""
    group = parser.add_argument_group("simulation" + (" (comma-separated lists are swept)" if sweep else ""))
    defaults = SimulationConfig()
    for flag, field, cast, text in _OPTIONS:
        default = defaults.acceptance.mean_alpha if field == "alpha" else getattr(defaults, field)
        group.add_argument(flag, dest=field, default=None, metavar="LIST" if sweep else "X",
                           help=f"{text} (default {default})")
    group.add_argument("--profiles", default=None, metavar="PATH",
                       help="TOML/JSON file with extra [gpus.NAME] / [models.NAME] profiles")
    group.add_argument("--csv", default=None, metavar="PATH", help="write the report row(s) to this CSV file")
    parser.set_defaults(_simulation_sweep=sweep)
    return parser


def _values(args: argparse.Namespace, field: str, cast: Callable[[str], Any], sweep: bool) -> list[Any]:
    raw = getattr(args, field, None)
    if raw is None:
        return [None]
    items = [s.strip() for s in str(raw).split(",")] if sweep else [str(raw).strip()]
    flag = "--" + field.replace("_", "-")
    values = []
    for item in items:
        try:
            values.append(cast(item))
        except ValueError:
            raise ConfigError(f"invalid value {item!r} for {flag}") from None
    if len(set(map(repr, values))) != len(values):
        raise ConfigError(f"{flag} lists a value twice: {raw!r}")
    return values


def configs_from_args(args: argparse.Namespace, acceptance: AcceptanceModel | list[AcceptanceModel] | None = None
                      ) -> list[SimulationConfig]:
    """The Cartesian product of the given values (one config when nothing is swept).

    ``acceptance`` (one model or a list) overrides ``--alpha``.
    """
    sweep = bool(getattr(args, "_simulation_sweep", False))
    axes = [_values(args, field, cast, sweep) for _, field, cast, _ in _OPTIONS]
    if acceptance is not None:
        models = list(acceptance) if isinstance(acceptance, (list, tuple)) else [acceptance]
        axes[_FIELDS.index("alpha")] = [None]
    else:
        models = None
    profiles = getattr(args, "profiles", None)
    configs = []
    for combo in itertools.product(*axes):
        kwargs = {field: value for field, value in zip(_FIELDS, combo) if value is not None}
        # explicit 'none' for nullable options
        for field, value in zip(_FIELDS, combo):
            if value is None and getattr(args, field, None) is not None:
                kwargs[field] = None
        alpha = kwargs.pop("alpha", None)
        accs = models if models is not None else [IIDAcceptance(alpha) if alpha is not None else None]
        for acc in accs:
            extra = {"acceptance": acc} if acc is not None else {}
            if profiles is not None:
                extra["profiles"] = profiles
            configs.append(SimulationConfig(**kwargs, **extra))
    return configs
