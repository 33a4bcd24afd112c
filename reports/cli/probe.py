"""``specgauge probe``: draw samples from an OpenAI-compatible server into a resumable JSONL."""

from __future__ import annotations

import argparse
from pathlib import Path
import json
import os
import sys
from urllib.parse import urlsplit

from specgauge.csvio import check_writable
from specgauge.errors import InputFileError, UsageError
from specgauge.stattests.server.probe import ClientConfig, ProbeConfig, load_prompts, probe
from specgauge.stattests.server.progress import auto_mode
from specgauge.stattests.server.stops import HonouredWatch


def _number(kind, test, what: str):
    """An argparse type: ``kind`` parsed, then ``test`` checked; a bad value is one line naming ``what``."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if not test(value):
            raise argparse.ArgumentTypeError(f"{text!r}: must be {what}")
        return value
    parse.__name__ = what
    return parse


positive_int = _number(int, lambda v: v >= 1, "an integer >= 1")
count = _number(int, lambda v: v >= 0, "an integer >= 0")
positive = _number(float, lambda v: 0 < v < float("inf"), "a positive number")
timeout = _number(float, lambda v: 0 < v < float("inf"),
                  "a positive number of seconds (a request cannot finish in no time)")
temperature = _number(float, lambda v: 0 <= v < float("inf"), "a number >= 0")
top_p = _number(float, lambda v: 0 < v <= 1, "a probability in (0, 1]")
unit = _number(float, lambda v: 0 <= v <= 1, "a number in [0, 1]")
seconds = _number(float, lambda v: 0 <= v < float("inf"), "a number of seconds >= 0")
tv_value = _number(float, lambda v: 0 < v < 1, "a TV in (0, 1)")
unit_open = _number(float, lambda v: 0 < v <= 1, "a probability in (0, 1]")
rate_value = _number(float, lambda v: 0 < v < 1, "a rate in (0, 1)")


def json_object(text: str, flag: str) -> dict:
    """``text`` as a JSON object, else a usage error naming ``flag``."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{flag} is not JSON ({exc.msg}): {text[:60]!r}") from None
    if not isinstance(value, dict):
        raise UsageError(f"{flag} must be a JSON object ({{...}}), got {type(value).__name__}: {text[:60]!r}")
    return value


