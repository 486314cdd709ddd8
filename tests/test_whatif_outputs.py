"""What-ifs, the slowest rank and change points as each presenter renders the one report: the
Prometheus families, the HTML report, the TUI's rail and header (none of them re-derives a number)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.prometheus_support import scrape_pipeline
from traceml_attach.output.html import html_report, report_data
from traceml_attach.output.summary import build_summary
from traceml_attach.runtime.pipeline import replay_file
from traceml_attach.steps.classify import load_rules
from traceml_attach.tui.present import present_header, present_rail, rank_ids

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def replayed(name: str, rollup_s: float = 10.0):
    pipeline, _ = replay_file(FIXTURES / f"{name}.msgpack", load_rules(), rollup_s=rollup_s)
    return pipeline, build_summary(pipeline.rec, pipeline.window_analysis(), name)


def test_prometheus_exports_the_projections_the_slowest_rank_and_the_change():
    pipeline, summary = replayed("input_slows")
    parsed = scrape_pipeline(pipeline)
    proj = {s.labels["fix"]: s.value for s in parsed["traceml_whatif_step_seconds"].samples}
    assert proj == {p.fix: p.step_ms / 1e3 for p in summary.report.step_time.whatif}
    (change,) = parsed["traceml_step_change_percent"].samples
    assert change.labels == {"direction": "rose"} and change.value > 20

    pipeline, summary = replayed("ddp4_slow_rank2")
    parsed = scrape_pipeline(pipeline)
    share = {(s.labels["rank"], s.labels["over"]): s.value for s in parsed["traceml_slowest_rank_share"].samples}
    assert share[("2", "window")] > 0.9 and share[("2", "session")] > 0.9 and share[("0", "window")] < 0.1


def test_html_report_says_what_each_fix_is_worth_and_marks_the_change():
    pipeline, summary = replayed("input_slows")
    page = html_report(summary, pipeline.history)
    assert "What each fix is worth" in page and "step time rose from" in page
    (change,) = report_data(summary, pipeline.history)["changes"]
    assert 10 <= change[0] <= 60 and change[1].startswith("step time rose")
    assert "markLine" in page

    _, summary = replayed("ddp4_random_slow")
    page = html_report(summary, None)
    assert re.search(r"the slowest rank rotates: 4 ranks each \d+–\d+% of \d+ steps of the window", page)
    json.dumps(report_data(summary, None))   # plain JSON


def test_tui_rail_and_header():
    _, summary = replayed("ddp4_slow_rank2")
    rail = present_rail(summary)
    titles = [item.title for item in rail.items]
    assert titles[:2] == ["Step time", "what-if"] and "slowest" in titles
    what_if = rail.items[1]
    assert what_if.summary.startswith("rank 2 at the median rank: ") and what_if.why.startswith("assumes ")
    assert present_header(summary, rank_ids(summary), "REPLAY").change == ""

    _, summary = replayed("input_slows")
    header = present_header(summary, rank_ids(summary), "REPLAY")
    assert re.fullmatch(r"step \d+→\d+ ms at \d\d:\d\d:\d\d \(\+\d+%\)", header.change)
