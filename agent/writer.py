"""Writing the frame stream (agent/wire.py): batched, rotated in segments under a cap, and cut
back to its last whole frame when the disk fails.

Rotation (``FrameWriter(path, max_bytes=...)``). The recording is a chain of segments of
at most ``max_bytes / SEGMENTS`` bytes each (a single larger frame gets one of its own):
``frames.msgpack`` is segment 0, then ``frames.000001.msgpack``, ``frames.000002.msgpack``, …
Segment 0 is kept for good (the attach-time context: hello, targets, threads, the first
minutes of samples). When a new segment starts, the oldest *middle* segments are deleted
until the files and a full new segment fit under ``max_bytes`` (and again before a frame
that would not fit), so the files stay under the cap, what is kept is segment 0 plus the
newest segments, and what was dropped is one contiguous stretch (segments 1..m).

Every numbered segment decodes on its own, with no other file (deleting one can never make
another unreadable, and no index has to be kept in step with the deletions; the cost is a
few KB of repeated context and definitions per segment):

- it opens with a ``segment`` frame, then ``ctx`` copies of the stream's state frames: the
  hello, each target's newest ``target``, ``threads`` and ``rate`` frame, exits and restarts;
- the interner forgets what it has sent at each new segment, so the first ``spans`` frame
  that uses a code frame or stack in a segment defines it again (same id: ids are stable
  for the whole session, and a reader that reads segments in a row sees the same
  definition twice).

A reader that has read the previous segment whole skips the ``ctx`` frames (they repeat what
it has); after a gap it folds them in (traceml_attach/ingest/segments.py).

Writes are batched: frames are buffered and written with one flush every ``flush_s``
seconds (or 1 MiB), at each segment change and at close. A cut anywhere (the attacher
killed mid-write) loses at most the unflushed second; the files end at or inside a
frame, and the reader keeps every whole frame before the cut.

A file that cannot be written (a full disk, a folder made read-only, an I/O error) never
raises into the caller: the writer cuts the file back to the end of its last whole write (so
it ends on a frame boundary and replays without a "damaged" note), stops writing files for the
rest of the session, and hands its listeners one ``error`` frame (kind ``recording_failed``)
saying so. Listeners go on getting every frame: the live view and the summary built from them
lose nothing; only the recording on disk stops at the fault (``failure``, ``failed_at_ns``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

import msgpack

from traceml_agent.wire import segment_path

# Rotation and batching (FrameWriter): a recording capped at max_bytes is cut in this many
# segments' worth, so rotation drops at most 1/SEGMENTS of the cap at a time.
SEGMENTS = 8
FLUSH_S = 1.0                  # a flush at least this often while frames arrive...
FLUSH_BYTES = 1024 * 1024      # ...or once this much is buffered
NOTE_BYTES = 256               # room kept for a ``segment`` frame
CONTEXT_RESTARTS = 64          # a segment's context repeats at most this many newest restarts


class Interner:
    """Assigns small integer ids to code frames and stacks, remembering which definitions the
    current segment has received (``new_segment`` forgets that, not the ids)."""

    def __init__(self) -> None:
        self._frames: dict[tuple[Any, ...], int] = {}
        self._stacks: dict[tuple[int, ...], int] = {}
        self._frame_list: list[tuple[Any, ...]] = []   # by id, to define them again in a new segment
        self._stack_list: list[tuple[int, ...]] = []
        self._sent_frames: set[int] = set()
        self._sent_stacks: set[int] = set()

    def new_segment(self) -> None:
        """From now on, define every id again the first time it is used."""
        self._sent_frames.clear()
        self._sent_stacks.clear()

    def intern(
        self,
        stack: Iterable[tuple[Any, ...]],
        fdefs: list[list[Any]],
        sdefs: list[list[Any]],
    ) -> int:
        """Return the stack's id, appending the definitions not yet sent to ``fdefs``/``sdefs``.

        ``stack`` holds (name, file, line, src, ctx) tuples, outermost first.
        """
        sid = self.define(stack)
        self.emit(sid, fdefs, sdefs)
        return sid

    def define(self, stack: Iterable[tuple[Any, ...]]) -> int:
        """The stack's id (assigned now if new), without sending anything."""
        fids = []
        for frame in stack:
            fid = self._frames.get(frame)
            if fid is None:
                fid = len(self._frames)
                self._frames[frame] = fid
                self._frame_list.append(frame)
            fids.append(fid)
        key = tuple(fids)
        sid = self._stacks.get(key)
        if sid is None:
            sid = len(self._stacks)
            self._stacks[key] = sid
            self._stack_list.append(key)
        return sid

    def emit(self, sid: int, fdefs: list[list[Any]], sdefs: list[list[Any]]) -> None:
        """Append the definitions of stack ``sid`` (and its frames) not yet sent in this segment."""
        if sid in self._sent_stacks:
            return
        self._sent_stacks.add(sid)
        fids = self._stack_list[sid]
        for fid in fids:
            if fid not in self._sent_frames:
                self._sent_frames.add(fid)
                fdefs.append([fid, *self._frame_list[fid]])
        sdefs.append([sid, list(fids)])


