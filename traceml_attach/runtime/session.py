"""One attach session: start the samplers, feed the recording, write the summary at the end.

Two threads of ours run a session. The one that calls ``run`` drives the samplers (and the
psutil/NVML polls) and nothing else, so a slow analysis never delays sampling. The analysis
thread (``Analyst``) owns the recording: it drains the frames the samplers wrote into the
pipeline (bounded recording + history), analyses the live window every tick and writes the
summaries asked for. After ``run`` returns, the recording is the caller's.
"""

from __future__ import annotations

import argparse
import queue
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traceml_agent.link import LinkError, endpoint
from traceml_agent.node import NodeAgent, Probed, hello_frame
from traceml_agent.sampler import SamplerConfig
from traceml_agent.writer import FrameWriter
from traceml_attach.collect.launcher import WILDCARDS, AgentLaunch, LaunchError
from traceml_attach.collect.merge import node_frame
from traceml_attach.collect.server import Collector
from traceml_attach.diagnose.analysis import Analysis
from traceml_attach.diagnose.incremental import Tracked
from traceml_attach.diagnose.rate import advise_rates
from traceml_attach.diagnose.window import WindowAdvice, advise_window
from traceml_attach.errors import (
    EXIT_NETWORK,
    EXIT_NOT_WRITTEN,
    EXIT_OK,
    EXIT_TARGET_EXITED,
    EXIT_USAGE,
    KIND_TO_EXIT,
    CliError,
)
from traceml_attach.ingest.stream import Recording
from traceml_attach.output.report import Written, write_summary_somewhere
from traceml_attach.output.summary import Summary, build_summary
from traceml_attach.runtime.heap import FrozenHeap, release_free_memory
from traceml_attach.runtime.pipeline import Pipeline
from traceml_attach.runtime.shutdown import stop_handler
from traceml_attach.runtime.targets import probe_ranks, run_dir
from traceml_attach.steps.classify import Rules

if TYPE_CHECKING:
    from traceml_attach.output.prometheus import MetricsServer

Tick = Callable[[Recording, Analysis, float], None]


@dataclass
class SessionResult:
    run_dir: Path
    summary: Summary
    text: str
    code: int
    where: str = ""                  # "summary written to ...", or where it went instead (summary_line)
    loss: str | None = None          # what the run folder lost (a full disk, a read-only folder), one line

    def where_line(self) -> str:
        """One line for stderr: what the run folder lost, if anything, and where the summary is."""
        return (f"{self.loss}; " if self.loss else "") + self.where


def summary_line(run_dir: Path, written: Written) -> str:
    """Where a session's summary is, said for stderr: its run folder, elsewhere, or nowhere."""
    if written.folder is None:
        return "the summary could be written nowhere: the text above is all there is"
    return f"summary written to {written.folder / 'final_summary.json'}" + (
        " instead" if written.folder != run_dir else "")


