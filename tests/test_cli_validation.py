"""The input checks: each case a user met, refused in one line with the right exit status, or told honestly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specgauge import inputs
from specgauge.errors import InputFileError
from specgauge.reports.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _one_line(capsys, needle: str) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert needle in err, err
    return err


@pytest.mark.parametrize("argv,needle", [
    (["certify", "--seed", "-1"], "--seed: expected a seed: an integer ≥ 0, got -1"),
    (["law", "--seed", "-1"], "--seed: expected a seed: an integer ≥ 0, got -1"),
    (["certify", "--false-fail", "1e-300"], "--false-fail: expected a false-fail rate in [1e-12, 1), got 1e-300"),
    (["certify", "--false-fail", "nan"], "expected a false-fail rate"),
    (["certify", "--timeout", "0"], "--timeout: expected a number of seconds > 0, got 0"),
    (["law", "--cost-ratio", "nan"], "--cost-ratio: expected a number ≥ 0, got nan"),
    (["law", "--rounds", "1.5"], "--rounds: expected an integer ≥ 0, got '1.5'"),
    (["law", "--csv", "/nonexistent/x.csv"], "folder '/nonexistent' does not exist"),
    (["certify", "--csv", str(ROOT)], "is a folder"),
])
def test_a_bad_option_is_one_line_and_exit_status_2_before_any_work(argv, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = _one_line(capsys, needle)
    assert err.startswith(f"specgauge {argv[0]}: error: argument ")
    assert not list(tmp_path.iterdir())


def test_the_smallest_false_fail_rate_accepted_still_sizes_every_assertion():
    """1e-12 split over the default plan is a per-assertion rate the quantiles still resolve."""
    from specgauge.stattests.chain.certify import CertConfig, plan_size
    from specgauge.stattests.core.statistics import min_num_samples_for_ks_uniformity

    rate = CertConfig(false_fail=inputs.MIN_FALSE_FAIL, assertions=plan_size(True)).per_assertion
    assert min_num_samples_for_ks_uniformity(0.05, false_fail_rate=rate, false_pass_rate=1e-3) > 0
    assert inputs.false_fail("1e-12") == 1e-12


def test_kinds_accept_what_they_promise_and_name_what_they_refuse():
    assert inputs.non_negative_int("1e12") == 10**12 and inputs.seed("1_000") == 1000
    assert inputs.CommaList(inputs.fraction)("0, 0.5,1") == [0.0, 0.5, 1.0]
    for kind, text in ((inputs.seed, "-1"), (inputs.probability, "1"), (inputs.finite, "inf"),
                       (inputs.positive_int, "1e400"), (inputs.CommaList(inputs.positive_int), "1,1")):
        with pytest.raises(Exception) as exc:
            kind(text)
        assert type(exc.value).__name__ == "ArgumentTypeError" and "\n" not in str(exc.value)


def test_file_schema_errors_name_file_line_and_field(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"gpus": {\n  "g": 5,\n}}')
    with pytest.raises(InputFileError, match=r"t.json, line 3: not valid JSON"):
        inputs.read_json(path)
    place = inputs.where(path).at("gpus").at("g")
    with pytest.raises(InputFileError, match=r"field 'gpus.g': expected a table of fields, got int 5"):
        inputs.table(5, place)
    with pytest.raises(InputFileError, match=r"line 4, field 'ms': expected a number > 0, got 'fast'"):
        inputs.parse("fast", inputs.positive, inputs.where(path, 4, "ms"))
    assert InputFileError("x").exit_code == 2


def test_certify_says_when_sample_sizes_are_capped_and_what_they_resolve(capsys, monkeypatch, tmp_path):
    import specgauge.reports.cli.certify as certify_command
    from specgauge.errors import SpecgaugeError

    def stop(*args, **kwargs):
        raise SpecgaugeError("stopped before certifying")

    monkeypatch.setattr(certify_command, "certification", stop)
    assert main(["certify", "--tv", "1e-6", "--fixture", "seed-six-token", "--csv", str(tmp_path / "c.csv")]) == 1
    err = capsys.readouterr().err.replace("\n  ", " ")  # the lines as printed before folding
    assert "samples sized for the directional checks to detect TV 1e-06" in err
    capped = [line for line in err.splitlines() if line.startswith("sample sizes capped")]
    assert capped and "2,000,000 rows" in capped[0] and "not TV 1e-06" in capped[0], err
    resolved = float(capped[0].split("resolves about ")[1].split()[0])
    assert 0.001 < resolved < 0.01  # the six-token fixture at the 2,000,000-row cap


def test_no_capped_note_when_the_sizes_are_reached():
    from specgauge.reports.cli.certify import capped_note
    from specgauge.stattests.chain.certify import CertConfig

    assert capped_note(CertConfig(tv=0.05), ["seed-six-token"], None, False) == ""


def test_a_decoder_whose_verify_always_raises_is_summarised_as_such(tmp_path, capsys, monkeypatch):
    (tmp_path / "always_raises.py").write_text(
        "class Decoder:\n    def verify(self, *args):\n        raise RuntimeError('kernel failed\\nat line 2')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["certify", "--decoder", "always_raises:Decoder", "--fixture", "seed-six-token", "--tv", "0.3",
                 "--no-progress", "--csv", str(tmp_path / "c.csv")]) == 1
    out = capsys.readouterr().out
    assert "every call raised: RuntimeError: kernel failed" in out
    assert "acceptance below" not in out and "FAIL " not in out


def test_simulate_warns_past_its_memory_estimate_before_any_work(capsys, monkeypatch):
    import specgauge.reports.cli.budget as budget
    import specgauge.reports.cli.simulate as simulate_command

    monkeypatch.setattr(simulate_command, "simulate", lambda *a, **k: pytest.fail("simulated"))
    monkeypatch.setattr(budget, "MEMORY_WARNING_BYTES", 0)  # stop at the estimate
    monkeypatch.setattr(budget, "physical_memory", lambda: float("inf"))  # a machine it fits
    with pytest.raises(pytest.fail.Exception):
        main(["simulate", "--requests", "100000000"])
    err = capsys.readouterr().err
    assert "specgauge simulate: warning: 100,000,000 requests of 256 output tokens need about 40" in err
    assert "roughly 7 hours" in err


def test_law_gives_an_eta_for_a_huge_number_of_rounds(capsys, monkeypatch, tmp_path):
    import specgauge.reports.cli.law as law

    monkeypatch.setattr(law, "law_table", lambda *a, **k: pytest.fail("started the Monte Carlo"))
    monkeypatch.setattr(law, "rounds_per_second", lambda decoder, gamma: 1e6)
    with pytest.raises(pytest.fail.Exception):
        main(["law", "--rounds", "1e12", "--gamma", "4", "--alpha", "0.9", "--csv", str(tmp_path / "l.csv")])
    err = capsys.readouterr().err
    assert "specgauge law: warning: 1,000,000,000,000 Monte Carlo rounds at γ up to 4: about 12 days" in err


def _pytest(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "stattests" / "test_certification.py"),
                           "-p", "no:cacheprovider", *args], capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.mark.parametrize("args,needle", [
    (["--specgauge-decoder", "numpyy"], "unknown decoder 'numpyy': use one of the built-ins"),
    (["--specgauge-seed", "-1"], "--specgauge-seed: expected a seed: an integer ≥ 0, got -1"),
    (["--specgauge-false-fail", "1e-300"], "expected a false-fail rate in [1e-12, 1), got 1e-300"),
])
def test_the_plugin_refuses_a_bad_option_once_before_collection(args, needle, tmp_path):
    result = _pytest(*args, cwd=tmp_path)
    text = result.stdout + result.stderr
    assert result.returncode == 4, text  # pytest's usage error: nothing collected, nothing ran
    assert text.count(needle) == 1 and "passed" not in text and "Traceback" not in text, text


def test_simulate_refuses_a_run_larger_than_this_machines_memory_before_any_work(capsys, monkeypatch):
    import specgauge.reports.cli.simulate as simulate_command

    monkeypatch.setattr(simulate_command, "simulate", lambda *a, **k: pytest.fail("simulated"))
    assert main(["simulate", "--requests", "1e12"]) == 2
    err = capsys.readouterr().err.strip()
    assert "1,000,000,000,000 requests of 256 output tokens need about" in err and "lower --requests" in err
    assert err.count("error:") == 1 and "warning" not in err


@pytest.mark.parametrize("argv, message", [
    (["simulate", "--gamma", "-1"], "gamma must be an integer >= 0"),
    (["simulate", "--alpha", "2"], "alpha must be in [0, 1]"),
    (["simulate", "--gpu", "nosuch"], "unknown GPU 'nosuch'"),
    (["plan", "--gamma", "1,-1", "--no-progress"], "gamma must be an integer >= 0"),
    (["plan", "--acceptance", "/nonexistent/trace.jsonl", "--no-progress"], "cannot read acceptance trace"),
    (["plan", "--slo", "latency:3", "--no-progress"], "unknown SLO metric"),
    (["certify", "--decoder", "nosuch_module_xyz:X"], "cannot import module 'nosuch_module_xyz'"),
    (["compare", "/nonexistent/run.jsonl"], "cannot read '/nonexistent/run.jsonl'"),
    (["simulate", "--csv", "/nonexistent/s.csv"], "does not exist"),
], ids=["simulate-gamma", "simulate-alpha", "simulate-gpu", "plan-gamma", "plan-acceptance-file", "plan-slo",
        "certify-decoder", "compare-file", "simulate-csv-folder"])
def test_what_the_user_gave_wrong_is_exit_status_2_before_any_work(argv, message, capsys):
    """Exit status 1 is kept for a failed verdict or a failure while working; a value, a name
    or a file the user gave that cannot serve is a usage error, found before any work."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
