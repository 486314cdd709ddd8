"""What the agent reads for the memory verdicts: a job's start time and cgroup limit, its RSS every
50 ms, and the source of its own files; and how the recording keeps them."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from traceml_agent import source
from traceml_agent.sampler import RssTrace
from traceml_agent.target import inspect_target, memory_limit, started_ns
from traceml_agent.writer import StateFrames
from traceml_attach.collect.merge import _PID_FRAMES
from traceml_attach.ingest.stream import Recording

GIB = 1 << 30


def fake_root(tmp_path: Path, cgroup: str, files: dict[str, str]) -> Path:
    (tmp_path / "proc" / "42").mkdir(parents=True)
    (tmp_path / "proc" / "42" / "cgroup").write_text(cgroup)
    for rel, text in files.items():
        path = tmp_path / "sys" / "fs" / "cgroup" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_a_cgroup_v2_limit_is_the_smallest_on_the_path(tmp_path: Path):
    root = fake_root(tmp_path, "0::/kubepods/pod1/ctr\n", {
        "kubepods/memory.max": "max\n",
        "kubepods/pod1/memory.max": f"{4 * GIB}\n",      # the pod's limit binds its container
        "kubepods/pod1/ctr/memory.max": f"{8 * GIB}\n",
    })
    assert memory_limit(42, str(root)) == 4 * GIB


def test_a_cgroup_v1_limit_and_no_limit(tmp_path: Path):
    root = fake_root(tmp_path, "4:memory:/docker/abc\n1:cpu:/docker/abc\n", {
        "memory/docker/abc/memory.limit_in_bytes": f"{2 * GIB}\n",
        "memory/memory.limit_in_bytes": "9223372036854771712\n",   # v1's "no limit"
    })
    assert memory_limit(42, str(root)) == 2 * GIB
    unlimited = fake_root(tmp_path / "u", "0::/\n", {"memory.max": "max\n"})
    assert memory_limit(42, str(unlimited)) is None
    assert memory_limit(42, str(tmp_path / "nothing")) is None     # unreadable: unknown, never an error


def test_the_target_carries_its_start_time():
    info = inspect_target(os.getpid())
    started = started_ns(os.getpid())
    assert info.started_ns == started
    assert started is not None and 0 < time.time_ns() - started < 3600 * 10**9


def test_the_rss_trace_batches_readings_of_the_process():
    trace = RssTrace(os.getpid())
    for _ in range(3):
        trace.read()
    frame = trace.frame()
    assert frame["k"] == "mem" and len(frame["samples"]) == 3
    ts, rss = frame["samples"][0]
    assert rss > 1 << 20 and ts <= time.time_ns()
    assert trace.frame()["samples"] == []        # each reading is sent once


def test_only_the_jobs_own_files_are_sent_whole(tmp_path: Path):
    mine = tmp_path / "train.py"
    mine.write_text("for x in loader:\n    total += loss\n")
    assert source.user_file(os.getpid(), str(mine)) == mine.read_text()
    assert source.user_file(os.getpid(), "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py") is None
    big = tmp_path / "big.py"
    big.write_text("#" * (source.MAX_SENT_BYTES + 1))
    assert source.user_file(os.getpid(), str(big)) is None
    assert source.user_file(os.getpid(), "<string>") is None


def test_the_recording_keeps_rss_readings_and_sources_and_trims_them():
    rec = Recording()
    rec.add({"k": "mem", "pid": 7, "samples": [[1, 100], [2, 110], [3, 120]]})
    rec.add({"k": "mem", "pid": 7, "samples": [[3, 120], [4, 130]]})        # a repeated reading is dropped
    rec.add({"k": "source", "t": 1, "pid": 7, "file": "/job/train.py", "text": "a\n"})
    rec.add({"k": "source", "t": 2, "pid": 8, "file": "/job/train.py", "text": "a\n"})
    assert rec.rss[7] == [(1, 100), (2, 110), (3, 120), (4, 130)]
    assert rec.sources == {"/job/train.py": "a\n"} and rec.bad_frames == 0
    rec.trim(3)
    assert rec.rss[7] == [(2, 110), (3, 120), (4, 130)]   # one reading kept before the cut


def test_sources_are_repeated_in_every_segment_and_cross_nodes():
    state = StateFrames()
    frame = {"k": "source", "t": 1, "pid": 7, "file": "/job/train.py", "text": "a\n"}
    state.remember(frame)
    state.remember({**frame, "pid": 8})
    assert [f["file"] for f in state.frames() if f["k"] == "source"] == ["/job/train.py"]
    assert {"mem", "source"} <= _PID_FRAMES   # a remote agent's frames reach the collector's recording


@pytest.mark.skipif(os.geteuid() != 0, reason="making a cgroup needs root")
def test_a_real_cgroup_limit_is_read(tmp_path: Path):
    base = Path("/sys/fs/cgroup/memory")
    if not (base / "memory.limit_in_bytes").exists() or not os.access(base, os.W_OK):
        pytest.skip("no writable cgroup v1 memory controller here")
    group = base / f"traceml-test-{os.getpid()}"
    group.mkdir()
    try:
        (group / "memory.limit_in_bytes").write_text(str(3 * GIB))
        (group / "cgroup.procs").write_text(str(os.getpid()))
        assert memory_limit(os.getpid()) == 3 * GIB
    finally:
        (base / "cgroup.procs").write_text(str(os.getpid()))
        group.rmdir()
