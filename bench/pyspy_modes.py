"""One py-spy per rank vs one per node (--subprocesses): CPU and what each records.

    python bench/pyspy_modes.py [--ranks 2] [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
from launch import start_torchrun, stop_example  # noqa: E402
from traceml_agent.discovery import ranks_below  # noqa: E402
from traceml_agent.pyspy import find_pyspy  # noqa: E402


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def record(args: list[str], out: Path, seconds: int) -> tuple[float, list[dict]]:
    before = _cpu()
    subprocess.run([find_pyspy(), "record", *args, "--nonblocking", "--idle", "--format", "chrometrace",
                    "--duration", str(seconds), "--output", str(out)], capture_output=True, check=True)
    return _cpu() - before, json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        job = start_torchrun(args.ranks, "--straggler", "none")
        try:
            time.sleep(2)
            ranks = ranks_below(job.pid)
            procs = [subprocess.Popen([find_pyspy(), "record", "--pid", str(r.pid), "--nonblocking", "--idle",
                                       "--format", "chrometrace", "--duration", str(args.seconds),
                                       "--output", f"{tmp}/r{r.pid}.json"], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL) for r in ranks]
            before = _cpu()
            for p in procs:
                p.wait()
            per_rank_cpu = _cpu() - before
            per_rank_pids = {e["pid"] for r in ranks for e in json.loads(Path(f"{tmp}/r{r.pid}.json").read_text())}
            node_cpu, events = record(["--pid", str(job.pid), "--subprocesses"], Path(tmp) / "node.json",
                                      args.seconds)
            node_pids = {e["pid"] for e in events}
            workers = {c.pid for c in psutil.Process(job.pid).children(recursive=True)}
        finally:
            stop_example(job)
    rank_pids = {r.pid for r in ranks}
    print(f"{args.ranks} ranks, {args.seconds} s at 100 Hz")
    print(f"one py-spy per rank: {100 * per_rank_cpu / args.seconds:.1f}% of a core in all "
          f"({100 * per_rank_cpu / args.seconds / args.ranks:.1f}% per rank); pids recorded: "
          f"{sorted(per_rank_pids & rank_pids)}")
    print(f"one per node (--subprocesses on the launcher): {100 * node_cpu / args.seconds:.1f}% of a core; "
          f"pids recorded: ranks {sorted(node_pids & rank_pids)}, launcher {job.pid in node_pids}, "
          f"others {sorted(node_pids - rank_pids - {job.pid} - workers)}")


if __name__ == "__main__":
    main()
