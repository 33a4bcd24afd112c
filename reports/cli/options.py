"""Simulation options shared by ``specgauge simulate`` (one value each) and ``specgauge plan`` (swept).

The options are generated from ``SimulationConfig``'s fields that carry ``metadata["help"]``
(see ``specgauge.simulator.config.option``): the flag is the field's name with dashes, the
value is parsed from the field's type (``X | None`` also takes ``none``), and the default
shown in ``--help`` is the dataclass default, or the one a command passes in ``defaults``.
``configs_from_args(args)`` returns the Cartesian product as ``SimulationConfig`` objects,
in a fixed order (the fields' order, last one fastest).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from specgauge import inputs
from specgauge.errors import ConfigError, SpecgaugeError, UsageError, as_usage_error
from specgauge.simulator import SimulationConfig
from specgauge.simulator.acceptance import AcceptanceModel

_NONE_WORDS = ("none", "", "saturated")


@dataclass(frozen=True)
class Option:
    """One command-line option made from one ``SimulationConfig`` field."""

    flag: str
    dest: str
    field: str
    parse: Callable[[str], Any]
    help: str
    default: Any
    sweep: bool = True
    names: Callable[[], list[str]] | None = None

    def shown_default(self) -> str:
        value = self.default
        if isinstance(value, AcceptanceModel):
            return f"{value.mean_alpha:g}"
        return "none" if value is None else str(value)


def _parser_for(hint: Any) -> Callable[[str], Any]:
    """Text -> value from a field's type: ``int``, ``float``, ``str`` and ``X | None``."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        cast = _parser_for(inner)
        return lambda text: None if text.strip().lower() in _NONE_WORDS else cast(text)
    if hint is int:
        return inputs.Integer()  # the range is SimulationConfig's to check, with the field's name
    if hint is float:
        return inputs.finite
    if hint is str:
        return str
    raise TypeError(f"no command-line parser for {hint!r}; give the field metadata parse=...")


def simulation_options() -> list[Option]:
    """Every ``SimulationConfig`` field with help text, as an option, in field order."""
    hints = typing.get_type_hints(SimulationConfig)
    out = []
    for f in dataclasses.fields(SimulationConfig):
        meta = f.metadata
        if "help" not in meta:
            continue
        flag = meta.get("flag", "--" + f.name.replace("_", "-"))
        out.append(Option(flag=flag, dest=flag[2:].replace("-", "_"), field=f.name,
                          parse=meta.get("parse") or _parser_for(hints[f.name]), help=meta["help"],
                          default=f.default, sweep=meta.get("sweep", True), names=meta.get("names")))
    return out


