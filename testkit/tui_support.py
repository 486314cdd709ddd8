"""Building the TUI from a recorded frame stream, as the tests and benchmarks do."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from traceml_attach.ingest.stream import read_recording
from traceml_attach.runtime.recordedfeed import RecordedFeed
from traceml_attach.steps.classify import load_rules
from traceml_attach.tui.app import TraceApp, make_app

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"


def recorded_feed(name: str, out_dir: Path | None = None) -> RecordedFeed:
    rec, problem = read_recording(FIXTURES / f"{name}.msgpack")
    assert problem is None
    return RecordedFeed(rec, load_rules(), name, out_dir)


def recorded_app(name: str = "ddp_input_straggler", out_dir: Path | None = None, mode: str = "REPLAY") -> TraceApp:
    return make_app(recorded_feed(name, out_dir), mode=mode)


@asynccontextmanager
async def loaded(app: TraceApp, size: tuple[int, int]) -> AsyncIterator[Pilot]:
    """Run the app headless at ``size`` until its first document is on screen."""
    async with app.run_test(size=size) as pilot:
        await until(lambda: app.view is not None)
        yield pilot


async def until(condition: Callable[[], Any], timeout_s: float = 10.0) -> None:
    """Let the app run until ``condition()`` holds (the feed posts from its own thread)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the app")
        await asyncio.sleep(0.02)
