"""`--prometheus`: the metric families of a tick, rendered as a scrape and read back with
prometheus-client's own parser (the live scrape of a real attach is in test_e2e_prometheus.py)."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from launch import read_truth
from testkit.streams import read_frames
from traceml_attach.diagnose.analysis import Analysis, analyze
from traceml_attach.diagnose.finding import StragglerEvidence
from traceml_attach.diagnose.step import straggler_scores
from traceml_attach.ingest.stream import Recording, read_recording
from traceml_attach.output.prometheus import families
from traceml_attach.runtime.pipeline import Pipeline
from traceml_attach.steps.classify import load_rules
from traceml_attach.steps.steptime import RankStepStats

FIXTURE = Path(__file__).parent / "fixtures" / "ddp_input_straggler.msgpack"
GIB = 1 << 30


def with_gpu(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recorded 2-rank stream with an NVML reading after each host sample: rank r's process
    uses (r + 1) GiB plus 1 MiB a reading, at 40 + r % SM."""
    pids = {f["rank"]: f["pid"] for f in frames if f.get("k") == "target"}
    out, readings = [], 0
    for frame in frames:
        out.append(frame)
        if frame.get("k") == "host":
            readings += 1
            procs = [[rank, pid, (rank + 1) * GIB + readings * (1 << 20), 40 + rank] for rank, pid in pids.items()]
            devices = [[rank, 90, 2 * GIB, 80 * GIB, 60, 300.0, 700.0, False] for rank in pids]
            out.append({"k": "gpu", "t": frame["t"], "devices": devices, "procs": procs})
    return out


def parsed_families(rec: Recording, analysis: Analysis) -> dict[str, Any]:
    """The families of one tick's ``analysis``, through the text format and its parser."""
    class Once:
        def collect(self):
            return families(rec, analysis, set())

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Once())   # type: ignore[arg-type]
    return {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}


def scrape(frames: list[dict[str, Any]]) -> tuple[dict[str, Any], Any, Pipeline]:
    """The families of the stream's live analysis, through the text format and its parser."""
    pipeline = Pipeline(load_rules())
    for frame in frames:
        pipeline.add(frame)
    analysis = pipeline.live_analysis()
    return parsed_families(pipeline.rec, analysis), analysis, pipeline


@pytest.fixture(scope="module")
def scraped():
    return scrape(with_gpu(read_frames(FIXTURE)))


def by_rank(family, **labels: str) -> dict[str, float]:
    return {s.labels["rank"]: s.value for s in family.samples
            if all(s.labels.get(k) == v for k, v in labels.items())}


def test_every_listed_family_is_there_with_its_type(scraped):
    parsed, _, _ = scraped
    gauges = ("traceml_step_seconds", "traceml_phase_seconds", "traceml_phase_share", "traceml_diagnosis",
              "traceml_straggler_score", "traceml_rank_up", "traceml_rss_bytes", "traceml_gpu_memory_bytes",
              "traceml_gpu_sm_util")
    assert {name: parsed[name].type for name in gauges} == dict.fromkeys(gauges, "gauge")
    assert parsed["traceml_samples"].type == parsed["traceml_sampling_errors"].type == "counter"


def test_step_and_phases_are_the_reports_in_seconds(scraped):
    parsed, analysis, _ = scraped
    ranks = analysis.report.step_time.ranks
    step = by_rank(parsed["traceml_step_seconds"])
    assert step == {str(r): pytest.approx(row.step_ms / 1e3) for r, row in ranks.items()}
    # each says which statistic it is: the median, or the mean where the report gave the mean
    said = {s.labels["rank"]: s.labels["statistic"] for s in parsed["traceml_step_seconds"].samples}
    assert said == {str(r): "mean" if row.clock is not None and row.clock.mean else "median"
                    for r, row in ranks.items()}
    for rank, row in ranks.items():
        phases = {s.labels["phase"]: s.value for s in parsed["traceml_phase_seconds"].samples
                  if s.labels["rank"] == str(rank)}
        assert phases == {p: pytest.approx(ms / 1e3) for p, ms in row.phases_ms.items()}
        shares = [s.value for s in parsed["traceml_phase_share"].samples if s.labels["rank"] == str(rank)]
        assert sum(shares) == pytest.approx(1.0, abs=1e-3)


