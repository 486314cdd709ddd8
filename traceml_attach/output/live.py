"""The live document: a summary of the latest window plus what a live view needs besides.

A pure function of the recording and its analysis, like the summary itself, so a live view
can be replayed from a recorded stream.
"""

from __future__ import annotations

from typing import Any

from traceml_attach.diagnose.analysis import Analysis
from traceml_attach.diagnose.hang import rank_state
from traceml_attach.ingest.stream import Recording
from traceml_attach.output.summary import summary_and_memory
from traceml_attach.policy import DEFAULT_STEP_TIME_POLICY, LIVE_WINDOW_S, StepTimePolicy

SPARK_POINTS = 60   # memory trend points kept per rank, spread over the session


def live_window(rec: Recording) -> int | None:
    """Start of the window a live view looks at (the last LIVE_WINDOW_S seconds of data)."""
    end = rec.time_range()
    return None if end is None else end[1] - int(LIVE_WINDOW_S * 1e9)


def _tail(series: list[tuple[int, int]], points: int) -> list[int]:
    """A series' values thinned evenly to at most ``points``, its first and last kept."""
    values = [v for _, v in series]
    if len(values) <= points:
        return values
    step = len(values) / points
    return [values[int(i * step)] for i in range(points - 1)] + [values[-1]]


def _first_ns(rec: Recording) -> int | None:
    starts = [t.ts_ns for t in rec.targets.values() if t.ts_ns]
    span_range = rec.time_range()
    if span_range is not None:
        starts.append(span_range[0])
    return min(starts) if starts else None


def _clock_ns(rec: Recording, an: Analysis) -> int | None:
    """The newest moment the data speaks of: the view's clock (never the wall clock)."""
    last = [an.end_ns] if an.end_ns is not None else []
    last += [ps[-1].ts_ns for ps in rec.procs.values() if ps]
    last += [rec.hosts[-1].ts_ns] if rec.hosts else []
    return max(last) if last else None


def live_document(rec: Recording, an: Analysis, run_name: str,
                  policy: StepTimePolicy = DEFAULT_STEP_TIME_POLICY) -> dict[str, Any]:
    """``build_summary`` of the window ``an`` covers (memory over the whole recording), with a
    ``live`` section: clock, steps seen, memory trends and each rank's stall state."""
    first = _first_ns(rec)
    doc, source, series = summary_and_memory(rec, an, run_name, memory_from_ns=first)
    clock = _clock_ns(rec, an)
    stalls = {}
    for rank, tl in an.timelines.items():
        state = rank_state(rank, tl)
        if state is None:
            continue
        stalls[rank] = {"stalled": state.stalled(policy), "idle_s": round(state.idle_s, 1), "what": state.what,
                        "where": state.where}
    primary = an.findings[0]
    doc["live"] = {
        "clock_ns": clock,
        "elapsed_s": None if clock is None or first is None else round((clock - first) / 1e9, 1),
        "steps_seen": max((r.steps for r in an.ranks), default=0),
        "warming_up": primary.kind in ("WARMUP", "NO_DATA"),
        "memory_source": source,
        "memory_series": {rank: _tail(s, SPARK_POINTS) for rank, s in series.items() if s},
        "ranks": stalls,
    }
    return doc
