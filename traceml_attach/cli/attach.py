"""Attach to a live PyTorch training process and diagnose it until you stop.

Samples the process's Python stacks with py-spy (non-blocking: the job is never
paused) plus psutil process stats. Stop with Ctrl-C (or SIGTERM, --duration, or the
job's exit); the summary is then written to LOGS_DIR/RUN_NAME/final_summary.json and
final_summary.txt, next to the recorded frames (frames.msgpack).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from traceml_attach.cli.common import add_rules_option, positive_float, rate, rules_from
from traceml_attach.cli.live import print_live
from traceml_attach.cli.session import run_session

LIVE_EVERY_S = 3.0


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=int, required=True, action="append",
                        help="PID of the training process, or of its launcher (torchrun, accelerate, "
                        "deepspeed) to sample every rank; repeat to sample several ranks started otherwise")
    parser.add_argument("--rate", type=rate, default=100, metavar="HZ",
                        help="stack samples per second per process (default 100; the attacher then uses "
                        "about 8%% of one core per process)")
    parser.add_argument("--duration", type=positive_float, metavar="S",
                        help="stop after S seconds (default: until Ctrl-C or the job exits)")
    parser.add_argument("--no-tui", action="store_true",
                        help="print a compact text line every few seconds (this version has no TUI yet: "
                        "the text view is always used)")
    parser.add_argument("--logs-dir", default="logs", metavar="DIR",
                        help="where run folders are written (default ./logs)")
    parser.add_argument("--run-name", metavar="NAME",
                        help="name of the run folder (default: <script>-<pid>-<time>)")
    add_rules_option(parser)


def run(args: argparse.Namespace) -> int:
    rules = rules_from(args)
    # The Textual TUI is not part of this version: the text view is used everywhere.
    result = run_session(args, rules, args.duration, print_live, LIVE_EVERY_S)
    print()
    print(result.text, end="")
    print(f"traceml: summary written to {Path(result.run_dir) / 'final_summary.json'}", file=sys.stderr)
    return result.code
