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

from agent.pyspy import PySpyError
from agent.sampler import Sampler, SamplerConfig
from agent.target import TargetError, python_children
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
    """Sample ``args.pid`` until duration, Ctrl-C/SIGTERM or the target's exit."""
    config = SamplerConfig(rate_hz=args.rate)
    try:
        sampler = Sampler(args.pid, config)
        threads = sampler.probe()
    except (TargetError, PySpyError) as exc:
        raise _fail(exc, args.pid) from exc
    assert sampler.target is not None
    directory = run_dir(Path(args.logs_dir), args.run_name, sampler.target.cmd, args.pid)
    writer = FrameWriter(directory / "frames.msgpack")
    inbox: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
    writer.listen(inbox.put)
    rec = Recording()
    sampler.begin(writer, threads, sys.argv)

    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    worker = threading.Thread(target=sampler.run, args=(stop,), name="traceml-sampler", daemon=True)
    started = time.monotonic()
    worker.start()
    try:
        next_tick = started + tick_s
        while worker.is_alive() and not stop.is_set():
            elapsed = time.monotonic() - started
            if duration_s is not None and elapsed >= duration_s:
                break
            if on_tick is not None and time.monotonic() >= next_tick:
                next_tick += tick_s
                _drain(inbox, rec)
                end = rec.time_range()
                start_ns = None if end is None else end[1] - int(LIVE_WINDOW_S * 1e9)
                on_tick(rec, analyze(rec, rules, start_ns=start_ns), elapsed)
            stop.wait(0.1)
    finally:
        stop.set()
        worker.join()
        writer.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    _drain(inbox, rec)
    analysis = analyze(rec, rules)
    summary = build_summary(rec, analysis, directory.name)
    text = write_summary(directory, summary)
    elapsed = time.monotonic() - started
    cut_short = sampler.exit_reason == "target_exited" and duration_s is not None and elapsed < duration_s
    if sampler.exit_reason == "pyspy_failed":
        last = rec.errors[-1].message if rec.errors else "py-spy stopped working"
        raise CliError(f"sampling stopped: {last}; summary of what was seen written to {directory}",
                       KIND_TO_EXIT.get(rec.errors[-1].kind if rec.errors else "pyspy_failed", 6))
    return SessionResult(directory, summary, text, EXIT_TARGET_EXITED if cut_short else EXIT_OK)


def _drain(inbox: queue.SimpleQueue[dict[str, Any]], rec: Recording) -> None:
    while True:
        try:
            rec.add(inbox.get_nowait())
        except queue.Empty:
            return
