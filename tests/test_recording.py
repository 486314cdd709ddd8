"""The recording on disk: rotation under a cap, batched writes, replay of what is kept."""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from testkit.simulator import job, simulate
from traceml_agent.wire import segment_path
from traceml_agent.writer import FrameWriter
from traceml_attach.cli.common import recording_mb
from traceml_attach.cli.main import main
from traceml_attach.diagnose.analysis import analyze
from traceml_attach.ingest.segments import Dropped, describe, segment_files
from traceml_attach.ingest.stream import Recording, read_recording
from traceml_attach.steps.classify import load_rules

WINDOW_NS = 2_000_000_000
SECONDS = 120.0
PIDS = (1000, 1001)
CAP = 120_000   # bytes: about a third of the simulated stream (segments of 15 kB, 4-5 s)

Op = tuple[str, Any]


def simulated_stream(seconds: float = SECONDS) -> list[Op]:
    """Two ranks of a simulated input-bound job as the agent would write them: per 2 s window and
    rank a spans, window, proc and tcpu frame; threads every 10 s; host every window."""
    rec, _ = simulate(job(150, "input", 0.5, ranks=2), rate_hz=100, seconds=seconds, seed=3)
    t0 = min(s[0].ts_ns for s in rec.spans.values())
    ops: list[Op] = [("write", {"k": "hello", "v": 1, "t": t0, "rate_hz": 100, "backend": "py-spy", "window_s": 2.0})]
    for rank, pid in enumerate(PIDS):
        ops.append(("write", {"k": "target", "t": t0, "pid": pid, "exe": "/usr/bin/python3",
                              "cmd": ["python", "train.py"], "nspid": [pid], "rank": rank, "local_rank": rank,
                              "world_size": 2}))
    end = max(s[-1].end_ns for s in rec.spans.values())
    for w in range((end - t0) // WINDOW_NS + 1):
        lo, hi = t0 + w * WINDOW_NS, t0 + (w + 1) * WINDOW_NS
        for pid in PIDS:
            if w % 5 == 0:
                ops.append(("write", {"k": "threads", "pid": pid, "t": lo, "threads": [[1, pid, "MainThread", True]]}))
            rows = [(s.tid, s.ts_ns, s.dur_ns, [(f.name, f.file, f.line, f.src, f.ctx) for f in s.stack])
                    for s in rec.spans[pid] if lo <= s.ts_ns < hi]
            ops.append(("spans", (pid, w, rows)))
            ops.append(("write", {"k": "window", "pid": pid, "w": w, "start": lo, "end": hi, "samples": 200,
                                  "errors": 0}))
            ops.append(("write", {"k": "proc", "pid": pid, "t": hi, "cpu": 90.0, "rss": 500_000_000 + w,
                                  "nthreads": 4, "children": []}))
            ops.append(("write", {"k": "tcpu", "pid": pid, "tid": pid,
                                  "samples": [list(r) for r in rec.cpu[pid] if lo <= r[0] < hi]}))
        ops.append(("write", {"k": "host", "t": hi, "cpu": 50.0, "mem_used": 1 << 30, "mem_total": 1 << 33}))
    ops.append(("write", {"k": "bye", "t": end, "reason": "stopped"}))
    return ops


def play(ops: list[Op], writer: FrameWriter) -> Iterator[None]:
    """Write ``ops``, yielding after each."""
    for kind, arg in ops:
        if kind == "spans":
            writer.write_spans(*arg)
        else:
            writer.write(arg)
        yield


def write_all(ops: list[Op], path: Path, max_bytes: int | None, flush_s: float = 0.0) -> None:
    writer = FrameWriter(path, max_bytes, flush_s=flush_s)
    for _ in play(ops, writer):
        pass
    writer.close()


def recording_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.glob("frames*.msgpack"))


@pytest.fixture(scope="module")
def stream() -> list[Op]:
    return simulated_stream()


