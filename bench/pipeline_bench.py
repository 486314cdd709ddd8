"""Benchmark: the attacher's memory over a long session at many ranks, replayed fast.

The recorded two-rank torchrun stream (tests/fixtures/ddp_input_straggler.msgpack, 8 s) is
played again and again, shifted in time (testkit/streams.py), and cloned under new PIDs to
--ranks ranks, then fed through the Pipeline that a live session and `traceml replay` use
(bounded recording + 10 s rollups). Every simulated --every-min minutes it prints the process's
RSS, the spans held and the buckets kept; at the end, the RSS slope after the first simulated
--warmup-min minutes, extrapolated to 24 h, and the time the pipeline took per simulated minute
(the rollups' share of the analysis thread).

    python bench/pipeline_bench.py [--ranks 64] [--minutes 20] [--every-min 2] [--warmup-min 2]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from testkit.streams import looped, read_frames  # noqa: E402
from traceml_attach.runtime.pipeline import Pipeline  # noqa: E402
from traceml_attach.steps.classify import load_rules  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "ddp_input_straggler.msgpack"
MB = 1024 * 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--every-min", type=float, default=2.0)
    ap.add_argument("--warmup-min", type=float, default=2.0)
    args = ap.parse_args()

    frames = read_frames(FIXTURE)
    span_s = (max(r[1] + r[2] for f in frames if f["k"] == "spans" for r in f["spans"])
              - min(r[1] for f in frames if f["k"] == "spans" for r in f["spans"])) / 1e9
    copies = max(int(args.minutes * 60 / span_s), 1)
    clones = max(args.ranks // 2, 1)
    pipeline = Pipeline(load_rules())
    me = psutil.Process()
    first_ns: int | None = None
    next_report = args.every_min * 60
    points: list[tuple[float, float]] = []
    cpu0 = time.process_time()
    print(f"{args.ranks} ranks, {copies * span_s / 60:.0f} simulated minutes")
    for frame in looped(frames, copies):
        for c in range(clones):
            clone = dict(frame)
            if "pid" in frame:
                clone["pid"] = frame["pid"] + 100_000 * (c + 1)
                if frame["k"] == "target":
                    clone.update(rank=frame["rank"] + 2 * c, world_size=2 * clones, nspid=[clone["pid"]])
            elif c:
                continue
            pipeline.add(clone)
        span_range = pipeline.rec.time_range()
        if span_range is None:
            continue
        first_ns = first_ns or span_range[0]
        sim_s = (span_range[1] - first_ns) / 1e9
        if sim_s >= next_report:
            next_report += args.every_min * 60
            gc.collect()
            rss = me.memory_info().rss / MB
            points.append((sim_s / 60, rss))
            held = sum(len(v) for v in pipeline.rec.spans.values())
            buckets = sum(len(r.buckets) for r in pipeline.history.ranks.values())
            print(f"{sim_s / 60:6.1f} min  RSS {rss:7.1f} MB  spans held {held:7d}  buckets {buckets:6d}  "
                  f"CPU {time.process_time() - cpu0:6.1f} s", flush=True)
    cpu = time.process_time() - cpu0
    steady = [(m, r) for m, r in points if m >= args.warmup_min]
    if len(steady) >= 2:
        slope_h = (steady[-1][1] - steady[0][1]) / (steady[-1][0] - steady[0][0]) * 60
        print(f"\nRSS {steady[0][1]:.1f} -> {steady[-1][1]:.1f} MB after {args.warmup_min:.0f} min: "
              f"{slope_h:+.1f} MB per hour, {steady[-1][1] + slope_h * 24:.0f} MB extrapolated to 24 h "
              f"({args.ranks} ranks)")
    print(f"pipeline CPU: {cpu / (copies * span_s / 60):.2f} s per simulated minute at {args.ranks} ranks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
