"""Load test of the multi-node collector (issue 11): 16 simulated nodes x 64 ranks = 1,024 ranks
streamed through real agent links to a real collector process, and what that costs.

    python bench/multinode_load.py [--nodes 16] [--ranks-per-node 64] [--seconds 110] [--warmup 40]
                                   [--slow RANK ...] [--collector live|snapshot|attach] [--logs-dir DIR]
    python bench/multinode_load.py --analyze RUN_DIR [--nodes 16] [--ranks-per-node 64] [--slow RANK ...]

The run. Every simulated node replays the recorded DDP stream (bench/sim_nodes.py: its own
PIDs, torchrun's rank variables, one or more slow ranks) in real time, timestamps moved to now,
through its own ``agent.link.AgentLink`` (a DEALER socket, CURVE keys from a token file) to a
collector started as a process of its own, so that its CPU is measured alone (psutil, user +
system, over the steady part: after --warmup, once the live window is full). The collector is

  live      (default) the TUI's session without the screen: a tick every second (TICK_S) with
            the live document the TUI draws (this file, ``collector``); it also times each tick and
            notes how old the newest data is when it runs (a collector that cannot keep up falls behind)
  snapshot  python -m traceml_attach snapshot --listen ... --quiet: no live tick at all
  attach    python -m traceml_attach attach --no-tui --listen ...: a tick every 3 s

This one process runs all the agents' links; how much CPU that takes, and how late it sends
what is due (its lag), is printed too: on a machine without a spare core the two compete.

The measurements, on the collector's recording (frames.msgpack) and on the simulated nodes:

  tick        IncrementalAnalyzer.tick (as bench/tick_bench.py times it) at every second of the
              recording's data clock: ``steps`` (classification and step-finding: the per-rank
              trackers, which the session's pipeline advances once every TRACK_S of data) and
              ``conclude`` (the findings and the report, what a live view adds each time it
              ticks); ``document`` is the live document built from it
  node tick   the same for one node's 64 ranks alone: what an agent would spend every second if
              classification and step-finding ran on the agents
  step records  what an agent would ship per rank and second then: its steps (start, length,
              phases, blocked time, flags) each py-spy window, msgpack-encoded
  wire        bytes per rank per second: the agents' link counters and the collector's ``net``
  ingest      the collector's work besides the live view, per second of data: decoding the
              messages, merging them into its recording, and the session's pipeline (the
              Recording, and its trackers advanced every TRACK_S of data: the tick's ``steps``)
  TUI         one refresh of the TUI at 200x60 with the recording's newest windows
              (bench/tui_bench.py's refresh loop)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import msgpack  # noqa: E402
import psutil  # noqa: E402
from sim_nodes import NS, Layout, Nodes, Source, node_name  # noqa: E402

import traceml_attach.diagnose.incremental as incremental  # noqa: E402
from traceml_agent.link import BATCH_S, LINK_VERSION, AgentLink, Keys, create_token, pack, read_token, unpack  # noqa: E402
from traceml_agent.writer import FrameWriter  # noqa: E402
from traceml_attach.collect.merge import Merger  # noqa: E402
from traceml_attach.diagnose.analysis import Analysis  # noqa: E402
from traceml_attach.ingest.segments import read_segments  # noqa: E402
from traceml_attach.ingest.stream import Recording  # noqa: E402
from traceml_attach.output.live import live_document  # noqa: E402
from traceml_attach.output.summary import Summary  # noqa: E402
from traceml_attach.policy import LIVE_WINDOW_S  # noqa: E402
from traceml_attach.runtime.heap import COLLECTOR_GC_THRESHOLDS  # noqa: E402
from traceml_attach.runtime.pipeline import RETAIN_S, Pipeline  # noqa: E402
from traceml_attach.steps.classify import load_rules  # noqa: E402
from traceml_attach.steps.phases import PHASES  # noqa: E402

TICKS_FILE = "load_ticks.json"   # the live collector's own tick timings, in its run folder
GC_FILE = "load_gc.json"         # and its cyclic garbage collections
REPORT_EVERY_S = 10.0
STEP_BATCH_S = 2.0               # an agent would ship its steps once per py-spy window


def stats(xs: list[float], unit: str = "ms") -> str:
    if not xs:
        return "n/a"
    p95 = sorted(xs)[max(round(0.95 * len(xs)) - 1, 0)]
    return f"median {statistics.median(xs):.1f}, p95 {p95:.1f}, worst {max(xs):.1f} {unit}"


def cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


# -- the collector ---------------------------------------------------------------------------

def collector(argv: list[str]) -> int:
    """The live collector (``multinode_load.py collector ATTACH-ARGS``): the TUI's session, a tick
    every TICK_S building the live document, without the screen; each tick's CPU is written to
    TICKS_FILE in the run folder."""
    from traceml_attach.cli import attach
    from traceml_attach.cli.common import rules_from
    from traceml_attach.runtime.livefeed import TICK_S
    from traceml_attach.runtime.session import Session, stop_on_signals

    parser = argparse.ArgumentParser(prog="multinode_load.py collector")
    attach.prepare_parser(parser)
    args = parser.parse_args(argv)
    # a row a tick: (monotonic s, live analysis CPU ms, live document CPU ms, age of the newest data s)
    ticks: list[tuple[float, float, float, float]] = []
    analysis_ms = [0.0]

    class TimedSession(Session):
        def live_analysis(self) -> Analysis:
            c0 = time.thread_time()
            an = super().live_analysis()
            analysis_ms[0] = 1e3 * (time.thread_time() - c0)
            return an

    def tick(rec: Recording, an: Analysis, elapsed_s: float) -> None:
        c0 = time.thread_time()
        live_document(rec, an, session.run_dir.name)
        newest = rec.time_range()
        age_s = (time.time_ns() - newest[1]) / NS if newest else 0.0
        ticks.append((time.monotonic(), analysis_ms[0], 1e3 * (time.thread_time() - c0), age_s))

    # the cyclic GC's own time, by generation: (monotonic s at its end, generation, seconds)
    collections: list[tuple[float, int, float]] = []
    began: list[float] = [0.0]

    def timed_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            collections.append((time.monotonic(), info["generation"], time.perf_counter() - began[0]))

    gc.callbacks.append(timed_gc)
    gc.freeze()   # as the TUI's process does before its app starts
    session = TimedSession(args, rules_from(args))
    stop = threading.Event()
    with stop_on_signals(stop):
        session.run(stop, args.duration, tick, TICK_S)
    result = session.finish(args.duration)
    (result.run_dir / TICKS_FILE).write_text(json.dumps(ticks))
    (result.run_dir / GC_FILE).write_text(json.dumps(collections))
    print(result.text, end="")
    return 0


def collector_command(kind: str, port: int, nodes: int, seconds: float, token: Path, logs: Path,
                      name: str) -> list[str]:
    common = ["--listen", f"127.0.0.1:{port}", "--expect-nodes", str(nodes), "--token-file", str(token),
              "--logs-dir", str(logs), "--run-name", name, "--max-recording-mb", "0"]
    if kind == "live":
        return [sys.executable, str(Path(__file__).resolve()), "collector", "--duration", str(seconds), *common]
    if kind == "snapshot":
        return [sys.executable, "-m", "traceml_attach", "snapshot", "--seconds", str(seconds), "--quiet", *common]
    return [sys.executable, "-m", "traceml_attach", "attach", "--no-tui", "--duration", str(seconds), *common]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(proc: subprocess.Popen[bytes], stderr: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if "listening for agents" in stderr.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise SystemExit(f"the collector did not start listening:\n{stderr.read_text(errors='replace')}")


# -- the run ---------------------------------------------------------------------------------

class Sample(NamedTuple):
    wall_s: float         # monotonic
    collector_s: float    # CPU seconds, user + system
    agents_s: float
    machine_s: float      # every core's busy time
    sent_bytes: int       # by the agents' links


@dataclass
class Meter:
    """CPU of the collector, of this process (the agents) and of the rest of the machine; the
    collector's memory; the agents' lag and bytes sent. ``mark`` names a moment (the steady part
    runs from "steady" to "end")."""

    collector: psutil.Process
    links: list[AgentLink]
    me: psutil.Process = field(default_factory=psutil.Process)
    lags_ms: list[float] = field(default_factory=list)      # steady part: how late each frame was put
    marks: dict[str, Sample] = field(default_factory=dict)
    rss_peak: int = 0                                       # the collector's, as sampled
    _last: Sample | None = None
    _late_ms: float = 0.0

    def sample(self) -> Sample:
        busy = psutil.cpu_times()
        machine = busy.user + busy.system + busy.nice + busy.irq + busy.softirq
        self.rss_peak = max(self.rss_peak, self.collector.memory_info().rss)
        return Sample(time.monotonic(), cpu_s(self.collector), cpu_s(self.me), machine,
                      sum(link.stats.sent_bytes for link in self.links))

    def mark(self, name: str) -> None:
        self.marks[name] = sample = self.sample()
        self._last = self._last or sample

    def lag(self, ms: float, steady: bool) -> None:
        self._late_ms = max(self._late_ms, ms)
        if steady:
            self.lags_ms.append(ms)

    def line(self, elapsed_s: float) -> str:
        now = self.sample()
        last, self._last = self._last or now, now
        late, self._late_ms = self._late_ms, 0.0
        return (f"  {elapsed_s:5.0f} s  {between(last, now)} | worst lag {late:.0f} ms | collector RSS "
                f"{self.collector.memory_info().rss / 1e6:.0f} MB")


def between(a: Sample, b: Sample) -> str:
    wall = max(b.wall_s - a.wall_s, 1e-9)
    collector, agents = 100 * (b.collector_s - a.collector_s) / wall, 100 * (b.agents_s - a.agents_s) / wall
    rest = 100 * (b.machine_s - a.machine_s) / wall - collector - agents
    return (f"collector {collector:5.1f}% of a core | agents (this process) {agents:5.1f}% | rest of the machine "
            f"{rest:5.1f}% | sent {(b.sent_bytes - a.sent_bytes) / wall / 1e6:.2f} MB/s")


def run_load(args: argparse.Namespace, layout: Layout) -> tuple[Path, Meter]:
    """Stream the simulated nodes to a collector process; its run folder, and what was measured."""
    logs = Path(args.logs_dir or tempfile.mkdtemp(prefix="traceml-load-"))
    logs.mkdir(parents=True, exist_ok=True)
    token = logs / "token"
    create_token(token)
    name = f"load-{layout.nodes}x{layout.ranks_per_node}-{args.collector}-{time.strftime('%H%M%S')}"
    port = free_port()
    stderr = logs / f"{name}.stderr"
    command = collector_command(args.collector, port, layout.nodes, args.seconds + 120, token, logs, name)
    print("collector: " + " ".join(command), flush=True)
    with (logs / f"{name}.stdout").open("wb") as out, stderr.open("wb") as err:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=err)
    try:
        wait_listening(proc, stderr)
        meter = pump(args, layout, port, read_token(token), psutil.Process(proc.pid))
        rc = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.terminate()
    if rc not in (0, 8):   # 8: the job (the simulated nodes) ended before the collector's duration
        raise SystemExit(f"the collector exited with {rc}:\n{stderr.read_text(errors='replace')[-3000:]}")
    return logs / name, meter


def pump(args: argparse.Namespace, layout: Layout, port: int, token: bytes, proc: psutil.Process) -> Meter:
    """The agents: one link per node, the frames put on it when due; then the end of each stream."""
    keys = Keys.from_token(token)
    links = [AgentLink("127.0.0.1", port, keys, node_name(n)) for n in range(layout.nodes)]
    sending = threading.Event()
    threads = [threading.Thread(target=link.run, args=(sending,), daemon=True) for link in links]
    for thread in threads:
        thread.start()
    meter = Meter(proc, links)
    started = time.time_ns()
    meter.mark("start")
    next_report, steady = REPORT_EVERY_S, False
    print(f"{layout.world} ranks on {layout.nodes} nodes for {args.seconds:.0f} s (steady after {args.warmup:.0f} s); "
          f"slow ranks {sorted(layout.slow)}", flush=True)
    for due, node, frame in Nodes(Source(), layout, started).frames(args.seconds):
        now = time.time_ns()
        if due > now:
            time.sleep((due - now) / NS)
            now = time.time_ns()
        elapsed = (now - started) / NS
        if not steady and elapsed >= args.warmup:
            steady = True
            meter.mark("steady")
        meter.lag((now - due) / 1e6, steady)
        if elapsed >= next_report:
            next_report += REPORT_EVERY_S
            print(meter.line(elapsed), flush=True)
        links[node].put(frame)
    meter.mark("end")
    sending.set()
    for thread in threads:
        thread.join()
    acked = [link.finish("target_exited") for link in links]
    for link in links:
        link.close()
    if not all(acked):
        print(f"  {acked.count(False)} agents' last messages were not acknowledged", flush=True)
    return meter


def report_run(run_dir: Path, meter: Meter, layout: Layout, seconds: float) -> None:
    steady, end = meter.marks["steady"], meter.marks["end"]
    wall = end.wall_s - steady.wall_s
    print(f"\nsteady part ({wall:.0f} s): {between(steady, end)}; collector RSS peak {meter.rss_peak / 1e6:.0f} MB")
    print(f"  agents' lag (frame put on its link after it was due): {stats(meter.lags_ms)}")
    sent = sum(link.stats.sent_bytes for link in meter.links)
    print(f"  wire: the agents sent {sent / 1e6:.1f} MB in {sum(link.stats.sent_messages for link in meter.links)} "
          f"messages: {(end.sent_bytes - steady.sent_bytes) / wall / layout.world:.0f} B/s per rank (steady part), "
          f"{sent / seconds / layout.world:.0f} B/s per rank (whole run)")
    ticks_file = run_dir / TICKS_FILE
    if ticks_file.exists():
        ticks = json.loads(ticks_file.read_text())
        late = [t for t in ticks if steady.wall_s <= t[0] <= end.wall_s]   # one monotonic clock for both processes
        gaps = [1e3 * (b[0] - a[0]) for a, b in itertools.pairwise(late)]
        print(f"  collector's live ticks in the steady part: {len(late)}, every {stats(gaps)} (one a second is "
              f"1000); live analysis CPU {stats([t[1] for t in late])}; live document {stats([t[2] for t in late])}; "
              f"age of the newest span at the tick {stats([t[3] for t in late], 's')} (py-spy windows are "
              f"{Source().window_s:.0f} s)")
    gc_file = run_dir / GC_FILE
    if gc_file.exists():
        steady_gc = [c for c in json.loads(gc_file.read_text()) if steady.wall_s <= c[0] <= end.wall_s]
        by_gen = {g: [c[2] for c in steady_gc if c[1] == g] for g in (0, 1, 2)}
        print("  collector's cyclic GC in the steady part: " + "; ".join(
            f"generation {g}: {len(xs)} collections, {sum(xs):.1f} s" for g, xs in by_gen.items())
            + f" ({100 * sum(c[2] for c in steady_gc) / wall:.0f}% of the wall time)")


def report_summary(run_dir: Path, layout: Layout, seconds: float) -> None:
    summary = json.loads((run_dir / "final_summary.json").read_text())
    ranks = {int(r) for r in summary.get("ranks") or {}}
    missing = sorted(set(range(layout.world)) - ranks)
    nodes = summary.get("nodes") or []
    net = summary.get("net") or {}
    step = summary.get("step_time", {}).get("diagnosis") or {}
    print(f"\nfinal summary ({run_dir / 'final_summary.json'}):")
    print(f"  ranks listed: {len(ranks)} of {layout.world}" + (f"; missing {missing[:20]}" if missing else ""))
    print(f"  nodes: {len(nodes)}, states {sorted({n['state'] for n in nodes})}")
    print(f"  diagnosis: [{step.get('kind')}] {step.get('summary')} (worst rank {step.get('worst_rank')}; slow "
          f"ranks {sorted(layout.slow)}: {'found' if step.get('worst_rank') in layout.slow else 'NOT found'})")
    if net:
        print(f"  net: {net.get('messages')} messages, {net.get('bytes', 0) / 1e6:.1f} MB = "
              f"{net.get('bytes', 0) / seconds / layout.world:.0f} B/s per rank; frames {net.get('frames')}, "
              f"duplicates {net.get('duplicates')}, bad {net.get('bad_messages')}/{net.get('bad_frames')}, "
              f"agent_dropped {net.get('agent_dropped')}")


# -- the measurements on a recording -------------------------------------------------------

class _Timed:
    """A function that adds up its own CPU time."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.s = fn, 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        c0 = time.process_time()
        try:
            return self.fn(*args, **kwargs)
        finally:
            self.s += time.process_time() - c0


