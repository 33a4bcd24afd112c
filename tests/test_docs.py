"""The manual is checked as code: README.md and docs/*.md must not point at nothing.

Every relative link must reach a file (and a heading, where an anchor is given); every
``specgauge`` command in a code block must name a real subcommand and only flags its
parser knows (parsers built in process from the dispatcher's table), every ``pytest``
command only ``--specgauge-*`` options the plugin registers; every repository path quoted
in backticks must exist. The checker is tested on a bad snippet first, so a green run
means something.
"""

from __future__ import annotations

import importlib
import re
import shlex
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Files the commands write (under the default output folder): named in the docs, never committed.
OUTPUT_SUFFIXES = (".csv", ".png", ".json", ".jsonl")

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
SPAN = re.compile(r"`([^`\n]+)`")
PATHLIKE = re.compile(r"^\.?[\w\-]+(/[\w.\-*]+)+/?$")


@dataclass(frozen=True)
class Problem:
    doc: str
    what: str

    def __str__(self) -> str:
        return f"{self.doc}: {self.what}"


@dataclass(frozen=True)
class Parsed:
    """A Markdown page split into what the checks read."""

    prose: str  # the text outside code blocks
    blocks: tuple[tuple[str, ...], ...]  # each code block's lines
    anchors: frozenset[str]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (MkDocs' toc gives the same for ASCII headings)."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def parse(text: str) -> Parsed:
    prose: list[str] = []
    blocks: list[list[str]] = []
    anchors: dict[str, int] = {}
    fence: str | None = None
    indented = False
    previous_blank = True
    for line in text.splitlines():
        match = FENCE.match(line)
        if fence is not None:
            if match and match.group(1) == fence:
                fence = None
            else:
                blocks[-1].append(line)
            previous_blank = False
            continue
        if match:
            fence = match.group(1)
            blocks.append([])
            continue
        if line.startswith("    ") and (previous_blank or indented):
            if not indented:
                blocks.append([])
            indented = True
            blocks[-1].append(line[4:])
            continue
        indented = False
        previous_blank = not line.strip()
        prose.append(line)
        if line.startswith("#") and re.match(r"^#{1,6} ", line):
            base = slug(line.lstrip("#"))
            count = anchors.get(base, 0)
            anchors[base] = count + 1
            anchors.setdefault(f"{base}-{count}" if count else base, 1)
    return Parsed("\n".join(prose), tuple(tuple(b) for b in blocks), frozenset(anchors))


def check_links(doc: Path, parsed: Parsed, root: Path = ROOT) -> list[Problem]:
    problems = []
    for target in LINK.findall(parsed.prose):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if root.resolve() not in file.parents:
            problems.append(Problem(doc.name, f"link to {target!r} leaves the repository"))
        elif not file.exists():
            problems.append(Problem(doc.name, f"link to {target!r}: no such file"))
        elif anchor and file.suffix == ".md" and anchor not in parse(file.read_text(encoding="utf-8")).anchors:
            problems.append(Problem(doc.name, f"link to {target!r}: no heading with that anchor"))
    return problems


@lru_cache(maxsize=1)
def subcommand_flags() -> dict[str, frozenset[str]]:
    """Each subcommand of the dispatcher's table, with the option strings its parser knows."""
    from specgauge.reports.cli import SUBCOMMANDS

    flags = {}
    for name, (module, _) in SUBCOMMANDS.items():
        parser = importlib.import_module(module).build_parser()
        flags[name] = frozenset(s for action in parser._actions for s in action.option_strings)
    return flags


@lru_cache(maxsize=1)
def plugin_flags() -> frozenset[str]:
    """The options the pytest plugin registers, collected by calling its hook."""
    from specgauge.stattests import plugin

    class Collector:
        names: set[str] = set()

        def getgroup(self, *args, **kwargs):
            return self

        def addoption(self, *names, **kwargs):
            self.names.update(names)

    collector = Collector()
    plugin.pytest_addoption(collector)
    return frozenset(collector.names)


def commands(block: tuple[str, ...]) -> list[str]:
    """The shell commands of a code block: only the ``$ `` lines where the block shows
    output beside them, with backslash continuations joined."""
    prompted = any(line.startswith("$ ") for line in block)
    joined, pending = [], ""
    for line in block:
        if prompted and not pending:
            if not line.startswith("$ "):
                continue  # output
            line = line[2:]
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    out = []
    for line in joined + ([pending] if pending else []):
        for part in re.split(r"&&|\|\||;|\|", line):
            part = re.sub(r"^\s*(do|then|else)\s+", "", part).strip()
            if part.startswith(("specgauge ", "pytest ")) or part in ("specgauge", "pytest"):
                out.append(part)
    return out


def check_command(doc: str, command: str) -> list[Problem]:
    try:
        words = shlex.split(command, comments=True)
    except ValueError as exc:
        return [Problem(doc, f"cannot parse {command!r}: {exc}")]
    words = [w.strip("[]") for w in words]
    flags = [w.split("=", 1)[0] for w in words[1:] if re.match(r"^--?[A-Za-z]", w)]
    if words[0] == "pytest":
        known = plugin_flags()
        return [Problem(doc, f"{command!r}: the plugin has no option {f}")
                for f in flags if f.startswith("--specgauge") and f not in known]
    table = subcommand_flags()
    if len(words) > 1 and not words[1].startswith("-"):
        name = words[1]
        if name not in table:
            return [Problem(doc, f"{command!r}: no subcommand {name!r} (known: {', '.join(table)})")]
    else:
        name = "plan"  # `specgauge [--help | --version | plan options]`
        flags = [f for f in flags if f not in ("-h", "--help", "--version")]
    return [Problem(doc, f"{command!r}: `specgauge {name}` has no option {f}")
            for f in flags if f not in table[name]]


def check_commands(doc: Path, parsed: Parsed) -> list[Problem]:
    found = [c for block in parsed.blocks for c in commands(block)]
    found += [s for s in SPAN.findall(parsed.prose) if s.startswith("specgauge ")]
    return [p for c in found for p in check_command(doc.name, c)]


def check_paths(doc: Path, parsed: Parsed, root: Path = ROOT) -> list[Problem]:
    top = {p.name for p in root.iterdir() if p.is_dir() and not p.name.endswith(".egg-info")}
    problems = []
    for span in SPAN.findall(parsed.prose):
        span = span.strip()
        if not PATHLIKE.match(span) or span.split("/")[0] not in top:
            continue
        if span.startswith("specgauge-out/") and span.endswith(OUTPUT_SUFFIXES):
            continue  # what a command writes into the default output folder
        if not (list(root.glob(span.rstrip("/"))) if "*" in span else (root / span).exists()):
            problems.append(Problem(doc.name, f"`{span}`: no such path in the repository"))
    return problems


def check(doc: Path, root: Path = ROOT) -> list[Problem]:
    parsed = parse(doc.read_text(encoding="utf-8"))
    return check_links(doc, parsed, root) + check_commands(doc, parsed) + check_paths(doc, parsed, root)


BAD = """# A page

## Its only heading

[gone](nowhere.md), [wrong anchor](#no-such-heading), [fine](#its-only-heading),
[escape](../../../etc/passwd) and `stattests/no_such_module.py`, but `stattests/chain/zoo.py`
and `specgauge-out/plan.csv` (an output) are fine.

    specgauge plan --gamma 2 --no-such-flag
    specgauge certfy --decoder numpy
    pytest stattests --specgauge-decoder torch --specgauge-nope 1

```
$ specgauge compare on.jsonl --baseline off.jsonl \\
      --csv out.csv --bogus
output lines are not commands: specgauge frobnicate --x
```

Inline: `specgauge simulate --gama 4`.
"""


def test_the_checker_catches_each_kind_of_mistake(tmp_path):
    (tmp_path / "stattests" / "chain").mkdir(parents=True)
    (tmp_path / "stattests" / "chain" / "zoo.py").write_text("")
    (tmp_path / "specgauge-out").mkdir()
    doc = tmp_path / "docs" / "bad.md"
    doc.parent.mkdir()
    doc.write_text(BAD)
    found = "\n".join(map(str, check(doc, root=tmp_path)))
    for mistake in ("'nowhere.md': no such file", "'#no-such-heading': no heading", "leaves the repository",
                    "`stattests/no_such_module.py`: no such path", "`specgauge plan` has no option --no-such-flag",
                    "no subcommand 'certfy'", "the plugin has no option --specgauge-nope",
                    "`specgauge compare` has no option --bogus", "`specgauge simulate` has no option --gama"):
        assert mistake in found, mistake
    assert len(found.splitlines()) == 9, found  # nothing fine is flagged: the good anchor, paths, flags, output


def test_a_clean_page_passes(tmp_path):
    doc = tmp_path / "ok.md"
    doc.write_text("# Title\n\nSee [the title](#title).\n\n    specgauge certify --fixture seed-six-token --csv x.csv\n"
                   "    pytest stattests --specgauge-tv 0.01 -k exactness\n")
    assert check(doc, root=tmp_path) == []


def test_slugs_match_the_forge():
    assert slug("`specgauge plan`") == "specgauge-plan"
    assert slug("vLLM and SGLang: their real verification kernels") == "vllm-and-sglang-their-real-verification-kernels"
    assert slug("A worked example: `transformers serve` on a CPU") == "a-worked-example-transformers-serve-on-a-cpu"


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_every_link_command_and_path_in_the_manual_is_valid(doc):
    problems = check(doc)
    assert not problems, "\n".join(map(str, problems))


def test_the_readme_is_a_front_page_with_the_ci_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = 'pip install -e ".[test]" && bash scripts/install-cpu-backends.sh && pytest -n 2 --dist loadfile'
    assert len(readme) < 12_500
    assert command in readme and command in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
