"""Writing the summary files: final_summary.json and final_summary.txt, side by side."""

from __future__ import annotations

import contextlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from traceml_attach.output.render import render_text
from traceml_attach.output.summary import Summary, to_json


def write_summary(directory: Path, summary: Summary) -> str:
    """Write both files (the JSON atomically) and return the text; OSError when they cannot be."""
    text = render_text(summary)
    tmp = directory / "final_summary.json.tmp"
    try:
        tmp.write_text(json.dumps(to_json(summary), indent=2) + "\n", encoding="utf-8")
        tmp.replace(directory / "final_summary.json")
        (directory / "final_summary.txt").write_text(text, encoding="utf-8")
    except OSError:
        with contextlib.suppress(OSError):   # a half-written file on a full disk: leave nothing behind
            tmp.unlink(missing_ok=True)
        raise
    return text


@dataclass(frozen=True)
class Written:
    """Where a session's summary went: its own run folder, or elsewhere after that failed."""

    text: str
    folder: Path | None        # where final_summary.json is; None when it could be written nowhere
    problem: str | None        # why the run folder could not take it (None: it did)


def fallback_folder(run_dir: Path) -> Path:
    """Where a summary goes when its run folder cannot take it: the system's temporary folder."""
    return Path(tempfile.gettempdir()) / f"traceml-{run_dir.name}"


def write_summary_somewhere(run_dir: Path, summary: Summary) -> Written:
    """The summary in ``run_dir``; when that fails (a full disk, a folder made read-only), in
    ``fallback_folder(run_dir)``; when that fails too, nowhere (the caller prints the text).
    Never raises OSError."""
    try:
        return Written(write_summary(run_dir, summary), run_dir, None)
    except OSError as exc:
        problem = f"{exc.strerror or exc}"
    other = fallback_folder(run_dir)
    try:
        other.mkdir(parents=True, exist_ok=True)
        return Written(write_summary(other, summary), other, problem)
    except OSError:
        return Written(render_text(summary), None, problem)
