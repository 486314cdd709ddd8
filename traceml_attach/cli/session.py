"""One attach session: start the sampler, show progress, write the summary at the end."""

from __future__ import annotations

import argparse
import json
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent import discovery
from agent.node import NodeAgent
from agent.pyspy import PySpyError
from agent.sampler import SamplerConfig
from agent.target import TargetError, inspect_target, python_children
from agent.wire import FrameWriter
from traceml_attach.analysis import Analysis, analyze
from traceml_attach.classify import Rule
from traceml_attach.cli.common import run_dir
from traceml_attach.cli.errors import EXIT_OK, EXIT_TARGET_EXITED, KIND_TO_EXIT, CliError
from traceml_attach.render import render_text
from traceml_attach.stream import Recording
from traceml_attach.summary import build_summary

# A live view that covers too long a stretch reacts slowly; this is what it looks at.
LIVE_WINDOW_S = 30.0


@dataclass
class SessionResult:
    run_dir: Path
    summary: dict[str, Any]
    text: str
    code: int


def _fail(exc: TargetError | PySpyError, pid: int) -> CliError:
    message = str(exc)
    if exc.kind == "not_python":
        children = python_children(pid)
        if children:
            message += f"; its Python child processes are {', '.join(map(str, children[:8]))}"
    return CliError(message, KIND_TO_EXIT.get(exc.kind, 1))


def write_summary(directory: Path, summary: dict[str, Any]) -> str:
    text = render_text(summary)
    tmp = directory / "final_summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    tmp.replace(directory / "final_summary.json")
    (directory / "final_summary.txt").write_text(text, encoding="utf-8")
    return text


def run_session(
    args: argparse.Namespace,
    rules: list[Rule],
    duration_s: float | None,
    on_tick: Callable[[Recording, Analysis, float], None] | None,
    tick_s: float,
) -> SessionResult:
    """Sample every rank of ``args.pid`` until duration, Ctrl-C/SIGTERM or the job's end."""
    pids: list[int] = args.pid
    config = SamplerConfig(rate_hz=args.rate)
    for pid in pids:
        try:
            inspect_target(pid)
        except TargetError as exc:
            raise _fail(exc, pid) from exc
    plan = discovery.plan(pids)
    if plan.note:
        print(f"traceml: {plan.note}", file=sys.stderr)
    writer = FrameWriter(None)
    node = NodeAgent(plan, config, writer, sys.argv)
    try:
        probed = node.probe()
    except (TargetError, PySpyError) as exc:
        raise _fail(exc, plan.ranks[0].pid) from exc
    for line in node.failures:
        print(f"traceml: skipping {line}", file=sys.stderr)
    first = probed[0][1].target
    directory = run_dir(Path(args.logs_dir), args.run_name, first.cmd if first else (), pids[0])
    node.writer = writer = FrameWriter(directory / "frames.msgpack")
    inbox: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
    writer.listen(inbox.put)
    rec = Recording()

    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    started = time.monotonic()
    node.start(probed, stop)
    node_state: dict[str, float] = {}
    ran_out = False
    try:
        next_tick = started + tick_s
        while not stop.is_set():
            if not node.active():
                ran_out = True
                break
            elapsed = time.monotonic() - started
            if duration_s is not None and elapsed >= duration_s:
                break
            node.tick(stop, node_state)
            if on_tick is not None and time.monotonic() >= next_tick:
                next_tick += tick_s
                _drain(inbox, rec)
                end = rec.time_range()
                start_ns = None if end is None else end[1] - int(LIVE_WINDOW_S * 1e9)
                on_tick(rec, analyze(rec, rules, start_ns=start_ns), elapsed)
            stop.wait(0.1)
    finally:
        stop.set()
        node.join()
        writer.write({"k": "bye", "t": time.time_ns(), "reason": "target_exited" if ran_out else "stopped"})
        writer.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    _drain(inbox, rec)
    summary = build_summary(rec, analyze(rec, rules), directory.name)
    text = write_summary(directory, summary)
    if node.exit_reasons() == {"pyspy_failed"}:
        last = rec.errors[-1] if rec.errors else None
        message = last.message if last else "py-spy stopped working"
        raise CliError(f"sampling stopped: {message}; summary of what was seen written to {directory}",
                       KIND_TO_EXIT.get(last.kind if last else "pyspy_failed", 6))
    cut_short = ran_out and duration_s is not None
    return SessionResult(directory, summary, text, EXIT_TARGET_EXITED if cut_short else EXIT_OK)


def _drain(inbox: queue.SimpleQueue[dict[str, Any]], rec: Recording) -> None:
    while True:
        try:
            rec.add(inbox.get_nowait())
        except queue.Empty:
            return
