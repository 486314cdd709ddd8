"""The one wrapper around the py-spy binary: how it is found, started and read, and
what each of its failures means for the user.

py-spy has no streaming output, so sampling is done in recording *windows*: each
window is a ``py-spy record --format chrometrace --nonblocking --idle`` process whose
file is read when it stops. Chrometrace has begin/end events at stack changes, with
``ts`` in microseconds since the recorder started; we anchor that to the wall clock
at spawn time (measured error: within one sampling interval; see docs/how-it-works.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PYSPY_ENV = "TRACEML_PYSPY"
KEEP_ENV = "TRACEML_KEEP_WINDOWS"  # a folder: keep py-spy's raw window files there (debugging)
_SAMPLES_RE = re.compile(r"Samples:\s*(\d+)\s+Errors:\s*(\d+)")


class PySpyError(Exception):
    """A py-spy failure translated for the user: ``kind`` names the cause."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


PERMISSION_HINT = (
    "run as root (sudo), add --cap-add SYS_PTRACE to the container, "
    "or allow ptrace with `sysctl kernel.yama.ptrace_scope=0`"
)


def find_pyspy() -> str:
    """Return the py-spy binary: $TRACEML_PYSPY, else the one installed beside this interpreter
    (traceml's own dependency, the version it was built against), else PATH.

    PATH comes last because what it finds first may be a wrapper: a pyenv shim is a shell script
    that runs pyenv (dozens of processes) before it execs py-spy, and a window is started every
    2-4 s per rank (about 5 ms of CPU more each time on this project's machine, docs/accuracy.md)."""
    override = os.environ.get(PYSPY_ENV)
    if override:
        if os.path.isfile(override) and os.access(override, os.X_OK):
            return override
        raise PySpyError("pyspy_missing", f"{PYSPY_ENV}={override} is not an executable py-spy binary")
    scripts = sysconfig.get_path("scripts")
    candidates = [str(Path(scripts) / "py-spy") if scripts else None,
                  str(Path(sys.executable).parent / "py-spy"), shutil.which("py-spy")]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise PySpyError(
        "pyspy_missing",
        f"py-spy was not found: install it with `pip install py-spy` or point {PYSPY_ENV} at the binary",
    )


def pyspy_version(binary: str) -> str:
    """py-spy's version string, e.g. '0.4.3'."""
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PySpyError("pyspy_failed", f"py-spy could not be run ({exc})") from exc
    return out.strip().removeprefix("py-spy").strip() or "unknown"


_INTERPRETER = re.compile(r"^(python|pypy)(\d(?:\.\d+)?)?", re.IGNORECASE)


def interpreter_name(exe: str | None) -> str | None:
    """What an executable's name says it is: "Python 3.11", "PyPy 3.9", "PyPy"; None when it does
    not look like a Python at all."""
    match = _INTERPRETER.match(os.path.basename(exe or ""))
    if match is None:
        return None
    kind = "PyPy" if match[1].lower() == "pypy" else "Python"
    return f"{kind} {match[2]}" if match[2] else kind


def process_exe(pid: int) -> str | None:
    """The process's executable (/proc/<pid>/exe), None when it cannot be read."""
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def explain_failure(stderr: str, pid: int, status: int | None = None) -> PySpyError:
    """Map py-spy's stderr (and exit ``status``, when known) to the failure a user can act on."""
    text = stderr.strip()
    if "Permission Denied" in text or "Operation not permitted" in text:
        return PySpyError("permission", f"not permitted to read process {pid}: {PERMISSION_HINT}")
    if "Failed to find python version" in text or "Failed to find a python interpreter" in text:
        exe = process_exe(pid)
        name = interpreter_name(exe)
        if name is not None:   # a Python all the same: a build py-spy cannot read
            return PySpyError(
                "unsupported_python",
                f"process {pid} runs {name} ({exe}), a build py-spy cannot read (not CPython, or its symbols are "
                "stripped, as in some distributions' packages): run the job on a CPython that keeps them (pyenv, "
                "python.org, conda, uv)",
            )
        return PySpyError(
            "not_python",
            f"process {pid} is not a Python process (or its interpreter is stripped): "
            "give the PID of the Python training process or its launcher",
        )
    if "Unsupported version of Python" in text or "free-threaded" in text.lower():
        return PySpyError(
            "unsupported_python",
            f"process {pid} runs a Python version py-spy cannot read ({_first_line(text)}): "
            "py-spy supports CPython up to 3.14, not free-threaded builds; try a newer py-spy",
        )
    if "Failed to get process executable name" in text or "No such process" in text:
        return PySpyError("no_such_process", f"process {pid} is not running")
    exit_part = "" if status is None else f"{describe_exit(status)}, "
    return PySpyError("pyspy_failed", f"py-spy failed on process {pid}: {exit_part}{_stderr_part(text)}")


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line.removeprefix("Error: ")
    return "nothing on stderr"


