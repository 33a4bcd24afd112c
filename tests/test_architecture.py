"""The gate's layout is its architecture: rooms around a core, imports pointing one way.

``stattests/core`` imports no room; ``identity`` (identity testing: the proven rows) imports
the core and no room, and the core never imports it; ``chain``, ``tree``, ``server`` and
``decoders`` import the core and identity testing, never each other. The report layer (``reports/``: ``cli``, ``figures``,
``planning``) sits above the gate, the simulator and the acceptance
measurement, which never import it; only its ``cli`` room brings the others together; no
import circle anywhere; no torch on the command line's import path. The first release's
flat module names of the gate still import, each with a DeprecationWarning.
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


@pytest.mark.parametrize("room", ("core", "identity") + ROOMS)
def test_a_room_imports_only_the_core(room: str) -> None:
    below = {"core": (), "identity": ("core",)}.get(room, ("core", "identity"))
    offending = []
    for path in sorted((ROOT / "stattests" / room).glob("*.py")):
        package = f"specgauge.stattests.{room}"
        for module in _imports(path, package):
            other = _room_of(module)
            if other in ROOMS + ("identity",) and other != room and other not in below:
                offending.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not offending, "\n".join(offending)


def test_the_checker_sees_a_sibling_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from specgauge.stattests.tree.checks import TREE_CHECKS\nfrom ..server import probe\n")
    rooms = {_room_of(m) for m in _imports(bad, "specgauge.stattests.chain")}
    assert {"tree", "server"} <= rooms


#: The repository's folders and the import names setuptools' package-dir gives them.
FOLDERS = {"specgauge": "specgauge", "stattests": "specgauge.stattests", "simulator": "specgauge.simulator",
           "measurement": "specgauge.measurement", "reports": "specgauge.reports", "fixtures": "specgauge.fixtures"}
#: The report layer's rooms; only ``cli`` (the commands) may import the others.
REPORT_ROOMS = ("cli", "figures", "planning")


def _module_name(path: Path) -> tuple[str, str]:
    """(module, package) of a source file: ``reports/cli/plan.py`` is ``specgauge.reports.cli.plan`` in
    ``specgauge.reports.cli``."""
    rel = path.relative_to(ROOT).with_suffix("")
    parts = [FOLDERS[rel.parts[0]], *rel.parts[1:]]
    package = ".".join(parts[:-1])
    return (package if parts[-1] == "__init__" else ".".join(parts)), package


def _graph(*folders: str) -> dict[str, set[str]]:
    """Every module under ``folders`` and the specgauge modules it imports, at the top or in a function."""
    modules = {}
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "test" in path.name or path.name == "conftest.py":
                continue
            modules[path] = _module_name(path)
    names = {name for name, _ in modules.values()}
    graph = {}
    for path, (name, package) in modules.items():
        deps = set()
        for imported in _imports(path, package):
            while imported and imported not in names:  # ``a.b.attr`` imports the module ``a.b``
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                deps.add(imported)
        graph[name] = deps
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle in ``graph`` (a package's ``__init__`` counts as its own module), or []."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        state[node] = 2
        stack.pop()
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def _report_room(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if parts[:2] == ["specgauge", "reports"] and len(parts) > 2 else None


def test_the_report_layer_has_no_import_circle() -> None:
    cycle = _cycle(_graph("reports", "measurement", "simulator", "specgauge"))
    assert not cycle, " -> ".join(cycle)


def test_the_circle_finder_sees_a_circle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def _room_offences(label: str, source: str, name: str, package: str) -> list[str]:
    """What one report module does wrong: a lower room importing another room, or anyone's internals."""
    room, offending = _report_room(name), []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        module = _imports_of(node, package)
        other = _report_room(module)
        if other and other != room and room != "cli":
            offending.append(f"{label} imports the {other} room ({module})")
        private = [a.name for a in node.names if a.name.startswith("_")]
        if private and other and other != room:
            offending.append(f"{label} imports {module}'s internals {private}")
    return offending


def test_report_rooms_import_only_downwards() -> None:
    """``figures`` and ``planning`` import neither each other nor the commands, nor
    anyone's private names across rooms; only ``cli`` brings the rooms together."""
    assert set(REPORT_ROOMS) == {p.name for p in (ROOT / "reports").iterdir() if (p / "__init__.py").exists()}
    offending = []
    for path in sorted((ROOT / "reports").rglob("*.py")):
        name, package = _module_name(path)
        offending += _room_offences(str(path.relative_to(ROOT)), path.read_text(), name, package)
    assert not offending, "\n".join(offending)


