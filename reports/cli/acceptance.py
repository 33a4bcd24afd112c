"""``specgauge acceptance``: each draft's exact per-position acceptance on the user's prompts.

Writes, beside ``--csv`` (default ``specgauge-out/acceptance.csv``): the summary CSV (one row per
draft and γ), the per-request traces ``<stem>.jsonl`` (``simulate``/``plan --acceptance
<stem>.jsonl:LABEL`` replay them) and the figure ``<stem>.png``; with ``--plan``, the
simulated rows ``<stem>_plan.csv`` and the decisions ``<stem>_decision.csv``. Every input
is checked before anything is written; a bad one is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from specgauge.csvio import resolve_csv_target, write_bytes_atomic, write_csv_atomic
from specgauge import inputs
from specgauge.errors import SpecgaugeError

from specgauge.measurement.models import HFLaw, Loader, MeasurementInputError, Sampling, load_model, split_label
from specgauge.measurement.prompts import Request, read_requests

from .budget import announce, physical_memory
from .console import say, warn

DEFAULT_GAMMAS = "1,2,3,4,5,6,8"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, as for every other bad input
        print(f"specgauge acceptance: error: {message}", file=sys.stderr)
        raise SystemExit(2)


#: γ values and batch sizes: positive integers, none twice (as every other command's lists)
_INTS = inputs.CommaList(inputs.positive_int)
#: torch devices an HF model can be put on
DEVICES = ("cpu", "cuda", "mps", "xpu")
DTYPES = ("float32", "bfloat16", "float16")


def _device(text: str) -> str:
    """An argparse type: ``cpu``, ``cuda``, ``cuda:N``, ``mps``, ``xpu``, ``xpu:N``."""
    kind, _, index = str(text).strip().partition(":")
    if kind not in DEVICES or (index and not (index.isdigit() and kind in ("cuda", "xpu"))):
        raise argparse.ArgumentTypeError(f"a torch device: cpu, cuda[:N], mps or xpu[:N], not {text!r}")
    return str(text).strip()


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="specgauge acceptance", allow_abbrev=False, description=(
        "Measure each draft's acceptance on your prompts by teacher forcing: one forward pass of the target and "
        "of each draft over prompt + continuation gives α_t = Σ min(p_t, q_t) at every position, exactly."))
    p.add_argument("--target", required=True, help="HF model directory, toy:PAIR (a shipped toy LM), or MODULE:NAME")
    p.add_argument("--draft", action="append", required=True, metavar="[LABEL=]SPEC",
                   help="a draft (repeatable): HF model directory, ngram[:MAX_N] (prompt lookup), toy:PAIR[/target], "
                   "or MODULE:NAME (a next-token model: vocab_size, order, next_probs)")
    p.add_argument("--prompts", help="JSONL (strings, token-id lists, prompt/messages/conversations objects), "
                   "ShareGPT-style .json, or a specgauge probe file (its continuations are reused); "
                   "default for a toy target: its pair's prompt")
    p.add_argument("--samples", type=inputs.positive_int, default=1, help="continuations per prompt (default 1)")
    p.add_argument("--max-new-tokens", type=inputs.positive_int, default=64, help="continuation length sampled from the target")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--top-k", type=inputs.positive_int, default=None)
    p.add_argument("--seed", type=inputs.seed, default=0, help="root seed (continuations, traces, bootstrap, --run)")
    p.add_argument("--gamma", type=_INTS, default=_INTS.parse(DEFAULT_GAMMAS), help=f"γ values of the summary (default {DEFAULT_GAMMAS})")
    p.add_argument("--candidates", type=inputs.positive_int, default=4, help="ranked candidates per position (n-gram, top-k tree)")
    p.add_argument("--device", type=_device, default="cpu", help="torch device of HF models (cpu, cuda[:N], ...)")
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="torch dtype of HF models")
    p.add_argument("--batch-size", type=inputs.positive_int, default=8, help="requests per forward pass")
    p.add_argument("--threads", type=inputs.positive_int, default=None, help="torch CPU threads (default: torch's; 1 is fastest "
                   "for tiny models on shared cores)")
    p.add_argument("--csv", default=None, metavar="PATH", help="summary CSV (default specgauge-out/acceptance.csv)")
    p.add_argument("--plot", action=argparse.BooleanOptionalAction, default=None,
                   help="write the PNG (default: on when matplotlib is installed)")
    p.add_argument("--no-progress", action="store_true")
    run = p.add_argument_group("--run: measured against predicted")
    run.add_argument("--run", action="store_true", help="also run speculative decoding through the reference rule")
    run.add_argument("--run-gamma", type=_INTS, default=[4], help="γ values of the run (default 4)")
    plan = p.add_argument_group("--plan: rank the drafts with the simulator")
    plan.add_argument("--plan", action="store_true")
    plan.add_argument("--plan-target", default=None, help="the target's simulator profile (e.g. llama-3.1-8b)")
    plan.add_argument("--plan-draft", action="append", default=[], metavar="LABEL=PROFILE",
                      help="a measured draft's simulator draft: a model profile, eagle, mtp or ngram (repeatable)")
    plan.add_argument("--plan-gpu", default="h200")
    plan.add_argument("--plan-batch-size", type=_INTS, default=_INTS.parse("1,8,32,128"))
    plan.add_argument("--plan-requests", type=inputs.positive_int, default=200)
    plan.add_argument("--plan-prompt-len", type=inputs.positive_int, default=512)
    plan.add_argument("--plan-output-len", type=inputs.positive_int, default=256)
    return p


def _requests(args, tokenizer: str | None) -> list[Request]:
    if args.prompts is not None:
        requests = read_requests(args.prompts, tokenizer)
    elif split_label(args.target)[1].startswith("toy:"):
        from specgauge.fixtures.toy_lm import load_toy_lm

        pair = split_label(args.target)[1][4:].partition("/")[0]
        requests = [Request(np.asarray(load_toy_lm(pair).prompt, np.int64), origin=f"toy:{pair} prompt")]
    else:
        raise MeasurementInputError("--prompts is required (only a toy target has a prompt of its own)")
    if any(r.continuation is not None for r in requests):
        _check_probe_sampling(args)
    return requests


def _check_probe_sampling(args) -> None:
    """A probe's continuations were sampled at the server's settings: say so when they are not these."""
    from specgauge.stattests.server.probe import read_probe

    params = read_probe(args.prompts).header.get("params", {})
    ours = {"temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k}
    differ = [f"{k} {params.get(k)!r} there, {v!r} here" for k, v in ours.items() if params.get(k) != v]
    if differ:
        warn("acceptance", f"the probe's continuations were sampled with other settings ({'; '.join(differ)}); "
                           "α is computed at the settings given here")


def _check_vocabularies(target, drafts, requests: list[Request]) -> None:
    """Every token id a model will read lies inside its vocabulary: the prompts' ids, and the
    target's continuations, which a draft with fewer tokens than the target cannot read."""
    models = [target, *(d for d in drafts if hasattr(d, "vocab_size"))]
    for draft in models[1:]:
        if draft.vocab_size < target.vocab_size:
            raise MeasurementInputError(
                f"draft {draft.name!r} has {draft.vocab_size:,} tokens, fewer than the target's "
                f"{target.vocab_size:,}: it cannot read what the target writes (a draft shares the target's tokenizer)")
    smallest = min(models, key=lambda m: m.vocab_size)
    for request in requests:
        for part in (request.prompt, request.continuation):
            if part is not None and len(part) and (int(part.max()) >= smallest.vocab_size or int(part.min()) < 0):
                bad = int(part.max()) if int(part.max()) >= smallest.vocab_size else int(part.min())
                raise MeasurementInputError(
                    f"{request.origin or 'a prompt'}: token id {bad} is outside the vocabulary of "
                    f"{smallest.name!r} ({smallest.vocab_size:,} tokens, ids 0 to {smallest.vocab_size - 1:,})")