class Session:
    """The sampler of every rank of ``args.pid``, the recording it feeds and the run folder.

    Construction checks the targets and starts nothing that outlives a failure: every problem a
    user can cause is raised as CliError before sampling begins. ``run`` samples until ``stop``
    is set, the duration passes or the job ends; it and ``summarize`` touch the recording, so
    both belong to one thread. ``finish`` writes the summary.
    """

    def __init__(self, args: argparse.Namespace, rules: Rules) -> None:
        self.rules = rules
        pids: list[int] = args.pid or []
        self.node: NodeAgent | None = None
        self.collector: Collector | None = None
        self.expect_nodes: int | None = getattr(args, "expect_nodes", None)
        self._probed: list[Probed] = []
        cmd: tuple[str, ...] = ()
        if pids:
            self.node, self._probed = probe_ranks(pids, args.rate, lambda line: print(f"traceml: {line}",
                                                                                       file=sys.stderr),
                                                  getattr(args, "max_rate", None))
            first = self._probed[0][1].target
            cmd = first.cmd if first else ()
        if getattr(args, "listen", None):
            self.collector = open_collector(args)
        name = args.run_name
        if name is None and not pids and self.collector is not None:
            name = f"nodes-{self.collector.port}-{time.strftime('%Y%m%d-%H%M%S')}"
        self.metrics: MetricsServer | None = None
        try:
            if getattr(args, "prometheus", None):   # before the run folder: a taken port leaves none behind
                self.metrics = open_metrics(*args.prometheus)
            self.run_dir = run_dir(Path(args.logs_dir), name, cmd, pids[0] if pids else 0)
            self.writer = FrameWriter(self.run_dir / "frames.msgpack", int(args.max_recording_mb * 1_000_000) or None)
        except OSError as exc:
            self._close_listeners()
            raise CliError(f"cannot write a run folder under {args.logs_dir}: {exc.strerror or exc}; give --logs-dir "
                           "DIR on a disk you can write to", EXIT_NOT_WRITTEN) from exc
        except BaseException:
            self._close_listeners()
            raise
        if self.node is not None:
            self.node.writer = self.writer
        if self.collector is not None:
            self.collector.record_to(self.writer)
        self._inbox: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self.writer.listen(self._inbox.put)
        self.pipeline = Pipeline(rules)
        self.rate_hz: int = args.rate
        self._advised: Tracked | None = None   # the tracked window the rates were last advised from
        self.ran_out = False
        self._local_ended = False
        self._all_joined_at: float | None = None
        self.end_reason = "stopped"   # stopped | duration | target_exited | sampling_failed
        self.quiet: bool = getattr(args, "quiet", False)
        # a snapshot of the default length asks the analysis thread whether to sample on
        # (``_longer``): the lengths asked about, and the advice once answered
        self._window_asked: tuple[float, float] | None = None
        self._window_answered = threading.Event()
        self._window_advice: WindowAdvice | None = None
        self.launch: AgentLaunch | None = None
        if self.collector is not None and getattr(args, "launch", None):
            try:
                self.launch = AgentLaunch.start(args.launch, self.collector.host, self.collector.port,
                                                Path(args.token_file).expanduser(), args.rate, self.run_dir,
                                                self.writer, lambda line: print(f"traceml: {line}", file=sys.stderr))
            except LaunchError as exc:
                self._close_listeners()
                self.writer.close()
                raise CliError(str(exc), EXIT_USAGE) from exc

    def _close_listeners(self) -> None:
        """A session that failed to start: its ports and their threads go with it."""
        if self.collector is not None:
            self.collector.close()
        if self.metrics is not None:
            self.metrics.close()

    @property
    def rec(self) -> Recording:
        return self.pipeline.rec

    def run(self, stop: threading.Event, duration_s: float | None, on_tick: Tick | None, tick_s: float,
            most_s: float | None = None) -> None:
        """Sample until ``stop``, ``duration_s`` or the job's end; meanwhile the analysis thread
        calls ``on_tick`` every ``tick_s`` with the analysis of the last LIVE_WINDOW_S seconds.
        With ``most_s``, at ``duration_s`` the analysis may advise sampling on, up to ``most_s``
        in all (``_longer``)."""
        started = time.monotonic()
        self._begin(stop)
        analyst = Analyst(self, on_tick, tick_s, started)
        analyst.start()
        collecting = threading.Event()
        receiver = None
        if self.collector is not None:
            receiver = threading.Thread(target=self.collector.run, args=(collecting,), name="traceml-collector",
                                        daemon=True)
            receiver.start()
        try:
            while not stop.is_set():
                if self._ran_out():
                    self.ran_out = True
                    failed = self.node is not None and self.node.sampling_failed()
                    self.end_reason = "sampling_failed" if failed else "target_exited"
                    break
                clock_from = self._clock_from(started)
                elapsed = time.monotonic() - clock_from if clock_from is not None else 0.0
                if duration_s is not None and elapsed >= duration_s:
                    longer = None if most_s is None or self._window_asked else self._longer(duration_s, most_s, stop)
                    if longer is not None:
                        duration_s = longer
                        continue
                    if not stop.is_set() and self._ran_out():
                        continue   # the job ended while the analysis was asked: said so above
                    self.end_reason = "duration"
                    break
                if self.node is not None:
                    self.node.tick(stop)
                stop.wait(0.1)
        finally:
            stop.set()
            if self.collector is not None and receiver is not None:
                collecting.set()
                receiver.join()
                self.collector.end_session(self.end_reason if self.ran_out else "stopped")
                self.collector.close()
                if self.launch is not None:
                    self.launch.stop()
            analyst.join()
            if self.node is not None:
                self.node.join()
            reason = self.end_reason if self.ran_out else "stopped"
            self.writer.write({"k": "bye", "t": time.time_ns(), "reason": reason})
            self.writer.close()
            self.drain()
            if self.metrics is not None:
                self.metrics.close()

    def _longer(self, duration_s: float, most_s: float, stop: threading.Event) -> float | None:
        """The length to sample on to, where the analysis of the ``duration_s`` sampled advises
        it (diagnose/window.py), recorded as an ``extend`` frame and said on stderr; None where it
        does not, or the session ends meanwhile. The samplers go on while the analysis thread
        answers (``answer_window``)."""
        self._window_asked = (duration_s, most_s)
        while not self._window_answered.wait(0.1):
            if stop.is_set() or self._ran_out():
                return None
            if self.node is not None:
                self.node.tick(stop)
        advice = self._window_advice
        if advice is None or stop.is_set():
            return None
        self.writer.write({"k": "extend", "t": time.time_ns(), "from_s": duration_s, "to_s": advice.seconds,
                           "why": advice.why})
        if not self.quiet:
            print(f"traceml: {advice.why}: sampling on to {advice.seconds:.0f} s (--seconds N samples exactly N)",
                  file=sys.stderr, flush=True)
        return advice.seconds

    def answer_window(self) -> None:
        """The analysis thread's answer to ``_longer``, once asked: the advice on the newest
        window's analysis, every frame written so far folded in."""
        if self._window_asked is None or self._window_answered.is_set():
            return
        try:
            self.drain()
            elapsed, most = self._window_asked
            self._window_advice = advise_window(self.pipeline.window_analysis(), elapsed, most)
        finally:
            self._window_answered.set()

    def _begin(self, stop: threading.Event) -> None:
        """The stream's first frames: the hello (the local ranks' agent's, or the collector's own)."""
        if self.node is not None:
            self.node.start(self._probed, stop)
        else:
            self.writer.write(hello_frame(SamplerConfig(rate_hz=self.rate_hz), None, sys.argv))
        if self.node is not None and self.collector is not None:   # the local ranks are node 0
            self._local_node("joined")

    def _local_node(self, state: str, reason: str | None = None) -> None:
        assert self.node is not None
        ranks = [r.rank.rank for r in self.node.running.values() if r.rank.rank is not None]
        host = socket.gethostname()
        self.writer.write(node_frame(0, host, None, state, reason, host, self.rate_hz, self.node.backend_version, 0,
                                     ranks))

    def _clock_from(self, started: float) -> float | None:
        """When the duration starts to count: at once, or with --expect-nodes once that many nodes
        joined (at most JOIN_WAIT_S after the start); None while still waiting."""
        if self._all_joined_at is None:
            if self.collector is None or not self.expect_nodes:
                self._all_joined_at = started
            elif len(self.collector.nodes()) >= self.expect_nodes or time.monotonic() - started >= JOIN_WAIT_S:
                self._all_joined_at = time.monotonic()
        return self._all_joined_at

    def _ran_out(self) -> bool:
        """Nothing left to sample here, and every node's job has ended."""
        local_done = self.node is None or not self.node.active()
        if self.collector is None:
            return local_done
        if local_done and self.node is not None and not self._local_ended:
            self._local_ended = True
            self._local_node("ended", "target_exited")
        return local_done and self.collector.ended(self.expect_nodes)

    def drain(self, wait_s: float = 0.0, until: float | None = None) -> None:
        """Fold the frames written so far into the pipeline (waiting up to ``wait_s`` for one),
        or those that can be folded before the monotonic time ``until`` (the next tick's)."""
        try:
            frame = self._inbox.get(timeout=wait_s) if wait_s > 0 else self._inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            self.pipeline.add(frame)
            if until is not None and time.monotonic() >= until:
                return   # the rest after the tick: the view shows what was folded by then
            try:
                frame = self._inbox.get_nowait()
            except queue.Empty:
                return

    def advise_rates(self) -> None:
        """The analysis's advice on the local ranks' sampling rates, once per tracked window: their
        samplers decide, and record what they decided (agent/rate.py, diagnose/rate.py)."""
        node, tracked = self.node, self.pipeline.tracked
        if node is None or node.rates is None or tracked is None or tracked is self._advised:
            return
        self._advised = tracked
        for advice in advise_rates(self.rec, tracked.pids, tracked.timelines, tracked.end_ns):
            node.advise(advice.pid, advice.rate_hz, advice.why, advice.seen_at_hz, advice.refines)

    def live_analysis(self) -> Analysis:
        """The live window's analysis for a tick: the pipeline's newest tracked window, concluded
        (the summaries use the pipeline's batch analysis of the same window, which replays exactly)."""
        return self.pipeline.live_analysis()

    def summarize(self, final: bool = False) -> tuple[Summary, Written]:
        """Write the summary of what was recorded so far (the newest LIVE_WINDOW_S in detail,
        the session's history as rollups); the session goes on unless ``final``. Where the run
        folder cannot take it, it goes elsewhere (``Written`` says where)."""
        self.drain()
        if final:
            self.pipeline.finish()
        summary = build_summary(self.rec, self.pipeline.window_analysis(), self.run_dir.name)
        return summary, write_summary_somewhere(self.run_dir, summary)

    def loss(self, written: Written) -> str | None:
        """One line on what the run folder lost (the recording from a fault on, the summary), or None."""
        failure = self.writer.failure or written.problem
        if failure is None:
            return None
        at = self.writer.failed_at_ns
        stops = (f"frames.msgpack stops at {time.strftime('%H:%M:%S', time.localtime(at / 1e9))}" if at is not None
                 else "frames.msgpack is whole")
        return f"could not write into {self.run_dir} ({failure}): {stops}"

    def finish(self, duration_s: float | None) -> SessionResult:
        """Write the final summary; raise CliError when sampling itself failed."""
        summary, written = self.summarize(final=True)
        loss, where = self.loss(written), summary_line(self.run_dir, written)
        if self.node is not None and self.node.sampling_failed():
            last = next((e for e in reversed(self.rec.errors) if e.pid is not None), None)   # a sampler's
            message = last.message if last else "py-spy stopped working"
            raise CliError(f"sampling stopped: {message}; " + (f"{loss}; " if loss else "")
                           + where.replace("summary", "summary of what was seen", 1),
                           KIND_TO_EXIT.get(last.kind if last else "pyspy_failed", 6))
        if self.collector is not None:
            joined = len(self.collector.nodes())
            where = f"{self.collector.host}:{self.collector.port}"
            if joined == 0 and self.node is None:
                refused = self.collector.stats.refused_peers
                raise CliError(f"no agent joined on {where}" + (f" ({refused} connections refused: a wrong token "
                               "file?)" if refused else "") + f"; run `traceml agent --connect {where}` on each "
                               f"node; summary written to {written.folder or 'nowhere'}", EXIT_NETWORK)
            if self.expect_nodes and joined < self.expect_nodes:
                print(f"traceml: only {joined} of the {self.expect_nodes} expected nodes joined on {where}",
                      file=sys.stderr)
        cut_short = self.ran_out and duration_s is not None
        code = EXIT_NOT_WRITTEN if loss is not None else EXIT_TARGET_EXITED if cut_short else EXIT_OK
        return SessionResult(self.run_dir, summary, written.text, code, where, loss)


