"""Frame streams for the live analysis: a recorded stream repeated in time and cloned to many
ranks (each stack defined once, as the agent's interner does), the ticks of a live session over
it, and a simulated Recording handed over as its py-spy windows would have arrived."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from testkit.streams import read_frames
from traceml_attach.ingest.stream import Recording

NS = 1_000_000_000


def loop_period(frames: list[dict[str, Any]]) -> int:
    """How long a recorded stream's spans cover (ns): the period it repeats with."""
    spans = [s for fr in frames if fr["k"] == "spans" for s in fr["spans"]]
    return max(s[1] + s[2] for s in spans) - min(s[1] for s in spans)


COUNTERS = ("tcpu", "scpu")   # frames of cumulative CPU counters: the main thread's, the sampler's


def cpu_gain(frames: list[dict[str, Any]], kind: str = "tcpu") -> dict[int, tuple[int, int]]:
    """Each process's cumulative CPU counters' gain (on-CPU, run-queue ns) over the stream, in
    ``kind`` frames (tcpu: the main thread's; scpu: its sampler's): what a repeated copy goes on from."""
    first: dict[int, list[int]] = {}
    last: dict[int, list[int]] = {}
    for fr in frames:
        if fr["k"] == kind:
            for row in fr["samples"]:
                first.setdefault(fr["pid"], row)
                last[fr["pid"]] = row
    return {pid: (last[pid][1] - first[pid][1], last[pid][2] - first[pid][2]) for pid in first}


def shifted(frame: dict[str, Any], dt: int, cpu_off: tuple[int, int] = (0, 0), windows: int = 0) -> dict[str, Any]:
    """``frame`` moved ``dt`` ns later, its CPU counters on by ``cpu_off``, its py-spy window ids
    by ``windows``."""
    out = dict(frame)
    if "t" in out:
        out["t"] = out["t"] + dt
    kind = out["k"]
    if kind in ("spans", "window"):
        out["w"] = out["w"] + windows
    if kind == "spans":
        out["spans"] = [[tid, ts + dt, dur, sid] for tid, ts, dur, sid in out["spans"]]
    elif kind == "window":
        out["start"] = out["start"] + dt if out.get("start") else out.get("start")
        out["end"] = out["end"] + dt if out.get("end") else out.get("end")
    elif kind in COUNTERS:
        on, rq = cpu_off
        out["samples"] = [[t + dt, a + on, b + rq] for t, a, b in out["samples"]]
    return out


def repeated(path: Path, seconds: float, ranks: int | None = None) -> Iterator[dict[str, Any]]:
    """The recorded frames of ``path`` back to back for ``seconds`` of data: timestamps and the
    cumulative CPU counters shifted, each stack defined once. With ``ranks``, a two-rank stream
    is cloned ranks/2 times under new PIDs and ranks (as bench/tui_bench.py does)."""
    frames = [fr for fr in read_frames(path) if isinstance(fr, dict)]
    period = loop_period(frames)
    gains = {kind: cpu_gain(frames, kind) for kind in COUNTERS}
    copies = max(ranks // 2, 1) if ranks else 0
    reps = int(seconds * NS // period) + 1
    for k in range(reps):
        for frame in frames:
            kind = frame["k"]
            if k and kind in ("hello", "target", "threads"):
                continue
            if kind == "bye" and k != reps - 1:
                continue
            if k and kind == "spans":
                frame = dict(frame, fdefs=[], sdefs=[])
            pid = frame.get("pid")
            on, rq = gains[kind].get(pid, (0, 0)) if kind in COUNTERS else (0, 0)
            moved = shifted(frame, k * period, (k * on, k * rq))
            if pid is None or not copies:
                yield moved
                continue
            for c in range(copies):
                clone = dict(moved, pid=pid + 100_000 * (c + 1))
                if kind == "target":
                    clone.update(rank=frame["rank"] + 2 * c, world_size=2 * copies, nspid=[clone["pid"]])
                yield clone


def ticks(frames: Iterator[dict[str, Any]], rec: Recording, every_ns: int = NS) -> Iterator[int]:
    """Feed ``frames`` into ``rec``; at every ``every_ns`` of the data clock (the newest frame
    timestamp) yield the newest span's end, as a live session's tick sees the recording."""
    clock = next_tick = None
    for frame in frames:
        rec.add(frame)
        t = frame.get("t")
        if t is None:
            continue
        clock = t if clock is None else max(clock, t)
        if next_tick is None:
            next_tick = clock + every_ns
        span_range = rec.time_range()
        if clock >= next_tick and span_range is not None:
            next_tick += every_ns
            yield span_range[1]


def arriving(full: Recording, window_ns: int = 2 * NS, every_ns: int = NS, lag_ns: int = 300_000_000
             ) -> Iterator[Recording]:
    """A Recording that grows as ``full`` would have arrived: each rank's spans in py-spy windows
    of ``window_ns`` (rank k's windows ``k * lag_ns`` later), its CPU counter rows as they were
    read; yielded every ``every_ns`` of data."""
    live = Recording()
    live.hello = dict(full.hello)
    live.targets = dict(full.targets)
    live.threads = {pid: dict(t) for pid, t in full.threads.items()}
    span_range = full.time_range()
    assert span_range is not None
    first, last = span_range
    sent = dict.fromkeys(full.spans, 0)
    sent_cpu = dict.fromkeys(full.spans, 0)
    t = first
    while t < last + window_ns:
        t += every_ns
        for k, (pid, spans) in enumerate(full.spans.items()):
            edge = first + ((t - first - k * lag_ns) // window_ns) * window_ns + k * lag_ns
            out = live.spans.setdefault(pid, [])
            j = sent[pid]
            while j < len(spans) and (spans[j].end_ns <= edge or t >= last + window_ns - every_ns):
                out.append(spans[j])
                j += 1
            sent[pid] = j
            rows = full.cpu.get(pid, [])
            c = bisect.bisect_right(rows, t, key=lambda r: r[0])
            live.cpu.setdefault(pid, []).extend(rows[sent_cpu[pid]:c])
            sent_cpu[pid] = c
        ends = [s[-1].end_ns for s in live.spans.values() if s]
        if ends:
            live._range = (min(s[0].ts_ns for s in live.spans.values() if s), max(ends))
            yield live