#: What teacher forcing keeps per position: the continuation's id, and per draft its α and the
#: acceptance of each ranked candidate; the traces written hold about as much again as text.
BYTES_PER_POSITION, BYTES_PER_DRAFT_POSITION = 8, 8 * 2


def _check_size(requests: int, drafts, args) -> None:
    """Refuse, before any work, a measurement whose results cannot fit in this machine's memory."""
    positions = float(requests) * float(args.max_new_tokens)
    memory = positions * (BYTES_PER_POSITION + len(drafts) * BYTES_PER_DRAFT_POSITION * (1 + args.candidates))
    if memory > physical_memory():
        raise MeasurementInputError(
            f"{requests:,} requests ({args.samples:,} samples per prompt) of {args.max_new_tokens:,} new tokens "
            f"are {positions:,.0f} positions, about {memory / 2**30:,.0f} GiB of results, more than this machine's "
            f"{physical_memory() / 2**30:,.0f} GiB; lower --samples or --max-new-tokens")


def _check_switches(args) -> None:
    """An option of --run or --plan given without its switch would be silently ignored: refuse it."""
    parser = build_parser()
    for switch, prefix in (("run", "run_"), ("plan", "plan_")):
        if not getattr(args, switch):
            given = [k for k in vars(args) if k.startswith(prefix) and getattr(args, k) != parser.get_default(k)]
            if given:
                raise MeasurementInputError(f"{', '.join('--' + k.replace('_', '-') for k in given)} "
                                            f"given without --{switch}, which it belongs to")


