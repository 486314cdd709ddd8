"""The recording on disk: MB per rank per hour, writes per second, and rotation under a cap.

For a real job (examples/<name>.py, or examples/ddp.py under torchrun with --ranks N > 1):

1. `traceml snapshot --max-recording-mb 0` (no cap) for --seconds: the recording grows as it
   did before rotation. Its MB per rank per hour; its frames per second (before batching, each
   frame was one write() and one flush); the write() calls the attacher's threads really make
   per second (strace, in the middle of the snapshot: about one per second, batched).
2. The recorded frames of (1) written again through a FrameWriter capped at a third of their
   size: the bytes rotation adds per segment (the context frames and definitions re-sent), and
   from them the overhead at the default cap's segment size.
3. The same snapshot with --max-recording-mb --cap-mb: the largest the files got while it ran
   (polled every 50 ms), the segments kept and deleted, and `traceml replay` of the folder.

    python bench/recording_bench.py [--example balanced] [--ranks 1] [--seconds 60] [--cap-mb 0.05]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgpack

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))
from launch import start_example, start_torchrun, stop_example  # noqa: E402
from traceml_agent.wire import unpacker  # noqa: E402
from traceml_agent.writer import SEGMENTS, FrameWriter  # noqa: E402
from traceml_attach.ingest.segments import segment_files  # noqa: E402
from traceml_attach.ingest.stream import read_recording  # noqa: E402
from traceml_attach.policy import RECORDING_MAX_MB  # noqa: E402

MB = 1e6


def frames_bytes(folder: Path) -> int:
    total = 0
    for path in folder.glob("frames*.msgpack"):
        with contextlib.suppress(FileNotFoundError):   # deleted by rotation meanwhile
            total += path.stat().st_size
    return total


def attacher_writes(pid: int, seconds: float, out: Path) -> float | None:
    """write() calls per second the attacher's own threads make to files (not its stdout/stderr,
    not its py-spy children), counted with strace over ``seconds``; None without strace."""
    if shutil.which("strace") is None:
        return None
    tids = {int(t) for t in os.listdir(f"/proc/{pid}/task")}
    tracer = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=write,writev", "-o", str(out), "-p", str(pid)])
    time.sleep(seconds)
    tids |= {int(t) for t in os.listdir(f"/proc/{pid}/task")}
    tracer.terminate()
    tracer.wait()
    calls = 0
    for line in out.read_text().splitlines():
        tid, _, call = line.partition(" ")
        to_file = call.startswith(("write", "writev")) and not call.startswith(("write(1,", "write(2,"))
        if tid.isdigit() and int(tid) in tids and to_file:
            calls += 1
    return calls / seconds


def snapshot(job_pid: int, seconds: float, cap_mb: float, work: Path, name: str) -> dict[str, Any]:
    """One snapshot; polls the run folder's size while it runs, and counts the attacher's writes
    in its middle (from 3 s in to 3 s before the end)."""
    cmd = [sys.executable, "-m", "traceml_attach", "snapshot", "--pid", str(job_pid), "--seconds", str(seconds),
           "--quiet", "--max-recording-mb", str(cap_mb), "--logs-dir", str(work), "--run-name", name]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    run = work / name
    largest: int = 0
    writes: float | None = None
    counted = False
    started = time.monotonic()
    while proc.poll() is None:
        largest = max(largest, frames_bytes(run))
        if not counted and time.monotonic() - started > 3:
            counted, writes = True, attacher_writes(proc.pid, seconds - 6, work / f"{name}.strace")
        time.sleep(0.05)
    if proc.returncode != 0:
        raise SystemExit(f"snapshot failed ({proc.returncode}): {proc.stderr.read() if proc.stderr else ''}")
    return {"run": run, "largest": max(largest, frames_bytes(run)), "writes": writes}


def frames_of(path: Path) -> list[dict[str, Any]]:
    with open(path, "rb") as fh:
        return [f for f in unpacker(fh) if isinstance(f, dict)]


def rewrite(frames: list[dict[str, Any]], path: Path, max_bytes: int) -> None:
    """Write recorded frames again through a capped FrameWriter (spans re-interned)."""
    fdefs: dict[int, tuple[Any, ...]] = {}
    sdefs: dict[int, list[int]] = {}
    writer = FrameWriter(path, max_bytes)
    for f in frames:
        if f["k"] != "spans":
            writer.write(f)
            continue
        fdefs.update({d[0]: tuple(d[1:]) for d in f["fdefs"]})
        sdefs.update({d[0]: d[1] for d in f["sdefs"]})
        rows = [(tid, ts, dur, [fdefs[i] for i in sdefs[sid]]) for tid, ts, dur, sid in f["spans"]]
        writer.write_spans(f["pid"], f["w"], rows)
    writer.close()


def rotation_overhead(recorded: Path, work: Path) -> dict[str, float]:
    """Bytes rotation adds per segment, from the recorded frames written again under a cap."""
    frames = frames_of(recorded)
    size = recorded.stat().st_size
    out = work / "rewritten" / "frames.msgpack"
    out.parent.mkdir()
    rewrite(frames, out, size // 3)
    rec, problem = read_recording(out)
    assert problem is None and rec.dropped is not None and rec.dropped.bytes is not None
    segments = segment_files(out)[-1][0]   # rotations
    written = frames_bytes(out.parent) + rec.dropped.bytes
    per_segment = (written - size) / segments
    # the most a segment can repeat: the context and every definition of the session
    definitions = sum(len(msgpack.packb([f["fdefs"], f["sdefs"]])) for f in frames if f["k"] == "spans")
    return {"segments": segments, "per_segment": per_segment, "definitions_bound": definitions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--example", default="balanced")
    parser.add_argument("--ranks", type=int, default=1, help="> 1: examples/ddp.py under torchrun")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--cap-mb", type=float, default=0.05)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="recording-bench-"))
    if args.ranks > 1:
        job = start_torchrun(args.ranks, "--straggler", "none", truth_dir=work)
        label = f"ddp.py x{args.ranks}"
    else:
        job = start_example(args.example)
        label = f"{args.example}.py"
    try:
        time.sleep(2)
        print(f"bench: {label}, {args.seconds:.0f} s uncapped ...", file=sys.stderr, flush=True)
        free = snapshot(job.pid, args.seconds, 0, work, "uncapped")
        print(f"bench: {label}, {args.seconds:.0f} s under {args.cap_mb} MB ...", file=sys.stderr, flush=True)
        capped = snapshot(job.pid, args.seconds, args.cap_mb, work, "capped")
    finally:
        stop_example(job)
    recorded = free["run"] / "frames.msgpack"
    size, frames = recorded.stat().st_size, len(frames_of(recorded))
    per_rank_hour = size / MB / args.seconds * 3600 / args.ranks
    overhead = rotation_overhead(recorded, work)
    segment_mb = RECORDING_MAX_MB / SEGMENTS
    kept = segment_files(capped["run"] / "frames.msgpack")
    replay = subprocess.run([sys.executable, "-m", "traceml_attach", "replay", str(capped["run"])], cwd=ROOT,
                            capture_output=True, text=True, check=False)
    note = next((line for line in replay.stderr.splitlines() if "rotated" in line), "(no rotation note)")

    print(f"{label}, {args.ranks} rank(s), 100 Hz, {args.seconds:.0f} s per snapshot\n")
    print("| | before (no cap, a flush per frame) | after (batched, rotating) |")
    print("|---|---|---|")
    print(f"| disk | {per_rank_hour:.1f} MB per rank per hour, without bound | at most {RECORDING_MAX_MB:.0f} MB per "
          f"session (default): reached after {RECORDING_MAX_MB / (per_rank_hour * args.ranks):.1f} h here |")
    measured = "n/a (no strace)" if free["writes"] is None else f"{free['writes']:.1f}/s"
    print(f"| write() calls to the recording | {frames / args.seconds:.1f}/s (one per frame) | {measured} "
          "(strace of the attacher's threads) |")
    print(f"| rotation overhead | - | {overhead['per_segment'] / 1e3:.1f} kB per segment measured "
          f"({overhead['segments']:.0f} rotations); at most {overhead['definitions_bound'] / 1e3:.0f} kB "
          f"+ context, i.e. <= {100 * overhead['definitions_bound'] / (segment_mb * MB):.2f}% of a "
          f"{segment_mb:.0f} MB segment |")
    print()
    print(f"under --max-recording-mb {args.cap_mb}: largest {capped['largest'] / 1e3:.1f} kB on disk "
          f"(cap {args.cap_mb * MB / 1e3:.0f} kB); segments kept {[n for n, _ in kept]}; "
          f"replay exit {replay.returncode}")
    print(f"replay: {note}")


if __name__ == "__main__":
    main()
