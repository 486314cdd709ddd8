"""Recorded real frame streams replayed into whole summaries, compared with golden files.

Regenerate after an intended change with: UPDATE_GOLDEN=1 pytest tests/test_golden.py
(re-record the streams themselves with tests/record_fixtures.py).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest

from traceml_attach.diagnose.analysis import analyze
from traceml_attach.ingest.stream import read_recording
from traceml_attach.output.render import render_text
from traceml_attach.output.summary import Summary, build_summary, from_json, to_json
from traceml_attach.runtime.pipeline import replay_file
from traceml_attach.steps.classify import load_rules

FIXTURES = Path(__file__).parent / "fixtures"
EXPECTED = {"input_bound": "INPUT_BOUND", "compute_bound": "COMPUTE_BOUND",
            "wait_heavy": "WAIT_HEAVY", "balanced": "BALANCED",
            # real framework jobs (tests/record_fixtures.py FRAMEWORKS)
            "fw_hf_trainer": "COMPUTE_BOUND", "fw_hf_trainer_accum4": "COMPUTE_BOUND",
            "fw_lightning_input": "INPUT_BOUND", "fw_accelerate": "INPUT_BOUND", "fw_deepspeed": "COMPUTE_BOUND",
            "fw_grad_accum4": "COMPUTE_BOUND", "fw_closure": "COMPUTE_BOUND", "fw_compile": "COMPUTE_BOUND",
            # on an H100 (tests/test_gpu.py's runs; tests/test_gpu_recorded.py holds them to the jobs' truth)
            "cuda_input_bound": "INPUT_BOUND", "cuda_wait_heavy": "WAIT_HEAVY", "cuda_compute_bound": "COMPUTE_BOUND",
            "cuda_mem_eval_loss": "INPUT_BOUND", "cuda_mem_flat": "INPUT_BOUND",
            # ...and on 2026-11-27: GPUs that set the pace (tests/test_gpu_recorded.py)
            "cuda_compute_bound_2": "COMPUTE_BOUND", "cuda_accum4": "COMPUTE_BOUND",
            "cuda_accum4_autocast": "COMPUTE_BOUND", "cuda_compile": "COMPUTE_BOUND",
            # ...and on an H200, 2026-12-04 (tests/test_gpu_recorded.py)
            "h200_accum4": "COMPUTE_BOUND", "h200_accum4_autocast": "COMPUTE_BOUND"}
# what each framework fixture's loop is: (loop function, framework named, micro-batches per step)
LOOPS = {
    "fw_hf_trainer": ("Trainer._run_epoch", "HF Trainer (transformers 5.x)", 1),
    # 4 micro-batches of ~22 ms a step: too short to count at 100 Hz; _run_epoch wraps once an
    # optimizer step, but also now and then between micro-batches: the micro-batches a step unknown
    # (it said 1, beside a reason that says the returns may be micro-batches)
    "fw_hf_trainer_accum4": ("Trainer._run_epoch", "HF Trainer (transformers 5.x)", None),
    "fw_lightning_input": ("_TrainingEpochLoop.advance", "Lightning", 1),
    "fw_accelerate": ("main", "Accelerate", 1),
    "fw_deepspeed": ("main", "DeepSpeed", 1),
    "fw_grad_accum4": ("main", None, 4),
    "fw_closure": ("main", None, 1),
    "fw_compile": ("main", None, 1),
}
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


def replay(name: str) -> Summary:
    pipeline, problem = replay_file(FIXTURES / f"{name}.msgpack", load_rules())
    assert problem is None
    return build_summary(pipeline.rec, pipeline.window_analysis(), name)


@functools.cache
def golden_summary(name: str) -> Summary:
    """``replay(name)``, once a process: the golden comparison, the framework checks and the
    schema's tests (tests/test_summary_schema.py) read the same summary (a frozen dataclass)."""
    return replay(name)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_replay_matches_golden(name: str):
    summary = golden_summary(name)
    doc = to_json(summary)
    text = render_text(summary)
    golden_json = FIXTURES / f"{name}.summary.json"
    golden_txt = FIXTURES / f"{name}.summary.txt"
    if UPDATE:
        golden_json.write_text(json.dumps(doc, indent=2) + "\n")
        golden_txt.write_text(text)
    assert summary.report.step_time.diagnosis.kind == EXPECTED[name]
    assert doc == json.loads(golden_json.read_text())
    assert text == golden_txt.read_text()
    # the saved file reads back into the same report, and renders the same text (traceml view)
    saved = from_json(json.loads(golden_json.read_text()))
    assert saved == summary
    assert render_text(saved) == text


@pytest.mark.parametrize("name", list(LOOPS))
def test_a_framework_stream_finds_its_loop_names_its_framework_and_counts_optimizer_steps(name: str):
    rank = golden_summary(name).report.step_time.ranks[0]
    loop, framework, micro = LOOPS[name]
    assert rank.loop is not None and rank.loop.startswith(f"{loop} (")
    assert (rank.framework, rank.micro_batches) == (framework, micro)
    if name == "fw_hf_trainer_accum4":   # optimizer steps of ~90 ms, or unknown; never micro-batches
        assert rank.step_ms is None or rank.step_ms > 60
    else:
        assert rank.step_ms is not None and rank.steps >= 20 // (micro or 1)


def test_replay_is_deterministic():
    assert replay("wait_heavy") == replay("wait_heavy")


def test_window_restriction_changes_only_the_window():
    rec, _ = read_recording(FIXTURES / "compute_bound.msgpack")
    first, last = rec.time_range() or (0, 0)
    half = analyze(rec, load_rules(), start_ns=(first + last) // 2)
    whole = analyze(rec, load_rules())
    assert 0 < half.ranks[0].steps < whole.ranks[0].steps
    assert half.findings[0].kind == whole.findings[0].kind == "COMPUTE_BOUND"
