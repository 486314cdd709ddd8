"""Two nodes on this machine: two torchrun launchers of one job (--nnodes 2, --node-rank 0/1,
rendezvous on 127.0.0.1), one `traceml agent` per launcher, and a collector (`traceml snapshot
--listen`), all real processes. The collector must report every global rank with its node, name
a straggler or a hang on the second node by its global rank, and say "agent lost" for the ranks
of an agent that is killed while the rest go on."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from launch import free_port, rank_truth
from tests.conftest import traceml

pytestmark = pytest.mark.e2e


class Cluster:
    """The job's two "nodes", their agents and the collector."""

    def __init__(self, torchrun, tmp_path: Path, *job_args: str, nproc: int = 1) -> None:
        self.tmp_path, self.token = tmp_path, tmp_path / "token"
        rendezvous = ("--nnodes", "2", "--rdzv-backend", "static", "--master-addr", "127.0.0.1",
                      "--master-port", str(free_port()))
        self.launchers: list[subprocess.Popen[str] | None] = [None, None]
        errors: list[BaseException] = []

        def start(node: int) -> None:
            try:
                self.launchers[node] = torchrun(nproc, *job_args, launcher_args=(*rendezvous, "--node-rank", str(node)))
            except BaseException as exc:   # reported on the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=start, args=(node,)) for node in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        self.port = free_port()
        self.collector: subprocess.Popen[str] | None = None
        self.agents: list[subprocess.Popen[str]] = []

    def collect(self, name: str, seconds: float) -> None:
        """Start the collector and, once it has created the token file, one agent per node."""
        self.name = name
        self.collector = subprocess.Popen(
            [sys.executable, "-m", "traceml_attach", "snapshot", "--listen", f"127.0.0.1:{self.port}",
             "--expect-nodes", "2", "--seconds", str(seconds), "--quiet", "--token-file", str(self.token),
             "--logs-dir", str(self.tmp_path / "logs"), "--run-name", name],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not self.token.exists():
            assert time.monotonic() < deadline and self.collector.poll() is None, self.collector.communicate()
            time.sleep(0.1)
        for node, launcher in enumerate(self.launchers):
            assert launcher is not None
            self.agents.append(subprocess.Popen(
                [sys.executable, "-m", "traceml_attach", "agent", "--pid", str(launcher.pid), "--connect",
                 f"127.0.0.1:{self.port}", "--token-file", str(self.token), "--node-name", f"node{node}"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))

    def joined(self, node: int, timeout_s: float = 60) -> None:
        """Wait until the node's agent says the collector answered it (the node has joined)."""
        agent, said = self.agents[node], []
        assert agent.stderr is not None

        def read() -> None:
            while (line := agent.stderr.readline()) and "has joined" not in line:
                said.append(line)
            said.append(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout_s)
        assert said and "has joined" in said[-1], said

    def summary(self) -> tuple[dict, str]:
        assert self.collector is not None
        out, err = self.collector.communicate(timeout=120)
        assert self.collector.returncode in (0, 8), err
        for agent in self.agents:   # the collector's end of the session ends them
            agent.wait(timeout=30)
        return json.loads((self.tmp_path / "logs" / self.name / "final_summary.json").read_text()), out

    def close(self) -> None:
        for proc in [*self.agents, *([self.collector] if self.collector else [])]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def cluster(torchrun, tmp_path: Path):
    made: list[Cluster] = []

    def make(*job_args: str) -> Cluster:
        made.append(Cluster(torchrun, tmp_path, *job_args))
        return made[-1]

    yield make
    for c in made:
        c.close()


def node_of_rank(summary: dict, rank: int) -> dict:
    number = summary["ranks"][str(rank)]["node"]
    return next(n for n in summary["nodes"] if n["node"] == number)


SECRET = "s3cr3t-4f2a9c"


def test_a_straggler_on_the_second_node_is_named_by_its_global_rank(cluster, tmp_path: Path, monkeypatch):
    # GIVEN one job on two "nodes", whose rank on the second node has slow input (and a secret in its environment)
    monkeypatch.setenv("TRACEML_TEST_SECRET", SECRET)
    job = cluster("--straggler", "input", "--slow-rank", "1")
    time.sleep(2)
    # WHEN a collector gathers both nodes through their agents
    job.collect("two-nodes", seconds=14)
    summary, out = job.summary()
    # THEN it reports every global rank, on its node, and blames rank 1 on node1
    assert sorted(summary["step_time"]["ranks"]) == ["0", "1"]
    assert node_of_rank(summary, 0)["name"] == "node0" and node_of_rank(summary, 1)["name"] == "node1"
    assert {n["state"] for n in summary["nodes"]} <= {"joined", "ended"}
    assert all(n["clock_offset_ms"] is not None and abs(n["clock_offset_ms"]) < 1000 for n in summary["nodes"])
    diag = summary["step_time"]["diagnosis"]
    assert (diag["kind"], diag["worst_rank"]) == ("INPUT_STRAGGLER", 1), out
    window = summary["sampling"]["window"]
    for rank in (0, 1):
        truth = rank_truth(tmp_path, rank, window["start"], window["end"])
        shares = summary["step_time"]["ranks"][str(rank)]["shares"]
        assert abs(shares["input"] - truth.shares["input"]) <= 0.05, (rank, shares, truth.shares)
    net = summary["net"]
    assert net["messages"] > 0 and net["refused_peers"] == 0 and net["bad_messages"] == 0
    # AND no environment value but the rank variables left the nodes
    frames = tmp_path / "logs" / "two-nodes" / "frames.msgpack"
    assert SECRET.encode() not in frames.read_bytes()
    # AND the collector's recording replays to the same summary
    replayed = traceml("replay", str(tmp_path / "logs" / "two-nodes" / "frames.msgpack"), "--write",
                       "--out", str(tmp_path / "replayed"))
    assert replayed.returncode == 0, replayed.stderr
    again = json.loads((tmp_path / "replayed" / "final_summary.json").read_text())
    assert {k: v for k, v in again.items() if k != "run_name"} == {k: v for k, v in summary.items()
                                                                   if k != "run_name"}


def test_a_hang_on_the_second_node_names_the_rank_and_its_line(cluster):
    job = cluster("--hang-at-step", "5", "--slow-rank", "1")
    time.sleep(4)
    job.collect("hang", seconds=12)
    summary, out = job.summary()
    diag = summary["step_time"]["diagnosis"]
    assert (diag["kind"], diag["worst_rank"]) == ("HANG", 1), out
    assert "fetch_from_slow_store (examples/ddp.py:" in diag["why"]
    assert node_of_rank(summary, 1)["name"] == "node1"


def test_a_killed_agent_leaves_its_ranks_agent_lost_and_the_others_go_on(cluster):
    job = cluster("--straggler", "none")
    time.sleep(2)
    job.collect("lost", seconds=18)
    # node1 must have joined before its agent dies: killed before that (its start-up slow on a loaded
    # machine), the collector waited out --expect-nodes' 120 s for it (a suite run of stop 61)
    job.joined(1)
    time.sleep(6)
    job.agents[1].send_signal(signal.SIGKILL)   # node1's agent dies; its job runs on
    summary, out = job.summary()
    assert summary["ranks"]["1"]["status"] == "agent lost", out
    assert summary["ranks"]["0"]["status"] == "alive"
    assert node_of_rank(summary, 1)["state"] == "lost"
    assert summary["step_time"]["ranks"]["0"]["steps"] > 0
    assert job.launchers[1] is not None and job.launchers[1].poll() is None   # the job never noticed
