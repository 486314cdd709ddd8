"""The job's ranks made ready to sample, and the run folder: what a session needs before it
samples, raised as one CliError line each when it cannot be had."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

from traceml_agent import discovery
from traceml_agent.node import NodeAgent, Probed
from traceml_agent.pyspy import PySpyError
from traceml_agent.sampler import SamplerConfig
from traceml_agent.target import TargetError, inspect_target, python_children
from traceml_agent.writer import FrameWriter
from traceml_attach.errors import KIND_TO_EXIT, CliError


def target_failure(exc: TargetError | PySpyError, pid: int) -> CliError:
    """The one-line error for a target that cannot be sampled (with its Python children when it
    is not Python itself: the user probably gave a shell's or launcher's PID)."""
    message = str(exc)
    if exc.kind == "not_python":
        children = python_children(pid)
        if children:
            message += f"; its Python child processes are {', '.join(map(str, children[:8]))}"
    return CliError(message, KIND_TO_EXIT.get(exc.kind, 1))


def plan_targets(pids: list[int]) -> discovery.Plan:
    """Check every ``--pid`` (one clear CliError for the first that cannot be sampled), then
    turn them into the ranks to sample."""
    for pid in pids:
        try:
            inspect_target(pid)
        except TargetError as exc:
            raise target_failure(exc, pid) from exc
    return discovery.plan(pids)


def probe_ranks(pids: list[int], rate_hz: int, say: Callable[[str], None],
                max_rate_hz: int | None = None) -> tuple[NodeAgent, list[Probed]]:
    """A NodeAgent for the ranks of ``pids``, each probed: one clear CliError when none can be
    sampled. ``say`` gets what the plan noted and each rank skipped. Each rank's rate starts at
    ``rate_hz`` and goes up to ``max_rate_hz`` where its steps need it (None: fixed)."""
    plan = plan_targets(pids)
    if plan.note:
        say(plan.note)
    node = NodeAgent(plan, SamplerConfig(rate_hz=rate_hz, max_rate_hz=max_rate_hz), FrameWriter(None), sys.argv)
    try:
        probed = node.probe()
    except (TargetError, PySpyError) as exc:
        raise target_failure(exc, plan.ranks[0].pid) from exc
    for line in node.failures:
        say(f"skipping {line}")
    return node, probed


def run_dir(logs_dir: Path, run_name: str | None, cmd: tuple[str, ...], pid: int) -> Path:
    """logs/<run_name>: readable by default (script, pid, time) and never reused."""
    if run_name is None:
        script = next((Path(a).stem for a in cmd[1:] if a.endswith(".py")), Path(cmd[0]).name if cmd else "job")
        run_name = f"{script}-{pid}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_name = re.sub(r"[^\w.-]+", "_", run_name)
    path = logs_dir / run_name
    n = 1
    while True:
        try:   # created, not looked for first: two attachers started at once never share a folder
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            n += 1
            path = logs_dir / f"{run_name}-{n}"