def _check_torch_options(args, models) -> None:
    """--device and --dtype place HF models: refuse them where they would do nothing, or cannot."""
    hf = [m for m in models if isinstance(m, HFLaw)]
    parser = build_parser()
    given = [f"--{k} {getattr(args, k)}" for k in ("device", "dtype") if getattr(args, k) != parser.get_default(k)]
    if given and not hf:
        raise MeasurementInputError(f"{' and '.join(given)} {'apply' if len(given) > 1 else 'applies'} only to "
                                    "HF models, and none is named here")
    if hf and args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise MeasurementInputError(f"--device {args.device}: torch sees no CUDA device on this machine")


def _prepare(args):
    """Everything checked before any file is written: models, prompts, options, output paths."""
    _check_switches(args)
    gammas = tuple(sorted(args.gamma))
    run_gammas = tuple(sorted(args.run_gamma)) if args.run else ()
    target_csv = resolve_csv_target(args.csv, default_name="acceptance.csv")
    if args.plot is None:
        args.plot = importlib.util.find_spec("matplotlib") is not None
    if args.plot:
        from specgauge.plotting import pyplot

        pyplot()
    loader = Loader(Sampling(args.temperature, args.top_p, args.top_k), args.device, args.dtype, args.batch_size,
                    args.threads)
    target = load_model(args.target, "target", loader)
    drafts = [load_model(spec, "draft", loader) for spec in args.draft]
    _check_torch_options(args, [target, *drafts])
    labels = [d.name for d in drafts]
    if len(set(labels)) != len(labels):
        raise MeasurementInputError(f"two drafts share a label ({', '.join(labels)}): name them LABEL=SPEC")
    tokenizer = getattr(target, "path", None)
    prompts = _requests(args, tokenizer)
    _check_vocabularies(target, drafts, prompts)
    _check_size(len(prompts) * args.samples, drafts, args)
    requests = [r for r in prompts for _ in range(args.samples)]
    plan = None
    if args.plan:
        from specgauge.reports.planning.ranking import PlanSetting, configs, parse_plan_drafts

        if args.plan_target is None:
            raise MeasurementInputError("--plan needs --plan-target, the target's simulator profile (e.g. llama-3.1-8b)")
        plan = PlanSetting(args.plan_gpu, args.plan_target, parse_plan_drafts(args.plan_draft, labels),
                           tuple(sorted(args.plan_batch_size)), gammas, args.plan_requests,
                           args.plan_prompt_len, args.plan_output_len, args.seed)
        announce([config for _, config in configs(plan, None)], "acceptance", flag="--plan-requests")
    return target_csv, target, drafts, requests, gammas, run_gammas, plan


def _bar(total: int, desc: str, off: bool, unit: str = "req"):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=off, leave=False)


