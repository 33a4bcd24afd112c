"""Every sample output in README.md and docs/ is what the tool prints today.

Each block of output in the manual sits under a marker ``<!-- output: NAME -->`` and is
written by ``scripts/regenerate-docs.py`` from the real commands; here each example runs
again and its block must match, wall times, rates and temporary paths aside (an example
whose run cannot repeat its numbers may compare words, columns, check names and verdicts
only; none needs to today: the fake servers are probed one request at a time). The fast
examples (simulate, calibrate: about 10 s together) run in the default tier; certify,
plan's default scenario, the fake servers, the measured acceptance and the gate's failing
run are slow (about 6 minutes on a loaded 2-core machine). The checker is shown to catch
a stale number and to ignore noise before any page is trusted to it.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _load():
    spec = importlib.util.spec_from_file_location("regenerate_docs", ROOT / "scripts" / "regenerate-docs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


docs = _load()


def test_every_output_block_in_the_manual_is_regenerated():
    """A fenced block that shows a command's output (it starts with ``$ ``) sits under a marker with an
    example behind it, and every example has its marker: no sample output escapes the script."""
    names = {e.name for e in docs.EXAMPLES}
    assert len(names) == len(docs.EXAMPLES)
    seen, unmarked = set(), []
    for page in PAGES:
        lines = page.read_text().splitlines()
        inside = False
        for i, line in enumerate(lines):
            table = re.fullmatch(r"<!-- table: (\S+) -->", line)
            if table and table.group(1) in names:
                seen.add(table.group(1))
                assert lines[i + 2].startswith("|"), f"{page.name}:{i + 1}: a table marker, a blank line, the table"
            if line.startswith("```"):
                inside = not inside
                if inside and i + 1 < len(lines) and lines[i + 1].startswith("$ "):
                    marker = re.fullmatch(r"<!-- output: (\S+) -->", lines[i - 1]) if i else None
                    if not marker or marker.group(1) not in names:
                        unmarked.append(f"{page.name}:{i + 1}")
                    else:
                        seen.add(marker.group(1))
                        example = next(e for e in docs.EXAMPLES if e.name == marker.group(1))
                        assert page == ROOT / example.page, (example.name, page)
    assert not unmarked, f"output blocks no example regenerates: {unmarked}"
    assert seen == names, f"examples without a block: {names - seen}"


def test_each_block_shows_the_commands_as_the_example_runs_them():
    for example in (e for e in docs.EXAMPLES if not e.table):  # a table shows its command in the page's prose
        shown = [line[2:] for line in docs.page_block(example).splitlines() if line.startswith("$ ")]
        assert shown == list(example.commands), example.name


def test_the_checker_ignores_noise_and_catches_a_stale_number():
    page = ["$ specgauge plan", "wrote specgauge-out/plan.csv: 72 configurations in 17.6 s",
            "probe: 8000 new samples in 7.3 s (1092/s), 8000 in /tmp/x/off.jsonl", "1      5    2.26"]
    run = ["$ specgauge plan", "wrote specgauge-out/plan.csv: 72 configurations in 3.1 s",
           "probe: 8000 new samples in 9.0 s (880/s), 8000 in /tmp/other/off.jsonl", "1  5  2.26"]
    assert docs.normalise("\n".join(page)) == docs.normalise("\n".join(run))
    stale = run[:-1] + ["1      3    2.26"]                                  # best γ changed: the page is stale
    assert docs.normalise("\n".join(page)) != docs.normalise("\n".join(stale))
    assert docs.normalise("\n".join(page), numbers=False) == docs.normalise("\n".join(stale), numbers=False)
    simulated = ["TPOT mean 6.01 ms (no spec 17.61)"]                        # simulated times are results, not noise
    assert docs.normalise(simulated[0]) != docs.normalise("TPOT mean 6.02 ms (no spec 17.61)")
    assert docs.normalise("23 failed, 6 passed in 22.83s (0:00:22)") == docs.normalise("23 failed, 6 passed in 9.1s")
    renamed = run[:-1] + ["1      5    2.26 extra-column"]                     # a column or check name changed
    assert docs.normalise("\n".join(page), numbers=False) != docs.normalise("\n".join(renamed), numbers=False)


def test_what_varies_across_cpus_is_masked_and_nothing_else():
    """An example's ``varies`` masks only the sampled run's figures: a changed law still fails."""
    varies = next(e for e in docs.EXAMPLES if e.name == "acceptance-smollm2-run").varies
    page = "  skip14 γ=2: law 2.451 [2.413, 2.482]  measured 2.519 [2.250, 2.826] over 52 rounds: intervals overlap"
    other_cpu = "  skip14 γ=2: law 2.451 [2.413, 2.482]  measured 2.538 [2.262, 2.840] over 53 rounds: intervals overlap"
    law_moved = other_cpu.replace("law 2.451", "law 2.452")
    assert docs.normalise(page, varies=varies) == docs.normalise(other_cpu, varies=varies)
    assert docs.normalise(page, varies=varies) != docs.normalise(law_moved, varies=varies)
    assert docs.normalise(page) != docs.normalise(other_cpu)


def test_a_table_is_read_from_the_page_and_from_the_output(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("text\n<!-- table: t -->\n\n| a | b |\n|---|---|\n| x | 1.5 |\n\nafter\n")
    monkeypatch.setattr(docs, "ROOT", tmp_path)
    example = docs.Example("t", "page.md", ("python make_table.py",), table=True)
    printed = "header line\n| a | b |\n|---|---|\n| x | 1.5 |\n\nsummary 3"
    assert docs.stale(example, docs.first_table(printed)) == []
    assert docs.stale(example, docs.first_table(printed.replace("1.5", "1.6")))  # a moved figure is stale
    docs.rewrite(example, docs.first_table(printed.replace("1.5", "1.6")))
    assert page.read_text() == "text\n<!-- table: t -->\n\n| a | b |\n|---|---|\n| x | 1.6 |\n\nafter\n"


def test_progress_bars_are_left_out():
    raw = ("header\ncertifying numpy:  10%|#         | 63/631 [00:05<00:50]\rcertifying numpy: 100%|##########| 631/631"
           "\r\n\r                              \r\nresult\n\nrun flat γ=4: 1926tok [00:05, 298.30tok/s]\r\n"
           "second paragraph\n")
    assert docs._clean(raw) == "header\nresult\n\nsecond paragraph"


@pytest.mark.parametrize("example", [pytest.param(e, id=e.name, marks=[pytest.mark.slow] if e.slow else [])
                                     for e in docs.EXAMPLES])
def test_the_page_and_the_tool_agree(example):
    for module in ("torch", "transformers") if example.setup_block else ():
        pytest.importorskip(module)
    fresh = docs.run(example)
    diff = docs.stale(example, fresh)
    assert not diff, (f"{example.page} is stale for {example.name}: run "
                      f"`python scripts/regenerate-docs.py {example.name}`\n" + "\n".join(diff[:60]))
