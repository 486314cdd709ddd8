"""Print a saved final_summary.json (or a run folder) as text."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from traceml_attach.cli.errors import EXIT_BAD_FILE, CliError
from traceml_attach.output.render import render_text
from traceml_attach.output.summary import SchemaError, Summary, from_json


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE",
                        help="final_summary.json, or the run folder that holds it")


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
    print(render_text(load_summary(args.file)), end="")
    return 0
