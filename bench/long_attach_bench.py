"""Benchmark: the attacher's memory and disk over a long attach, extrapolated to a day.

Starts a 2-rank torchrun job (examples/ddp.py, gloo, CPU, an input straggler on rank 1),
attaches `traceml attach --no-tui` to its launcher for --seconds, and reads every --every
seconds the attacher's RSS (the Python process; py-spy's recorders are reported apart, they
come and go with each window) and the size of its run folder. Then fits a line to the RSS
after --warmup seconds (least squares) and prints the slope per hour, the figure extrapolated
to 24 h, and the recording's MB per rank-hour.

    python bench/long_attach_bench.py [--seconds 600] [--every 10] [--warmup 60] [--rate 100]
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

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
from launch import start_torchrun, stop_example  # noqa: E402

MB = 1024 * 1024


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--every", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=60.0)
    ap.add_argument("--rate", type=int, default=100)
    ap.add_argument("--ranks", type=int, default=2)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        launcher = start_torchrun(args.ranks, "--straggler", "input", "--slow-rank", "1", "--steps", "100000000",
                                  truth_dir=logs)
        attach = subprocess.Popen(
            [sys.executable, "-m", "traceml_attach", "attach", "--pid", str(launcher.pid), "--no-tui",
             "--rate", str(args.rate), "--duration", str(args.seconds), "--logs-dir", str(logs / "logs"),
             "--run-name", "long"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        proc = psutil.Process(attach.pid)
        started = time.monotonic()
        rows: list[tuple[float, float, float, float]] = []   # (t s, attacher RSS MB, py-spy RSS MB, folder MB)
        try:
            while attach.poll() is None:
                time.sleep(args.every)
                try:
                    if proc.status() == psutil.STATUS_ZOMBIE:
                        break
                    rss = proc.memory_info().rss / MB
                    kids = sum(c.memory_info().rss for c in proc.children(recursive=True)) / MB
                except psutil.Error:
                    break
                run = logs / "logs" / "long"
                disk = folder_bytes(run) / MB if run.exists() else 0.0
                t = time.monotonic() - started
                rows.append((t, rss, kids, disk))
                print(f"{t:7.0f} s  attacher RSS {rss:7.1f} MB  py-spy {kids:6.1f} MB  recording {disk:7.2f} MB",
                      flush=True)
            _, stderr = attach.communicate(timeout=120)
        finally:
            stop_example(launcher)
        summary = logs / "logs" / "long" / "final_summary.json"
        if attach.returncode != 0 or not summary.exists():
            print(f"attach failed ({attach.returncode}): {stderr.strip()[-500:]}")
            return 1
        doc = json.loads(summary.read_text())

    steady = [(t, rss) for t, rss, _, _ in rows if t >= args.warmup]
    per_hour = slope(steady) * 3600 if len(steady) >= 3 else float("nan")
    last = rows[-1]
    hours = last[0] / 3600
    print()
    print(f"attach of {last[0]:.0f} s to {args.ranks} ranks at {args.rate} Hz")
    print(f"attacher RSS after {args.warmup:.0f} s: {steady[0][1]:.1f} MB -> {steady[-1][1]:.1f} MB, "
          f"slope {per_hour:+.1f} MB/h, extrapolated to 24 h: {steady[-1][1] + per_hour * (24 - hours):.0f} MB")
    print(f"py-spy recorders: {statistics.median(r[2] for r in rows):.1f} MB (median)")
    print(f"recording: {last[3]:.1f} MB, {last[3] / hours / args.ranks:.1f} MB per rank-hour")
    print(f"final diagnosis: {doc['primary_diagnosis']['kind']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
