"""Multi-node sessions as the text and the TUI present them (issue 11): the nodes, each rank's
node and local rank, a node whose agent went silent, and a step table that summarises 1,024
ranks. On one machine none of it shows (the goldens and snapshots say so)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest

from testkit.tui_support import FIXTURES, loaded
from tests.test_tui_snapshots import loaded as settled
from traceml_agent.wire import unpacker
from traceml_attach.cli.live import live_line
from traceml_attach.collect.merge import proc_key
from traceml_attach.diagnose.analysis import analyze_live
from traceml_attach.diagnose.report import NodeRow, PhaseRow, RankStatus
from traceml_attach.diagnose.sections import step_spread
from traceml_attach.ingest.stream import Recording
from traceml_attach.output.render import render_text
from traceml_attach.output.summary import Summary
from traceml_attach.output.words import listed_ranks, rank_ranges
from traceml_attach.runtime.recordedfeed import RecordedFeed
from traceml_attach.steps.classify import load_rules
from traceml_attach.steps.phases import PHASES
from traceml_attach.tui.app import make_app
from traceml_attach.tui.present import present
from traceml_attach.tui.viewmodel import Selection
from traceml_attach.tui.widgets import HeaderBar, RanksList, StepTable

LOST = "no message for 10 s"


def two_nodes(lost: bool = False) -> RecordedFeed:
    """The recorded two-rank torchrun job on node 0 (the collector's machine) and again on node 1
    as ranks 2 and 3 (local ranks 0 and 1), as the collector merges an agent's stream: process
    keys node<<22|pid, a ``node`` frame per node, the socket's ``net`` counters."""
    with (FIXTURES / "ddp_input_straggler.msgpack").open("rb") as f:
        frames = list(unpacker(f))
    rec = Recording()
    for frame in frames:
        rec.add(frame)
        if "pid" in frame:
            clone = dict(frame, pid=proc_key(1, frame["pid"]), n=1)
            if frame["k"] == "target":
                clone.update(rank=frame["rank"] + 2, local_rank=frame["rank"], world_size=4,
                             nspid=[clone["pid"]])
            rec.add(clone)
    t = frames[0]["t"]
    rec.add({"k": "node", "t": t, "node": 0, "name": "gpu-a", "agent": None, "state": "joined",
             "host": "gpu-a", "rate_hz": 100, "offset_ns": 0, "ranks": [0, 1]})
    rec.add({"k": "node", "t": t, "node": 1, "name": "gpu-b", "agent": "a1", "state": "lost" if lost else "joined",
             "reason": LOST if lost else None, "host": "10.0.0.2", "rate_hz": 100, "offset_ns": -2_345_000,
             "ranks": [2, 3]})
    rec.add({"k": "net", "t": t, "messages": 40, "bytes": 3_500_000, "frames": 80, "duplicates": 0,
             "bad_messages": 1, "bad_frames": 0, "refused_peers": 2, "agent_dropped": 0})
    return RecordedFeed(rec, load_rules(), "two_nodes")


@pytest.fixture(scope="module")
def two() -> Summary:
    return two_nodes().document()


@pytest.fixture(scope="module")
def one_lost() -> Summary:
    return two_nodes(lost=True).document()


def test_the_text_has_a_nodes_block_and_each_ranks_node(two):
    # GIVEN a collector's recording of two nodes, two ranks each
    rep = two.report
    assert [(n.node, n.ranks) for n in rep.nodes] == [(0, (0, 1)), (1, (2, 3))]
    assert {rank: (s.node, s.local_rank) for rank, s in rep.ranks.items()} == \
        {0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1)}
    # WHEN it is rendered as text
    lines = render_text(two).splitlines()
    # THEN a nodes block names each node, its state, ranks and clock offset, and says why the
    # offset does not matter to the diagnoses; the net counters fit on one line
    head = lines.index("Nodes: 2 nodes (2 joined)")
    assert lines[head + 1] == "  n0   gpu-a  joined; ranks 0-1; clock offset +0.0 ms"
    assert lines[head + 2] == "  n1   gpu-b (10.0.0.2)  joined; ranks 2-3; clock offset -2.3 ms"
    assert "cross-node diagnoses compare durations, which it does not change" in lines[head + 3]
    assert lines[head + 4] == ("  net: 40 messages, 3.5 MB, 2 refused peers, 1 bad messages, "
                               "0 dropped by agents")
    # and every rank row of the step table says its node and local rank
    for rank, place in ((0, "n0/l0"), (1, "n0/l1"), (2, "n1/l0"), (3, "n1/l1")):
        assert any(line.startswith(f"  {rank} ({place})  ") for line in lines), (rank, lines)


