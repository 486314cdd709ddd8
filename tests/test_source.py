"""Source lines for sampled frames: read once per line, from bounded caches."""

from __future__ import annotations

import os
from pathlib import Path

from traceml_agent import source


def test_describe_reads_the_line_and_the_with_items_around_it(tmp_path: Path):
    path = tmp_path / "train.py"
    path.write_text("import torch\n"
                    "def evaluate(model, x):\n"
                    "    with torch.no_grad():\n"
                    "        return model(x)\n")
    pid = os.getpid()
    assert source.describe(pid, str(path), 4) == ("return model(x)", "torch.no_grad()")
    assert source.describe(pid, str(path), 1) == ("import torch", None)
    assert source.describe(pid, str(path), 99) == (None, None)       # past the end: no line, no error
    assert source.describe(pid, "<string>", 1) == (None, None)


def test_the_caches_are_bounded(tmp_path: Path):
    pid = os.getpid()
    for i in range(source.SOURCE_FILES_KEPT + 20):
        path = tmp_path / f"m{i}.py"
        path.write_text(f"x = {i}\n")
        assert source.describe(pid, str(path), 1) == (f"x = {i}", None)
    assert source._lines.cache_info().currsize <= source.SOURCE_FILES_KEPT
    assert source.describe.cache_info().maxsize == source.LINES_DESCRIBED
