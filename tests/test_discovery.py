"""Finding ranks from the PID a user gives, and attaching to them: real processes with rank
variables under a shell as their launcher (no torch)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import psutil
import pytest

from traceml_agent import discovery, procfile
from traceml_agent.node import MAX_ATTACH_TRIES, NodeAgent
from traceml_agent.procstats import ProcPoller
from traceml_agent.pyspy import PySpyError
from traceml_agent.sampler import Sampler, SamplerConfig
from traceml_agent.writer import FrameWriter

SLEEPER = f"{sys.executable} -c 'import time; time.sleep(60)'"


@pytest.fixture
def launcher() -> Iterator:
    started: list[subprocess.Popen[bytes]] = []

    def start(world: int, commands: tuple[str, ...] = ()) -> tuple[int, list[int]]:
        """A shell (the launcher) running ``world`` ranks (Python sleepers unless ``commands`` say
        otherwise); returns its PID and theirs by rank."""
        commands = commands or (SLEEPER,) * world
        ranks = " & ".join(f"RANK={r} WORLD_SIZE={world} {cmd}" for r, cmd in enumerate(commands))
        proc = subprocess.Popen(["sh", "-c", f"{ranks}; wait"])
        started.append(proc)
        for _ in range(100):
            children = psutil.Process(proc.pid).children()
            if len(children) == world and all(discovery.rank_env(c.pid) for c in children):
                by_rank = sorted(children, key=lambda c: discovery.rank_env(c.pid)["RANK"])
                return proc.pid, [c.pid for c in by_rank]
            time.sleep(0.05)
        raise AssertionError("the ranks did not start")

    yield start
    for proc in started:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait()


def test_one_rank_of_several_points_at_the_launcher(launcher):
    shell, ranks = launcher(2)
    plan = discovery.plan([ranks[1]])
    assert [r.pid for r in plan.ranks] == [ranks[1]]
    assert plan.note == (f"PID {ranks[1]} is rank 1 of 2; "
                         f"to attach to every rank, give the launcher's PID: --pid {shell}")


def test_the_only_rank_is_not_told_to_attach_to_its_launcher(launcher):
    _, ranks = launcher(1)
    assert discovery.plan([ranks[0]]).note == f"PID {ranks[0]} is rank 0 of 1"


def test_the_launcher_gives_every_rank_in_order(launcher):
    shell, ranks = launcher(3)
    plan = discovery.plan([shell])
    assert ([r.pid for r in plan.ranks], [r.rank for r in plan.ranks], plan.launcher) == (ranks, [0, 1, 2], shell)


def test_a_rank_refused_at_start_is_reported_once(launcher):
    # rank 1 is not Python: the start-up probe skips it (the user is told there), and the
    # launcher re-scans that look for restarted workers must not try and report it again
    shell, ranks = launcher(2, (SLEEPER, "sleep 60"))
    node = NodeAgent(discovery.plan([shell]), SamplerConfig(), FrameWriter(None), [])
    frames: list[dict] = []
    node.writer.listen(frames.append)
    probed = node.probe()
    assert [rank.pid for rank, _, _ in probed] == [ranks[0]]
    assert len(node.failures) == 1 and f"pid {ranks[1]}" in node.failures[0]
    assert node.refused == {ranks[1]: MAX_ATTACH_TRIES}
    stop = threading.Event()
    node.start(probed, stop)   # and stopped at once: rank 0's first window, cut short, is no error either
    try:
        node.rescan(stop)
        node.rescan(stop)
    finally:
        stop.set()
        node.join()
    assert [f["pid"] for f in frames if f["k"] == "target"] == [ranks[0]]
    assert not [f for f in frames if f["k"] == "error"], frames


def test_a_rank_caught_while_its_interpreter_starts_is_probed_again(launcher, monkeypatch):
    # py-spy reading a process whose interpreter is still starting fails with "Failed to copy
    # PyCodeObject" (seen in CI); one such failure must not lose the rank
    shell, ranks = launcher(1)
    real = Sampler.probe
    calls: list[int] = []

    def flaky(self: Sampler) -> list:
        calls.append(self.pid)
        if len(calls) == 1:
            raise PySpyError("pyspy_failed", "py-spy failed: Failed to copy PyCodeObject")
        return real(self)

    monkeypatch.setattr(Sampler, "probe", flaky)
    node = NodeAgent(discovery.plan([shell]), SamplerConfig(), FrameWriter(None), [])
    probed = node.probe()
    assert [rank.pid for rank, _, _ in probed] == ranks
    assert calls == [ranks[0], ranks[0]] and not node.failures
    assert node.refused == {}   # attached in the end: nothing held against it in later re-scans


def test_a_launcher_with_a_rank_of_its_own_is_still_the_launcher():
    # GIVEN a launcher started with the node's index as RANK (Kubeflow's PyTorchJob does so for
    # torchrun): its ranks get their own variables, and rank 1 forks a worker that inherits them
    forks = (f"{sys.executable} -c 'import subprocess, sys, time; "
             "subprocess.Popen([sys.executable, \"-c\", \"import time; time.sleep(60)\"]); time.sleep(60)'")
    script = f"RANK=0 LOCAL_RANK=0 WORLD_SIZE=4 {SLEEPER} & RANK=1 LOCAL_RANK=1 WORLD_SIZE=4 {forks} & wait"
    proc = subprocess.Popen(["sh", "-c", script], env={**os.environ, "RANK": "1", "WORLD_SIZE": "2"})
    try:
        for _ in range(200):
            below = discovery.ranks_below(proc.pid)
            workers = psutil.Process(below[1].pid).children() if len(below) == 2 else []
            if workers:
                break
            time.sleep(0.05)
        assert workers, "the ranks and the worker did not start"
        # THEN the launcher's PID plans both ranks (not the worker), and each points back at it
        plan = discovery.plan([proc.pid])
        assert [r.rank for r in plan.ranks] == [0, 1] and plan.launcher == proc.pid
        assert discovery.launcher_of(workers[0].pid) == proc.pid
        assert discovery.plan([below[1].pid]).note == (
            f"PID {below[1].pid} is rank 1 of 4; to attach to every rank, give the launcher's PID: --pid {proc.pid}")
        # AND --pid auto finds it, not the process that started it (to which it looks like a rank)
        found = discovery.find_launchers()
        assert proc.pid in found and os.getpid() not in found
    finally:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait()



def test_descendants_from_the_kernels_lists_are_psutils_without_scanning_every_process(launcher):
    # GIVEN a process tree: a launcher's ranks, one of them with a child of its own, and a child this
    # process starts from a thread other than its main one (a DataLoader's pin-memory thread may)
    forks = (f"{sys.executable} -c 'import subprocess, sys, time; "
             "subprocess.Popen([sys.executable, \"-c\", \"import time; time.sleep(60)\"]); time.sleep(60)'")
    shell, ranks = launcher(2, (SLEEPER, forks))
    for _ in range(100):
        if psutil.Process(ranks[1]).children():
            break
        time.sleep(0.05)
    from_thread: list[subprocess.Popen[bytes]] = []
    starter = threading.Thread(target=lambda: from_thread.append(subprocess.Popen(["sleep", "30"])))
    starter.start()
    starter.join()
    try:
        # THEN the kernel's lists give what psutil's scan of every process gives, grandchildren too
        for pid in (shell, os.getpid()):
            expected = sorted(p.pid for p in psutil.Process(pid).children(recursive=True))
            assert sorted(procfile.descendants(pid) or []) == expected
        assert from_thread[0].pid in (procfile.descendants(os.getpid()) or [])
        assert len(procfile.descendants(shell) or []) == 3
        # AND the launcher's ranks are found from them
        assert [(r.pid, r.rank) for r in discovery.ranks_below(shell)] == [(ranks[0], 0), (ranks[1], 1)]
    finally:
        from_thread[0].kill()
        from_thread[0].wait()


def test_without_the_kernels_lists_the_ranks_and_workers_come_from_psutil(launcher, monkeypatch):
    # GIVEN a launcher of two ranks, read once with the kernel's lists
    shell, ranks = launcher(2)
    found = discovery.ranks_below(shell)
    frame = ProcPoller(shell).poll()
    # WHEN the kernel keeps none (built without CONFIG_PROC_CHILDREN)
    monkeypatch.setattr(procfile, "descendants", lambda pid: None)
    # THEN psutil's scan gives the same ranks and the same children to poll
    assert discovery.ranks_below(shell) == found and [r.pid for r in found] == ranks
    again = ProcPoller(shell).poll()
    assert frame is not None and again is not None
    assert sorted(row[0] for row in frame["children"]) == sorted(row[0] for row in again["children"]) == sorted(ranks)
