"""`probe --guarantee TV`: a pilot, a plan sized for the worst-case TV, an early failure that keeps its rate.

Against the in-process fake on uvicorn, the real command in this process or in a subprocess
with a time limit: the exact rule gets the draws the plan states and the comparison states the
TV at every planned context, at every position; a server biased at the third position only is
failed by the sequential test before half its plan; an interrupted sized probe resumes to the
planned file. The slow tier adds the first-position runs in a subprocess (the exact rule, and
the wrong residual stopped early)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("httpx2")
pytest.importorskip("uvicorn")

from specgauge.fixtures.fake_openai import FakeOpenAI  # noqa: E402
from specgauge.fixtures.serve import serve_app  # noqa: E402
from specgauge.stattests.server.sequential import EProcess  # noqa: E402

LIMIT_S = 240
PROMPTS = ["prompt 0", "prompt 3"]  # the wrong residual moves the first token by TV >= 0.1 on both
TV = "0.3"


def _sized(url, out, *extra, tv=TV):
    return subprocess.run([sys.executable, "-m", "specgauge.reports.cli", "probe", url, "--out", str(out),
                           "--prompts", str(out.with_name("prompts.jsonl")), "-L", "2", "--top-logprobs", "8",
                           "--guarantee", tv, *extra], capture_output=True, text=True, timeout=LIMIT_S)


@pytest.fixture
def prompts(tmp_path):
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))


def _plan(stderr: str) -> int:
    line = next(x for x in stderr.splitlines() if x.startswith("probe: plan: "))
    return int(line.split(" needs ")[1].split()[0])


@pytest.mark.slow  # the default tier: the in-process test of every position below
def test_a_sized_probe_draws_its_plan_and_the_comparison_states_the_tv(tmp_path, prompts):
    from specgauge.stattests.server.compare import one_sample_logprobs
    from specgauge.stattests.server.probe import read_probe

    with serve_app(FakeOpenAI(rule="exact", seed=3)) as url:
        done = _sized(url, tmp_path / "run.jsonl", "--context-mass", "1")  # the first position (every position: below)
    assert done.returncode == 0, done.stderr
    per = _plan(done.stderr)
    run = read_probe(tmp_path / "run.jsonl")
    assert sorted({r["s"] for r in run.records if r["p"] == 1}) == list(range(per))
    cert = one_sample_logprobs(run, target_tv=float(TV))
    first = cert.frame[cert.frame["position"].str.endswith("/pos0/#0")]
    assert cert.passed and len(first) == len(PROMPTS) and (first["min_detectable_tv"] <= float(TV)).all()


@pytest.mark.slow  # the default tier: a bias at the third position, stopped early, below
def test_a_biased_server_fails_early(tmp_path, prompts):
    """Its first token is off by TV >= 0.1: a probe sized for TV 0.1 stops before half its plan."""
    with serve_app(FakeOpenAI(rule="wrong_residual", seed=3)) as url:
        done = _sized(url, tmp_path / "run.jsonl", "--context-mass", "1", tv="0.1")
    last = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 1 and last.startswith("FAIL (probe --guarantee") and "e-value reached" in last, done.stderr
    assert "error:" not in done.stderr, done.stderr
    drawn = sum(1 for _ in open(tmp_path / "run.jsonl")) - 1
    assert drawn < 0.5 * _plan(done.stderr) * len(PROMPTS), (drawn, last)


def test_an_interrupted_sized_probe_resumes_to_the_planned_file(tmp_path, prompts):
    from specgauge.stattests.server.probe import read_probe

    out = tmp_path / "run.jsonl"
    with serve_app(FakeOpenAI(rule="exact", seed=4, latency_s=0.01)) as url:
        cut = _sized(url, out, "--deadline", "3", "--concurrency", "1", "--n", "1", "--context-mass", "1", tv="0.4")
        header = out.read_bytes().split(b"\n")[0]
        whole = _sized(url, out, "--n", "1", "--context-mass", "1", tv="0.4")
    assert cut.returncode == 1 and "rerun to resume" in cut.stderr.strip().splitlines()[-1], cut.stderr
    assert whole.returncode == 0 and _plan(whole.stderr) == _plan(cut.stderr), whole.stderr
    run = read_probe(out)
    keys = [(r["p"], r["s"]) for r in run.records]
    assert out.read_bytes().split(b"\n")[0] == header
    assert len(keys) == len(set(keys)) and sorted(keys) == [(p, s) for p in range(2) for s in range(_plan(cut.stderr))]


def test_the_early_test_keeps_its_rate_on_exact_draws():
    """Ville's inequality: an exact server crosses 1/rate with probability at most rate, however long it runs."""
    rng = np.random.default_rng(0)
    law = np.array([0.5, 0.2, 0.1, 0.1, 0.05, 0.05])
    rate, crossed = 0.05, 0
    for _ in range(400):
        e = EProcess([law], rate, lambda r: r["t"])
        for token in rng.choice(law.size, size=300, p=law):
            e.add([{"p": 0, "t": int(token)}])
            if e.e_value >= 1 / rate:
                crossed += 1
                break
    assert crossed / 400 <= rate + 3 * np.sqrt(rate * (1 - rate) / 400), crossed
    colder = law ** 2 / (law ** 2).sum()  # a biased server crosses, and soon
    e = EProcess([law], 1e-6, lambda r: r["t"])
    tokens = rng.choice(law.size, size=3000, p=colder)
    steps = next(i for i, t in enumerate(tokens) if (e.add([{"p": 0, "t": int(t)}]) or e.e_value >= 1e6))
    assert steps < 600, steps


