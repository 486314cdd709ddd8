"""Export a recording: `traceml export RUN --perfetto OUT.json`, RUN a frames.msgpack or its run
folder. The trace (Chrome JSON, which ui.perfetto.dev opens) has a process per rank with a track
of steps, a track of phases (the wait label and the hot frame as arguments), counters for RSS,
GPU memory and SM utilization, and each 30 s chunk's diagnosis as an instant event. --from and
--to cut a range of a long recording (seconds from its first span).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from traceml_attach.cli.common import add_rules_option, frames_path, rules_from
from traceml_attach.diagnose.analysis import analyze_chunks
from traceml_attach.errors import EXIT_BAD_FILE, EXIT_USAGE, CliError
from traceml_attach.ingest.segments import describe as describe_dropped
from traceml_attach.ingest.stream import RecordingError, read_recording
from traceml_attach.output.perfetto import CHUNK_S, perfetto_trace

_NS = 1_000_000_000


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="RUN", help="frames.msgpack, or the run folder that holds it")
    parser.add_argument("--perfetto", type=Path, metavar="OUT", required=True,
                        help="write a Chrome JSON trace here (open it in ui.perfetto.dev)")
    parser.add_argument("--from", dest="start_s", type=float, metavar="S", default=0.0,
                        help="start S seconds after the recording's first span (default 0)")
    parser.add_argument("--to", dest="end_s", type=float, metavar="S",
                        help="end S seconds after the recording's first span (default: its end)")
    add_rules_option(parser)


def run(args: argparse.Namespace) -> int:
    rules = rules_from(args)
    path = frames_path(args.file)
    try:
        rec, problem = read_recording(path)
    except RecordingError as exc:
        raise CliError(str(exc), EXIT_BAD_FILE) from exc
    span_range = rec.time_range()
    if not rec.hello or span_range is None:
        raise CliError(f"{problem}: nothing to export" if problem else f"{path} holds no sampled spans to export",
                       EXIT_BAD_FILE)
    if problem:
        print(f"traceml: {problem}; exporting what was read before it", file=sys.stderr)
    if rec.dropped is not None:
        print(f"traceml: {describe_dropped(rec.dropped)}", file=sys.stderr)
    start = span_range[0] + int(args.start_s * _NS)
    end = span_range[1] if args.end_s is None else min(span_range[1], span_range[0] + int(args.end_s * _NS))
    if end <= start:
        raise CliError(f"--from {args.start_s:g} s is not before the end ({(end - span_range[0]) / _NS:.1f} s "
                       "into the recording)", EXIT_USAGE)
    trace = perfetto_trace(rec, analyze_chunks(rec, rules, start, end, CHUNK_S), start, end)
    try:
        args.perfetto.parent.mkdir(parents=True, exist_ok=True)
        with args.perfetto.open("w", encoding="utf-8") as out:
            json.dump(trace, out, separators=(",", ":"))
    except OSError as exc:
        raise CliError(f"cannot write {args.perfetto}: {exc.strerror or exc}", EXIT_USAGE) from exc
    size = args.perfetto.stat().st_size
    ranks = len({e["pid"] for e in trace["traceEvents"] if e.get("ph") == "X"})
    print(f"traceml: wrote {args.perfetto} ({size / 1e6:.1f} MB, {ranks} ranks, {(end - start) / _NS:.0f} s); "
          "open it in https://ui.perfetto.dev", file=sys.stderr)
    return EXIT_BAD_FILE if problem else 0
