"""The project's own tests: the hypothesis profile their fuzz tests scale up under, and
the Triton interpreter switched on before any test imports triton.

The profile is registered here, before pytest configures hypothesis, so that
``pytest --hypothesis-profile slow tests/test_cli_fuzz.py`` runs ten times the examples.

On a machine without an NVIDIA device, vLLM's and SGLang's kernels run under Triton's
interpreter, which must be on when triton is first imported: transformers imports it, so
a test of HF models run before the backend tests would otherwise leave triton compiled
and the interpreted kernels failing. The adapters refuse that state with a clear error.

Tests marked ``slow`` are the slow tier: the default run skips them (saying how to run them),
so that it stays inside its time budget; ``--specgauge-slow`` or ``-m slow`` runs them.

The longest files run first (:data:`LONGEST_FIRST`): ``pytest -n 2 --dist loadfile`` hands
out whole files in collection order, so a long file collected last (the zoo, alphabetically)
would keep one worker busy for two minutes after the other ran out of work.
"""

import glob
import os

import pytest
from hypothesis import settings

from specgauge.stattests.plugin import slow_tier_requested

if not glob.glob("/dev/nvidia[0-9]*"):
    os.environ.setdefault("TRITON_INTERPRET", "1")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

settings.register_profile("slow", deadline=None)

#: The default tier's longest files, longest first (CPU seconds on an idle 2-core machine:
#: 118, 82, 59, 52, 52, 44); every other file keeps its place after them.
LONGEST_FIRST = ("tests/test_zoo.py", "stattests/test_certification.py", "tests/test_backend_vllm.py",
                 "tests/test_calibration_families.py", "tests/test_backend_sglang.py",
                 "tests/test_probe_interrupts.py")


def _longest_first(item: pytest.Item) -> int:
    path = getattr(item, "nodeid", "").split("::", 1)[0]
    return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_longest_first)  # stable: the order inside a file, and of the other files, is kept
    if slow_tier_requested(config):
        return
    skip = pytest.mark.skip(reason="slow tier: run with --specgauge-slow or -m slow")
    for item in items:
        if item.get_closest_marker("slow"):
            item.add_marker(skip)
