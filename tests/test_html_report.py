"""`traceml view RUN --html OUT`: the self-contained report, built from a recorded 2-rank torchrun
run and from a 64-rank stream, and rendered by headless Chromium (testkit/browser.py)."""

from __future__ import annotations

import html
import json
import re
import shutil
import struct
from dataclasses import replace
from pathlib import Path

import msgpack
import pytest

from testkit.browser import render_status, screenshot
from testkit.live_streams import repeated
from traceml_attach.cli.main import main
from traceml_attach.cli.view import load_summary
from traceml_attach.output.html import ROLLUP_S, html_report, report_data
from traceml_attach.runtime.pipeline import replay_file
from traceml_attach.steps.classify import load_rules

FIXTURE = Path(__file__).parent / "fixtures" / "ddp_input_straggler.msgpack"


@pytest.fixture(scope="module")
def run2(tmp_path_factory) -> Path:
    """A run folder: the recorded 2-rank torchrun stream, its summary and its report."""
    folder = tmp_path_factory.mktemp("ddp")
    shutil.copy(FIXTURE, folder / "frames.msgpack")
    assert main(["replay", str(folder), "--write"]) == 0
    assert main(["view", str(folder), "--html", str(folder / "report.html")]) == 0
    return folder


@pytest.fixture(scope="module")
def run64(tmp_path_factory) -> Path:
    """A 64-rank recording of 60 s (the 2-rank stream cloned), with no summary beside it."""
    folder = tmp_path_factory.mktemp("wide")
    with (folder / "frames.msgpack").open("wb") as out:
        for frame in repeated(FIXTURE, 60, ranks=64):
            out.write(msgpack.packb(frame, use_bin_type=True))
    assert main(["view", str(folder / "frames.msgpack"), "--html", str(folder / "report.html")]) == 0
    return folder


def page_data(page: str) -> dict:
    found = re.search(r'<script id="report-data" type="application/json">(.*?)</script>', page, re.S)
    assert found
    return json.loads(found.group(1))


def test_the_page_loads_nothing_from_the_network(run2: Path):
    page = (run2 / "report.html").read_text()
    markup = re.sub(r"(<script\b[^>]*>).*?(</script>)", r"\1\2", page, flags=re.S)   # the scripts' bodies aside
    assert markup.count("<script") == 3 and "src=" not in markup and "<link" not in markup
    assert not re.search(r"@import|url\(", markup)   # nor does the style sheet
    assert "echarts" in page and len(page) > 1_000_000   # the library is inside


def test_the_diagnosis_is_in_the_html_with_its_why_and_next(run2: Path):
    page = (run2 / "report.html").read_text()
    diagnosis = json.loads((run2 / "final_summary.json").read_text())["step_time"]["diagnosis"]
    assert diagnosis["status"] == "INPUT STRAGGLER"
    section = page[page.index('<section class="diagnosis'):]
    for text in (diagnosis["status"], diagnosis["summary"], diagnosis["why"], diagnosis["action"]):
        assert html.escape(text, quote=True) in section


def test_the_data_is_the_summarys_and_the_replayed_rollups(run2: Path):
    summary = load_summary(run2)
    pipeline, problem = replay_file(run2 / "frames.msgpack", load_rules(), ROLLUP_S)
    assert problem is None
    data = report_data(summary, pipeline.history)
    assert data["focus"] == "1" and data["phase_unit"] == "ms"
    for rank, row in summary.report.step_time.ranks.items():
        assert data["phases"][str(rank)] == row.phases_ms
        steps = [p[2] for p in data["series"][str(rank)]["step_ms"]]
        assert len(steps) >= 3   # a point per 2 s of the 8-s recording, the partial first and last ones aside
        assert all(v == pytest.approx(row.step_ms, rel=0.15) for v in steps if v is not None), (steps, row.step_ms)
        assert all(p[2] > 100e6 for p in data["series"][str(rank)]["rss_bytes"])
    assert page_data((run2 / "report.html").read_text()) == json.loads(json.dumps(data))


