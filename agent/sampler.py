"""Continuous, non-blocking sampling of one process, emitted as wire frames.

Recording windows overlap: window k+1 starts ``window_s - overlap_s`` after window k,
and window k is stopped ``overlap_s`` after that, so one recorder is always sampling
while the next one attaches. The first window is ``first_window_s`` long, so a first look
at the job is out within about 1.5 s of attaching (1.2 s measured: docs/tui.md). Spans are
stitched at the end of what was already covered; any uncovered time between windows is visible
in the ``window`` frames as data.

Each window is sampled at the rate the node's RateGovernor gives (agent/rate.py; fixed without
one). When that rate is to change, the next window starts at once, and a ``rate`` frame says
from where its spans were sampled at the new rate.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traceml_agent import source
from traceml_agent.cost import COST_EVERY_S, CpuParts
from traceml_agent.discovery import exit_status
from traceml_agent.procfile import Reread
from traceml_agent.procstats import ProcPoller
from traceml_agent.pyspy import PySpyError, RawSpan, RecordWindow, WindowResult
from traceml_agent.rate import Rate, RateGovernor
from traceml_agent.target import TargetInfo, inspect_target
from traceml_agent.threads import ThreadDump, ThreadNames, dump
from traceml_agent.watch import Change, TargetWatch
from traceml_agent.writer import FrameWriter

# A window that fails for one of these reasons will fail again: stop sampling.
FATAL_KINDS = {"permission", "not_python", "unsupported_python", "pyspy_missing"}
MAX_CONSECUTIVE_FAILURES = 3   # ...in a row, before the first success: stop sampling
MAX_PAUSE_S = 60.0             # after a success, failures pause sampling at most this long
STOPS_KEPT = 64                # the newest stopped stretches a sampler cuts out of its spans


@dataclass(frozen=True)
class SamplerConfig:
    rate_hz: int = 100           # py-spy samples per second per thread (the floor when adaptive)
    max_rate_hz: int | None = None   # the most the analysis's advice may raise it to; None: rate_hz (fixed)
    window_s: float = 2.0        # length of one py-spy record window (latency of live data)...
    first_window_s: float = 0.8  # ...the first one's: a first look within 1.5 s of attaching (~1.2 s here)...
    # ...and, once this rank has been sampled for steady_after_s (the live view's window, full by
    # then, and past the first rate changes: a snapshot of up to 30 s never gets there), each
    # one's: a hand-over costs about 24 ms of CPU at 100 Hz (the recorder's start and the overlap's
    # double samples: docs/accuracy.md), so 4-s windows halve what 2-s ones cost in hand-overs, at
    # the price of live data up to 4 s old
    steady_window_s: float = 4.0
    steady_after_s: float = 30.0
    overlap_s: float = 0.3       # both recorders sample for this long at each hand-over
    # thread names and idle flags via `py-spy dump` (11 ms of CPU each here): at once when a window
    # shows a thread the last dump did not list, else this often (a renamed thread, idle flags)
    threads_every_s: float = 30.0
    proc_every_s: float = 1.0    # psutil poll of the process, its workers and the host
    cpu_every_s: float = 0.02    # main thread's on-CPU/run-queue time (tells computing from waiting)
    mem_every_s: float = 0.05    # the process's RSS (statm), to tell in which phase memory grows
    gpu_every_s: float = 1.0     # NVML poll of devices and their processes


class Sampler:
    """Samples one target process until stopped or until the target exits."""

    def __init__(self, pid: int, binary: str, config: SamplerConfig | None = None,
                 rates: RateGovernor | None = None) -> None:
        self.pid = pid
        self.writer = FrameWriter(None)
        self.config = config or SamplerConfig()
        self.binary = binary   # py-spy (pyspy.find_pyspy)
        self.rates = rates     # each window's rate, when it may change (agent/rate.py); else config.rate_hz
        self._rate_hz = self.config.rate_hz          # the rate of the windows emitted so far
        self._window_rates: dict[int, Rate] = {}     # the rate each running window was started at
        self.target: TargetInfo | None = None
        self.exit_reason: str | None = None
        self._tmp: Path | None = None   # run()'s folder for the windows, so a sampler that never runs leaves none
        self._window_index = 0
        self._covered_until: int | None = None
        self._failures = 0
        self._sampled = False        # a window has given spans (py-spy works on this process)
        self._resume_at = 0.0        # monotonic time before which no window starts (a pause)
        self._status: int | None = None
        self._names: ThreadNames | None = None   # set in begin(): names across this target's dumps
        self._sources_seen: set[str] = set()     # files whose source was sent (or could not be)
        self._threads_known: set[int] = set()    # the thread idents a dump listed, or one was asked for
        self._dump_due = False                   # a window showed a thread no dump has listed yet
        self._watch: TargetWatch | None = None   # set in begin(): is it still the job, is it running
        self._stops: deque[list[int | None]] = deque(maxlen=STOPS_KEPT)   # [from, to or None] ns, stopped
        self._foreign = False    # the PID is no longer the job's (reused, exec): nothing more is emitted
        self._over = False       # the watch saw the job end (exit, reuse, exec): said once, never looked at again

    # -- set-up -------------------------------------------------------------------------

    def probe(self) -> list[ThreadDump]:
        """Check the target and take one dump; raises TargetError or PySpyError."""
        self.target = inspect_target(self.pid)
        return dump(self.binary, self.pid)

    def begin(self, writer: FrameWriter, threads: list[ThreadDump]) -> None:
        """Start this target's part of the stream on ``writer``: the target and its threads."""
        self.writer = writer
        target = self.target = self.target or inspect_target(self.pid)
        self._names = ThreadNames(self.pid, target.exe)
        self._watch = TargetWatch(self.pid)
        self.writer.write({
            "k": "target", "t": time.time_ns(), "pid": self.pid, "exe": target.exe,
            "cmd": list(target.cmd), "nspid": list(target.nspid),
            "started": target.started_ns, "mem_limit": target.memory_limit,
            **{k.lower(): v for k, v in target.rank_env.items()},
        })
        self._write_threads(threads)

    # -- the loop -----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> str:
        """Sample until ``stop`` is set or the target exits; returns why it ended.

        A bug that raises in here ends this sampler only, and as data: an error frame saying
        what failed and where, and the exit reason "failed" (never a traceback over the TUI)."""
        try:
            return self._sample(stop)
        except Exception as exc:
            self.exit_reason = "failed"
            self._error("sampler_failed", crash_message(self.pid, exc))
            return "failed"

    def _sample(self, stop: threading.Event) -> str:
        cfg = self.config
        windows: deque[RecordWindow] = deque()
        # when each running window is to be stopped; keyed by the window itself (an id() would be
        # reused by a later window once this one is freed, which then stopped at once)
        stop_at: dict[RecordWindow, float] = {}
        next_start = started = began = time.monotonic()
        opened = 0
        next_threads = next_start + cfg.threads_every_s
        next_proc = next_start
        poller = ProcPoller(self.pid)
        cpu = ThreadCpu(self.pid)
        recorders_cpu = SamplerCpu(self.pid)
        mem = RssTrace(self.pid)
        next_mem = next_start
        tmp = self._tmp = Path(tempfile.mkdtemp(prefix="traceml-"))
        next_cpu = next_start
        costs = CpuParts()   # this thread's CPU by part (agent/cost.py)
        next_cost = next_start + COST_EVERY_S
        reason = "stopped"
        watch = self._watch = self._watch or TargetWatch(self.pid)
        try:
            while not stop.is_set():
                now = time.monotonic()
                if now >= next_cpu:   # first: no window may start on a process that is no longer the job
                    next_cpu = now + cfg.cpu_every_s
                    with costs.part("counters"):
                        cpu.read()
                        recorders_cpu.read(pid for pid in (w.recorder_pid for w in windows) if pid is not None)
                    with costs.part("spawn"):
                        for window in windows:
                            window.settle()
                    with costs.part("watch"):
                        ended = self._ended()   # an exit, a zombie's status with it
                    if ended:
                        reason = "target_exited"
                        return reason
                # a new rate starts with a new window at once, once the one running is past its
                # own start-up and alone (not handing over)
                early = (len(windows) == 1 and windows[0] not in stop_at and now - started >= cfg.overlap_s
                         and self.rates is not None and self.rates.pending(self.pid))
                if (now >= next_start or early) and now >= self._resume_at:
                    if windows:
                        stop_at[windows[-1]] = now + cfg.overlap_s
                    with costs.part("spawn"):
                        windows.append(self._start_window())
                    opened += 1   # the first window is short: a first look soon after attaching
                    next_start = now + self._window_length(opened, now - began) - cfg.overlap_s
                    started = now
                for window in windows:
                    if now >= stop_at.get(window, math.inf):
                        window.stop()
                while windows and not windows[0].running():
                    finished = windows.popleft()
                    stop_at.pop(finished, None)
                    with costs.part("parse"):
                        finished_ok = self._finish(finished)
                    if not finished_ok:
                        reason = "pyspy_failed"
                        return reason
                if now >= next_mem:
                    next_mem = now + cfg.mem_every_s
                    with costs.part("rss"):
                        mem.read()
                if now >= next_proc:   # the 20 ms branch above has just looked at the target
                    next_proc = now + cfg.proc_every_s
                    with costs.part("proc"):
                        # looked at again first: this thread may have been paused since (a loaded
                        # machine), and psutil reads whatever process has the PID now
                        frame = None if self._ended() else poller.poll()
                    if frame is None:
                        reason = "target_exited"
                        return reason
                    self.writer.write(frame)
                    self.writer.write(cpu.frame())
                    self.writer.write(recorders_cpu.frame())
                    self.writer.write(mem.frame())
                if now >= next_cost:
                    next_cost = now + COST_EVERY_S
                    self.writer.write(costs.frame(self.pid))
                if now >= next_threads or self._dump_due:
                    next_threads = now + cfg.threads_every_s
                    self._dump_due = False
                    with costs.part("dump"):
                        self._poll_threads()
                # a plain sleep: Event.wait's Condition costs 40 µs of CPU more a call here (124
                # against 84), 50 times a second; ``stop`` is looked at within 20 ms all the same
                time.sleep(0.02)
            return reason
        finally:
            for window in windows:
                window.stop()
            for window in windows:
                if self._foreign:   # it may have read the process that now has the PID: never emitted
                    window.kill()
                    window.collect()
                else:
                    self._finish(window, cut_short=True)
            self.writer.write(cpu.frame())   # the CPU counters up to the end, exit included
            self.writer.write(recorders_cpu.frame())
            cpu.close()
            recorders_cpu.close()
            watch.close()
            mem.close()
            self.writer.write(costs.frame(self.pid))
            self.writer.write(mem.frame())
            if reason == "target_exited":
                self.writer.write({"k": "exit", "t": time.time_ns(), "pid": self.pid,
                                   "status": self._status})
            if self.rates is not None:
                self.rates.forget(self.pid)
            self.exit_reason = reason
            _remove_dir(tmp)

    def _window_length(self, opened: int, sampled_s: float) -> float:
        """How long the ``opened``-th window runs, started ``sampled_s`` after this rank's first."""
        cfg = self.config
        if opened == 1:
            return cfg.first_window_s
        return cfg.window_s if sampled_s < cfg.steady_after_s else max(cfg.window_s, cfg.steady_window_s)

    def _ended(self) -> bool:
        """True once the target is no longer the job's running process. Every path that reads the
        target asks this first, so what ended it (an exit, its PID reused, an exec) is found and
        recorded once, by the watch, and never read from whatever process has the PID now."""
        if not self._over:
            watch = self._watch = self._watch or TargetWatch(self.pid)
            self._over = self._changed(watch.look())
        return self._over

    def _changed(self, change: Change | None) -> bool:
        """Record what the watch saw; True when the target is no longer the job's running process
        (it exited, its PID was reused, it exec'd another program)."""
        if change is None:
            return False
        if change.kind == "exited":
            self._status = change.status
            return True
        if change.kind in ("reused", "exec"):
            self._foreign = True
            self._error(f"target_{change.kind}", change.message)
            return True
        if change.kind == "stopped":
            self._stops.append([change.ts_ns, None])
        elif self._stops:
            self._stops[-1][1] = change.ts_ns
        self.writer.write({"k": "pstate", "t": change.ts_ns, "pid": self.pid, "stopped": change.kind == "stopped",
                           "why": change.message})
        if change.kind == "resumed":
            self._error("target_stopped", change.message)
        return False

    def _start_window(self) -> RecordWindow:
        self._window_index += 1
        cfg = self.config
        # --duration is only a safety net: the loop stops each window itself, and a
        # recorder outliving a crashed attacher ends on its own soon after.
        max_s = math.ceil(max(cfg.window_s, cfg.steady_window_s) + cfg.overlap_s) + 2
        assert self._tmp is not None, "windows start only inside run()"
        out = self._tmp / f"w{self._window_index}.json"
        rate = self.rates.rate_for(self.pid) if self.rates is not None else Rate(cfg.rate_hz)
        self._window_rates[self._window_index] = rate
        return RecordWindow(self.binary, self.pid, rate.rate_hz, max_s, out, self._window_index)

    def _finish(self, window: RecordWindow, cut_short: bool = False) -> bool:
        """Read a finished window and emit its frames; False when sampling must stop.

        A window ``cut_short`` by the end of sampling may have been stopped before py-spy had
        attached: no output then is no failure."""
        result = window.collect()
        index = window.index
        rate = self._window_rates.pop(index, Rate(self._rate_hz))
        if result.failure is not None and not result.spans:
            if cut_short or self._gone():
                return True
            self._error(result.failure.kind, str(result.failure))
            self._failures += 1
            if result.failure.kind in FATAL_KINDS:
                return False
            if self._failures < MAX_CONSECUTIVE_FAILURES:
                return True
            if not self._sampled:
                return False   # py-spy never worked on this process: it will not start to
            # It worked before (a loaded machine, a target busy in a long native call): pause,
            # longer after each further failure, and try again for as long as the target lives.
            pause = min(self.config.window_s * 2 ** (self._failures - MAX_CONSECUTIVE_FAILURES), MAX_PAUSE_S)
            self._resume_at = time.monotonic() + pause
            self._error("sampling_paused", f"{self._failures} py-spy windows in a row failed on process {self.pid}: "
                        f"sampling pauses for {pause:.0f} s and tries again")
            return True
        self._failures = 0
        self._sampled = True
        self._emit_window(index, result, rate)
        return True

    def _emit_window(self, index: int, result: WindowResult, rate: Rate) -> None:
        start = self._covered_until
        if rate.rate_hz != self._rate_hz:
            # this window's spans are kept from where the last one ended (``_clip``): the new rate
            # holds from there on, and the frame comes before the spans it applies to
            self._rate_hz = rate.rate_hz
            self.writer.write({"k": "rate", "t": start if start is not None else result.first_ns or time.time_ns(),
                               "pid": self.pid, "rate_hz": rate.rate_hz, "why": rate.why,
                               **({"refines": True} if rate.refines else {})})
        spans = [_clip(span, start) for span in result.spans]
        kept = [piece for span in spans if span is not None for piece in _running(span, self._stops)]
        rows = [(span.tid, span.ts_ns, span.dur_ns,
                 [(name, path, line, *source.describe(self.pid, path, line)) for name, path, line in span.frames])
                for span in kept]
        if rows:
            self._send_sources(kept)
            self.writer.write_spans(self.pid, index, rows)
            new = {span.tid for span in kept} - self._threads_known
            if new:   # named by a dump at once, each asked for once (a dump may not list it: it ended)
                self._threads_known |= new
                self._dump_due = True
        self.writer.write({"k": "window", "pid": self.pid, "w": index,
                           "start": result.first_ns, "end": result.last_ns,
                           "samples": result.samples, "errors": result.errors,
                           # py-spy counts a sample for each thread it reads: the threads its trace
                           # holds, and the time each was there in all (short-lived threads count for
                           # their lives), give the rate it reached
                           **_threads_seen(result.spans)})
        if result.last_ns is not None:
            self._covered_until = max(self._covered_until or 0, result.last_ns)

    def _send_sources(self, spans: list[RawSpan]) -> None:
        """A ``source`` frame for each file of the job's own code seen for the first time (the
        analysis reads the training loop's source for what keeps tensors across steps)."""
        for span in spans:
            for _, path, _ in span.frames:
                if path in self._sources_seen or len(self._sources_seen) >= source.SOURCE_FILES_SENT:
                    continue
                self._sources_seen.add(path)
                text = source.user_file(self.pid, path)
                if text is not None:
                    self.writer.write({"k": "source", "t": time.time_ns(), "pid": self.pid, "file": path,
                                       "text": text})

    def _gone(self) -> bool:
        """True once the target has exited; catches its exit status while it is a zombie."""
        if self._ended():
            return True
        status = exit_status(self.pid)
        if status is not None:
            self._status = status
            return True
        return not os.path.exists(f"/proc/{self.pid}")

    def _poll_threads(self) -> None:
        if self._ended():
            return
        try:
            threads = dump(self.binary, self.pid)
            if not self._ended():   # the dump is of the job only if the job still has the PID after it
                self._write_threads(threads)
        except PySpyError as exc:
            if not self._gone():
                self._error(exc.kind, str(exc))

    def _write_threads(self, threads: list[ThreadDump]) -> None:
        if self._names is not None:
            threads = self._names(threads)
        rows = [[t.tid, t.os_tid, t.name, t.active] for t in threads]
        self._threads_known.update(t.tid for t in threads)
        self.writer.write({"k": "threads", "pid": self.pid, "t": time.time_ns(), "threads": rows})

    def _error(self, kind: str, message: str) -> None:
        self.writer.write({"k": "error", "t": time.time_ns(), "pid": self.pid,
                           "kind": kind, "msg": message})


