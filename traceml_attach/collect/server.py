"""The collector's end of the agents' links (agent/link.py): a CURVE ROUTER socket, its
authenticator, and the per-stream ordering that makes delivery exact.

Everything that reaches the socket is data, never an exception: a peer refused by the handshake
or the authenticator, a message that is not one of ours, a frame that does not decode. Each is
counted, and the counts are written in ``net`` frames, so the summary (and its replay) says what
was refused. Nothing a refused peer sends is ever read.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from traceml_agent.link import (
    LINK_VERSION,
    Keys,
    LinkError,
    create_token,
    pack,
    read_token,
    token_warning,
    unpack,
)
from traceml_agent.wire import MAX_FRAME_BYTES
from traceml_agent.writer import FrameWriter
from traceml_attach.collect.merge import Merger, Stream

LOST_S = 10.0          # an agent silent this long (it sends every second) is "lost"
NET_EVERY_S = 5.0      # the counters are written this often, when they changed
ASK_AGAIN_S = 2.0      # an unknown agent is asked for its context at most this often
END_LINGER_S = 0.5     # the session's end is given this long to reach the agents
HANDSHAKE_MS = 5000    # a connection that has not completed its CURVE handshake by then is dropped
# descriptors the collector may hold: a flood of idle connections must not leave none for the agents
MAX_DESCRIPTORS = 65536

MAX_SKEW_NS = 7 * 86_400 * 1_000_000_000   # a send time further than a week from ours is no clock reading


@dataclass
class NetStats:
    """What the collector's socket saw; written as ``net`` frames."""

    messages: int = 0          # accepted messages
    bytes: int = 0             # ...and their bytes (payload, after decryption)
    frames: int = 0            # frames merged into the recording
    duplicates: int = 0        # messages received twice (resent by an agent) and dropped
    bad_messages: int = 0      # not one of ours: undecodable, wrong version, bad fields
    bad_frames: int = 0        # inside a good message, frames that could not be merged
    refused_peers: int = 0     # handshakes refused: wrong key (authenticator), not CURVE at all, or none in time
    disconnects: int = 0       # connections that ended after their handshake: an agent gone, or one dropped for a
                               # message over the size limit (32 MiB, never read)
    agent_dropped: int = 0     # messages the agents' buffers dropped while the collector was away


@dataclass(frozen=True)
class NodeView:
    node: int
    name: str
    state: str
    ranks: tuple[int, ...]


class _KeyCheck:
    """The authenticator's credentials provider: only the token's client key gets in (a refusal
    fails the handshake, which the socket monitor counts)."""

    def __init__(self, allowed: bytes) -> None:
        self.allowed = allowed

    def callback(self, domain: str, key: bytes) -> bool:
        return key == self.allowed   # pyzmq hands the client's key over Z85-encoded, as Keys holds it


