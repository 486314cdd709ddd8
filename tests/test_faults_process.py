"""The job stopped, replaced (exec), gone with its PID reused, and the attacher killed or attached
twice (docs/faults.md): each is said for what it is, and nothing is sampled as the job that is not
the job."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from agent.discovery import exit_status
from agent.pyspy import find_pyspy
from agent.sampler import Sampler
from agent.watch import TargetWatch
from launch import start_example, stop_example
from tests.conftest import ROOT, steps_from
from traceml_attach.errors import EXIT_OK, EXIT_TARGET_EXITED
from traceml_attach.ingest.stream import read_recording
from traceml_attach.policy import DEFAULT_STEP_TIME_POLICY

pytestmark = pytest.mark.e2e


def attach(pid: int, logs: Path, seconds: float, name: str = "run", cgroup: Path | None = None
           ) -> subprocess.Popen[str]:
    """``traceml attach`` in its own process (in ``cgroup`` from its first instruction, when given)."""
    argv = [sys.executable, "-m", "traceml_attach", "attach", "--pid", str(pid), "--no-tui", "--duration", str(seconds),
            "--logs-dir", str(logs), "--run-name", name]
    if cgroup is not None:
        argv = ["sh", "-c", f'echo $$ > {cgroup / "cgroup.procs"} && exec "$@"', "sh", *argv]
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def live(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if re.match(r"\d\d:\d\d:\d\d \| +\d+s \| ", line)]


def truth_rows(path: Path, start_s: float, end_s: float, longest_s: float = 5.0) -> list[dict]:
    """The job's own steps inside [start_s, end_s], less any that held a stop (longer than longest_s)."""
    rows = [json.loads(line) for line in path.read_text().splitlines(keepends=True) if line.endswith("\n")]
    return [r for r in rows if r["start"] >= start_s and r["end"] <= end_s and r["end"] - r["start"] < longest_s]


# -- the job stopped ----------------------------------------------------------------------

@pytest.mark.parametrize("how", ["sigstop", "debugger"])
def test_a_stopped_job_is_said_stopped_and_resumes_cleanly(example, tmp_path: Path, how: str):
    if how == "debugger" and shutil.which("gdb") is None:
        pytest.skip("gdb is not installed: no debugger to hold the job")
    job = example("balanced")
    proc = attach(job.pid, tmp_path, 28)
    time.sleep(6)
    # WHEN the job is stopped for 12 s, by SIGSTOP or by a debugger attached to it
    if how == "sigstop":
        os.kill(job.pid, signal.SIGSTOP)
        time.sleep(12)
        os.kill(job.pid, signal.SIGCONT)
    else:
        # without the libraries' symbols gdb attaches in a moment (with torch's, it takes seconds)
        subprocess.run(["gdb", "-nx", "-batch", "-iex", "set auto-solib-add off", "-p", str(job.pid),
                        "-ex", "shell sleep 12"], capture_output=True, timeout=60, check=False)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == EXIT_OK, err
    assert "Traceback" not in err
    lines = live(out)
    # THEN the live view said it was stopped, by what, and where, and never took the stop for a hang
    said = "stopped by a signal (SIGSTOP or SIGTSTP)" if how == "sigstop" else "held by a debugger or tracer: gdb"
    # ("(first look)" after the verdict while the window is young: a stop 6 s in keeps it young, as
    # its seconds hold no samples; a suite run's view said so through the whole stop)
    stopped = [line for line in lines if re.search(r"\[STOPPED\] (\(first look\) )?rank 0 is not running: "
                                                   + re.escape(said), line)]
    assert len(stopped) >= 2, out
    assert not [line for line in lines if "[HANG]" in line], out
    # AND the final summary left the stopped seconds out: its step and shares are the job's own
    summary = json.loads((tmp_path / "run" / "final_summary.json").read_text())
    problems = [p for p in summary["sampling"]["problems"] if p["kind"] == "target_stopped"]
    assert len(problems) == 1 and re.search(r"for 1[1-5]\.\d s from", problems[0]["message"]), problems
    window = summary["sampling"]["window"]
    # over the stretch the rank's steps were found in (from where its rate changed, if it did)
    rows = truth_rows(tmp_path / "balanced.jsonl", steps_from(summary), window["end"])
    truth_ms = statistics.median((r["end"] - r["start"]) * 1e3 for r in rows)
    rank = summary["step_time"]["ranks"]["0"]
    if rank["step_ms"] is not None:   # unknown where a loaded machine spreads the steps too much to tell
        assert abs(rank["step_ms"] - truth_ms) <= 0.1 * truth_ms, (rank["step_ms"], truth_ms)
    total = sum(r["end"] - r["start"] for r in rows)
    for phase in ("input", "backward"):
        share = sum(r["phases"][phase] for r in rows) / total
        assert abs(rank["shares"][phase] - share) <= 0.05, (phase, rank["shares"][phase], share)
    assert job.poll() is None


