"""One pure entry point from a Recording (and a time window) to everything we report."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from traceml_attach.diagnose.gpu import RankGpu, rank_gpu
from traceml_attach.diagnose.hang import detect_hang
from traceml_attach.diagnose.step import Finding, diagnose_step_time, refine_with_gpu
from traceml_attach.ingest.stream import Recording
from traceml_attach.policy import DEFAULT_STEP_TIME_POLICY, StepTimePolicy
from traceml_attach.steps.classify import Rule
from traceml_attach.steps.hotframes import HotFrame, hot_frames
from traceml_attach.steps.steptime import RankStepStats, rank_stats
from traceml_attach.steps.sync import share_period
from traceml_attach.steps.timeline import Timeline, build_timeline


@dataclass(frozen=True)
class Analysis:
    start_ns: int | None
    end_ns: int | None
    timelines: dict[str, Timeline]
    ranks: list[RankStepStats]
    findings: list[Finding]
    hot: dict[str, dict[str, list[HotFrame]]]
    pids: dict[str, int]   # each rank's process in the window (rank_pids)
    gpu: RankGpu           # the ranks' GPU readings in the window


def rank_of(rec: Recording, pid: int, index: int) -> str:
    meta = rec.targets.get(pid)
    return str(meta.rank) if meta is not None and meta.rank is not None else str(index)


def rank_key(rank: str) -> tuple[bool, int, str]:
    """Ranks in numeric order; non-numeric labels after them."""
    return (False, int(rank), "") if rank.isdigit() else (True, 0, rank)


def rank_pids(rec: Recording, start_ns: int, end_ns: int) -> dict[str, int]:
    """Each rank's process for the window: after an elastic restart, the one sampled last
    that has samples in the window."""
    chosen: dict[str, int] = {}
    pids = list(rec.targets) or list(rec.spans)
    for index, pid in enumerate(pids):
        rank = rank_of(rec, pid, index)
        spans = rec.spans.get(pid, [])
        inside = bool(spans) and spans[0].ts_ns < end_ns and spans[-1].end_ns > start_ns
        if rank not in chosen or inside:
            chosen[rank] = pid
    return dict(sorted(chosen.items(), key=lambda kv: rank_key(kv[0])))


def synchronized(rec: Recording, pids: dict[str, int]) -> bool:
    """Ranks of one distributed job (torchrun's RANK/WORLD_SIZE): they meet in a collective
    every step (DDP's all-reduce in backward, FSDP's gathers), so they share one step period."""
    metas = [rec.targets.get(pid) for pid in pids.values()]
    return len(metas) > 1 and all(m is not None and m.rank is not None and (m.world_size or 0) > 1 for m in metas)


def analyze(
    rec: Recording,
    rules: list[Rule],
    policy: StepTimePolicy = DEFAULT_STEP_TIME_POLICY,
    start_ns: int | None = None,
    end_ns: int | None = None,
) -> Analysis:
    """Diagnose the recording's spans inside [start_ns, end_ns) (default: all of it)."""
    span_range = rec.time_range()
    if span_range is None:
        lo, hi = start_ns or 0, end_ns or (1 << 62)
        pids = rank_pids(rec, lo, hi)
        return Analysis(start_ns, end_ns, {}, [], diagnose_step_time([], policy), {}, pids, rank_gpu(rec, pids, lo, hi))
    start = span_range[0] if start_ns is None else start_ns
    end = span_range[1] if end_ns is None else end_ns
    pids = rank_pids(rec, start, end)
    timelines: dict[str, Timeline] = {}
    for rank, pid in pids.items():
        timelines[rank] = build_timeline(
            pid, rec.spans.get(pid, []), rec.threads.get(pid, {}), rules, rec.rate_hz, start, end,
            rec.cpu.get(pid, ()),
        )
    if synchronized(rec, pids):
        timelines = share_period(timelines, rec.rate_hz)
    ranks = [rank_stats(rank, tl) for rank, tl in timelines.items()]
    hot = {rank: hot_frames(tl) for rank, tl in timelines.items()}
    findings = diagnose_step_time(ranks, policy)
    gpu = rank_gpu(rec, pids, start, end)
    sm = {rank: statistics.median(v) for rank, v in gpu.sm_util.items() if v}
    findings = refine_with_gpu(findings, ranks, sm, policy)
    hang = detect_hang(timelines, policy)
    if hang is not None:
        findings = [hang, *(f for f in findings if f.kind not in ("NO_DATA", "WARMUP"))]
    return Analysis(start, end, timelines, ranks, findings, hot, pids, gpu)
