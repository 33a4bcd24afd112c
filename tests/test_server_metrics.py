"""``--acceptance`` from a vLLM server's saved ``/metrics`` text: parsing, differences, refusals.

The shipped example (docs/examples/vllm-metrics) was rendered by vLLM's own
``SpecDecodingProm`` and ``prometheus_client`` (scripts/make-vllm-metrics-example.py); its
``counters.json`` records what was fed between the two scrapes, so the parser is held
against counts it never saw.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from specgauge.reports.cli import main as cli_main
from specgauge.reports.planning.measured_rates import AcceptanceError, parse_acceptance
from specgauge.reports.planning.server_metrics import MetricsError, parse_counters, read_counters

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "vllm-metrics"
FED = json.loads((EXAMPLE / "counters.json").read_text())
PAIR = f"{EXAMPLE / 'before.txt'},{EXAMPLE / 'after.txt'}"


def test_two_scrapes_give_the_counts_fed_between_them():
    counters, _ = read_counters(PAIR.split(","))
    assert counters.drafts == FED["num_drafts"] and counters.draft_tokens == FED["num_draft_tokens"]
    assert counters.accepted == FED["num_accepted_tokens"]
    assert list(counters.accepted_per_pos) == FED["accepted_per_pos"]
    assert counters.acceptance_length == pytest.approx(FED["acceptance_length"], rel=1e-12)


def test_the_spec_is_conditional_and_keeps_the_accepted_length():
    spec = parse_acceptance(PAIR)
    assert len(spec.rates) == 3 and spec.acceptance_length == pytest.approx(FED["acceptance_length"])
    cumulative, product = [], 1.0
    for rate in spec.rates:   # Π α_i is vLLM's unconditional per-position rate
        product *= rate
        cumulative.append(product)
    assert cumulative == pytest.approx([a / FED["num_drafts"] for a in FED["accepted_per_pos"]], rel=1e-9)
    # the expected length of the model at γ = the measured positions is the counters' length
    assert spec.to_model().expected_tokens_per_pass(3) == pytest.approx(FED["acceptance_length"], rel=1e-9)


def test_simulate_reports_the_counters_accepted_length_within_one_percent(capsys):
    assert cli_main(["simulate", "--gamma", "3", "--acceptance", PAIR, "--batch-size", "8", "--requests", "300"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.strip().startswith("acceptance length"))
    simulated = float(line.split()[2])
    assert simulated == pytest.approx(FED["acceptance_length"], rel=0.01)
    assert f"acceptance length {FED['acceptance_length']:.4f} (1 + accepted/drafts)" in out


TEXT = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="a \\"quoted\\", name"}} {d0} 1700000000000
vllm:spec_decode_num_drafts_total{{engine="1",model_name="b"}} {d1}
vllm:spec_decode_num_drafts_created{{engine="0",model_name="b"}} 1.7e9
vllm:spec_decode_num_draft_tokens_total{{engine="0"}} {t}
vllm:spec_decode_num_accepted_tokens_total{{engine="0"}} {a}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="1"}} {p1}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="0"}} {p0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="0",engine="1"}} {q0}
vllm:num_requests_running{{engine="0"}} 3.0
"""


def test_label_sets_are_summed_and_created_samples_skipped():
    counters = parse_counters(TEXT.format(d0=60, d1=40, t=200, a=130, p1=50, p0=30, q0=50), "t")
    assert (counters.drafts, counters.draft_tokens, counters.accepted) == (100, 200, 130)
    assert counters.accepted_per_pos == (80, 50) and counters.acceptance_length == pytest.approx(2.3)
    assert counters.per_position == pytest.approx((0.8, 0.5))