@pytest.fixture
def rotated(stream: list[Op], tmp_path: Path) -> Path:
    """The stream written under a cap of about a third of its size."""
    folder = tmp_path / "rotated"
    folder.mkdir()
    write_all(stream, folder / "frames.msgpack", CAP)
    return folder


def spans_key(rec: Recording, pid: int) -> list[tuple[int, int, tuple[Any, ...]]]:
    return [(s.ts_ns, s.dur_ns, s.stack) for s in rec.spans.get(pid, [])]


def written_under_cap(ops: list[Op], folder: Path) -> int:
    """Write ``ops`` into ``folder`` under CAP; the most the files ever held on disk."""
    folder.mkdir()
    writer = FrameWriter(folder / "frames.msgpack", CAP, flush_s=0.0)
    largest = 0
    for _ in play(ops, writer):
        largest = max(largest, recording_bytes(folder))
    writer.close()
    return largest


def test_rotation_keeps_the_files_under_the_cap(stream: list[Op], tmp_path: Path):
    # GIVEN a cap of about a third of what the stream takes unrotated
    write_all(stream, tmp_path / "whole.msgpack", None)
    assert (tmp_path / "whole.msgpack").stat().st_size > 3 * CAP
    folder = tmp_path / "run"
    # WHEN every frame is written, THEN the files never pass the cap
    largest = written_under_cap(stream, folder)
    assert largest <= CAP
    assert recording_bytes(folder) <= CAP
    # the first segment stays, the newest are kept, the oldest middle ones went
    numbers = [n for n, _ in segment_files(folder / "frames.msgpack")]
    assert numbers[0] == 0 and numbers[1] > 1
    assert numbers[1:] == list(range(numbers[1], numbers[-1] + 1))
    assert largest > 0.75 * CAP   # the cap is used, not left mostly empty


def test_a_context_larger_than_a_segment_keeps_the_cap_and_its_segments(stream: list[Op], tmp_path: Path):
    # GIVEN the job's source (a 12-kB file, as a real training script sends) arriving after the
    # first segment, under a cap whose segments (15 kB) could not hold it once per segment
    source = {"k": "source", "file": "/job/train.py", "t": 0, "text": "x = 1\n" * 2000}
    ops = [*stream[:40], ("write", source), *stream[40:]]
    folder = tmp_path / "run"
    largest = written_under_cap(ops, folder)
    # THEN the files never passed the cap, and segments are still whole segments of data, not
    # one per frame (the context is not counted against a segment's data)
    assert largest <= CAP
    numbers = [n for n, _ in segment_files(folder / "frames.msgpack")]
    unrotated = tmp_path / "whole.msgpack"
    write_all(ops, unrotated, None)
    assert numbers[-1] <= 2 * unrotated.stat().st_size // (CAP // 8)
    # AND the source is repeated in no segment where it would take more than half of it
    kinds = [f.get("k") for n, path in segment_files(folder / "frames.msgpack") if n > 1
             for f in msgpack.Unpacker(path.open("rb"), raw=False) if f.get("ctx")]
    assert kinds and "source" not in kinds


def test_every_segment_decodes_alone(stream: list[Op], rotated: Path, tmp_path: Path):
    write_all(stream, tmp_path / "whole.msgpack", None)
    whole, _ = read_recording(tmp_path / "whole.msgpack")
    by_start = {(pid, s.ts_ns): s.stack for pid in PIDS for s in whole.spans[pid]}
    numbered = segment_files(rotated / "frames.msgpack")[1:]
    assert len(numbered) >= 5
    for _, path in numbered[:-1]:   # (the newest may hold only the last frames)
        rec, problem = read_recording(path)
        assert problem is None and rec.bad_frames == 0
        assert rec.rate_hz == 100 and set(rec.targets) == set(PIDS)
        assert rec.targets[1001].rank == 1 and rec.threads[1000][1].name == "MainThread"
        assert rec.dropped is None   # a segment read alone on purpose
        for pid in PIDS:
            assert rec.spans[pid], path
            assert all(by_start[(pid, s.ts_ns)] == s.stack for s in rec.spans[pid])


