"""Property-based fuzz of the decoders (docs/faults.md): the recording's file reader, the frame
decoder and the collector's message handler take any bytes and any msgpack, and never raise: what
they cannot read is counted, the rest is kept. Bounded in time: a few seconds each."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import msgpack
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from traceml_agent.link import pack
from traceml_agent.wire import unpacker
from traceml_agent.writer import FrameWriter
from traceml_attach.collect.merge import Merger
from traceml_attach.collect.server import Collector
from traceml_attach.diagnose.analysis import analyze
from traceml_attach.ingest.segments import read_segments
from traceml_attach.ingest.stream import Recording
from traceml_attach.steps.classify import load_rules

FIXTURE = Path(__file__).parent / "fixtures" / "balanced.msgpack"
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(allow_nan=True),
                    st.text(max_size=20), st.binary(max_size=20))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=5)),
                      max_leaves=20)


def fixture_frames() -> list[dict[str, Any]]:
    reader = unpacker()
    reader.feed(FIXTURE.read_bytes())
    return list(reader)


FRAMES = fixture_frames()
RULES = load_rules(None)


def mutate(frames: list[dict[str, Any]], picks: list[tuple[int, int, Any]]) -> list[dict[str, Any]]:
    """The frames with some fields (picked by index) given other values, of any type."""
    out = copy.deepcopy(frames)
    for frame_i, key_i, value in picks:
        frame = out[frame_i % len(out)]
        keys = sorted(frame)
        frame[keys[key_i % len(keys)]] = value
    return out


@FUZZ
@given(st.binary(max_size=4096))
def test_any_bytes_read_as_a_recording_never_raise(data: bytes):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "frames.msgpack"
        path.write_bytes(data)
        rec = Recording()
        read_segments(path, rec.add)   # a problem is returned, never raised


@FUZZ
@given(st.binary(min_size=1, max_size=64), st.integers(0, 1 << 16))
def test_a_real_recording_damaged_anywhere_keeps_what_came_before(garbage: bytes, at: int):
    data = FIXTURE.read_bytes()
    cut = at % len(data)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "frames.msgpack"
        path.write_bytes(data[:cut] + garbage)
        rec = Recording()
        read_segments(path, rec.add)
        whole = Recording()
        reader = unpacker()
        reader.feed(data[:cut])
        for frame in reader:
            whole.add(frame)
        assert sum(map(len, rec.spans.values())) >= sum(map(len, whole.spans.values())) - 1


@FUZZ
@given(st.lists(values, max_size=30))
def test_any_frames_fold_in_without_raising(frames: list[Any]):
    rec = Recording()
    for frame in frames:
        rec.add(frame)
    for frame in frames:
        rec.add({"k": "target", **frame} if isinstance(frame, dict) else frame)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 50), values), min_size=1, max_size=8))
def test_real_frames_with_fields_of_any_type_decode_and_analyse(picks: list[tuple[int, int, Any]]):
    # a frame whose field is of the wrong type is counted as bad where it is read, never an
    # exception there or in the analysis of what was kept
    rec = Recording()
    for frame in mutate(FRAMES[:600], picks):
        rec.add(frame)
    analyze(rec, RULES)


@FUZZ
@given(st.lists(values, max_size=10))
def test_any_frames_from_an_agent_merge_without_raising(frames: list[Any]):
    merger = Merger(FrameWriter(None))
    stream = merger.join("agent", "node")
    for frame in [*frames, *FRAMES[:5]]:
        merger.add(stream, frame)


class Handled:
    """A collector bound to a free loopback port, for its message handler alone."""

    collector: Collector | None = None

    @classmethod
    def get(cls, tmp: Path) -> Collector:
        if cls.collector is None:
            cls.collector = Collector("127.0.0.1", 0, tmp / "token")
        return cls.collector


@FUZZ
@given(st.one_of(st.binary(max_size=512), values.map(lambda v: pack(v) if not isinstance(v, bytes) else v),
                 st.fixed_dictionaries({"v": st.just(1), "kind": st.sampled_from(["data", "ctx", "end", "x"]),
                                        "node": values, "agent": values, "seq": values, "t": values,
                                        "next": values, "frames": st.lists(values, max_size=4),
                                        "dropped": values}).map(pack)))
@example(b"\x89\xa4node\xc0\xa4kind\xa3end\xa1v\x01\xa5agent\xc0\xa1t\xcb\x7f\xef\xff\xff\xff\xff\xff\xff\xa3seq"
         b"\x00\xa4next\xc0\xa6frames\x90\xa7dropped\xc0")   # found by Hypothesis: a send time of 1.8e308
def test_any_message_on_the_collectors_socket_is_counted_never_raised(data: bytes):
    collector = Handled.get(Path(tempfile.mkdtemp()))
    before = collector.stats.bad_messages + collector.stats.messages + collector.stats.duplicates
    collector._handle(b"peer", data)
    after = collector.stats.bad_messages + collector.stats.messages + collector.stats.duplicates
    assert after >= before


def test_msgpack_limits_refuse_a_bomb():
    # 32 MiB of empty arrays would be 1.9 GB of Python lists: the decoder's limits refuse it
    bomb = b"\xdd" + (3_000_000).to_bytes(4, "big") + b"\x90" * 3_000_000
    reader = unpacker()
    reader.feed(bomb)
    try:
        next(reader)
    except (ValueError, msgpack.UnpackException):
        return
    raise AssertionError("a 3-million-item array was decoded")