def test_the_current_diagnosis_is_the_one_set_to_1(scraped):
    parsed, analysis, _ = scraped
    current = [(s.labels["kind"], s.labels["severity"]) for s in parsed["traceml_diagnosis"].samples if s.value == 1]
    primary = analysis.report.step_time.diagnosis
    assert current == [(primary.kind, primary.severity)] and primary.kind == "INPUT_STRAGGLER"


def test_diagnoses_seen_before_stay_at_0():
    frames = read_frames(FIXTURE)
    pipeline = Pipeline(load_rules())
    for frame in frames:
        pipeline.add(frame)
    seen = {("WARMUP", "info")}
    metric = next(m for m in families(pipeline.rec, pipeline.live_analysis(), seen) if m.name == "traceml_diagnosis")
    values = {s.labels["kind"]: s.value for s in metric.samples}
    assert values == {"WARMUP": 0.0, "INPUT_STRAGGLER": 1.0}


def test_the_named_straggler_has_its_findings_score_and_the_highest(scraped):
    parsed, analysis, _ = scraped
    finding = analysis.report.step_time.diagnosis
    assert isinstance(finding.evidence, StragglerEvidence)
    scores = by_rank(parsed["traceml_straggler_score"])
    assert scores[str(finding.worst_rank)] == pytest.approx(finding.evidence.score)
    assert max(scores, key=scores.__getitem__) == str(finding.worst_rank)


def test_memory_and_gpu_are_each_ranks_newest_reading(scraped):
    parsed, analysis, pipeline = scraped
    rec = pipeline.rec
    for rank, pid in analysis.pids.items():
        newest = rec.procs[pid][-1]
        assert by_rank(parsed["traceml_rss_bytes"])[rank] == newest.rss_bytes + newest.workers_rss_bytes
        gpu = analysis.gpu.memory[rank]
        assert by_rank(parsed["traceml_gpu_memory_bytes"])[rank] == gpu[-1][1] > (int(rank) + 1) * GIB
        assert by_rank(parsed["traceml_gpu_sm_util"])[rank] == 40 + int(rank)
    assert by_rank(parsed["traceml_rank_up"]) == {"0": 1.0, "1": 1.0}
    sampling = analysis.report.sampling
    assert parsed["traceml_samples"].samples[0].value == sampling.samples > 0
    assert parsed["traceml_sampling_errors"].samples[0].value == sampling.errors


def test_without_a_gpu_no_gpu_number_is_made_up():
    parsed, _, _ = scrape(read_frames(FIXTURE))
    assert parsed["traceml_gpu_memory_bytes"].samples == parsed["traceml_gpu_sm_util"].samples == []


def stats(rank: str, sync: float | None, input_share: float, compute_share: float) -> RankStepStats:
    shares = {"input": input_share, "forward": compute_share, "wait": 1 - input_share - compute_share}
    return RankStepStats(rank=rank, pid=int(rank) + 100, steps=20, step_ms=100.0, clock=None,
                         phases_ms={p: v * 100 for p, v in shares.items()}, shares=shares,
                         component_median_shares=None, wait_labels={}, loop=None, thread=None,
                         sync_wait_share=sync, active_shares=shares if sync is not None else None)


