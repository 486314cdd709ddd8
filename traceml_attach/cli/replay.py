"""Re-diagnose a recorded frames.msgpack, deterministically, with the current rules.

Prints the text summary; with --write, also writes final_summary.json and .txt next to
the frames file (or into --out DIR).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from traceml_attach.analysis import analyze
from traceml_attach.cli.common import add_rules_option, rules_from
from traceml_attach.cli.errors import EXIT_BAD_FILE, CliError
from traceml_attach.cli.session import write_summary
from traceml_attach.render import render_text
from traceml_attach.stream import RecordingError, read_recording
from traceml_attach.summary import build_summary


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FRAMES",
                        help="frames.msgpack, or the run folder that holds it")
    parser.add_argument("--write", action="store_true",
                        help="also write final_summary.json/.txt (next to FRAMES unless --out)")
    parser.add_argument("--out", type=Path, metavar="DIR", help="folder for --write")
    add_rules_option(parser)


def run(args: argparse.Namespace) -> int:
    rules = rules_from(args)
    path: Path = args.file / "frames.msgpack" if args.file.is_dir() else args.file
    if not path.exists():
        raise CliError(f"{path} does not exist: give a frames.msgpack or its run folder", EXIT_BAD_FILE)
    try:
        rec, problem = read_recording(path)
    except RecordingError as exc:
        raise CliError(str(exc), EXIT_BAD_FILE) from exc
    if problem:
        print(f"traceml: {problem}", file=sys.stderr)
    if not rec.hello:
        raise CliError(f"{path} holds no traceml-attach recording", EXIT_BAD_FILE)
    summary = build_summary(rec, analyze(rec, rules), path.parent.name)
    if args.write:
        out = args.out or path.parent
        out.mkdir(parents=True, exist_ok=True)
        text = write_summary(out, summary)
    else:
        text = render_text(summary)
    print(text, end="")
    return EXIT_BAD_FILE if problem else 0
