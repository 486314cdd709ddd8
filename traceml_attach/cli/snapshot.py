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
    non_negative_float,
    positive_float,
    rules_from,
)
from traceml_attach.cli.live import print_progress
from traceml_attach.errors import EXIT_TARGET_EXITED
from traceml_attach.policy import FEW_BOUNDARIES, SNAPSHOT_MOST_S
from traceml_attach.runtime.session import run_session

DEFAULT_SECONDS = 10.0


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=int, action="append",
                        help="PID of the training process, or of its launcher (torchrun, accelerate, "
                        "deepspeed) to sample every rank; repeat to sample several ranks started otherwise")
    parser.add_argument("--seconds", type=positive_float, metavar="N",
                        help=f"how long to sample, exactly (default {DEFAULT_SECONDS:g}, and on up to --max-seconds "
                        "where the steps are too few in that to time)")
    parser.add_argument("--max-seconds", type=non_negative_float, default=SNAPSHOT_MOST_S, metavar="S",
                        help=f"without --seconds: where a rank's step time is still unknown after "
                        f"{DEFAULT_SECONDS:g} s with fewer than {FEW_BOUNDARIES} step boundaries seen (steps of a "
                        "second or more, or boundaries that mostly go unseen), sample on to S seconds in all, said "
                        f"on stderr and in the summary (default {SNAPSHOT_MOST_S:g}, the live view's window; 0: never)")
    add_rate_options(parser)
    parser.add_argument("--logs-dir", default="logs", metavar="DIR",
                        help="where run folders are written (default ./logs)")
    parser.add_argument("--run-name", metavar="NAME",
                        help="name of the run folder (default: <script>-<pid>-<time>)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    add_recording_option(parser)
    add_rules_option(parser)
    add_listen_options(parser)


def lengths(args: argparse.Namespace) -> tuple[float, float | None]:
    """How long to sample, and the most to sample on to where the analysis advises it (None: the
    length is the user's own, or --max-seconds allows no more: diagnose/window.py)."""
    if args.seconds is not None:
        return args.seconds, None
    return DEFAULT_SECONDS, args.max_seconds if args.max_seconds > DEFAULT_SECONDS else None


def run(args: argparse.Namespace) -> int:
    check_targets(args, f"traceml {'snapshot'}")
    rules = rules_from(args)
    seconds, most = lengths(args)
    progress = None if args.quiet else print_progress(seconds)
    result = run_session(args, rules, seconds, progress, 2.0, most_s=most)  # type: ignore[arg-type]
    print(result.text, end="")
    print(f"traceml: {result.where_line()}", file=sys.stderr)
    if result.code == EXIT_TARGET_EXITED:
        print("traceml: the target exited before the snapshot ended; the summary covers what was seen",
              file=sys.stderr)
    return result.code
