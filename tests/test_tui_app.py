"""The app's keys, driven through Textual's Pilot with a recorded frame stream as the feed."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

from textual.containers import VerticalScroll

from testkit.tui_support import loaded, recorded_app, until
from traceml_attach.output.summary import Summary
from traceml_attach.tui.feed import Finished, Update
from traceml_attach.tui.viewmodel import Selection
from traceml_attach.tui.widgets import HotFramesPanel, MemoryPanel, StepTable
from traceml_attach.tui.widgets.help import HelpScreen

WIDE, SMALL = (160, 45), (80, 24)


def run(coro) -> None:  # type: ignore[no-untyped-def]
    asyncio.run(coro)


def test_rank_keys_move_the_selection_everywhere():
    async def go() -> None:
        app = recorded_app()
        async with loaded(app, WIDE) as pilot:
            assert app.view.selection.rank == 1
            await pilot.press("tab")
            assert app.selection.rank == 0
            steps = app.query_one(StepTable).model
            assert [r.label for r in steps.rows if r.selected] == ["r0"]
            assert app.query_one(HotFramesPanel).model.rank == "0"
            assert [r.rank for r in app.query_one(MemoryPanel).model.rows if r.selected] == ["0"]
            await pilot.press("down")
            assert app.selection.rank == 1
            await pilot.press("up")
            assert app.selection.rank == 0
            await pilot.press("shift+tab")
            assert app.selection.rank == 1
    run(go())


def test_the_selection_follows_the_diagnosis_until_the_user_picks_a_rank():
    async def go() -> None:
        app = recorded_app()
        async with loaded(app, WIDE) as pilot:
            assert app.view.selection.rank == 1
            assert app.doc is not None
            names_rank_1 = app.doc
            names_rank_0 = naming(names_rank_1, 0)
            app.post_message(Update(names_rank_0))
            await pilot.pause()
            assert app.view.selection.rank == 0        # a new diagnosis moves an unpicked selection
            await pilot.press("f")                        # picking a phase does not pin the rank
            app.post_message(Update(names_rank_1))
            await pilot.pause()
            assert app.view.selection == Selection(1, "h2d")
            await pilot.press("tab")                      # the user's pick stays
            app.post_message(Update(names_rank_0))
            await pilot.pause()
            assert app.view.selection.rank == 0
            app.post_message(Update(names_rank_1))
            await pilot.pause()
            assert app.view.selection.rank == 0
    run(go())


def naming(doc: Summary, rank: int) -> Summary:
    """``doc`` with its step-time diagnosis naming ``rank``."""
    st = doc.report.step_time
    findings = (replace(st.diagnosis, worst_rank=rank), *st.findings[1:])
    return replace(doc, report=replace(doc.report, step_time=replace(st, findings=findings)))


def test_phase_keys_pick_the_hot_frames_phase():
    async def go() -> None:
        app = recorded_app()
        async with loaded(app, WIDE) as pilot:
            assert app.query_one(HotFramesPanel).model.phase == "input"
            await pilot.press("f", "right")
            assert app.query_one(HotFramesPanel).model.phase == "forward"
            assert app.query_one(StepTable).model.phase == "forward"
            await pilot.press("left", "left", "left")
            assert app.query_one(HotFramesPanel).model.phase == "wait"
    run(go())


def test_pause_freezes_the_display_and_resumes_on_the_newest():
    async def go() -> None:
        app = recorded_app(mode="LIVE")
        async with loaded(app, WIDE) as pilot:
            shown = app.doc
            await pilot.press("p")
            assert app.view is not None and app.view.header.mode == "PAUSED"
            assert shown is not None
            app.post_message(Update(replace(shown, run_name="newer")))
            await pilot.pause()
            assert app.doc is shown and app.newest is not None and app.newest.run_name == "newer"
            await pilot.press("p")
            assert app.doc is not None and app.doc.run_name == "newer"
            assert app.view.header.mode == "LIVE"
    run(go())


def test_s_writes_the_summary_and_keeps_watching(tmp_path: Path):
    async def go() -> None:
        app = recorded_app(out_dir=tmp_path)
        async with loaded(app, WIDE) as pilot:
            await pilot.press("s")
            await until(lambda: (tmp_path / "final_summary.txt").exists())   # written off the UI thread
            assert (tmp_path / "final_summary.json").exists()
            assert app.is_running
    run(go())
    summary = json.loads((tmp_path / "final_summary.json").read_text())
    assert summary["step_time"]["diagnosis"]["kind"] == "INPUT_STRAGGLER"


def test_q_and_ctrl_c_detach_and_write_the_summary(tmp_path: Path):
    for key in ("q", "ctrl+c"):
        out = tmp_path / key
        async def go(out: Path = out, key: str = key) -> None:
            app = recorded_app(out_dir=out)
            async with loaded(app, WIDE) as pilot:
                await pilot.press(key)
                await pilot.pause()
                assert not app.is_running
            app.feed.wait()   # as the CLI does once the app has exited
        run(go())
        assert (out / "final_summary.json").exists(), key


def test_help_opens_and_closes():
    async def go() -> None:
        app = recorded_app()
        async with app.run_test(size=SMALL) as pilot:
            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)
            before = app.selection
            scroller = app.screen.query_one(VerticalScroll)
            assert scroller.max_scroll_y > 0   # at 80x24 the help is longer than the screen
            await pilot.press("down", "down", "right")
            assert app.selection == before and scroller.scroll_y > 0   # the keys scroll the help
            await pilot.press("escape")
            assert not isinstance(app.screen, HelpScreen)
            assert app.is_running
    run(go())


def test_small_terminals_show_one_detail_panel_at_a_time():
    async def go() -> None:
        app = recorded_app()
        async with loaded(app, SMALL) as pilot:
            details = ["hot", "memory", "ranks", "process", "system"]
            shown = [d for d in details if app.query_one(f"#{d}").display]
            assert shown == ["hot"]
            await pilot.press("v")
            await pilot.pause()
            assert [d for d in details if app.query_one(f"#{d}").display] == ["memory"]
            await pilot.resize_terminal(*WIDE)
            await pilot.pause()
            assert all(app.query_one(f"#{d}").display for d in details)
    run(go())


def test_the_job_ending_closes_the_app():
    # the session is over: the process must not outlive it waiting for a q nobody may press
    async def go() -> None:
        app = recorded_app(mode="LIVE")
        async with loaded(app, WIDE) as pilot:
            app.post_message(Finished("target_exited", "the job exited; summary written to x"))
            await pilot.pause()
            assert not app.is_running
    run(go())
