"""The simulate/plan flags come from SimulationConfig's fields; help names units, valid names and defaults."""

from __future__ import annotations

import dataclasses

import pytest

from specgauge.reports.cli import plan, simulate
from specgauge.reports.cli.options import simulation_options
from specgauge.simulator import SimulationConfig, known_gpus, known_models


def test_every_configuration_field_is_an_option_of_both_commands():
    fields = [f.name for f in dataclasses.fields(SimulationConfig) if f.init]
    assert [o.field for o in simulation_options()] == fields
    for parser in (simulate.build_parser(), plan.build_parser()):
        flags = {s for a in parser._actions for s in a.option_strings}
        assert {o.flag for o in simulation_options()} <= flags


def test_help_lists_every_known_name_units_and_defaults():
    text = " ".join(simulate.build_parser().format_help().split())
    for name in known_gpus() + known_models():
        assert name in text
    assert "prompt length in tokens" in text and "(default 512)" in text and "requests/s" in text
    # --alpha shows α (by default the draft kind's), not the model object
    assert "model 0.8" in text and "IIDAcceptance" not in text


@pytest.mark.parametrize("flag,value", [("--gamma", "two"), ("--batch-size", "1.5"), ("--qps", "fast")])
def test_a_value_of_the_wrong_type_names_its_flag(flag, value, capsys):
    from specgauge.reports.cli import main

    assert main(["simulate", flag, value]) == 2  # a usage error
    err = capsys.readouterr().err.strip()
    assert f"invalid value {value!r} for {flag}" in err and "\n" not in err


def test_the_manual_names_every_planner_flag():
    from pathlib import Path

    manual = (Path(__file__).resolve().parents[1] / "docs" / "planner.md").read_text(encoding="utf-8")
    for parser in (simulate.build_parser(), plan.build_parser()):
        flags = {s for a in parser._actions for s in a.option_strings if s.startswith("--")} - {"--help"}
        assert not {f for f in flags if f not in manual}, parser.prog