def describe_exit(status: int) -> str:
    """A finished process's return code in words: 'exit status 1', 'killed by SIGKILL'."""
    if status >= 0:
        return f"exit status {status}"
    try:
        return f"killed by {signal.Signals(-status).name}"
    except ValueError:
        return f"killed by signal {-status}"


def _stderr_part(text: str, lines: int = 3, limit: int = 300) -> str:
    """py-spy's last few lines of stderr, on one line (its Rust backtrace left out)."""
    text = text.split("Stack backtrace:")[0]
    kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    if not kept:
        return "nothing on stderr"
    joined = " / ".join(kept)
    return f"stderr: {joined[:limit]}" + ("…" if len(joined) > limit else "")


def pyspy_env() -> dict[str, str]:
    """The environment py-spy runs in: ours, without Rust's backtraces in its errors."""
    env = dict(os.environ)
    env["RUST_BACKTRACE"] = "0"
    return env


SAMPLER_NICE = -5
SETTLE_CHECKS = 10   # RecordWindow.settle: its threads are set again at the first 10 counter reads (0.2 s)


def _prioritize(pid: int) -> None:
    """Let the recorder preempt the job: it needs little CPU, but needs it on time.

    On a machine whose cores the job fills, a recorder that waits for a core notices stack
    changes late, which shortens one phase and lengthens the next. On Linux a niceness belongs to
    one thread, and a thread takes its creator's when it starts: py-spy starts its sampling thread
    within milliseconds of its exec, so renicing the process (its main thread) alone left that
    thread at 0 in about half of the windows on this machine. Every thread is set, main first
    (threads it starts later inherit), again while the window settles (``RecordWindow.settle``).
    Lowering niceness needs root or CAP_SYS_NICE; without them the recorder runs at normal
    priority.
    """
    try:
        os.setpriority(os.PRIO_PROCESS, pid, SAMPLER_NICE)
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (PermissionError, ProcessLookupError, FileNotFoundError):
        return  # not permitted (normal priority), or the recorder already exited
    for tid in tids:
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) != SAMPLER_NICE:
                os.setpriority(os.PRIO_PROCESS, tid, SAMPLER_NICE)
        except (ProcessLookupError, PermissionError):
            continue   # a thread that ended since it was listed


@dataclass(frozen=True)
class RawSpan:
    """A stack seen continuously on one thread; wall-clock ns; frames outermost first."""

    tid: int
    ts_ns: int
    dur_ns: int
    frames: tuple[tuple[str, str, int], ...]


@dataclass(frozen=True)
class WindowResult:
    spans: list[RawSpan]
    first_ns: int | None
    last_ns: int | None
    samples: int | None
    errors: int | None
    failure: PySpyError | None