def test_a_rotated_recording_analyses_like_the_unrotated_one(stream: list[Op], rotated: Path, tmp_path: Path):
    write_all(stream, tmp_path / "whole.msgpack", None)
    whole, _ = read_recording(tmp_path / "whole.msgpack")
    rec, problem = read_recording(rotated / "frames.msgpack")
    assert problem is None and rec.bad_frames == 0
    assert rec.dropped is not None and rec.dropped.segments >= 10
    assert rec.end_reason == "stopped" and set(rec.targets) == set(PIDS)
    # the newest segments hold the same spans as the unrotated stream from their start on
    oldest_kept = segment_files(rotated / "frames.msgpack")[1][1]
    kept, _ = read_recording(oldest_kept)
    kept_from = max(spans_key(kept, pid)[0][0] for pid in PIDS)
    for pid in PIDS:
        assert [s for s in spans_key(rec, pid) if s[0] >= kept_from] == \
            [s for s in spans_key(whole, pid) if s[0] >= kept_from]
    # ...and so the same analysis of that time range (a second in: no span reaches across its start)
    rules = load_rules(None)
    start = kept_from + 1_000_000_000
    a, b = analyze(rec, rules, start_ns=start), analyze(whole, rules, start_ns=start)
    assert [(r.rank, r.steps, r.step_ms, r.shares) for r in a.ranks] == \
        [(r.rank, r.steps, r.step_ms, r.shares) for r in b.ranks]
    assert len(a.ranks) == 2 and all(r.steps >= 50 for r in a.ranks)
    assert [f.kind for f in a.findings] == [f.kind for f in b.findings]


