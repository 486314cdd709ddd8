"""Soak: a simulated 24-hour attach of 8 ranks, replayed at speed, with the attacher's own
resources sampled throughout (docs/faults.md, "The soak").

The recorded two-rank torchrun stream (tests/fixtures/ddp_input_straggler.msgpack, 8 s) is played
again and again, shifted in time (testkit/streams.py), and cloned under new PIDs to --ranks ranks,
through what a live session holds for its whole life:

- a FrameWriter writing the run folder's frames.msgpack under the default 200 MB cap (rotating:
  segments opened and deleted) with the session's listener;
- the Pipeline (bounded recording, 10-s rollups, the trackers), with the data of --duty of
  the time (each 8-s copy followed by a gap, as a sampler that pauses), a live analysis every
  --tick-s simulated seconds and a summary written to the run folder every simulated hour (the
  TUI's `s`), with the faults a day brings: an error frame every simulated minute (a py-spy
  window failing) and a rank restarted (new PID) every simulated hour.

Every simulated --every-h hours it prints the process's RSS (after a collection), its open
descriptors and its threads; at the end, each one's change after the --warmup-h first hours.

    nice python bench/soak_bench.py [--hours 24] [--ranks 8] [--every-h 2] [--tick-s 60]
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testkit.streams import looped, read_frames  # noqa: E402
from traceml_agent.writer import FrameWriter  # noqa: E402
from traceml_attach.output.report import write_summary_somewhere  # noqa: E402
from traceml_attach.output.summary import build_summary  # noqa: E402
from traceml_attach.policy import RECORDING_MAX_MB  # noqa: E402
from traceml_attach.runtime.pipeline import Pipeline  # noqa: E402
from traceml_attach.steps.classify import load_rules  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "ddp_input_straggler.msgpack"
MB = 1024 * 1024


def resources(me: psutil.Process) -> tuple[float, int, int]:
    """RSS in MB (after a full collection), open descriptors, threads."""
    gc.collect()
    return me.memory_info().rss / MB, len(os.listdir("/proc/self/fd")), me.num_threads()


def clone(frame: dict[str, Any], c: int, clones: int, generation: int) -> dict[str, Any] | None:
    """Frame ``frame`` of rank pair ``c`` (its PIDs moved; a new generation: a restarted process)."""
    if "pid" not in frame:
        return dict(frame) if c == 0 else None
    out = dict(frame)
    out["pid"] = frame["pid"] + 100_000 * (c + 1) + 1_000_000 * generation
    if frame["k"] == "target":
        out.update(rank=frame["rank"] + 2 * c, world_size=2 * clones, nspid=[out["pid"]])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--every-h", type=float, default=2.0)
    ap.add_argument("--warmup-h", type=float, default=2.0)
    ap.add_argument("--tick-s", type=float, default=60.0, help="simulated seconds between live analyses")
    ap.add_argument("--duty", type=float, default=0.25,
                    help="the share of the simulated time that holds data: each 8-s copy of the recording is "
                    "followed by a gap (a sampler that pauses and comes back), so a day costs minutes of CPU")
    args = ap.parse_args()

    frames = read_frames(FIXTURE)
    targets = [f for f in frames if f["k"] == "target"]
    spans = [r for f in frames if f["k"] == "spans" for r in f["spans"]]
    span_s = (max(r[1] + r[2] for r in spans) - min(r[1] for r in spans)) / 1e9
    period_s = span_s / args.duty
    copies = max(int(args.hours * 3600 / period_s), 1)
    clones = max(args.ranks // 2, 1)
    run = Path(tempfile.mkdtemp(prefix="traceml-soak-"))
    writer = FrameWriter(run / "frames.msgpack", int(RECORDING_MAX_MB * 1_000_000))
    pipeline = Pipeline(load_rules())
    writer.listen(pipeline.add)
    me = psutil.Process()
    points: list[tuple[float, float, int, int]] = [(0.0, *resources(me))]
    first_ns: int | None = None
    next_report, next_tick, next_hour, next_error = args.every_h * 3600, args.tick_s, 3600.0, 60.0
    generation, ticks = 0, 0
    cpu0, wall0 = time.process_time(), time.monotonic()
    print(f"{args.ranks} ranks, {copies * period_s / 3600:.1f} simulated hours, run folder {run}; "
          f"threads here: {threading.active_count()}")
    print(f"{'hours':>6} {'RSS MB':>8} {'fds':>5} {'threads':>8} {'spans held':>11} {'rollups':>8} {'files':>6} "
          f"{'CPU s':>7}")
    for frame in looped(frames, copies, int(period_s * 1e9)):
        for c in range(clones):
            out = clone(frame, c, clones, generation)
            if out is not None:
                writer.write(out)
        span_range = pipeline.rec.time_range()
        if span_range is None:
            continue
        first_ns = first_ns or span_range[0]
        sim_s = (span_range[1] - first_ns) / 1e9
        if sim_s >= next_error:
            next_error += 60
            writer.write({"k": "error", "t": span_range[1], "pid": targets[0]["pid"] + 100_000, "kind": "pyspy_failed",
                          "msg": "py-spy failed on a window (soak)"})
        if sim_s >= next_tick:
            next_tick += args.tick_s
            pipeline.live_analysis()
            ticks += 1
        if sim_s >= next_hour:   # a restarted rank pair (new PIDs) and a summary written, every hour
            next_hour += 3600
            generation += 1
            for target in targets:
                restarted = clone({**target, "t": span_range[1]}, 0, clones, generation)
                assert restarted is not None
                writer.write(restarted)
            write_summary_somewhere(run, build_summary(pipeline.rec, pipeline.window_analysis(), run.name))
        if sim_s >= next_report:
            next_report += args.every_h * 3600
            point = (sim_s / 3600, *resources(me))
            points.append(point)
            held = sum(len(v) for v in pipeline.rec.spans.values())
            rollups = sum(len(r.buckets) for r in pipeline.history.ranks.values())
            files = len(list(run.glob("frames*.msgpack")))
            print(f"{point[0]:6.1f} {point[1]:8.1f} {point[2]:5d} {point[3]:8d} {held:11d} {rollups:8d} {files:6d} "
                  f"{time.process_time() - cpu0:7.0f}", flush=True)
    writer.close()
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    steady = [p for p in points if p[0] >= args.warmup_h]
    if len(steady) >= 2:
        (h0, rss0, fd0, th0), (h1, rss1, fd1, th1) = steady[0], steady[-1]
        print(f"\nafter hour {h0:.0f}: RSS {rss0:.1f} -> {rss1:.1f} MB ({(rss1 - rss0) / (h1 - h0):+.2f} MB/h), "
              f"descriptors {fd0} -> {fd1} (range {min(p[2] for p in steady)}-{max(p[2] for p in steady)}), "
              f"threads {th0} -> {th1}")
    on_disk = sum(p.stat().st_size for p in run.glob("frames*.msgpack")) / 1e6
    print(f"{ticks} live analyses; recording {on_disk:.0f} MB on disk (cap {RECORDING_MAX_MB:.0f} MB); "
          f"CPU {cpu:.0f} s, wall {wall:.0f} s for {copies * period_s / 3600:.1f} simulated hours")
    for path in run.iterdir():
        path.unlink()
    run.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