def _run_context(args, requests) -> dict:
    """What a run's result depends on: a journal row is reused only when all of it is the same."""
    import hashlib

    ids = hashlib.sha256(b"".join(np.asarray(r.prompt, np.int64).tobytes() + b"|" for r in requests)).hexdigest()
    return {"command": "acceptance --run", "target": args.target, "drafts": list(args.draft), "prompts": ids,
            "max_new_tokens": args.max_new_tokens, "seed": args.seed, "dtype": args.dtype,
            "sampling": [args.temperature, args.top_p, args.top_k]}


def _run(args, target, drafts, requests, run_gammas, target_csv) -> dict:
    """Each (draft, γ) run through the reference rule, journalled beside the CSV as it finishes,
    so that an interrupted ``--run`` resumes where it stopped (each run is seeded on its own)."""
    from specgauge.measurement.forcing import run_speculative
    from specgauge.sweeps.journal import Journal, item_key

    context = _run_context(args, requests)
    journal = Journal(target_csv.journal_path)
    done = journal.load()
    measured, resumed = {}, 0
    try:
        for index, (draft, gamma) in enumerate((d, g) for d in drafts for g in run_gammas):
            key = item_key(context, (draft.name, gamma))
            if key in done:
                measured[(draft.name, gamma)] = [np.asarray(r, np.int64) for r in done[key]["rounds"]]
                resumed += 1
                continue
            with _bar(len(requests) * args.max_new_tokens, f"run {draft.name} γ={gamma}", args.no_progress, "tok") as bar:
                rounds = run_speculative(target, draft, [r.prompt for r in requests], length=args.max_new_tokens,
                                         gamma=gamma, seed=args.seed, progress=lambda n: bar.update(n))
            journal.append(key, index, {"rounds": [np.asarray(r).tolist() for r in rounds]})
            measured[(draft.name, gamma)] = rounds
    finally:
        journal.close()
    if resumed:
        say(f"--run: {resumed} of {len(measured)} runs resumed from an interrupted run")
    return measured


def _say_comparison(summary: pd.DataFrame) -> None:
    run = summary[summary["measured_tokens_per_pass"].notna()] if "measured_tokens_per_pass" in summary else summary[:0]
    if not len(run):
        return
    say("\ntokens per pass: the teacher-forced law against the run through the reference rule (95 % intervals)")
    for r in run.itertuples():
        overlap = not (r.measured_ci_high < r.tokens_per_pass_ci_low or r.tokens_per_pass_ci_high < r.measured_ci_low)
        say(f"  {r.draft} γ={r.gamma}: law {r.tokens_per_pass:.3f} [{r.tokens_per_pass_ci_low:.3f}, "
            f"{r.tokens_per_pass_ci_high:.3f}]  measured {r.measured_tokens_per_pass:.3f} [{r.measured_ci_low:.3f}, "
            f"{r.measured_ci_high:.3f}] over {r.measured_rounds} rounds: "
            + ("intervals overlap" if overlap else "intervals apart: acceptance here depends on the path the run takes"))


def execute(args) -> int:
    try:
        target_csv, target, drafts, requests, gammas, run_gammas, plan = _prepare(args)
    except SpecgaugeError as exc:  # a probe file, a profile, an output folder: all inputs, all exit 2
        raise MeasurementInputError(str(exc)) from None
    from specgauge.sweeps.journal import sweep_lock

    with sweep_lock(target_csv, "specgauge acceptance"):  # one run at a time on a CSV and its --run journal
        return _measure_and_write(args, target_csv, target, drafts, requests, gammas, run_gammas, plan)