def _sized_here(url, out, capsys, *extra):
    """The real command in this process (the fake on uvicorn in a thread): status and stderr."""
    from specgauge.reports import cli

    status = cli.main(["probe", url, "--out", str(out), "--prompts", str(out.with_name("prompts.jsonl")),
                       "--top-logprobs", "8", "--no-progress", *extra])
    captured = capsys.readouterr()
    return status, captured.err + captured.out


def test_every_heavy_context_of_every_position_is_planned_and_watched(tmp_path, prompts, capsys):
    """A server biased at the third position only (sampling at half the temperature there, reporting the
    exact law) is stopped by the early test, which watches every heavy context up to L, long before its plan."""
    with serve_app(FakeOpenAI(seed=6, biased_position=2, sample_temperature_factor=0.5)) as url:
        status, err = _sized_here(url, tmp_path / "run.jsonl", capsys, "-L", "3", "--guarantee", "0.2",
                                  "--context-mass", "0.15")
    plan = next(x for x in err.splitlines() if x.startswith("probe: plan: "))
    assert "positions 0, 1, 2" in plan, plan
    verdict = next(x for x in err.splitlines() if x.startswith("FAIL (probe --guarantee 0.2: the early test"))
    assert status == 1 and "e-value reached" in verdict and "position 2" in verdict and "error:" not in err, err
    drawn = sum(1 for _ in open(tmp_path / "run.jsonl")) - 1
    assert drawn < 0.5 * _plan(err) * len(PROMPTS), (drawn, plan)


def test_the_exact_server_at_every_position_is_not_stopped_and_every_planned_context_states_its_tv(tmp_path, prompts,
                                                                                                  capsys):
    from specgauge.stattests.server.compare import one_sample_logprobs
    from specgauge.stattests.server.probe import read_probe

    with serve_app(FakeOpenAI(seed=7)) as url:
        status, err = _sized_here(url, tmp_path / "run.jsonl", capsys, "-L", "3", "--guarantee", "0.4",
                                  "--context-mass", "0.3")
    assert status == 0 and "stayed below" in err, err
    cert = one_sample_logprobs(read_probe(tmp_path / "run.jsonl"), target_tv=0.4)
    rows = cert.frame[cert.frame["check"] == "identity-at-context"]
    assert cert.passed and {int(p.split("/pos")[1][0]) for p in rows["position"]} == {0, 1, 2}, cert.frame.to_string()
    assert (rows["min_detectable_tv"] <= 0.4).all()
