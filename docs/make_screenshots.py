"""Regenerate the TUI screenshots in docs/.

    python docs/make_screenshots.py          # SVG from the recorded torchrun stream (tests/fixtures)
    python docs/make_screenshots.py --live   # also text captures of live attaches in tmux (needs torch),
                                             # written as docs/tui-*.txt to paste into docs/tui.md
    python docs/make_screenshots.py --html RUN [--png NAME]   # docs/html-report.png: RUN's `traceml view
                                             # --html` report in headless Chromium (apt-get install chromium)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

from testkit.tui_support import recorded_app, until  # noqa: E402


async def svg(name: str, size: tuple[int, int], out: Path) -> None:
    app = recorded_app(name, mode="LIVE")
    async with app.run_test(size=size) as pilot:
        await until(lambda: app.view is not None)
        await pilot.pause()
        app.save_screenshot(out.name, str(out.parent))


def live(captures: list[tuple[str, tuple[int, int], list[str]]]) -> None:
    from launch import start_example, start_torchrun, stop_example
    from testkit.tui_tmux import Terminal, attach_command, wait_file

    for name, size, keys in captures:
        job = start_torchrun(2, "--straggler", "input") if name == "ddp" else start_example(name)
        with tempfile.TemporaryDirectory() as tmp:
            term = Terminal(attach_command(job.pid, Path(tmp), name, Path(tmp) / "exit"), *size)
            try:
                term.wait_for("Step time", "median", timeout_s=60)
                time.sleep(10)
                for key in keys:
                    term.press(key)
                    time.sleep(0.3)
                target = DOCS / f"tui-{name}-{size[0]}x{size[1]}{'-' + '-'.join(keys) if keys else ''}.txt"
                target.write_text(term.screen())
                print(f"wrote {target.relative_to(ROOT)}")
                term.press("q")
                wait_file(Path(tmp) / "exit")
            finally:
                term.close()
                stop_example(job)


def html_screenshot(run: Path, name: str) -> None:
    from testkit.browser import screenshot
    from traceml_attach.cli.main import main as traceml

    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        if traceml(["view", str(run), "--html", str(page)]) != 0:
            sys.exit(f"traceml view {run} --html failed")
        out = DOCS / name
        screenshot(page, out, 1400, 2700)
    print(f"wrote {out.relative_to(ROOT)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--live", action="store_true")
    ap.add_argument("--html", type=Path, metavar="RUN", help="a run folder to screenshot the HTML report of")
    ap.add_argument("--png", default="html-report.png", help="the screenshot's name in docs/ (default html-report.png)")
    args = ap.parse_args()
    if args.html:
        html_screenshot(args.html, args.png)
        return
    os.environ["TZ"] = "UTC"
    time.tzset()
    out = DOCS / "tui-ddp-straggler.svg"
    asyncio.run(svg("ddp_input_straggler", (140, 40), out))
    print(f"wrote {out.relative_to(ROOT)}")
    if args.live:
        live([("ddp", (120, 36), []), ("input_bound", (80, 24), []), ("input_bound", (80, 24), ["v"])])


if __name__ == "__main__":
    main()
