"""Rewrite every sample output in README.md and docs/ from the real commands.

A sample output is a fenced block right after a marker line ``<!-- output: NAME -->``;
``EXAMPLES`` below says, for each NAME, which commands make it (run as the page writes
them, in a fresh folder), what must exist first (a setup script, which may be a code
block of a page, marked ``<!-- setup: NAME -->``, so the page's own code is what runs),
and which servers run meanwhile. The block becomes each command as ``$ command``
followed by what it printed (stdout and stderr in order, progress bars left out).

    python scripts/regenerate-docs.py                 # every example (several minutes)
    python scripts/regenerate-docs.py plan-default    # only these
    python scripts/regenerate-docs.py --check         # compare instead of rewrite; exit 1 on a stale page
    python scripts/regenerate-docs.py --emit out.json # write the fresh blocks to a file, pages untouched
    python scripts/regenerate-docs.py --apply out.json  # rewrite the pages from such a file

(``--emit`` in an export of a commit, ``PYTHONPATH=export python export/scripts/...``, and
``--apply`` here regenerate the pages from that commit's code alone.)

``tests/test_doc_outputs.py`` runs the same comparison: times, rates and temporary paths
never count; an example whose run cannot repeat its numbers may compare its words and
columns only (``numbers=False``). To add
an example: put the marker and an empty fenced block in the page, add one ``Example``.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
FENCE = "```"
MARKER = "<!-- output: {} -->"
#: a markdown table a command prints, kept in the page as a table (no fence, no command shown)
TABLE_MARKER = "<!-- table: {} -->"
SETUP_MARKER = "<!-- setup: {} -->"


@dataclass(frozen=True)
class Example:
    """One sample output: the commands that print it and what they need."""

    name: str
    page: str                                  # README.md or docs/*.md
    commands: tuple[str, ...]                  # shell lines, run in order in one fresh folder
    setup: str = ""                            # shell code run first in the folder (inputs)
    setup_block: str = ""                      # or: the NAME of a page's Python block marked <!-- setup: NAME -->
    servers: tuple[tuple[int, str], ...] = ()  # (port, shell command) running meanwhile
    slow: bool = False                         # the default test tier runs only the fast ones
    numbers: bool = True                       # False: a nondeterministic run, compare words and columns only
    exit_codes: tuple[int, ...] = (0,)         # what each command may exit with (a failing verdict is 1)
    in_repo: bool = False                      # run in the repository (a command that reads its files, writes none)
    varies: tuple[str, ...] = ()               # regexes of the parts another CPU prints otherwise (masked, said on the page)
    table: bool = False                        # the block is the first markdown table the last command prints
    timeout_s: int = 900


FAKE = f"{shlex.quote(sys.executable)} -m specgauge.fixtures.fake_openai"
#: the simulator against published measurements: prints docs/validation.md's tables
VALIDATE = "specgauge validate"

EXAMPLES: tuple[Example, ...] = (
    Example("simulate-one", "docs/planner.md", (
        "specgauge simulate --gpu h200 --target qwen3-32b --draft qwen3-0.6b --gamma 5 --alpha 0.8 "
        "--batch-size 64 --qps 10 --requests 1000 --csv run.csv",)),
    Example("simulate-textbook", "docs/planner.md", (
        "specgauge simulate --batch-size 1 --draft-cost-ratio 0.05 --draft none --profiles fixtures/hardware/textbook.toml",),
        in_repo=True),
    Example("calibrate", "docs/planner.md", (
        "specgauge calibrate --gpu h100 --target llama-3.1-8b --tp 1 "
        "--latency bs1-128.json:batch=1,input=128,output=128 --latency bs1-2k.json:batch=1,input=2048,output=128 "
        "--latency bs16-128.json:batch=16,input=128,output=128 --latency bs16-2k.json:batch=16,input=2048,output=128 "
        "--latency bs64-128.json:batch=64,input=128,output=128 --latency bs64-2k.json:batch=64,input=2048,output=128 "
        "--serve base8.json --serve base64.json --serve ngram8.json:draft=ngram --serve ngram64.json:draft=ngram "
        "--out mine.toml --plot",
        "specgauge simulate --profiles mine.toml --gpu h100 --target llama-3.1-8b --draft ngram"),
        setup=f"cp {ROOT / 'docs/examples/calibrate'}/*.json ."),
    Example("plan-rate", "docs/planner.md", (
        "specgauge plan --gpu h100 --target llama-3.1-70b --draft eagle --tp 2,4,8 --prompt-len 1000 "
        "--output-len 300 --gamma 3 --slo tpot:60 --rate 40 --no-progress",), slow=True),
    Example("certify-readme", "README.md", ("specgauge certify --fixture near-identical --no-progress",), slow=True),
    Example("plan-default", "README.md", ("specgauge plan",), slow=True),
    Example("server-fake", "docs/server.md", (
        "specgauge probe http://127.0.0.1:8765 -L 3 --samples 1000 --top-logprobs 5 --concurrency 1 --out off.jsonl",
        "specgauge probe http://127.0.0.1:8766 -L 3 --samples 1000 --top-logprobs 5 --concurrency 1 --out on.jsonl",
        "specgauge compare on.jsonl --baseline off.jsonl",
        "specgauge probe http://127.0.0.1:8767 -L 3 --samples 1000 --top-logprobs 5 --concurrency 1 --out cold.jsonl",
        "specgauge compare cold.jsonl --baseline off.jsonl"),
        servers=((8765, f"{FAKE} 8765"), (8766, f"{FAKE} 8766 --rule exact"),
                 (8767, f"{FAKE} 8767 --sample-temperature-factor 0.8")), exit_codes=(0, 1), slow=True),
    Example("server-fake-logprobs", "docs/server.md", (
        "specgauge probe http://127.0.0.1:18765 --samples 700 --top-logprobs 5 --concurrency 1 --out fake.jsonl",
        "specgauge compare fake.jsonl --csv fake_cert.csv"),
        servers=((18765, f"{FAKE} 18765"),), slow=True),
    Example("acceptance-readme", "README.md", (
        "specgauge acceptance --target tiny/target --draft flat=tiny/flat --draft ngram --prompts prompts.jsonl "
        "--samples 8 --max-new-tokens 48 --gamma 1,2,4 --threads 1 --plan --plan-target llama-3.1-8b "
        "--plan-draft flat=llama-3.2-1b --plan-draft ngram=ngram --plan-batch-size 1,64",),
        setup_block="tiny-llamas", slow=True),
    Example("acceptance-worked", "docs/acceptance.md", (
        "specgauge acceptance --target tiny/target --draft flat=tiny/flat --draft other=tiny/other --draft ngram "
        "--prompts prompts.jsonl --samples 8 --max-new-tokens 48 --gamma 1,2,3,4,6,8 --threads 1 "
        "--run --run-gamma 2,4 --plan --plan-target llama-3.1-8b --plan-draft flat=llama-3.2-1b "
        "--plan-draft other=llama-3.2-3b --plan-draft ngram=ngram --plan-batch-size 1,16,64",),
        setup_block="tiny-llamas", slow=True),
    Example("acceptance-smollm2", "docs/acceptance.md", (
        "specgauge acceptance --target smollm2/target --draft skip14=smollm2/skip-14 --draft ngram "
        "--prompts prompts.jsonl --samples 2 --max-new-tokens 24 --gamma 1,2,4 --threads 1",),
        setup_block="smollm2-pair", slow=True),
    Example("acceptance-smollm2-run", "docs/acceptance.md", (
        "specgauge acceptance --target smollm2/target --draft skip14=smollm2/skip-14 --draft skip3=smollm2/skip-4,12,20 "
        "--draft first16=smollm2/first-16 --draft ngram --prompts prompts.jsonl --samples 2 --max-new-tokens 32 "
        "--gamma 1,2,4 --threads 1 --run --run-gamma 2 --plan --plan-target llama-3.1-8b "
        "--plan-draft skip14=llama-3.2-1b --plan-draft skip3=llama-3.2-1b --plan-draft first16=llama-3.2-1b "
        "--plan-draft ngram=ngram --plan-batch-size 1,16,64 --no-progress",),
        setup_block="smollm2-pair", slow=True,
        # the run samples tokens from float32 forward passes: another CPU's kernels round
        # otherwise, one token differs and the measured column moves (2.519 here, 2.538 on
        # another machine); the law, the ranking and the plan do not
        varies=(r"measured \d+\.\d+ \[\d+\.\d+, \d+\.\d+\] over \d+ rounds: intervals \w+",)),
    Example("acceptance-server-metrics", "docs/acceptance.md", (
        "specgauge simulate --gamma 3 --acceptance before.txt,after.txt --batch-size 8 --requests 400 | grep acceptance",),
        setup=f"cp {ROOT / 'docs/examples/vllm-metrics'}/*.txt ."),
    Example("validation-summary", "docs/validation.md", (f"{VALIDATE} --no-table",), slow=True),
    Example("validation-table", "docs/validation.md", (f"{VALIDATE}",), table=True, slow=True),
    Example("validation-knee-study", "docs/validation.md", (f"{VALIDATE} --knee-study",), table=True, slow=True),
    Example("gate-watch-fail", "docs/gate.md", (
        "pytest --pyargs specgauge.stattests --specgauge-decoder specgauge.stattests.chain.zoo:accept-all "
        "-k seed-six-token -q --tb=no -rN",), exit_codes=(1,), slow=True),
)

#: Machine noise: what differs between two runs of the same command on the same inputs.
NOISE = (
    (re.compile(r"\bin \d+(\.\d+)?s( \(\d+:\d\d:\d\d\))?"), "in <time>"),     # pytest's "in 22.83s (0:00:22)"
    (re.compile(r"\bin \d+(\.\d+)? ?s\b"), "in <time>"),                       # wall time of a run ("in 17.6 s")
    (re.compile(r"\(?\b\d+(\.\d+)?(/s| positions/s| samples/s)\)?"), "<rate>"),
    (re.compile(r"(/tmp|/var/folders|/private)/\S*?(?=[\s,;:)]|$)"), "<tmp>"),
    (re.compile(r"[ \t]+"), " "),                                            # column widths
)
NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")
#: a progress bar's frame (tqdm): never part of a sample output
BAR = re.compile(r"\d+%\|.*\||\[\d+:\d\d(<[\d:?]+)?, [^\]]*/s\]")   # with a total, or counting up


def normalise(text: str, numbers: bool = True, varies: tuple[str, ...] = ()) -> list[str]:
    """The lines two runs must share: noise masked, the parts matching ``varies`` too, and every
    number when ``numbers`` is False."""
    out = []
    for line in text.strip("\n").splitlines():
        for pattern in varies:
            line = re.sub(pattern, "<varies>", line)
        for pattern, mask in NOISE:
            line = pattern.sub(mask, line)
        if not numbers:
            line = NUMBER.sub("<n>", line)
        out.append(line.strip())
    return out


def block(text: str, name: str, table: bool = False) -> tuple[int, int]:
    """(first, last) line indices of the fenced block after ``name``'s marker, fences excluded;
    with ``table``, of the markdown table right after ``name``'s table marker."""
    lines = text.splitlines()
    if table:
        marker = TABLE_MARKER.format(name)
        if marker not in lines:
            raise SystemExit(f"no marker {marker!r}")
        start = lines.index(marker) + 1
        while start < len(lines) and not lines[start].strip():  # a blank line keeps the marker out of the table
            start += 1
        end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
        return start, end
    marker = MARKER.format(name)
    try:
        at = lines.index(marker)
    except ValueError:
        raise SystemExit(f"no marker {marker!r}") from None
    if not lines[at + 1].startswith(FENCE):
        raise SystemExit(f"{marker} must be followed by a fenced block")
    end = next(i for i in range(at + 2, len(lines)) if lines[i].startswith(FENCE))
    return at + 2, end


