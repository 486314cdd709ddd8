"""The typed report: every finding carries typed evidence, and sampling problems are shown
beside the numbers they weaken (the rank's row), a failed thread as a failed state."""

from __future__ import annotations

import pytest

from testkit.tui_support import recorded_feed
from tests.report_cases import feed_with_errors, hung_feed
from tests.test_golden import EXPECTED, replay
from traceml_attach.diagnose.analysis import analyze
from traceml_attach.diagnose.finding import EVIDENCE_TYPES, Finding, HangEvidence, StragglerEvidence
from traceml_attach.diagnose.report import Report
from traceml_attach.output.render import render_text
from traceml_attach.steps.classify import load_rules
from traceml_attach.tui.present import present
from traceml_attach.tui.viewmodel import Selection, StepTableVM
from traceml_attach.tui.widgets.steptable import StepTable

PYSPY = (1, "pyspy_failed", "py-spy failed on process {pid}: no error message")
CRASH = (None, "analysis_failed", "ZeroDivisionError: division by zero (analysis.py:12)")


def findings(report: Report) -> list[Finding]:
    return [*report.step_time.findings, report.step_memory.diagnosis, report.system.diagnosis,
            report.process.diagnosis, report.sampling.diagnosis]


@pytest.mark.parametrize("name", [*EXPECTED, "ddp", "hang"])
def test_every_finding_has_typed_evidence_and_an_integer_rank(name):
    if name == "ddp":
        report = recorded_feed("ddp_input_straggler").document().report
    elif name == "hang":
        report = hung_feed().document().report
    else:
        report = replay(name).report
    for f in findings(report):
        assert f.evidence is None or isinstance(f.evidence, EVIDENCE_TYPES), (f.kind, f.evidence)
        assert f.worst_rank is None or isinstance(f.worst_rank, int), (f.kind, f.worst_rank)
    # the step-time finding is judged on numbers, so it always has them
    assert report.step_time.diagnosis.evidence is not None


def test_a_straggler_carries_every_ranks_score():
    st = recorded_feed("ddp_input_straggler").document().report.step_time
    (straggler,) = st.stragglers
    ev = straggler.evidence
    assert isinstance(ev, StragglerEvidence)
    assert straggler.worst_rank == 1 and set(ev.ranks) == {0, 1}
    # synchronized ranks: rank 0 waits for rank 1 in backward's all-reduce, so it is blocked longer
    assert ev.synchronized
    assert (ev.ranks[0].sync_wait_share or 0) - (ev.ranks[1].sync_wait_share or 0) == pytest.approx(ev.score)
    assert ev.input_excess_share > ev.compute_excess_share


def test_a_hang_carries_each_ranks_stack():
    doc = hung_feed().document()
    hang = doc.report.step_time.hang
    assert hang is not None and hang is doc.report.step_time.diagnosis
    ev = hang.evidence
    assert isinstance(ev, HangEvidence)
    assert ev.idle_s >= 10 and ev.odd_ranks == (1,) and hang.worst_rank == 1
    assert ev.ranks[1].phase == "input" and ev.ranks[1].stack[-1].startswith("burn_cpu")
    assert ev.ranks[0].phase == "backward" and ev.common_stack == ev.ranks[0].stack
    # the ranks list says where each one stands
    rows = {r.rank: r for r in present(doc, Selection()).ranks.rows}
    assert rows["1"].status == "stalled" and "in input at burn_cpu" in rows["1"].detail


def test_a_sampling_problem_is_shown_on_its_ranks_row():
    # GIVEN a py-spy window that failed on rank 1 of a two-rank job
    doc = feed_with_errors(PYSPY).document()
    st = doc.report.step_time
    # THEN the report attaches it to rank 1's row, by its pid, and not to rank 0's
    assert st.ranks[1].problem_count == 1 and st.ranks[1].problems[0].kind == "pyspy_failed"
    assert st.ranks[0].problem_count == 0
    sampling = doc.report.sampling
    assert (sampling.diagnosis.kind, sampling.diagnosis.severity, sampling.diagnosis.worst_rank) == \
        ("SAMPLING_PROBLEMS", "warning", 1)
    # the text gives it right under rank 1's row of the step table, with the coverage, and keeps
    # the list of every problem at the end
    lines = render_text(doc).splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("  1 "))
    assert lines[row + 1].startswith("    ! rank 1: coverage ")
    assert "pyspy_failed: py-spy failed on process" in lines[row + 1]
    assert lines.index("Problems while sampling:") > row
    # the TUI marks the row and says the same under the table; the rail names it
    vm = present(doc, Selection())
    assert [r.label for r in vm.steps.rows if r.alert] == ["r1"]
    assert vm.steps.alerts[0].startswith("rank 1: coverage ")
    assert ("Sampling", "SAMPLING PROBLEMS") in [(i.title, i.status) for i in vm.rail.items]


def test_a_thread_that_failed_is_a_failed_state():
    doc = feed_with_errors(PYSPY, CRASH).document()
    sampling = doc.report.sampling
    assert (sampling.diagnosis.kind, sampling.diagnosis.severity) == ("SAMPLING_FAILED", "critical")
    assert "the analysis thread failed" in sampling.diagnosis.summary
    assert [p.kind for p in sampling.failures] == ["analysis_failed"]
    # the text says so before any diagnosis it may have left stale
    text = render_text(doc)
    assert text.index("FAILED   [SAMPLING FAILED] critical") < text.index("Step Time")
    # the TUI's rail leads with it
    first = present(doc, Selection()).rail.items[0]
    assert (first.title, first.status, first.severity) == ("Sampling", "SAMPLING FAILED", "critical")


def test_the_step_table_marks_the_rank_and_keeps_a_line_for_its_problem():
    vm = present(feed_with_errors(PYSPY).document(), Selection()).steps
    assert isinstance(vm, StepTableVM)
    lines = [t.plain for t in StepTable().lines(vm, 120, 8)]
    assert any(line.startswith(" r1 !") or line.startswith("▶r1 !") for line in lines), lines
    assert lines[-1].startswith("! rank 1: coverage"), lines
    # with no room to spare, the rank rows come first
    assert not any(t.plain.startswith("! ") for t in StepTable().lines(vm, 120, 2))


def test_problems_before_the_window_stay_listed_but_leave_its_rows_alone():
    # GIVEN a py-spy failure and an analysis failure in the first 2 s of the recording
    feed = feed_with_errors(PYSPY, CRASH)
    first, _ = feed.rec.time_range() or (0, 0)
    # WHEN a window that starts after them is analysed
    report = analyze(feed.rec, load_rules(), start_ns=first + 3 * 10**9).report
    # THEN no row carries them, the failure is said to be over, and the list keeps both
    assert all(r.problem_count == 0 for r in report.step_time.ranks.values())
    d = report.sampling.diagnosis
    assert (d.kind, d.severity) == ("SAMPLING_FAILED", "warning") and "before this window" in d.summary
    assert [p.kind for p in report.sampling.problems] == ["pyspy_failed", "analysis_failed"]