class Ticker:
    """A live session's analysis over frames fed in order: a tick at every second of the data
    clock (the newest frame time), the recording trimmed as the session's pipeline does."""

    def __init__(self, document: bool) -> None:
        self.rec = Recording()
        self.live = incremental.IncrementalAnalyzer(load_rules())
        self.document = document
        self.rows: list[tuple[float, float, float, float]] = []   # (data s, tick ms, of it conclude ms, doc ms)
        self.docs: list[Summary] = []
        self.last: Analysis | None = None
        self._origin: int | None = None
        self._clock = 0
        self._next: int | None = None

    def add(self, frame: Any) -> None:
        self.rec.add(frame)
        t = frame.get("t") if isinstance(frame, dict) else None
        if not isinstance(t, int):
            return
        self._clock = max(self._clock, t)
        self._next = self._next or self._clock + NS
        span_range = self.rec.time_range()
        if self._clock >= self._next and span_range is not None:
            self._next += NS
            self.tick(span_range[1])

    def tick(self, end: int) -> None:
        timer = incremental.conclude
        assert isinstance(timer, _Timed)
        timer.s = 0.0
        c0 = time.process_time()
        an = self.live.tick(self.rec, end)
        c1 = time.process_time()
        doc_ms = 0.0
        if self.document:
            self.docs = [*self.docs[-2:], live_document(self.rec, an, "load")]
            doc_ms = 1e3 * (time.process_time() - c1)
        self._origin = self._origin or end
        self.rows.append(((end - self._origin) / NS, 1e3 * (c1 - c0), 1e3 * timer.s, doc_ms))
        self.last = an
        self.rec.trim(end - int(RETAIN_S * NS))
        gc.freeze()   # as a collector's analysis thread does every second (runtime/session.py)

    def steady(self) -> list[tuple[float, float, float, float]]:
        return [r for r in self.rows if r[0] >= LIVE_WINDOW_S]