def test_a_cut_anywhere_keeps_every_whole_frame_before_it(rotated: Path, tmp_path: Path):
    full, _ = read_recording(rotated / "frames.msgpack")
    last = segment_files(rotated / "frames.msgpack")[-1][1]
    data = last.read_bytes()
    before_last = None
    folder = tmp_path / "cut"
    shutil.copytree(rotated, folder)
    for cut in [*range(0, len(data), max(1, len(data) // 25)), len(data) - 1]:
        (folder / last.name).write_bytes(data[:cut])
        rec, problem = read_recording(folder / "frames.msgpack")
        assert rec.bad_frames == 0   # no span refers to a definition lost with the cut
        assert problem is None or "ends inside a frame" in problem
        for pid in PIDS:
            got = spans_key(rec, pid)
            assert got == spans_key(full, pid)[: len(got)]
        counts = sum(len(rec.spans[pid]) for pid in PIDS)
        before_last = counts if before_last is None else before_last
        assert counts >= before_last   # what came before the cut segment is all there
    assert cut == len(data) - 1 and problem is not None


def test_a_damaged_middle_segment_does_not_lose_the_later_ones(rotated: Path):
    files = segment_files(rotated / "frames.msgpack")
    middle = files[2][1]
    data = middle.read_bytes()
    middle.write_bytes(data[: len(data) // 2] + b"\xc1" * 8)
    rec, problem = read_recording(rotated / "frames.msgpack")
    assert problem is not None and middle.name in problem and "damaged" in problem
    assert rec.bad_frames == 0
    later, _ = read_recording(files[3][1])   # the segment after the damage, whole
    for pid in PIDS:
        first = later.spans[pid][0].ts_ns
        assert [s for s in spans_key(rec, pid) if s[0] >= first][: len(later.spans[pid])] == spans_key(later, pid)


def test_segments_deleted_by_hand_are_counted_without_the_writers_note(rotated: Path):
    files = segment_files(rotated / "frames.msgpack")
    rec, _ = read_recording(rotated / "frames.msgpack")
    assert rec.dropped is not None and rec.dropped.bytes is not None
    files[1][1].unlink()
    again, problem = read_recording(rotated / "frames.msgpack")
    assert problem is None and again.dropped == Dropped(rec.dropped.segments + 1, None, None, None)
    assert f"{rec.dropped.segments + 1} segments deleted" in describe(again.dropped)


def test_a_cap_that_is_never_reached_writes_one_file(stream: list[Op], tmp_path: Path):
    write_all(stream, tmp_path / "frames.msgpack", 10_000_000)
    write_all(stream, tmp_path / "whole.msgpack", None)
    assert [n for n, _ in segment_files(tmp_path / "frames.msgpack")] == [0]
    assert (tmp_path / "frames.msgpack").read_bytes() == (tmp_path / "whole.msgpack").read_bytes()


def test_writes_are_batched(tmp_path: Path):
    path = tmp_path / "frames.msgpack"
    writer = FrameWriter(path, flush_s=3600.0)
    frames = [{"k": "host", "t": i, "cpu": 1.0, "mem_used": 1, "mem_total": 2} for i in range(200)]
    for frame in frames:
        writer.write(frame)
    assert path.stat().st_size == 0   # nothing flushed yet: one write per second, not per frame
    writer.flush()
    assert path.read_bytes() == b"".join(msgpack.packb(f) for f in frames)
    # a buffer of 1 MiB goes out without waiting for the second
    writer.write({"k": "error", "t": 1, "pid": None, "kind": "x", "msg": "m" * (1024 * 1024)})
    assert path.stat().st_size > 1024 * 1024
    writer.close()


def test_listeners_get_each_frame_once_and_no_context_copies(stream: list[Op], tmp_path: Path):
    seen: list[dict[str, Any]] = []
    writer = FrameWriter(tmp_path / "frames.msgpack", 50_000)
    writer.listen(seen.append)
    for _ in play(stream, writer):
        pass
    writer.close()
    assert len(seen) == len(stream)
    assert not [f for f in seen if f["k"] == "segment" or f.get("ctx")]
    live = Recording()
    for frame in seen:
        live.add(frame)
    assert live.bad_frames == 0 and sum(len(v) for v in live.spans.values()) > 1000


def test_replay_says_what_was_dropped(rotated: Path, capsys: pytest.CaptureFixture[str]):
    for given in (rotated, rotated / "frames.msgpack"):
        assert main(["replay", str(given)]) == 0
        out = capsys.readouterr()
        notes = [line for line in out.err.splitlines() if "rotated" in line]
        assert len(notes) == 1, out.err
        assert " segments, " in notes[0] and " MB recorded from " in notes[0] and " s) deleted" in notes[0]
        assert "[INPUT-BOUND]" in out.out
    # one segment alone replays too, without a rotation note
    assert main(["replay", str(segment_path(rotated / "frames.msgpack", 9999))]) != 0
    capsys.readouterr()
    newest = segment_files(rotated / "frames.msgpack")[-1][1]
    assert main(["replay", str(newest)]) == 0
    assert "rotated" not in capsys.readouterr().err


def test_the_cap_option():
    assert recording_mb("0") == 0 and recording_mb("200") == 200 and recording_mb("0.02") == 0.02
    for bad in ("-1", "0.001", "inf", "nan"):
        with pytest.raises(argparse.ArgumentTypeError):
            recording_mb(bad)


def test_cost_frames_are_read_and_a_malformed_one_is_refused(tmp_path: Path):
    from traceml_agent.cost import CpuParts, process_frame

    parts = CpuParts()
    with parts.part("parse"):
        sum(i * i for i in range(200_000))   # some CPU in the part
    frames = [parts.frame(7), process_frame(), {"k": "cost", "t": 1, "pid": 7, "parts": ["not", "seconds"]}]
    rec = Recording()
    for frame in frames:
        rec.add(frame)
    assert rec.costs[7]["parse"] > 0 and rec.bad_frames == 1
    assert rec.costs[None]["process"] > 0 and "children" in rec.costs[None]
