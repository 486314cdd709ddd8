"""The agents' links and the collector, in one process over real ZeroMQ sockets on loopback:
exact delivery and merging, and each failure (a wrong key, garbage on the port, malformed
messages, a restarted collector, a silent agent, a node whose job ends, a full buffer).

The end-to-end tests with real torchrun jobs, agents and collector processes are in
tests/test_e2e_multinode.py."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq

from tests.conftest import traceml
from traceml_agent.link import AgentLink, Keys, LinkError, create_token, endpoint, read_token, token_warning
from traceml_agent.wire import unpacker
from traceml_agent.writer import FrameWriter
from traceml_attach.collect.merge import proc_key
from traceml_attach.collect.server import Collector
from traceml_attach.diagnose.analysis import analyze
from traceml_attach.ingest.model import node_of, os_pid
from traceml_attach.ingest.stream import Recording, read_recording
from traceml_attach.steps.classify import load_rules

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_frames(name: str) -> list[dict[str, Any]]:
    """A recorded single-node stream, as an agent would have sent it (no session frames)."""
    reader = unpacker()
    reader.feed((FIXTURES / f"{name}.msgpack").read_bytes())
    return [f for f in reader if f.get("k") not in ("bye", "segment")]


def with_ranks(frames: list[dict[str, Any]], offset: int, world: int) -> list[dict[str, Any]]:
    return [{**f, "rank": f["rank"] + offset, "world_size": world} if f["k"] == "target" else f for f in frames]


class Session:
    """A collector merging into a recording in tmp_path, on its own thread."""

    def __init__(self, tmp_path: Path, port: int = 0, name: str = "frames", lost_s: float = 1.0) -> None:
        self.token = tmp_path / "token"
        self.path = tmp_path / f"{name}.msgpack"
        self.writer = FrameWriter(self.path)
        self.collector = Collector("127.0.0.1", port, self.token, lost_s=lost_s)
        self.collector.record_to(self.writer)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.collector.run, args=(self.stop,), daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.collector.port

    def close(self, end: bool = True) -> Recording:
        self.stop.set()
        self.thread.join()
        if end:
            self.collector.end_session("stopped")
        self.collector.close()
        self.writer.close()
        rec, problem = read_recording(self.path)
        assert problem is None
        return rec


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    s = Session(tmp_path)
    yield s
    if not s.stop.is_set():
        s.close()


class Agent:
    """An AgentLink whose thread runs until ``stop``; frames go in with ``send``."""

    def __init__(self, port: int, token: Path, node: str, buffer_bytes: int = 64 << 20) -> None:
        self.link = AgentLink("127.0.0.1", port, Keys.from_token(read_token(token)), node, buffer_bytes)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.link.run, args=(self.stop,), daemon=True)
        self.thread.start()

    def send(self, frames: list[dict[str, Any]]) -> None:
        for frame in frames:
            self.link.put(frame)

    def finish(self, reason: str = "target_exited") -> bool:
        self.stop.set()
        self.thread.join()
        done = self.link.finish(reason)
        self.link.close()
        return done

    def kill(self) -> None:
        """Gone without a word, as a SIGKILLed agent."""
        self.stop.set()
        self.thread.join()
        self.link.close()


def served(session: Session) -> Recording:
    """The recording of ``session`` after a real agent streamed to it, and ended, in it."""
    agent = Agent(session.port, session.token, "node-a")
    agent.send(fixture_frames("input_bound")[:20])
    assert agent.finish()
    return session.close()


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def spans_of(rec: Recording, keys: list[int]) -> list[tuple[int, int, int, tuple[Any, ...]]]:
    return [(os_pid(s.pid), s.ts_ns, s.dur_ns, tuple((f.name, f.file, f.line) for f in s.stack))
            for key in keys for s in rec.spans.get(key, [])]


# -- tokens and endpoints --------------------------------------------------------------------

def test_the_token_file_is_created_private_once_and_keys_derive_from_it(tmp_path: Path):
    path = tmp_path / "token"
    assert create_token(path) and not create_token(path)   # never overwritten
    assert os.stat(path).st_mode & 0o777 == 0o600 and token_warning(path) is None
    keys = Keys.from_token(read_token(path))
    assert keys == Keys.from_token(read_token(path)) and keys.server_public != keys.client_public
    os.chmod(path, 0o644)
    assert "chmod 600" in (token_warning(path) or "")
    (tmp_path / "bad").write_text("not a token\n")
    with pytest.raises(LinkError, match="not a traceml token"):
        read_token(tmp_path / "bad")
    with pytest.raises(LinkError, match="does not exist"):
        read_token(tmp_path / "missing")


def test_endpoints_default_to_loopback():
    assert endpoint("5555") == ("127.0.0.1", 5555)
    assert endpoint(":5555") == ("127.0.0.1", 5555)
    assert endpoint("0.0.0.0:7000") == ("0.0.0.0", 7000)
    assert endpoint("[::1]:7000") == ("::1", 7000)
    with pytest.raises(LinkError):
        endpoint("host:port")


# -- delivery and merging --------------------------------------------------------------------

def test_two_nodes_merge_into_one_recording_with_every_span_exactly_once(session: Session):
    # GIVEN two agents streaming the same recorded 2-rank job, the second as ranks 2 and 3
    frames = fixture_frames("ddp_input_straggler")
    a, b = Agent(session.port, session.token, "node-a"), Agent(session.port, session.token, "node-b")
    a.send(frames)
    b.send(with_ranks(frames, 2, 4))
    assert a.finish() and b.finish()
    rec = session.close()
    # THEN each node's ranks have their own process keys and node, and every span arrived once
    by_rank = {t.rank: t for t in rec.targets.values()}
    assert sorted(by_rank) == [0, 1, 2, 3]
    nodes = {n.name: n for n in rec.nodes.values()}
    assert {n.state for n in nodes.values()} == {"ended"}
    assert {by_rank[0].node, by_rank[1].node} == {nodes["node-a"].node}
    assert {by_rank[2].node, by_rank[3].node} == {nodes["node-b"].node}
    original = Recording()
    for frame in frames:
        original.add(frame)
    for name in ("node-a", "node-b"):
        keys = sorted(k for k in rec.spans if node_of(k) == nodes[name].node)
        assert spans_of(rec, keys) == spans_of(original, sorted(original.spans))
    assert rec.net["duplicates"] == 0 and rec.net["bad_frames"] == 0 and rec.net["refused_peers"] == 0
    # AND the merged recording is diagnosed across the nodes: both copies of the slow rank are found
    an = analyze(rec, load_rules())
    assert set(an.pids) == {"0", "1", "2", "3"}
    assert {r: an.report.ranks[int(r)].node for r in an.pids} == {
        "0": nodes["node-a"].node, "1": nodes["node-a"].node, "2": nodes["node-b"].node, "3": nodes["node-b"].node}
    assert an.report.ranks[3].pid == os_pid(an.pids["3"]) < 1 << 22


def test_a_restarted_agent_keeps_its_node(session: Session):
    frames = fixture_frames("input_bound")[:5]
    first = Agent(session.port, session.token, "node-a")
    first.send(frames)
    assert first.finish()
    second = Agent(session.port, session.token, "node-a")
    second.send(frames)
    assert second.finish()
    rec = session.close()
    assert len(rec.nodes) == 1 and len(rec.targets) == 1


# -- failures --------------------------------------------------------------------------------

def test_a_wrong_key_is_refused_counted_and_nothing_it_sends_is_recorded(session: Session, tmp_path: Path):
    other = tmp_path / "other-token"
    create_token(other)
    intruder = Agent(session.port, other, "intruder")
    intruder.send(fixture_frames("input_bound"))
    wait_for(lambda: session.collector.stats.refused_peers >= 1)
    assert not intruder.link.collector_seen.is_set()
    intruder.kill()
    rec = session.close()
    assert rec.targets == {} and rec.spans == {} and rec.nodes == {}
    assert rec.net["refused_peers"] >= 1 and rec.net["messages"] == 0


def test_garbage_on_the_port_is_counted_and_the_collector_goes_on(session: Session):
    # GIVEN peers that write random bytes or an HTTP request, and one that speaks ZeroMQ without CURVE
    for garbage in (os.urandom(4096), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", session.port)) as raw:
            raw.sendall(garbage)
            time.sleep(0.2)
    ctx = zmq.Context()
    plain = ctx.socket(zmq.DEALER)
    plain.setsockopt(zmq.LINGER, 0)
    plain.connect(f"tcp://127.0.0.1:{session.port}")
    plain.send(b"\x00" * 64)
    wait_for(lambda: session.collector.stats.refused_peers >= 3)
    plain.close()
    ctx.term()
    # THEN a real agent is still served
    rec = served(session)
    assert len(rec.targets) == 1 and rec.net["refused_peers"] >= 3


def test_malformed_messages_from_a_keyed_peer_are_counted_and_dropped(session: Session):
    # GIVEN a peer with the right key that sends what is not a message, or a bad one
    keys = Keys.from_token(read_token(session.token))
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = (
        keys.server_public, keys.client_public, keys.client_secret)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"tcp://127.0.0.1:{session.port}")
    bad = [b"\xc1not msgpack", msgpack.packb([1, 2, 3]), msgpack.packb({"v": 99, "kind": "data"}),
           msgpack.packb({"v": 1, "kind": "data", "node": "x", "agent": "y", "seq": 0, "frames": 7}),
           msgpack.packb({"v": 1, "kind": "data", "node": "x", "agent": "y", "seq": "0", "frames": []}),
           msgpack.packb({"v": 1, "kind": "data", "node": "x", "agent": "y", "seq": 0, "t": "noon", "frames": []}),
           msgpack.packb({"v": 1, "kind": "data", "node": "x", "agent": "y", "seq": 0,
                          "frames": [{"k": "target"}, {"nonsense": 1}, "a string"]})]
    for data in bad:
        sock.send(data)
    wait_for(lambda: session.collector.stats.bad_messages >= 6 and session.collector.stats.bad_frames >= 3)
    sock.close()
    ctx.term()
    rec = served(session)
    assert rec.net["bad_messages"] == 6 and rec.net["bad_frames"] == 3
    assert len([t for t in rec.targets.values() if t.rank is None]) == 1


def test_a_collector_restarted_within_the_buffer_loses_nothing(tmp_path: Path):
    # GIVEN an agent streaming to a collector that dies (no end of session) and comes back
    frames = fixture_frames("ddp_input_straggler")
    half = len(frames) // 2
    first = Session(tmp_path, name="first")
    port = first.port
    agent = Agent(port, first.token, "node-a")
    agent.send(frames[:half])
    wait_for(lambda: agent.link.stats.acked >= 0 and not agent.link._pending)
    time.sleep(0.5)
    before = first.close(end=False)
    agent.send(frames[half:])   # ...while no collector is there
    time.sleep(1.0)
    second = Session(tmp_path, port=port, name="second")
    # THEN the new collector gets the stream's context and everything the first did not acknowledge
    assert agent.finish()
    after = second.close()
    keys = sorted(after.targets)
    assert sorted(t.rank for t in after.targets.values()) == [0, 1]
    original = Recording()
    for frame in frames:
        original.add(frame)
    both = sorted(set(spans_of(before, sorted(before.spans))) | set(spans_of(after, keys)))
    assert both == sorted(spans_of(original, sorted(original.spans)))
    assert after.net["bad_frames"] == 0


def test_a_silent_agent_is_lost_its_ranks_say_so_and_the_rest_go_on(session: Session):
    frames = fixture_frames("ddp_input_straggler")
    a, b = Agent(session.port, session.token, "node-a"), Agent(session.port, session.token, "node-b")
    a.send(frames)
    b.send(with_ranks(frames, 2, 4))
    wait_for(lambda: len(session.collector.nodes()) == 2 and not b.link._buffer and not b.link._pending)
    b.kill()
    wait_for(lambda: any(n.state == "lost" for n in session.collector.nodes()), timeout_s=5)
    assert a.finish()
    rec = session.close()
    states = {n.name: n.state for n in rec.nodes.values()}
    assert states == {"node-a": "ended", "node-b": "lost"}
    an = analyze(rec, load_rules())
    assert {r: s.status for r, s in an.report.ranks.items()} == {0: "alive", 1: "alive", 2: "agent lost",
                                                                 3: "agent lost"}


def test_a_node_whose_job_exits_ends_and_the_collector_knows_when_all_have(session: Session):
    frames = fixture_frames("input_bound")
    pid = next(f["pid"] for f in frames if f["k"] == "target")
    a, b = Agent(session.port, session.token, "node-a"), Agent(session.port, session.token, "node-b")
    a.send([*frames, {"k": "exit", "t": time.time_ns(), "pid": pid, "status": 0}])
    b.send(frames)
    assert a.finish("target_exited")
    wait_for(lambda: {n.state for n in session.collector.nodes()} == {"ended", "joined"})
    assert not session.collector.ended(expect_nodes=2)
    assert b.finish("target_exited")
    wait_for(lambda: session.collector.ended(expect_nodes=2))
    assert not session.collector.ended(expect_nodes=3)
    rec = session.close()
    exited = [k for k in rec.exits]
    assert len(exited) == 1 and os_pid(exited[0]) == pid
    assert {n.reason for n in rec.nodes.values()} == {"target_exited"}


def test_a_full_buffer_drops_the_oldest_and_the_collector_records_the_loss(tmp_path: Path):
    # GIVEN an agent with a small buffer and no collector yet
    create_token(tmp_path / "token")
    port = free_port()
    agent = Agent(port, tmp_path / "token", "node-a", buffer_bytes=30_000)
    frames = fixture_frames("ddp_input_straggler")
    for chunk in range(0, len(frames), 20):
        agent.send(frames[chunk:chunk + 20])
        time.sleep(0.3)   # one message per batch
        if agent.link.stats.dropped_messages:
            break
    assert agent.link.stats.dropped_messages > 0
    # WHEN the collector starts
    session = Session(tmp_path, port=port)
    assert agent.finish()
    rec = session.close()
    # THEN the stream still decodes (its definitions came with the context) and the loss is said
    assert rec.net["agent_dropped"] == agent.link.stats.dropped_messages
    assert any(e.kind == "agent_buffer_full" for e in rec.errors)
    assert rec.targets and rec.bad_frames == 0 and rec.net["bad_frames"] == 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_process_keys_round_trip():
    assert os_pid(proc_key(5, 4_194_303)) == 4_194_303 and node_of(proc_key(5, 123)) == 5
    assert proc_key(0, 1234) == 1234


def test_a_collector_that_no_agent_joins_says_so_and_fails(tmp_path: Path):
    out = traceml("snapshot", "--listen", "127.0.0.1:0", "--seconds", "1", "--quiet", "--token-file",
                  str(tmp_path / "token"), "--logs-dir", str(tmp_path / "logs"))
    assert out.returncode == 9, out.stderr
    assert "no agent joined on 127.0.0.1:" in out.stderr and "Traceback" not in out.stderr
    assert list((tmp_path / "logs").glob("*/final_summary.json"))   # what was seen is still written
    usage = traceml("snapshot", "--expect-nodes", "2", "--pid", str(os.getpid()))
    assert usage.returncode == 2 and "--expect-nodes needs --listen" in usage.stderr
    busy = traceml("snapshot", "--listen", "127.0.0.1:notaport", "--token-file", str(tmp_path / "token"))
    assert busy.returncode == 9 and "is not HOST:PORT" in busy.stderr
