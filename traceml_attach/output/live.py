"""The live document: the summary of the latest window plus what a live view needs besides.

A pure function of the recording and its analysis, like the summary itself, so a live view
can be replayed from a recorded stream.
"""

from __future__ import annotations

from traceml_attach.diagnose.analysis import Analysis, first_ns
from traceml_attach.diagnose.kinds import not_judged
from traceml_attach.ingest.stream import Recording
from traceml_attach.output.summary import LiveState, Summary
from traceml_attach.policy import FIRST_LOOK_S

SPARK_POINTS = 60   # memory trend points kept per rank, spread over the session


def _tail(series: list[tuple[int, int]], points: int) -> tuple[int, ...]:
    """A series' values thinned evenly to at most ``points``, its first and last kept."""
    values = [v for _, v in series]
    if len(values) <= points:
        return tuple(values)
    step = len(values) / points
    return (*(values[int(i * step)] for i in range(points - 1)), values[-1])


def _clock_ns(rec: Recording, an: Analysis) -> int | None:
    """The newest moment the data speaks of: the view's clock (never the wall clock)."""
    last = [an.end_ns] if an.end_ns is not None else []
    last += [ps[-1].ts_ns for ps in rec.procs.values() if ps]
    last += [rec.hosts[-1].ts_ns] if rec.hosts else []
    return max(last) if last else None


def first_look(rec: Recording) -> bool:
    """Fewer than FIRST_LOOK_S seconds of samples so far: the numbers are still settling."""
    span = rec.time_range()
    return span is not None and span[1] - span[0] < FIRST_LOOK_S * 1e9


def live_document(rec: Recording, an: Analysis, run_name: str) -> Summary:
    """The summary of the window ``an`` covers, with the live state: clock, steps seen and the
    memory trends (of the series the report judged)."""
    first = first_ns(rec)
    clock = _clock_ns(rec, an)
    primary = an.report.step_time.diagnosis
    live = LiveState(
        clock,
        None if clock is None or first is None else round((clock - first) / 1e9, 1),
        max((r.steps for r in an.ranks), default=0),
        not_judged(primary.kind),
        first_look(rec),
        {int(rank): _tail(s, SPARK_POINTS) for rank, s in an.memory_series.items() if s},
    )
    return Summary(run_name, an.report, live=live)
