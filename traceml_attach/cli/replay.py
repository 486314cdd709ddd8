"""Re-diagnose a recorded frames.msgpack, deterministically, with the current rules.

Prints the text summary; with --write, also writes final_summary.json and .txt next to
the frames file (or into --out DIR).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from traceml_attach.cli.common import add_rules_option, frames_path, rules_from
from traceml_attach.errors import EXIT_BAD_FILE, EXIT_USAGE, CliError
from traceml_attach.ingest.segments import describe as describe_dropped
from traceml_attach.ingest.stream import Recording, RecordingError
from traceml_attach.output.render import render_text
from traceml_attach.output.report import write_summary
from traceml_attach.output.summary import build_summary
from traceml_attach.runtime.pipeline import replay_file
from traceml_attach.steps.classify import Rules


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FRAMES",
                        help="frames.msgpack (with the newer segments a rotated recording has beside it), "
                        "the run folder that holds it, or one segment frames.NNNNNN.msgpack alone")
    parser.add_argument("--write", action="store_true",
                        help="also write final_summary.json/.txt (next to FRAMES unless --out)")
    parser.add_argument("--out", type=Path, metavar="DIR", help="folder for --write")
    parser.add_argument("--tui", action="store_true",
                        help="open the terminal UI as it stood at the end of the recording (its last 30 s); "
                        "with --write, s and q write the summary")
    add_rules_option(parser)


def run(args: argparse.Namespace) -> int:
    rules = rules_from(args)
    path = frames_path(args.file)
    try:
        pipeline, problem = replay_file(path, rules, progress=progress)
        rec = pipeline.rec
    except RecordingError as exc:
        raise CliError(str(exc), EXIT_BAD_FILE) from exc
    if problem:
        print(f"traceml: {problem}", file=sys.stderr)
    if rec.dropped is not None:
        print(f"traceml: {describe_dropped(rec.dropped)}", file=sys.stderr)
    if not rec.hello:
        raise CliError(f"{path} holds no traceml-attach recording", EXIT_BAD_FILE)
    if args.tui:
        return _tui(rec, rules, path, args)
    summary = build_summary(rec, pipeline.window_analysis(), run_name(path))
    print(render_text(summary), end="")
    if args.write:
        out = args.out or path.parent
        try:
            out.mkdir(parents=True, exist_ok=True)
            write_summary(out, summary)
        except OSError as exc:
            raise write_failed(out, exc) from exc
    return EXIT_BAD_FILE if problem else 0


def _tui(rec: Recording, rules: Rules, path: Path, args: argparse.Namespace) -> int:
    from traceml_attach.runtime.recordedfeed import RecordedFeed
    from traceml_attach.tui.app import make_app, run_app  # Textual loads only when it is used

    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise CliError("--tui needs a terminal; leave it out for the text summary", EXIT_USAGE)
    out = (args.out or path.parent) if args.write else None
    feed = RecordedFeed(rec, rules, run_name(path), out)
    run_app(make_app(feed, mode="REPLAY"))
    feed.wait()
    if feed.write_error is not None and out is not None:
        raise write_failed(out, feed.write_error)
    if out is not None:
        print(f"traceml: summary written to {out / 'final_summary.json'}", file=sys.stderr)
    return 0


def write_failed(out: Path, exc: OSError) -> CliError:
    """A summary that could not be written: one line, what to do, a non-zero exit."""
    return CliError(f"could not write the summary into {out}: {exc.strerror or exc}; "
                    "give a folder you can write to with --out DIR", EXIT_USAGE)


def progress(seconds: float) -> None:
    """A long replay's line every few seconds: how much of the session has been read."""
    print(f"traceml: … {seconds:,.0f} s of data replayed", file=sys.stderr, flush=True)


def run_name(path: Path) -> str:
    """A run folder's name for its frames.msgpack, else the file's own stem."""
    return path.parent.name if path.name == "frames.msgpack" else path.stem
