"""Many agents' streams into one recording: the collector's stream namespace.

Each agent's stream has its own PIDs, code-frame ids and stack ids, so two nodes' ids would
collide. The merger rewrites every frame of node ``n`` (n >= 1; the collector's own ranks are
node 0 and written as they are):

- a PID ``p`` becomes the *process key* ``n << 22 | p`` (``proc_key``). Linux PIDs are below
  2**22 (pid_max's ceiling), so keys never collide and ``os_pid``/``node_of`` (ingest/model.py)
  read them back;
  NVML's host PIDs and a target's NSpid are rewritten the same way, so GPU readings still find
  their rank, on their own node only;
- GPU device ``i`` becomes ``n << 8 | i`` (``device_key``), so node 1's GPU 0 is not node 0's;
- stacks are defined again in the collector's own interner (one id per distinct stack, whatever
  node sent it);
- every rewritten frame carries ``n``; ``host`` and ``gpu`` frames too, so per-node readings
  stay apart.

A stream's ``hello`` is not copied: it becomes a ``node`` frame (state ``joined``), which the
recording keeps with the node's host name, agent id, sampling rate and clock offset. The same
frame kind says when a node is ``lost`` (its agent silent for LOST_S), ``back``, or ``ended``
(its job ended), and carries the newest clock-offset estimate.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from traceml_agent.writer import FrameWriter
from traceml_attach.ingest.model import PID_BITS

DEVICE_BITS = 8


def proc_key(node: int, pid: int) -> int:
    return (node << PID_BITS) | pid


def device_key(node: int, index: int) -> int:
    return (node << DEVICE_BITS) | index


def node_frame(node: int, name: str, agent: str | None, state: str, reason: str | None, host: str | None,
               rate_hz: int | None, backend_version: str | None, offset_ns: int | None,
               ranks: Iterable[int]) -> dict[str, Any]:
    """A ``node`` frame: a node's state (joined | back | lost | ended), for the merger's streams and
    the collector's own ranks (node 0)."""
    return {"k": "node", "t": time.time_ns(), "node": node, "name": name, "agent": agent, "state": state,
            "reason": reason, "host": host, "rate_hz": rate_hz, "backend_version": backend_version,
            "offset_ns": offset_ns, "ranks": sorted(ranks)}


# frames whose ``pid`` is rewritten as they are; the others are handled one by one below
_PID_FRAMES = {"window", "threads", "proc", "tcpu", "scpu", "mem", "source", "exit", "error", "pstate"}


@dataclass
class Stream:
    """One agent's stream, as the merger knows it."""

    node: int
    name: str
    agent: str
    frames: dict[int, tuple[Any, ...]] = field(default_factory=dict)   # the agent's code-frame ids
    stacks: dict[int, int] = field(default_factory=dict)               # the agent's stack id -> ours
    hello: dict[str, Any] = field(default_factory=dict)
    offset_ns: int | None = None        # collector clock - agent clock (upper bound: + the network's delay)
    reported_offset_ns: int | None = None
    ranks: set[int] = field(default_factory=set)
    state: str = "joined"
    dropped: int = 0                    # messages its agent said it dropped (buffer full)


class Merger:
    """Rewrites each stream's frames into ``writer`` (see the module doc). Not thread-safe: the
    collector's thread alone calls it."""

    def __init__(self, writer: FrameWriter) -> None:
        self.writer = writer
        self.streams: dict[str, Stream] = {}   # by agent id
        self._names: dict[str, int] = {}       # node name -> node index (a restarted agent keeps its node)
        self._next_node = 1

    def join(self, agent: str, name: str) -> Stream:
        """The stream of ``agent`` (on node ``name``), new or known."""
        stream = self.streams.get(agent)
        if stream is not None:
            return stream
        node = self._names.get(name)
        if node is None or any(s.node == node and s.state not in ("lost", "ended") for s in self.streams.values()):
            if node is not None:   # two live agents give one name: tell them apart
                name = f"{name}#{self._next_node}"
            node = self._next_node
            self._next_node += 1
            self._names[name] = node
        stream = self.streams[agent] = Stream(node, name, agent)
        return stream

    def clock(self, stream: Stream, sent_ns: int, received_ns: int) -> None:
        """Fold in one message's send time: the smallest receive-minus-send seen is the offset plus
        the network's shortest delay. A change of over 1 ms is written as a ``node`` frame."""
        delta = received_ns - sent_ns
        if stream.offset_ns is None or delta < stream.offset_ns:
            stream.offset_ns = delta
        if stream.reported_offset_ns is None or abs(stream.offset_ns - stream.reported_offset_ns) > 1_000_000:
            stream.reported_offset_ns = stream.offset_ns
            if stream.hello:
                self.node_frame(stream, stream.state)

    def node_frame(self, stream: Stream, state: str, reason: str | None = None) -> None:
        stream.state = state
        hello = stream.hello
        self.writer.write(node_frame(stream.node, stream.name, stream.agent, state, reason, hello.get("host"),
                                     hello.get("rate_hz"), hello.get("backend_version"), stream.offset_ns,
                                     stream.ranks))

    def add(self, stream: Stream, frame: Any) -> bool:
        """Rewrite and write one frame of ``stream``; False (nothing written) when it is malformed."""
        try:
            return self._add(stream, frame)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            return False

    def _add(self, stream: Stream, f: dict[str, Any]) -> bool:
        kind, n = f["k"], stream.node
        if kind == "hello":
            first = not stream.hello
            stream.hello = {k: f.get(k) for k in ("host", "rate_hz", "window_s", "backend", "backend_version",
                                                  "agent", "v")}
            if first:
                self.node_frame(stream, "joined")
            return True
        if kind == "defs":
            self._define(stream, f)
            return True
        if kind == "spans":
            self._define(stream, f)
            rows = [[int(tid), int(ts), int(dur), stream.stacks[int(sid)]] for tid, ts, dur, sid in f["spans"]]
            self.writer.write_interned(proc_key(n, int(f["pid"])), int(f["w"]), rows, {"n": n})
            return True
        out = dict(f)
        out["n"] = n
        if kind in _PID_FRAMES:
            if out.get("pid") is not None:
                out["pid"] = proc_key(n, int(out["pid"]))
        elif kind == "target":
            pid = int(f["pid"])
            out["pid"] = proc_key(n, pid)
            out["nspid"] = [proc_key(n, int(p)) for p in f.get("nspid") or (pid,)]
            if isinstance(f.get("rank"), int):
                stream.ranks.add(f["rank"])
        elif kind == "restart":
            out["old_pid"], out["pid"] = proc_key(n, int(f["old_pid"])), proc_key(n, int(f["pid"]))
        elif kind == "gpu":
            out["devices"] = [[device_key(n, int(d[0])), *d[1:]] for d in f["devices"]]
            out["procs"] = [[device_key(n, int(p[0])), proc_key(n, int(p[1])), *p[2:]] for p in f["procs"]]
        elif kind == "host":
            pass
        else:
            return False   # bye/segment/node are the collector's own; anything else is unknown
        self.writer.write(out)
        return True

    def _define(self, stream: Stream, f: dict[str, Any]) -> None:
        for fid, name, path, line, src, ctx in f.get("fdefs") or ():
            stream.frames[int(fid)] = (str(name), str(path), int(line), src, ctx)
        for sid, fids in f.get("sdefs") or ():
            stream.stacks[int(sid)] = self.writer.define_stack([stream.frames[int(i)] for i in fids])
