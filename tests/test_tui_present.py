"""The pure view-model step: a live document and a selection in, what each panel draws out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from testkit.streams import read_frames
from testkit.tui_support import FIXTURES, recorded_feed
from traceml_attach.diagnose.analysis import analyze
from traceml_attach.diagnose.report import Stall
from traceml_attach.ingest.stream import Recording
from traceml_attach.output.live import live_document
from traceml_attach.output.summary import Summary
from traceml_attach.steps.classify import load_rules
from traceml_attach.steps.phases import PHASES
from traceml_attach.tui.feed import Notice, Update
from traceml_attach.tui.present import move_phase, move_rank, present
from traceml_attach.tui.viewmodel import SPARK, RankRow, RanksVM, Selection, sparkline
from traceml_attach.tui.widgets._panel import window
from traceml_attach.tui.widgets.ranks import RanksList
from traceml_attach.tui.widgets.steptable import StepTable


@pytest.fixture(scope="module")
def ddp_doc() -> Summary:
    return recorded_feed("ddp_input_straggler").document()


def test_default_selection_is_the_rank_the_diagnosis_names(ddp_doc):
    vm = present(ddp_doc, Selection())
    assert ddp_doc.report.step_time.diagnosis.kind == "INPUT_STRAGGLER"
    assert vm.selection == Selection(1, "input")
    assert vm.rank_ids == (0, 1)
    assert [r.label for r in vm.steps.rows] == ["r0", "r1", "median", f"worst r{vm.steps.worst_rank}"]
    selected = [r.label for r in vm.steps.rows if r.selected]
    assert selected == ["r1"]
    assert [r.label for r in vm.steps.rows if r.flagged] == ["r1"]


def test_rail_leads_with_the_step_time_diagnosis_and_memory(ddp_doc):
    rail = present(ddp_doc, Selection()).rail
    assert rail.items[0].title == "Step time"
    assert rail.items[0].status == "INPUT STRAGGLER"
    assert rail.items[0].severity == "critical"
    assert rail.items[0].why and rail.items[0].action
    assert "Memory" in [i.title for i in rail.items]


def test_step_rows_carry_the_documents_numbers(ddp_doc):
    vm = present(ddp_doc, Selection())
    r1 = ddp_doc.report.step_time.ranks[1]
    row = next(r for r in vm.steps.rows if r.label == "r1")
    assert r1.step_ms is not None and r1.phases_ms is not None
    assert row.step_ms == f"{r1.step_ms:.1f}"
    assert row.phases_ms[PHASES.index("input")] == f"{r1.phases_ms['input']:.1f}"
    assert row.shares is not None and sum(row.shares) == pytest.approx(1.0, abs=0.01)
    assert vm.steps.skew == f"{ddp_doc.report.step_time.skew_pct:+.1f}%"


def test_hot_frames_follow_the_selected_rank_and_phase(ddp_doc):
    vm = present(ddp_doc, Selection(1, "input"))
    assert vm.hot.rank == "1" and vm.hot.phase == "input"
    assert "burn_cpu" in vm.hot.rows[0].frame        # ddp.py's input straggler burns CPU in preprocess
    bwd = present(ddp_doc, Selection(0, "backward")).hot
    assert bwd.rank == "0" and bwd.phase == "backward" and bwd.rows
    assert bwd.rows != vm.hot.rows


def test_moving_the_selection_wraps_around(ddp_doc):
    assert present(ddp_doc, Selection()).rank_ids == (0, 1)
    ids = (0, 1, 2)   # three, so that forward and back differ
    assert [move_rank(ids, Selection(r, "input"), 1).rank for r in ids] == [1, 2, 0]
    assert [move_rank(ids, Selection(r, "input"), -1).rank for r in ids] == [2, 0, 1]
    assert move_rank(ids, Selection(2, "input"), 1).phase == "input"
    assert move_phase(Selection(0, "wait"), 1).phase == "input"
    assert move_phase(Selection(0, "input"), -1).phase == "wait"
    # a selection for a rank that is gone falls back to the default
    assert present(ddp_doc, Selection(7, "forward")).selection == Selection(1, "forward")


def test_ranks_list_shows_exited_restarted_and_stalled(ddp_doc):
    ranks = ddp_doc.report.ranks
    changed = {0: replace(ranks[0], status="exited", exit_status=1),
               1: replace(ranks[1], status="restarted", restarts=2)}
    doc = replace(ddp_doc, report=replace(ddp_doc.report, ranks=changed))
    rows = {r.rank: r for r in present(doc, Selection()).ranks.rows}
    assert (rows["0"].status, rows["0"].detail) == ("exited", "exited with status 1")
    assert rows["1"].status == "restarted" and "2 restarts" in rows["1"].detail
    stalled = {**changed, 1: replace(changed[1], stall=Stall(True, 42.0, "wait/collective", "f (a.py:3)"))}
    doc = replace(doc, report=replace(doc.report, ranks=stalled))
    rows = {r.rank: r for r in present(doc, Selection()).ranks.rows}
    assert rows["1"].status == "stalled"
    assert rows["1"].detail.startswith("no step for 42 s, in wait/collective at f (a.py:3)")


def test_a_fresh_attach_says_it_is_warming_up():
    feed = recorded_feed("input_bound")
    first, _ = feed.rec.time_range() or (0, 0)
    an = analyze(feed.rec, load_rules(), start_ns=first, end_ns=first + 200_000_000)
    doc = live_document(feed.rec, an, "x")
    vm = present(doc, Selection(), "LIVE")
    assert doc.live is not None
    steps = doc.live.steps_seen
    assert doc.live.warming_up
    assert vm.header.mode == f"WARMING UP ({steps} steps seen)"
    assert vm.rail.items[0].status == "WARMING UP"
    # the mode names what the user did; warming up only replaces LIVE
    assert present(doc, Selection(), "PAUSED").header.mode == "PAUSED"


def test_the_first_seconds_are_a_first_look_then_live(ddp_doc):
    # GIVEN the recorded torchrun job as a live view saw it 3 s into the attach...
    frames = read_frames(FIXTURES / "ddp_input_straggler.msgpack")
    start = min(f["t"] for f in frames if f.get("k") == "target")
    early = Recording()
    for frame in frames:   # its spans' windows end within 3 s of the start
        if frame.get("k") != "spans" or all(ts < start + 3_000_000_000 for _, ts, _, _ in frame["spans"]):
            early.add(frame)
    doc = live_document(early, analyze(early, load_rules()), "x")
    assert doc.live is not None and doc.live.first_look
    # THEN the header says the numbers are a first look, and LIVE past FIRST_LOOK_S of samples
    assert not doc.live.warming_up and present(doc, Selection(), "LIVE").header.mode == "FIRST LOOK"
    assert ddp_doc.live is not None and not ddp_doc.live.first_look
    assert present(ddp_doc, Selection(), "LIVE").header.mode == "LIVE"


def test_memory_panel_has_a_trend_per_rank(ddp_doc):
    mem = present(ddp_doc, Selection()).memory
    assert [r.rank for r in mem.rows] == ["0", "1"]
    assert mem.source.startswith("host RSS")       # no GPU on the machine that recorded it
    assert all(r.spark and set(r.spark) <= set(SPARK) for r in mem.rows)


def test_a_final_summary_can_be_presented_too():
    feed = recorded_feed("wait_heavy")
    from traceml_attach.output.summary import build_summary

    summary = build_summary(feed.rec, analyze(feed.rec, load_rules()), "x")
    vm = present(summary, Selection(), "REPLAY")
    assert vm.rail.items[0].status == "WAIT-HEAVY"
    assert vm.header.mode == "REPLAY"


def test_sparkline_scale():
    assert sparkline([]) == ""
    flat = sparkline([1000 * 2**20 + (i % 2) * 2**20 for i in range(20)])   # 1 MiB noise on 1 GB
    assert set(flat) == {SPARK[0]}
    rising = sparkline(list(range(0, 100 * 2**20, 2**20)))
    assert rising[0] == SPARK[0] and rising[-1] == SPARK[-1]
    assert len(rising) == 100   # one character a point: the memory panel keeps the newest that fit


@pytest.mark.parametrize(("count", "selected", "capacity", "expected"), [
    (3, 1, 5, range(0, 3)),
    (64, 0, 5, range(0, 5)),
    (64, 63, 5, range(59, 64)),
    (64, 30, 5, range(28, 33)),
    (64, 30, 0, range(0)),
])
def test_row_window_keeps_the_selection_visible(count, selected, capacity, expected):
    assert window(count, selected, capacity) == expected


def test_only_updates_replace_each_other():
    doc = recorded_feed("wait_heavy").document()
    a, b = Update(doc), Update(replace(doc, run_name="newer"))
    assert b.can_replace(a)
    assert not Notice("x").can_replace(Notice("y"))
    assert not Notice("x").can_replace(a)


def test_an_unknown_step_time_shows_shares_and_says_why():
    # GIVEN 20 ms steps sampled at 100 Hz: two samples a step, the step time cannot be known
    import random

    from testkit.simulator import job, simulate
    from traceml_attach.output.summary import build_summary

    rec, _ = simulate(job(20, "input", 0.7, rng=random.Random(2)), 100, 10.0, seed=3)
    doc = build_summary(rec, analyze(rec, load_rules()), "short")
    # WHEN the step table is presented
    vm = present(doc, Selection()).steps
    # THEN the rank row has no milliseconds but its shares, the count is a lower bound, and the
    # note says the step time is unknown and the rate that would tell it
    (row,) = vm.rows
    assert row.step_ms == "?" and row.steps.endswith("+")
    assert all(cell.endswith("%") for cell in row.phases_ms)
    assert vm.note.startswith("step time unknown") and "--rate" in vm.note


def test_the_worst_row_is_the_rank_the_diagnosis_blames_and_blocked_time_has_its_column(ddp_doc):
    # GIVEN an input straggler on rank 1: rank 0 waits for it in the all-reduce
    vm = present(ddp_doc, Selection())
    st = ddp_doc.report.step_time
    # THEN "worst" is rank 1, the rank the diagnosis names, not the rank whose step reads longest
    assert st.diagnosis.worst_rank == 1 and vm.steps.worst_rank == "1"
    assert [r.label for r in vm.steps.rows if r.kind == "worst"] == ["worst r1"]
    # AND each rank's time blocked in the collective is its own cell, from the report
    blocked = {r.label: r.blocked_ms for r in vm.steps.rows if r.kind == "rank"}
    assert st.ranks[0].sync_wait_ms is not None and blocked["r0"] == f"{st.ranks[0].sync_wait_ms:.1f}"
    lines = [t.plain for t in StepTable().lines(vm.steps, 120, 12)]
    assert "Blkd*" in lines[0]
    assert blocked["r0"] in next(line for line in lines if line.lstrip("▶ ").startswith("r0"))


def test_the_selected_ranks_detail_wraps_where_the_panel_has_room():
    detail = "restarted 2x: " + " ".join(f"pid{n} exited with code {n}" for n in range(4))
    model = RanksVM((RankRow("0", "123", "restarted", detail, selected=True), RankRow("1", "124", "alive", "ok")))
    lines = [t.plain for t in RanksList().lines(model, 60, 8)]
    # THEN the selected rank's detail is whole, cut between words, and the next rank follows it
    assert len(lines) > 2 and all(len(line) <= 60 for line in lines)
    assert " ".join(line.split("restarted", 1)[-1].strip() if i == 0 else line.strip()
                    for i, line in enumerate(lines[:-1])).endswith("pid3 exited with code 3")
    assert "…" not in "".join(lines)
    assert lines[-1].lstrip().startswith("r1")
    # AND without room it stays one line a rank, cut as before
    tight = [t.plain for t in RanksList().lines(model, 60, 2)]
    assert len(tight) == 2 and tight[0].endswith("…")
