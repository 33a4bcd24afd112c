"""The slow tier is skipped by the default run and run when asked for, by either switch."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from specgauge.stattests.plugin import skip_unless_slow_tier, slow_tier_requested

_spec = importlib.util.spec_from_file_location("tests_conftest", Path(__file__).with_name("conftest.py"))
tests_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tests_conftest)


class _Config:
    def __init__(self, slow: bool = False, markexpr: str = "") -> None:
        self.options = {"specgauge_slow": slow, "markexpr": markexpr}

    def getoption(self, name: str, default=None):
        return self.options.get(name, default)


class _Item:
    def __init__(self, *marks: str) -> None:
        self.marks, self.added = set(marks), []

    def get_closest_marker(self, name: str):
        return name if name in self.marks else None

    def add_marker(self, marker) -> None:
        self.added.append(marker)


@pytest.mark.parametrize("config, requested", [
    (_Config(), False), (_Config(markexpr="not slow"), False), (_Config(markexpr="slow"), True),
    (_Config(markexpr="slow and not gpu"), True), (_Config(slow=True), True),
], ids=["default", "not-slow", "slow", "slow-expression", "--specgauge-slow"])
def test_the_slow_tier_is_requested_by_either_switch(config, requested):
    assert slow_tier_requested(config) is requested


def test_the_default_run_skips_the_slow_marked_tests_and_says_how_to_run_them():
    slow, quick = _Item("slow"), _Item()
    tests_conftest.pytest_collection_modifyitems(_Config(), [slow, quick])
    assert quick.added == [] and len(slow.added) == 1
    assert "--specgauge-slow or -m slow" in slow.added[0].kwargs["reason"]


def test_the_slow_tier_runs_them():
    slow = _Item("slow")
    tests_conftest.pytest_collection_modifyitems(_Config(markexpr="slow"), [slow])
    assert slow.added == []


def test_a_slow_tier_test_body_skips_in_the_default_run():
    with pytest.raises(pytest.skip.Exception, match="slow tier \\(the 262k fixture\\)"):
        skip_unless_slow_tier(_Config(), "the 262k fixture")
    skip_unless_slow_tier(_Config(slow=True), "the 262k fixture")  # no skip