def server_url(text: str) -> str:
    """An argparse type: an http(s) URL with a host, refused before any request is made."""
    parsed = urlsplit(text.strip())
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a server URL: expected http://HOST:PORT (or https://...)")
    return text.strip()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,  # a prefix is refused, never read as the option it begins (`--out`, `--output-len`)
        prog="specgauge probe",
        description="Sample an OpenAI-compatible endpoint (/v1/completions or chat) into an append-only JSONL "
                    "that a rerun resumes; `specgauge compare` certifies it.")
    parser.add_argument("url", type=server_url, help="server base URL, e.g. http://127.0.0.1:8000 (with or without /v1)")
    parser.add_argument("--out", required=True, help="the JSONL to write or resume")
    parser.add_argument("--prompts", default=None,
                        help='JSONL of {"prompt": ...} lines (default: a built-in set with concentrated next tokens)')
    parser.add_argument("--model", default=None, help="model name (default: the first /v1/models lists)")
    parser.add_argument("--chat", action="store_true", help="use /v1/chat/completions instead of /v1/completions")
    parser.add_argument("--temperature", type=temperature, default=1.0, help="default 1.0")
    parser.add_argument("--top-p", type=top_p, default=None, help="sent only when given, in (0, 1]")
    parser.add_argument("--top-k", type=count, default=None, help="sent only when given (0: off on llama.cpp)")
    parser.add_argument("--min-p", type=unit, default=None, help="sent only when given (0: off)")
    parser.add_argument("--stop", action="append", default=None, help="a stop string (repeatable); sent only when given")
    parser.add_argument("-L", "--max-tokens", type=positive_int, default=3, help="tokens per sample, L (default 3)")
    parser.add_argument("--samples", type=positive_int, default=100, help="samples per prompt (default 100)")
    parser.add_argument("--top-logprobs", type=count, default=0,
                        help="ask for K top logprobs per position (enables `compare --mode logprobs`)")
    parser.add_argument("--n", type=positive_int, default=16,
                        help="samples per request where the server honours n (default 16)")
    parser.add_argument("--extra-body", default="{}",
                        help="JSON merged into every request body, e.g. engine fields such as generation_config")
    parser.add_argument("--concurrency", type=positive_int, default=4, help="requests in flight (default 4)")
    parser.add_argument("--max-rps", type=positive, default=None, help="requests started per second, at most")
    parser.add_argument("--retries", type=count, default=5, help="retries on 429/5xx/dropped connections (default 5)")
    parser.add_argument("--timeout", type=timeout, default=120.0,
                        help="seconds per request, its whole body included, > 0 (default 120)")
    parser.add_argument("--max-retry-after", type=seconds, default=60.0,
                        help="honour a server's Retry-After up to this many seconds (default 60)")
    parser.add_argument("--deadline", type=positive, default=None,
                        help="seconds for the whole probe; what landed stays in --out and a rerun resumes "
                             "(default: none)")
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"), help="default $OPENAI_API_KEY")
    sized = parser.add_argument_group("sized for a worst-case guarantee")
    sized.add_argument("--guarantee", type=tv_value, default=None, metavar="TV",
                       help="draw what the identity test needs to state this worst-case TV at every heavy context "
                            "of every position (a pilot first, then the plan and its time; a run that looks inexact is "
                            "stopped early, exit 1, by an anytime-valid test that stops an exact server with "
                            "probability at most --false-fail); needs --reference or --top-logprobs")
    sized.add_argument("--reference", default=None, metavar="MODEL_DIR",
                       help="local model directory of the served model: the laws of the contexts, before any request")
    sized.add_argument("--false-fail", type=rate_value, default=1e-6,
                       help="the comparison's total false-fail rate the plan is sized for, and the early test's "
                            "(default 1e-6)")
    sized.add_argument("--pilot", type=positive_int, default=20, help="pilot draws per prompt (default 20)")
    sized.add_argument("--context-mass", type=unit_open, default=0.1, metavar="MASS",
                       help="plan for (and watch) every context the known law reaches with at least this "
                            "probability, at every position up to L (default 0.1); lighter ones are named untested")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress (a bar on a terminal, a line every 10 s in a log) and no wait lines")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    check_writable(Path(args.out))  # before the server is contacted: a missing folder or a device is a usage error
    extra = json_object(args.extra_body, "--extra-body")
    cfg = ProbeConfig(args.url, model=args.model, endpoint="chat" if args.chat else "completions",
                      temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, min_p=args.min_p,
                      stop=tuple(args.stop) if args.stop else None, max_tokens=args.max_tokens,
                      samples_per_prompt=args.samples, top_logprobs=args.top_logprobs, n=args.n, extra_body=extra)
    client = ClientConfig(concurrency=args.concurrency, max_rps=args.max_rps, retries=args.retries,
                          timeout_s=args.timeout, api_key=args.api_key, max_retry_after_s=args.max_retry_after,
                          deadline_s=args.deadline)
    prompts = load_prompts(args.prompts)
    progress = auto_mode(sys.stderr, not args.no_progress)
    honoured = HonouredWatch(cfg.stop, cfg.max_tokens)  # said at the end: a server that ignores stop or max_tokens
    if args.guarantee is not None:
        summary = _sized(args, cfg, prompts, client, progress, honoured)
        if summary is None:  # the early test's FAIL, printed as a verdict
            return 1
    else:
        if args.reference is not None:
            raise UsageError("--reference plans a sized probe: give --guarantee TV too")
        summary = probe(cfg, prompts, args.out, client_config=client, progress=progress, watchers=[honoured])
    caps = summary.capabilities
    print(f"probe: {summary.drawn} new samples in {summary.seconds:.1f} s ({summary.samples_per_second:.0f}/s), "
          f"{summary.total} in {args.out}; server honours n: {'yes' if caps['n'] else 'no'}, "
          f"logprobs: {'yes' if caps['logprobs'] else 'no'}; tokens recorded as "
          f"{'ids' if caps.get('token_ids') else 'text'}{honoured.describe()}")
    return 0


