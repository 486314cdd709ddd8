"""`traceml compare`: what changed between two runs' summaries, and what is only noise. The
summaries are the recorded examples' (tests/fixtures) and copies of them with one thing moved."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from traceml_attach.cli.main import main
from traceml_attach.diagnose.compare import compare
from traceml_attach.output.compare import compare_json, render_compare
from traceml_attach.output.summary import Summary, build_summary, from_json, to_json
from traceml_attach.policy import COMPARE_DRIFT as DRIFT
from traceml_attach.runtime.pipeline import replay_file
from traceml_attach.steps.classify import load_rules

FIXTURES = Path(__file__).parent / "fixtures"


def summary(name: str) -> Summary:
    return from_json(json.loads((FIXTURES / f"{name}.summary.json").read_text()))


def scaled(s: Summary, factor: float, phase: str = "input") -> Summary:
    """``s`` with ``phase`` of every rank (and of the median row) made longer by ``factor`` of the
    step, the step with it."""
    st = s.report.step_time
    assert st.median is not None and st.median.step_ms is not None
    extra = factor * st.median.step_ms
    median = replace(st.median, step_ms=st.median.step_ms + extra,
                     phases_ms={**st.median.phases_ms, phase: st.median.phases_ms[phase] + extra})
    ranks = {r: replace(row, step_ms=(row.step_ms or 0.0) + extra) for r, row in st.ranks.items()}
    return replace(s, run_name=f"{s.run_name}+{factor:g}",
                   report=replace(s.report, step_time=replace(st, median=median, ranks=ranks)))


def write(tmp_path: Path, s: Summary, name: str, doc: dict | None = None) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "final_summary.json").write_text(json.dumps(doc if doc is not None else to_json(s)))
    return folder


@pytest.mark.parametrize("name", ["input_bound", "compute_bound", "balanced", "fw_lightning_input"])
def test_a_run_against_itself_is_no_change(name):
    s = summary(name)
    c = compare(s, s)
    assert c.step.verdict == "no change" and not c.diagnosis_changed
    assert {p.phase: p.ms.verdict for p in c.phases if p.ms.old is not None} == \
        dict.fromkeys([p.phase for p in c.phases if p.ms.old is not None], "no change")
    assert not c.regressed_beyond(0.0)
    # the noise comes from the window's own per-step spread
    assert c.noise[0] is not None and c.noise[0].sd_ms > 0 and c.noise[0].steps >= 10
    assert c.band_ms is not None and c.band_ms >= DRIFT * (c.step.old or 0.0)


def test_a_slower_input_is_a_regression_and_names_the_phase():
    old = summary("input_bound")
    new = scaled(old, 0.5)
    c = compare(old, new)
    assert c.step.verdict == "slower" and c.step.pct == pytest.approx(50.0, abs=0.1)
    phases = {p.phase: p.ms.verdict for p in c.phases}
    assert phases["input"] == "slower" and phases["forward"] == "no change"
    assert c.hot is not None and c.hot.phase == "input"
    assert c.regressed_beyond(5.0) and not c.regressed_beyond(60.0)
    # and the other way round, it is faster, and no regression
    back = compare(new, old)
    assert back.step.verdict == "faster" and not back.regressed_beyond(0.0)
    text = render_compare(c)
    assert text.index("\nDiagnosis") < text.index("\nStep") < text.index("\ninput ")
    assert "+50.0%" in text and "slower" in text


def test_a_change_inside_the_noise_is_no_change():
    old = summary("input_bound")
    c = compare(old, scaled(old, 0.5 * DRIFT))
    assert c.step.verdict == "no change" and not c.regressed_beyond(0.0)


def test_a_job_that_changed_its_bottleneck_says_so():
    old, new = summary("input_bound"), summary("compute_bound")
    c = compare(old, new)
    assert c.diagnosis_changed and c.diagnosis == ("INPUT-BOUND", "COMPUTE-BOUND")
    doc = compare_json(c)
    assert doc["diagnosis"] == {"old": "INPUT-BOUND", "new": "COMPUTE-BOUND", "changed": True}
    assert set(doc["phases"]) == {"input", "h2d", "forward", "backward", "optimizer", "wait"}
    assert doc["step"]["noise"][0]["steps"] >= 10


def test_the_cli_gates_on_a_regression_beyond_the_noise(tmp_path, capsys):
    old = summary("input_bound")
    a, b = write(tmp_path, old, "a"), write(tmp_path, scaled(old, 0.2), "b")
    assert main(["compare", str(a), str(b)]) == 0
    assert main(["compare", str(a), str(b), "--fail-on-regression", "5"]) == 9
    assert "more than 5% beyond the noise" in capsys.readouterr().err
    assert main(["compare", str(a), str(b), "--fail-on-regression", "50"]) == 0
    assert main(["compare", str(b), str(a), "--fail-on-regression", "0"]) == 0   # faster: no gate
    capsys.readouterr()
    assert main(["compare", str(a / "final_summary.json"), str(b), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["step"]["verdict"] == "slower" and doc["schema_version"] == 1


def test_other_rank_counts_rates_and_schema_versions_are_compared_with_a_warning(tmp_path, capsys):
    # GIVEN a 1-rank run, and a 2-rank torchrun recording replayed, sampled at another rate and
    # written by a later schema
    one = summary("input_bound")
    pipeline, problem = replay_file(FIXTURES / "ddp_input_straggler.msgpack", load_rules())
    assert problem is None
    two = build_summary(pipeline.rec, pipeline.window_analysis(), "ddp")
    two = replace(two, report=replace(two.report, sampling=replace(two.report.sampling, rate_hz=50)))
    doc = to_json(two)
    doc["schema_version"] = 3
    a, b = write(tmp_path, one, "a"), write(tmp_path, two, "b", doc)
    # THEN they are still compared, with a warning line for each difference
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr()
    assert "Diagnosis   INPUT-BOUND -> INPUT STRAGGLER" in out.out
    warnings = [line for line in out.err.splitlines() if line.startswith("traceml: warning:")]
    assert len(warnings) == 3
    assert "schema version 3" in out.err and "1 and 2 ranks" in out.err and "100 and 50 Hz" in out.err


@pytest.mark.parametrize("content", [None, "{not json", '{"schema_version": 2, "run_name": 5}', "[]"])
def test_a_missing_or_corrupt_summary_is_one_line_and_exit_7(tmp_path, capsys, content):
    good = write(tmp_path, summary("balanced"), "good")
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    assert main(["compare", str(good), str(bad)]) == 7
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err


def test_a_summary_without_per_step_spread_is_judged_on_the_least_drift_and_still_gates():
    # an older summary: no step_ms_sd on any rank
    old = summary("input_bound")
    st = old.report.step_time
    bare = replace(old, report=replace(old.report, step_time=replace(
        st, ranks={r: replace(row, step_ms_sd=None) for r, row in st.ranks.items()})))
    same, slower = compare(bare, bare), compare(bare, scaled(bare, 0.2))
    assert same.noise[0] is None and same.band_ms == pytest.approx(DRIFT * (same.step.old or 0.0))
    assert same.step.verdict == "no change" and not same.regressed_beyond(0.0)
    assert slower.step.verdict == "slower" and slower.regressed_beyond(5.0)
    assert "no per-step spread" in render_compare(slower)
