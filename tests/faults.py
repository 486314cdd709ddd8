"""Faults made real with what the machine allows (docs/faults.md): a small tmpfs to fill, a
read-only bind mount, a cgroup that OOM-kills, a PID namespace. Each helper skips the test with
the machine's own reason where it cannot make its fault (not root, no mount, no cgroup), and
undoes what it did in a ``finally``."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=False)


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (mount's syntax: 1m, 64k) mounted at ``path`` for the block."""
    path.mkdir(parents=True, exist_ok=True)
    out = _run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    if out.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (mount: {out.stderr.strip() or out.returncode})")
    try:
        yield path
    finally:
        _run("umount", "-l", str(path))


def fill(folder: Path) -> int:
    """Write zeros into ``folder`` until its file system is full (ENOSPC); the bytes written."""
    written = 0
    chunk = b"\0" * 65536
    with open(folder / "filler", "wb", buffering=0) as fh:
        while True:
            try:
                written += fh.write(chunk) or 0
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                size = len(chunk) // 2
                if size < 512:
                    return written
                chunk = chunk[:size]


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[Path]:
    """``path`` (a folder) made read-only in place by a read-only bind mount over it: files
    already open stay writable, nothing can be created, removed or opened for writing there."""
    out = _run("mount", "--bind", str(path), str(path))
    if out.returncode != 0:
        pytest.skip(f"cannot bind-mount here (mount: {out.stderr.strip() or out.returncode})")
    try:
        out = _run("mount", "-o", "remount,bind,ro", str(path))
        if out.returncode != 0:
            pytest.skip(f"cannot make a bind mount read-only here (mount: {out.stderr.strip()})")
        yield path
    finally:
        _run("umount", "-l", str(path))


def is_root() -> bool:
    return os.geteuid() == 0
