"""The main thread's CPU counters joined to the live step engine's intervals (live_tracker.py): the
time blocked in each synchronizing phase, as ``batch_timeline._intervals`` measures it. The agent
reads the counters every 20 ms; an interval whose end they have not reached yet waits for them
(``pending``), at most PENDING_S of data time."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import replace
from operator import itemgetter

from traceml_attach.steps.live_intervals import Interval, IntervalWindow

NS = 1_000_000_000
PENDING_S = 5.0            # an interval's CPU counter is awaited at most this long (data time)
_TS = itemgetter(0)


class CounterJoin:
    """One process's counter rows (ts, on-CPU ns, run-queue ns) and the intervals awaiting them."""

    def __init__(self) -> None:
        self.rows: Sequence[tuple[int, int, int]] = []
        self.at = 0                      # where the last lookup landed
        self.pending: list[Interval] = []

    def waits(self, end_ns: int, now_ns: int) -> bool:
        """Whether an interval ending at ``end_ns`` is to wait for the counters to reach it."""
        return bool(self.rows) and self.rows[-1][0] < end_ns and now_ns - end_ns < PENDING_S * NS

    def busy_at(self, ts_ns: int, on_only: bool = False) -> float | None:
        """``CpuCounter.at`` on the recording's rows, without copying them; looked up from where
        the last lookup landed (intervals close in time order). ``on_only``: the time on a CPU,
        without the time waiting for one."""
        rows, i = self.rows, self.at
        if 0 < i < len(rows) and rows[i - 1][0] < ts_ns <= rows[i][0]:
            pass
        elif 0 < i + 1 < len(rows) and rows[i][0] < ts_ns <= rows[i + 1][0]:
            i += 1
        else:
            i = bisect.bisect_left(rows, ts_ns, key=_TS)
        self.at = i
        if i == len(rows) or (i == 0 and rows[0][0] != ts_ns):
            return None
        t1, on1, rq1 = rows[i]
        b1 = on1 if on_only else on1 + rq1
        if t1 == ts_ns:
            return b1
        t0, on0, rq0 = rows[i - 1]
        b0 = on0 if on_only else on0 + rq0
        return b0 + (b1 - b0) * (ts_ns - t0) / (t1 - t0)

    def on(self, start_ns: int, end_ns: int) -> float | None:
        """The thread's time on a CPU through [start_ns, end_ns), where the rows cover it."""
        on0, on1 = self.busy_at(start_ns, True), self.busy_at(end_ns, True)
        return None if on0 is None or on1 is None else on1 - on0

    def queued(self, start_ns: int, end_ns: int) -> float | None:
        """The time waiting for a CPU through [start_ns, end_ns), where the rows cover it."""
        on = self.on(start_ns, end_ns)
        b0, b1 = self.busy_at(start_ns), self.busy_at(end_ns)
        return None if on is None or b0 is None or b1 is None else b1 - b0 - on

    def blocked(self, sync: Sequence[tuple[int, int, str]]) -> dict[str, int] | None:
        """As ``timeline._intervals``: the time blocked in each synchronizing phase."""
        blocked: dict[str, int] = {}
        for lo, hi, phase in sync:
            b0, b1 = self.busy_at(lo), self.busy_at(hi)
            if b0 is None or b1 is None:
                return None
            idle = (hi - lo) - min(max(b1 - b0, 0.0), hi - lo)
            blocked[phase] = blocked.get(phase, 0) + int(idle)
        return blocked

    def resolve(self, window: IntervalWindow, now_ns: int) -> None:
        still = []
        for record in self.pending:
            end = record.step.end_ns
            if self.waits(end, now_ns):
                still.append(record)
                continue
            record.pending = False
            # its long spans are judged again with the counters through them (a blocked thread
            # swallowed no steps)
            swallowing, held = (window.spans.swallowing(record.long_spans) if window.certain and record.long_spans
                                else (record.step.swallowing, record.step.held))
            step = record.step
            work = self.on(step.start_ns, step.end_ns) if not step.aside_ns else None
            window.restep(record, replace(step, blocked_sync_ns=self.blocked(record.sync), swallowing=swallowing,
                                          held=held, work_ns=None if work is None else int(work),
                                          stalled=window.spans.stalled(step.start_ns, step.end_ns)))
        self.pending = still