def test_text_from_the_job_cannot_break_out_of_the_page(run2: Path):
    summary = load_summary(run2)
    hostile = replace(summary, run_name="</script><script>alert(1)</script>%%DATA%%")
    page = html_report(hostile, None)
    assert page.count("</script>") == 3   # the name's own "</script>" closes none of the page's scripts
    assert page_data(page)["run"] == hostile.run_name
    assert f"<title>traceml-attach: {html.escape(hostile.run_name)}</title>" in page


def test_without_frames_the_report_says_what_is_missing(run2: Path, tmp_path: Path, capsys):
    shutil.copy(run2 / "final_summary.json", tmp_path / "final_summary.json")
    assert main(["view", str(tmp_path / "final_summary.json"), "--html", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "frames.msgpack is not beside the summary" in page and page_data(page)["series"] == {}
    assert "wrote" in capsys.readouterr().err


@pytest.mark.parametrize("content", [None, b"{not json", b"\x92\x01"])
def test_a_missing_or_corrupt_run_is_one_line_and_exit_7(tmp_path: Path, capsys, content: bytes | None):
    if content is not None:
        (tmp_path / "final_summary.json").write_bytes(content)
    assert main(["view", str(tmp_path), "--html", str(tmp_path / "r.html")]) == 7
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("traceml: ") and not (tmp_path / "r.html").exists()


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_chromium_draws_every_part_of_a_2_rank_run(run2: Path, tmp_path: Path):
    status = render_status(run2 / "report.html")
    assert status["done"] and status["errors"] == []
    charts = status["charts"]
    assert all(charts[name]["drawn"] and charts[name]["ink"] > 500 for name in ("steps", "phases", "memory")), charts
    assert charts["steps"]["series"] == charts["memory"]["series"] == 2    # a line per rank
    assert charts["phases"] == charts["phases"] | {"series": 6, "rows": 2}  # a stacked bar per rank, a part per phase
    assert status["hot_tables"] >= 3
    shot = screenshot(run2 / "report.html", tmp_path / "shot.png")
    assert png_size(shot) == (1400, 2400) and len(shot) > 60_000   # a blank page of that size is a few KB


@pytest.mark.slow   # its recording's analysis, 64 ranks over 60 s, takes 7 s of CPU
def test_at_64_ranks_the_series_are_heatmaps_with_a_row_per_rank(run64: Path):
    status = render_status(run64 / "report.html")
    assert status["done"] and status["errors"] == []
    for name in ("steps", "memory"):
        assert status["charts"][name] | {"ink": 0} == {"drawn": True, "series": 1, "rows": 64, "ink": 0}
        assert status["charts"][name]["ink"] > 2000
    assert status["charts"]["phases"]["rows"] == 64 and status["charts"]["phases"]["ink"] > 20_000


def test_without_frames_chromium_draws_the_summarys_parts_only(run2: Path, tmp_path: Path):
    shutil.copy(run2 / "final_summary.json", tmp_path / "final_summary.json")
    assert main(["view", str(tmp_path), "--html", str(tmp_path / "r.html")]) == 0
    status = render_status(tmp_path / "r.html")
    assert status["errors"] == [] and status["done"]
    assert not status["charts"]["steps"]["drawn"] and not status["charts"]["memory"]["drawn"]
    assert status["charts"]["phases"]["drawn"] and status["hot_tables"] >= 3


def test_an_unreadable_recording_beside_the_summary_is_said_in_the_page(run2: Path, tmp_path: Path, capsys):
    shutil.copy(run2 / "final_summary.json", tmp_path / "final_summary.json")
    (tmp_path / "frames.msgpack").write_bytes(b"\xc1" * 64)   # not a recording
    code = main(["view", str(tmp_path), "--html", str(tmp_path / "r.html")])
    page = (tmp_path / "r.html").read_text()
    assert "frames.msgpack could not be read" in page and page_data(page)["series"] == {}
    assert code == 7 and "wrote" in capsys.readouterr().err   # written, and the damage said in the exit code
