"""Headless Chromium (Debian's `chromium` package) for the HTML report's tests and screenshots:
load a page from a file, let its scripts run, read the DOM or take a screenshot."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

# as root, with no network: no sandbox, and nothing that would try to reach Google's servers
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars")
BUDGET_MS = 10_000   # virtual time the page's scripts get before the DOM is read


def chromium() -> str:
    """The browser's path; the test is skipped without one, or fails where CI asks for it."""
    found = next((p for name in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(name))), None)
    if found is None:
        if os.environ.get("TRACEML_REQUIRE_BROWSER"):
            pytest.fail("TRACEML_REQUIRE_BROWSER is set but no chromium is installed (apt-get install chromium)")
        pytest.skip("needs Chromium: apt-get install chromium")
    return found


def _run(*args: str) -> str:
    with tempfile.TemporaryDirectory() as profile:
        out = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={BUDGET_MS}",
                              *args], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def render_status(page: Path) -> dict:
    """What the report's script says it drew (#render-status), from the DOM after it ran."""
    dom = _run("--dump-dom", page.resolve().as_uri())
    found = re.search(r'<pre id="render-status"[^>]*>(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    text = found.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    assert text != "pending", "the report's script did not run"
    return json.loads(text)


def screenshot(page: Path, png: Path, width: int = 1400, height: int = 2400) -> bytes:
    """A PNG of the page's first ``height`` pixels."""
    _run(f"--window-size={width},{height}", f"--screenshot={png}", page.resolve().as_uri())
    return png.read_bytes()