class Collector:
    """Listens for agents and merges their streams into ``writer`` from its own thread."""

    def __init__(self, host: str, port: int, token_file: Path,
                 note: Callable[[str], None] = lambda _line: None, lost_s: float = LOST_S) -> None:
        import zmq
        from zmq.auth.thread import ThreadAuthenticator

        if create_token(token_file):
            note(f"created token file {token_file} (mode 0600): copy it to every node's agent")
        elif (warning := token_warning(token_file)) is not None:
            note(warning)
        keys = Keys.from_token(read_token(token_file))
        _more_descriptors()
        self.lost_s = lost_s
        self.writer = FrameWriter(None)   # the session's, once it has one (``record_to``)
        self.merger = Merger(self.writer)
        self.stats = NetStats()
        self._lock = threading.Lock()
        self._written = NetStats()
        self._expected: dict[str, int] = {}       # agent -> next seq
        self._identity: dict[str, bytes] = {}     # agent -> its routing id
        self._heard: dict[str, float] = {}        # agent -> monotonic time of its last message
        self._asked: dict[str, float] = {}        # agent -> when we last asked it for its context
        self._gaps: dict[str, tuple[int, float]] = {}   # agent -> the seq last asked for again, and when
        self._ctx = zmq.Context()
        self._auth = ThreadAuthenticator(self._ctx, log=_quiet_log())
        self._auth.start()
        self._auth.configure_curve_callback("*", credentials_provider=_KeyCheck(keys.client_public))
        sock = self._sock = self._ctx.socket(zmq.ROUTER)
        sock.curve_server = True
        sock.curve_publickey = keys.server_public
        sock.curve_secretkey = keys.server_secret
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
        sock.setsockopt(zmq.ROUTER_HANDOVER, 1)   # a reconnecting agent (same routing id) takes over
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.HEARTBEAT_IVL, 1000)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 5000)
        sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_MS)
        self._handshaking: dict[int, None] = {}   # accepted connections (fds) in their handshake, oldest first
        self._established: set[int] = set()       # ...and those past it
        self._monitor = sock.get_monitor_socket(
            zmq.EVENT_ACCEPTED | zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED | _failed_events())
        try:
            if port == 0:
                port = sock.bind_to_random_port(f"tcp://{host}")
            else:
                sock.bind(f"tcp://{host}:{port}")
        except zmq.ZMQError as exc:
            self.close()
            raise LinkError(f"cannot listen on {host}:{port}: {exc} (is another collector using the port?)") from exc
        self.host, self.port = host, port

    def record_to(self, writer: FrameWriter) -> None:
        """Merge into ``writer`` (the session's recording); before ``run`` starts."""
        self.writer = self.merger.writer = writer

    # -- state other threads read ------------------------------------------------------

    def ended(self, expect_nodes: int | None) -> bool:
        """Every node's job has ended (and at least ``expect_nodes`` joined, or one)."""
        nodes = self.nodes()
        return len(nodes) >= (expect_nodes or 1) and all(n.state == "ended" for n in nodes)

    def nodes(self) -> list[NodeView]:
        with self._lock:
            return [NodeView(s.node, s.name, s.state, tuple(sorted(s.ranks))) for s in self.merger.streams.values()]

    # -- the collector's thread --------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        import zmq

        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self._monitor, zmq.POLLIN)
        next_check = time.monotonic() + 1.0
        next_stats = time.monotonic() + NET_EVERY_S
        while not stop.is_set():
            ready = dict(poller.poll(100))
            if self._monitor in ready:
                self._drain_monitor()
            if self._sock in ready:
                self._drain()
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + 1.0
                self._check_lost()
            if time.monotonic() >= next_stats:
                next_stats = time.monotonic() + NET_EVERY_S
                self._write_stats()

    def end_session(self, reason: str) -> None:
        """Tell every agent the session is over (they exit), and write the final counters."""
        for identity in self._identity.values():
            self._reply(identity, {"end": reason})
        time.sleep(END_LINGER_S if self._identity else 0)
        self._write_stats(force=True)

    def close(self) -> None:
        import zmq

        with contextlib.suppress(zmq.ZMQError):
            self._sock.disable_monitor()
        self._monitor.close(linger=0)
        self._sock.close(linger=0)
        self._auth.stop()
        self._ctx.term()

    def _drain_monitor(self) -> None:
        """Count the connections that never completed a CURVE handshake: refused by the
        authenticator (a wrong key), failed (not CURVE, a wrong server key), or closed before it
        (garbage: ZeroMQ drops a peer whose greeting is not ZMTP without a handshake event).

        Only connections and disconnections carry the connection's fd; a handshake's outcome is
        matched to the oldest connection still in its handshake. Where two handshakes overlap that
        may pair an outcome with the wrong one, but each connection is still counted once, and a
        refused one once."""
        import zmq
        from zmq.utils.monitor import recv_monitor_message

        while True:
            try:
                event = recv_monitor_message(self._monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            kind, fd = event["event"], event["value"]
            if kind == zmq.EVENT_ACCEPTED:
                self._handshaking[fd] = None
            elif kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                if self._handshaking:
                    done = next(iter(self._handshaking))
                    del self._handshaking[done]
                    self._established.add(done)
            elif kind & _failed_events():
                self.stats.refused_peers += 1
                if self._handshaking:
                    del self._handshaking[next(iter(self._handshaking))]
            elif kind == zmq.EVENT_DISCONNECTED and fd in self._handshaking:
                del self._handshaking[fd]
                self.stats.refused_peers += 1
            elif kind == zmq.EVENT_DISCONNECTED and fd in self._established:
                self._established.discard(fd)
                self.stats.disconnects += 1

    def _drain(self) -> None:
        import zmq

        for _ in range(1000):   # then the monitor and the checks get a turn
            try:
                parts = self._sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(parts) != 2:
                self.stats.bad_messages += 1
                continue
            self._handle(parts[0], parts[1])

    def _reply(self, identity: bytes, message: dict[str, Any]) -> None:
        import zmq

        with contextlib.suppress(zmq.ZMQError):
            self._sock.send_multipart([identity, pack(message)], zmq.NOBLOCK)

    def _handle(self, identity: bytes, data: bytes) -> None:
        received = time.time_ns()
        try:
            msg = unpack(data)
            kind, agent, node = msg["kind"], str(msg["agent"]), str(msg["node"])
            if msg.get("v") != LINK_VERSION or kind not in ("data", "ctx", "end"):
                raise ValueError(kind)
            frames = msg.get("frames") or []
            if not isinstance(frames, list):
                raise ValueError("frames")
            sent, after = int(msg.get("t") or received), int(msg.get("next") or 0)
            if not -MAX_SKEW_NS < received - sent < MAX_SKEW_NS:   # no clock is that far off: a bad time
                raise ValueError("t")
            if not 0 <= after < 2**63:   # a sequence number the reply could not carry
                raise ValueError("next")
            seq = msg.get("seq")
            if kind != "ctx" and (not isinstance(seq, int) or isinstance(seq, bool)):
                raise ValueError("seq")
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError):   # int(inf): OverflowError
            self.stats.bad_messages += 1
            return
        with self._lock:
            stream = self.merger.streams.get(agent)
            if kind == "ctx":
                stream = stream or self.merger.join(agent, node)
                self._merge(stream, frames)
                # data goes on from ``next``: past messages the agent dropped, never back over merged ones
                self._expected[agent] = max(self._expected.get(agent, 0), after)
            elif stream is None or agent not in self._expected:
                if seq == 0:   # a new agent's first message holds its hello
                    stream = self.merger.join(agent, node)
                    self._expected[agent] = 0
                else:                     # we are a new collector: the agent must say who it is
                    self._identity[agent] = identity
                    if time.monotonic() - self._asked.get(agent, -ASK_AGAIN_S) >= ASK_AGAIN_S:
                        self._asked[agent] = time.monotonic()
                        self._reply(identity, {"need": "ctx"})
                    return
        self._identity[agent] = identity
        self._heard[agent] = time.monotonic()
        if kind == "ctx":
            self._note_drops(stream, msg)
            return
        expected = self._expected[agent]
        if seq < expected:
            self.stats.duplicates += 1
            self._reply(identity, {"ack": expected - 1})
            return
        if seq > expected:   # one went missing in transit: the agent sends from it again (asked once a while)
            asked = self._gaps.get(agent)
            again = asked is None or asked[0] != expected or time.monotonic() - asked[1] >= ASK_AGAIN_S
            if again:
                self._gaps[agent] = (expected, time.monotonic())
            self._reply(identity, {"ack": expected - 1, "gap": 1} if again else {"ack": expected - 1})
            return
        with self._lock:
            self.merger.clock(stream, sent, received)
            if stream.state == "lost":
                self.merger.node_frame(stream, "back")
            self._merge(stream, frames)
            self._note_drops(stream, msg)
            if kind == "end":
                self.merger.node_frame(stream, "ended", str(msg.get("reason") or "ended"))
        self._expected[agent] = seq + 1
        self.stats.messages += 1
        self.stats.bytes += len(data)
        self._reply(identity, {"ack": seq})

    def _merge(self, stream: Stream, frames: list[Any]) -> None:
        for frame in frames:
            if self.merger.add(stream, frame):
                self.stats.frames += 1
            else:
                self.stats.bad_frames += 1

    def _note_drops(self, stream: Stream, msg: dict[str, Any]) -> None:
        dropped = msg.get("dropped")
        if isinstance(dropped, int) and dropped > stream.dropped:
            self.writer.write({
                "k": "error", "t": time.time_ns(), "pid": None, "kind": "agent_buffer_full",
                "msg": f"node {stream.name}: its agent's buffer dropped {dropped - stream.dropped} messages "
                       f"({_number(msg.get('dropped_bytes')) / 1e6:.1f} MB in all) while the collector was "
                       "unreachable; that stretch of its data is missing (raise the agent's --buffer-mb)"})
            self.stats.agent_dropped += dropped - stream.dropped
            stream.dropped = dropped

    def _check_lost(self) -> None:
        now = time.monotonic()
        with self._lock:
            for agent, stream in self.merger.streams.items():
                if stream.state in ("joined", "back") and now - self._heard.get(agent, now) > self.lost_s:
                    self.merger.node_frame(stream, "lost", f"no message for {self.lost_s:.0f} s")

    def _write_stats(self, force: bool = False) -> None:
        if force or self.stats != self._written:
            self._written = NetStats(**asdict(self.stats))
            self.writer.write({"k": "net", "t": time.time_ns(), **asdict(self.stats)})


def _more_descriptors() -> None:
    """Raise this process's descriptor limit to its hard limit (at most MAX_DESCRIPTORS): each
    connection, a flood's included, holds one until its handshake times out."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = MAX_DESCRIPTORS if hard == resource.RLIM_INFINITY else min(hard, MAX_DESCRIPTORS)
    if soft != resource.RLIM_INFINITY and soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def _number(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _failed_events() -> int:
    import zmq

    return zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH


def _quiet_log() -> Any:
    import logging

    log = logging.getLogger("traceml.zap")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    return log
