"""Time to the first diagnosis: seconds from starting `traceml attach --no-tui` on a running
example job to its first live line, and what that line said, against the verdict it gives later.

    python bench/first_look_bench.py [--runs 2] [--device cpu] [examples...]

Prints, per run: the first line's time and verdict (marked "(first look)") and the verdict 8 s
in. The job runs 2 s before each attach; each run is a fresh job.
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
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]
from launch import start_example, stop_example  # noqa: E402

EXAMPLES = ("input_bound", "compute_bound", "wait_heavy", "balanced")


def first_lines(pid: int, logs: Path, seconds: float = 8.0) -> list[tuple[float, str]]:
    """A `traceml attach --no-tui` of ``pid`` for about ``seconds``: each line it printed, with the
    seconds since it was started."""
    t0 = time.monotonic()
    att = subprocess.Popen([sys.executable, "-m", "traceml_attach", "attach", "--pid", str(pid), "--no-tui",
                            "--logs-dir", str(logs), "--run-name", "first"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    seen = []
    assert att.stdout is not None
    for line in att.stdout:
        seen.append((time.monotonic() - t0, line.rstrip()))
        if time.monotonic() - t0 > seconds:
            break
    att.terminate()
    att.wait(timeout=60)
    return seen


def verdict(line: str) -> str:
    found = re.search(r"\[([A-Z -]+)\]( \(first look\))?", line)
    return found.group(0) if found else line[:60]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("examples", nargs="*", default=list(EXAMPLES))
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    env = dict(os.environ, TRACEML_GROUND_TRUTH_SYNC="0")
    for name in args.examples:
        for _ in range(args.runs):
            job = start_example(name, "--device", args.device, env=env)
            try:
                time.sleep(2)
                with tempfile.TemporaryDirectory() as tmp:
                    lines = [(t, s) for t, s in first_lines(job.pid, Path(tmp)) if "[" in s]
            finally:
                stop_example(job)
            if lines:
                print(f"{name}: first line at {lines[0][0]:.2f} s {verdict(lines[0][1])}; "
                      f"at {lines[-1][0]:.1f} s {verdict(lines[-1][1])}", flush=True)
            else:
                print(f"{name}: no live line", flush=True)


if __name__ == "__main__":
    main()
