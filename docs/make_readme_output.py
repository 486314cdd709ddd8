"""Regenerate the README's example output from a real run, so that it cannot go stale.

Starts ``examples/input_bound.py``, takes a 10-s ``traceml snapshot`` of it, and puts the run's
``final_summary.txt`` between the README's ``<!-- example-output:start -->`` and
``<!-- example-output:end -->`` markers (the repository's path made relative; long sections cut to
their first lines, with a ``...`` where lines were left out). tests/test_docs.py checks that every
``examples/<file>.py:<line>`` in it still names a line of that file.

    python docs/make_readme_output.py [--seconds 10] [--wait 15] [--dry-run]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
START = "<!-- example-output:start -->"
END = "<!-- example-output:end -->"
MAX_LINES = 50        # the block's budget in the README (the README stays under 300 lines)
SECTION_LINES = 14    # a section longer than this keeps its first lines and a "..."

sys.path.insert(0, str(ROOT / "examples"))
from launch import start_example, stop_example  # noqa: E402


def snapshot(seconds: float, wait: float) -> tuple[str, str]:
    """(the command as a user types it, the run's final_summary.txt)."""
    job = start_example("input_bound")
    try:
        time.sleep(wait)   # past the job's memory warm-up (its first 20 s), so memory gets a verdict
        with tempfile.TemporaryDirectory() as logs:
            cmd = [sys.executable, "-m", "traceml_attach", "snapshot", "--pid", str(job.pid),
                   "--seconds", f"{seconds:g}", "--logs-dir", logs, "--run-name", "readme", "--quiet"]
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=seconds + 120)
            if done.returncode != 0:
                raise SystemExit(f"traceml snapshot exited {done.returncode}: {done.stderr.strip()[-500:]}")
            text = (Path(logs) / "readme" / "final_summary.txt").read_text()
    finally:
        stop_example(job)
    return f"traceml snapshot --pid PID --seconds {seconds:g}", text


def trim(text: str) -> str:
    """The summary with the repository's path made relative (the interpreter's: python), trailing
    blanks gone and each long section (a block of lines between blank lines) cut to its first
    SECTION_LINES lines."""
    text = text.replace(f"{ROOT}/", "").replace(str(ROOT), ".").replace(f"{sys.executable} ", "python ")
    out: list[str] = []
    for block in re.split(r"\n\s*\n", text.strip("\n")):
        lines = [line.rstrip() for line in block.splitlines()]
        if len(lines) > SECTION_LINES:
            lines = [*lines[:SECTION_LINES - 1], "  ..."]
        out += [*lines, ""]
    while out and not out[-1]:
        out.pop()
    if len(out) > MAX_LINES:
        out = [*out[:MAX_LINES - 1], "..."]
    return "\n".join(out)


def replace_block(readme: str, command: str, output: str) -> str:
    if START not in readme or END not in readme:
        raise SystemExit(f"README.md has no {START} ... {END} block")
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    cores, load = os.cpu_count(), os.getloadavg()[0]
    block = (f"{START}\n`{command}` on `python examples/input_bound.py`, on a {cores}-core machine "
             f"with a load average of {load:.1f} (written by `python docs/make_readme_output.py` "
             f"from a real run's `final_summary.txt`):\n\n"
             f"```\n{output}\n```\n{END}")
    return head + block + tail


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="how long the snapshot samples (default 10)")
    parser.add_argument("--wait", type=float, default=15.0,
                        help="seconds between the job's start and the snapshot (default 15)")
    parser.add_argument("--dry-run", action="store_true", help="print the block instead of writing README.md")
    args = parser.parse_args()
    command, text = snapshot(args.seconds, args.wait)
    output = trim(text)
    if args.dry_run:
        print(output)
        return 0
    README.write_text(replace_block(README.read_text(), command, output))
    print(f"README.md: example output replaced ({len(output.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
