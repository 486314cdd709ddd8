"""A recording as a Chrome JSON trace, which ui.perfetto.dev (and chrome://tracing) opens.

One process per rank ("rank R", with its PID and node), and in it:

  steps    one slice per step the analysis counted, with its phases (ms) as arguments
  phases   the training thread's time inside the covered steps, one slice per run of one phase
           and one hot frame (the innermost frame of the stack), with the wait label and that
           frame (and the user-code frame it was called from) as arguments; time outside a
           covered step (before the first boundary, a sampler drop-out) has no phase slice, so
           each phase's slices add up to the steps' phase totals
  counters RSS (with the DataLoader workers), GPU memory, SM utilization

and the diagnosis of each analysed chunk as a global instant event at its end. The recording is
analysed in chunks of CHUNK_S (as a live view sees it, ``analyze`` of each); a step across a
chunk's edge is cut there. Timestamps are microseconds from the trace's first event, on the
collector's clock: a remote node's timestamps are moved by its measured clock offset.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from traceml_attach.diagnose.analysis import Analysis
from traceml_attach.diagnose.gpu import rank_gpu
from traceml_attach.ingest.model import node_of, os_pid
from traceml_attach.ingest.stream import Recording
from traceml_attach.steps.batch_timeline import Timeline
from traceml_attach.steps.hotframes import via
from traceml_attach.steps.phases import PHASES

CHUNK_S = 30.0
STEPS_TID, PHASES_TID = 1, 2
_NS = 1_000_000_000


def perfetto_trace(rec: Recording, chunks: Iterable[tuple[int, Analysis]], start_ns: int, end_ns: int
                   ) -> dict[str, Any]:
    """The trace of [start_ns, end_ns) of ``rec``, from its analysis in chunks (each chunk's end
    and its analysis: diagnose/analysis.py analyze_chunks)."""
    trace = TraceBuilder(rec)
    for hi, an in chunks:
        for rank, tl in an.timelines.items():
            trace.rank(int(rank), tl.pid)
            trace.steps(int(rank), tl)
        trace.diagnosis(an, hi)
    trace.counters(start_ns, end_ns)
    return {"traceEvents": trace.events(), "displayTimeUnit": "ms",
            "otherData": {"tool": "traceml-attach", "rate_hz": rec.rate_hz}}


class TraceBuilder:
    """The events of a trace, made rank by rank and chunk by chunk (timestamps in ns until ``events``)."""

    def __init__(self, rec: Recording) -> None:
        self.rec = rec
        self.ranks: dict[int, int] = {}   # rank -> its process key (the newest seen)
        self.body: list[dict[str, Any]] = []
        self.meta: list[dict[str, Any]] = []
        self.offsets = {n: info.offset_ns or 0 for n, info in rec.nodes.items()}

    def ts(self, pid: int, ns: int) -> int:
        """Nanoseconds on ``pid``'s node's clock, on the collector's: the trace's clock."""
        return ns + self.offsets.get(node_of(pid), 0)

    def rank(self, rank: int, pid: int) -> None:
        if self.ranks.get(rank) == pid:
            return
        self.ranks[rank] = pid
        node = node_of(pid)
        name = f"rank {rank} (pid {os_pid(pid)}" + (f", node {node})" if self.rec.nodes else ")")
        self.meta += [
            {"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": name}},
            {"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}},
            {"ph": "M", "name": "thread_name", "pid": rank, "tid": STEPS_TID, "args": {"name": "steps"}},
            {"ph": "M", "name": "thread_name", "pid": rank, "tid": PHASES_TID, "args": {"name": "phases"}},
        ]

    def steps(self, rank: int, tl: Timeline) -> None:
        segments = list(tl.segments)
        i = 0
        for step in tl.steps:
            args: dict[str, Any] = {"ms": round(step.dur_ns / 1e6, 3)}
            if step.covered:
                args.update({f"{p}_ms": round(step.phases_ns[p] / 1e6, 3) for p in PHASES if step.phases_ns[p]})
            else:
                args["covered"] = False   # a sampler drop-out: its time is no phase's
            self._slice(rank, STEPS_TID, "step", tl.pid, step.start_ns, step.end_ns, args)
            if not step.covered:
                continue
            while i < len(segments) and segments[i].ts_ns + segments[i].dur_ns <= step.start_ns:
                i += 1
            j = i
            run: list[Any] | None = None   # [phase, label, frame, via, start, end]
            while j < len(segments) and segments[j].ts_ns < step.end_ns:
                seg = segments[j]
                lo, hi = max(seg.ts_ns, step.start_ns), min(seg.ts_ns + seg.dur_ns, step.end_ns)
                j += 1
                if hi <= lo:
                    continue
                stack = seg.span.stack
                key = (seg.phase, seg.label, stack[-1].where if stack else None)
                if run is not None and tuple(run[:3]) == key and run[5] == lo:
                    run[5] = hi
                    continue
                self._phase(rank, tl.pid, run)
                run = [*key, via(stack) if stack else None, lo, hi]
            self._phase(rank, tl.pid, run)

    def _phase(self, rank: int, pid: int, run: list[Any] | None) -> None:
        if run is None:
            return
        phase, label, frame, caller, lo, hi = run
        name = phase if phase != "wait" else f"wait/{label or 'other'}"
        args = {k: v for k, v in (("label", label), ("frame", frame), ("via", caller)) if v is not None}
        self._slice(rank, PHASES_TID, name, pid, lo, hi, {"phase": phase, **args})

    def _slice(self, rank: int, tid: int, name: str, pid: int, lo: int, hi: int, args: dict[str, Any]) -> None:
        self.body.append({"ph": "X", "name": name, "pid": rank, "tid": tid, "ts": self.ts(pid, lo),
                          "dur": hi - lo, "args": args})

    def diagnosis(self, an: Analysis, end_ns: int) -> None:
        d = an.report.step_time.diagnosis
        self.body.append({"ph": "i", "s": "g", "name": d.status, "pid": 0, "tid": 0, "ts": end_ns,
                          "args": {"summary": d.summary, "why": d.why, "next": d.action,
                                   "worst_rank": d.worst_rank}})

    def counters(self, start_ns: int, end_ns: int) -> None:
        """Each rank's telemetry (of its newest process) as counter tracks."""
        gpu = rank_gpu(self.rec, {str(r): p for r, p in self.ranks.items()}, start_ns, end_ns)
        for rank, pid in self.ranks.items():
            for p in self.rec.procs_between(pid, start_ns, end_ns):
                if p.rss_bytes is not None:
                    self._counter(rank, pid, "RSS (MiB)", p.ts_ns, (p.rss_bytes + p.workers_rss_bytes) / 2**20)
            for ts, value in gpu.memory.get(str(rank), []):
                self._counter(rank, pid, "GPU memory (MiB)", ts, value / 2**20)
            for ts, sm in gpu.sm_series.get(str(rank), []):
                self._counter(rank, pid, "SM utilization (%)", ts, sm)

    def _counter(self, rank: int, pid: int, name: str, ns: int, value: float) -> None:
        self.body.append({"ph": "C", "name": name, "pid": rank, "ts": self.ts(pid, ns),
                          "args": {"value": round(value, 2)}})

    def events(self) -> list[dict[str, Any]]:
        """Every event, timestamps in µs from the first (ns until here)."""
        origin = min((e["ts"] for e in self.body), default=0)
        for e in self.body:
            e["ts"] = round((e["ts"] - origin) / 1e3, 3)
            if "dur" in e:
                e["dur"] = round(e["dur"] / 1e3, 3)
        return self.meta + self.body

