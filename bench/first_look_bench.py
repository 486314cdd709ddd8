"""Time to the first diagnosis: seconds from starting `traceml attach --no-tui` on a running
example job to its first live line, and what that line said, against the verdict it gives later.

    python bench/first_look_bench.py [--runs 2] [--device cpu] [--wheel] [examples...]

Prints, per run: the first line's time and verdict (marked "(first look)") and the verdict 8 s
in. The job runs 2 s before each attach; each run is a fresh job.

With --wheel the attacher is the one a user installs: the wheel built from this checkout and
installed non-editable into a fresh venv (.ci/wheel_smoke.py's steps), whose pip compiled its
modules' bytecode at install. Without it the attacher is this checkout's `python -m
traceml_attach`, which compiles every module at each start where PYTHONDONTWRITEBYTECODE is set
(this project's machine sets it: about 0.4 s more to the first line).
"""

from __future__ import annotations

import argparse
import importlib.util
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


def first_lines(traceml: list[str], pid: int, logs: Path, seconds: float = 8.0) -> list[tuple[float, str]]:
    """A `traceml attach --no-tui` of ``pid`` for about ``seconds``, ``traceml`` the command that
    runs the CLI: each line it printed, with the seconds since it was started."""
    t0 = time.monotonic()
    att = subprocess.Popen([*traceml, "attach", "--pid", str(pid), "--no-tui",
                            "--logs-dir", str(logs), "--run-name", "first"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           cwd=ROOT if traceml[0] == sys.executable else logs)
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


def installed(tmp: Path) -> list[str]:
    """The `traceml` of this checkout's wheel, installed into a fresh venv under ``tmp`` (as
    .ci/wheel_smoke.py builds and installs it)."""
    spec = importlib.util.spec_from_file_location("wheel_smoke", ROOT / ".ci" / "wheel_smoke.py")
    assert spec is not None and spec.loader is not None
    smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke)
    print("building the wheel and installing it into a fresh venv ...", flush=True)
    return [str(smoke.install(smoke.build_wheel(tmp), tmp))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("examples", nargs="*", default=list(EXAMPLES))
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--wheel", action="store_true", help="time the built wheel installed in a fresh venv")
    args = ap.parse_args()
    env = dict(os.environ, TRACEML_GROUND_TRUTH_SYNC="0")
    with tempfile.TemporaryDirectory(prefix="traceml-first-") as venv_dir:
        traceml = installed(Path(venv_dir)) if args.wheel else [sys.executable, "-m", "traceml_attach"]
        if args.wheel:   # nothing may lead the venv's attacher back to the tree
            for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
                os.environ.pop(name, None)
        looks(args.examples, args.runs, args.device, traceml, env)


def looks(examples: list[str], runs: int, device: str, traceml: list[str], env: dict[str, str]) -> None:
    for name in examples:
        for _ in range(runs):
            job = start_example(name, "--device", device, env=env)
            try:
                time.sleep(2)
                with tempfile.TemporaryDirectory() as tmp:
                    lines = [(t, s) for t, s in first_lines(traceml, job.pid, Path(tmp)) if "[" in s]
            finally:
                stop_example(job)
            if lines:
                print(f"{name}: first line at {lines[0][0]:.2f} s {verdict(lines[0][1])}; "
                      f"at {lines[-1][0]:.1f} s {verdict(lines[-1][1])}", flush=True)
            else:
                print(f"{name}: no live line", flush=True)


if __name__ == "__main__":
    main()