class StateFrames:
    """The newest state frames of a stream, what a reader that starts late needs before the data
    (a rotated segment's context; a collector joining a running agent, agent/link.py): the hello,
    each process's newest ``target``, ``threads``, ``rate``, ``exit`` and ``pstate`` frame, the ``source`` of
    each of the job's files, each node's newest ``node`` frame, and the newest CONTEXT_RESTARTS
    restarts."""

    def __init__(self) -> None:
        self._latest: dict[tuple[str, int | str], dict[str, Any]] = {}   # (kind, pid, node or file) -> frame
        self._restarts: deque[dict[str, Any]] = deque(maxlen=CONTEXT_RESTARTS)

    def remember(self, frame: dict[str, Any]) -> None:
        kind = frame.get("k")
        if kind in ("hello", "target", "threads", "rate", "exit", "pstate"):
            self._latest[(kind, int(frame.get("pid") or 0))] = frame
        elif kind == "source":
            self._latest[(kind, str(frame.get("file")))] = frame   # each of the job's files, once
        elif kind == "node":
            self._latest[(kind, int(frame.get("node") or 0))] = frame
        elif kind == "restart":
            self._restarts.append(frame)

    def frames(self) -> list[dict[str, Any]]:
        """In the order they were first seen (the hello first), the restarts last."""
        return [*self._latest.values(), *self._restarts]