def crash_message(pid: int, exc: BaseException, frames: int = 3) -> str:
    """One line: the exception and the innermost ``frames`` of its traceback, innermost first."""
    where = traceback.extract_tb(exc.__traceback__)[-frames:]
    at = " <- ".join(f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in reversed(where))
    return f"the sampler of process {pid} crashed: {type(exc).__name__}: {exc} (at {at})"


def _clip(span: RawSpan, start: int | None) -> RawSpan | None:
    if start is None or span.ts_ns >= start:
        return span
    end = span.ts_ns + span.dur_ns
    if end <= start:
        return None
    return RawSpan(span.tid, start, end - start, span.frames)


def _running(span: RawSpan, stops: Iterable[list[int | None]]) -> list[RawSpan]:
    """The parts of ``span`` outside the stretches its process was stopped ([from, to or None] ns):
    py-spy reads a stopped process as if it were still in the place it stopped."""
    pieces = [span]
    for begin, end in stops:
        assert begin is not None
        stop_end = end if end is not None else 1 << 63
        out = []
        for piece in pieces:
            piece_end = piece.ts_ns + piece.dur_ns
            if piece_end <= begin or piece.ts_ns >= stop_end:
                out.append(piece)
                continue
            if piece.ts_ns < begin:
                out.append(RawSpan(piece.tid, piece.ts_ns, begin - piece.ts_ns, piece.frames))
            if piece_end > stop_end:
                out.append(RawSpan(piece.tid, stop_end, piece_end - stop_end, piece.frames))
        pieces = out
    return pieces