def page_block(example: Example) -> str:
    text = (ROOT / example.page).read_text()
    first, end = block(text, example.name, example.table)
    return "\n".join(text.splitlines()[first:end])


def first_table(text: str) -> str:
    """The first markdown table in a command's output (its consecutive ``|`` lines)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("|")), None)
    if start is None:
        raise RuntimeError("the command printed no markdown table")
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end])


def setup_code(name: str) -> str:
    """The code block after ``<!-- setup: NAME -->`` in any page: the page's own code is what runs."""
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        lines = page.read_text().splitlines()
        if SETUP_MARKER.format(name) in lines:
            at = lines.index(SETUP_MARKER.format(name))
            end = next(i for i in range(at + 2, len(lines)) if lines[i].startswith(FENCE))
            return "\n".join(lines[at + 2:end])
    raise SystemExit(f"no setup block {name!r}")


def _wait_for(port: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"no server came up on port {port}")


@contextmanager
def _servers(example: Example, cwd: Path) -> Iterator[None]:
    started = []
    try:
        for port, command in example.servers:
            started.append(subprocess.Popen(command, shell=True, cwd=cwd, start_new_session=True,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            _wait_for(port)
        yield
    finally:
        for process in started:  # each server in its own session: end it and what it started
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)


def _clean(raw: str) -> str:
    """What a person would have seen once the progress bars were done: no bar frames, no carriage returns."""
    lines = []
    for line in raw.replace("\r\n", "\n").split("\n"):
        frames = [f for f in line.split("\r") if f.strip() and not BAR.search(f)]
        if frames:
            lines.append(frames[-1].rstrip())
        elif "\r" not in line and not BAR.search(line):  # an empty line printed as such (a bar leaves none)
            lines.append("")
    return "\n".join(lines).strip("\n")


def run(example: Example, workdir: Path | None = None) -> str:
    """Run ``example`` in a fresh folder and return its block's new text."""
    with tempfile.TemporaryDirectory(prefix="specgauge-docs-") as tmp:
        cwd = ROOT if example.in_repo else Path(workdir or tmp)
        env = {**os.environ, "COLUMNS": "120", "PYTHONHASHSEED": "0"}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        for argv in ([["bash", "-c", example.setup]] if example.setup else []) + (
                [[sys.executable, "-c", setup_code(example.setup_block)]] if example.setup_block else []):
            subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True, timeout=example.timeout_s)
        parts = []
        with _servers(example, cwd):
            for command in example.commands:
                result = subprocess.run(["bash", "-c", command + " 2>&1"], cwd=cwd, env=env, capture_output=True,
                                        timeout=example.timeout_s)  # bytes: text mode would turn a bar's \r into \n
                result = result.__class__(result.args, result.returncode, result.stdout.decode("utf-8", "replace"))
                if result.returncode not in example.exit_codes:
                    raise RuntimeError(f"{example.name}: `{command}` exited {result.returncode} "
                                       f"(expected {example.exit_codes}):\n{result.stdout[-3000:]}")
                parts.append(f"$ {command}\n{_clean(result.stdout)}".rstrip())
        return first_table(result.stdout) if example.table else "\n".join(parts)


