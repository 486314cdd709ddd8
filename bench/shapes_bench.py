"""Step time on the loop shapes of issue 9, against each job's own ground truth.

    python bench/shapes_bench.py [--runs 3] [--seconds 10] [--rate 100] [--only NAME]

Each shape is a real job from examples/ that records its own per-step times
(TRACEML_GROUND_TRUTH). For every run: a `traceml snapshot`, then the reported step time and
step count against the median step and the steps that lie wholly inside the snapshot's window,
the diagnosis and the rank it names.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

from launch import read_truth, start_example, start_torchrun, stop_example  # noqa: E402

PYENV = Path.home() / ".pyenv" / "versions"


def snapshot(pid: int, out: Path, seconds: float, rate: int) -> dict:
    res = subprocess.run([sys.executable, "-m", "traceml_attach", "snapshot", "--pid", str(pid), "--seconds",
                          str(seconds), "--quiet", "--rate", str(rate), "--logs-dir", str(out), "--run-name", "s"],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    if res.returncode not in (0, 8):
        raise RuntimeError(res.stderr.strip())
    return json.loads((out / "s" / "final_summary.json").read_text())


def single(name: str, *args: str, python: str | None = None) -> Callable[[Path], tuple[subprocess.Popen[str], int]]:
    def start(tmp: Path) -> tuple[subprocess.Popen[str], int]:
        env = None
        if python is not None:
            env = {"PATH": "/usr/bin:/bin", "TRACEML_GROUND_TRUTH": str(tmp / "gt_0.jsonl")}
            proc = subprocess.Popen([python, str(ROOT / "examples" / f"{name}.py"), *args], stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True, env=env)
            assert proc.stdout is not None
            proc.stdout.readline()
            return proc, 1
        return start_example(name, *args, truth=tmp / "gt_0.jsonl"), 1
    return start


def ddp(*args: str) -> Callable[[Path], tuple[subprocess.Popen[str], int]]:
    def start(tmp: Path) -> tuple[subprocess.Popen[str], int]:
        return start_torchrun(2, *args, truth_dir=tmp), 2
    return start


SHAPES: dict[str, tuple[Callable[[Path], tuple[subprocess.Popen[str], int]], str]] = {
    "while_next": (single("while_next"), "while True: next(it), 1 slow worker, input ~92%, ~6 ms compute"),
    "input_tiny": (single("input_bound", "--input-share", "0.9", "--width", "320"),
                   "for batch in loader, input 90%, a few ms of compute"),
    "ddp_compute_r0": (ddp("--straggler", "compute", "--slow-rank", "0", "--width", "64", "--extra-ms", "20",
                           "--base-input-ms", "1"), "torchrun x2, rank 0 extra forward branch, ~28 ms steps"),
    "ddp_input_r1": (ddp("--straggler", "input", "--slow-rank", "1", "--width", "1024", "--extra-ms", "48",
                         "--base-input-ms", "1"), "torchrun x2, rank 1 slow input ~60%, ~84 ms steps"),
}
for version in ("3.12", "3.13"):
    found = sorted(PYENV.glob(f"{version}.*/bin/python3"))
    if found:
        SHAPES[f"pure_py{version}"] = (single("pure_loop", python=str(found[-1])),
                                       f"torch-free loop on Python {version}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--only", action="append", help="run only this shape (repeatable)")
    args = parser.parse_args()
    print(f"rate {args.rate} Hz, {args.runs} x {args.seconds:.0f} s snapshot per shape\n")
    print("| shape | run | diagnosis (rank) | truth step ms | reported step ms | error | steps truth / reported | "
          "ranks agree |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (start, what) in SHAPES.items():
        if args.only and name not in args.only:
            continue
        for run in range(args.runs):
            with tempfile.TemporaryDirectory() as d:
                tmp = Path(d)
                proc, nranks = start(tmp)
                try:
                    time.sleep(2)
                    s = snapshot(proc.pid, tmp / "logs", args.seconds, args.rate)
                finally:
                    stop_example(proc)
                win = s["sampling"]["window"]
                st = s["step_time"]
                truths = [read_truth(tmp / f"gt_{r}.jsonl", win["start"], win["end"]) for r in range(nranks)]
                true_ms = statistics.median(t.step_ms for t in truths)
                reported = [st["ranks"][str(r)]["step_ms"] for r in range(nranks)]
                steps = [st["ranks"][str(r)]["steps"] for r in range(nranks)]
                known = [x for x in reported if x is not None]
                err = "unknown" if not known else f"{100 * (statistics.median(known) / true_ms - 1):+.1f}%"
                agree = "-" if nranks == 1 else ("yes" if len(set(reported)) == 1 else f"no {reported}")
                diag = st["diagnosis"]
                print(f"| {name} | {run + 1} | {diag['status']} ({diag['worst_rank']}) | {true_ms:.1f} | "
                      f"{'unknown' if not known else f'{statistics.median(known):.1f}'} | {err} | "
                      f"{'/'.join(str(t.steps) for t in truths)} / {'/'.join(map(str, steps))} | {agree} |",
                      flush=True)
                if not known:
                    print(f"|  |  | {st['step_time_note']} |  |  |  |  |  |", flush=True)
        print(f"<!-- {name}: {what} -->", flush=True)


if __name__ == "__main__":
    main()
