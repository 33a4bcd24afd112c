"""Ctrl-C (SIGINT) ends a running command at once: exit status 130, one line, no traceback,
nothing half-written, and the output's lock released.

Each command runs in its own process on work that takes many seconds; the signal is sent
once the run holds its output's lock (the first thing a writer does when the work starts),
and the process must be gone within ``LIMIT`` seconds of it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

#: seconds from the SIGINT to the process's exit, on a shared 2-core machine
LIMIT = 5.0
#: seconds a command may take to start working (imports under load)
START = 60.0

STEPS = "big_steps.csv"


def _big_steps(folder: Path) -> None:
    """400,000 timed steps: calibrate reads and fits them in about 14 s."""
    import numpy as np

    rng = np.random.default_rng(0)
    n = 400_000
    b, g, c = rng.integers(1, 256, n), rng.integers(1, 6, n), rng.integers(128, 4096, n)
    ms = 4 + 0.03 * b * g + 5e-5 * b * c
    lines = np.char.add(np.char.add(np.char.add(np.char.add((b * g).astype(str), ","), (b * c).astype(str)), ","),
                        np.char.mod("%.4f", ms))
    (folder / STEPS).write_text("batched_tokens,kv_tokens,ms\n" + "\n".join(lines.tolist()) + "\n")


#: (command, argv after `specgauge`, the output whose lock marks the start of the work)
COMMANDS = [
    ("plan", ["plan", "--requests", "20000", "--gamma", "0,2,4", "--batch-size", "16,64", "--no-plot",
              "--csv", "out.csv"], "out.csv"),
    ("simulate", ["simulate", "--requests", "60000", "--csv", "out.csv"], "out.csv"),
    ("calibrate", ["calibrate", "--gpu", "h100", "--target", "llama-3.1-8b", "--steps", STEPS, "--out", "out.toml"],
     "out.toml"),
    ("acceptance", ["acceptance", "--target", "toy:bigram-v6-mid", "--draft", "ngram", "--samples", "20000",
                    "--max-new-tokens", "64", "--no-plot", "--csv", "out.csv"], "out.csv"),
]


@pytest.mark.parametrize(("argv", "output"), [c[1:] for c in COMMANDS], ids=[c[0] for c in COMMANDS])
def test_sigint_ends_a_running_command_with_130_in_one_line(tmp_path, argv, output):
    if argv[0] == "calibrate":
        _big_steps(tmp_path)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    # as a foreground job of a terminal: SIGINT at its default, whatever this test run inherited
    process = subprocess.Popen([sys.executable, "-m", "specgauge.reports.cli", *argv], cwd=tmp_path, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lock = tmp_path / (output + ".lock")
    try:
        deadline = time.monotonic() + START
        while not lock.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lock.exists(), f"{argv[0]} never started working: {process.poll()} {process.stderr.read()}"
        time.sleep(0.5)  # into the work
        assert process.poll() is None, f"{argv[0]} finished before the interrupt; give it more work"
        process.send_signal(signal.SIGINT)
        sent = time.monotonic()
        code = process.wait(timeout=LIMIT + 30)
        took = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    err = process.stderr.read()
    assert code == 130, (code, err)
    assert took < LIMIT, f"{argv[0]} took {took:.1f} s to stop"
    print(f"{argv[0]}: stopped {took:.2f} s after SIGINT")
    assert "Traceback" not in err, err
    assert err.strip().splitlines()[-1].endswith(f"specgauge {argv[0]}: interrupted"), err
    assert sum("interrupted" in line for line in err.splitlines()) == 1, err
    assert not lock.exists() and not (tmp_path / output).exists(), sorted(p.name for p in tmp_path.iterdir())