def refused(argv: list[str], capsys) -> str:
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_refusals_are_one_line_exit_2(tmp_path, capsys):
    plain = tmp_path / "plain.txt"
    plain.write_text('# HELP process_open_fds x\nprocess_open_fds 6.0\nvllm:num_requests_running{engine="0"} 1\n')
    assert "no vllm:spec_decode_num_drafts_total" in refused(["simulate", "--acceptance", str(plain)], capsys)
    after = EXAMPLE / "after.txt"
    assert "counter fell" in refused(["simulate", "--acceptance", f"{after},{EXAMPLE / 'before.txt'}"], capsys)
    assert "no drafts counted between" in refused(["simulate", "--acceptance", f"{after},{after}"], capsys)
    idle = tmp_path / "idle.txt"
    idle.write_text(TEXT.format(d0=0, d1=0, t=0, a=0, p1=0, p0=0, q0=0))
    assert "no drafts counted" in refused(["plan", "--acceptance", str(idle)], capsys)
    rising = tmp_path / "rising.txt"
    rising.write_text(TEXT.format(d0=60, d1=40, t=200, a=130, p1=90, p0=20, q0=20))
    assert "rise with position" in refused(["simulate", "--acceptance", str(rising)], capsys)
    empty = tmp_path / "empty.json"   # a per-position list that is present and empty is not an i.i.d. rate
    empty.write_text(json.dumps({"spec_decode_per_position_acceptance_rates": [], "spec_decode_acceptance_rate": 51.0}))
    assert "is empty" in refused(["plan", "--acceptance", str(empty)], capsys)


@pytest.mark.parametrize("text,words", [
    (TEXT.format(d0=1, d1=1, t=2, a=1, p1=0, p0=1, q0=0).replace('position="1"', 'position="3"'), "positions [0, 3]"),
    (TEXT.format(d0=1, d1=1, t=2, a=1, p1=0, p0=1, q0=0).replace(" 1700000000000", "").replace("} 1\n", "} x\n", 1),
     "not a number"),
    (TEXT.format(d0=10, d1=0, t=20, a=9, p1=1, p0=3, q0=0), "sum to 4"),
    (TEXT.format(d0=1, d1=1, t=2, a=1, p1=0, p0=1, q0=0).replace(',position="1"', ""), "without a position"),
])
def test_malformed_counters_are_refused(text, words, tmp_path):
    (tmp_path / "m.txt").write_text(text)
    with pytest.raises(MetricsError, match=words.replace("[", r"\[").replace("]", r"\]")):
        read_counters([str(tmp_path / "m.txt")])
    assert issubclass(MetricsError, AcceptanceError.__mro__[1])   # a usage error: exit status 2


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_vllm_renders_what_the_parser_reads(tmp_path):
    """vLLM's own SpecDecodingProm and prometheus_client, run anew (about 8 s, mostly importing vLLM)."""
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make-vllm-metrics-example.py"), str(tmp_path)],
                   check=True, capture_output=True, timeout=300)
    fed = json.loads((tmp_path / "counters.json").read_text())
    counters, _ = read_counters([str(tmp_path / "before.txt"), str(tmp_path / "after.txt")])
    assert counters.accepted == fed["num_accepted_tokens"] and list(counters.accepted_per_pos) == fed["accepted_per_pos"]
    assert counters.acceptance_length == pytest.approx(fed["acceptance_length"])


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None or importlib.util.find_spec("aiohttp") is None,
                    reason="vllm (and aiohttp) not installed")
def test_vllm_bench_serve_reads_the_scrapes_as_the_parser_does():
    """``vllm bench serve``'s own /metrics reader, served the two scrapes over HTTP, gives the counts
    the parser gives, and its acceptance length from their difference (about 15 s, mostly importing vLLM)."""
    import asyncio
    import http.server
    import threading

    import aiohttp
    from vllm.benchmarks.serve import fetch_spec_decode_metrics

    served = {"path": EXAMPLE / "before.txt"}

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server hook's name
            body = served["path"].read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    async def scrape():
        async with aiohttp.ClientSession() as session:
            return await fetch_spec_decode_metrics(f"http://127.0.0.1:{server.server_address[1]}", session)

    try:
        seen = {}
        for name in ("before.txt", "after.txt"):
            served["path"] = EXAMPLE / name
            seen[name] = asyncio.run(scrape())
    finally:
        server.shutdown()
    for name, theirs in seen.items():
        ours = parse_counters((EXAMPLE / name).read_text(), name)
        assert (ours.drafts, ours.draft_tokens, ours.accepted) == (theirs.num_drafts, theirs.num_draft_tokens,
                                                                  theirs.num_accepted_tokens)
        assert list(ours.accepted_per_pos) == [theirs.accepted_per_pos[k] for k in sorted(theirs.accepted_per_pos)]
    before, after = seen["before.txt"], seen["after.txt"]
    length = 1 + (after.num_accepted_tokens - before.num_accepted_tokens) / (after.num_drafts - before.num_drafts)
    assert read_counters(PAIR.split(","))[0].acceptance_length == pytest.approx(length, rel=1e-12)
