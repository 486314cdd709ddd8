"""Memory verdicts on the shapes of examples/leaks.py, against each job's own RSS read in-process.

    python bench/memory_bench.py [SHAPE ...] [--seconds 15] [--age 22] [--together 3]
    python bench/memory_bench.py slow --seconds 300      # the slow leak over a 5-minute attach

Each job is started, left to run past its warm-up (``--age`` seconds after it is ready: the warm-up
is the job's own first 20 s), then ``traceml snapshot`` samples it for ``--seconds`` (at a fixed
100 Hz: memory needs no step time); ``--together`` jobs run side by side. Printed per shape: the
step-memory verdict, the pace it gives against the least-squares slope of the job's in-process RSS
over the same window (the cache grows in its workers, which the job cannot read of itself), the
time left it gives, the first line the evidence names, and the slowest leak a "steady" could miss.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]
from launch import start_example, stop_example  # noqa: E402

SHAPES = ("loss", "eval_loss", "outputs", "cache", "flat", "jump", "slow")
# as tests/test_e2e_memory.py runs them: the shapes that keep tensors, without the decode time
EXTRA = {"loss": ("--input-ms", "0"), "eval_loss": ("--input-ms", "0"), "outputs": ("--input-ms", "0")}
MIB = 2**20


def slope(path: Path, start_s: float, end_s: float) -> float | None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
    points = [(r["end"], r["rss"]) for r in rows if start_s <= r["end"] <= end_s]
    if len(points) < 3:
        return None
    t0, v0 = statistics.fmean(t for t, _ in points), statistics.fmean(v for _, v in points)
    return sum((t - t0) * (v - v0) for t, v in points) / sum((t - t0) ** 2 for t, _ in points)


def run(shapes: list[str], seconds: float, age: float, tmp: Path) -> None:
    jobs = {}
    try:
        for shape in sorted(shapes, key=lambda s: s == "jump"):   # the jump's clock starts last: inside the window
            jobs[shape] = start_example("leaks", "--shape", shape, *EXTRA.get(shape, ()), *(
                ("--jump-after-s", str(age + min(seconds / 2, 10))) if shape == "jump" else ()),
                truth=tmp / f"{shape}.jsonl")
        time.sleep(age)
        runs = {shape: subprocess.Popen(
            [sys.executable, "-m", "traceml_attach", "snapshot", "--pid", str(job.pid), "--seconds", str(seconds),
             "--max-rate", "100", "--logs-dir", str(tmp), "--run-name", shape], cwd=ROOT, stdout=subprocess.DEVNULL)
            for shape, job in jobs.items()}
        for r in runs.values():
            r.wait(timeout=seconds + 120)
    finally:
        for job in jobs.values():
            stop_example(job)
    for shape in shapes:
        summary = json.loads((tmp / shape / "final_summary.json").read_text())
        d = summary["step_memory"]["diagnosis"]
        ev = d.get("evidence") or {}
        window = summary["sampling"]["window"]
        true = slope(tmp / f"{shape}.jsonl", window["start"], window["end"])
        pace = ev.get("bytes_per_s")
        leak = ev.get("leak") or {}
        lines = leak.get("lines") or []
        first = lines[0]["where"] + " " + lines[0]["text"] if lines else "-"
        workers = ", ".join(f"{w['pid']} {w['bytes_per_s'] / MIB:+.1f} MiB/s" for w in leak.get("workers") or [])
        if shape == "cache":
            true = None   # its workers grow; the job reads only its own RSS
        err = f"{100 * (pace / true - 1):+.1f}%" if pace and true else "-"
        ours = "-" if pace is None else f"{pace / MIB:.1f}"
        theirs = "-" if true is None else f"{true / MIB:.2f}"
        left = ev.get("seconds_left")
        left_text = "-" if left is None else f"{left / 60:.0f} min"
        limit = ev.get("detectable_bytes_per_s")
        limit_text = "-" if limit is None else f"{limit / MIB:.1f} MiB/s"
        print(f"| {shape} | {seconds:g} s | {d['status']}: {d['summary']} | {ours} / {theirs} MiB/s ({err}) | "
              f"{left_text} | {first}{'; workers ' + workers if workers else ''} | {limit_text} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shapes", nargs="*", metavar="SHAPE",
                        help=f"the shapes to run (default: all of {', '.join(SHAPES)})")
    parser.add_argument("--seconds", type=float, default=15.0, help="snapshot length (default 15)")
    parser.add_argument("--age", type=float, default=22.0, help="seconds after ready before the snapshot (22)")
    parser.add_argument("--together", type=int, default=3, help="jobs run side by side (default 3)")
    args = parser.parse_args()
    unknown = [s for s in args.shapes if s not in SHAPES]
    if unknown:
        parser.error(f"unknown shape {unknown[0]!r}: choose from {', '.join(SHAPES)}")
    shapes = args.shapes or list(SHAPES)
    print("| shape | window | verdict | pace: traceml / in-process | time left | first line named | "
          "steady misses leaks under |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(0, len(shapes), args.together):
            run(shapes[i:i + args.together], args.seconds, args.age, Path(tmp))


if __name__ == "__main__":
    main()
