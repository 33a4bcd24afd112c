"""Certificates to look at: one PNG per fixture beside the CSV, titled with decoder, fixture
and verdict, and a failing decoder's figure marks where its bias is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("matplotlib")

import specgauge.stattests.chain.figures as cp  # noqa: E402
from specgauge.reports.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FAST = ["--tv", "0.05", "--no-progress"]
ACCEPT_ALL = "specgauge.stattests.chain.zoo:accept-all"


@pytest.fixture
def drawn(monkeypatch):
    """What each figure shows: the suptitle and its colour, each panel's title, the red marks."""
    seen: dict[str, dict] = {}
    real_save = cp.save_figure

    def recording_save(fig, path, **kwargs):
        panels = fig.axes
        seen[path.name] = {
            "title": fig._suptitle.get_text(), "color": fig._suptitle.get_color(),
            "panels": [ax.get_title() for ax in panels],
            "red_patches": sum(1 for ax in panels for p in ax.patches if _is_red(p.get_facecolor())
                               or _is_red(p.get_edgecolor())),
        }
        return real_save(fig, path, **kwargs)

    monkeypatch.setattr(cp, "save_figure", recording_save)
    return seen


def _is_red(color) -> bool:
    from matplotlib.colors import to_rgba

    return np.allclose(to_rgba(color)[:3], to_rgba("tab:red")[:3], atol=0.02) and to_rgba(color)[3] > 0


def _certify(tmp_path: Path, name: str, *args: str) -> tuple[int, Path]:
    csv = tmp_path / f"{name}.csv"
    return main(["certify", *args, *FAST, "--plot", "--csv", str(csv)]), csv


def test_certify_plot_writes_one_png_per_fixture_beside_the_csv(tmp_path, drawn, capsys):
    status, csv = _certify(tmp_path, "cert", "--fixture", "seed-six-token", "--fixture", "bigram-v6-far-L4-g2")
    assert status == 0 and csv.exists()
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == ["cert_bigram-v6-far-L4-g2.png", "cert_seed-six-token.png"]
    assert all((tmp_path / p).stat().st_size > 20_000 for p in pngs)
    assert "figures: 2 PNGs beside it" in capsys.readouterr().out
    seed = drawn["cert_seed-six-token.png"]
    assert seed["title"] == "numpy · seed-six-token · no deviation found, acceptance on the law" and seed["color"] == "black"
    assert seed["red_patches"] == 0
    panels = " | ".join(seed["panels"])
    for name in ("PIT, vocabulary by id", "PIT, vocabulary by p/q", "observed against expected counts",
                 "acceptance by position against 1 − TV", "tokens per pass against the law"):
        assert name in panels
    sequence = drawn["cert_bigram-v6-far-L4-g2.png"]
    assert "numpy · bigram-v6-far-L4-g2 · no deviation found" in sequence["title"]
    assert "first round's tokens per pass" in " | ".join(sequence["panels"])


def test_a_failing_decoders_figure_names_the_failure_and_marks_where(tmp_path, drawn, capsys):
    status, csv = _certify(tmp_path, "bad", "--decoder", ACCEPT_ALL, "--fixture", "seed-six-token")
    assert status == 1
    out, err = capsys.readouterr()
    assert "figures: 1 PNG beside it, bad_seed-six-token.png" in out.splitlines()
    failed = int((pd.read_csv(csv)["verdict"] == "fail").sum())
    listed = [line for line in out.splitlines() if line.startswith("  FAIL ")]
    assert failed > 12 and len(listed) == 12  # the summary lists twelve, then counts the rest and says where
    assert f"  ... and {failed - 12} more failed assertions in bad.csv" in out.splitlines(), out
    assert "the worst-case guarantee each fixture reaches is stated with the verdict" in err
    bad = drawn["bad_seed-six-token.png"]
    assert bad["title"].startswith(f"{ACCEPT_ALL} · seed-six-token · NOT EXACT: exactness")
    assert bad["color"] == "tab:red"
    pit_id, pit_ratio, counts, acceptance, tokens = bad["panels"][:5]
    assert "fails at pos0" in pit_id and "fails at pos0" in pit_ratio
    assert "outside the band" in counts and "all inside" not in counts
    assert "fails at pos0" in acceptance and "differs" in tokens
    assert bad["red_patches"] >= 5  # PIT bins outside the band, the pass length the law forbids


def test_without_plot_no_figure_is_drawn(tmp_path):
    csv = tmp_path / "cert.csv"
    assert main(["certify", "--fixture", "tiny", *FAST, "--csv", str(csv)]) == 0
    assert csv.exists() and not list(tmp_path.glob("*.png"))


def test_the_uniform_band_holds_uniform_pit_values_and_not_biased_ones():
    rng = np.random.default_rng(0)
    lo, hi = cp.pit_band(20_000)
    inside = []
    for _ in range(200):
        density = np.histogram(rng.random(20_000), bins=cp.PIT_BINS, range=(0, 1))[0] * cp.PIT_BINS / 20_000
        inside.append(bool(((density >= lo) & (density <= hi)).all()))
    assert np.mean(inside) >= 0.98  # the band is family-wise at 1e-3 over the bins
    skewed = np.histogram(rng.random(20_000) ** 1.1, bins=cp.PIT_BINS, range=(0, 1))[0] * cp.PIT_BINS / 20_000
    assert ((skewed < lo) | (skewed > hi)).any()


def test_acceptance_by_position_counts_rows_that_reached_each_position():
    lengths = np.array([1, 2, 3, 3, 2])  # accepted 0, 1, 2, 2, 1 of γ = 2
    table = cp.acceptance_by_position(lengths, np.full((5, 2), 0.5))
    assert table["n"].tolist() == [5, 4]
    assert table["observed"].tolist() == [0.8, 0.5]
    assert table["expected"].tolist() == [0.5, 0.5]
    assert ((table["low"] <= table["observed"]) & (table["observed"] <= table["high"])).all()


def test_the_verdict_in_words():
    rows = pd.DataFrame({"check": ["exactness", "acceptance"], "family": ["exactness", "optimality"],
                         "verdict": ["pass", "pass"]})
    assert cp.fixture_verdict(rows) == "no deviation found, acceptance on the law"
    assert cp.fixture_verdict(rows.assign(verdict=["pass", "fail"])) == "no deviation found, not optimal: acceptance failed"
    assert cp.fixture_verdict(rows.assign(verdict=["fail", "pass"])) == "NOT EXACT: exactness failed"


def test_pytest_certificate_writes_the_figures_beside_it(tmp_path):
    """``pytest stattests --specgauge-certificate PATH`` draws them too (a subprocess: its own session)."""
    csv = tmp_path / "cert.csv"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "stattests/test_certification.py",
         "-k", "seed-six-token and (exactness or acceptance)", "--specgauge-tv", "0.05",
         "--specgauge-certificate", str(csv)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert (tmp_path / "cert_seed-six-token.png").exists(), result.stdout[-2000:]
    assert "figures: 1 PNG beside it, cert_seed-six-token.png" in result.stdout
