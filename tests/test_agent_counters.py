"""The CPU counters the agent reads beside the stacks: the job's main thread's (``tcpu``) and its
py-spy recorders' (``scpu``), from schedstat, every 20 ms. The recorders' tell a sampler that
waited for a core (a drop-out: the span it had open swallowed that time) from a job that held one
stack while it sampled on (a garbage collection: steps/batch_timeline.py)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time

import pytest

from traceml_agent.pyspy import SAMPLER_NICE, RecordWindow, find_pyspy
from traceml_agent.sampler import Sampler, SamplerConfig, SamplerCpu, ThreadCpu
from traceml_agent.writer import FrameWriter
from traceml_attach.collect.merge import _PID_FRAMES
from traceml_attach.ingest.stream import Recording

# threads that spin in hashlib, which lets go of the GIL: they run at once, on two cores
SPIN = ("import hashlib, threading, time\nend = time.time() + 30\ndata = bytes(1 << 20)\n"
        "def spin():\n    while time.time() < end: hashlib.sha256(data).digest()\n")


def spinning(threads: int, cpu: int | None = None) -> subprocess.Popen[bytes]:
    """A process of ``threads`` threads that spin (pinned to one CPU where ``cpu`` is given)."""
    code = SPIN + f"ts = [threading.Thread(target=spin) for _ in range({threads})]\n[t.start() for t in ts]\n"
    proc = subprocess.Popen([sys.executable, "-c", code])
    if cpu is not None:
        os.sched_setaffinity(proc.pid, {cpu})
    return proc


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_the_main_threads_counters_grow_as_it_runs_and_its_file_is_closed():
    before = open_fds()
    cpu = ThreadCpu(os.getpid())
    cpu.read()
    # 50 ms of this thread's own CPU (a wall-clock 50 ms gives less on a machine shared with other
    # tests' jobs: 25 ms in a parallel run of the suite)
    deadline = time.thread_time() + 0.05
    while time.thread_time() < deadline:
        pass
    cpu.read()
    frame = cpu.frame()
    (t0, on0, q0), (t1, on1, q1) = frame["samples"]
    assert frame["k"] == "tcpu" and t1 > t0 and on1 - on0 >= 30_000_000 and q1 >= q0
    assert open_fds() == before + 1   # kept open between reads...
    cpu.close()
    assert open_fds() == before       # ...and closed at the end


def test_the_recorders_counters_sum_their_threads_take_the_busier_recorder_and_close_when_it_ends():
    # GIVEN two stand-ins for py-spy recorders sampling one job: one that spins on two threads,
    # one that sleeps (a hand-over, when both run)
    busy, idle = spinning(2), subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    before = open_fds()
    counters = SamplerCpu(4242)
    try:
        time.sleep(0.3)   # both started their threads
        counters.read([busy.pid, idle.pid])
        time.sleep(0.5)
        counters.read([busy.pid, idle.pid])
        # WHEN the busy one ends
        busy.kill()
        busy.wait()
        counters.read([busy.pid, idle.pid])
        frame = counters.frame()
        # THEN each reading added the larger increment of the two, over all of a recorder's threads
        assert frame["k"] == "scpu" and frame["pid"] == 4242
        (_, on0, _), (_, on1, _), (_, on2, _) = frame["samples"]
        # (two threads spinning for 0.5 s; the process's main thread only waits for them, so a
        # reading of it alone would be ~0, and 0.3 s holds on a loaded machine)
        assert on0 == 0 and on1 >= 0.3e9
        assert on2 == on1                  # the idle one added (almost) nothing
        # and the ended one's files are closed; the idle one's stay open until the end
        assert open_fds() > before
        counters.close()
        assert open_fds() == before
    finally:
        for proc in (busy, idle):
            proc.kill()
            proc.wait()


def test_a_recorder_that_waits_for_a_core_shows_it_as_run_queue_time():
    # GIVEN a stand-in recorder pinned to one CPU with three spinning threads of another process
    cpu = min(os.sched_getaffinity(0))
    recorder, hogs = spinning(1, cpu), spinning(3, cpu)
    counters = SamplerCpu(4242)
    try:
        time.sleep(0.3)
        counters.read([recorder.pid])
        time.sleep(1.0)
        counters.read([recorder.pid])
        # THEN its waiting for the CPU shows: a quarter of it at most on it, much of the rest queued
        (_, on0, q0), (_, on1, q1) = counters.frame()["samples"]
        assert on1 - on0 <= 0.5e9 and q1 - q0 >= 0.4e9, (on1 - on0, q1 - q0)
    finally:
        counters.close()
        for proc in (recorder, hogs):
            proc.kill()
            proc.wait()


def test_the_recording_keeps_the_recorders_counters_trims_them_and_the_collector_relays_them():
    rec = Recording()
    rec.add({"k": "scpu", "pid": 7, "samples": [[10, 1, 0], [20, 2, 5], [30, 3, 9]]})
    rec.add({"k": "tcpu", "pid": 7, "tid": 7, "samples": [[10, 100, 0]]})
    assert rec.sampler_cpu[7] == [(10, 1, 0), (20, 2, 5), (30, 3, 9)] and rec.cpu[7] == [(10, 100, 0)]
    rec.trim(25)
    assert rec.sampler_cpu[7] == [(20, 2, 5), (30, 3, 9)]   # one row before the cut, to interpolate
    assert "scpu" in _PID_FRAMES


def test_every_thread_of_a_recorder_runs_at_the_samplers_priority(tmp_path):
    # niceness is per thread on Linux, and py-spy starts its sampling thread within milliseconds
    # of its exec: renicing the process alone left that thread at 0 in about half of the windows
    job = spinning(1)
    window = None
    try:
        try:   # lowering a niceness needs CAP_SYS_NICE (root in a container may lack it)
            os.setpriority(os.PRIO_PROCESS, job.pid, SAMPLER_NICE)
        except PermissionError:
            pytest.skip("lowering niceness is not permitted here (CAP_SYS_NICE)")
        time.sleep(0.3)
        for _ in range(5):   # the race is the spawn's: several windows, each must be all set
            window = RecordWindow(find_pyspy(), job.pid, 100, 5, tmp_path / "w.json")
            for _ in range(3):
                window.settle()
                time.sleep(0.02)
            assert window.recorder_pid is not None
            tids = os.listdir(f"/proc/{window.recorder_pid}/task")
            assert len(tids) >= 2   # its main thread and the sampling one
            assert {os.getpriority(os.PRIO_PROCESS, int(t)) for t in tids} == {SAMPLER_NICE}
            window.stop()
            window.collect()
            window = None
    finally:
        if window is not None:
            window.kill()
        job.kill()
        job.wait()


def test_windows_are_short_first_then_lengthen_once_the_rank_has_been_sampled_a_while():
    # GIVEN a sampler on a real job, its schedule scaled down: a first window of 0.4 s, then 1-s
    # windows, and 2.5-s ones once the rank has been sampled for 3 s (0.8, 2, 4 and 10 s by default)
    job = spinning(1)
    config = SamplerConfig(first_window_s=0.4, window_s=1.0, steady_window_s=2.5, steady_after_s=3.0)
    sampler = Sampler(job.pid, find_pyspy(), config)
    frames: list[dict] = []
    stop = threading.Event()
    try:
        time.sleep(0.3)
        sampler.begin(FrameWriter(None), sampler.probe())
        sampler.writer.listen(frames.append)
        runner = threading.Thread(target=sampler.run, args=(stop,))
        runner.start()
        time.sleep(9.0)
        stop.set()
        runner.join()
    finally:
        job.kill()
        job.wait()
    # THEN each window covers its own length (plus the hand-over's overlap), and nothing is lost between them
    windows = sorted((f for f in frames if f["k"] == "window" and f["start"] is not None), key=lambda f: f["w"])
    lengths = [(w["end"] - w["start"]) / 1e9 for w in windows[:-1]]   # the last one was cut short by the stop
    assert lengths[0] < 0.8
    assert all(0.8 < s < 1.8 for s in lengths[1:3])
    assert any(s > 2.2 for s in lengths[3:])
    assert all(later["start"] <= earlier["end"] for earlier, later in itertools.pairwise(windows))
