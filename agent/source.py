"""Source lines for sampled frames, read on the node so the stream is self-contained.

The classifier needs the text of a frame's line (``x.to(device)`` is h2d) and, for
user code, the ``with`` statements around it (``torch.no_grad()`` marks eval). Both are
read here once per (file, line) and carried in the stream, which keeps everything
downstream a pure function of the recording.
"""

from __future__ import annotations

import ast
import os
from functools import lru_cache

MAX_SOURCE_BYTES = 2 * 1024 * 1024
MAX_LINE_CHARS = 240
# Bounded caches, so that a days-long attach holds a fixed amount: the files whose lines are
# kept (``linecache`` kept every file it read, once per rank, for ever), and the lines described.
SOURCE_FILES_KEPT = 32
LINES_DESCRIBED = 8192
_LIBRARY_MARKERS = ("/site-packages/", "/dist-packages/", "/lib/python3")


def is_library(path: str) -> bool:
    """True for installed packages and the standard library."""
    return any(marker in path for marker in _LIBRARY_MARKERS)


def _readable(pid: int, path: str) -> str | None:
    # Inside another mount namespace (a container), the job's files are under
    # /proc/<pid>/root; fall back to the path as we see it.
    if not path or path.startswith("<"):
        return None
    for candidate in (f"/proc/{pid}/root{path}", path):
        try:
            if os.path.isfile(candidate) and os.path.getsize(candidate) <= MAX_SOURCE_BYTES:
                return candidate
        except OSError:
            continue
    return None


@lru_cache(maxsize=4096)
def _resolve(pid: int, path: str) -> str | None:
    return _readable(pid, path)


@lru_cache(maxsize=512)
def _with_ranges(real_path: str) -> tuple[tuple[int, int, str], ...]:
    """(first body line, last body line, items) for every ``with`` statement in a file."""
    try:
        with open(real_path, encoding="utf-8", errors="replace") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return ()
    ranges = []
    for node in ast.walk(tree):
        if isinstance(node, ast.With | ast.AsyncWith) and node.body:
            items = ", ".join(ast.unparse(item.context_expr) for item in node.items)
            ranges.append((node.body[0].lineno, node.end_lineno or node.lineno, items[:MAX_LINE_CHARS]))
    return tuple(ranges)


@lru_cache(maxsize=SOURCE_FILES_KEPT)
def _lines(real_path: str) -> tuple[str, ...]:
    try:
        with open(real_path, encoding="utf-8", errors="replace") as fh:
            return tuple(fh.read().splitlines())
    except OSError:
        return ()


SOURCE_FILES_SENT = 16            # a process's own files sent whole (the training loop's among them)
MAX_SENT_BYTES = 256 * 1024       # ...each at most this long


def user_file(pid: int, path: str) -> str | None:
    """The text of one of the job's own source files (not a library's), for the analysis to read
    the training loop whole; None for a library, an unreadable file or one too long to send."""
    if is_library(path):
        return None
    real = _resolve(pid, path)
    if real is None:
        return None
    try:
        if os.path.getsize(real) > MAX_SENT_BYTES:
            return None
        with open(real, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


@lru_cache(maxsize=LINES_DESCRIBED)
def describe(pid: int, path: str, line: int) -> tuple[str | None, str | None]:
    """(source line, enclosing with-items joined by '; ') for a frame; None when unreadable."""
    real = _resolve(pid, path)
    if real is None or line <= 0:
        return None, None
    lines = _lines(real)
    src = lines[line - 1].strip()[:MAX_LINE_CHARS] or None if line <= len(lines) else None
    if is_library(path):
        return src, None
    withs = [items for first, last, items in _with_ranges(real) if first <= line <= last]
    return src, "; ".join(withs) or None
