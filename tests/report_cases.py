"""Recorded streams changed into the cases a report must carry: a hang, sampling problems and a
thread of ours that failed."""

from __future__ import annotations

from testkit.tui_support import recorded_feed
from traceml_attach.diagnose.analysis import analyze
from traceml_attach.runtime.recordedfeed import RecordedFeed
from traceml_attach.steps.classify import load_rules


def hung_feed() -> RecordedFeed:
    """The torchrun input straggler, then 15 s in which no rank moves: rank 1 stays in its input
    (preprocess), rank 0 in backward (its all-reduce waits for rank 1)."""
    feed = recorded_feed("ddp_input_straggler")
    rec = feed.rec
    for tl in analyze(rec, load_rules()).timelines.values():
        last = tl.segments[-1].span
        sid = next(s for s, stack in rec._stacks.items() if stack is last.stack)
        rec.add({"k": "spans", "pid": int(tl.pid), "spans": [[last.tid, last.end_ns, 15 * 10**9, sid]]})
    return feed


def feed_with_errors(*errors: tuple[int | None, str, str], name: str = "ddp_input_straggler") -> RecordedFeed:
    """A recorded stream with error frames added one second apart: (rank or None, kind, message)."""
    feed = recorded_feed(name)
    rec = feed.rec
    pids = {int(t.rank if t.rank is not None else 0): pid for pid, t in rec.targets.items()}
    first, _ = rec.time_range() or (0, 0)
    for i, (rank, kind, message) in enumerate(errors):
        pid = None if rank is None else pids[rank]
        rec.add({"k": "error", "t": first + (i + 1) * 10**9, "pid": pid, "kind": kind,
                 "msg": message.format(pid=pid)})
    return feed
