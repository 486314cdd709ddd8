"""Compare two runs: `traceml compare OLD NEW`, each a final_summary.json or its run folder.

Diagnosis first, then the median rank's step and each phase (ms and share of the step), the
worst rank, skew and WAIT share, memory, and the hot frames that appeared or went in the phase
that slowed. A change within the two windows' noise (from each window's per-step spread) is
"no change". Exit codes: 0, 7 for a missing or corrupt file, 9 with --fail-on-regression PCT
when the step rose by more than PCT% beyond the noise.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from traceml_attach.cli.view import read_summary_doc
from traceml_attach.diagnose.compare import compare
from traceml_attach.errors import EXIT_BAD_FILE, EXIT_OK, EXIT_REGRESSION, CliError
from traceml_attach.output.compare import compare_json, render_compare
from traceml_attach.output.summary import SCHEMA_VERSION, SchemaError, Summary, from_json


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("old", type=Path, metavar="OLD", help="the earlier run: final_summary.json or its run folder")
    parser.add_argument("new", type=Path, metavar="NEW", help="the later run, the same way")
    parser.add_argument("--json", action="store_true",
                        help="print the comparison as JSON (its fields: docs/compare-schema.md)")
    parser.add_argument("--fail-on-regression", type=float, metavar="PCT",
                        help="exit 9 when the median step rose by more than PCT%% of the old one beyond the "
                             "noise (for CI gates)")


def load(path: Path) -> tuple[Summary, str | None]:
    """A summary to compare, and a warning when it is of another schema version (read as this
    one where its fields allow)."""
    doc, path = read_summary_doc(path)
    version = doc.get("schema_version")
    warning = None
    if version != SCHEMA_VERSION:
        warning = f"{path} is schema version {version}, this traceml-attach writes {SCHEMA_VERSION}: compared as is"
        doc = {**doc, "schema_version": SCHEMA_VERSION}
    try:
        return from_json(doc), warning
    except SchemaError as exc:
        raise CliError(f"{path} cannot be compared ({exc}): re-create it with `traceml replay` on the run's "
                       "frames.msgpack", EXIT_BAD_FILE) from exc


def run(args: argparse.Namespace) -> int:
    (old, w_old), (new, w_new) = load(args.old), load(args.new)
    comparison = compare(old, new, tuple(w for w in (w_old, w_new) if w))
    for warning in comparison.warnings:
        print(f"traceml: warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps(compare_json(comparison), indent=2))
    else:
        print(render_compare(comparison), end="")
    if args.fail_on_regression is not None and comparison.regressed_beyond(args.fail_on_regression):
        step = comparison.step
        print(f"traceml: the step rose from {step.old:.1f} to {step.new:.1f} ms, more than "
              f"{args.fail_on_regression:g}% beyond the noise (±{comparison.band_ms:.1f} ms)", file=sys.stderr)
        return EXIT_REGRESSION
    return EXIT_OK