def add_simulation_options(parser: argparse.ArgumentParser, sweep: bool,
                           defaults: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """Add the simulation options; with ``sweep`` each accepts a comma-separated list.

    ``defaults`` (dest -> text) replaces the dataclass defaults shown in the help; the
    command applies them itself (``plan`` does, for its default scenario).
    """
    group = parser.add_argument_group("simulation" + (" (comma-separated lists are swept)" if sweep else ""))
    defaults = dict(defaults or {})
    for opt in simulation_options():
        text = opt.help
        if opt.names is not None:
            text += f"; known: {', '.join(opt.names())}"
        shown = defaults.get(opt.dest, opt.shown_default())
        many = sweep and opt.sweep
        group.add_argument(opt.flag, dest=opt.dest, default=None, metavar="LIST" if many else "X",
                           help=f"{text} (default {shown})".replace("%", "%%"))
    group.add_argument("--csv", default=None, metavar="PATH", help="write the report row(s) to this CSV file")
    parser.set_defaults(_simulation_sweep=sweep)
    return parser


def _values(args: argparse.Namespace, opt: Option, sweep: bool) -> list[Any]:
    raw = getattr(args, opt.dest, None)
    if raw is None:
        return [None]
    items = [s.strip() for s in str(raw).split(",")] if sweep and opt.sweep else [str(raw).strip()]
    values = []
    for item in items:
        try:
            values.append(opt.parse(item))
        except SpecgaugeError as exc:  # e.g. an α out of range: the value was given on the command line
            raise as_usage_error(exc) from None
        except (ValueError, argparse.ArgumentTypeError) as exc:
            reason = str(exc) if isinstance(exc, argparse.ArgumentTypeError) else ""
            raise UsageError(f"invalid value {item!r} for {opt.flag}" + (f": {reason}" if reason else "")) from None
    if len(set(map(repr, values))) != len(values):
        raise UsageError(f"{opt.flag} lists a value twice: {raw!r}")
    return values


def given_options(args: argparse.Namespace) -> list[Option]:
    """The simulation options the user gave on the command line."""
    return [opt for opt in simulation_options() if getattr(args, opt.dest, None) is not None]


def configs_from_args(args: argparse.Namespace, acceptance: AcceptanceModel | list[AcceptanceModel] | None = None
                      ) -> list[SimulationConfig]:
    """The Cartesian product of the given values (one config when nothing is swept).

    ``acceptance`` (one model or a list) overrides ``--alpha``.
    """
    sweep = bool(getattr(args, "_simulation_sweep", False))
    options = simulation_options()
    axes = []
    for opt in options:
        if opt.field == "acceptance" and acceptance is not None:
            axes.append(list(acceptance) if isinstance(acceptance, (list, tuple)) else [acceptance])
        else:
            axes.append(_values(args, opt, sweep))
    configs = []
    for combo in itertools.product(*axes):
        # a value of None is either "not given" (the dataclass default) or an explicit 'none'
        kwargs = {opt.field: value for opt, value in zip(options, combo)
                  if value is not None or getattr(args, opt.dest, None) is not None}
        try:
            configs.append(SimulationConfig(**kwargs))
        except ConfigError as exc:  # a value given on the command line: a usage error (exit status 2)
            raise as_usage_error(exc) from None
    check_combinations(configs, sweep)
    return configs


def check_combinations(configs: list[SimulationConfig], sweep: bool) -> None:
    """Refuse options that would be read and then do nothing, rather than run without them.

    ``--tree-acceptance`` is read only for a tree draft, so without ``--tree`` it is checked
    and refused; ``--arrival-cv`` is read only by a gamma arrival, so it is refused where no
    configuration has one. ``--spec-batch-size`` can only lower the batch cap of the speculative run
    (the engine runs min(batch cap, speculative cap)): above the batch cap it does nothing,
    refused for one configuration; a sweep refuses it above every swept batch cap (below
    some of them it is the engine's lowered cap, as SGLang's 48)."""
    from specgauge.simulator.trees import parse_tree, rank_rates

    try:  # a tree is parsed when γ > 0 fixes its depth; with γ = 0 too, or a bad one fails mid-run
        for text in dict.fromkeys(c.tree for c in configs if c.tree is not None):
            parse_tree(text)
    except ConfigError as exc:
        raise as_usage_error(exc) from None
    given = [c for c in configs if c.tree_acceptance is not None]
    if given:
        try:
            for text in dict.fromkeys(c.tree_acceptance for c in given):
                rank_rates(text)
        except ConfigError as exc:
            raise as_usage_error(exc) from None
        if not any(c.tree is not None for c in given):
            raise UsageError(f"--tree-acceptance {given[0].tree_acceptance} is read only for a tree draft: add --tree "
                             "(e.g. topk:2x3) or drop it")
    shaped = [c for c in configs if c.arrival_cv != 1.0]
    if shaped and not any(c.arrival == "gamma" for c in shaped):
        arrivals = ", ".join(dict.fromkeys(c.arrival for c in shaped))
        raise UsageError(f"--arrival-cv {shaped[0].arrival_cv:g} is read only by --arrival gamma (the arrival here is "
                         f"{arrivals}, which ignores it): add --arrival gamma or drop it")
    capped = [c for c in configs if c.spec_batch_size is not None]
    if capped:
        highest = max(c.batch_size for c in capped)
        over = min((c for c in capped if c.spec_batch_size > c.batch_size), default=None,
                   key=lambda c: c.spec_batch_size)
        if over is not None and (not sweep or over.spec_batch_size > highest):
            several = sweep and len({c.batch_size for c in capped}) > 1
            cap = f"every swept --batch-size (the largest is {highest})" if several else f"--batch-size {highest}"
            raise UsageError(f"--spec-batch-size {over.spec_batch_size} is above {cap}: the speculative "
                             "run's cap can only lower the batch cap (the engine runs at the smaller of the two), "
                             f"so it would do nothing; give at most {highest} or drop it")
