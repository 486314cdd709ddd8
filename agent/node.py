"""The node agent: one Sampler per rank, re-scanning the launcher for replaced workers.

One py-spy per rank, not one per node with --subprocesses: measured in docs/how-it-works.md
(per-rank windows attach to exactly the ranks, and --subprocesses mixes up the events
of forked DataLoader workers, which share their parent's thread idents).
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from traceml_agent import __version__
from traceml_agent.cost import COST_EVERY_S, process_frame
from traceml_agent.discovery import Plan, RankProc, ranks_below
from traceml_agent.nvml import Nvml
from traceml_agent.procstats import host_frame
from traceml_agent.pyspy import PySpyError, find_pyspy, pyspy_version
from traceml_agent.rate import RateGovernor
from traceml_agent.sampler import FATAL_KINDS, Sampler, SamplerConfig
from traceml_agent.target import TargetError
from traceml_agent.threads import ThreadDump
from traceml_agent.wire import WIRE_VERSION
from traceml_agent.writer import FrameWriter

RESCAN_EVERY_S = 1.0
PROBE_RETRY_S = 0.3    # a rank whose first dump failed for a reason that may pass is probed again after this
MAX_ATTACH_TRIES = 5   # a new worker that cannot be attached (it may still be starting) is tried this often
FAILED_REASONS = {"failed", "pyspy_failed"}   # a sampler's exit reasons that mean sampling itself failed


Probed = tuple[RankProc, Sampler, list[ThreadDump]]   # a rank, its sampler and its first thread dump


def hello_frame(config: SamplerConfig, backend_version: str | None, argv: list[str]) -> dict[str, Any]:
    """A stream's first frame: who sampled, with what and how fast (``backend_version`` None: a
    collector whose ranks' agents are on other nodes). ``rate_hz`` is every process's first rate;
    up to ``max_rate_hz`` a process's ``rate`` frames say when and why it changed."""
    return {
        "k": "hello", "v": WIRE_VERSION, "t": time.time_ns(), "agent": __version__,
        "backend": "py-spy", "backend_version": backend_version,
        "rate_hz": config.rate_hz, "max_rate_hz": max(config.max_rate_hz or 0, config.rate_hz),
        "window_s": config.window_s, "host": socket.gethostname(), "argv": argv,
    }


@dataclass
class _Running:
    rank: RankProc
    sampler: Sampler
    thread: threading.Thread


