"""`probe` and `compare` never hang: servers that never answer, Ctrl-C, deadlines, progress in logs.

Every case runs the real command in a subprocess with SIGINT left ignored by the parent (as a
job started with ``&`` from a script inherits it) and a hard time limit: a hang fails the
test instead of stalling the suite.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("httpx2")

MODELS = b'{"object":"list","data":[{"id":"m","object":"model"}]}'
LIMIT_S = 60  # a whole case: Python start-up and imports under load included


class Hostile:
    """A server on a thread: /v1/models answers; completions hang, answer 429 with a huge
    Retry-After, or send an endless chunked body."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = threading.Event()
        self.asked = threading.Event()  # a completion request has arrived
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            while not self.stop.is_set():
                request = conn.recv(65536)
                if not request:
                    return
                if request.startswith(b"GET"):
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                                 % len(MODELS) + MODELS)
                    continue
                self.asked.set()
                if self.mode == "silent":
                    self.stop.wait()
                elif self.mode == "429":
                    conn.sendall(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 100000\r\nContent-Length: 0\r\n\r\n")
                else:  # chunked: a byte every 0.2 s, for ever
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Transfer-Encoding: chunked\r\n\r\n")
                    while not self.stop.wait(0.2):
                        conn.sendall(b"1\r\n \r\n")
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture(params=["silent", "429", "chunked"])
def hostile(request):
    server = Hostile(request.param)
    yield server
    server.close()


def _start(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "specgauge.reports.cli", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))


def _interrupt_after(proc: subprocess.Popen, wait_s: float,
                     asked: threading.Event | None = None) -> tuple[int, str, float]:
    """SIGINT ``wait_s`` after the start, or after the server was asked for a completion."""
    if asked is not None:
        assert asked.wait(LIMIT_S), "the probe never asked for a completion"
    time.sleep(wait_s)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    try:
        _, err = proc.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("still running after SIGINT")
    return proc.returncode, err, time.monotonic() - sent


def test_probe_ends_at_once_on_sigint(hostile, tmp_path):
    proc = _start(["probe", hostile.url, "--out", "run.jsonl", "--timeout", "5"], tmp_path)
    status, err, took = _interrupt_after(proc, 0.5, hostile.asked)  # blocked in the request, or in its wait
    assert status == 130 and took < 5, (status, took, err)
    assert err.strip().splitlines()[-1] == "specgauge probe: interrupted" and "Traceback" not in err


def test_an_endless_body_or_a_silent_server_ends_at_the_timeout(hostile, tmp_path):
    if hostile.mode == "429":
        pytest.skip("a 429 is answered at once: the Retry-After cap covers it")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "specgauge.reports.cli", "probe", hostile.url, "--out", "run.jsonl",
                           "--timeout", "2", "--retries", "1"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=LIMIT_S)
    assert done.returncode == 1 and "no complete answer within --timeout 2 s" in done.stderr.splitlines()[-1]
    assert time.monotonic() - started < 30


def test_retry_after_is_capped_and_said(tmp_path):
    server = Hostile("429")
    try:
        done = subprocess.run([sys.executable, "-m", "specgauge.reports.cli", "probe", server.url, "--out", "run.jsonl",
                               "--max-retry-after", "0.5", "--retries", "2"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=LIMIT_S)
    finally:
        server.close()
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and "HTTP 429 after 2 retries" in lines[-1]
    assert "Retry-After 100000 s (capped at 0.5 s); retry 1 of 2" in lines[0]


def test_the_deadline_ends_the_probe_and_says_what_it_waited_for(tmp_path):
    server = Hostile("silent")
    try:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "specgauge.reports.cli", "probe", server.url, "--out", "run.jsonl",
                               "--deadline", "3"], cwd=tmp_path, capture_output=True, text=True, timeout=LIMIT_S)
    finally:
        server.close()
    line = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and time.monotonic() - started < 30
    assert "deadline (3 s) passed while waiting for the first completion" in line and "rerun to resume" in line