def open_collector(args: argparse.Namespace) -> Collector:
    """The collector of ``--listen`` (bound, its token file created if need be); CliError when not."""
    def note(line: str) -> None:
        print(f"traceml: {line}", file=sys.stderr)

    try:
        host, port = endpoint(args.listen)
        collector = Collector(host, port, Path(args.token_file).expanduser(), note)
    except LinkError as exc:
        raise CliError(str(exc), EXIT_NETWORK) from exc
    where = "every interface" if host in WILDCARDS else host
    note(f"listening for agents on {host}:{collector.port} ({where}); on each node run: traceml agent --pid auto "
         f"--connect <this host>:{collector.port} --token-file {args.token_file}")
    return collector


def open_metrics(host: str, port: int) -> MetricsServer:
    """The Prometheus endpoint of ``--prometheus HOST:PORT``, listening; CliError when it cannot."""
    from traceml_attach.output.prometheus import MetricsServer  # prometheus-client loads only for this

    try:
        metrics = MetricsServer(host, port)
    except OSError as exc:
        raise CliError(f"cannot serve Prometheus metrics on {host}:{port}: {exc.strerror or exc}; give a free port "
                       "with --prometheus HOST:PORT", EXIT_NETWORK) from exc
    shown = f"[{metrics.host}]" if ":" in metrics.host else metrics.host
    print(f"traceml: Prometheus metrics on http://{shown}:{metrics.port}/metrics"
          + (" (every interface)" if host in WILDCARDS else ""), file=sys.stderr)
    return metrics


