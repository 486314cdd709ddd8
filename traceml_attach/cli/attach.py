"""Attach to a live PyTorch training process and diagnose it until you stop.

Samples the process's Python stacks with py-spy (non-blocking: the job is never paused)
plus psutil and NVML readings, and shows the diagnosis live in a terminal UI (keys: q quit
and write the summary, s write it now, p pause, tab/arrows pick the rank, f the phase, ?
help). Without a terminal, or with --no-tui, a compact text line is printed instead.
Stop with q, Ctrl-C, SIGTERM, --duration, or the job's exit; the summary is then written to
LOGS_DIR/RUN_NAME/final_summary.json and final_summary.txt, next to the recorded frames
(frames.msgpack).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

from traceml_attach.cli.common import (
    add_listen_options,
    add_rate_options,
    add_recording_option,
    add_rules_option,
    check_targets,
    host_port,
    positive_float,
    rules_from,
)
from traceml_attach.cli.live import print_live
from traceml_attach.errors import EXIT_INTERNAL, CliError
from traceml_attach.runtime.session import Session, SessionResult, run_session, stop_on_signals
from traceml_attach.runtime.shutdown import Watchdog, release_terminal, terminal_gone

LIVE_EVERY_S = 3.0


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=int, action="append",
                        help="PID of the training process, or of its launcher (torchrun, accelerate, "
                        "deepspeed) to sample every rank; repeat to sample several ranks started otherwise")
    add_rate_options(parser)
    parser.add_argument("--duration", type=positive_float, metavar="S",
                        help="stop after S seconds (default: until q, Ctrl-C or the job exits)")
    parser.add_argument("--no-tui", action="store_true",
                        help="print a compact text line every few seconds instead of the terminal UI "
                        "(the default when stdin or stdout is not a terminal)")
    parser.add_argument("--logs-dir", default="logs", metavar="DIR",
                        help="where run folders are written (default ./logs)")
    parser.add_argument("--run-name", metavar="NAME",
                        help="name of the run folder (default: <script>-<pid>-<time>)")
    parser.add_argument("--prometheus", type=host_port, metavar="HOST:PORT",
                        help="serve the live diagnosis as Prometheus metrics at http://HOST:PORT/metrics, updated "
                        "every tick: step and phase times, the diagnosis, straggler scores, memory, GPU (docs/"
                        "prometheus.md). HOST defaults to 127.0.0.1; give 0.0.0.0 for a Prometheus on another machine")
    add_recording_option(parser)
    add_rules_option(parser)
    add_listen_options(parser)


def use_tui(args: argparse.Namespace) -> bool:
    return (not args.no_tui and sys.stdin.isatty() and sys.stdout.isatty()
            and os.environ.get("TERM", "dumb") != "dumb")


def run_tui(args: argparse.Namespace, session: Session) -> int:
    """The session behind the TUI. However it ends (q, a signal, a closed terminal, the duration,
    the job's end, a crash in the UI), the summary is written and the process is gone within
    seconds: a watchdog ends it if Textual cannot let go of the terminal."""
    from traceml_attach.runtime.livefeed import LiveFeed  # Textual loads only when it is used
    from traceml_attach.tui.app import make_app, run_app

    stop = threading.Event()
    feed = LiveFeed(session, stop, args.duration)
    app = make_app(feed)

    def exit_code() -> int:
        if app.crash is None and feed.result is not None:
            return feed.result.code
        return feed.error.code if app.crash is None and isinstance(feed.error, CliError) else EXIT_INTERNAL

    def finished() -> bool:
        return feed.result is not None or feed.error is not None

    with stop_on_signals(stop), Watchdog(stop, finished, exit_code):
        try:
            run_app(app)
        finally:
            feed.stop()
            if terminal_gone():
                release_terminal()   # gone without a SIGHUP we saw: nothing may block on it now
            print("traceml: detaching and writing the summary…", file=sys.stderr, flush=True)
        try:
            result = feed.wait()
        except CliError:
            if app.crash is None:
                raise
        else:
            report(result, "the job exited; " if session.end_reason == "target_exited" else "")
        if app.crash is not None:   # reported last, after the summary (written if the session had begun)
            raise CliError(f"internal error in the TUI: {type(app.crash).__name__}: {app.crash} "
                           "(please report it; set TRACEML_DEBUG=1 for the traceback)", EXIT_INTERNAL)
        return result.code


def report(result: SessionResult, note: str = "") -> None:
    print(result.text, end="")
    print(f"traceml: {note}{result.where_line()}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    check_targets(args, f"traceml {'attach'}")
    rules = rules_from(args)
    if use_tui(args):
        return run_tui(args, Session(args, rules))
    result = run_session(args, rules, args.duration, print_live, LIVE_EVERY_S)
    print()
    report(result)
    return result.code
