"""SVG snapshots of the TUI at two terminal sizes, fed by a recorded torchrun stream.

The clock shown is the recording's own (pinned to UTC here) and the PIDs are those recorded,
so the screens are deterministic. After an intended change to the look, regenerate with:
    pytest tests/test_tui_snapshots.py --snapshot-update
and review the SVGs in tests/__snapshots__/ (open them in a browser).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from textual.pilot import Pilot

from testkit.tui_support import recorded_app, until


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


async def loaded(pilot: Pilot) -> None:
    app = pilot.app
    await until(lambda: getattr(app, "view", None) is not None)
    await pilot.pause()


@pytest.mark.parametrize("size", [(80, 24), (160, 45)], ids=["80x24", "160x45"])
def test_straggler_screen(snap_compare, size):
    assert snap_compare(recorded_app("ddp_input_straggler"), terminal_size=size, run_before=loaded)


def test_small_terminal_other_rank_memory_panel(snap_compare):
    async def select(pilot: Pilot) -> None:
        await loaded(pilot)
        await pilot.press("tab", "f", "f", "f", "v")   # rank 0, backward; the memory panel
        await pilot.pause()

    assert snap_compare(recorded_app("ddp_input_straggler"), terminal_size=(80, 24), run_before=select)