class FrameWriter:
    """Appends frames to a file (and to any live listeners), thread-safe; shared by all of a
    node's samplers.

    With ``max_bytes`` the file is rotated in segments and the files on disk stay under it
    (module docstring). Frames are buffered and flushed every ``flush_s``; ``flush`` and
    ``close`` write the buffer out at once.
    """

    def __init__(self, path: str | os.PathLike[str] | None, max_bytes: int | None = None,
                 flush_s: float = FLUSH_S) -> None:
        self._lock = threading.Lock()
        self._listeners: list[Any] = []
        self.interner = Interner()
        self._base = Path(path) if path is not None else None
        # unbuffered: this class batches itself, and must know how much of each write reached the file
        self._file: BinaryIO | None = open(path, "ab", buffering=0) if path is not None else None  # noqa: SIM115
        self._max_bytes = max_bytes
        self._segment_bytes = max_bytes // SEGMENTS if max_bytes else None
        self._flush_s = flush_s
        self._buffer = bytearray()
        self._flushed_at = time.monotonic()
        self._n = 0                                   # the segment being written
        self._size = self._file.tell() if self._file is not None else 0   # its bytes, buffered included
        self._has_data = self._size > 0               # it holds more than its context
        self._context_bytes = 0                       # the bytes of that context (a numbered segment's)
        self._first_size = 0                          # segment 0's bytes, once closed
        self._opened_ns = time.time_ns()              # when the segment being written was opened
        self._middle: deque[tuple[int, int, int]] = deque()   # closed segments >= 1: (n, bytes, opened ns)
        self._middle_bytes = 0
        # deleted by rotation: how many segments, their bytes, and the wall-clock range they held
        self._dropped, self._dropped_bytes = 0, 0
        self._dropped_from: int | None = None
        self._dropped_to: int | None = None
        self.state = StateFrames()   # the context a later segment repeats
        # once a file could not be written: why (one line) and when (wall-clock ns)
        self.failure: str | None = None
        self.failed_at_ns: int | None = None
        self._good = self._size      # the file's bytes up to its last whole write (a frame boundary)

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
            frame = self._spans_frame(pid, window, spans)
            data = msgpack.packb(frame, use_bin_type=True)
            if self._must_rotate(len(data)) and self._rotated():
                # the new segment has received no definitions yet: intern again to send them
                frame = self._spans_frame(pid, window, spans)
                data = msgpack.packb(frame, use_bin_type=True)
            self._emit(frame, data)

    def define_stack(self, stack: Iterable[tuple[Any, ...]]) -> int:
        """A stack's id in this writer's stream, for ``write_interned`` (a collector's merger)."""
        with self._lock:
            return self.interner.define(stack)

    def write_interned(self, pid: int, window: int, rows: list[list[int]], extra: dict[str, Any] | None = None) -> None:
        """Write a ``spans`` frame whose rows ([tid, ts_ns, dur_ns, sid]) use ids from ``define_stack``."""
        with self._lock:
            frame = self._interned_frame(pid, window, rows, extra)
            data = msgpack.packb(frame, use_bin_type=True)
            if self._must_rotate(len(data)) and self._rotated():
                frame = self._interned_frame(pid, window, rows, extra)
                data = msgpack.packb(frame, use_bin_type=True)
            self._emit(frame, data)

    def _interned_frame(self, pid: int, window: int, rows: list[list[int]],
                        extra: dict[str, Any] | None) -> dict[str, Any]:
        fdefs: list[list[Any]] = []
        sdefs: list[list[Any]] = []
        for row in rows:
            self.interner.emit(row[3], fdefs, sdefs)
        return {"k": "spans", "pid": pid, "w": window, "fdefs": fdefs, "sdefs": sdefs, "spans": rows, **(extra or {})}

    def _spans_frame(self, pid: int, window: int,
                     spans: list[tuple[int, int, int, list[tuple[Any, ...]]]]) -> dict[str, Any]:
        fdefs: list[list[Any]] = []
        sdefs: list[list[Any]] = []
        rows = [[tid, ts, dur, self.interner.intern(frames, fdefs, sdefs)] for tid, ts, dur, frames in spans]
        return {"k": "spans", "pid": pid, "w": window, "fdefs": fdefs, "sdefs": sdefs, "spans": rows}

    def _write_locked(self, frame: dict[str, Any]) -> None:
        data = msgpack.packb(frame, use_bin_type=True)
        if self._must_rotate(len(data)):
            self._rotate()
        self.state.remember(frame)
        self._emit(frame, data)

    def _emit(self, frame: dict[str, Any], data: bytes) -> None:
        if self._file is not None:
            if self._max_bytes and self._on_disk() + len(data) > self._max_bytes and self._make_room(len(data)):
                self._append(self._note())   # a frame larger than a segment: the note says what went
            self._append(data)
            self._has_data = True
        for callback in self._listeners:
            callback(frame)

    def _append(self, data: bytes) -> None:
        if self._file is None:   # a file that failed: nothing more is kept for it
            return
        self._buffer += data
        self._size += len(data)
        if len(self._buffer) >= FLUSH_BYTES or time.monotonic() - self._flushed_at >= self._flush_s:
            self._flush_locked()

    def flush(self) -> None:
        """Write the buffered frames out now."""
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        self._flushed_at = time.monotonic()
        if self._file is None or not self._buffer:
            return
        view = memoryview(self._buffer)
        try:
            while view:
                written = self._file.write(view)
                view = view[written or 0:]
        except OSError as exc:
            view.release()
            self._fail(exc)
            return
        view.release()
        self._good += len(self._buffer)
        self._buffer.clear()

    def _fail(self, exc: OSError) -> None:
        """The file cannot be written: cut it back to its last whole write, write no file from now
        on, and tell the listeners (module docstring)."""
        self.failure = f"{exc.strerror or exc}" + (" (a full disk)" if exc.errno in (errno.ENOSPC, errno.EDQUOT)
                                                   else "")
        self.failed_at_ns = time.time_ns()
        where = segment_path(self._base, self._n) if self._base is not None else None
        if self._file is not None:
            with contextlib.suppress(OSError):   # a read-only file system refuses this too: the reader copes
                os.ftruncate(self._file.fileno(), self._good)
            with contextlib.suppress(OSError):
                self._file.close()
        self._file = None
        self._buffer.clear()
        clock = time.strftime("%H:%M:%S", time.localtime(self.failed_at_ns / 1e9))
        note = {"k": "error", "t": self.failed_at_ns, "pid": None, "kind": "recording_failed",
                "msg": f"could not write {where}: {self.failure}; the recording on disk stops at {clock} (what "
                       "came before is kept and replays); the live view and the summary go on from memory"}
        for callback in self._listeners:
            callback(note)

    # -- rotation ---------------------------------------------------------------------

    def _must_rotate(self, incoming: int) -> bool:
        return (self._segment_bytes is not None and self._file is not None and self._has_data
                and self._size - self._context_bytes + incoming > self._segment_bytes)

    def _on_disk(self) -> int:
        """Bytes of every segment kept, the one being written included (buffered or not)."""
        return self._first_size + self._middle_bytes + self._size

    def _make_room(self, incoming: int) -> bool:
        """Delete the oldest middle segments until ``incoming`` more bytes (and a note) fit under
        ``max_bytes``; True if any was deleted."""
        assert self._base is not None and self._max_bytes
        deleted = False
        while self._middle and self._on_disk() + incoming + NOTE_BYTES > self._max_bytes:
            n, size, opened_ns = self._middle.popleft()
            try:
                os.remove(segment_path(self._base, n))
            except FileNotFoundError:   # removed by hand: nothing left to free
                pass
            except OSError as exc:      # a folder made read-only: the cap can no longer be kept
                self._fail(exc)
                return deleted
            self._middle_bytes -= size
            self._dropped += 1
            self._dropped_bytes += size
            self._dropped_from = self._dropped_from or opened_ns
            deleted = True
        if deleted:
            self._dropped_to = self._middle[0][2] if self._middle else self._opened_ns
        return deleted

    def _note(self) -> bytes:
        """The ``segment`` frame: this segment's number and what rotation has deleted so far."""
        return msgpack.packb({
            "k": "segment", "n": self._n, "t": self._opened_ns, "max_bytes": self._max_bytes,
            "dropped": self._dropped, "dropped_bytes": self._dropped_bytes, "dropped_from": self._dropped_from,
            "dropped_to": self._dropped_to,
        }, use_bin_type=True)

    def _rotated(self) -> bool:
        """``_rotate``, and whether a new segment was opened (its stack ids start afresh). Where the
        recording failed instead, the frame already interned is the one to send: its definitions
        are the listeners' only copy (interned again, it would send none, and the live view and the
        summary would drop every span of those stacks from then on: a folder made read-only
        mid-attach left a summary 2.8% covered and "no complete step")."""
        self._rotate()
        return self._file is not None

    def _rotate(self) -> None:
        """Close the segment being written, make room for a full new one under ``max_bytes``
        (deleting the oldest middle segments) and open it with its context."""
        assert self._file is not None and self._base is not None and self._segment_bytes
        self._flush_locked()
        if self._file is None:   # the flush failed: no more files
            return
        closing, self._file = self._file, None   # never left closed but set: a failure below must not write to it
        closing.close()
        if self._n == 0:
            self._first_size = self._size
        else:
            self._middle.append((self._n, self._size, self._opened_ns))
            self._middle_bytes += self._size
        self._n += 1
        self._opened_ns = time.time_ns()
        self._size, self._has_data = 0, False
        context = self._context()
        self._context_bytes = sum(map(len, context))
        self._make_room(self._segment_bytes + self._context_bytes)
        if self.failure is not None:
            return
        try:
            self._file = open(segment_path(self._base, self._n), "ab", buffering=0)  # noqa: SIM115
        except OSError as exc:
            self._file = None
            self._fail(exc)
            return
        self._good = 0
        self.interner.new_segment()
        self._append(self._note())
        for data in context:
            self._append(data)
        self._flush_locked()

    def _context(self) -> list[bytes]:
        """The state frames a new segment repeats (``ctx``). The job's source files go too while the
        context fits in half a segment; under a cap too small for them (their text can be tens of kB)
        only the first segment that received them keeps them, and the cap holds."""
        frames = [msgpack.packb({**frame, "ctx": 1}, use_bin_type=True) for frame in self.state.frames()]
        assert self._segment_bytes is not None
        if sum(map(len, frames)) + NOTE_BYTES <= self._segment_bytes // 2:
            return frames
        return [data for frame, data in zip(self.state.frames(), frames, strict=True) if frame.get("k") != "source"]

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._flush_locked()
            if self._file is not None:
                with contextlib.suppress(OSError):
                    self._file.close()
                self._file = None
