"""The attacher's own cost, part by part (issue 29): a real `traceml attach --no-tui` on an
example job at each rate, its recorded ``cost`` frames (agent/cost.py) read back.

Each part is CPU seconds per minute of steady state (the slope between the first cost frame
from --skip seconds after the first one, which comes 10 s in, and the last, at the end: start-up
and the 2-s windows of a rank's first 30 s are left out by default), per rank:

  py-spy      the recorder and dump processes (the attacher's reaped children)
  spawn       starting each window's recorder (our side of it)
  parse       reading each finished window's chrometrace file into frames
  counters    the per-thread CPU counters (every 20 ms)
  watch       the exit / exec / stop watch (every 20 ms)
  rss         the RSS trace (every 50 ms)
  proc        the psutil poll of the process and its workers (every second)
  dump        our side of the `py-spy dump` for thread names (a new thread, and every 30 s)
  rest        the rest of the attacher's process: the analysis thread, the live view, the writer

    python bench/cost_bench.py [--rates 50 100 200] [--seconds 60] [--skip 20] [--example balanced]

Prints a Markdown table; 1 core = 60 s per minute (1% of a core = 0.6 s/min).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

from launch import start_example, stop_example  # noqa: E402
from testkit.streams import read_frames  # noqa: E402

SAMPLER_PARTS = ("spawn", "parse", "counters", "watch", "rss", "proc", "dump")


def attach(pid: int, rate: int, seconds: float, logs: Path) -> list[dict]:
    subprocess.run([sys.executable, "-m", "traceml_attach", "attach", "--pid", str(pid), "--no-tui",
                    "--duration", str(seconds), "--rate", str(rate), "--max-rate", str(rate),
                    "--logs-dir", str(logs), "--run-name", "cost"],
                   cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=seconds + 120, check=True)
    return [f for f in read_frames(logs / "cost" / "frames.msgpack") if f.get("k") == "cost"]


def per_minute(frames: list[dict], pid: int | None, skip_s: float = 0.0) -> dict[str, float]:
    """Each part's CPU seconds per minute between the first cost frame of ``pid`` at least
    ``skip_s`` after its first (cost frames come every 10 s) and its last."""
    mine = [f for f in frames if f.get("pid") == pid]
    first = next(f for f in mine if f["t"] - mine[0]["t"] >= skip_s * 1e9)
    last = mine[-1]
    minutes = (last["t"] - first["t"]) / 60e9
    return {k: (last["parts"].get(k, 0.0) - first["parts"].get(k, 0.0)) / minutes for k in last["parts"]}


def breakdown(example: str, rate: int, seconds: float, skip_s: float) -> dict[str, float]:
    job = start_example(example)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            frames = attach(job.pid, rate, seconds, Path(tmp))
    finally:
        stop_example(job)
    pids = {f["pid"] for f in frames if f.get("pid") is not None}
    ranks = len(pids)
    node = per_minute(frames, None, skip_s)
    sampler = {part: 0.0 for part in SAMPLER_PARTS}
    for pid in pids:
        for part, value in per_minute(frames, pid, skip_s).items():
            sampler[part] = sampler.get(part, 0.0) + value
    out = {"py-spy": node["children"] / ranks, **{p: v / ranks for p, v in sampler.items()}}
    out["rest"] = (node["process"] - sum(sampler.values())) / ranks
    out["total"] = sum(v for k, v in out.items() if k != "total")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", type=int, nargs="+", default=[50, 100, 200])
    ap.add_argument("--seconds", type=float, default=60.0, help="each attach's length (default 60)")
    ap.add_argument("--example", default="balanced", help="the example job (default balanced)")
    ap.add_argument("--skip", type=float, default=20.0,
                    help="seconds of steady state left out after the first cost frame (10 s in): the windows "
                         "lengthen from 2 to 4 s once a rank has been sampled 30 s (default 20)")
    args = ap.parse_args()
    if args.seconds < args.skip + 20:   # cost frames come every 10 s, the first 10 s in: two to measure between
        ap.error(f"--seconds {args.seconds:g} leaves nothing to measure after --skip {args.skip:g}: "
                 f"give at least {args.skip + 20:g}")
    rows = {}
    for rate in args.rates:
        print(f"attaching to examples/{args.example}.py at {rate} Hz for {args.seconds:.0f} s ...", flush=True)
        rows[rate] = breakdown(args.example, rate, args.seconds, args.skip)
    parts = list(next(iter(rows.values())))
    print(f"\nCPU seconds per minute per rank (steady state; 0.6 s/min = 1% of a core), examples/{args.example}.py\n")
    print("| part | " + " | ".join(f"{r} Hz" for r in rows) + " |")
    print("|---|" + "---|" * len(rows))
    for part in parts:
        print(f"| {part} | " + " | ".join(f"{rows[r][part]:.2f}" for r in rows) + " |")
    print("| % of a core | " + " | ".join(f"{100 * rows[r]['total'] / 60:.1f}%" for r in rows) + " |")


if __name__ == "__main__":
    main()
