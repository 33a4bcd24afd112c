"""The SmolLM2 conversion's progress: a bar over its steps whose clock keeps running while a
step (reading the GGUF's metadata, about 20 s) prints nothing of its own."""

from __future__ import annotations

import time

from specgauge.fixtures.real_models import stages


def test_the_bar_is_redrawn_while_a_silent_step_runs(capsys):
    with stages(2, "converting", interval=0.05) as bar:
        bar.set_postfix_str("reading")
        time.sleep(0.6)  # a step that says nothing
        bar.update()
        bar.set_postfix_str("saving")
        bar.update()
    frames = [f.rstrip() for f in capsys.readouterr().err.replace("\r", "\n").splitlines()]
    reading = [f for f in frames if f.startswith("converting: step 0/2") and f.endswith(", reading")]
    assert len(reading) >= 5, frames  # without the clock: one frame when the step is named, none after
    assert any(f.startswith("converting: step 1/2") and f.endswith(", saving") for f in frames), frames
