"""specgauge is a good citizen of any Python environment.

Installed, it adds the one package ``specgauge`` to site-packages, and its pytest plugin
registers prefixed options and nothing else: a foreign project whose conftest defines
``--seed`` and fixtures named ``decoder`` and ``assertion`` runs unchanged, with the same
results, and without numpy or any of specgauge's heavy modules imported.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FOREIGN_CONFTEST = '''
import pytest


def pytest_addoption(parser):
    parser.addoption("--seed", type=int, default=7)


@pytest.fixture
def decoder():
    return "the foreign project's own decoder"


def pytest_generate_tests(metafunc):
    if "assertion" in metafunc.fixturenames:
        metafunc.parametrize("assertion", ["a", "b"])
'''

FOREIGN_TESTS = '''
import json
import sys


def test_seed_is_ours(request):
    assert request.config.getoption("--seed") == 7


def test_decoder_is_ours(decoder):
    assert decoder == "the foreign project's own decoder"


def test_assertion_is_ours(assertion):
    assert assertion in ("a", "b")


def test_report_modules(request):
    light = {"specgauge", "specgauge.stattests", "specgauge.stattests.plugin"}
    heavy = sorted(m for m in sys.modules if m == "numpy" or (m.startswith("specgauge") and m not in light))
    plugin = request.config.pluginmanager.get_plugin("specgauge")
    with open("modules.json", "w") as f:
        json.dump({"heavy": heavy, "plugin_loaded": plugin is not None}, f)
'''


def _run_foreign(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    project = tmp_path / "foreign"
    project.mkdir(exist_ok=True)
    (project / "conftest.py").write_text(textwrap.dedent(FOREIGN_CONFTEST))
    (project / "test_foreign.py").write_text(textwrap.dedent(FOREIGN_TESTS))
    # A package of the foreign project's own named like one of our folders must not
    # shadow the plugin (it used to: "No module named 'stattests.plugin'").
    (project / "stattests").mkdir(exist_ok=True)
    (project / "stattests" / "__init__.py").write_text("OWNER = 'the foreign project'\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SPECGAUGE_"))}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", *extra],
                            cwd=project, env=env, capture_output=True, text=True, timeout=120)
    modules = json.loads((project / "modules.json").read_text()) if (project / "modules.json").exists() else {}
    return result, modules


def _outcomes(output: str) -> list[str]:
    return sorted(line for line in output.splitlines() if line.startswith(("PASSED", "FAILED", "ERROR")))


def test_a_foreign_project_runs_unchanged_with_the_plugin_installed(tmp_path):
    with_plugin, modules = _run_foreign(tmp_path)
    without_plugin, _ = _run_foreign(tmp_path, "-p", "no:specgauge")
    assert with_plugin.returncode == 0, with_plugin.stdout + with_plugin.stderr
    assert modules["plugin_loaded"], "the plugin must be active in this check, or it proves nothing"
    assert _outcomes(with_plugin.stdout) == _outcomes(without_plugin.stdout)
    assert len(_outcomes(with_plugin.stdout)) == 5
    assert modules["heavy"] == [], f"the plugin imported {modules['heavy']} into a foreign run"


def test_plugin_options_are_prefixed():
    result = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    section = result.stdout.split("specgauge certification:", 1)[1].split("\n\n", 1)[0]
    options = [word for word in section.split() if word.startswith("--")]
    assert options and all(option.startswith("--specgauge-") for option in options), options


def test_bad_tv_is_refused_once_at_start_up(tmp_path):
    result = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "stattests"), "--specgauge-tv", "0",
                             "-p", "no:cacheprovider"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode != 0
    assert (result.stdout + result.stderr).count("expected a total-variation distance in [1e-06, 1), got 0.0") == 1


def test_a_certificate_under_xdist_is_refused_before_any_work(tmp_path):
    """Under pytest-xdist each worker sees part of the rows and no summary is shown: the CSV
    asked for would silently never be written, so the run stops at once and says why."""
    pytest.importorskip("xdist")
    result = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "stattests"), "-n", "2",
                             "--specgauge-certificate", str(tmp_path / "c.csv"), "-p", "no:cacheprovider"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 4, result.stdout + result.stderr  # pytest's usage error
    assert "--specgauge-certificate needs the suite in one process" in result.stderr
    assert not (tmp_path / "c.csv").exists()


@pytest.mark.slow
def test_the_wheel_installs_only_the_specgauge_package(tmp_path):
    source = tmp_path / "source"  # a copy, so the build leaves nothing in the checkout
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".*", "build", "dist", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(source)],
                   check=True, capture_output=True, timeout=600)
    (wheel,) = tmp_path.glob("specgauge-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/", 1)[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"specgauge"}
    for part in ("stattests/plugin.py", "stattests/conftest.py", "stattests/test_certification.py",
                 "simulator/engine.py", "reports/cli/__init__.py", "sweeps/journal.py", "measurement/forcing.py",
                 "fixtures/pairs.py", "fixtures/hardware/gpus.toml",
                 "errors.py", "laws.py"):
        assert f"specgauge/{part}" in names, part
    assert not any(name.startswith(("specgauge/tests/", "specgauge/benchmarks/")) for name in names)
    (license_file,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    assert "Apache License" in zipfile.ZipFile(wheel).read(license_file).decode()


def test_an_unwritable_certificate_path_is_refused_before_any_test(tmp_path):
    result = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "stattests" / "test_certification.py"),
                             "--specgauge-certificate", str(tmp_path / "missing" / "cert.csv"), "-p", "no:cacheprovider"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 4, result.stdout + result.stderr  # pytest's usage error: nothing ran
    assert "does not exist" in result.stderr and "passed" not in result.stdout


@pytest.mark.slow
def test_an_installed_wheel_runs_the_suite_from_anywhere_even_under_a_checkout(tmp_path):
    """`pytest --pyargs specgauge.stattests` from an installed wheel, and `python -m pytest`
    from a checkout that shadows the installed copy, both find the plugin and the suite."""
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".*", "build", "dist", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(source)],
                   check=True, capture_output=True, timeout=600)
    (wheel,) = tmp_path.glob("specgauge-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()
    with zipfile.ZipFile(wheel) as archive:  # what pip would put there, with this run's packages beside it
        archive.extractall(site)
    import numpy
    Path(site, "zz-dependencies.pth").write_text(str(Path(numpy.__file__).parents[1]) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "SPECGAUGE_", "PYTHONPATH"))}
    collect = ["-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for cwd, args in ((elsewhere, ["--pyargs", "specgauge.stattests"]), (source, ["stattests/test_certification.py"])):
        result = subprocess.run([str(python), *collect, *args], cwd=cwd, env=env, capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        assert "test_exactness[numpy-" in result.stdout


def test_the_declared_license_ships_as_a_file():
    """pyproject declares Apache-2.0 and names LICENSE, which holds that text (the wheel test checks the wheel)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text and "END OF TERMS AND CONDITIONS" in text