def test_the_progress_shows_in_a_log_and_on_a_terminal(tmp_path):
    from specgauge.fixtures.fake_openai import FakeOpenAI
    from specgauge.fixtures.serve import serve_app
    from specgauge.stattests.server.progress import Progress

    clock = iter(range(0, 1000, 4))
    log = tmp_path / "log.txt"
    with open(log, "w") as stream:
        bar = Progress(100, "probe", mode="lines", stream=stream, every_s=10, clock=lambda: next(clock))
        for _ in range(10):
            bar.update(10)
        bar.close()
    lines = log.read_text().splitlines()
    assert len(lines) >= 3 and lines[-1].startswith("probe: 100/100 samples (100%)") and "ETA" in lines[0]
    pexpect = pytest.importorskip("pexpect")
    with serve_app(FakeOpenAI()) as url:
        child = pexpect.spawn(sys.executable, ["-m", "specgauge.reports.cli", "probe", url, "--out",
                                               str(tmp_path / "run.jsonl"), "--samples", "40", "--n", "1"],
                              timeout=LIMIT_S)
        child.expect(pexpect.EOF)
    screen = child.before.decode()
    assert "probe: 100%|" in screen and "319/319" in screen  # 8 built-in prompts x 40, less the first, screen[-400:]


def _compare_files(tmp_path: Path, samples: int) -> tuple[Path, Path]:
    """Two runs of the fake written directly (no server): a baseline and a candidate."""
    import numpy as np

    rng = np.random.default_rng(0)
    header = {"format": "specgauge-probe/1", "model": "m", "url": "x", "prompts": [f"p{i}" for i in range(8)],
              "params": {"max_tokens": 3, "temperature": 1.0, "model": "m", "n": 1, "endpoint": "completions"},
              "capabilities": {"n": False, "logprobs": False, "token_ids": True}}
    paths = []
    for name in ("off", "on"):
        ids = rng.integers(0, 400, size=(8 * samples, 3))
        lines = [json.dumps(header)] + [json.dumps({"p": i % 8, "s": i // 8, "r": i, "text": "x",
                                                    "token_ids": row.tolist()}) for i, row in enumerate(ids)]
        path = tmp_path / f"{name}.jsonl"
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    return paths[0], paths[1]


def test_compare_ends_at_once_on_sigint(tmp_path):
    off, on = _compare_files(tmp_path, 40_000)
    proc = _start(["compare", str(on), "--baseline", str(off), "--csv", str(tmp_path / "c.csv")], tmp_path)
    status, err, took = _interrupt_after(proc, 4.0)
    assert status == 130 and took < 5, (status, took, err)
    assert err.strip().splitlines()[-1] == "specgauge compare: interrupted"


def test_compare_refuses_a_file_cut_mid_line(tmp_path, capsys):
    from specgauge.reports import cli

    off, on = _compare_files(tmp_path, 5)
    data = on.read_bytes()
    on.write_bytes(data[:len(data) - 7])
    status = cli.main(["compare", str(on), "--baseline", str(off), "--csv", str(tmp_path / "c.csv")])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1 and "ends mid-line" in err


@pytest.mark.parametrize("argv, says", [
    (["--tokenizer", ""], "--tokenizer is empty"),
    (["--tokenizer", "no-such-folder"], "--tokenizer 'no-such-folder' is not a directory"),
])
def test_compare_model_folders_are_usage_errors(tmp_path, capsys, argv, says):
    from specgauge.reports import cli

    off, on = _compare_files(tmp_path, 5)
    status = cli.main(["compare", str(on), "--baseline", str(off), "--csv", str(tmp_path / "c.csv"), *argv])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1 and says in err


@pytest.mark.parametrize("body, says", [("not json", "--extra-body is not JSON"),
                                        ("[1,2]", "--extra-body must be a JSON object")])
def test_a_bad_extra_body_is_a_usage_error(tmp_path, capsys, body, says):
    from specgauge.reports import cli

    status = cli.main(["probe", "http://127.0.0.1:9", "--out", str(tmp_path / "r.jsonl"), "--extra-body", body])
    err = capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1 and says in err
    assert not (tmp_path / "r.jsonl").exists()


def test_zero_samples_tested_is_never_a_pass(tmp_path, capsys):
    import httpx2

    from specgauge.fixtures.fake_openai import FakeOpenAI
    from specgauge.reports import cli
    from specgauge.stattests.server.probe import ClientConfig, ProbeConfig, probe

    out = tmp_path / "run.jsonl"
    probe(ProbeConfig("http://fake", samples_per_prompt=1, top_logprobs=3, n=1), ["one", "two"], out,
          client_config=ClientConfig(), transport=httpx2.ASGITransport(app=FakeOpenAI()))
    status = cli.main(["compare", str(out), "--csv", str(tmp_path / "c.csv")])
    captured = capsys.readouterr()
    assert status == 2 and "PASS" not in captured.out and "no context" in captured.err
