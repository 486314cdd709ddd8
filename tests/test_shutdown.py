"""The watchdog that ends a session's process when the terminal will not let go, and the
hang-up checks (runtime/shutdown.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

from traceml_attach.runtime.shutdown import terminal_gone

HUNG = textwrap.dedent("""
    import threading, time
    from traceml_attach.runtime.shutdown import Watchdog
    stop, written = threading.Event(), threading.Event()
    with Watchdog(stop, written.is_set, lambda: 8, grace_s=0.5, summary_wait_s={wait}):
        stop.set()                  # the session ends...
        time.sleep(0.3)
        {summary}                   # ...its summary is (or is not) written...
        time.sleep(30)              # ...and the main thread hangs, as in Textual's shutdown
""")


def run_hung(summary: str, wait_s: float) -> tuple[int, float, str]:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", HUNG.format(summary=summary, wait=wait_s)], capture_output=True,
                          text=True, timeout=60, check=False)
    return done.returncode, time.monotonic() - start, done.stderr


def test_a_process_hung_after_its_summary_ends_with_the_sessions_code():
    code, seconds, err = run_hung("written.set()", wait_s=60)
    assert code == 8
    assert seconds < 10      # the grace is 0.5 s; the hang would last 30 s
    assert "did not let go" in err


def test_a_summary_never_written_ends_the_process_after_its_wait():
    code, seconds, err = run_hung("pass", wait_s=1)
    assert code == 8 and seconds < 10
    assert "summary was not written" in err


def test_a_process_that_ends_by_itself_is_left_alone():
    script = textwrap.dedent("""
        import threading, time
        from traceml_attach.runtime.shutdown import Watchdog
        stop = threading.Event()
        with Watchdog(stop, lambda: True, lambda: 8, grace_s=0.2):
            stop.set()
        time.sleep(1)               # well past the grace, outside the watchdog
        print("ended by itself")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, "ended by itself")


def test_a_terminal_is_gone_only_after_its_hang_up():
    master, slave = os.openpty()
    try:
        assert not terminal_gone(slave)
        os.close(master)            # the terminal emulator goes away (tmux kill-session)
        assert terminal_gone(slave)
    finally:
        os.close(slave)
    read, write = os.pipe()         # not a terminal at all: nothing to release
    try:
        assert not terminal_gone(write)
    finally:
        os.close(read)
        os.close(write)