def print_ticks(label: str, ticker: Ticker) -> None:
    rows = ticker.steady()
    print(f"  {label}: {len(rows)} ticks once the window is full: tick {stats([r[1] for r in rows])}")
    print(f"    steps (classification + step-finding) {stats([r[1] - r[2] for r in rows])}; "
          f"conclude {stats([r[2] for r in rows])}" + (f"; live document {stats([r[3] for r in rows])}"
                                                      if ticker.document else ""))


def step_records(an: Analysis, pids: dict[str, int]) -> tuple[int, int, float]:
    """(steps, bytes, seconds) of the step records the agents would ship for the window of ``an``:
    per rank and py-spy window one frame {k, pid, steps: [[start, length, phases, blocked, flags]]}."""
    steps = size = 0
    for rank, tl in an.timelines.items():
        batches: dict[int, list[list[Any]]] = defaultdict(list)
        for s in tl.steps:
            blocked = None if s.blocked_sync_ns is None else [s.blocked_sync_ns.get(p, 0) for p in PHASES]
            batches[s.end_ns // int(STEP_BATCH_S * NS)].append(
                [s.start_ns, s.dur_ns, [s.phases_ns.get(p, 0) for p in PHASES], blocked,
                 int(s.covered) | int(s.swallowing) << 1])
        for rows in batches.values():
            steps += len(rows)
            size += len(msgpack.packb({"k": "steps", "pid": pids[rank], "steps": rows}, use_bin_type=True))
    assert an.start_ns is not None and an.end_ns is not None
    return steps, size, (an.end_ns - an.start_ns) / NS


