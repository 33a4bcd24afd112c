"""``pytest stattests`` as a decoder's author runs it: a run naming a chain decoder is about that
decoder alone, and a sized run (``--specgauge-guarantee``) sizes what ``-k`` selects and refuses
once, in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pytest(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=600)


def test_a_chain_decoders_run_certifies_no_tree_reference(tmp_path):
    """No tree certificate of the project's own references is printed or written beside the user's."""
    cert = tmp_path / "cert.csv"
    result = _pytest(str(ROOT / "stattests" / "test_trees.py"), "--specgauge-decoder", "numpy", "-rs",
                     "--specgauge-certificate", str(cert), cwd=tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "2 skipped" in out and "this run certifies the chain decoder numpy" in out, out
    assert "tree certificate" not in out and not list(tmp_path.glob("*.tree-*.csv")), out


def test_a_sized_run_sizes_what_k_selects(tmp_path):
    result = _pytest(str(ROOT / "stattests" / "test_certification.py"), "--specgauge-guarantee", "0.1",
                     "-k", "seed-six-token", cwd=tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "sizing the assertions selected" in out, out
    sized = next(line for line in out.splitlines() if "sized run:" in line)
    assert "seed-six-token" in sized and ";" not in sized, sized  # the one fixture selected, no other
    assert "34 passed" in out, out


def test_a_refused_sized_run_says_so_once(tmp_path):
    result = _pytest(str(ROOT / "stattests" / "test_certification.py"), "--specgauge-guarantee", "0.1",
                     "--specgauge-max-cpu-hours", "0.00001", "-k", "seed-six-token", cwd=tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode == 4, out
    assert out.count("estimated at") == 1 and "--specgauge-max-cpu-hours" in out, out
    assert "Traceback" not in out, out
