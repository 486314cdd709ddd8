"""py-spy killed, removed or crashing; an interpreter py-spy cannot read; a job with 1,000 threads
or 32 DataLoader workers; a job in another PID namespace (docs/faults.md)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from launch import HERE, _wait_ready, rank_truth, start_example, stop_example
from tests.conftest import ROOT, honestly_unknown, steps_from, traceml
from traceml_agent.discovery import ranks_below
from traceml_agent.pyspy import find_pyspy
from traceml_attach.errors import EXIT_NO_PROCESS, EXIT_NOT_PYTHON, EXIT_PYSPY
from traceml_attach.ingest.stream import read_recording

pytestmark = pytest.mark.e2e


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr
    assert len(lines) == 1, stderr
    return lines[0]


def summary(folder: Path) -> dict:
    return json.loads((folder / "final_summary.json").read_text())


def recorders_of(pid: int) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"])
            if (cmd := p.info["cmdline"] or []) and "record" in cmd and str(pid) in cmd]


def test_pyspy_crashing_or_killed_on_one_rank_stops_or_marks_that_rank_only(torchrun, tmp_path: Path):
    """Two faults of rank 1's py-spy, one after the other on one torchrun job (each attach its own):
    a py-spy that crashes whenever it records rank 1, then recorders that someone else kills."""
    launcher = torchrun(2)
    rank1 = next(r.pid for r in ranks_below(launcher.pid) if r.rank == 1)
    # GIVEN a py-spy that crashes (SIGSEGV) whenever it records rank 1, and works for rank 0
    wrapper = tmp_path / "py-spy"
    wrapper.write_text(f'#!/bin/sh\nif [ "$1" = record ] && [ "$3" = {rank1} ]; then kill -SEGV $$; fi\n'
                       f'exec {find_pyspy()} "$@"\n')
    wrapper.chmod(0o755)
    out = traceml("snapshot", "--pid", str(launcher.pid), "--seconds", "14", "--quiet", "--logs-dir", str(tmp_path),
                  "--run-name", "crash", env={**os.environ, "TRACEML_PYSPY": str(wrapper)})
    assert out.returncode == 0, out.stderr
    ranks = summary(tmp_path / "crash")["step_time"]["ranks"]
    crashed = [p for p in ranks["1"]["problems"] if "killed by SIGSEGV" in p["message"]]
    assert len(crashed) == 3, ranks["1"]["problems"]   # py-spy never sampled it: its sampler stops after 3
    assert ranks["0"]["steps"] >= 20 and not ranks["0"]["problems"]

    snap = subprocess.Popen([sys.executable, "-m", "traceml_attach", "snapshot", "--pid", str(launcher.pid),
                             "--seconds", "16", "--quiet", "--logs-dir", str(tmp_path), "--run-name", "run"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(5)
    # WHEN someone else kills rank 1's py-spy recorders, mid-window, for 3 s
    killed = 0
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        for proc in recorders_of(rank1):
            proc.send_signal(signal.SIGKILL)
            killed += 1
        time.sleep(0.1)
    _, err = snap.communicate(timeout=90)
    assert killed and snap.returncode == 0, err
    # THEN rank 1 is marked with the reason, the summary says what it lost, and rank 0 went on untouched
    doc = summary(tmp_path / "run")
    ranks = doc["step_time"]["ranks"]
    lost = [p for p in ranks["1"]["problems"] if p["kind"] == "pyspy_failed"]
    assert lost and "killed by SIGKILL" in lost[0]["message"] and "not by traceml" in lost[0]["message"]
    # what it lost: less of the window covered, or its steps found only from after the gap (its row
    # then starts there: ``since``)
    assert ranks["1"]["coverage"] < ranks["0"]["coverage"] or ranks["1"].get("since") is not None, ranks["1"]
    # rank 0's steps all counted, against its own over the stretch they were found in (a loaded CI
    # run counted 17 in 16 s: the job's own pace, not a loss), or its step time honestly unknown
    # (a loaded run here: the job's own steps spread 0.28)
    truth = rank_truth(tmp_path, 0, steps_from(doc, 0), doc["sampling"]["window"]["end"])
    assert not ranks["0"]["problems"]
    if ranks["0"]["step_ms"] is not None:
        assert ranks["0"]["steps"] >= truth.steps - max(2, 0.05 * truth.steps), (ranks["0"], truth)
    else:
        assert honestly_unknown(doc, 0, truth), (ranks["0"]["clock"], truth)
    assert doc["sampling"]["diagnosis"]["kind"] == "SAMPLING_PROBLEMS"


def test_pyspy_removed_mid_attach_is_one_line(example, tmp_path: Path):
    job = example("balanced")
    binary = tmp_path / "bin" / "py-spy"
    binary.parent.mkdir()
    shutil.copy2(find_pyspy(), binary)
    snap = subprocess.Popen([sys.executable, "-m", "traceml_attach", "snapshot", "--pid", str(job.pid), "--seconds",
                             "20", "--quiet", "--logs-dir", str(tmp_path), "--run-name", "run"], cwd=ROOT,
                            env={**os.environ, "TRACEML_PYSPY": str(binary)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(5)
    binary.unlink()   # WHEN py-spy is uninstalled under a running attach
    _, err = snap.communicate(timeout=90)
    assert snap.returncode == EXIT_PYSPY
    line = one_line(err)
    assert "py-spy (" in line and "could not be started: No such file or directory" in line
    assert "reinstall it" in line and "summary of what was seen written to" in line
    # the steps of the seconds before it went are kept (a loaded suite run of stop 61 counted 6 in
    # the 5 s that also hold the attacher's start-up; 10 or more on a quiet machine)
    assert summary(tmp_path / "run")["step_time"]["ranks"]["0"]["steps"] >= 3
    assert job.poll() is None


def test_an_interpreter_pyspy_cannot_read_is_named_in_one_line(tmp_path: Path):
    pypy = shutil.which("pypy3")
    if pypy is None:
        pytest.skip("pypy3 is not installed (apt-get install pypy3): no interpreter py-spy cannot read here")
    job = start_example("pure_loop", python=pypy)
    try:
        out = traceml("snapshot", "--pid", str(job.pid), "--seconds", "2", "--logs-dir", str(tmp_path))
    finally:
        stop_example(job)
    assert out.returncode == EXIT_NOT_PYTHON
    line = one_line(out.stderr)
    assert f"process {job.pid} runs PyPy 3." in line and "a build py-spy cannot read" in line


@pytest.mark.quiet   # its cost, with 1,000 threads or 32 workers to read: nothing else beside it
@pytest.mark.parametrize("shape", ["threads", "workers"])
def test_a_wide_job_is_sampled_at_a_bounded_cost(tmp_path: Path, shape: str):
    # a job with 1,000 threads (a big thread pool), or 32 DataLoader worker processes, recording its own steps
    truth = tmp_path / "truth.jsonl"
    if shape == "threads":
        job = start_example("balanced", truth=truth, env={**os.environ, "TRACEML_IDLE_THREADS": "1000"})
    else:
        job = start_example("input_bound", "--workers", "32", "--input-share", "0.2", truth=truth)
    try:
        out = traceml("snapshot", "--pid", str(job.pid), "--seconds", "10", "--quiet", "--logs-dir", str(tmp_path),
                      "--run-name", "run")
        assert out.returncode == 0, out.stderr
        doc = summary(tmp_path / "run")
        proc = doc["process"]["ranks"]["0"]
        if shape == "threads":
            assert proc["threads"] >= 1000
        else:
            assert proc["workers"] >= 32
        # THEN the loop is found and its steps counted over the session, and the sampling is said:
        # its samples and no failed window
        rank = doc["step_time"]["ranks"]["0"]
        assert rank["loop"].startswith("main (") and rank["thread"] == "MainThread"
        assert doc["session"]["ranks"]["0"]["steps"] >= 3
        assert doc["sampling"]["samples"] > 500
        assert not [p for p in doc["sampling"]["problems"] if p["kind"] == "pyspy_failed"]
        assert job.poll() is None
        if shape == "threads":
            # py-spy reads 1,001 threads at each sample: it reaches the job a few times a second, and
            # the steps are read at that rate; where that leaves them unknown, the reason says so
            assert rank["rate_hz"] < 70
            if rank["step_ms"] is None:
                assert "times a second of the 100 asked" in rank["clock"]["reason"]
                assert "faster rate cannot help" in rank["clock"]["reason"]
        # and against the job's own steps: the count never above them (a lower bound where the step
        # time is unknown), a known step time within 10%. Known wrong (issue "Every step counted"),
        # now and then: with 32 workers, two epochs' starts (0.8 and 1.3 s, compute slowed behind
        # the workers) read as sampler drop-outs over steps (136 for 119 seen once)
        window = doc["sampling"]["window"]
        rows = [json.loads(line) for line in truth.read_text().splitlines()]
        own = [r for r in rows if r["end"] > window["start"] and r["start"] < window["end"]]
        own_ms = sorted((r["end"] - r["start"]) * 1e3 for r in own)[len(own) // 2]
        wrong = []
        if doc["session"]["ranks"]["0"]["steps"] > len(own) + 1:
            wrong.append(f"{doc['session']['ranks']['0']['steps']} steps for {len(own)}")
        if rank["step_ms"] is not None and abs(rank["step_ms"] - own_ms) > 0.10 * own_ms:
            wrong.append(f"a {rank['step_ms']:.0f} ms step for {own_ms:.0f} ms")
        if wrong:
            pytest.xfail("known wrong: " + ", ".join(wrong))
    finally:
        stop_example(job)


def test_a_job_in_another_pid_namespace_is_found_and_sampled_and_an_attacher_in_one_sees_only_its_own(tmp_path: Path):
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    # GIVEN a job started in a PID namespace of its own (as in a container), where it is PID 1
    ns = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(HERE / "balanced.py")],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if not _wait_ready(ns, 1, 120):
            pytest.skip(f"cannot start a process in a new PID namespace here: {ns.stderr.read() if ns.stderr else ''}")
        job = next(p.pid for p in psutil.Process(ns.pid).children(recursive=True)
                   if "balanced.py" in " ".join(p.cmdline()))
        # WHEN it is attached by its PID here
        out = traceml("snapshot", "--pid", str(job), "--seconds", "8", "--quiet", "--logs-dir", str(tmp_path),
                      "--run-name", "run")
        assert out.returncode == 0, out.stderr
        # THEN it is sampled, with both of its PIDs known
        doc = summary(tmp_path / "run")
        assert doc["step_time"]["ranks"]["0"]["steps"] >= 10
        rec, _ = read_recording(tmp_path / "run" / "frames.msgpack")
        assert rec.targets[job].nspid == (job, 1)
        # AND an attacher in a PID namespace of its own cannot see that job: it says so, in one line
        out = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "traceml_attach",
                              "snapshot", "--pid", str(job), "--seconds", "1"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60, check=False)
        assert out.returncode == EXIT_NO_PROCESS, out.stderr
        assert f"no process with PID {job} is running" in one_line(out.stderr)
    finally:
        for child in psutil.Process(ns.pid).children(recursive=True) if ns.poll() is None else []:
            child.kill()
        ns.kill()
        ns.wait()