@pytest.mark.parametrize("synchronized", [True, False])
def test_straggler_scores_are_the_rules_excess_for_every_rank(synchronized: bool):
    # five ranks of different burdens: each one's score against a brute-force median of the others
    burdens = [(0.10, 0.50, 0.30), (0.40, 0.45, 0.02), (0.12, 0.52, 0.25), (0.11, 0.49, 0.28), (0.15, 0.50, 0.30)]
    ranks = [stats(str(i), sync if synchronized else None, inp, comp)
             for i, (inp, comp, sync) in enumerate(burdens)]
    scores = straggler_scores(ranks)
    for r in ranks:
        others = [o for o in ranks if o is not r]
        if synchronized:
            expected = statistics.median(o.sync_wait_share for o in others) - r.sync_wait_share
        else:
            mine = r.shares["input"] + r.shares["forward"]
            expected = mine - (statistics.median(o.shares["input"] for o in others)
                               + statistics.median(o.shares["forward"] for o in others))
        assert scores[r.rank] == pytest.approx(expected)
    assert max(scores, key=scores.__getitem__) == "1"
    assert straggler_scores(ranks[:1]) == {}


def test_the_grafana_dashboard_asks_only_for_exported_metrics(scraped):
    parsed, _, _ = scraped
    dashboard = json.loads((Path(__file__).parents[1] / "docs" / "grafana-dashboard.json").read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    queries += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    asked = set(re.findall(r"traceml_[a-z_]+", " ".join(queries)))
    exported = {s.name for family in parsed.values() for s in family.samples}
    assert len(asked) >= 10 and asked <= exported, asked - exported


def raised_live() -> tuple[dict[str, Any], int, int, Path]:
    """A suite run's recording of the 2-rank input straggler (test_e2e_prometheus.py) on a loaded
    machine, scraped at the tick 12 s in: rank 1's rate was raised inside that live window, and the
    job sped from ~290 to ~230 ms a step after it. The parsed scrape, the window's edges, and where
    the job's own timing of rank r is (``.gt_{r}.jsonl``)."""
    fixtures = Path(__file__).parent / "fixtures"
    rec, _ = read_recording(fixtures / "prom_raised_live.msgpack")
    span = rec.time_range()
    assert span is not None
    start, end = span[0], span[0] + 12_000_000_000
    analysis = analyze(rec, load_rules(), start_ns=start, end_ns=end)
    return parsed_families(rec, analysis), start, end, fixtures / "prom_raised_live"


def test_a_rank_whose_rate_changed_in_the_window_says_where_its_step_metrics_start():
    parsed, start, end, truth = raised_live()
    # THEN each rank says where its step metrics start, inside the window, and its step time is the
    # job's own over that stretch, not over the window (20% longer: what the e2e test compared with)
    since = by_rank(parsed["traceml_step_since_timestamp_seconds"])
    step = by_rank(parsed["traceml_step_seconds"])
    assert set(since) == set(step) == {"0", "1"}, (since, step)
    for rank in ("0", "1"):
        assert start / 1e9 < since[rank] < end / 1e9
        own = read_truth(Path(f"{truth}.gt_{rank}.jsonl"), since[rank], end / 1e9)
        whole = read_truth(Path(f"{truth}.gt_{rank}.jsonl"), start / 1e9, end / 1e9)
        assert step[rank] * 1e3 < 0.85 * whole.step_ms, (rank, step, whole)
        assert abs(step[rank] * 1e3 / own.step_ms - 1) < 0.1, (rank, step, own)


@pytest.mark.xfail(strict=True, reason="a torn read splits one step of rank 1 (backward, one forward sample of "
                   "8.9 ms, backward): 169 + 122 ms for the job's 270, and the median of its 15 intervals, "
                   "224 ms, is 4-6% under the ranks' own 234 and 239 (docs/steps.md, stop 63)")
def test_that_stretch_is_timed_within_5_percent():
    parsed, _, end, truth = raised_live()
    since = by_rank(parsed["traceml_step_since_timestamp_seconds"])
    step = by_rank(parsed["traceml_step_seconds"])
    for rank in ("0", "1"):
        own = read_truth(Path(f"{truth}.gt_{rank}.jsonl"), since[rank], end / 1e9)
        assert step[rank] * 1e3 == pytest.approx(own.step_ms, rel=0.05), (rank, step, own)
