"""Thread names: what py-spy reads, and the main thread of a process that never imported threading."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from traceml_agent.pyspy import PySpyError, find_pyspy, process_exe
from traceml_agent.sampler import Sampler
from traceml_agent.threads import ThreadDump, ThreadNames, dump, reads_thread_names
from traceml_agent.writer import FrameWriter

# real processes (busy loops) sampled by the real py-spy
pytestmark = pytest.mark.e2e

PID = 4242
PY312 = "/opt/python/bin/python3.12"


def thread(tid: int, os_tid: int | None, name: str | None = None) -> ThreadDump:
    return ThreadDump(tid, os_tid, name, True, (("main", "/t.py", 3),))


def names(threads: list[ThreadDump]) -> list[str | None]:
    return [t.name for t in threads]


def test_the_main_thread_of_a_process_without_threading_is_main_thread():
    # GIVEN a dump that names no thread (threading never imported), on a CPython py-spy reads names from
    dump = [thread(1, PID), thread(2, PID + 1)]
    # THEN the thread whose OS id is the PID is MainThread, the other one stays unnamed
    assert names(ThreadNames(PID, PY312)(dump)) == ["MainThread", None]


def test_without_os_ids_only_a_lone_thread_is_known_to_be_the_main_one():
    # py-spy 0.4 gives no OS thread ids on Python 3.10 and older
    py310 = "/usr/bin/python3.10"
    assert names(ThreadNames(PID, py310)([thread(1, None)])) == ["MainThread"]
    assert names(ThreadNames(PID, py310)([thread(1, None), thread(2, None)])) == [None, None]


@pytest.mark.parametrize("exe", [None, "/usr/bin/uwsgi", "/usr/bin/python3.14", "/usr/bin/python3.13t"])
def test_no_name_is_given_where_py_spy_may_fail_to_read_names(exe):
    # an unknown interpreter, or one py-spy may read no names from even with threading imported
    assert names(ThreadNames(PID, exe)([thread(1, PID)])) == [None]


def test_a_name_read_once_is_kept_and_never_replaced_by_a_guess():
    namer = ThreadNames(PID, PY312)
    assert names(namer([thread(1, PID, "trainer"), thread(2, PID + 1, "loader")])) == ["trainer", "loader"]
    # a later dump reads no names (it raced the target): threading is imported, the names stand
    assert names(namer([thread(1, PID), thread(2, PID + 1), thread(3, PID + 2)])) == ["trainer", "loader", None]
    # a new thread with the same ident but another OS id is another thread
    assert names(namer([thread(1, PID + 9)])) == [None]


def test_a_name_read_later_replaces_main_thread():
    namer = ThreadNames(PID, PY312)
    assert names(namer([thread(1, PID)])) == ["MainThread"]
    # the job imported threading and renamed its main thread
    assert names(namer([thread(1, PID, "trainer")])) == ["trainer"]
    assert names(namer([thread(1, PID)])) == ["trainer"]


@pytest.fixture
def python() -> Iterator:
    started: list[subprocess.Popen[str]] = []

    def start(code: str) -> int:
        # -S: no site .pth file imports threading behind the script's back
        proc = subprocess.Popen([sys.executable, "-S", "-c", f"{code}\nprint('ready', flush=True)\nwhile True: pass"],
                                stdout=subprocess.PIPE, text=True)
        started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        return proc.pid

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(("code", "expected"), [
    ("import sys; assert 'threading' not in sys.modules", "MainThread"),
    ("import threading; threading.current_thread().name = 'trainer'", "trainer"),
])
def test_the_sampler_names_the_threads_of_a_real_process(python, code, expected):
    # GIVEN a Python process that has (not) imported threading
    pid = python(code)
    if not reads_thread_names(process_exe(pid)):
        pytest.skip(f"py-spy is not known to read thread names from {process_exe(pid)}")
    sampler = Sampler(pid, find_pyspy())
    frames: list[dict] = []
    writer = FrameWriter(None)
    writer.listen(frames.append)
    # WHEN the sampler takes its first dump
    sampler.begin(writer, sampler.probe())
    # THEN its main thread has the name Python gives it
    (threads,) = [f["threads"] for f in frames if f["k"] == "threads"]
    assert [name for _, _, name, _ in threads] == [expected]


LATE_THREAD = ("import threading, time\n"
               "def spin():\n    while True: sum(range(1000))\n"
               "print('ready', flush=True)\nend = time.time() + 2.5\nwhile time.time() < end: pass\n"
               "threading.Thread(target=spin, name='late-worker', daemon=True).start()\nspin()\n")


def test_a_thread_started_after_the_first_dump_is_named_once_a_window_shows_it(tmp_path: Path):
    # GIVEN a job that starts a named thread 2.5 s after the sampler's first dump, and a sampler
    # whose periodic dump (every 30 s) would come long after
    proc = subprocess.Popen([sys.executable, "-c", LATE_THREAD], stdout=subprocess.PIPE, text=True)
    stop = threading.Event()
    frames: list[dict] = []
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        if not reads_thread_names(process_exe(proc.pid)):
            pytest.skip(f"py-spy is not known to read thread names from {process_exe(proc.pid)}")
        sampler = Sampler(proc.pid, find_pyspy())
        writer = FrameWriter(None)
        writer.listen(frames.append)
        sampler.begin(writer, sampler.probe())
        runner = threading.Thread(target=sampler.run, args=(stop,))
        runner.start()
        time.sleep(7.0)
        stop.set()
        runner.join()
    finally:
        proc.kill()
        proc.wait()
    # THEN the first window that shows the new thread asks for a dump, which names it
    dumps = [f for f in frames if f["k"] == "threads"]
    named = [f for f in dumps if "late-worker" in [name for _, _, name, _ in f["threads"]]]
    assert named, dumps
    assert len(dumps) <= 3, dumps   # the first, the one the new thread asked for (and one more at most)


# -- a dump that races the running target -----------------------------------------------------

RACE = ("echo 'Error: Failed to get stack traces' >&2; echo 'Caused by:' >&2; "
        "echo '    1: Failed to copy PyFrameObject' >&2; echo '    2: Bad address (os error 14)' >&2; exit 1")


def counting_pyspy(tmp_path: Path, fails: int, failure: str = RACE) -> Path:
    """A py-spy whose dump fails ``fails`` times with ``failure`` (shell), then answers; every
    call is counted in the file ``calls`` beside it."""
    calls = tmp_path / "calls"
    calls.write_text("")
    script = tmp_path / "py-spy"
    script.write_text("#!/bin/sh\n"
                      f"echo x >> {calls}\n"
                      f"if [ $(wc -l < {calls}) -le {fails} ]; then {failure}; fi\n"
                      "echo '[{\"thread_id\": 7, \"os_thread_id\": 7, \"thread_name\": \"MainThread\", "
                      "\"active\": true, \"frames\": []}]'\n")
    script.chmod(0o755)
    return script


def calls(tmp_path: Path) -> int:
    return len((tmp_path / "calls").read_text().splitlines())


def test_a_dump_that_lost_a_race_with_the_target_is_taken_again(tmp_path: Path):
    # GIVEN a py-spy whose first three dumps read a frame freed under them (seen on 7 dumps in 60
    # of a job slicing numpy arrays)
    binary = counting_pyspy(tmp_path, fails=3)
    # WHEN one dump is asked for
    threads = dump(str(binary), os.getpid())
    # THEN the fourth try answers it
    assert [t.name for t in threads] == ["MainThread"]
    assert calls(tmp_path) == 4


def test_a_dump_that_keeps_losing_the_race_fails_with_what_pyspy_said(tmp_path: Path):
    binary = counting_pyspy(tmp_path, fails=10)
    with pytest.raises(PySpyError, match="Failed to copy PyFrameObject") as caught:
        dump(str(binary), os.getpid())
    assert caught.value.kind == "pyspy_failed"
    assert calls(tmp_path) == 4


def test_a_dump_failing_for_another_reason_is_not_tried_again(tmp_path: Path):
    binary = counting_pyspy(tmp_path, fails=10, failure="echo 'Error: lost the thread state' >&2; exit 3")
    with pytest.raises(PySpyError, match="lost the thread state"):
        dump(str(binary), os.getpid())
    assert calls(tmp_path) == 1
