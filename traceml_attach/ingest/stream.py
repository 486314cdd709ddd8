"""Decode the frame stream into a Recording.

A Recording is built by feeding frames in order, live or from a file; everything
downstream is a pure function of it. Malformed frames are counted, never raised.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceml_attach.ingest.model import (
    CodeFrame,
    DeviceReading,
    ErrorEvent,
    ExitEvent,
    Extension,
    GpuSample,
    HostSample,
    NodeInfo,
    ProcSample,
    RateChange,
    Span,
    TargetMeta,
    ThreadInfo,
    WindowInfo,
)
from traceml_attach.ingest.segments import Dropped, read_segments


class RecordingError(Exception):
    """A frames file that cannot be read at all."""


@dataclass
class Recording:
    hello: dict[str, Any] = field(default_factory=dict)
    targets: dict[int, TargetMeta] = field(default_factory=dict)
    spans: dict[int, list[Span]] = field(default_factory=dict)
    threads: dict[int, dict[int, ThreadInfo]] = field(default_factory=dict)
    procs: dict[int, list[ProcSample]] = field(default_factory=dict)
    hosts: list[HostSample] = field(default_factory=list)
    windows: dict[int, list[WindowInfo]] = field(default_factory=dict)
    errors: list[ErrorEvent] = field(default_factory=list)
    exits: dict[int, ExitEvent] = field(default_factory=dict)
    # main thread's (ts_ns, on-CPU ns, run-queue ns), cumulative, by pid
    cpu: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)
    # the py-spy recorders sampling each pid: their (ts_ns, on-CPU ns, run-queue ns), cumulative
    # (``scpu`` frames; none in streams recorded before them)
    sampler_cpu: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)
    restarts: list[tuple[int, int, int, int]] = field(default_factory=list)  # (ts_ns, rank, old, new pid)
    # each process's rate changes (``rate`` frames), in time order; ``trim`` keeps the one in
    # effect at the cut and those after it, ``rate_changes`` counts them all
    rates: dict[int, list[RateChange]] = field(default_factory=dict)
    rate_changes: dict[int, int] = field(default_factory=dict)
    gpus: list[GpuSample] = field(default_factory=list)
    rss: dict[int, list[tuple[int, int]]] = field(default_factory=dict)   # pid -> (ts_ns, RSS), ``mem`` frames
    sources: dict[str, str] = field(default_factory=dict)   # the job's own files' text (``source`` frames)
    # the processes stopped now (SIGSTOP, a debugger; ``pstate`` frames): since when (ns) and why
    stopped: dict[int, tuple[int, str]] = field(default_factory=dict)
    resumed: dict[int, int] = field(default_factory=dict)   # when each process last ran again (ns)
    end_reason: str | None = None
    extended: Extension | None = None   # a snapshot that sampled on past its default length (``extend`` frame)
    nodes: dict[int, NodeInfo] = field(default_factory=dict)   # a multi-node session's nodes (``node`` frames)
    net: dict[str, int] = field(default_factory=dict)          # the collector's newest counters (``net`` frames)
    # the attacher's own CPU seconds by part, newest (``cost`` frames): per sampled pid, and None
    # for the agent's process with its py-spy children (agent/cost.py)
    costs: dict[int | None, dict[str, float]] = field(default_factory=dict)
    bad_frames: int = 0
    dropped: Dropped | None = None   # what rotation deleted from the recording read (segments.py)
    # Retention (``trim``): how many of each pid's spans were dropped from the front, so that
    # spans[pid][i] is the (trimmed[pid] + i)-th span ever recorded for it; and running totals
    # of what was dropped, so whole-session counts survive the trimming.
    trimmed: dict[int, int] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=lambda: {"windows": 0, "samples": 0, "errors": 0,
                                                            "error_events": 0})
    _range: tuple[int, int] | None = field(default=None, repr=False)  # (first, last) ns of any span
    _frames: dict[int, CodeFrame] = field(default_factory=dict, repr=False)
    _stacks: dict[int, tuple[CodeFrame, ...]] = field(default_factory=dict, repr=False)

    @property
    def rate_hz(self) -> int:
        """Every process's first sampling rate (``rate_at`` says what it was at a given time)."""
        return int(self.hello.get("rate_hz") or 100)

    @property
    def max_rate_hz(self) -> int | None:
        """The most a process's rate may be raised to (``rate_hz``: fixed); None when the recording
        does not say (older recordings, a collector's stream of other nodes' agents)."""
        top = self.hello.get("max_rate_hz")
        return None if top is None else max(int(top), self.rate_hz)

    def rate_at(self, pid: int, ts_ns: int) -> int:
        """The rate ``pid``'s spans were sampled at, at ``ts_ns``."""
        changes = self.rates.get(pid)
        if not changes:
            return self.rate_hz
        i = bisect.bisect_right(changes, ts_ns, key=_change_ts)
        return changes[i - 1].rate_hz if i else self.rate_hz

    def add(self, frame: Any) -> None:
        """Fold one wire frame in; a malformed one is counted and skipped."""
        try:
            self._add(frame)
        except (KeyError, TypeError, ValueError, IndexError):
            self.bad_frames += 1

    def _add(self, f: dict[str, Any]) -> None:
        kind = f["k"]
        if kind == "hello":
            _opt(f.get("rate_hz"), int)
            _opt(f.get("max_rate_hz"), int)
            self.hello = dict(f)
        elif kind == "target":
            pid = int(f["pid"])
            self.targets[pid] = TargetMeta(
                pid=pid, exe=_opt(f.get("exe"), str), cmd=tuple(_is(c, str) for c in f.get("cmd") or ()),
                rank=_int(f.get("rank")), local_rank=_int(f.get("local_rank")), world_size=_int(f.get("world_size")),
                ts_ns=int(f["t"]), nspid=tuple(int(x) for x in f.get("nspid") or (pid,)),
                node=int(f.get("n") or 0), started_ns=_count(f.get("started")),
                memory_limit=_count(f.get("mem_limit")),
            )
        elif kind == "spans":
            self._add_spans(f)
        elif kind == "threads":
            self.threads.setdefault(int(f["pid"]), {}).update(
                {int(r[0]): ThreadInfo(int(r[0]), _int(r[1]), _opt(r[2], str), _opt(r[3], bool)) for r in f["threads"]}
            )
        elif kind == "proc":
            children = tuple((int(c[0]), _num(c[1]), _int(c[2])) for c in f.get("children") or ())
            self.procs.setdefault(int(f["pid"]), []).append(
                ProcSample(int(f["pid"]), int(f["t"]), _num(f.get("cpu")), _int(f.get("rss")),
                           _int(f.get("nthreads")), children)
            )
        elif kind == "host":
            self.hosts.append(HostSample(int(f["t"]), _num(f.get("cpu")), _int(f.get("mem_used")),
                                         _int(f.get("mem_total")), int(f.get("n") or 0), _count(f.get("cpus"))))
        elif kind == "window":
            window = WindowInfo(int(f["pid"]), int(f["w"]), _int(f.get("start")), _int(f.get("end")),
                                _int(f.get("samples")), _int(f.get("errors")), _int(f.get("threads")),
                                _int(f.get("thread_ns")))
            self.windows.setdefault(window.pid, []).append(window)
            self.totals["windows"] += 1
            self.totals["samples"] += window.samples or 0
            self.totals["errors"] += window.errors or 0
        elif kind == "error":
            self.errors.append(ErrorEvent(int(f["t"]), _int(f.get("pid")), str(f["kind"]), str(f["msg"])))
            self.totals["error_events"] += 1
        elif kind == "exit":
            self.exits[int(f["pid"])] = ExitEvent(int(f["t"]), int(f["pid"]), _int(f.get("status")))
        elif kind == "gpu":
            self.gpus.append(GpuSample(
                int(f["t"]),
                tuple(DeviceReading(int(d[0]), _num(d[1]), _int(d[2]), _int(d[3]), _num(d[4]), _num(d[5]), _num(d[6]),
                                    bool(d[7])) for d in f["devices"]),
                tuple((int(p[0]), int(p[1]), _int(p[2]), _int(p[3])) for p in f["procs"]),
            ))
        elif kind in ("tcpu", "scpu"):
            rows = (self.cpu if kind == "tcpu" else self.sampler_cpu).setdefault(int(f["pid"]), [])
            rows.extend((int(t), int(on), int(rq)) for t, on, rq in f["samples"])
        elif kind == "mem":
            rss = self.rss.setdefault(int(f["pid"]), [])
            rss.extend((int(t), int(b)) for t, b in f["samples"] if not rss or int(t) > rss[-1][0])
        elif kind == "source":
            self.sources.setdefault(str(f["file"]), str(f["text"]))
        elif kind == "rate":
            self._add_rate(RateChange(int(f["t"]), int(f["pid"]), int(f["rate_hz"]), _opt(f.get("why"), str),
                                      f.get("refines") is True))
        elif kind == "pstate":
            pid = int(f["pid"])
            if f["stopped"] is True:
                self.stopped[pid] = (int(f["t"]), str(f.get("why") or "stopped"))
            else:
                self.stopped.pop(pid, None)
                self.resumed[pid] = int(f["t"])
        elif kind == "restart":
            self.restarts.append((int(f["t"]), int(f["rank"]), int(f["old_pid"]), int(f["pid"])))
        elif kind == "extend":
            from_s, to_s = _num(f["from_s"]), _num(f["to_s"])
            if from_s is None or to_s is None or not 0 < from_s < to_s:
                raise ValueError("an extend frame's lengths are seconds, the new one the longer")
            self.extended = Extension(int(f["t"]), from_s, to_s, str(f["why"]))
        elif kind == "bye":
            self.end_reason = _opt(f.get("reason"), str)
        elif kind == "node":
            node = int(f["node"])
            self.nodes[node] = NodeInfo(
                node, str(f["name"]), _opt(f.get("agent"), str), str(f["state"]), int(f["t"]), _opt(f.get("host"), str),
                _int(f.get("rate_hz")), _int(f.get("offset_ns")), tuple(int(r) for r in f.get("ranks") or ()),
                _opt(f.get("reason"), str))
        elif kind == "cost":   # cumulative CPU seconds by part: the newest one stands for all
            parts = f["parts"]
            if not isinstance(parts, dict) or not all(isinstance(v, int | float) for v in parts.values()):
                raise ValueError("a cost frame's parts are seconds by name")
            self.costs[_opt(f.get("pid"), int)] = {str(k): float(v) for k, v in parts.items()}
        elif kind == "net":
            self.net = {k: int(v) for k, v in f.items() if k not in ("k", "t") and isinstance(v, int)}
        else:
            self.bad_frames += 1

    def _add_rate(self, change: RateChange) -> None:
        if change.rate_hz <= 0:
            raise ValueError("a rate must be positive")
        changes = self.rates.setdefault(change.pid, [])
        if changes and changes[-1].ts_ns >= change.ts_ns:
            return   # a segment's context repeating one already read, or out of order: the first stays
        changes.append(change)
        self.rate_changes[change.pid] = self.rate_changes.get(change.pid, 0) + 1

    def _add_spans(self, f: dict[str, Any]) -> None:
        for fid, name, path, line, src, ctx in f.get("fdefs") or ():
            self._frames[int(fid)] = CodeFrame(str(name), str(path), int(line), _opt(src, str), _opt(ctx, str))
        for sid, fids in f.get("sdefs") or ():
            self._stacks[int(sid)] = tuple(self._frames[int(i)] for i in fids)
        pid = int(f["pid"])
        out = self.spans.setdefault(pid, [])
        for tid, ts, dur, sid in f["spans"]:
            span = Span(pid, int(tid), int(ts), int(dur), self._stacks[int(sid)])
            out.append(span)
            lo, hi = self._range or (span.ts_ns, span.end_ns)
            self._range = (min(lo, span.ts_ns), max(hi, span.end_ns))

    def trim(self, before_ns: int) -> None:
        """Forget the raw data older than ``before_ns``: spans that ended before it, CPU-counter
        rows, psutil/NVML samples, window records and rate changes (keeping one row of each series
        before the cut, to interpolate and to know the last value), and all but the first and newest error
        events. Targets, threads, exits and restarts stay: they are small and whole-session facts."""
        for pid, spans in self.spans.items():
            # spans are in start order: drop the leading ones that ended before the cut
            keep = next((i for i, s in enumerate(spans) if s.end_ns >= before_ns), len(spans))
            if keep:
                del spans[:keep]
                self.trimmed[pid] = self.trimmed.get(pid, 0) + keep
        for rows in (*self.cpu.values(), *self.sampler_cpu.values()):
            _cut(rows, before_ns, lambda r: r[0])
        for procs in self.procs.values():
            _cut(procs, before_ns, lambda p: p.ts_ns)
        for rss in self.rss.values():
            _cut(rss, before_ns, lambda r: r[0])
        _cut(self.hosts, before_ns, lambda h: h.ts_ns)
        _cut(self.gpus, before_ns, lambda g: g.ts_ns)
        for windows in self.windows.values():
            cut = sum(1 for w in windows if (w.end_ns or 0) < before_ns)
            del windows[:cut]
        for changes in self.rates.values():
            _cut(changes, before_ns, _change_ts)
        if len(self.errors) > 2 * MAX_ERROR_EVENTS:
            del self.errors[MAX_ERROR_EVENTS:-MAX_ERROR_EVENTS]

    def procs_between(self, pid: int, lo: int, hi: int) -> list[ProcSample]:
        """``pid``'s psutil samples with lo <= ts_ns <= hi (a process's samples are in time order)."""
        rows = self.procs.get(pid, [])
        return rows[bisect.bisect_left(rows, lo, key=_proc_ts):bisect.bisect_right(rows, hi, key=_proc_ts)]

    def time_range(self) -> tuple[int, int] | None:
        """(first, last) ns covered by any span; kept as frames arrive (live ticks ask often)."""
        return self._range


