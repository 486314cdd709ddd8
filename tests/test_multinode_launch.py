"""Starting the agents: ``--pid auto`` against real torchrun jobs, and ``--launch``'s launcher
(the command it builds, its errors, its process group, and a real agent started through it)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from traceml_agent.discovery import find_launchers, rank_env
from traceml_agent.link import create_token
from traceml_agent.writer import FrameWriter
from traceml_attach.collect import launcher
from traceml_attach.collect.launcher import AgentLaunch, LaunchError, launch_command, reachable
from traceml_attach.collect.server import Collector

ROOT = Path(__file__).resolve().parents[1]


def wait_for(condition, timeout_s: float = 30.0, every_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s} s")


# -- --pid auto: find_launchers ------------------------------------------------------------


@pytest.mark.e2e
def test_a_torchrun_job_is_one_launcher_and_its_orphans_are_none(torchrun):
    # GIVEN `python -m torch.distributed.run` with 2 ranks, each with a DataLoader worker (RANK inherited)
    job = torchrun(2, "--workers", "1", "--width", "64", script="input_bound")
    ranks = psutil.Process(job.pid).children()
    workers = wait_for(lambda: (w := [p for r in ranks for p in r.children()]) and len(w) == 2 and w)
    assert all("RANK" in rank_env(p.pid) for p in [*ranks, *workers])
    try:
        # WHEN --pid auto looks for launchers
        found = find_launchers()
        # THEN the launcher is one, and neither its ranks nor their workers are
        assert job.pid in found
        assert not set(found) & {p.pid for p in [*ranks, *workers]}
        # WHEN the launcher dies without stopping its ranks: PID 1 adopts them
        os.kill(job.pid, signal.SIGKILL)
        adopter = wait_for(lambda: {r.ppid() for r in ranks} != {job.pid} and ranks[0].ppid())
        if adopter != 1:
            pytest.skip(f"the orphans were adopted by a subreaper (PID {adopter}), not by init")
        # THEN neither the dead launcher (a zombie) nor init is a launcher
        found = find_launchers()
        assert job.pid not in found and 1 not in found
    finally:
        for proc in [*workers, *ranks]:   # the orphans: the fixture stops only what its launcher still has
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()


def test_the_agent_itself_is_not_a_rank_when_it_inherits_rank():
    # GIVEN a process with RANK in its environment (an agent started from a job's shell), child of
    # this one (which has none)
    code = "from traceml_agent.discovery import find_launchers; print(*find_launchers())"
    env = {**os.environ, "RANK": "0", "PYTHONPATH": str(ROOT)}
    # WHEN it looks for launchers
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    # THEN its own parent is not one
    assert str(os.getpid()) not in out.stdout.split()


# -- --launch: the command and the process ---------------------------------------------------


def test_the_command_is_the_prefix_then_the_agent_contract(tmp_path: Path):
    token = tmp_path / "token"
    command = launch_command("srun --overlap --jobid 123 --ntasks-per-node=1", "login1:5555", token, 100,
                             agent=("traceml",))
    assert command == ["srun", "--overlap", "--jobid", "123", "--ntasks-per-node=1", "traceml", "agent",
                       "--pid", "auto", "--connect", "login1:5555", "--token-file", str(token), "--rate", "100"]


def test_a_collector_on_every_interface_gives_the_agents_its_host_name():
    assert reachable("10.0.0.5", 5555) == "10.0.0.5:5555"
    host = reachable("0.0.0.0", 5555).rsplit(":", 1)[0]
    assert host in (socket.getfqdn(), socket.gethostname()) and not host.startswith("0.0.0.0")


@pytest.mark.parametrize(("prefix", "says"), [
    ("", "--launch needs the launcher's command"),
    ("srun --jobid '123", "No closing quotation"),
    ("no-such-launcher-h4 --jobid 1", "cannot run 'no-such-launcher-h4'"),
    ("""sh -c 'echo "srun: error: Invalid job id specified" >&2; exit 1' sh""",
     "sh exited at once with status 1: srun: error: Invalid job id specified"),
])
def test_a_launcher_that_cannot_start_is_one_line(tmp_path: Path, prefix: str, says: str):
    with pytest.raises(LaunchError) as caught:
        AgentLaunch.start(prefix, "0.0.0.0", 5555, tmp_path / "token", 100, tmp_path, FrameWriter(None))
    assert says in str(caught.value) and "\n" not in str(caught.value)


@pytest.fixture
def quick_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "END_GRACE_S", 0.1)
    monkeypatch.setattr(launcher, "STOP_WAIT_S", 0.3)


def group(pid: int) -> list[psutil.Process]:
    return [p for p in psutil.process_iter() if _pgid(p.pid) == pid]


def live(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


@pytest.mark.parametrize(("script", "status"), [
    ("sleep 60 & sleep 60", -signal.SIGTERM),                  # ended by SIGTERM, with its child
    ('trap "" TERM; sleep 60 & sleep 60', -signal.SIGKILL),    # deaf to it: killed, with its child
])
def test_the_launcher_and_its_process_group_end_with_the_session(tmp_path: Path, quick_stop, script: str,
                                                                   status: int):
    # GIVEN a launcher that started a child of its own and runs on
    launch = AgentLaunch.start(f"sh -c '{script}' sh", "127.0.0.1", 5555, tmp_path / "token", 100, tmp_path,
                               FrameWriter(None))
    members = wait_for(lambda: len(g := group(launch.proc.pid)) == 3 and g)   # sh and its two sleeps
    assert os.getpgid(launch.proc.pid) != os.getpgid(0)   # a group of its own: Ctrl-C here does not reach it
    # WHEN the session ends
    assert launch.stop() == status
    # THEN nothing of its group is left (SIGKILL reaches the others a moment after the launcher)
    wait_for(lambda: not [p for p in members if live(p)], 5)


def test_a_launcher_that_fails_during_the_session_is_recorded(tmp_path: Path, quick_stop):
    frames: list[dict] = []
    writer = FrameWriter(None)
    writer.listen(frames.append)
    launch = AgentLaunch.start("""sh -c 'sleep 1.2; echo "srun: error: Node n7 lost" >&2; exit 7' sh""",
                               "127.0.0.1", 5555, tmp_path / "token", 100, tmp_path, writer)
    error = wait_for(lambda: next((f for f in frames if f["k"] == "error"), None), timeout_s=10)
    assert error["kind"] == "launch_failed" and error["pid"] is None
    assert "exited with status 7: srun: error: Node n7 lost" in error["msg"]
    assert launch.stop() == 7
    assert len(frames) == 1   # its end, which the session asked for, is not a failure


# -- an agent started (through --launch) before its job waits, then streams it ---------------


@pytest.fixture
def pid_namespace() -> Iterator[int]:
    """A PID namespace of our own (as a container has): only the processes started in it are
    there, whatever else runs on this machine. Yields the host PID of its init."""
    if not (shutil.which("unshare") and shutil.which("nsenter")):
        pytest.skip("needs unshare and nsenter")
    holder = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "sleep", "300"],
                              stderr=subprocess.PIPE)
    try:
        init = wait_for(lambda: holder.poll() is not None or psutil.Process(holder.pid).children(), 5)
        if holder.poll() is not None:
            pytest.skip(f"cannot make a PID namespace: {holder.stderr.read().decode().strip()}")  # type: ignore[union-attr]
        yield init[0].pid
    finally:
        if holder.poll() is None:
            for child in psutil.Process(holder.pid).children():
                child.kill()   # the namespace's init: the kernel then kills everything in it
        holder.wait()


@pytest.mark.e2e
def test_an_agent_started_before_its_job_waits_then_streams_every_rank(tmp_path: Path, pid_namespace: int):
    collector = Collector("127.0.0.1", 0, tmp_path / "token")
    collector.record_to(FrameWriter(None))
    stop = threading.Event()
    receiver = threading.Thread(target=collector.run, args=(stop,), daemon=True)
    receiver.start()
    enter = f"nsenter --target {pid_namespace} --pid --mount --wd={ROOT}"
    try:
        # GIVEN an agent launched into a "node" where no job runs yet
        launch = AgentLaunch.start(enter, collector.host, collector.port, tmp_path / "token", 50, tmp_path,
                                   collector.writer)
        wait_for(lambda: "waiting for a torchrun job" in (tmp_path / "launch.log").read_text())
        # WHEN a torchrun job starts there
        subprocess.Popen([*enter.split(), sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                          "--standalone", "examples/ddp.py", "--width", "64", "--steps", "150"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # THEN the agent finds its launcher and streams both ranks, and ends with the job
        # (a node is listed when it joins, its ranks a moment later: wait for them, not for the node)
        assert wait_for(lambda: [n.ranks for n in collector.nodes()] == [(0, 1)], 60)
        wait_for(lambda: collector.ended(1), 60)
        assert launch.stop() == 0
        log = (tmp_path / "launch.log").read_text()
        assert "sampling 2 process(es) (ranks 0, 1)" in log and "the job on this node ended" in log
    finally:
        stop.set()
        receiver.join()
        collector.close()


def agent_in(namespace: int, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``traceml agent --pid auto`` run in the PID namespace ``namespace``."""
    token = tmp_path / "token"
    create_token(token)
    return subprocess.run(["nsenter", f"--target={namespace}", "--pid", "--mount", f"--wd={ROOT}", sys.executable,
                           "-m", "traceml_attach", "agent", "--pid", "auto", "--connect", "127.0.0.1:9",
                           "--token-file", str(token), *args], capture_output=True, text=True, timeout=30, check=False)


def test_several_launchers_on_a_node_are_named_for_the_user_to_choose(tmp_path: Path, pid_namespace: int):
    # GIVEN two jobs on one node, each a shell launching two ranks
    two_ranks = "RANK=0 sleep 30 & RANK=1 sleep 30 & wait"
    jobs = [subprocess.Popen(["nsenter", f"--target={pid_namespace}", "--pid", "--mount", "sh", "-c", two_ranks])
            for _ in range(2)]
    wait_for(lambda: sum(p.name() == "sleep" for job in jobs for p in psutil.Process(job.pid).children(True)) == 4)
    # WHEN an agent looks for the launcher
    out = agent_in(pid_namespace, tmp_path)
    # THEN it does not guess: it names both, with their commands
    assert out.returncode == 2
    assert out.stderr.count(f"(sh -c {two_ranks})") == 2 and "give the job's with --pid" in out.stderr


def test_an_agent_gives_up_waiting_when_told_to(tmp_path: Path, pid_namespace: int):
    out = agent_in(pid_namespace, tmp_path, "--wait", "1")
    assert out.returncode == 3
    assert "waiting for a torchrun job on this node" in out.stderr
    assert "no launcher (a process whose children have RANK set) appeared on this node in 1 s" in out.stderr