def ingest(layout: Layout, seconds: float) -> None:
    """The collector's work per second of data besides the live tick, stage by stage, on the
    simulated nodes' frames batched as the links batch them: decoding the messages, merging
    them into its recording (ids re-interned, frames re-encoded and written), and the
    session's pipeline (the Recording, a rollup every ROLLUP_S, the trim)."""
    batches: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for due, node, frame in Nodes(Source(), layout, time.time_ns()).frames(seconds):
        batches[(node, due // int(BATCH_S * NS))].append(frame)
    messages = [(node, pack({"v": LINK_VERSION, "kind": "data", "node": node_name(node), "agent": str(node),
                             "seq": 0, "t": time.time_ns(), "frames": frames}))
                for (node, _), frames in batches.items()]
    c0 = time.process_time()
    decoded = [(node, unpack(data)) for node, data in messages]
    c1 = time.process_time()
    merged: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        writer = FrameWriter(Path(tmp) / "frames.msgpack")
        writer.listen(merged.append)
        merger = Merger(writer)
        streams = [merger.join(str(node), node_name(node)) for node in range(layout.nodes)]
        c2 = time.process_time()
        for node, msg in decoded:
            for frame in msg["frames"]:
                merger.add(streams[node], frame)
        writer.close()
        c3 = time.process_time()
    pipeline = Pipeline(load_rules())
    for frame in merged:
        pipeline.add(frame)
    c4 = time.process_time()
    rec = Recording()
    for frame in merged:
        rec.add(frame)
    c5 = time.process_time()
    per_s = 1e3 / seconds
    print(f"\nthe collector's ingest of {layout.world} ranks, {seconds:.0f} s of data in {len(messages)} messages, CPU "
          f"ms per second of data: decode {per_s * (c1 - c0):.0f} | merge and write {per_s * (c3 - c2):.0f} | "
          f"pipeline {per_s * (c4 - c3):.0f} (of it the Recording {per_s * (c5 - c4):.0f}, the rest its trackers "
          f"every TRACK_S: classification and step-finding, the rollups and the trim) | in all "
          f"{per_s * (c1 - c0 + c4 - c2):.0f}; a live view adds the conclusion and the document of each tick")


def measure(run_dir: Path, layout: Layout, seconds: float, tui: bool) -> None:
    incremental.conclude = _Timed(incremental.conclude)
    gc.freeze()
    gc.set_threshold(*COLLECTOR_GC_THRESHOLDS)   # the collector's, with a freeze each tick
    ingest(layout, min(seconds, 60.0))   # first: the cyclic collector has no large heap to go through yet
    print(f"\nthe collector's recording replayed, a tick every second of data ({run_dir / 'frames.msgpack'}):")
    t0 = time.perf_counter()
    whole = Ticker(document=True)
    read_segments(run_dir / "frames.msgpack", whole.add)
    print(f"  ({time.perf_counter() - t0:.0f} s to replay)")
    print_ticks(f"{len(whole.rec.targets)} ranks", whole)
    if whole.last is not None:
        found = whole.last.report.step_time.diagnosis
        print(f"    the last tick's diagnosis: [{found.kind}] {found.summary} (worst rank "
              f"{found.worst_rank}: slow rank {'found' if found.worst_rank in layout.slow else 'NOT found'})")

    node = max(next(iter(layout.slow), 0) // layout.ranks_per_node, 0)
    agent = Ticker(document=False)
    for _, _, frame in Nodes(Source(), layout, time.time_ns(), [node]).frames(seconds):
        agent.add(frame)
    print(f"\nclassification and step-finding on an agent instead: node {node} alone, from its own frames:")
    print_ticks(f"{layout.ranks_per_node} ranks", agent)

    if whole.last is not None:
        raw = sum(len(msgpack.packb(fr, use_bin_type=True))
                  for _, _, fr in Nodes(Source(), layout, time.time_ns(), [node]).frames(seconds))
        steps, size, window_s = step_records(whole.last, whole.last.pids)
        ranks = len(whole.last.timelines)
        print(f"  step records the agents would ship: {steps} steps of {ranks} ranks in {window_s:.0f} s, "
              f"{size / max(steps, 1):.0f} B a step: {size / window_s / ranks:.0f} B/s per rank, on top of the raw "
              f"frames' {raw / seconds / layout.ranks_per_node:.0f} B/s per rank "
              f"(+{100 * size / window_s / ranks / (raw / seconds / layout.ranks_per_node):.0f}%)")

    if tui and whole.docs:
        import tui_bench

        gc.freeze()   # as the TUI's process does before its app starts, and a collector each second
        r = asyncio.run(tui_bench.refreshes(whole.docs, (200, 60), 20))
        print(f"\nTUI at 200x60 with {len(whole.docs[-1].report.step_time.ranks)} ranks (bench/tui_bench.py's "
              f"refresh, the recording's last windows): refresh CPU {stats(r['refresh'])} | wall {stats(r['wall'])} "
              f"| present {stats(r['present'])} | render {stats(r['render'])}")


def main() -> int:
    if sys.argv[1:2] == ["collector"]:
        return collector(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--ranks-per-node", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=110.0, help="how long the nodes stream")
    ap.add_argument("--warmup", type=float, default=40.0, help="the steady part starts after this")
    ap.add_argument("--slow", type=int, action="append",
                    help="a global rank that replays the straggler (repeat; default: rank 13 of the middle node)")
    ap.add_argument("--collector", choices=("live", "snapshot", "attach"), default="live")
    ap.add_argument("--logs-dir", help="where the collector's run folder goes (default: a new temporary folder)")
    ap.add_argument("--analyze", metavar="RUN_DIR", type=Path, help="measure a finished run's recording only")
    ap.add_argument("--no-tui", action="store_true", help="skip the TUI refresh")
    ap.add_argument("--no-replay", action="store_true", help="the run and its summary only: no measurements on the "
                    "recording")
    args = ap.parse_args()
    rpn = args.ranks_per_node
    slow = args.slow or [(args.nodes // 2) * rpn + min(13, rpn - 1)]
    layout = Layout(args.nodes, rpn, frozenset(slow))
    run_dir = args.analyze
    if run_dir is None:
        run_dir, meter = run_load(args, layout)
        report_run(run_dir, meter, layout, args.seconds)
    report_summary(run_dir, layout, args.seconds)
    if not args.no_replay:
        measure(run_dir, layout, args.seconds, not args.no_tui)
    return 0


if __name__ == "__main__":
    sys.exit(main())