def _sized(args, cfg: ProbeConfig, prompts: list[str], client: ClientConfig, progress: str, honoured=None):
    """A pilot, the plan (draws per prompt for every heavy context at every position, time at the
    pilot's rate), then the run with the early test watching those contexts."""
    from dataclasses import replace

    import numpy as np

    from specgauge.stattests.server.probe import read_probe
    from specgauge.stattests.server.sequential import (BiasedServerError, ContextEProcess, plan_contexts,
                                                       planning_rate, short_contexts)

    if args.reference is None and cfg.top_logprobs == 0:
        raise UsageError("--guarantee needs the known laws: --reference MODEL_DIR, or --top-logprobs K "
                         "for the server's own")
    if args.reference is not None and not Path(args.reference).is_dir():
        raise UsageError(f"--reference {args.reference!r} is not a directory")
    source = (f"the reference model's laws ({args.reference}: loaded, then a forward pass per context)"
              if args.reference is not None else f"the top-{cfg.top_logprobs} laws the pilot's draws report")
    print(f"probe: sizing for worst-case TV {args.guarantee:g} at false-fail {args.false_fail:g}, in three steps: "
          f"(1) a pilot of {args.pilot} draws a prompt over {len(prompts)} prompts (its rate times the plan); "
          f"(2) every context {source} reach with probability >= {args.context_mass:g}, at positions 0 to "
          f"{cfg.max_tokens - 1}, gets the draws the identity test needs there, with a margin; (3) the draws, "
          f"an early test betting on those contexts as they land (a biased server is stopped, exit 1)",
          file=sys.stderr, flush=True)
    pilot = probe(replace(cfg, samples_per_prompt=max(args.pilot, min(args.samples, args.pilot))), prompts, args.out,
                  client_config=client, progress=progress)
    run = read_probe(args.out)
    first = sorted((r for r in run.records if r["s"] < args.pilot), key=lambda r: (r["p"], r["s"]))
    run = replace(run, records=first)  # the plan reads the pilot alone: a resumed run plans the same
    stop_strings = bool(cfg.stop)
    if args.reference is not None:
        from specgauge.stattests.server.reference import ReferenceModel, reference_contexts, reference_tokens

        ref = ReferenceModel(args.reference, temperature=cfg.temperature or 1.0, top_k=cfg.top_k, top_p=cfg.top_p,
                             min_p=cfg.min_p)
        contexts = reference_contexts(ref, prompts, cfg.endpoint == "chat", cfg.max_tokens, args.context_mass)
        tokens_of = reference_tokens(args.reference, cfg.max_tokens, stop_strings)
        what = "the reference model's law"
    else:
        from specgauge.stattests.server.compare import text_stops, logprob_cells
        from specgauge.stattests.server.sequential import reported_contexts, reported_tokens

        stops = text_stops(run)  # stop strings placed as draws where the token names join into the texts
        try:
            end = logprob_cells(run)[5]  # the end of sequence's name in the lists (None: the rest cell)
        except InputFileError:  # no top logprobs at all: refused below, prompt by prompt
            end = None
        contexts = reported_contexts(run.records, cfg.max_tokens, stops, end)
        if {c.prompt for c in contexts if not c.prefix} != set(range(len(prompts))):
            raise UsageError("the pilot's samples carry no top logprobs at some prompt's first position: size with "
                             "--reference MODEL_DIR instead")
        tokens_of = reported_tokens(cfg.max_tokens, end, stop_strings, stops)
        what = "the law the server reports"
    rate = planning_rate(args.false_fail, len(prompts), cfg.max_tokens)
    plan = plan_contexts(contexts, len(prompts), args.guarantee, rate, args.context_mass)
    speed = pilot.samples_per_second if pilot.drawn and np.isfinite(pilot.samples_per_second) else None
    print(f"probe: plan: {plan.describe(speed)}", file=sys.stderr, flush=True)
    early = ContextEProcess([c for c, _ in plan.planned], len(prompts), args.false_fail, tokens_of)
    certify = (f"specgauge compare {args.out} {'--reference ' + args.reference + ' ' if args.reference else ''}"
               f"--tv {args.guarantee:g} --false-fail {args.false_fail:g}")
    try:
        summary = probe(replace(cfg, samples_per_prompt=plan.samples_per_prompt), prompts, args.out,
                        client_config=client, progress=progress, watchers=[early, *([honoured] if honoured else [])])
    except BiasedServerError as exc:  # a verdict, not an error: the run did its job
        print(f"FAIL (probe --guarantee {args.guarantee:g}: the early test against {what}): {' '.join(str(exc).split())}"
              f"{_watching(early)}", flush=True)
        print(f"probe: stopped early; what landed is in {args.out} (certify it with: {certify})", file=sys.stderr,
              flush=True)
        return None
    short = short_contexts(plan, early)
    shortfall = (f"; {len(short)} planned contexts still fell short of their draws (their rows may be missing): "
                 f"{', '.join(short[:4])}{' ...' if len(short) > 4 else ''}" if short else
                 "; every planned context the early test watched got the draws it needs")
    print(f"probe: sized for TV {args.guarantee:g} at {len(plan.planned)} contexts{shortfall}{_watching(early)}; "
          f"the early test's e-value against {what} {early.e_value:.3g} stayed below 1/{args.false_fail:g}; "
          f"certify with: {certify}", file=sys.stderr, flush=True)
    return summary


def _watching(early) -> str:
    """Where the early test stopped watching a prompt (a token not known), in words, or ""."""
    stopped = early.stopped_watching()
    return (f"; the early test stopped watching {', '.join(stopped)}: no bet after that draw (its contexts are "
            f"counted short no more)" if stopped else "")
