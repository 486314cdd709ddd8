"""Benchmark of the TUI: one refresh with many simulated ranks, and time to first diagnosis.

Ranks are simulated by cloning the recorded two-rank torchrun stream (tests/fixtures) under
new PIDs and ranks, so every panel holds RANKS real-looking rows. Past --per-node ranks the
clones are spread over nodes as a multi-node collector records them (process keys node<<22|pid,
a ``node`` frame per node with a clock offset, the collector's ``net`` counters), so 1,024
ranks are 16 nodes of 64 and the header, ranks list and summarised step table show nodes. The app runs headless
(Textual's test driver) with a feed that posts nothing by itself; each refresh posts a live
document and waits until the screen is painted. Reported, in ms (median, 95th percentile and worst of --n):
  present    the pure view-model step for the whole screen
  render     every panel turning its view-model into lines (Rich)
  refresh    CPU time from posting an Update until every widget has handled it and the
             screen is painted: the UI thread's whole share (wall time, which adds Pilot's
             idle detection, is printed too)
  analysis   (off the UI thread) analysis + live document of the RANKS-rank window
With --tmux, also the time from starting `traceml attach` on examples/input_bound.py
until its diagnosis is on screen in a real terminal (tmux), --first-runs times.

    python bench/tui_bench.py [--ranks 64] [--per-node 64] [--n 20] [--tmux] [--first-runs 3]
    python bench/tui_bench.py --ranks 1024 --n 20     # 16 nodes x 64 ranks
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

from traceml_agent.wire import unpacker  # noqa: E402
from traceml_attach.collect.merge import proc_key  # noqa: E402
from traceml_attach.diagnose.analysis import analyze  # noqa: E402
from traceml_attach.ingest.stream import Recording  # noqa: E402
from traceml_attach.output.live import live_document  # noqa: E402
from traceml_attach.output.summary import Summary  # noqa: E402
from traceml_attach.policy import LIVE_WINDOW_S  # noqa: E402
from traceml_attach.steps.classify import load_rules  # noqa: E402
from traceml_attach.tui.app import make_app  # noqa: E402
from traceml_attach.tui.feed import Poster, Update  # noqa: E402
from traceml_attach.tui.present import present  # noqa: E402
from traceml_attach.tui.widgets._panel import Panel  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "ddp_input_straggler.msgpack"


def simulated(ranks: int, per_node: int = 64) -> Recording:
    """The two-rank stream cloned ranks/2 times under new PIDs; rank = copy * 2 + its own rank.
    With more ranks than ``per_node``, node n holds ranks n*per_node.. (see the module doc)."""
    with FIXTURE.open("rb") as f:
        frames = list(unpacker(f))
    rec = Recording()
    copies = max(ranks // 2, 1)
    nodes = ranks > per_node
    pairs = max(per_node // 2, 1)   # copies on a node
    first_ns = frames[0]["t"]
    for frame in frames:
        if "pid" not in frame:
            rec.add(frame)
            continue
        for c in range(copies):
            node, local = divmod(c, pairs) if nodes else (0, c)
            pid = frame["pid"] + 5_000 * (local + 1)   # under 2**22 (ingest/model.py PID_BITS) up to 1,024 ranks
            clone = dict(frame, pid=proc_key(node, pid))
            if nodes:
                clone["n"] = node
            if frame["k"] == "target":
                clone.update(rank=frame["rank"] + 2 * c, world_size=2 * copies, nspid=[clone["pid"]])
                if nodes:
                    clone["local_rank"] = frame["rank"] + 2 * local
            rec.add(clone)
    for node in range(-(-copies // pairs) if nodes else 0):
        rec.add({"k": "node", "t": first_ns, "node": node, "name": f"node{node:02d}", "agent": f"agent-{node}",
                 "state": "joined", "host": f"node{node:02d}", "rate_hz": 100, "offset_ns": node * 137_000,
                 "ranks": list(range(node * 2 * pairs, min((node + 1) * 2 * pairs, 2 * copies)))})
    if nodes:   # made-up counts: the header and the text only draw them
        rec.add({"k": "net", "t": first_ns, "messages": 16_000, "bytes": 48_000_000, "frames": 160_000,
                 "duplicates": 0, "bad_messages": 0, "bad_frames": 0, "refused_peers": 0, "agent_dropped": 0})
    return rec


class SilentFeed:
    def start(self, app: Poster) -> None: ...
    def write_summary(self) -> None: ...
    def stop(self) -> None: ...
    def wait(self) -> None: ...


def stats(xs: list[float]) -> str:
    p95 = sorted(xs)[max(round(0.95 * len(xs)) - 1, 0)]
    return f"median {statistics.median(xs):.1f}, p95 {p95:.1f}, worst {max(xs):.1f} ms"


async def refreshes(docs: list[Summary], size: tuple[int, int], n: int) -> dict[str, list[float]]:
    app = make_app(SilentFeed())
    out: dict[str, list[float]] = {"present": [], "render": [], "refresh": [], "wall": []}
    async with app.run_test(size=size) as pilot:
        for i in range(n + 2):
            doc = docs[i % len(docs)]
            c0, t0 = time.process_time(), time.perf_counter()
            app.post_message(Update(doc))
            await pilot.pause()   # every widget has handled its messages and the screen is painted
            c1, t1 = time.process_time(), time.perf_counter()
            t2 = time.perf_counter()
            present(doc, app.selection, "LIVE")
            t3 = time.perf_counter()
            for panel in app.query(Panel):
                lines = panel.lines(panel.model, panel.size.width, panel.size.height)
                for text in lines:
                    list(app.console.render(text, app.console.options.update_width(max(panel.size.width, 1))))
            t4 = time.perf_counter()
            if i >= 2:   # the first two include mounting and the first layout
                out["refresh"].append(1e3 * (c1 - c0))
                out["wall"].append(1e3 * (t1 - t0))
                out["present"].append(1e3 * (t3 - t2))
                out["render"].append(1e3 * (t4 - t3))
    return out


def first_diagnosis(runs: int) -> list[float]:
    from launch import start_example, stop_example
    from testkit.tui_tmux import Terminal, attach_command, wait_file

    times = []
    for i in range(runs):
        job = start_example("input_bound")
        with tempfile.TemporaryDirectory() as tmp:
            term = Terminal(attach_command(job.pid, Path(tmp), f"b{i}", Path(tmp) / "exit"), 100, 30)
            try:
                warm = term.wait_for("traceml attach", timeout_s=30)
                first = term.wait_for("INPUT-BOUND", "Input", timeout_s=60)
                times.append(first)
                print(f"  run {i + 1}: screen up after {warm:.1f} s, diagnosis after {first:.1f} s", flush=True)
                term.press("q")
                wait_file(Path(tmp) / "exit")
            finally:
                term.close()
                stop_example(job)
    return times


def main() -> None:
    gc.freeze()   # as run_app does before the app starts
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--per-node", type=int, default=64, help="ranks per simulated node, past which there are nodes")
    ap.add_argument("--n", type=int, default=20, help="refreshes per terminal size")
    ap.add_argument("--tmux", action="store_true", help="also measure time to first diagnosis in tmux")
    ap.add_argument("--first-runs", type=int, default=3)
    args = ap.parse_args()

    rec = simulated(args.ranks, args.per_node)
    rules = load_rules()
    end = rec.time_range() or (0, 0)
    docs, analysis_ms = [], []
    for cut_s in (1.0, 0.0, 0.5):   # three slightly different windows, so each refresh changes the screen
        t0 = time.perf_counter()
        an = analyze(rec, rules, start_ns=end[1] - int(LIVE_WINDOW_S * 1e9), end_ns=end[1] - int(cut_s * 1e9))
        docs.append(live_document(rec, an, "bench"))
        analysis_ms.append(1e3 * (time.perf_counter() - t0))
    nodes = len(docs[0].report.nodes)
    print(f"{len(docs[0].report.step_time.ranks)} simulated ranks" + (f" on {nodes} nodes" if nodes else "")
          + f"; analysis + live document (off the UI thread): {stats(analysis_ms)}")
    for size in ((80, 24), (200, 60)):
        r = asyncio.run(refreshes(docs, size, args.n))
        print(f"{size[0]}x{size[1]}: present {stats(r['present'])} | render {stats(r['render'])} | "
              f"refresh CPU {stats(r['refresh'])} | wall {stats(r['wall'])}")
    if args.tmux:
        times = first_diagnosis(args.first_runs)
        print(f"time to first diagnosis on screen (from starting traceml): {stats([1e3 * t for t in times])}")


if __name__ == "__main__":
    main()
