"""The live document: the summary of the latest window plus what a live view needs besides.

A pure function of the recording and its analysis, like the summary itself, so a live view
can be replayed from a recorded stream.
"""

from __future__ import annotations

from traceml_attach.diagnose.analysis import Analysis, analyze
from traceml_attach.diagnose.kinds import not_judged
from traceml_attach.ingest.stream import Recording
from traceml_attach.output.summary import LiveState, Summary
from traceml_attach.policy import DEFAULT_STEP_TIME_POLICY, LIVE_WINDOW_S, StepTimePolicy
from traceml_attach.steps.classify import Rules

SPARK_POINTS = 60   # memory trend points kept per rank, spread over the session


def live_window(rec: Recording) -> int | None:
    """Start of the window a live view looks at (the last LIVE_WINDOW_S seconds of data)."""
    end = rec.time_range()
    return None if end is None else end[1] - int(LIVE_WINDOW_S * 1e9)


def analyze_live(rec: Recording, rules: Rules, policy: StepTimePolicy = DEFAULT_STEP_TIME_POLICY) -> Analysis:
    """The analysis a live view shows: step times over the live window, memory trends over
    everything the recording holds."""
    return analyze(rec, rules, policy, start_ns=live_window(rec), memory_from_ns=_first_ns(rec))


def _tail(series: list[tuple[int, int]], points: int) -> tuple[int, ...]:
    """A series' values thinned evenly to at most ``points``, its first and last kept."""
    values = [v for _, v in series]
    if len(values) <= points:
        return tuple(values)
    step = len(values) / points
    return (*(values[int(i * step)] for i in range(points - 1)), values[-1])


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


def live_document(rec: Recording, an: Analysis, run_name: str) -> Summary:
    """The summary of the window ``an`` covers, with the live state: clock, steps seen and the
    memory trends (of the series the report judged)."""
    first = _first_ns(rec)
    clock = _clock_ns(rec, an)
    primary = an.report.step_time.diagnosis
    live = LiveState(
        clock,
        None if clock is None or first is None else round((clock - first) / 1e9, 1),
        max((r.steps for r in an.ranks), default=0),
        not_judged(primary.kind),
        {int(rank): _tail(s, SPARK_POINTS) for rank, s in an.memory_series.items() if s},
    )
    return Summary(run_name, an.report, live=live)
