"""Print a saved final_summary.json (or a run folder) as text; with --html, write the run as a
self-contained HTML report.

The report opens in any browser with no network (Apache ECharts is inlined): the diagnosis with
its why and next step, step time over the session per rank, the phases of each rank's step as
stacked bars, memory per rank over time and the hot frames of each phase. The series over time
are rebuilt from the run's frames.msgpack (the session's rollups); without it the report has the
summary's parts only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from traceml_attach.cli.common import add_rules_option, rules_from
from traceml_attach.cli.replay import progress, run_name
from traceml_attach.errors import EXIT_BAD_FILE, EXIT_USAGE, CliError
from traceml_attach.ingest.stream import RecordingError
from traceml_attach.output.html import ROLLUP_S, html_report
from traceml_attach.output.render import render_text
from traceml_attach.output.summary import SchemaError, Summary, build_summary, from_json
from traceml_attach.runtime.pipeline import replay_file
from traceml_attach.steps.classify import Rules


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="RUN",
                        help="final_summary.json, or the run folder that holds it; with --html also its "
                        "frames.msgpack")
    parser.add_argument("--html", type=Path, metavar="OUT",
                        help="write a self-contained HTML report here (about 1.2 MB; opens with no network); the "
                        "series over time need the run's frames.msgpack beside the summary")
    add_rules_option(parser)


def load_summary(path: Path) -> Summary:
    doc, path = read_summary_doc(path)
    try:
        return from_json(doc)
    except SchemaError as exc:
        raise CliError(f"{path} cannot be read ({exc}): re-create it with `traceml replay` on the run's "
                       "frames.msgpack", EXIT_BAD_FILE) from exc


def read_summary_doc(path: Path) -> tuple[dict, Path]:
    """The JSON document of a final_summary.json (or of the one in a run folder), and its path;
    CliError (exit 7) when it is missing, unreadable or not a summary."""
    if path.is_dir():
        path = path / "final_summary.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise CliError(f"{path} does not exist: give a final_summary.json or its run folder",
                       EXIT_BAD_FILE) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {path}: {exc}", EXIT_BAD_FILE) from exc
    except json.JSONDecodeError as exc:
        raise CliError(f"{path} is not valid JSON (line {exc.lineno}): the file is corrupt; "
                       "re-create it with `traceml replay` on the run's frames.msgpack", EXIT_BAD_FILE) from exc
    if not isinstance(data, dict) or "schema_version" not in data:
        raise CliError(f"{path} is not a traceml-attach summary (it has no schema_version)", EXIT_BAD_FILE)
    return data, path


def run(args: argparse.Namespace) -> int:
    if args.html is not None:
        return write_html(args.file, args.html, rules_from(args))
    print(render_text(load_summary(args.file)), end="")
    return 0


def write_html(given: Path, out: Path, rules: Rules) -> int:
    """The HTML report of the run ``given`` (a run folder, its final_summary.json or its
    frames.msgpack): the saved summary, and the rollups replayed from the frames."""
    folder = given if given.is_dir() else given.parent
    frames = given if given.suffix == ".msgpack" else folder / "frames.msgpack"
    saved = folder / "final_summary.json" if given.is_dir() or given.suffix == ".msgpack" else given
    if not frames.exists() and not saved.exists():
        raise CliError(f"{given} has neither a final_summary.json nor a frames.msgpack: give a run folder",
                       EXIT_BAD_FILE)
    summary = load_summary(saved) if saved.exists() else None
    history, note, problem = None, None, None
    if frames.exists():
        print(f"traceml: reading {frames} ({frames.stat().st_size / 1e6:.1f} MB) for the series over time…",
              file=sys.stderr, flush=True)
        try:
            pipeline, problem = replay_file(frames, rules, ROLLUP_S, progress)
        except RecordingError as exc:
            pipeline, problem = None, str(exc)
        if problem:
            print(f"traceml: {problem}; the report shows what was read before it", file=sys.stderr)
        if pipeline is not None and pipeline.rec.hello:
            history = pipeline.history
            if summary is None:
                summary = build_summary(pipeline.rec, pipeline.window_analysis(), run_name(frames))
        else:
            note = f"{frames.name} could not be read ({problem or 'no traceml-attach recording'}): no series over time"
    else:
        note = f"{frames.name} is not beside the summary: the step time and memory over the session need it"
    if summary is None:
        raise CliError(f"{frames} holds no traceml-attach recording, and there is no final_summary.json beside it",
                       EXIT_BAD_FILE)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(html_report(summary, history, note), encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot write {out}: {exc.strerror or exc}", EXIT_USAGE) from exc
    ranks = len(summary.report.rank_ids())
    print(f"traceml: wrote {out} ({out.stat().st_size / 1e6:.1f} MB, {ranks} rank{'s' if ranks != 1 else ''}); "
          "open it in a browser", file=sys.stderr)
    return EXIT_BAD_FILE if problem else 0