MAX_ERROR_EVENTS = 100   # trim keeps the first and the newest this many error events


def _is(value: Any, kind: type) -> Any:
    """``value`` if it is a ``kind``, else TypeError (the frame is counted bad). A bool is no int."""
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise TypeError(f"{type(value).__name__} where {kind.__name__} was expected")
    return value


def _opt(value: Any, kind: type) -> Any:
    """``value`` if it is None or a ``kind``, else TypeError."""
    return None if value is None else _is(value, kind)


def _int(value: Any) -> int | None:
    return _opt(value, int)


def _num(value: Any) -> float | int | None:
    """A measurement: None, an int or a finite float; else TypeError or ValueError."""
    if value is None:
        return None
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("not a finite number")
        return value
    return _is(value, int)


def _count(value: object) -> int | None:
    """A positive count from a frame, or None (absent, or not a count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _proc_ts(p: ProcSample) -> int:
    return p.ts_ns


def _change_ts(c: RateChange) -> int:
    return c.ts_ns


def _cut(rows: list[Any], before_ns: int, ts: Callable[[Any], int]) -> None:
    """Drop the rows (in time order) before ``before_ns``, keeping the last one before it."""
    cut = bisect.bisect_left(rows, before_ns, key=ts) - 1
    if cut > 0:
        del rows[:cut]


def read_recording(path: str | Path) -> tuple[Recording, str | None]:
    """Read a frames file with the newer segments rotation left beside it (segments.py).
    Returns the recording and, if a file is damaged, what is wrong with it; every frame before
    the damage is kept."""
    rec = Recording()
    try:
        rec.dropped, problem = read_segments(Path(path), rec.add)
    except OSError as exc:
        raise RecordingError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return rec, problem