def test_a_lost_agent_shows_in_the_text(one_lost):
    rep = one_lost.report
    assert [rep.ranks[r].status for r in (0, 1, 2, 3)] == ["alive", "alive", "agent lost", "agent lost"]
    text = render_text(one_lost)
    assert "Nodes: 2 nodes (1 joined, 1 lost)" in text
    assert f"  n1   gpu-b (10.0.0.2)  lost ({LOST}); ranks 2-3" in text
    assert (f"Ranks 2-3 (n1): AGENT LOST ({LOST}): the node's agent went silent; whether these ranks still "
            "run is unknown") in text.splitlines()


def test_the_tui_shows_nodes_in_the_header_ranks_and_step_table(one_lost):
    vm = present(one_lost, Selection(3))
    assert vm.header.nodes == "2 nodes (1 joined, 1 lost) · clock -2.3 ms (n1)" and vm.header.nodes_lost
    rows = {r.rank: r for r in vm.ranks.rows}
    assert [(rows[k].node, rows[k].status) for k in "0123"] == \
        [("n0/l0", "alive"), ("n0/l1", "alive"), ("n1/l0", "agent lost"), ("n1/l1", "agent lost")]
    assert rows["3"].detail == f"node 1's agent went silent ({LOST})"
    assert [r.label for r in vm.steps.rows if r.kind == "rank"] == \
        ["r0 (n0/l0)", "r1 (n0/l1)", "r2 (n1/l0)", "r3 (n1/l1)"]
    # drawn: the state in full, the node column beside the rank, the step rows aligned
    drawn = [t.plain for t in RanksList().lines(vm.ranks, 80, 6)]
    assert drawn[3].startswith("▶r3   n1/l1") and "● agent lost " in drawn[3], drawn
    table = [t.plain for t in StepTable().lines(vm.steps, 120, 10)]
    steps = vm.steps.rows[3].steps
    assert table[4].startswith(f"▶r3 (n1/l1) {steps:>6}"), table
    assert table[0].index("Steps") + len("Steps") == table[4].index(f" {steps} ") + 1 + len(steps), table


def test_the_app_draws_the_nodes_and_moves_across_them():
    async def go() -> None:
        app = make_app(two_nodes(lost=True), mode="REPLAY")
        async with loaded(app, (160, 45)) as pilot:
            await pilot.pause()
            assert "│ 2 nodes (1 joined, 1 lost) · clock -2.3 ms (n1) │" in str(app.query_one(HeaderBar).render())
            named = app.view.selection.rank if app.view is not None else None
            assert app.doc is not None and named == app.doc.report.step_time.diagnosis.worst_rank == 1   # named first
            await pilot.press("tab", "tab")
            assert app.selection.rank == 3
            ranks = app.query_one(RanksList)
            drawn = [t.plain for t in ranks.lines(ranks.model, ranks.size.width, ranks.size.height)]
            assert any(line.startswith("▶r3   n1/l1") and "agent lost" in line for line in drawn), drawn

    asyncio.run(go())


