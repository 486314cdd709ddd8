"""Sample a live PyTorch training process for N seconds, then print and write the summary.

No TUI and no restart: the job keeps running untouched. The summary goes to
LOGS_DIR/RUN_NAME/final_summary.json and final_summary.txt.
"""

from __future__ import annotations

import argparse
import sys

from traceml_attach.cli.common import (
    add_listen_options,
    add_rate_options,
    add_recording_option,
    add_rules_option,
    check_targets,
    positive_float,
    rules_from,
)
from traceml_attach.cli.live import print_progress
from traceml_attach.errors import EXIT_TARGET_EXITED
from traceml_attach.runtime.session import run_session


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=int, action="append",
                        help="PID of the training process, or of its launcher (torchrun, accelerate, "
                        "deepspeed) to sample every rank; repeat to sample several ranks started otherwise")
    parser.add_argument("--seconds", type=positive_float, default=10.0, metavar="N",
                        help="how long to sample (default 10)")
    add_rate_options(parser)
    parser.add_argument("--logs-dir", default="logs", metavar="DIR",
                        help="where run folders are written (default ./logs)")
    parser.add_argument("--run-name", metavar="NAME",
                        help="name of the run folder (default: <script>-<pid>-<time>)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    add_recording_option(parser)
    add_rules_option(parser)
    add_listen_options(parser)


def run(args: argparse.Namespace) -> int:
    check_targets(args, f"traceml {'snapshot'}")
    rules = rules_from(args)
    tick = None if args.quiet else print_progress(args.seconds)
    result = run_session(args, rules, args.seconds, tick, 2.0)  # type: ignore[arg-type]
    print(result.text, end="")
    print(f"traceml: {result.where_line()}", file=sys.stderr)
    if result.code == EXIT_TARGET_EXITED:
        print("traceml: the target exited before the snapshot ended; the summary covers what was seen",
              file=sys.stderr)
    return result.code
