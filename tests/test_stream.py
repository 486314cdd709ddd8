from __future__ import annotations

import threading
from pathlib import Path

import msgpack
import pytest

from traceml_agent import pyspy
from traceml_agent.pyspy import explain_failure, find_pyspy, spans_from_chrometrace
from traceml_agent.writer import FrameWriter
from traceml_attach.ingest.stream import Recording, RecordingError, read_recording


def write_basic(path: Path) -> None:
    w = FrameWriter(path)
    w.write({"k": "hello", "v": 1, "t": 1, "rate_hz": 100, "backend": "py-spy"})
    w.write({"k": "target", "t": 1, "pid": 7, "exe": "/usr/bin/python3", "cmd": ["python", "t.py"]})
    for i in range(3):
        w.write_spans(7, i, [(1, 1000 * i, 1000, [("<module>", "/t.py", 3 + i, "x = 1", None)])])
    w.close()


def test_round_trip_interns_frames(tmp_path: Path):
    path = tmp_path / "frames.msgpack"
    write_basic(path)
    rec, problem = read_recording(path)
    assert problem is None
    assert [s.stack[0].line for s in rec.spans[7]] == [3, 4, 5]
    assert rec.targets[7].cmd == ("python", "t.py")


def test_samplers_sharing_a_writer_never_use_an_id_before_its_definition(tmp_path: Path):
    # GIVEN two threads (two ranks' samplers) writing spans with new stacks into one writer
    path = tmp_path / "frames.msgpack"
    writer = FrameWriter(path)

    def rank(pid: int) -> None:
        for i in range(300):
            frames = [("main", "/t.py", 1, None, None), (f"fn{i % 97}", "/t.py", i % 13, None, None)]
            writer.write_spans(pid, i, [(1, i * 1000, 1000, frames)])

    threads = [threading.Thread(target=rank, args=(pid,)) for pid in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.close()
    # THEN every frame decodes
    rec, problem = read_recording(path)
    assert problem is None and rec.bad_frames == 0
    assert len(rec.spans[1]) == len(rec.spans[2]) == 300


def test_damaged_file_keeps_what_came_before(tmp_path: Path):
    path = tmp_path / "frames.msgpack"
    write_basic(path)
    data = path.read_bytes()
    path.write_bytes(data + b"\xc1\xc1garbage")  # 0xc1 is never valid msgpack
    rec, problem = read_recording(path)
    assert problem is not None and "damaged" in problem
    assert len(rec.spans[7]) == 3


def test_truncated_file_keeps_whole_frames(tmp_path: Path):
    path = tmp_path / "frames.msgpack"
    write_basic(path)
    path.write_bytes(path.read_bytes()[:-5])
    rec, problem = read_recording(path)
    assert len(rec.spans[7]) == 2
    assert problem is not None and "ends inside a frame" in problem


def test_oversized_strings_are_refused(tmp_path: Path):
    path = tmp_path / "frames.msgpack"
    path.write_bytes(msgpack.packb({"k": "error", "t": 1, "kind": "x", "msg": "a" * (2 * 1024 * 1024)}))
    rec, problem = read_recording(path)
    assert problem is not None
    assert rec.errors == []


def test_malformed_frames_are_counted_not_raised():
    rec = Recording()
    rec.add({"k": "spans", "pid": 1})
    rec.add({"k": "nonsense"})
    rec.add({"no": "kind"})
    assert rec.bad_frames == 3


def test_missing_file_is_an_error(tmp_path: Path):
    with pytest.raises(RecordingError):
        read_recording(tmp_path / "absent.msgpack")


def test_chrometrace_events_become_spans():
    def ev(ph, name, line, ts, tid=5):
        return {"ph": ph, "name": name, "ts": ts, "tid": tid, "args": {"filename": "/t.py", "line": line}}

    events = [
        ev("B", "<module>", 10, 0), ev("B", "step", 3, 0),
        ev("E", "step", 3, 500), ev("B", "step", 4, 500),
        ev("E", "step", 4, 800), ev("E", "<module>", 10, 800),
        ev("B", "<module>", 11, 800), ev("E", "<module>", 11, 1000),
    ]
    spans = spans_from_chrometrace(events, anchor_ns=10**9)
    assert [(s.ts_ns - 10**9, s.dur_ns, s.frames[-1][2]) for s in spans] == [
        (0, 500_000, 3), (500_000, 300_000, 4), (800_000, 200_000, 11)]
    assert spans[0].frames[0] == ("<module>", "/t.py", 10)


@pytest.mark.parametrize(
    ("stderr", "kind"),
    [
        ("Permission Denied: Try running again with elevated permissions by going 'sudo env \"PATH=$PATH\" !!'",
         "permission"),
        ("Error: Failed to find python version from target process", "not_python"),
        ("Error: Failed to get process executable name. Check that the process is running.", "no_such_process"),
        ("Error: Unsupported version of Python: 3.99.0", "unsupported_python"),
        ("Error: something new", "pyspy_failed"),
    ],
)
def test_pyspy_failures_are_explained(stderr, kind):
    err = explain_failure(stderr, 1234)
    assert err.kind == kind
    assert "1234" in str(err)
    if kind == "permission":
        assert "SYS_PTRACE" in str(err) and "ptrace_scope" in str(err)


def _executable(path: Path, text: str = "#!/bin/sh\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_the_pyspy_beside_the_interpreter_comes_before_one_on_path(tmp_path: Path, monkeypatch):
    # GIVEN a py-spy installed beside traceml's interpreter (its dependency) and another first on
    # PATH, as a pyenv shim is: a shell script that runs pyenv before it execs py-spy
    own = _executable(tmp_path / "env" / "bin" / "py-spy")
    shim = _executable(tmp_path / "shims" / "py-spy", "#!/usr/bin/env bash\nexec pyenv exec py-spy \"$@\"\n")
    monkeypatch.delenv(pyspy.PYSPY_ENV, raising=False)
    monkeypatch.setenv("PATH", str(shim.parent))
    monkeypatch.setattr(pyspy.sysconfig, "get_path", lambda name: str(own.parent))
    # THEN the interpreter's own is used; PATH only where the environment has none; the override first
    assert find_pyspy() == str(own)
    own.unlink()
    monkeypatch.setattr(pyspy.sys, "executable", str(tmp_path / "env" / "bin" / "python"))
    assert find_pyspy() == str(shim)
    chosen = _executable(tmp_path / "chosen" / "py-spy")
    monkeypatch.setenv(pyspy.PYSPY_ENV, str(chosen))
    assert find_pyspy() == str(chosen)