def test_the_room_checker_sees_a_lower_room_reaching_sideways_or_up() -> None:
    bad = "from ..planning.slo import parse_slo\nfrom specgauge.reports.cli.plan import main\n"
    assert len(_room_offences("x", bad, "specgauge.reports.figures.x", "specgauge.reports.figures")) == 2
    private = "from specgauge.reports.planning.decisions import _decision\n"
    assert _room_offences("x", private, "specgauge.reports.cli.x", "specgauge.reports.cli")
    assert not _room_offences("x", private, "specgauge.reports.planning.x", "specgauge.reports.planning")


def _imports_of(node: ast.ImportFrom, package: str) -> str:
    if node.level:
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        return ".".join(base + ([node.module] if node.module else []))
    return node.module or ""


def test_the_report_layer_has_few_flat_modules_and_no_feature_prefixes() -> None:
    flat = sorted(p.name for p in (ROOT / "reports").glob("*.py"))
    assert len(flat) <= 8, flat
    prefixed = [str(p.relative_to(ROOT)) for folder in ("reports", "measurement")
                for p in (ROOT / folder).rglob("acceptance_*.py")]
    assert not prefixed, prefixed


@pytest.mark.parametrize(("folder", "forbidden"), [
    # the core (the sweep executors both halves run on included) imports nothing above it
    ("specgauge", ("specgauge.reports", "specgauge.measurement", "specgauge.stattests", "specgauge.simulator")),
    ("stattests", ("specgauge.reports", "specgauge.measurement")),   # the gate, its conftest and plugin included
    ("simulator", ("specgauge.reports", "specgauge.measurement")),
    ("measurement", ("specgauge.reports",)),
    ("fixtures", ("specgauge.reports", "specgauge.measurement")),
    ("specgauge", ("specgauge.reports", "specgauge.measurement", "specgauge.stattests", "specgauge.simulator")),
])
def test_lower_floors_never_import_the_report_layer(folder: str, forbidden: tuple[str, ...]) -> None:
    offending = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        _, package = _module_name(path)
        for module in _imports(path, package):
            if module.startswith(forbidden):
                offending.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not offending, "\n".join(offending)


def test_the_commands_and_the_measurement_import_no_torch() -> None:
    """``specgauge --help``, ``specgauge plan`` and even loading ``specgauge acceptance`` import no torch:
    only a Hugging Face model, once loaded, does."""
    code = ("import sys\n"
            "from specgauge.reports.cli import SUBCOMMANDS, main\n"
            "import importlib\n"
            "assert main(['--help']) == 0\n"
            "for module, _ in SUBCOMMANDS.values():\n"
            "    importlib.import_module(module)\n"
            "import specgauge.measurement.forcing, specgauge.measurement.models, specgauge.measurement.prompts\n"
            "heavy = sorted(m for m in ('torch', 'transformers', 'matplotlib') if m in sys.modules)\n"
            "print(heavy)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]", result.stdout


def test_every_package_folder_is_listed_in_pyproject() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {v: k for k, v in config["package-dir"].items()} == FOLDERS
    found = {_module_name(init)[0] for folder in FOLDERS for init in (ROOT / folder).rglob("__init__.py")
             if "__pycache__" not in init.parts}
    assert found <= set(config["packages"]), found - set(config["packages"])  # data folders are listed too


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
    _prints_ok(code)


def test_the_cores_former_identity_modules_import_with_one_warning() -> None:
    code = (
        "import warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    from specgauge.stattests.core.identity import identity_statistic as old\n"
        "    import specgauge.stattests.core.subsets as subsets\n"
        "from specgauge.stattests.identity.instance import identity_statistic as new\n"
        "assert old is new\n"
        "assert subsets.__name__ == 'specgauge.stattests.identity.subsets', subsets.__name__\n"
        "moved = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]\n"
        "assert len(moved) == 2 and 'moved to specgauge.stattests.identity.instance' in moved[0], moved\n"
        "print('ok')\n"
    )
    _prints_ok(code)


def _prints_ok(code: str) -> None:
    """Runs ``code`` in a fresh interpreter (imports and warnings start clean) and expects 'ok'."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
