"""The gate's layout is its architecture: rooms around a core, imports pointing one way.

``stattests/core`` imports no room; ``chain``, ``tree``, ``server`` and ``decoders`` import
the core and never each other; ``reports`` has no import circle. The first release's flat
module names still import, each with a DeprecationWarning.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("chain", "tree", "server", "decoders")


def _imports(path: Path, package: str) -> set[str]:
    """Every module ``path`` imports (absolute names; relative ones resolved against ``package``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def _room_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] == ["specgauge", "stattests"] and len(parts) > 2:
        return parts[2]
    return None


@pytest.mark.parametrize("room", ("core",) + ROOMS)
def test_a_room_imports_only_the_core(room: str) -> None:
    offending = []
    for path in sorted((ROOT / "stattests" / room).glob("*.py")):
        package = f"specgauge.stattests.{room}"
        for module in _imports(path, package):
            other = _room_of(module)
            if other in ROOMS and other != room:
                offending.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not offending, "\n".join(offending)


def test_the_checker_sees_a_sibling_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from specgauge.stattests.tree.checks import TREE_CHECKS\nfrom ..server import probe\n")
    rooms = {_room_of(m) for m in _imports(bad, "specgauge.stattests.chain")}
    assert {"tree", "server"} <= rooms


def _reports_graph() -> dict[str, set[str]]:
    graph = {}
    for path in (ROOT / "reports").glob("*.py"):
        name = f"specgauge.reports.{path.stem}"
        graph[name] = {m for m in _imports(path, "specgauge.reports")
                       if m.startswith("specgauge.reports.") and m.count(".") == 2}
    return graph


def test_reports_has_no_import_circle() -> None:
    graph = _reports_graph()
    cycles = [f"{a} <-> {b}" for a, deps in graph.items() for b in deps if a in graph.get(b, ()) and a < b]
    assert not cycles, cycles


def test_old_flat_names_import_with_one_warning() -> None:
    code = (
        "import warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    from specgauge.stattests.contract import load_decoder\n"
        "    import specgauge.stattests.tree_checks as tc\n"
        "    from specgauge.stattests.core.contract import load_decoder as new\n"
        "assert load_decoder is new\n"
        "assert tc.__name__ == 'specgauge.stattests.tree.checks', tc.__name__\n"
        "assert tc.__spec__.name == tc.__name__, tc.__spec__.name\n"
        "moved = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]\n"
        "assert len(moved) == 2, moved\n"
        "assert 'moved to specgauge.stattests.core.contract' in moved[0], moved\n"
        "from specgauge.stattests import NumpyDecoder, Certificate\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
