"""The frame stream's wire format: one msgpack map per frame, appended to a file.

Frames are primitive and compact: integer nanosecond timestamps and interned code
frames and stacks. A ``spans`` frame carries the definitions of any frame or stack id
it uses for the first time, so the stream decodes in one forward pass and a file cut
short at any frame boundary is still a valid recording.

Frame kinds (key ``k``)::

    hello    {v, t, agent, backend, backend_version, rate_hz, window_s, host, argv}
    target   {t, pid, exe, cmd, nspid, rank, local_rank, world_size, group_rank}
             nspid: the target's PID in each PID namespace (NVML reports the host's)
    spans    {pid, w, fdefs: [[id, name, file, line, src, ctx]], sdefs: [[id, [fid...]]],
              spans: [[tid, ts_ns, dur_ns, sid]]}
             a span is a stack observed continuously for dur_ns; stacks list frames
             outermost first; ``src`` is the source line, ``ctx`` the enclosing
             ``with`` items of that line (for ``no_grad``), both None when unreadable
    window   {pid, w, start, end, samples, errors}   one py-spy recording window
    threads  {pid, t, threads: [[tid, os_tid, name, active]]}
             name: the Python name py-spy read, the last one read for that thread, or
             "MainThread" for the main thread of a CPython that never imported threading
             (agent.pyspy.ThreadNames); None when it cannot be known
    proc     {pid, t, cpu, rss, nthreads, children: [[pid, cpu, rss]]}
    tcpu     {pid, tid, samples: [[ts_ns, on_cpu_ns, runqueue_ns]]}   main thread, cumulative
    host     {t, cpu, mem_used, mem_total}
    gpu      {t, devices: [[index, util %, mem_used, mem_total, temp C, power W, limit W, mig]],
              procs: [[device, host_pid, used bytes, SM %]]}
    restart  {t, rank, old_pid, pid}              the launcher replaced a rank's process
    error    {t, pid, kind, msg}
    exit     {t, pid, status}
    bye      {t, reason}                          written by the session when it ends
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from typing import Any, BinaryIO

import msgpack

WIRE_VERSION = 1

# Decoding limits: no legitimate frame comes near these; a corrupt or hostile file
# must not make the reader allocate gigabytes.
MAX_FRAME_BYTES = 32 * 1024 * 1024
MAX_STR_LEN = 1024 * 1024
MAX_ARRAY_LEN = 2_000_000
MAX_MAP_LEN = 10_000


def unpacker(stream: BinaryIO | None = None) -> msgpack.Unpacker:
    """A msgpack Unpacker with the stream's size limits."""
    return msgpack.Unpacker(
        stream,
        raw=False,
        max_buffer_size=MAX_FRAME_BYTES,
        max_str_len=MAX_STR_LEN,
        max_bin_len=MAX_STR_LEN,
        max_array_len=MAX_ARRAY_LEN,
        max_map_len=MAX_MAP_LEN,
        max_ext_len=0,
    )


class Interner:
    """Assigns small integer ids to code frames and stacks, remembering what was sent."""

    def __init__(self) -> None:
        self._frames: dict[tuple[Any, ...], int] = {}
        self._stacks: dict[tuple[int, ...], int] = {}

    def intern(
        self,
        stack: Iterable[tuple[Any, ...]],
        fdefs: list[list[Any]],
        sdefs: list[list[Any]],
    ) -> int:
        """Return the stack's id, appending new definitions to ``fdefs``/``sdefs``.

        ``stack`` holds (name, file, line, src, ctx) tuples, outermost first.
        """
        fids = []
        for frame in stack:
            fid = self._frames.get(frame)
            if fid is None:
                fid = len(self._frames)
                self._frames[frame] = fid
                fdefs.append([fid, *frame])
            fids.append(fid)
        key = tuple(fids)
        sid = self._stacks.get(key)
        if sid is None:
            sid = len(self._stacks)
            self._stacks[key] = sid
            sdefs.append([sid, fids])
        return sid


class FrameWriter:
    """Appends frames to a file (and to any live listeners), thread-safe; shared by all of a
    node's samplers.

    Every frame is flushed as it is written so that a crash of the attacher loses
    nothing already sampled.
    """

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self._lock = threading.Lock()
        self._file: BinaryIO | None = open(path, "ab") if path is not None else None  # noqa: SIM115
        self._listeners: list[Any] = []
        self.interner = Interner()

    def listen(self, callback: Any) -> None:
        """Call ``callback(frame)`` for every frame written from now on."""
        self._listeners.append(callback)

    def write(self, frame: dict[str, Any]) -> None:
        with self._lock:
            self._write_locked(frame)

    def write_spans(self, pid: int, window: int, spans: list[tuple[int, int, int, list[tuple[Any, ...]]]]) -> None:
        """Write a ``spans`` frame; interning and writing happen under one lock so that, with
        several samplers sharing this writer, no frame can use an id defined by a frame
        written after it."""
        with self._lock:
            fdefs: list[list[Any]] = []
            sdefs: list[list[Any]] = []
            rows = [[tid, ts, dur, self.interner.intern(frames, fdefs, sdefs)] for tid, ts, dur, frames in spans]
            self._write_locked({"k": "spans", "pid": pid, "w": window, "fdefs": fdefs, "sdefs": sdefs,
                                "spans": rows})

    def _write_locked(self, frame: dict[str, Any]) -> None:
        data = msgpack.packb(frame, use_bin_type=True)
        if self._file is not None:
            self._file.write(data)
            self._file.flush()
        for callback in self._listeners:
            callback(frame)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
