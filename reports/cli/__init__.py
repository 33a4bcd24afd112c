"""The ``specgauge`` command: a small table of subcommands, each a module of this package with ``main(argv)``.

The table names each command's module without importing it (pip's ``commands/`` shape),
so ``specgauge --help`` and ``specgauge plan`` import neither torch nor the other
commands. Beside the command modules: ``options`` (the simulation options, generated from
``SimulationConfig``) and ``console`` (printing that survives a closed pipe).
"""

from __future__ import annotations

import importlib
import os
import signal
import sys

from specgauge.errors import SpecgaugeError
from specgauge.inputs import one_line, parser_errors_in_one_line

#: exit status of an error specgauge did not anticipate (a bug): sysexits' EX_SOFTWARE
INTERNAL_ERROR = 70
#: set to 1 to see the traceback of such an error
TRACEBACK_ENV = "SPECGAUGE_TRACEBACK"

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("specgauge.reports.cli.plan", "sweep the simulator and recommend a speculation setting"),
    "simulate": ("specgauge.reports.cli.simulate", "simulate one serving configuration"),
    "law": ("specgauge.reports.cli.law", "tokens-per-pass and speed-up curves against acceptance"),
    "certify": ("specgauge.reports.cli.certify", "certify a decoder and write the certificate CSV"),
    "calibrate": ("specgauge.reports.cli.calibrate", "fit the step-time model to measurements, write a profile"),
    "validate": ("specgauge.reports.cli.validate", "the planner against published measurements (and yours), in and out of sample"),
    "probe": ("specgauge.reports.cli.probe", "sample an OpenAI-compatible server into a resumable JSONL"),
    "compare": ("specgauge.reports.cli.compare", "certify a server's samples (on vs off, logprobs, local model)"),
    "acceptance": ("specgauge.reports.cli.acceptance", "measure each draft's acceptance on your prompts by teacher forcing"),
}


def _usage() -> str:
    lines = ["usage: specgauge <command> [options]", "", "commands:"]
    lines += [f"  {name:<10} {text}" for name, (_, text) in SUBCOMMANDS.items()]
    lines += ["", "With no command, `specgauge` runs `specgauge plan` on its default scenario."]
    return "\n".join(lines)


def interruptible(terminate: bool = False) -> None:
    """Make Ctrl-C (SIGINT) end every command with status 130, even where the parent left it ignored.

    A job started with ``&`` from a non-interactive shell inherits SIGINT ignored; Python then
    never installs its handler, and ``kill -INT`` does nothing to a run that may take hours.
    With ``terminate`` (the console script, owning its process), SIGTERM unwinds the same way
    (status 143), so a plain ``kill`` leaves no lock or temporary file behind.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if terminate and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminated)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is, so that its cleanup runs (locks, temporary
    files, a sized run's empty shard folder): the default action would leave them behind."""


def _terminated(signum, frame) -> None:
    raise Terminated()


def leave_now_if_threads_linger(status: int) -> None:
    """After an interrupt, exit at once if a thread would hold the process at exit.

    The command's own cleanup (journals, locks, temporary files) has run by then; what can
    remain is a worker pool's manager thread reading a result that a stopped worker never
    finished writing, which the interpreter would join forever.
    """
    import threading

    main_thread = threading.main_thread()
    if any(t.is_alive() and not t.daemon and t is not main_thread for t in threading.enumerate()):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(status)


def main(argv: list[str] | None = None) -> int:
    from_console = argv is None  # the console script; a caller passing argv keeps its own process
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    if argv and argv[0] == "--version":
        from importlib.metadata import version

        print(f"specgauge {version('specgauge')}")
        return 0
    command = argv.pop(0) if argv and not argv[0].startswith("-") else "plan"
    if command not in SUBCOMMANDS:
        print(f"specgauge: unknown command {command!r}; choose from {', '.join(SUBCOMMANDS)}", file=sys.stderr)
        return 2
    dashes = next((a for a in argv if a.startswith("--") and a.endswith("=--")), None)
    if dashes:  # argparse (3.11) turns --opt=-- into an empty list that skips the option's type and choices
        print(f"specgauge {command}: error: argument {dashes[:-3]}: expected a value, got '--'", file=sys.stderr)
        return 2
    interruptible(terminate=from_console)
    try:
        module = importlib.import_module(SUBCOMMANDS[command][0])
        with parser_errors_in_one_line():  # a bad option is one line and exit status 2
            return int(module.main(argv) or 0)
    except SpecgaugeError as exc:
        print(f"specgauge {command}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 1))
    except SystemExit as exc:  # argparse's: --help (0) or a usage error, already printed in one line (2)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except KeyboardInterrupt as exc:
        status = 128 + signal.SIGTERM if isinstance(exc, Terminated) else 130
        print(f"specgauge {command}: {'terminated' if status != 130 else 'interrupted'}", file=sys.stderr)
        if from_console:
            leave_now_if_threads_linger(status)
        return status
    except BrokenPipeError:  # the reader left before the command printed (e.g. `--help | head -1`)
        from .console import silence

        silence(sys.stdout)
        return 0
    except MemoryError as exc:
        print(f"specgauge {command}: error: out of memory ({one_line(exc)}); ask for less work", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - the last resort: a bug is one line, never a traceback
        if os.environ.get(TRACEBACK_ENV) == "1":
            raise
        print(f"specgauge {command}: internal error: {one_line(exc)} (a bug in specgauge; "
              f"{TRACEBACK_ENV}=1 shows the traceback)", file=sys.stderr)
        return INTERNAL_ERROR

