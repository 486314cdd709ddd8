"""The agent's link to a collector on another machine: ZeroMQ, CURVE-encrypted and authenticated.

Why these sockets. The agent is a DEALER and the collector a ROUTER, not PUSH/PULL: the data
goes one way, as with PUSH, but the same connection carries two things back that PUSH cannot:
the collector's acknowledgements (so that what a restarted collector never received is sent
again, from the agent's buffer) and its end of the session. One port, one encrypted
connection per agent, and the ROUTER tells every message's sender apart by its routing id.

Keys. The token file holds 32 random bytes (hex). The collector's and the agents' CURVE key
pairs are derived from it (``Keys.from_token``), so one file is all a node needs; a peer
without it cannot complete the handshake, or is refused by the collector's authenticator.

Messages (one ZeroMQ frame each, msgpack, decoded with the recording's size limits)::

    agent -> collector  {v, kind, node, agent, seq, t, frames, dropped, dropped_bytes, next, reason}
        kind "data": ``frames`` (wire frames, agent/wire.py) numbered by ``seq`` from 0, one message
                     every BATCH_S (an empty one every HEARTBEAT_S: the collector's sign of life)
        kind "ctx":  the stream's state (hello, targets, threads, exits, restarts, and every code
                     frame and stack definition) for a collector that does not know this stream;
                     data goes on from seq ``next``
        kind "end":  the job on this node ended (``reason``); the agent exits once it is acknowledged
        t: the agent's wall clock (ns) when sent: the collector estimates the node's clock offset
    collector -> agent  {ack: seq} | {ack: seq, gap: 1} (resend after seq) | {need: "ctx"} | {end: reason}

Delivery. Every data message stays in the agent's buffer until acknowledged; unacknowledged
messages are sent again, oldest first, when a connection to the collector is (re)established
(TCP loses nothing on a live connection, only with a dropped one), when the collector asks
(``gap``, a new collector), after a send ZeroMQ refused (no connection, or its queue full), and
after RESEND_S without progress as a last resort. The buffer holds at most ``buffer_bytes``
(default BUFFER_BYTES); past it the oldest messages are dropped, counted in every later
message's ``dropped``/``dropped_bytes``, and the collector records the loss.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

from traceml_agent.wire import MAX_FRAME_BYTES, unpacker
from traceml_agent.writer import StateFrames

LINK_VERSION = 1
BATCH_S = 0.25            # frames are sent in one message this often
HEARTBEAT_S = 1.0         # an empty message after this long without one
RESEND_S = 15.0           # no acknowledgement for this long on a live connection: send the buffer again
BUFFER_BYTES = 64_000_000   # unacknowledged messages kept for a collector that is away
END_WAIT_S = 5.0          # how long an agent whose job ended waits for the collector's acknowledgement
RECONNECT_MS = 200        # ZeroMQ reconnects after this, doubling up to...
RECONNECT_MAX_MS = 5000   # ...this


class LinkError(Exception):
    """A token file or an endpoint that cannot be used; the message says what to do."""


def _z85_pair(token: bytes, role: bytes) -> tuple[bytes, bytes]:
    import zmq  # the single-node attacher never needs ZeroMQ
    from zmq.utils import z85

    secret = z85.encode(hashlib.blake2b(token, digest_size=32, person=b"traceml-" + role).digest())
    return zmq.curve_public(secret), secret


@dataclass(frozen=True)
class Keys:
    """The collector's and the agents' CURVE key pairs (Z85), all derived from one token."""

    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes

    @classmethod
    def from_token(cls, token: bytes) -> Keys:
        server = _z85_pair(token, b"server")
        client = _z85_pair(token, b"client")
        return cls(server[0], server[1], client[0], client[1])


def read_token(path: Path) -> bytes:
    """The token in ``path``; LinkError (one line) when it is missing or not a token."""
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError as exc:
        raise LinkError(f"token file {path} does not exist: copy the one the collector created "
                        "(traceml attach --listen ... --token-file FILE) to this node") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise LinkError(f"cannot read token file {path}: {exc}") from exc
    try:
        token = bytes.fromhex(text)
    except ValueError:
        token = b""
    if len(token) != 32:
        raise LinkError(f"{path} is not a traceml token file (64 hex digits expected)")
    return token


def create_token(path: Path) -> bool:
    """Write a new token to ``path`` (mode 0600) unless the file exists; True if it was created."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    except OSError as exc:
        raise LinkError(f"cannot create token file {path}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(secrets.token_hex(32) + "\n")
    return True


def token_warning(path: Path) -> str | None:
    """A line for a token file others can read (it is the key to the session)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    if mode & 0o077:
        return f"token file {path} can be read by other users (mode {mode & 0o777:o}): chmod 600 {path}"
    return None


def endpoint(text: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """HOST:PORT (or :PORT, or PORT) as (host, port); LinkError when it is not one."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    host = host.strip("[]") or default_host
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise LinkError(f"{text!r} is not HOST:PORT (for example 10.0.0.5:5555)")
    return host, int(port_text)


def pack(message: dict[str, Any]) -> bytes:
    return msgpack.packb(message, use_bin_type=True)


def unpack(data: bytes) -> Any:
    """One message, with the frame decoder's size limits; raises ValueError when malformed."""
    if len(data) > MAX_FRAME_BYTES:
        raise ValueError("message too large")
    reader = unpacker()
    try:
        reader.feed(data)
        message = reader.unpack()
    except Exception as exc:   # msgpack's errors have no common base but ValueError subclasses
        raise ValueError(f"not a message: {exc}") from exc
    return message


class StreamState:
    """What a collector needs to read a stream it joins late: the newest state frames (as a rotated
    segment repeats them) and every code-frame and stack definition sent so far."""

    def __init__(self) -> None:
        self.frames = StateFrames()
        self.fdefs: list[list[Any]] = []
        self.sdefs: list[list[Any]] = []

    def remember(self, frame: dict[str, Any]) -> None:
        self.frames.remember(frame)
        if frame.get("k") == "spans":
            self.fdefs.extend(frame.get("fdefs") or ())
            self.sdefs.extend(frame.get("sdefs") or ())

    def context(self) -> list[dict[str, Any]]:
        frames = self.frames.frames()
        if self.fdefs or self.sdefs:
            frames.append({"k": "defs", "fdefs": self.fdefs, "sdefs": self.sdefs})
        return frames


@dataclass
class LinkStats:
    sent_messages: int = 0
    sent_bytes: int = 0
    resent_messages: int = 0
    dropped_messages: int = 0
    dropped_bytes: int = 0
    acked: int = -1


class AgentLink:
    """Sends a node's frames to the collector (see the module doc). ``put`` is the FrameWriter's
    listener; ``run`` is the link's own thread; ``finish`` says the job ended and waits for the
    collector to acknowledge everything."""

    def __init__(self, host: str, port: int, keys: Keys, node: str, buffer_bytes: int = BUFFER_BYTES) -> None:
        import zmq

        self.node, self.agent = node, uuid.uuid4().hex[:12]
        self.buffer_bytes = buffer_bytes
        self.stats = LinkStats()
        self.state = StreamState()
        self.ended_by: str | None = None           # the collector's reason, when it ended the session
        self.collector_seen = threading.Event()    # some reply has come: the collector is there
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._buffer: deque[tuple[int, bytes]] = deque()   # (seq, message) not yet acknowledged
        self._buffered = 0
        self._seq = 0
        self._last_queued = 0.0   # when a message last went into the buffer
        self._progress = time.monotonic()   # when an acknowledgement last moved forward
        self._end: str | None = None
        self._unsent_from: int | None = None   # the oldest seq ZeroMQ refused to send
        self._connections = 0                  # handshakes with the collector so far
        self._ctx = zmq.Context()
        sock = self._sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.ROUTING_ID, self.agent.encode())
        sock.curve_serverkey = keys.server_public
        sock.curve_publickey = keys.client_public
        sock.curve_secretkey = keys.client_secret
        sock.setsockopt(zmq.IMMEDIATE, 1)        # nothing queued towards a collector that is not there
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 256)
        sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_MS)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_MAX_MS)
        sock.setsockopt(zmq.HEARTBEAT_IVL, 1000)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 5000)
        sock.setsockopt(zmq.MAXMSGSIZE, 1 << 20)   # replies are tiny
        self._monitor = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        sock.connect(f"tcp://{host}:{port}")

    # -- called by the node's threads ------------------------------------------------

    def put(self, frame: dict[str, Any]) -> None:
        with self._lock:
            self._pending.append(frame)

    # -- the link's thread -----------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Send, receive and resend until ``stop`` (or the collector ends the session)."""
        next_batch = time.monotonic()
        while not stop.is_set() and self.ended_by is None:
            now = time.monotonic()
            if now >= next_batch:
                next_batch = now + BATCH_S
                self._send_batch(now)
                self._retry(now)
            self._receive(timeout_ms=50)

    def finish(self, reason: str, wait_s: float = END_WAIT_S) -> bool:
        """Send what is pending and the end of the stream; True once the collector has it all."""
        self._end = reason
        self._send_batch(time.monotonic(), force=True)
        deadline = time.monotonic() + wait_s
        while self._buffer and time.monotonic() < deadline and self.ended_by is None:
            self._retry(time.monotonic())
            self._receive(timeout_ms=50)
        return not self._buffer

    def close(self) -> None:
        import zmq

        with contextlib.suppress(zmq.ZMQError):
            self._sock.disable_monitor()
        self._monitor.close(linger=0)
        self._sock.close(linger=0)
        self._ctx.term()

    def _send_batch(self, now: float, force: bool = False) -> None:
        with self._lock:
            frames, self._pending = self._pending, []
        for frame in frames:
            self.state.remember(frame)
        if not frames and not force and now - self._last_queued < HEARTBEAT_S:
            return   # a heartbeat only after HEARTBEAT_S without a message (sent or waiting to be)
        self._last_queued = now
        kind = "end" if self._end is not None and force else "data"
        message = self._message(kind, seq=self._seq, frames=frames, reason=self._end)
        self._buffer.append((self._seq, message))
        self._buffered += len(message)
        self._seq += 1
        while self._buffered > self.buffer_bytes and len(self._buffer) > 1:
            _, old = self._buffer.popleft()
            self._buffered -= len(old)
            self.stats.dropped_messages += 1
            self._unsent_from = None if self._unsent_from is None else max(self._unsent_from, self._buffer[0][0])
            self.stats.dropped_bytes += len(old)
        if self._unsent_from is not None:   # in order: what ZeroMQ refused before goes first
            self._resend(self._unsent_from)
        else:
            self._send(message, self._seq - 1)

    def _retry(self, now: float) -> None:
        """Send again what ZeroMQ refused, or everything after RESEND_S without progress."""
        if not self._buffer:
            self._unsent_from = None
        elif self._unsent_from is not None:
            start, self._unsent_from = self._unsent_from, None
            self._resend(start)
        elif now - self._progress >= RESEND_S:
            self._resend(self._buffer[0][0])

    def _message(self, kind: str, **fields: Any) -> bytes:
        return pack({"v": LINK_VERSION, "kind": kind, "node": self.node, "agent": self.agent, "t": time.time_ns(),
                     "dropped": self.stats.dropped_messages, "dropped_bytes": self.stats.dropped_bytes, **fields})

    def _send(self, message: bytes, seq: int | None = None) -> bool:
        import zmq

        try:
            self._sock.send(message, zmq.NOBLOCK)
        except zmq.Again:   # no collector connected, or its queue is full: the buffer keeps it for later
            if seq is not None:
                self._unsent_from = seq if self._unsent_from is None else min(self._unsent_from, seq)
            return False
        self.stats.sent_messages += 1
        self.stats.sent_bytes += len(message)
        return True

    def _resend(self, after: int) -> None:
        """Send the buffer again from seq ``after`` on; the context first when that is gone."""
        if self._buffer and self._buffer[0][0] > max(after, self.stats.acked + 1):   # dropped from a full buffer
            self._send(self._message("ctx", seq=None, next=self._buffer[0][0], frames=self.state.context()))
        after = max(after, self.stats.acked + 1)
        if self._unsent_from is not None and after <= self._unsent_from:
            self._unsent_from = None   # sent now (a refusal below marks it again)
        for seq, message in list(self._buffer):
            if seq >= after:
                if not self._send(message, seq):
                    break   # the rest goes with it, from this seq, once ZeroMQ takes messages again
                self.stats.resent_messages += 1
        self._progress = time.monotonic()

    def _receive(self, timeout_ms: int) -> None:
        import zmq
        from zmq.utils.monitor import recv_monitor_message

        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self._monitor, zmq.POLLIN)
        ready = dict(poller.poll(timeout_ms))
        if self._monitor in ready:
            connected = False
            while True:
                try:
                    event = recv_monitor_message(self._monitor, zmq.NOBLOCK)["event"]
                    connected |= event == zmq.EVENT_HANDSHAKE_SUCCEEDED
                except zmq.Again:
                    break
            if connected and self._connections and self._buffer:
                # a new connection after another: what was in flight on the old one may be lost
                self._resend(self._buffer[0][0])
            self._connections += connected
        if self._sock not in ready:
            return
        while True:
            try:
                data = self._sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            self.collector_seen.set()
            with contextlib.suppress(ValueError):
                self._reply(unpack(data))

    def _reply(self, reply: Any) -> None:
        if not isinstance(reply, dict):
            return
        if "end" in reply:
            self.ended_by = str(reply["end"])
        elif reply.get("need") == "ctx":
            oldest = self._buffer[0][0] if self._buffer else self._seq
            self._send(self._message("ctx", seq=None, next=oldest, frames=self.state.context()))
            self._resend(oldest)
        elif isinstance(reply.get("ack"), int):
            acked = reply["ack"]
            if acked > self.stats.acked:
                self.stats.acked = acked
                self._progress = time.monotonic()
            while self._buffer and self._buffer[0][0] <= acked:
                _, message = self._buffer.popleft()
                self._buffered -= len(message)
            if reply.get("gap"):
                self._resend(acked + 1)
