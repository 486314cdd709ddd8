"""Benchmark of the live analysis tick over a long session: incremental vs batch.

A recorded stream is replayed fast as a long session of many ranks: the two-rank torchrun
stream of tests/fixtures (8 s) cloned under new PIDs and ranks (as bench/tui_bench.py does) and
repeated back to back in time (testkit/live_streams.py: timestamps and cumulative CPU counters
shifted, each stack defined once as the agent's interner does). Frames are fed in order into a
Recording; at every second of the data clock the live analysis runs on the newest
LIVE_WINDOW_S of spans, then the Recording is trimmed to the last 40 s, as a live session does.
Reported, CPU time per tick in ms (median, 95th percentile, worst):

  incremental   IncrementalAnalyzer.tick(rec) -> Analysis, every tick of the session, and
                of it: steps (the per-rank trackers: timelines, statistics, hot frames) and
                conclude (findings, memory, system and process sections: the report)
  batch         analyze(rec, rules, start_ns=end - LIVE_WINDOW_S), every --batch-every-th tick
  spans read    the new spans an incremental tick reads (its work is proportional to them)

With --repeat N the session is replayed N times and each tick keeps its least CPU time: the
same tick is the same work each time, and the least of N is the one other processes on a busy
machine disturbed least.

and the incremental tick in the session's last minute next to a fresh session's second minute,
their ticks interleaved one for one so that both see the same load on the machine: it does not
grow with the session. The agent's py-spy windows end every ~2 s, all ranks' together:
about every other tick has new spans to read (~2,100 at 64 ranks), the others none.

    python bench/tick_bench.py [--ranks 64] [--minutes 60] [--batch-every 60] [--repeat 1]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import traceml_attach.diagnose.incremental as incremental  # noqa: E402
from testkit.live_streams import NS, repeated, ticks  # noqa: E402
from traceml_attach.diagnose.analysis import analyze  # noqa: E402
from traceml_attach.ingest.stream import Recording  # noqa: E402
from traceml_attach.policy import LIVE_WINDOW_S  # noqa: E402
from traceml_attach.steps.classify import load_rules  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "ddp_input_straggler.msgpack"
RETAIN_NS = 40 * NS   # raw data a live session keeps behind the newest span


def stats(xs: list[float]) -> str:
    p95 = sorted(xs)[max(round(0.95 * len(xs)) - 1, 0)]
    return f"median {statistics.median(xs):.1f}, p95 {p95:.1f}, worst {max(xs):.1f} ms"


_conclude = incremental.conclude
_conclude_s = 0.0


def _timed_conclude(*a: Any, **k: Any) -> Any:
    """``analysis.conclude`` (the report: findings, memory, system and process sections), timed."""
    global _conclude_s
    c0 = time.process_time()
    try:
        return _conclude(*a, **k)
    finally:
        _conclude_s += time.process_time() - c0


class Session:
    """A replayed session, one tick at a time."""

    def __init__(self, minutes: float, ranks: int) -> None:
        self.rules = load_rules()
        self.rec = Recording()
        self.live = incremental.IncrementalAnalyzer(self.rules)
        self.ends = ticks(repeated(FIXTURE, minutes * 60, ranks), self.rec)
        self.origin: int | None = None
        self.end = 0

    def tick(self) -> tuple[float, float, float, int] | None:
        """(data s since the first tick, tick ms, of it conclude ms, spans read); None at the end."""
        global _conclude_s
        end = next(self.ends, None)
        if end is None:
            return None
        self.end = end
        self.origin = end if self.origin is None else self.origin
        read = sum(t.spans_read for t in self.live.trackers.values())
        _conclude_s = 0.0
        c0 = time.process_time()
        self.live.tick(self.rec, end)
        tick_ms = 1e3 * (time.process_time() - c0)
        read = sum(t.spans_read for t in self.live.trackers.values()) - read
        row = ((end - self.origin) / NS, tick_ms, 1e3 * _conclude_s, read)
        self.rec.trim(end - RETAIN_NS)
        return row

    def batch_ms(self) -> float:
        c0 = time.process_time()
        analyze(self.rec, self.rules, start_ns=self.end - int(LIVE_WINDOW_S * NS))
        return 1e3 * (time.process_time() - c0)


Row = tuple[float, float, float, int]


def replay(minutes: float, ranks: int, batch_every: int) -> tuple[list[Row], list[float], list[Row], list[Row]]:
    """The whole session: its ticks, the batch analysis every batch_every-th tick, and its last
    two minutes next to a fresh session's first two, their ticks interleaved one for one (the
    same load on the machine for both)."""
    long, fresh = Session(minutes, ranks), None
    rows: list[Row] = []
    batch: list[float] = []
    late: list[Row] = []
    early: list[Row] = []
    while (row := long.tick()) is not None:
        rows.append(row)
        if len(rows) % batch_every == 0:
            batch.append(long.batch_ms())
        if row[0] >= minutes * 60 - 120:
            fresh = fresh or Session(minutes, ranks)
            other = fresh.tick()
            if other is not None:
                late.append(row)
                early.append(other)
    return rows, batch, early, late


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--batch-every", type=int, default=60, help="time the batch analysis every N-th tick")
    ap.add_argument("--repeat", type=int, default=1,
                    help="replay the session N times and keep each tick's least CPU time (a busy machine)")
    args = ap.parse_args()
    gc.freeze()   # as a live session does at start-up
    incremental.conclude = _timed_conclude

    started = time.perf_counter()
    runs = [replay(args.minutes, args.ranks, args.batch_every) for _ in range(args.repeat)]
    elapsed = time.perf_counter() - started

    def least(series: list[list[Row]]) -> list[Row]:
        return [min(tick, key=lambda r: r[1]) for tick in zip(*series, strict=True)]

    rows = least([run[0] for run in runs])
    batch_ms = [min(b) for b in zip(*(run[1] for run in runs), strict=True)]
    early, late = least([run[2] for run in runs]), least([run[3] for run in runs])
    print(f"{args.ranks} ranks, {rows[-1][0] / 60:.1f} min of data replayed {args.repeat}x in {elapsed:.0f} s; "
          f"live window {LIVE_WINDOW_S:.0f} s, a tick every second of data ({len(rows)} ticks)")
    steady = rows[int(LIVE_WINDOW_S):]   # once the window is full
    print(f"  incremental: {stats([r[1] for r in steady])}")
    print(f"    steps:     {stats([r[1] - r[2] for r in steady])}")
    print(f"    conclude:  {stats([r[2] for r in steady])}")
    if batch_ms:
        print(f"  batch:       {stats(batch_ms)} ({len(batch_ms)} ticks)")
    with_data = [r for r in steady if r[3]]
    spans = statistics.median(r[3] for r in with_data)
    print(f"  ticks with new spans: {len(with_data)} of {len(steady)}, {spans:.0f} spans each (median): "
          f"incremental {stats([r[1] for r in with_data])}")
    for label, part in (("minute 2 of a fresh session", [r for r, _ in zip(early, late, strict=True) if r[0] >= 60]),
                        (f"minute {args.minutes:.0f}", [r for e, r in zip(early, late, strict=True) if e[0] >= 60])):
        print(f"  {label}: incremental {stats([r[1] for r in part])}; steps {stats([r[1] - r[2] for r in part])}; "
              f"{sum(r[3] for r in part) / len(part):.0f} spans read per tick")


if __name__ == "__main__":
    main()