class RssTrace:
    """The process's resident set size, read from statm every few tens of ms and batched: fine
    enough to tell in which phase of a step memory grows (its workers' come with ``proc``)."""

    def __init__(self, pid: int) -> None:
        self._file = Reread(f"/proc/{pid}/statm")
        self.pid = pid
        self._rows: list[list[int]] = []

    def read(self) -> None:
        try:
            resident = int((self._file.read() or "").split()[1])
        except (ValueError, IndexError):
            return
        self._rows.append([time.time_ns(), resident * PAGE_BYTES])

    def close(self) -> None:
        self._file.close()

    def frame(self) -> dict[str, Any]:
        rows, self._rows = self._rows, []
        return {"k": "mem", "pid": self.pid, "samples": rows}


PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def _schedstat(file: Reread) -> tuple[int, int] | None:
    """(on-CPU ns, run-queue ns) of a schedstat file."""
    text = file.read()
    try:
        on_cpu, runq, _ = (text or "").split()
        return int(on_cpu), int(runq)
    except ValueError:
        return None


class ThreadCpu:
    """The main thread's cumulative on-CPU and run-queue nanoseconds (schedstat), batched.

    Wall time minus both is time the thread was blocked: waiting for data, a collective or
    a device, as opposed to computing or waiting for a core.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._file = Reread(f"/proc/{pid}/task/{pid}/schedstat")
        self._rows: list[list[int]] = []

    def read(self) -> None:
        counters = _schedstat(self._file)
        if counters is not None:
            self._rows.append([time.time_ns(), *counters])

    def close(self) -> None:
        self._file.close()

    def frame(self) -> dict[str, Any]:
        rows, self._rows = self._rows, []
        return {"k": "tcpu", "pid": self.pid, "tid": self.pid, "samples": rows}


class SamplerCpu:
    """The recorders' own on-CPU and run-queue nanoseconds: every thread of the py-spy processes
    sampling this target (schedstat), summed per process; cumulative, read with the main
    thread's counters, batched.

    A recorder that waits for a core takes no sample meanwhile, and the span it had open swallows
    that time: a drop-out, which can hide step boundaries. A long span through which it waited
    for no core is the job's own (one slow step: a garbage collection, a checkpoint). Where two
    recorders overlap at a hand-over, each reading adds the larger of their increments.
    """

    TASKS_EVERY = 25   # a recorder's threads are listed again every this many reads (0.5 s)

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._last: dict[int, tuple[int, int]] = {}     # recorder pid -> its last (on, run-queue)
        # recorder pid -> (reads until its threads are listed again, their schedstat files)
        self._tasks: dict[int, tuple[int, dict[str, Reread]]] = {}
        self._on = self._queued = 0
        self._rows: list[list[int]] = []

    def _counters(self, recorder: int) -> tuple[int, int] | None:
        countdown, files = self._tasks.get(recorder, (0, {}))
        if countdown <= 0:
            try:
                paths = {f"/proc/{recorder}/task/{tid}/schedstat" for tid in os.listdir(f"/proc/{recorder}/task")}
            except OSError:
                return None
            for path in set(files) - paths:
                files.pop(path).close()
            for path in paths - set(files):
                files[path] = Reread(path)
            countdown = self.TASKS_EVERY
        self._tasks[recorder] = (countdown - 1, files)
        on = queued = read = 0
        for file in files.values():
            counters = _schedstat(file)
            if counters is not None:   # else a thread that ended since it was listed
                on, queued, read = on + counters[0], queued + counters[1], read + 1
        return (on, queued) if read else None   # none read: no reading (not a fall to zero)

    def read(self, recorders: Iterable[int]) -> None:
        on_step = queued_step = 0
        alive = set()
        for recorder in recorders:
            now = self._counters(recorder)
            if now is None:
                continue
            alive.add(recorder)
            last = self._last.get(recorder)
            self._last[recorder] = now
            if last is not None:
                on_step = max(on_step, now[0] - last[0])
                queued_step = max(queued_step, now[1] - last[1])
        for gone in set(self._tasks) - alive:
            self._last.pop(gone, None)
            for file in self._tasks.pop(gone)[1].values():
                file.close()
        self._on += max(on_step, 0)
        self._queued += max(queued_step, 0)
        self._rows.append([time.time_ns(), self._on, self._queued])

    def frame(self) -> dict[str, Any]:
        rows, self._rows = self._rows, []
        return {"k": "scpu", "pid": self.pid, "samples": rows}

    def close(self) -> None:
        for _, files in self._tasks.values():
            for file in files.values():
                file.close()
        self._tasks.clear()


def _remove_dir(path: Path) -> None:
    for child in path.glob("*"):
        child.unlink(missing_ok=True)
    try:
        path.rmdir()
    except OSError as exc:
        print(f"traceml: could not remove {path}: {exc}", file=sys.stderr)


def _threads_seen(spans: list[RawSpan]) -> dict[str, int | None]:
    """The window frame's ``threads`` (those its trace holds) and ``thread_ns`` (the time each was
    seen, first span's start to last span's end, summed over them)."""
    lives: dict[int, tuple[int, int]] = {}
    for span in spans:
        first, last = lives.get(span.tid, (span.ts_ns, span.ts_ns + span.dur_ns))
        lives[span.tid] = (min(first, span.ts_ns), max(last, span.ts_ns + span.dur_ns))
    return {"threads": len(lives) or None, "thread_ns": sum(b - a for a, b in lives.values()) or None}