@dataclass
class NodeAgent:
    """Samples every rank of ``plan`` until ``stop`` is set or nothing is left to sample."""

    plan: Plan
    config: SamplerConfig
    writer: FrameWriter
    argv: list[str]
    running: dict[int, _Running] = field(default_factory=dict)  # by pid
    seen_ranks: dict[int, int] = field(default_factory=dict)    # rank -> latest pid
    failures: list[str] = field(default_factory=list)
    refused: dict[int, int] = field(default_factory=dict)       # pid -> failed attempts, until one attaches
    nvml: Nvml = field(default_factory=Nvml)
    due: dict[str, float] = field(default_factory=dict)         # tick(): next run of each job (monotonic)
    binary: str = ""                 # py-spy, found by probe()
    backend_version: str = ""
    rates: RateGovernor | None = None   # the ranks' rates when they may change (config.max_rate_hz)

    def __post_init__(self) -> None:
        top = self.config.max_rate_hz or self.config.rate_hz
        if self.rates is None and top > self.config.rate_hz:
            self.rates = RateGovernor(self.config.rate_hz, top)

    def probe(self) -> list[Probed]:
        """Probe every rank; raises the first error when no rank can be sampled at all."""
        self.binary = find_pyspy()
        self.backend_version = pyspy_version(self.binary)
        ready: list[Probed] = []
        first_error: TargetError | PySpyError | None = None
        for rank in self.plan.ranks:
            try:
                ready.append((rank, *self._attach(rank)))
            except PySpyError as exc:
                if exc.kind in FATAL_KINDS:
                    first_error = first_error or exc
                    self.failures.append(f"rank {rank.rank} (pid {rank.pid}): {exc}")
                    continue
                # a process caught while its interpreter starts ("Failed to copy PyCodeObject"):
                # once more, a moment later
                time.sleep(PROBE_RETRY_S)
                try:
                    ready.append((rank, *self._attach(rank)))
                except (TargetError, PySpyError) as again:
                    first_error = first_error or again
                    self.failures.append(f"rank {rank.rank} (pid {rank.pid}): {again}")
            except TargetError as exc:
                first_error = first_error or exc
                self.failures.append(f"rank {rank.rank} (pid {rank.pid}): {exc}")
        if not ready and first_error is not None:
            raise first_error
        return ready

    def _attach(self, rank: RankProc) -> tuple[Sampler, list[ThreadDump]]:
        """A sampler for ``rank`` and its first thread dump; a failure is counted in ``refused``."""
        sampler = Sampler(rank.pid, self.binary, self.config, self.rates)
        try:
            threads = sampler.probe()
        except (TargetError, PySpyError) as exc:
            fatal = exc.kind in FATAL_KINDS
            self.refused[rank.pid] = MAX_ATTACH_TRIES if fatal else self.refused.get(rank.pid, 0) + 1
            raise
        self.refused.pop(rank.pid, None)   # a rank caught while its interpreter started, attached since
        return sampler, threads

    def hello(self) -> dict[str, Any]:
        return hello_frame(self.config, self.backend_version, self.argv)

    def start(self, probed: list[Probed], stop: threading.Event) -> None:
        self.writer.write(self.hello())
        for rank, sampler, threads in probed:
            self._launch(rank, sampler, threads, stop)

    def _launch(self, rank: RankProc, sampler: Sampler, threads: list[ThreadDump], stop: threading.Event) -> None:
        previous = self.seen_ranks.get(rank.rank) if rank.rank is not None else None
        if previous is not None and previous != rank.pid:
            self.writer.write({"k": "restart", "t": time.time_ns(), "rank": rank.rank,
                               "old_pid": previous, "pid": rank.pid})
        if rank.rank is not None:
            self.seen_ranks[rank.rank] = rank.pid
        sampler.begin(self.writer, threads)
        thread = threading.Thread(target=sampler.run, args=(stop,), name=f"traceml-rank-{rank.rank}",
                                  daemon=True)
        self.running[rank.pid] = _Running(rank, sampler, thread)
        thread.start()

    def rescan(self, stop: threading.Event) -> None:
        """Attach to ranks that appeared under the launcher (elastic restarts)."""
        if self.plan.launcher is None:
            return
        for rank in ranks_below(self.plan.launcher):
            if rank.pid in self.running or self.refused.get(rank.pid, 0) >= MAX_ATTACH_TRIES:
                continue
            first_try = rank.pid not in self.refused
            try:
                sampler, threads = self._attach(rank)
            except (TargetError, PySpyError) as exc:
                # a worker may be caught while it starts: it is tried again a few times, reported once
                if first_try or exc.kind in FATAL_KINDS:
                    self.writer.write({"k": "error", "t": time.time_ns(), "pid": rank.pid, "kind": exc.kind,
                                       "msg": str(exc)})
                continue
            self._launch(rank, sampler, threads, stop)

    def active(self) -> bool:
        """Anything left to sample: a live sampler, or a launcher that may start new workers."""
        if any(r.thread.is_alive() for r in self.running.values()):
            return True
        if self.plan.launcher is None or self.sampling_failed():
            return False
        try:
            return psutil.Process(self.plan.launcher).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def join(self) -> None:
        for r in self.running.values():
            r.thread.join()
        self.nvml.close()
        self.writer.write(process_frame())   # what the whole attach cost, py-spy included

    def tick(self, stop: threading.Event) -> None:
        """Periodic node work: host stats and launcher re-scans (call every ~0.1 s)."""
        now, state = time.monotonic(), self.due
        if now >= state.get("host", 0.0):
            first = "host" not in state
            state["host"] = now + self.config.proc_every_s
            if first:   # psutil keeps the host CPU baseline per thread: the first reading would be 0
                psutil.cpu_percent(None)
            else:
                self.writer.write(host_frame())
        if now >= state.get("gpu", 0.0):
            state["gpu"] = now + self.config.gpu_every_s
            frame = self.nvml.poll()
            if frame is not None:
                self.writer.write(frame)
        if now >= state.get("rescan", 0.0):
            state["rescan"] = now + RESCAN_EVERY_S
            self.rescan(stop)
        state.setdefault("cost", now + COST_EVERY_S)
        if now >= state["cost"]:
            state["cost"] = now + COST_EVERY_S
            self.writer.write(process_frame())

    def advise(self, pid: int, rate_hz: int, why: str, seen_at_hz: int | None = None, refines: bool = False) -> None:
        """The analysis's advice on ``pid``'s rate, drawn from its data at ``seen_at_hz``: its
        sampler decides at its next window (agent/rate.py); nothing happens when the rate is fixed
        or ``pid`` is not sampled here."""
        if self.rates is not None and pid in self.running:
            self.rates.advise(pid, rate_hz, why, seen_at_hz, refines)

    def exit_reasons(self) -> set[str]:
        return {r.sampler.exit_reason or "stopped" for r in self.running.values()}

    def sampling_failed(self) -> bool:
        """Every sampler has ended, each because sampling failed (py-spy, or a sampler that
        crashed), none because its target exited or the session stopped."""
        reasons = self.exit_reasons()
        return bool(reasons) and reasons <= FAILED_REASONS