# -- the job replaced by another program, or its PID reused ---------------------------------

def test_a_job_that_execs_another_program_is_not_sampled_as_the_job(tmp_path: Path):
    # GIVEN a job that, 5 s after it is ready, replaces itself with another Python program (a web server)
    job = start_example("balanced", env={**os.environ, "TRACEML_EXEC_AFTER":
                                         f"5 {sys.executable} -m http.server --bind 127.0.0.1 0"})
    try:
        ready = time.time()
        proc = attach(job.pid, tmp_path, 20)
        _, err = proc.communicate(timeout=90)
        # THEN the attach ends when the job stopped being the job, and says why
        assert proc.returncode == EXIT_TARGET_EXITED, err
        assert job.poll() is None   # the other program runs on, untouched
        rec, _ = read_recording(tmp_path / "run" / "frames.msgpack")
        events = [e for e in rec.errors if e.kind == "target_exec"]
        assert len(events) == 1 and "replaced itself with another program (exec: now" in events[0].message
        assert "http.server" in events[0].message
        # AND nothing of the new program was recorded as the job's
        assert not [s for spans in rec.spans.values() for s in spans
                    if any("http/server.py" in f.file or "socketserver.py" in f.file for f in s.stack)]
        assert max(s.end_ns for spans in rec.spans.values() for s in spans) / 1e9 < ready + 5 + 15
        summary = json.loads((tmp_path / "run" / "final_summary.json").read_text())
        assert summary["targets"][0]["exited"] is True
    finally:
        stop_example(job)


# a script that starts the training as its child and passes its output on (no launcher traceml knows)
WRAPPER = ("import subprocess, sys\n"
           "child = subprocess.Popen([sys.executable, *sys.argv[1:]], stdout=subprocess.PIPE, text=True)\n"
           "for line in child.stdout:\n"
           "    print(line, end='', flush=True)\n")