def test_two_nodes_one_lost_screen(snap_compare, monkeypatch):
    """The screen of a two-node session whose second agent went silent (recording's clock, UTC).
    Regenerate after an intended change with --snapshot-update, as test_tui_snapshots.py says."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        assert snap_compare(make_app(two_nodes(lost=True), mode="REPLAY"), terminal_size=(160, 45),
                            run_before=settled)
    finally:
        monkeypatch.undo()
        time.tzset()


# --- 1,024 ranks ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def big() -> Summary:
    """The two-rank document made 1,024 ranks on 16 nodes: step times 100.0 .. 202.3 ms, so
    rank r is the (r+1)-th fastest, and rank 7 is the one the diagnosis names."""
    doc = two_nodes().document()
    rep = doc.report
    st = rep.step_time
    r0 = st.ranks[0]
    ranks = {}
    for r in range(1024):
        step = 100.0 + r / 10
        ranks[r] = replace(r0, rank=r, step_ms=step,
                           phases_ms={p: step * (i + 1) / 21 for i, p in enumerate(PHASES)})
    status = {r: RankStatus(r, 1000 + r % 64, (1000 + r % 64,), "alive", None, 0, None, r // 64, r % 64)
              for r in range(1024)}
    nodes = tuple(NodeRow(n, f"node{n:02d}", None, "joined", tuple(range(64 * n, 64 * n + 64)), 0.1 * n, None)
                  for n in range(16))
    diagnosis = replace(st.diagnosis, worst_rank=7)
    st = replace(st, ranks=ranks, findings=(diagnosis,), worst=PhaseRow(202.3, {}, 1023),
                 spread=step_spread(list(ranks.values())))
    return replace(doc, report=replace(rep, step_time=st, ranks=status, nodes=nodes))


def test_the_worst_ranks_are_listed_with_the_ones_a_finding_names(big):
    assert listed_ranks(big.report.step_time) == (*range(1023, 1015, -1), 7)
    rows = big.report.step_time.spread
    assert [rows[k].step_ms for k in ("min", "p50", "p90", "max")] == \
        pytest.approx([100.0, 151.1, 192.1, 202.3])
    assert rank_ranges([0, 1, 2, 3, 5, 7, 8]) == "0-3, 5, 7-8"


def test_a_1024_rank_text_summarises_the_step_table(big):
    text = render_text(big)
    table = text[text.index("  Rank "):text.index("  Skew ")].splitlines()
    # the slowest eight and the named rank, with their nodes; not 1,024 rows
    assert [line.split()[0] + " " + line.split()[1] for line in table[1:10]] == \
        [f"{r} (n{r // 64}/l{r % 64})" for r in (*range(1023, 1015, -1), 7)]
    assert table[10].startswith("  ... 1015 more ranks (listed: the 8 slowest")
    assert table[11] == "  Across 1024 ranks (each column on its own):"
    assert [line.split()[:2] for line in table[12:16]] == \
        [["min", "100.0"], ["p50", "151.1"], ["p90", "192.1"], ["max", "202.3"]]
    assert len(text.splitlines()) < 150
    # the node block sums the ranks up as ranges
    assert "  n15  node15  joined; ranks 960-1023; clock offset +1.5 ms" in text


@pytest.mark.parametrize(("height", "expected"), [
    # 200x60: the eight slowest, the named rank, then the selected one; a line for the rest;
    # the spread; skew
    (17, ["r1023", "r1022", "r1021", "r1020", "r1019", "r1018", "r1017", "r1016", "r7", "r500",
          "… 1014 more", "min", "p50", "p90", "max", "Worst rank"]),
    # a narrow terminal: the slowest and the selected rank, then the spread's max, p50, p90
    (6, ["r1023", "r500", "p50", "p90", "max"]),
])
def test_a_1024_rank_step_table_shows_the_worst_the_spread_and_the_selected(big, height, expected):
    vm = present(big, Selection(500)).steps
    assert vm.hidden == 1024 - 10   # eight slowest, the named rank, the selected rank
    lines = [t.plain for t in StepTable().lines(vm, 196, height)]
    assert len(lines) == height
    assert [line.lstrip("▶ ").split(" ")[0] for line in lines[1:]] == [e.split(" ")[0] for e in expected]
    assert lines[1].startswith(" r1023 (n15/l63)") and any(line.startswith("▶r500 (n7/l52)") for line in lines)
    if height > 6:
        assert lines[11].startswith("… 1014 more ranks; the slowest are listed")


def test_a_selected_rank_among_the_slowest_is_not_listed_twice(big):
    vm = present(big, Selection(1020)).steps
    labels = [r.label.split(" ")[0] for r in vm.rows if r.kind == "rank"]
    assert labels == [f"r{r}" for r in (*range(1023, 1015, -1), 7)] and vm.hidden == 1024 - 9
    assert [r.label for r in vm.rows if r.selected] == ["r1020 (n15/l60)"]


def test_the_live_line_names_nodes_and_sums_up_many_ranks(big):
    feed = two_nodes(lost=True)
    an = analyze_live(feed.rec, feed.rules)
    line = live_line(feed.rec, an, 8.0)
    assert " | 2 nodes (1 joined, 1 lost) | " in line and " | r3 (n1/l1): 62 steps, " in line
    # with 1,024 ranks: the step's spread and the three slowest, not 1,024 parts
    many = replace(an, report=big.report, ranks=an.ranks * 256)
    line = live_line(feed.rec, many, 8.0)
    assert line.endswith("| 16 nodes (16 joined) | 1024 ranks: step p50 151.1 / p90 192.1 / max 202.3 ms; "
                         "slowest r1023 (n15/l63) 202.3, r1022 (n15/l62) 202.2, r1021 (n15/l61) 202.1"), line


def test_list_panels_get_the_rows_around_the_selection_and_count_the_rest(big):
    # GIVEN 1,024 ranks, rank 500 selected
    vm = present(big, Selection(500))
    # THEN the ranks list is given the 100 ranks either side of it, and counts the others
    assert [r.rank for r in vm.ranks.rows] == [str(r) for r in range(400, 601)] and vm.ranks.hidden == 823
    drawn = [t.plain for t in RanksList().lines(vm.ranks, 60, 10)]
    assert any(line.startswith("▶r500 n7/l52") for line in drawn), drawn
    assert drawn[-1] == f"… {1024 - 9} more (↑/↓ to move)"
    # at either end the window stops there
    first = present(big, Selection(3)).ranks
    assert first.rows[0].rank == "0" and len(first.rows) == 201 and first.hidden == 823