class RecordWindow:
    """One ``py-spy record`` process writing chrometrace to a temporary file."""

    def __init__(
        self, binary: str, pid: int, rate_hz: int, max_s: int, out_path: Path, index: int = 0
    ) -> None:
        self.pid = pid
        self.index = index
        self.out_path = out_path
        self.spawn_ns = time.time_ns()
        self._started = time.monotonic()
        self._stop_sent_after_s: float | None = None   # when we sent SIGINT, seconds after the start
        self._killed_why: str | None = None             # why we sent SIGKILL, if we did
        self._proc: subprocess.Popen[str] | None = None
        self._spawn_failure: PySpyError | None = None   # py-spy could not be started at all
        self._settle_checks = SETTLE_CHECKS
        try:
            self._proc = self._spawn(binary, pid, rate_hz, max_s, out_path)
        except OSError as exc:   # removed or replaced since traceml found it
            self._spawn_failure = PySpyError(
                "pyspy_missing", f"py-spy ({binary}) could not be started: {exc.strerror or exc}; it was removed or "
                "replaced while traceml ran: reinstall it (pip install py-spy) and attach again")
            return
        _prioritize(self._proc.pid)

    @staticmethod
    def _spawn(binary: str, pid: int, rate_hz: int, max_s: int, out_path: Path) -> subprocess.Popen[str]:
        # Own session: a Ctrl-C in the user's terminal reaches the attacher, which then
        # stops its windows in order, instead of reaching py-spy directly.
        return subprocess.Popen(
            [
                binary, "record", "--pid", str(pid), "--nonblocking", "--idle",
                "--format", "chrometrace", "--rate", str(rate_hz),
                "--duration", str(max_s), "--output", str(out_path),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=pyspy_env(),
            start_new_session=True,
        )

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def recorder_pid(self) -> int | None:
        """The py-spy process's PID while it runs (its CPU counters: sampler.SamplerCpu)."""
        return self._proc.pid if self.running() and self._proc is not None else None

    def settle(self) -> None:
        """Set the recorder's threads' priority again at its first SETTLE_CHECKS calls: a thread
        it started between the spawn and ``_prioritize`` kept the default."""
        if self._settle_checks > 0 and self._proc is not None and self.running():
            self._settle_checks -= 1
            _prioritize(self._proc.pid)

    def stop(self) -> None:
        """Ask py-spy to stop and write its file (SIGINT to our own child, never the job)."""
        if self._proc is not None and self.running():
            self._stop_sent_after_s = time.monotonic() - self._started
            self._proc.send_signal(signal.SIGINT)

    def kill(self) -> None:
        if self._proc is not None and self.running():
            self._killed_why = "traceml killed it"
            self._proc.kill()

    def collect(self, timeout_s: float = 15.0) -> WindowResult:
        """Wait for the window to end and read its spans."""
        if self._proc is None:
            return WindowResult([], None, None, None, None, self._spawn_failure)
        try:
            out, err = self._proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._killed_why = f"it had not ended {timeout_s:.0f} s after being asked to, and traceml killed it"
            self._proc.kill()
            out, err = self._proc.communicate()
        text = (out or "") + (err or "")
        match = _SAMPLES_RE.search(text)
        samples, errors = (int(match[1]), int(match[2])) if match else (None, None)
        failure = None
        events: list[dict[str, Any]] = []
        try:
            with open(self.out_path, encoding="utf-8") as fh:
                events = json.load(fh)
        except FileNotFoundError:
            failure = self._failure(err or "", "wrote no trace")
        except (OSError, json.JSONDecodeError) as exc:
            failure = self._failure(err or "", f"wrote an unreadable trace ({exc})")
        finally:
            keep = os.environ.get(KEEP_ENV)
            if keep and self.out_path.exists():
                # debugging aid: keep py-spy's raw output, named by pid, window and spawn time
                with contextlib.suppress(OSError):
                    Path(keep).mkdir(parents=True, exist_ok=True)
                    shutil.move(self.out_path, Path(keep) / f"{self.pid}-{self.index}-{self.spawn_ns}.json")
            self.out_path.unlink(missing_ok=True)
        spans = spans_from_chrometrace(events, self.spawn_ns)
        first = min((s.ts_ns for s in spans), default=None)
        last = max((s.ts_ns + s.dur_ns for s in spans), default=None)
        return WindowResult(spans, first, last, samples, errors, failure)

    def _failure(self, stderr: str, what: str) -> PySpyError:
        """Why this window has no trace, with everything known: py-spy's exit and stderr, what
        traceml did to it and when, and whether the target still runs."""
        assert self._proc is not None
        status = self._proc.returncode
        known = explain_failure(stderr, self.pid, status)
        if known.kind != "pyspy_failed":
            return known   # a cause the user can act on, said the way they act on it
        ran_s = time.monotonic() - self._started
        parts = [f"py-spy failed on process {self.pid}: recording window {self.index} ({ran_s:.1f} s) {what}",
                 describe_exit(status), _stderr_part(stderr), self._what_traceml_did(status), target_state(self.pid)]
        return PySpyError("pyspy_failed", "; ".join(parts))

    def _what_traceml_did(self, status: int) -> str:
        if self._killed_why is not None:
            return self._killed_why
        if self._stop_sent_after_s is None:
            return "it ended by itself" if status >= 0 else "by another process or the kernel, not by traceml"
        asked = f"traceml asked it to stop (SIGINT) {self._stop_sent_after_s:.1f} s after starting it"
        if status == -signal.SIGINT:
            # py-spy handles SIGINT once it samples (stop, write the trace): dying of it means
            # it had not started sampling yet
            return (f"{asked}, before it had started sampling (it attaches within about 0.1 s "
                    "on an idle machine: a loaded machine, or a target it could not read in time)")
        return asked


def target_state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return f"process {pid} has exited"
    return f"process {pid} has exited" if state in ("Z", "X") else f"process {pid} is still running"


def spans_from_chrometrace(events: list[dict[str, Any]], anchor_ns: int) -> list[RawSpan]:
    """Rebuild per-thread stack spans from chrometrace B/E events.

    Events at one ``ts`` form one stack change; the stack that results holds until the
    thread's next change.
    """
    by_tid: dict[int, list[dict[str, Any]]] = {}
    for event in events:
        if event.get("ph") in ("B", "E"):
            by_tid.setdefault(int(event["tid"]), []).append(event)
    spans: list[RawSpan] = []
    for tid, tid_events in by_tid.items():
        stack: list[tuple[str, str, int]] = []
        current_ts: int | None = None
        for event in tid_events:
            ts = int(event["ts"])
            if current_ts is not None and ts != current_ts and stack:
                spans.append(
                    RawSpan(tid, anchor_ns + current_ts * 1000, (ts - current_ts) * 1000, tuple(stack))
                )
            current_ts = ts
            args = event.get("args") or {}
            if event["ph"] == "B":
                stack.append((str(event.get("name")), str(args.get("filename")), int(args.get("line") or 0)))
            elif stack:
                stack.pop()
    spans.sort(key=lambda s: s.ts_ns)
    return spans