def test_a_wrapper_that_waits_on_the_training_it_started_is_not_said_stuck(tmp_path: Path):
    # GIVEN a wrapper script whose child runs the training, the PID a user may give by mistake: its
    # one thread reads the child's output, at one line, with no step
    wrapper = subprocess.Popen([sys.executable, "-c", WRAPPER, str(ROOT / "examples" / "balanced.py")],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert wrapper.stdout is not None
        deadline = time.monotonic() + 120
        while "ready" not in wrapper.stdout.readline():
            assert wrapper.poll() is None and time.monotonic() < deadline
        children = psutil.Process(wrapper.pid).children()
        assert len(children) == 1
        child = children[0].pid

        def snapshot(seconds: float, name: str) -> tuple[dict, str]:
            argv = ["snapshot", "--pid", str(wrapper.pid), "--seconds", str(seconds), "--quiet",
                    "--logs-dir", str(tmp_path), "--run-name", name]
            out = subprocess.run([sys.executable, "-m", "traceml_attach", *argv], cwd=ROOT, capture_output=True,
                                 text=True, timeout=120)
            assert out.returncode == EXIT_OK, out.stderr
            return json.loads((tmp_path / name / "final_summary.json").read_text())["step_time"], out.stdout

        # WHEN a snapshot shorter than a HANG takes reads it: the child named, and how to attach to it
        step_time, out = snapshot(5, "short")
        assert step_time["diagnosis"]["kind"] == "NO_DATA", out
        assert f"while its child process {child} worked" in step_time["diagnosis"]["why"], out
        assert f"traceml attach --pid {child}" in step_time["diagnosis"]["action"], out
        # THEN one longer than a HANG takes does not say it is stuck: it waits on that child
        step_time, out = snapshot(DEFAULT_STEP_TIME_POLICY.hang_s + 4, "long")
        assert "HANG" not in {f["kind"] for f in step_time["findings"]}, out
        assert step_time["diagnosis"]["kind"] == "NO_DATA", out
        assert f"waits on its child process {child}" in step_time["diagnosis"]["summary"], out
        assert f"traceml attach --pid {child}" in step_time["diagnosis"]["action"], out
    finally:
        for proc in psutil.Process(wrapper.pid).children(recursive=True) if wrapper.poll() is None else ():
            proc.kill()
        wrapper.kill()
        wrapper.wait()


def take_pid(pid: int, argv: list[str], tries: int = 200) -> subprocess.Popen[bytes] | None:
    """Start ``argv`` as process ``pid`` (free now), through /proc/sys/kernel/ns_last_pid; None when
    this machine does not allow it or another process keeps taking the PID first."""
    for _ in range(tries):
        try:
            with open("/proc/sys/kernel/ns_last_pid", "w") as fh:
                fh.write(str(pid - 1))
        except OSError:
            return None
        proc = subprocess.Popen(argv)
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    return None


# the tests that give a process a chosen PID (take_pid) run with nothing beside them: in a parallel
# run, another worker's processes took the PID first in all 200 tries, and the test was skipped
@pytest.mark.quiet
def test_a_reused_pid_is_never_sampled_as_the_job(example, tmp_path: Path):
    job = example("balanced")
    proc = attach(job.pid, tmp_path, 30)
    time.sleep(6)
    # GIVEN an attacher that gets no CPU for a while (a loaded machine), during which the job
    # exits and another Python process gets its PID
    os.kill(proc.pid, signal.SIGSTOP)
    impostor = None
    try:
        job.kill()
        job.wait()
        gone_at = time.time()
        impostor = take_pid(job.pid, [sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"])
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    if impostor is None:
        proc.kill()
        proc.wait()
        pytest.skip("cannot give a process a chosen PID here (/proc/sys/kernel/ns_last_pid not writable, or taken)")
    try:
        _, err = proc.communicate(timeout=60)
        # THEN the attach ends as for an exited job, saying the PID is another process's now
        assert proc.returncode == EXIT_TARGET_EXITED, err
        rec, _ = read_recording(tmp_path / "run" / "frames.msgpack")
        events = [e for e in rec.errors if e.kind == "target_reused"]
        assert len(events) == 1 and "its PID now belongs to another process" in events[0].message
        # AND not one span of the other process was recorded as the job's
        assert max(s.end_ns for spans in rec.spans.values() for s in spans) / 1e9 <= gone_at
        assert impostor.poll() is None   # and it was left alone
    finally:
        impostor.kill()
        impostor.wait()



@pytest.mark.quiet   # take_pid: see above
def test_every_read_of_the_target_asks_the_watch_first():
    # GIVEN a sampler watching a job that exits, and another process that takes its PID before the
    # sampler's thread runs again (it was paused between its look at the target and its next read:
    # the race the test above can lose on a loaded machine)
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    time.sleep(0.3)
    sampler = Sampler(job.pid, find_pyspy())
    sampler._watch = TargetWatch(job.pid)
    frames: list[dict] = []
    sampler.writer.listen(frames.append)
    assert not sampler._gone()
    job.kill()
    job.wait()
    impostor = take_pid(job.pid, [sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"])
    if impostor is None:
        pytest.skip("cannot give a process a chosen PID here (/proc/sys/kernel/ns_last_pid not writable, or taken)")
    try:
        # WHEN its thread dump and its check after a failed window read the target again
        sampler._poll_threads()
        gone = [sampler._gone(), sampler._gone()]
        # THEN the job is gone, its PID reused is said once, and nothing of the other process is
        # written as the job's
        assert gone == [True, True]
        assert [f["kind"] for f in frames if f["k"] == "error"] == ["target_reused"]
        assert not [f for f in frames if f["k"] == "threads"]
        assert impostor.poll() is None
    finally:
        impostor.kill()
        impostor.wait()

# A process whose main thread ends (pthread_exit, holding the GIL) while another thread lives on:
# what the kernel shows for a moment while a thread exec()s, held for as long as the test likes
MAIN_THREAD_ENDS = """
import ctypes, threading, time
threading.Thread(target=time.sleep, args=(120,)).start()
time.sleep(0.2)
ctypes.CDLL(None).pthread_exit(None)
"""


def test_a_main_thread_that_ended_while_another_runs_is_not_an_exit():
    # GIVEN a job whose main thread has ended while another of its threads runs on (its stat reads
    # Z, as the kernel shows a job midway through an exec from a thread: a parallel run of the suite
    # saw that moment in test_a_job_that_execs_another_program_is_not_sampled_as_the_job)
    job = subprocess.Popen([sys.executable, "-c", MAIN_THREAD_ENDS])
    try:
        watch = TargetWatch(job.pid)
        deadline = time.monotonic() + 10
        while read_state(job.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert read_state(job.pid) == "Z" and len(os.listdir(f"/proc/{job.pid}/task")) == 2
        # WHEN the watch looks at it, THEN it has not exited, and has no exit status
        assert watch.look() is None
        assert exit_status(job.pid) is None
        # AND once the whole process ends, it has
        job.kill()
        deadline = time.monotonic() + 10
        while len(os.listdir(f"/proc/{job.pid}/task")) > 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        change = watch.look()
        assert change is not None and change.kind == "exited" and change.status == -signal.SIGKILL
        assert exit_status(job.pid) == -signal.SIGKILL
    finally:
        job.kill()
        job.wait()


def read_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


# -- the attacher killed, or two at once ---------------------------------------------------

@contextlib.contextmanager
def memory_cgroup(limit_bytes: int) -> Iterator[Path]:
    """A cgroup (v1 memory controller, else v2) whose processes the kernel OOM-kills past
    ``limit_bytes``; skips where neither can be made."""
    v1 = Path("/sys/fs/cgroup/memory")
    v2 = Path("/sys/fs/cgroup")
    if (v1 / "memory.limit_in_bytes").exists():
        group, limit = v1 / f"traceml-oom-{os.getpid()}", "memory.limit_in_bytes"
    elif "memory" in (v2 / "cgroup.subtree_control").read_text() if (v2 / "cgroup.subtree_control").exists() else "":
        group, limit = v2 / f"traceml-oom-{os.getpid()}", "memory.max"
    else:
        pytest.skip("no cgroup memory controller here: cannot OOM-kill the attacher")
    try:
        group.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a memory cgroup here: {exc.strerror}")
    try:
        (group / limit).write_text(str(limit_bytes))
        yield group
    finally:
        procs = group / "cgroup.procs"
        for pid in procs.read_text().split() if procs.exists() else []:
            with contextlib.suppress(OSError):
                (group.parent / "cgroup.procs").write_text(pid)
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def step_gaps(truth: Path, around_s: float, span_s: float = 8.0) -> tuple[float, float]:
    """The longest step of the job within ``span_s`` of ``around_s``, and its median step (s)."""
    rows = [json.loads(line) for line in truth.read_text().splitlines(keepends=True) if line.endswith("\n")]
    near = [r["end"] - r["start"] for r in rows if abs(r["start"] - around_s) <= span_s]
    return max(near), statistics.median(r["end"] - r["start"] for r in rows)


@pytest.mark.parametrize("how", ["sigkill", "oom"])
def test_killing_the_attacher_leaves_the_job_untouched(tmp_path: Path, how: str):
    truth, signals = tmp_path / "gt.jsonl", tmp_path / "signals.log"
    job = start_example("compute_bound", truth=truth, env={**os.environ, "TRACEML_SIGNAL_LOG": str(signals)})
    try:
        with contextlib.ExitStack() as stack:
            group = stack.enter_context(memory_cgroup(1 << 30)) if how == "oom" else None
            proc = attach(job.pid, tmp_path, 600, cgroup=group)
            time.sleep(6)
            # WHEN the attacher is killed: SIGKILL, or the kernel's OOM killer in its memory-limited cgroup
            if group is None:
                proc.kill()
            else:
                # a little more than its own (anonymous) memory, its page cache reclaimed: the next py-spy
                # window it starts passes the limit, and the kernel kills the largest process, the attacher
                stat = dict(line.split() for line in (group / "memory.stat").read_text().splitlines())
                held = int(stat.get("total_rss", stat.get("anon", 0)))
                v1 = (group / "memory.limit_in_bytes").exists()
                (group / ("memory.limit_in_bytes" if v1 else "memory.max")).write_text(str(held + (2 << 20)))
            proc.communicate(timeout=60)
        killed_at = time.time()
        assert proc.returncode == -signal.SIGKILL
        time.sleep(8)
        # THEN the job runs on: no signal reached it, and no step around the kill was held up
        assert job.poll() is None
        assert not signals.exists(), signals.read_text()
        longest, median = step_gaps(truth, killed_at)
        assert longest < 3 * median + 0.2, (longest, median)
        # AND the py-spy recorders it left end by themselves, and what it recorded replays
        deadline = time.monotonic() + 10
        while orphans(job.pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert orphans(job.pid) == []
        replayed = subprocess.run([sys.executable, "-m", "traceml_attach", "replay", str(tmp_path / "run")], cwd=ROOT,
                                  capture_output=True, text=True, timeout=120, check=False)
        assert replayed.returncode in (0, 7), replayed.stderr   # 7: the last write was cut (killed mid-write)
        assert "Step Time" in replayed.stdout
    finally:
        stop_example(job)


def orphans(pid: int) -> list[int]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "record" in cmd and str(pid) in cmd:
            found.append(p.pid)
    return found


def test_two_attachers_on_one_job_both_work(example, tmp_path: Path):
    job = example("balanced")
    # WHEN two snapshots of one job start at once, with the same run name
    runs = [subprocess.Popen([sys.executable, "-m", "traceml_attach", "snapshot", "--pid", str(job.pid), "--seconds",
                              "10", "--quiet", "--logs-dir", str(tmp_path), "--run-name", "twice"], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    done = [run.communicate(timeout=120) for run in runs]
    # THEN both work, each in its own run folder, and they agree on the job
    assert [run.returncode for run in runs] == [0, 0], done
    folders = sorted(p.name for p in tmp_path.iterdir() if (p / "final_summary.json").exists())
    assert folders == ["twice", "twice-2"]
    ranks = [json.loads((tmp_path / name / "final_summary.json").read_text())["step_time"]["ranks"]["0"]
             for name in folders]
    assert all(r["steps"] >= 10 for r in ranks)
    for phase in ("input", "backward", "wait"):
        assert abs(ranks[0]["shares"][phase] - ranks[1]["shares"][phase]) <= 0.05, (phase, ranks)
    assert job.poll() is None