def _measure_and_write(args, target_csv, target, drafts, requests, gammas, run_gammas, plan) -> int:
    import json

    from specgauge.measurement.forcing import SUMMARY_COLUMNS, measure, summary_rows, trace_records

    started = time.perf_counter()
    with _bar(len(requests), "teacher forcing", args.no_progress) as bar:
        m = measure(target, drafts, requests, length=args.max_new_tokens, seed=args.seed, k=args.candidates,
                    batch=args.batch_size, progress=lambda n: bar.update(n))
    elapsed = time.perf_counter() - started
    tokens = sum(len(c) for c in m.continuations)
    say(f"teacher forcing: {len(requests)} requests, {tokens} positions, {len(drafts)} draft(s) in {elapsed:.1f} s "
        f"({tokens / max(elapsed, 1e-9):.0f} positions/s)")
    measured = _run(args, target, drafts, requests, run_gammas, target_csv) if args.run else None
    summary = pd.DataFrame(summary_rows(m, sorted(set(gammas) | set(run_gammas)), args.seed, args.candidates, measured),
                           columns=SUMMARY_COLUMNS)
    summary["measured_rounds"] = summary["measured_rounds"].astype("Int64")
    traces = target_csv.path.with_suffix(".jsonl")
    records = trace_records(m, args.seed, [r.origin for r in requests])
    write_bytes_atomic(traces, "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records).encode())
    metadata = {"command": "acceptance", "arguments": sys.argv[2:] if args.argv is None else args.argv,
                "seed": args.seed, "traces": traces.name,
                "sampling": {"temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k}}
    write_csv_atomic(summary, target_csv.path, metadata)
    target_csv.journal_path.unlink(missing_ok=True)  # the runs are in the CSV now
    say(f"wrote {traces} (replay: --acceptance {traces}:LABEL with LABEL one of {', '.join(d.label for d in m.drafts)})")
    say(f"wrote {target_csv.path}")
    if args.plot:
        from specgauge.reports.figures.measurement import plot_acceptance

        say(f"wrote {plot_acceptance(m, summary, target_csv.path.with_suffix('.png'))}")
    first = summary.drop_duplicates("draft")
    for r in first.itertuples():
        say(f"  {r.draft}: mean α {r.mean_alpha:.3f} [{r.mean_alpha_ci_low:.3f}, {r.mean_alpha_ci_high:.3f}] "
            f"over {r.requests} requests; per-rank {r.rank_acceptance}")
    _say_comparison(summary)
    if plan is not None:
        _plan(args, plan, target_csv, traces, summary, metadata)
    return 0


def _plan(args, plan, target_csv, traces: Path, summary: pd.DataFrame, metadata: dict) -> None:
    from specgauge.reports.planning.ranking import configs, decisions, ranking_lines, simulate_all

    items = configs(plan, traces)
    with _bar(len(items), "simulate", args.no_progress) as bar:
        frame = simulate_all(items, progress=lambda n: bar.update(n))
    alpha = dict(zip(summary["draft"], summary["mean_alpha"]))
    table = decisions(frame, alpha)
    rows_path, decision_path = target_csv.sibling("plan"), target_csv.sibling("decision")
    write_csv_atomic(frame, rows_path, {**metadata, "plan": {"gpu": plan.gpu, "target": plan.target,
                                                             "drafts": dict(plan.drafts)}})
    write_csv_atomic(table, decision_path, {**metadata, "source_csv": rows_path.name})
    say(f"wrote {rows_path}: {len(frame)} simulated configurations")
    say(f"wrote {decision_path}: {len(table)} decisions")
    say(f"\ndrafts ranked by predicted output-throughput speed-up on {plan.gpu}, target {plan.target}:")
    for line in ranking_lines(table):
        say("  " + line)


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, or a bad option already reported in one line
        return int(exc.code or 0)
    args.argv = argv
    with _quiet_loading(args.no_progress):
        return execute(args)


@contextlib.contextmanager
def _quiet_loading(quiet: bool):
    """With --no-progress, transformers' and huggingface_hub's own bars (loading weights,
    converting a GGUF) are off too; restored afterwards for a caller sharing the process."""
    if not quiet:
        yield
        return
    before = os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS")
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # read when huggingface_hub is imported
    switches = []
    for module, off, on in (("huggingface_hub.utils", "disable_progress_bars", "enable_progress_bars"),
                            ("transformers.utils.logging", "disable_progress_bar", "enable_progress_bar")):
        if module.split(".")[0] in sys.modules:  # already imported: switch it off now
            mod = importlib.import_module(module)
            getattr(mod, off)()
            switches.append(getattr(mod, on))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
        else:
            os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = before
        for on in switches:
            on()
