"""The wheel as a user installs it: built, installed non-editable into a fresh venv without torch,
then its `traceml` runs --help, a snapshot of a running example (compared, exported, made an HTML
report), attach --prometheus scraped, an agent and a collector, and the TUI in a real terminal.

Every test runs from the editable install, which finds data files in the source tree: this is
the one check that the wheel ships them (a missing app.tcss crashed the TUI of every pip install).
The example itself runs with this interpreter, which has torch. Run: python3 .ci/wheel_smoke.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

from launch import start_example, stop_example  # noqa: E402
from testkit.tui_tmux import Terminal, attach_command, wait_file  # noqa: E402

STARTED = time.monotonic()
# what the wheel may install at the top level: our two packages, no generic name
OUR_NAMES = {"traceml_attach", "traceml_agent"}


def step(text: str) -> None:
    print(f"wheel smoke [{time.monotonic() - STARTED:5.1f} s] {text}", flush=True)


def run(*cmd: str | Path, cwd: Path) -> str:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        sys.exit(f"wheel smoke: {' '.join(map(str, cmd))} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done.stdout


def build_wheel(tmp: Path) -> Path:
    """From a copy of the files git would commit: a stale build/ in the tree can hide a data file the
    package leaves out."""
    files = run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT).split("\0")
    src = tmp / "src"
    for name in filter(None, files):
        if (ROOT / name).is_symlink():   # traceml_agent -> agent: the sampler's package name
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).symlink_to(os.readlink(ROOT / name))
        elif (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", tmp / "dist", src, cwd=tmp)
    (wheel,) = (tmp / "dist").glob("traceml_attach-*.whl")
    with zipfile.ZipFile(wheel) as whl:
        tops = {name.split("/")[0] for name in whl.namelist() if not name.split("/")[0].endswith(".dist-info")}
    if tops != OUR_NAMES:
        sys.exit(f"wheel smoke: the wheel installs {sorted(tops)}, not only {sorted(OUR_NAMES)}")
    return wheel


def install(wheel: Path, tmp: Path) -> Path:
    venv = tmp / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp)
    run(venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel, cwd=tmp)
    where = run(venv / "bin" / "python", "-c", "import importlib.util as u, traceml_attach as t; "
                "print(t.__file__); print(u.find_spec('torch') is None)", cwd=tmp).split()
    if not where[0].startswith(str(venv)) or where[1] != "True":
        sys.exit(f"wheel smoke: the venv is not clean: traceml_attach from {where[0]}, torch absent: {where[1]}")
    return venv / "bin" / "traceml"


def snapshot(traceml: Path, pid: int, tmp: Path) -> None:
    run(traceml, "snapshot", "--pid", str(pid), "--seconds", "4", "--quiet", "--logs-dir", tmp / "logs",
        "--run-name", "snap", cwd=tmp)
    if not json.loads((tmp / "logs" / "snap" / "final_summary.json").read_text()):
        sys.exit("wheel smoke: the snapshot's summary is empty")
    same = json.loads(run(traceml, "compare", tmp / "logs" / "snap", tmp / "logs" / "snap", "--json",
                          "--fail-on-regression", "0", cwd=tmp))
    if same["step"]["verdict"] not in ("no change", "unknown"):
        sys.exit(f"wheel smoke: a run compared with itself is {same['step']['verdict']}")
    run(traceml, "export", tmp / "logs" / "snap", "--perfetto", tmp / "trace.json", cwd=tmp)
    if not any(e["ph"] == "X" for e in json.loads((tmp / "trace.json").read_text())["traceEvents"]):
        sys.exit("wheel smoke: the Perfetto export has no slices")
    run(traceml, "view", tmp / "logs" / "snap", "--html", tmp / "report.html", cwd=tmp)
    page = (tmp / "report.html").read_text()
    if len(page) < 1_000_000 or '<script id="report-data"' not in page:   # the inlined ECharts is package data
        sys.exit(f"wheel smoke: the HTML report lacks its library or data ({len(page)} bytes)")


def prometheus(traceml: Path, pid: int, tmp: Path) -> None:
    """attach --prometheus from the wheel (prometheus-client installed): scraped once it ticked."""
    attach = subprocess.Popen([str(traceml), "attach", "--pid", str(pid), "--no-tui", "--duration", "20",
                               "--prometheus", "127.0.0.1:0", "--logs-dir", str(tmp / "logs"), "--run-name", "prom"],
                              cwd=tmp, text=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert attach.stderr is not None
    try:
        lines = [attach.stderr.readline()]
        while not (found := re.search(r"http://127\.0\.0\.1:(\d+)/metrics", lines[-1])):
            if not lines[-1] or len(lines) > 20:
                sys.exit(f"wheel smoke: attach --prometheus said no address: {lines}")
            lines.append(attach.stderr.readline())
        deadline, text = time.monotonic() + 20, ""
        while "traceml_samples_total" not in text and time.monotonic() < deadline:
            time.sleep(1)
            with urllib.request.urlopen(f"http://127.0.0.1:{found.group(1)}/metrics", timeout=5) as response:
                text = response.read().decode()
        if "traceml_samples_total" not in text:
            sys.exit(f"wheel smoke: the Prometheus scrape has no samples counter:\n{text[-1000:]}")
    finally:
        attach.terminate()
        attach.wait(timeout=30)


def multinode(traceml: Path, pid: int, tmp: Path) -> None:
    """A collector (snapshot --listen) and one agent, both from the wheel: pyzmq with CURVE installed."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    token = tmp / "token"
    collector = subprocess.Popen([str(traceml), "snapshot", "--listen", f"127.0.0.1:{port}", "--expect-nodes", "1",
                                  "--seconds", "6", "--quiet", "--token-file", str(token), "--logs-dir",
                                  str(tmp / "logs"), "--run-name", "multinode"], cwd=tmp, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not token.exists() and collector.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    agent = subprocess.Popen([str(traceml), "agent", "--pid", str(pid), "--connect", f"127.0.0.1:{port}",
                              "--token-file", str(token)], cwd=tmp, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err = collector.communicate(timeout=120)
    _, agent_err = agent.communicate(timeout=60)
    if collector.returncode or agent.returncode:
        sys.exit(f"wheel smoke: multi-node failed: collector {collector.returncode}: {err.strip()[-400:]}; "
                 f"agent {agent.returncode}: {agent_err.strip()[-400:]}")
    summary = json.loads((tmp / "logs" / "multinode" / "final_summary.json").read_text())
    if len(summary["nodes"]) != 1 or not summary["step_time"]["ranks"]:
        sys.exit(f"wheel smoke: the collector saw no node's ranks: {summary['nodes']}")


def tui(traceml: Path, pid: int, tmp: Path) -> None:
    exit_file = tmp / "tui-exit"
    term = Terminal(attach_command(pid, tmp / "logs", "tui", exit_file, program=str(traceml)), 160, 45)
    try:
        deadline = time.monotonic() + 60
        while not all(n in term.screen() for n in ("Step time", "Hot frames", "r0 ", "LIVE")):
            if exit_file.exists() or time.monotonic() > deadline:
                sys.exit(f"wheel smoke: the TUI did not draw the live job:\n{term.screen()}")
            time.sleep(0.2)
        step("the TUI draws the live job; pressing q")
        term.press("q")
        code = wait_file(exit_file)
        if code != "0" or not term.restored():
            sys.exit(f"wheel smoke: the TUI exited {code}, terminal restored: {term.restored()}\n{term.screen()}")
    finally:
        term.close()
    json.loads((tmp / "logs" / "tui" / "final_summary.json").read_text())


def main() -> None:
    for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):   # nothing may lead the venv back to the tree
        os.environ.pop(name, None)
    tmp = Path(tempfile.mkdtemp(prefix="traceml-wheel-"))
    try:
        wheel = build_wheel(tmp)
        step(f"built {wheel.name}")
        traceml = install(wheel, tmp)
        step("installed into a fresh venv without torch")
        if "snapshot" not in run(traceml, "--help", cwd=tmp):
            sys.exit("wheel smoke: traceml --help does not list its commands")
        job = start_example("balanced")
        try:
            step(f"traceml --help works; examples/balanced.py runs as pid {job.pid}")
            snapshot(traceml, job.pid, tmp)
            step("traceml snapshot wrote its summary; compare with itself: no change; export --perfetto; view --html")
            prometheus(traceml, job.pid, tmp)
            step("traceml attach --prometheus served a scrape")
            multinode(traceml, job.pid, tmp)
            step("traceml agent streamed to a traceml snapshot --listen (ZeroMQ, CURVE)")
            if shutil.which("tmux") is None:
                sys.exit("wheel smoke: needs tmux for the TUI")
            tui(traceml, job.pid, tmp)
            step("traceml attach (TUI) detached on q and wrote its summary")
        finally:
            stop_example(job)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    step("ok")


if __name__ == "__main__":
    main()
