"""Writing the summary files: final_summary.json and final_summary.txt, side by side."""

from __future__ import annotations

import json
from pathlib import Path

from traceml_attach.output.render import render_text
from traceml_attach.output.summary import Summary, to_json


def write_summary(directory: Path, summary: Summary) -> str:
    """Write both files (the JSON atomically) and return the text."""
    text = render_text(summary)
    tmp = directory / "final_summary.json.tmp"
    tmp.write_text(json.dumps(to_json(summary), indent=2) + "\n", encoding="utf-8")
    tmp.replace(directory / "final_summary.json")
    (directory / "final_summary.txt").write_text(text, encoding="utf-8")
    return text
