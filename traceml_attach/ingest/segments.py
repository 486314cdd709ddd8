"""Read a recording that may have been rotated: frames.msgpack and the segments beside it.

With a cap (``--max-recording-mb``) the writer (agent/writer.py, ``FrameWriter``) cuts the
recording into segments: ``frames.msgpack`` (segment 0, kept for good: the attach-time context)
and ``frames.000001.msgpack``, ``frames.000002.msgpack``, … of which it deletes the oldest when
the files would pass the cap. So a rotated run folder holds segment 0 and the newest segments,
and what was dropped is one stretch in between.

The design keeps every segment decodable on its own:

- each numbered segment opens with a ``segment`` frame (its number, and what rotation had
  deleted so far: segments, bytes, wall-clock range) and ``ctx`` copies of the state frames
  (hello, targets, threads, exits, restarts);
- code-frame and stack definitions are sent again in each segment (same ids), so no
  ``spans`` frame needs a definition from a deleted file.

This reader goes through the segments in order. After a segment read whole it skips the
next one's ``ctx`` frames (they repeat what it has); after a gap (deleted or damaged
segments, or a numbered segment read alone) it folds them in, restarts once each. A damaged
segment keeps every whole frame before the damage, as a damaged single file always has.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

from traceml_agent.wire import segment_path, unpacker

_NUMBERED = re.compile(r"^(?P<stem>.+)\.(?P<n>\d{6})\.msgpack$")


@dataclass(frozen=True)
class Dropped:
    """What rotation deleted between segment 0 and the oldest segment kept."""

    segments: int
    bytes: int | None      # None when the writer's note is missing (segments deleted by hand)
    from_ns: int | None    # wall clock: when the first deleted segment was opened...
    to_ns: int | None      # ...and when the first one kept after them was


def segment_files(path: Path) -> list[tuple[int, Path]]:
    """The segments to read for ``path``, as (number, file), in order: a first segment with the
    numbered ones beside it, or a numbered segment alone."""
    match = _NUMBERED.match(path.name)
    if match:
        return [(int(match["n"]), path)]
    stem = path.name[: -len(".msgpack")] if path.name.endswith(".msgpack") else path.name
    numbered = []
    try:
        names = os.listdir(path.parent)
    except OSError:
        names = []
    for name in names:
        match = _NUMBERED.match(name)
        if match and match["stem"] == stem:
            numbered.append(int(match["n"]))
    return [(0, path)] + [(n, segment_path(path, n)) for n in sorted(numbered)]


def read_segments(path: Path, add: Callable[[Any], None]) -> tuple[Dropped | None, str | None]:
    """Feed every frame of the recording at ``path`` to ``add``, in order.

    Returns what rotation dropped (None when nothing) and what is wrong with the files, if
    anything (one line). Raises OSError when ``path`` itself cannot be opened."""
    files = segment_files(path)
    problems: list[str] = []
    restarts: set[tuple[Any, ...]] = set()
    header: dict[str, Any] | None = None
    previous: int | None = None   # the segment before, when it was read whole
    missing = 0
    for n, file in files:
        if previous is not None and n > previous + 1:
            missing += n - previous - 1
        try:
            problem, seen = _read_one(file, add, whole_before=previous == n - 1, restarts=restarts)
        except OSError as exc:
            if n == files[0][0]:
                raise
            problems.append(f"cannot read {file}: {exc.strerror or exc}")
            previous = None
            continue
        header = seen or header
        if problem:
            problems.append(problem)
        previous = None if problem else n
    if files[0][0] != 0 and len(files) == 1:
        missing = 0   # a numbered segment read alone: on purpose
    problem = "; ".join(problems) if problems else None
    return _dropped(missing, header), problem


def _dropped(missing: int, header: dict[str, Any] | None) -> Dropped | None:
    if not missing:
        return None
    if header is not None and header.get("dropped") == missing:
        return Dropped(missing, header.get("dropped_bytes"), header.get("dropped_from"), header.get("dropped_to"))
    return Dropped(missing, None, None, None)


def _read_one(file: Path, add: Callable[[Any], None], whole_before: bool,
              restarts: set[tuple[Any, ...]]) -> tuple[str | None, dict[str, Any] | None]:
    """Feed one segment's frames; returns what is wrong with it and its ``segment`` frame."""
    header = None
    with open(file, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        unpack = unpacker(fh)
        try:
            for frame in unpack:
                if isinstance(frame, dict):
                    kind = frame.get("k")
                    if kind == "segment":
                        header = frame
                        continue
                    if frame.get("ctx"):
                        if whole_before:
                            continue
                        frame = {k: v for k, v in frame.items() if k != "ctx"}
                    if kind == "restart":
                        key = (frame.get("t"), frame.get("rank"), frame.get("old_pid"), frame.get("pid"))
                        if key in restarts:
                            continue
                        restarts.add(key)
                add(frame)
        except (msgpack.UnpackException, ValueError) as exc:
            return (f"{file} is damaged after byte {unpack.tell()} ({type(exc).__name__}); "
                    "kept what came before"), header
    if unpack.tell() < size:
        return f"{file} is damaged: it ends inside a frame at byte {unpack.tell()} of {size}; kept the rest", header
    return None, header


def describe(dropped: Dropped) -> str:
    """One line: what rotation deleted, for replay's stderr."""
    size = f", {dropped.bytes / 1e6:.1f} MB" if dropped.bytes is not None else ""
    when = ""
    if dropped.from_ns is not None and dropped.to_ns is not None:
        when = (f" recorded from {_clock(dropped.from_ns)} to {_clock(dropped.to_ns)} "
                f"({duration_text((dropped.to_ns - dropped.from_ns) / 1e9)})")
    count = f"{dropped.segments} segment{'s' if dropped.segments != 1 else ''}"
    return (f"the recording was rotated: {count}{size}{when} deleted to stay under "
            "--max-recording-mb; what follows covers the first segment and the newest ones")


def _clock(ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns / 1e9))


def duration_text(seconds: float) -> str:
    """A length of time as people say it: seconds, minutes or hours."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
