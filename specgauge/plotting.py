"""matplotlib for every figure specgauge draws: an optional extra, on the Agg backend, imported only when asked.

The gate's certificate figures and the reports' figures both draw through here, so a
missing matplotlib is one error (``PlotError``) with one remedy wherever a figure is asked for.
"""

from __future__ import annotations

from pathlib import Path

from specgauge.errors import SpecgaugeError


class PlotError(SpecgaugeError):
    """A figure was asked for but cannot be drawn (matplotlib missing)."""


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend; ``PlotError`` when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        raise PlotError("--plot needs matplotlib: pip install 'specgauge[plot]'") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, dpi: int = 120) -> Path:
    """Write ``fig`` as a PNG without a timestamp or software tag (same figure, same bytes), then clear it;
    written as every report is (``csvio.write_bytes_atomic``): whole or not at all, a failure in one line."""
    import io

    from specgauge.csvio import write_bytes_atomic

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    fig.clf()
    write_bytes_atomic(path, buffer.getvalue())
    return path


def png_beside(csv_path: Path, name: str) -> Path:
    """``plan.csv`` and ``speedup`` give ``plan_speedup.png`` in the same folder."""
    return csv_path.with_name(f"{csv_path.stem}_{name}.png")
