"""Hot frames: which code inside each phase costs the time (steps/hotframes.py)."""

from __future__ import annotations

from testkit.stacks import f, torch_frame
from traceml_attach.steps.hotframes import hot_frames_of

MS = 1_000_000


def test_the_users_own_lines_are_told_apart_and_a_librarys_are_not():
    # the loop function's wait was three lines: a model call, a hand-written update, a log line
    model_call, update, log = (f("train", line=n) for n in (30, 34, 36))
    op_a, op_b = torch_frame("addmm", "torch/nn/functional.py", 10), torch_frame("addmm", "torch/nn/functional.py", 12)
    rows = hot_frames_of([
        (model_call, None, "wait", 305 * MS), (update, None, "wait", 97 * MS), (log, None, "wait", 24 * MS),
        (op_a, "train (train.py:30)", "forward", 60 * MS), (op_b, "train (train.py:30)", "forward", 40 * MS),
    ])
    assert [(row.frame.rsplit(":", 1)[-1], round(row.ms)) for row in rows["wait"]] == \
        [("30)", 305), ("34)", 97), ("36)", 24)]
    assert round(sum(row.share for row in rows["wait"]), 6) == 1.0
    # torch's lines are one function: its time summed, shown at its busiest line
    (forward,) = rows["forward"]
    assert (round(forward.ms), forward.share) == (100, 1.0)
    assert forward.frame.endswith(":10)")