JOIN_WAIT_S = 120.0   # --duration waits this long at most for --expect-nodes nodes to join
TRIM_EVERY_S = 30.0   # how often the analysis thread hands freed memory back (runtime/heap.py)


class Analyst(threading.Thread):
    """The analysis thread of a running session (see the module doc). A tick that raises is
    recorded as an ``analysis_failed`` error frame, with the end of its traceback, and the next
    tick tries again: the samplers and the recording go on either way."""

    def __init__(self, session: Session, on_tick: Tick | None, tick_s: float, started: float) -> None:
        super().__init__(name="traceml-analysis", daemon=True)
        self.session, self.on_tick, self.tick_s, self.started = session, on_tick, tick_s, started
        self.done = threading.Event()
        self.heap = FrozenHeap(started) if session.collector is not None else None

    def join(self, timeout: float | None = None) -> None:
        self.done.set()
        super().join(timeout)

    def run(self) -> None:
        next_tick = self.started + self.tick_s
        next_trim = self.started + TRIM_EVERY_S
        metrics = self.session.metrics
        ticking = self.on_tick is not None or metrics is not None
        first_look = False   # the first spans arrived: analysed at once, not at the next tick
        while not self.done.is_set():
            self.session.drain(wait_s=0.1, until=next_tick if ticking else None)
            if not first_look and self.session.rec.time_range() is not None:
                first_look = True
                next_tick = min(next_tick, time.monotonic())
            for advise in (self.session.advise_rates, self.session.answer_window):
                try:
                    advise()
                except Exception as exc:
                    self._failed(exc)
            if time.monotonic() >= next_trim:
                next_trim += TRIM_EVERY_S
                release_free_memory()
            if self.heap is not None:
                self.heap.tick(time.monotonic())
            if not ticking or time.monotonic() < next_tick:
                continue
            next_tick += self.tick_s
            try:
                analysis = self.session.live_analysis()
                if metrics is not None:
                    metrics.update(self.session.rec, analysis)
                if self.on_tick is not None:
                    self.on_tick(self.session.rec, analysis, time.monotonic() - self.started)
            except Exception as exc:
                self._failed(exc)
            # a tick that overran leaves half a period to drain the frames that came meanwhile,
            # rather than ticking again at once with them still queued
            next_tick = max(next_tick, time.monotonic() + self.tick_s / 2)
        if self.heap is not None:   # the session is over: the process's GC as it was
            self.heap.restore()

    def _failed(self, exc: Exception) -> None:
        """A tick (or an advice) that raised, as data: the next one tries again."""
        where = traceback.format_exception(exc)[-3:]
        self.session.writer.write({"k": "error", "t": time.time_ns(), "pid": None, "kind": "analysis_failed",
                                   "msg": f"{type(exc).__name__}: {exc} ({''.join(where).strip()})"})


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Ctrl-C, SIGTERM and a closed terminal (SIGHUP) end the session cleanly: the summary is
    still written."""
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, stop_handler(stop)) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_session(
    args: argparse.Namespace,
    rules: Rules,
    duration_s: float | None,
    on_tick: Tick | None,
    tick_s: float,
    most_s: float | None = None,
) -> SessionResult:
    """Sample every rank of ``args.pid`` until duration (or on, up to ``most_s``, where the
    analysis advises it), Ctrl-C/SIGTERM or the job's end."""
    session = Session(args, rules)
    stop = threading.Event()
    with stop_on_signals(stop):
        session.run(stop, duration_s, on_tick, tick_s, most_s)
    return session.finish(duration_s)
