"""Long frame streams from short recorded ones: a recording played again and again, each copy
shifted in time to follow the last, as if the job had run that long."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from traceml_agent.wire import unpacker

ONCE = {"hello", "target", "threads", "bye"}


def read_frames(path: Path) -> list[dict[str, Any]]:
    with path.open("rb") as f:
        return list(unpacker(f))


def looped(frames: list[dict[str, Any]], copies: int, period_ns: int | None = None) -> Iterator[dict[str, Any]]:
    """``frames`` ``copies`` times over, each copy's timestamps moved by the recording's length, or
    by ``period_ns`` when longer (a gap after each copy: sampling that stops and starts again)
    (cumulative CPU counters go on from the last copy's values; the one-off frames come once)."""
    ends = [row[1] + row[2] for f in frames if f["k"] == "spans" for row in f["spans"]]
    starts = [row[1] for f in frames if f["k"] == "spans" for row in f["spans"]]
    period = max(max(ends) - min(starts) + 10_000_000, period_ns or 0)
    cpu_end: dict[tuple[str, int], tuple[int, int]] = {}
    for f in frames:
        if f["k"] in ("tcpu", "scpu") and f["samples"]:
            cpu_end[f["k"], f["pid"]] = (f["samples"][-1][1], f["samples"][-1][2])
    window = 0
    for k in range(copies):
        shift = k * period
        for f in frames:
            kind = f["k"]
            if kind in ONCE:
                if k == 0 and kind != "bye":
                    yield f
                continue
            g = dict(f)
            if "t" in g:
                g["t"] += shift
            if kind == "spans":
                window += 1
                g["w"] = window
                g["spans"] = [[tid, ts + shift, dur, sid] for tid, ts, dur, sid in f["spans"]]
            elif kind == "window":
                g["w"] = window
                g["start"] = None if f["start"] is None else f["start"] + shift
                g["end"] = None if f["end"] is None else f["end"] + shift
            elif kind in ("tcpu", "scpu"):
                on0, rq0 = cpu_end.get((kind, f["pid"]), (0, 0))
                g["samples"] = [[t + shift, on + k * on0, rq + k * rq0] for t, on, rq in f["samples"]]
            yield g
    yield {"k": "bye", "t": frames[-1].get("t", 0) + (copies - 1) * period, "reason": "stopped"}
