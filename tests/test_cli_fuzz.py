"""Fuzz: every subcommand's parser and every input-file reader, fed generated bad values and malformed files.

What a user is promised, checked on whatever hypothesis generates: no traceback, a
non-zero exit with exactly one line of error and the exit status docs/development.md gives
its kind (2 for what the user gave wrong), or a clean run, and no output file left behind
after an error; an input file that is a FIFO, a device, a folder or past the size limit
refused at once (each case under a time limit); and a random valid configuration runs. Everything runs in
process through ``specgauge.reports.cli.main``. The example counts are fixed so the module
stays near a minute; ``pytest --hypothesis-profile slow tests/test_cli_fuzz.py`` runs ten
times as many.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specgauge.reports.cli import INTERNAL_ERROR, SUBCOMMANDS, main
from specgauge.inputs import parser_errors_in_one_line

#: ``pytest --hypothesis-profile slow`` (registered in tests/conftest.py) runs ten times the examples
SCALE = 10 if settings.get_current_profile_name() == "slow" else 1


def examples(n: int) -> settings:
    """A fixed example count (times ten under the slow profile), derandomised: the same run every time."""
    return settings(max_examples=n * SCALE, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


ERROR_LINE = re.compile(r"^specgauge \S+: error: ")

# ---------------------------------------------------------------- generated values

NASTY = ["", " ", "-1", "0", "-0", "nan", "NaN", "inf", "-inf", "1e400", "1e-300", "-1e-300", "1.5", "2",
         "1,,2", ",", "abc", "none", "None", "true", "[]", "{}", "/nonexistent/x", "/", ".", "💥", "\x00",
         "1e12", "0x10", "1_000", "--", "-", "%s", "1 2", "9" * 40]


#: values that ask for hours of work (law warns and runs; simulate refuses only past the
#: machine's memory): the parsers get them, the commands that run for real do not
HUGE = {"1e12", "9" * 40}
#: options that size the work of a command run for real
WORK = {"--rounds", "--requests", "--output-len", "--prompt-len", "--gamma"}


def nasty_text(huge: bool = True) -> st.SearchStrategy[str]:
    """Strings users mistype and strings nobody types, without NUL bytes argv cannot hold."""
    junk = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
    floats = (st.floats(allow_nan=True, allow_infinity=True) if huge
              else st.one_of(st.floats(-1e3, 1e3), st.sampled_from([float("nan"), float("inf"), -1e300, 5e-324])))
    numbers = st.one_of(st.integers(-10**6 if huge else -10**3, 10**6 if huge else 10**3).map(str), floats.map(repr))
    return st.one_of(st.sampled_from([n for n in NASTY if "\x00" not in n and (huge or n not in HUGE)]), junk, numbers)


def cheap(values: list[str], flag: str) -> st.SearchStrategy[str]:
    """Bad values, or a valid value from ``values`` that keeps the work small."""
    return st.one_of(nasty_text(huge=flag not in WORK), st.sampled_from(values))


# ---------------------------------------------------------------- running the CLI in process


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def assert_clean(code: int, err: str, folder: Path | None = None, before: set[str] | None = None,
                 status: Callable[[str], int] = lambda line: 2) -> None:
    """No traceback, no internal error; an error is exactly one line, has the documented exit
    status (``status`` of the line: 2 for what the user gave wrong, 1 for a failure while
    working, docs/development.md) and leaves no output behind."""
    assert "Traceback" not in err and code != INTERNAL_ERROR, err
    errors = [line for line in err.splitlines() if ERROR_LINE.match(line)]
    assert len(errors) <= 1, err
    assert not any(line.startswith("usage:") for line in err.splitlines()), err
    if code == 0:
        assert not errors, err
        return
    if errors:
        assert code == status(errors[0]), f"exit status {code}, not {status(errors[0])}, for: {errors[0]}"
        if folder is not None:
            left = {p.name for p in folder.iterdir()} - (before or set())
            assert not left, f"{sorted(left)} left behind after: {errors[0]}"
    else:  # a non-zero exit without an error line is a verdict (a failed certificate), never silence
        assert code == 1, (code, err)


@pytest.fixture(scope="module")
def workdir():
    """A scratch folder for the whole module (hypothesis reuses it across examples)."""
    path = Path(tempfile.mkdtemp(prefix="specgauge-fuzz-"))
    cwd = os.getcwd()
    os.chdir(path)  # default report folders (reports/) land here, not in the checkout
    try:
        yield path
    finally:
        os.chdir(cwd)
        shutil.rmtree(path, ignore_errors=True)


def fresh(workdir: Path) -> Path:
    folder = Path(tempfile.mkdtemp(dir=workdir))
    return folder


# ---------------------------------------------------------------- 1. every parser, every option


def _parsers():
    out = []
    for name, (module_name, _) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        parser = module.build_parser()
        required = []
        for action in parser._actions:
            if not action.option_strings and action.dest != "help":
                required.append("x")
            elif action.required:
                required += [action.option_strings[0], "x"]
        valued = [a for a in parser._actions if a.option_strings and a.nargs != 0]
        out.append((name, parser, required, valued))
    return out


PARSERS = _parsers()


def test_every_subcommand_in_the_table_is_fuzzed():
    assert {name for name, *_ in PARSERS} == set(SUBCOMMANDS)
    assert all(valued for *_, valued in PARSERS)


@examples(150)
@given(data=st.data())
def test_every_option_of_every_parser_takes_any_value_in_one_line(data):
    name, parser, required, valued = data.draw(st.sampled_from(PARSERS), label="command")
    action = data.draw(st.sampled_from(valued), label="option")
    value = data.draw(nasty_text(), label="value")
    if action.option_strings[0] in required:  # a required option is fuzzed in place: given twice, it is refused
        at = required.index(action.option_strings[0])
        required = required[:at] + required[at + 2:]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), parser_errors_in_one_line():
        try:
            parser.parse_args([*required, f"{action.option_strings[-1]}={value}"])
            code = 0
        except SystemExit as exc:
            code = exc.code
    text = err.getvalue()
    assert "Traceback" not in text
    if code:
        assert code == 2 and len(text.strip().splitlines()) == 1, (name, action.option_strings, value, text)
        assert text.startswith(f"specgauge {name}: error: ")


# ---------------------------------------------------------------- 2. the commands, run for real on small work

LAW = ["law", "--rounds", "40", "--gamma", "2", "--alpha", "0.5"]
LAW_OPTIONS = {"--gamma": ["1", "1,3"], "--alpha": ["0", "0.5,0.9", "1"], "--cost-ratio": ["0", "0.3"],
               "--rounds": ["0", "10"], "--seed": ["0", "7"], "--decoder": ["numpy"]}
SIMULATE = ["simulate", "--requests", "6", "--output-len", "8", "--prompt-len", "16", "--batch-size", "4"]
SIMULATE_OPTIONS = {"--gamma": ["0", "3"], "--alpha": ["0.6", "1"], "--tp": ["1", "2"], "--qps": ["none", "5"],
                    "--batch-size": ["1", "8"], "--requests": ["1", "5"], "--prompt-len": ["1", "64"],
                    "--output-len": ["1", "4"], "--length-dist": ["fixed", "exponential"],
                    "--policy": ["fixed", "none"], "--arrival": ["poisson", "gamma"], "--arrival-cv": ["0.5", "2"],
                    "--seed": ["0", "3"], "--max-batched-tokens": ["64", "2048"], "--block-size": ["16", "1"],
                    "--gpu-memory-utilization": ["0.5", "1"], "--draft": ["none", "eagle", "ngram"],
                    "--gpu": ["h100", "h200"], "--target": ["qwen3-32b"], "--draft-cost-ratio": ["0.1"],
                    "--empty-proposals": ["0", "0.5"], "--tree": ["topk:2x2"], "--draft-tp": ["1"],
                    "--draft-kv-budget": ["64"], "--tree-acceptance": ["0.5|0.2"]}
CERTIFY = ["certify", "--fixture", "seed-six-token", "--check", "contract", "--tv", "0.3", "--no-progress"]
CERTIFY_OPTIONS = {"--tv": ["0.3", "0.5"], "--false-fail": ["1e-4", "0.5"], "--seed": ["0", "11"],
                   "--timeout": ["60"], "--decoder": ["numpy", "match"], "--fixture": ["seed-six-token"],
                   "--check": ["contract", "acceptance-rate"]}


def _command_case(base: list[str], options: dict[str, list[str]], csv: str):
    @st.composite
    def case(draw):
        flags = draw(st.lists(st.sampled_from(sorted(options)), min_size=1, max_size=3, unique=True))
        argv = list(base)
        for flag in flags:
            argv += [f"{flag}={draw(cheap(options[flag], flag))}"]
        return argv + ["--csv", csv]

    return case()


@pytest.mark.parametrize("base,options", [(LAW, LAW_OPTIONS), (SIMULATE, SIMULATE_OPTIONS),
                                          (CERTIFY, CERTIFY_OPTIONS)], ids=["law", "simulate", "certify"])
def test_commands_refuse_bad_values_in_one_line_and_write_nothing(base, options, workdir):
    folder = fresh(workdir)

    @examples(25)
    @given(argv=_command_case(base, options, str(folder / "out.csv")))
    def check(argv):
        for path in folder.iterdir():
            path.unlink()
        code, _, err = run(argv)
        assert_clean(code, err, folder)

    check()


@examples(8)
@given(gammas=st.lists(st.integers(1, 6), min_size=1, max_size=3, unique=True),
       alphas=st.lists(st.sampled_from([0.0, 0.1, 0.5, 0.75, 0.9, 1.0]), min_size=1, max_size=3, unique=True),
       rounds=st.integers(0, 200), cost=st.floats(0, 2), seed=st.integers(0, 2**32))
def test_a_random_valid_law_configuration_runs(gammas, alphas, rounds, cost, seed, workdir):
    csv = fresh(workdir) / "law.csv"
    code, out, err = run(["law", "--gamma", ",".join(map(str, gammas)), "--alpha", ",".join(map(str, alphas)),
                          "--rounds", str(rounds), "--cost-ratio", repr(cost), "--seed", str(seed), "--csv", str(csv)])
    assert code == 0, err
    assert len(csv.read_text().splitlines()) == 1 + len(gammas) * len(alphas)


@examples(8)
@given(gamma=st.integers(0, 8), alpha=st.floats(0, 1), batch=st.integers(1, 16), requests=st.integers(1, 12),
       prompt=st.integers(1, 256), output=st.integers(1, 32), seed=st.integers(0, 2**32),
       draft=st.sampled_from(["qwen3-0.6b", "eagle", "ngram", "mtp", "none"]))
def test_a_random_valid_simulation_runs(gamma, alpha, batch, requests, prompt, output, seed, draft, workdir):
    csv = fresh(workdir) / "s.csv"
    gamma = 0 if draft == "none" else gamma  # speculation needs a draft
    code, out, err = run(["simulate", "--gamma", str(gamma), "--alpha", repr(alpha), "--batch-size", str(batch),
                          "--requests", str(requests), "--prompt-len", str(prompt), "--output-len", str(output),
                          "--seed", str(seed), "--draft", draft, "--csv", str(csv)])
    assert code == 0, err
    assert len(csv.read_text().splitlines()) == 2


# ---------------------------------------------------------------- 3. malformed input files

JUNK_VALUES = ["nan", "-1", "1e999", '"x"', "[]", "{}", "0", "-0.0", "true", "null", '""', "[1, 2]", "5"]


@st.composite
def malformed(draw, valid: str) -> str:
    """``valid`` broken one way: cut short, a character or a number replaced, junk inserted, emptied,
    or nesting deeper than a recursive parser goes (the whole file, or one line more)."""
    how = draw(st.sampled_from(["cut", "char", "number", "insert", "empty", "lines", "deep"]))
    if how == "empty" or not valid:
        return ""
    if how == "deep":
        deep = "[" * 100_000 + "]" * 100_000
        return deep if draw(st.booleans()) else valid.rstrip("\n") + "\n" + deep + "\n"
    at = draw(st.integers(0, len(valid) - 1))
    if how == "cut":
        return valid[:at]
    if how == "char":
        return valid[:at] + draw(st.sampled_from(list(',;:"[]{}=\n x-.#\\\t'))) + valid[at + 1:]
    if how == "insert":
        return valid[:at] + draw(nasty_text()) + valid[at:]
    if how == "lines":
        lines = valid.splitlines(keepends=True)
        keep = draw(st.lists(st.integers(0, len(lines) - 1), max_size=len(lines)))
        return "".join(lines[i] for i in keep)
    numbers = list(re.finditer(r"-?\d+(\.\d+)?(e-?\d+)?", valid))
    if not numbers:
        return valid[:at]
    match = draw(st.sampled_from(numbers))
    return valid[:match.start()] + draw(st.sampled_from(JUNK_VALUES)) + valid[match.end():]


PROFILES_TOML = '[gpus."rtx-6000"]\npeak_tflops = 364.0\nbandwidth_tb_s = 0.96\nmemory_gib = 95.0\n'
PROFILES_JSON = json.dumps({"gpus": {"rtx-6000": {"peak_tflops": 364.0, "bandwidth_tb_s": 0.96, "memory_gib": 95.0}}})
TRACE_CSV = "arrival_s,prompt_len,output_len\n0,100,20\n0.5,200,40\n1.0,300,6\n"
ACCEPTANCE_JSONL = "\n".join(json.dumps({"id": str(i), "acc_eagle": {"acc_len": [1, 3, 2, 1, 4, 1]}}) for i in range(3))
STEPS_CSV = "batch,batched_tokens,kv_tokens,ms\n" + "".join(
    f"{b},{b * (g + 1)},{b * c},{4 + 0.03 * b * (g + 1) + 5e-5 * b * c:.4f}\n"
    for b in (1, 4, 16, 64) for c in (256, 2048) for g in (0, 3))
LATENCY_JSON = json.dumps({"avg_latency": 1.2, "latencies": [1.1, 1.2, 1.3]})
SERVE_JSON = json.dumps({"completed": 100, "total_input_tokens": 51200, "total_output_tokens": 12800,
                         "max_concurrency": 8, "mean_tpot_ms": 12.5})
DECODER_PY = ("import numpy as np\n\nclass Decoder:\n    def verify(self, target_probs, draft_probs, draft_tokens, rng):\n"
              "        from specgauge.stattests.core.reference import NumpyDecoder\n"
              "        return NumpyDecoder().verify(target_probs, draft_probs, draft_tokens, rng)\n")

CALIBRATE = ["calibrate", "--gpu", "h100", "--target", "llama-3.1-8b"]


@functools.lru_cache(maxsize=None)
def probe_jsonl() -> str:
    """A real probe file: the in-process OpenAI-compatible fake sampled by ``probe`` (4 prompts x 30)."""
    httpx2 = pytest.importorskip("httpx2")
    from specgauge.fixtures.fake_openai import FakeOpenAI
    from specgauge.stattests.server.probe import ClientConfig, ProbeConfig, probe

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "run.jsonl"
        cfg = ProbeConfig("http://fake", temperature=1.0, max_tokens=3, samples_per_prompt=30, top_logprobs=4, n=10)
        probe(cfg, ["one", "two", "three", "four"], path, client_config=ClientConfig(concurrency=2),
              transport=httpx2.ASGITransport(app=FakeOpenAI()))
        return path.read_text()

#: name -> (file name, valid content (or a function making it), argv with FILE and OUT placeholders)
READERS = {
    "profiles-toml": ("p.toml", PROFILES_TOML, [*SIMULATE, "--gpu", "rtx-6000", "--profiles", "FILE", "--csv", "OUT.csv"]),
    "profiles-json": ("p.json", PROFILES_JSON, [*SIMULATE, "--gpu", "rtx-6000", "--profiles", "FILE", "--csv", "OUT.csv"]),
    "workload-trace": ("t.csv", TRACE_CSV, [*SIMULATE, "--arrival", "trace", "--trace", "FILE", "--csv", "OUT.csv"]),
    "acceptance-trace": ("a.jsonl", ACCEPTANCE_JSONL, [*SIMULATE, "--alpha", "FILE:eagle", "--csv", "OUT.csv"]),
    "steps-csv": ("s.csv", STEPS_CSV, [*CALIBRATE, "--steps", "FILE", "--out", "OUT.toml"]),
    "latency-json": ("l.json", LATENCY_JSON, [*CALIBRATE, "--steps", "STEPS", "--latency",
                                             "FILE:batch=8,input=128,output=64", "--out", "OUT.toml"]),
    "serve-json": ("v.json", SERVE_JSON, [*CALIBRATE, "--steps", "STEPS", "--serve", "FILE", "--out", "OUT.toml"]),
    "probe-jsonl": ("run.jsonl", probe_jsonl, ["compare", "FILE", "--csv", "OUT.csv"]),
    "decoder-module": ("fuzzdec.py", DECODER_PY, ["law", "--rounds", "20", "--gamma", "2", "--alpha", "0.5",
                                                  "--decoder", "fuzzdec:Decoder", "--csv", "OUT.csv"]),
}

#: reader -> the exit status of its error line, where it is not 2: a decoder module that loads
#: and then raises inside ``verify`` or breaks its contract fails while working (1); one that
#: cannot load is a usage error
STATUS: dict[str, Callable[[str], int]] = {
    "decoder-module": lambda line: 1 if "decoder's verify raised" in line or "broke the verify contract" in line else 2}

#: reader -> why it may still crash (a strict expected failure would be wrong: a fuzz case may not hit it)
KNOWN_FAILURES: dict[str, str] = {}


def _valid(name: str) -> str:
    content = READERS[name][1]
    return content() if callable(content) else content


def _run_reader(name: str, content: str, folder: Path) -> tuple[int, str, set[str]]:
    file_name, _, argv = READERS[name]
    for path in folder.iterdir():
        if path.is_file():
            path.unlink()
    (folder / file_name).write_text(content, encoding="utf-8", errors="surrogatepass")
    (folder / "steps.csv").write_text(STEPS_CSV)
    before = {p.name for p in folder.iterdir()}
    argv = [a.replace("FILE", str(folder / file_name)).replace("STEPS", str(folder / "steps.csv"))
            .replace("OUT", str(folder / "out")) for a in argv]
    importlib.invalidate_caches()
    import sys

    sys.modules.pop("fuzzdec", None)
    sys.path.insert(0, str(folder))
    try:
        code, _, err = run(argv)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("fuzzdec", None)
    return code, err, before


@pytest.mark.parametrize("name", sorted(READERS))
def test_the_valid_input_file_runs(name, workdir):
    code, err, _ = _run_reader(name, _valid(name), fresh(workdir))
    assert code == 0, err


@pytest.mark.parametrize("name", sorted(READERS))
def test_malformed_input_files_are_one_line_and_write_nothing(name, workdir):
    if name in KNOWN_FAILURES:
        pytest.xfail(KNOWN_FAILURES[name])
    folder = fresh(workdir)

    @examples(12)
    @given(content=malformed(_valid(name)))
    def check(content):
        code, err, before = _run_reader(name, content, folder)
        assert_clean(code, err, folder, before, STATUS.get(name, lambda line: 2))

    check()


# ---------------------------------------------------------------- 4. input files that are not regular files

#: Every input-file option of every subcommand, with FILE where the path goes: READERS' own
#: commands and the readers only these reach (a decoder module is imported, not read: left out)
INPUT_FILE_OPTIONS = {
    **{name: (file_name, argv) for name, (file_name, _, argv) in READERS.items() if name != "decoder-module"},
    "plan-acceptance-json": ("r.json", ["plan", "--acceptance", "FILE", "--csv", "OUT.csv"]),
    "plan-acceptance-jsonl": ("r.jsonl", ["plan", "--acceptance", "FILE:eagle", "--csv", "OUT.csv"]),
    "plan-acceptance-plain": ("measured", ["plan", "--acceptance", "FILE", "--csv", "OUT.csv"]),
    "compare-baseline": ("off.jsonl", ["compare", "STEPS", "--baseline", "FILE", "--csv", "OUT.csv"]),
    "acceptance-prompts": ("p.jsonl", ["acceptance", "--target", "toy:bigram-v6-mid", "--draft", "ngram",
                                       "--prompts", "FILE", "--no-plot", "--csv", "OUT.csv"]),
    "probe-prompts": ("p.jsonl", ["probe", "http://127.0.0.1:9", "--prompts", "FILE", "--out", "OUT.jsonl"]),
}


class Hung(Exception):
    """A case ran past its time limit (a read that blocks or never ends)."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise ``Hung`` in this (the main) thread after ``seconds``: a blocked ``open`` of a FIFO
    or an endless read returns to Python on the signal (PEP 475) and the exception ends it."""
    import signal

    def expire(signum, frame):
        raise Hung(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _not_regular(kind: str, path: Path) -> str:
    """Make ``path`` a FIFO, a link to /dev/zero, a folder or a (sparse) file one byte over the
    size limit; returns the words the refusal must hold."""
    from specgauge.inputs import MAX_INPUT_BYTES

    if kind == "fifo":
        os.mkfifo(path)
        return "named pipe (FIFO), not a regular file"
    if kind == "dev-zero":
        path.symlink_to("/dev/zero")
        return "character device, not a regular file"
    if kind == "folder":
        path.mkdir()
        return "folder"
    with open(path, "wb") as handle:  # sparse: no disk is used, and the file is never read
        handle.truncate(MAX_INPUT_BYTES + 1)
    return "GiB an input file may be"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "folder", "oversized"])
@pytest.mark.parametrize("name", sorted(INPUT_FILE_OPTIONS))
def test_an_input_file_that_is_not_a_regular_file_is_refused_at_once(name, kind, workdir):
    """A FIFO would block the read, /dev/zero would fill memory, a folder or a file past the
    limit cannot be an input: each is one line, exit status 2, within seconds, nothing written."""
    if name == "probe-jsonl" or name == "compare-baseline":
        pytest.importorskip("httpx2")
    folder = fresh(workdir)
    file_name, argv = INPUT_FILE_OPTIONS[name]
    (folder / "steps.csv").write_text(STEPS_CSV if name != "compare-baseline" else probe_jsonl())
    words = _not_regular(kind, folder / file_name)
    before = {p.name for p in folder.iterdir()}
    argv = [a.replace("FILE", str(folder / file_name)).replace("STEPS", str(folder / "steps.csv"))
            .replace("OUT", str(folder / "out")) for a in argv]
    with time_limit(20):
        code, _, err = run(argv)
    assert_clean(code, err, folder, before)
    assert code == 2 and words in err, err