def stale(example: Example, fresh: str) -> list[str]:
    """The lines where the page and a fresh run disagree beyond machine noise ([] when they agree)."""
    import difflib

    page = normalise(page_block(example), example.numbers, example.varies)
    tool = normalise(fresh, example.numbers, example.varies)
    return [] if page == tool else list(difflib.unified_diff(page, tool, "page", "tool", lineterm="", n=1))


def rewrite(example: Example, fresh: str) -> None:
    path = ROOT / example.page
    text = path.read_text()
    first, end = block(text, example.name, example.table)
    lines = text.splitlines()
    path.write_text("\n".join(lines[:first] + fresh.splitlines() + lines[end:]) + "\n")


def main(argv: list[str]) -> int:
    import json

    check = "--check" in argv
    emit = argv[argv.index("--emit") + 1] if "--emit" in argv else None
    if "--apply" in argv:
        fresh_blocks = json.loads(Path(argv[argv.index("--apply") + 1]).read_text())
        for example in EXAMPLES:
            if example.name in fresh_blocks:
                rewrite(example, fresh_blocks[example.name])
                print(f"{example.name}: rewritten in {example.page}")
        return 0
    names = [a for a in argv if not a.startswith("--") and a != emit]
    emitted = {}
    unknown = set(names) - {e.name for e in EXAMPLES}
    if unknown:
        print(f"unknown example(s) {sorted(unknown)}; known: {', '.join(e.name for e in EXAMPLES)}", file=sys.stderr)
        return 2
    failed = 0
    for example in EXAMPLES:
        if names and example.name not in names:
            continue
        started = time.perf_counter()
        fresh = run(example)
        diff = stale(example, fresh)
        took = time.perf_counter() - started
        if emit:
            emitted[example.name] = fresh
            print(f"{example.name}: {'stale' if diff else 'ok'} ({took:.0f} s)", flush=True)
        elif check:
            print(f"{example.name}: {'stale' if diff else 'ok'} ({took:.0f} s)")
            print("\n".join(diff[:40]))
            failed += bool(diff)
        else:
            rewrite(example, fresh)
            print(f"{example.name}: {'rewritten' if diff else 'unchanged'} in {example.page} ({took:.0f} s)")
    if emit:
        Path(emit).write_text(json.dumps(emitted, indent=1, ensure_ascii=False) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
