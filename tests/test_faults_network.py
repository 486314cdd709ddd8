"""The collector's port under abuse (docs/faults.md): an oversized message from a peer with the
key, and a flood of connections that never complete a handshake. Each is dropped and counted,
the collector's memory stays bounded, and a real agent keeps streaming."""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path

import psutil
import zmq

from tests.test_multinode import Agent, Session, fixture_frames, served, wait_for
from traceml_agent.link import Keys, read_token
from traceml_agent.wire import MAX_FRAME_BYTES

FLOOD = 300          # idle connections at once (each holds a descriptor until its handshake times out)
MEMORY_MB = 64       # what the collector's process may grow by meanwhile (an oversized message is 33 MiB)


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 1e6


def test_an_oversized_message_is_dropped_unread_and_the_collector_goes_on(tmp_path: Path):
    session = Session(tmp_path)
    before = rss_mb()
    # GIVEN a peer with the right key that sends one message over the size limit
    keys = Keys.from_token(read_token(session.token))
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = (
        keys.server_public, keys.client_public, keys.client_secret)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"tcp://127.0.0.1:{session.port}")
    sock.send(b"\x00" * (MAX_FRAME_BYTES + (1 << 20)))
    # THEN the collector drops its connection without reading the message, and counts it
    wait_for(lambda: session.collector.stats.disconnects >= 1, timeout_s=20)
    sock.close()
    ctx.term()
    assert session.collector.stats.bad_messages == 0 and session.collector.stats.messages == 0
    assert rss_mb() - before < MEMORY_MB
    # AND a real agent is served after it
    rec = served(session)
    assert len(rec.targets) == 1 and rec.net["disconnects"] >= 1


def test_a_flood_of_connections_is_dropped_and_an_agent_keeps_streaming(tmp_path: Path):
    session = Session(tmp_path)
    before = rss_mb()
    flood: list[socket.socket] = []
    try:
        # GIVEN FLOOD connections that send nothing and stay open
        for _ in range(FLOOD):
            flood.append(socket.create_connection(("127.0.0.1", session.port)))
        started = time.monotonic()
        # WHEN a real agent streams meanwhile
        agent = Agent(session.port, session.token, "node-a")
        frames = fixture_frames("input_bound")
        agent.send(frames[:10])
        # THEN every idle connection is dropped when its handshake times out (5 s, not ZeroMQ's 30 s), and counted
        wait_for(lambda: session.collector.stats.refused_peers >= FLOOD, timeout_s=30)
        assert time.monotonic() - started < 20
        agent.send(frames[10:20])
        assert agent.finish()
    finally:
        for conn in flood:
            with contextlib.suppress(OSError):
                conn.close()
    # AND the agent was served in full, with the collector's memory bounded
    rec = session.close()
    assert len(rec.targets) == 1 and rec.spans and rec.net["refused_peers"] >= FLOOD
    assert rss_mb() - before < MEMORY_MB
