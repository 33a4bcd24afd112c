"""Progress lines are named: a sweep's line in a log read ": 64/72 configs", with no label."""

from __future__ import annotations

import io


def test_a_sweep_names_its_progress_line(monkeypatch):
    import specgauge.progress as progress
    from specgauge.sweeps.executors import SweepOptions, run_sweep

    stream = io.StringIO()

    def bar(*args, **kwargs):  # the project's own bar, written to a log every update
        kwargs.update(file=stream, every_s=0.0)
        kwargs.pop("dynamic_ncols", None)
        return progress.LineBar(*args, **kwargs)
    monkeypatch.setattr(progress, "bar", bar)
    run_sweep(lambda x: {"x": x}, [1, 2, 3], SweepOptions(executor="serial", progress=True))
    lines = stream.getvalue().splitlines()
    assert lines and all(line.startswith("sweep: ") for line in lines), lines
