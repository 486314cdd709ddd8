"""Step-time diagnosis: small pure rules over per-rank statistics of one window."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from traceml_attach.policy import DEFAULT_STEP_TIME_POLICY, StepTimePolicy
from traceml_attach.steptime import RankStepStats

STATUS = {
    "NO_DATA": "NO DATA",
    "WARMUP": "WARMUP",
    "BALANCED": "BALANCED",
    "INPUT_BOUND": "INPUT-BOUND",
    "COMPUTE_BOUND": "COMPUTE-BOUND",
    "WAIT_HEAVY": "WAIT-HEAVY",
    "INPUT_STRAGGLER": "INPUT STRAGGLER",
    "COMPUTE_STRAGGLER": "COMPUTE STRAGGLER",
    "STRAGGLER": "STRAGGLER",
    "HANG": "HANG",
    "MEMORY_CREEP_EARLY": "MEMORY CREEP (EARLY)",
}
SEVERITY_ORDER = {"critical": 3, "warning": 2, "info": 1}


def finding_order(f: Finding) -> tuple[int, bool, float]:
    """Sort key of a window's findings: most severe first, stragglers before the rest, then
    the larger score."""
    return (-SEVERITY_ORDER[f.severity], "STRAGGLER" not in f.kind, -f.evidence.get("rank_score", 0.0))


@dataclass(frozen=True)
class Finding:
    kind: str
    severity: str            # info | warning | critical
    summary: str             # one line
    why: str                 # the numbers behind it
    action: str              # what to do next
    worst_rank: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return STATUS.get(self.kind, self.kind.replace("_", " "))


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _worst(ranks: list[RankStepStats]) -> RankStepStats:
    return max(ranks, key=lambda r: r.step_ms or 0.0)


def _median_component(ranks: list[RankStepStats], name: str) -> float:
    """The median rank's share of the typical step for one component."""
    return statistics.median((r.component_median_shares or {}).get(name, 0.0) for r in ranks)


def _severity(score: float, steps: int, policy: StepTimePolicy, warn: float, crit: float) -> str | None:
    """Critical from ``crit`` with enough steps to be sure, warning from ``warn``, else None."""
    if score >= crit and steps >= policy.min_steps_crit:
        return "critical"
    if score >= warn:
        return "warning"
    return None


def _no_data(all_ranks: list[RankStepStats]) -> Finding | None:
    short = [r for r in all_ranks if r.too_short]
    if short:
        t = short[0].too_short
        assert t is not None
        return Finding(
            "NO_DATA", "info",
            f"steps are too short to separate at this sampling rate (rank {short[0].rank})",
            f"the loop wraps every {t.apparent_step_ms:.1f} ms, only {t.samples_per_step:.1f} "
            "samples per step; steps may be shorter still, so no step time is reported",
            f"sample faster: --rate {t.suggested_rate_hz} or more",
            evidence={"samples_per_step": t.samples_per_step},
        )
    if not any(r.steps for r in all_ranks):
        loops = [r for r in all_ranks if r.loop]
        why = ("no training loop was found in the sampled threads"
               if not loops else f"the loop in {loops[0].loop} completed no full step in the window")
        return Finding("NO_DATA", "info", "no complete training step seen yet", why,
                       "wait for more steps; make sure the training loop is running")
    return None


def diagnose_step_time(
    all_ranks: list[RankStepStats], policy: StepTimePolicy = DEFAULT_STEP_TIME_POLICY
) -> list[Finding]:
    """Findings for one window, most severe first. Never empty."""
    none = _no_data(all_ranks)
    if none:
        return [none]
    ranks = [r for r in all_ranks if r.step_ms is not None]
    steps = min(r.steps for r in ranks)
    worst = _worst(ranks)
    if steps < policy.min_steps_warn:
        return [Finding("WARMUP", "info", f"warming up ({steps} complete step seen)",
                        f"a diagnosis needs {policy.min_steps_warn} complete steps",
                        "keep sampling", worst.rank)]
    inp = _median_component(ranks, "input")
    wait = _median_component(ranks, "wait")
    compute = _median_component(ranks, "compute")
    step_ms = statistics.median(r.step_ms or 0.0 for r in ranks)
    base = {"steps": steps, "step_ms": step_ms, "input_share": inp, "wait_share": wait,
            "compute_share": compute}
    findings = _stragglers(ranks, steps, policy)
    sev = _severity(inp, steps, policy, policy.share_warn, policy.share_crit)
    if sev:
        h2d = statistics.median((r.shares or {}).get("h2d", 0.0) for r in ranks)
        detail = f" (host-to-device copies {_pct(h2d)})" if h2d >= 0.02 else ""
        findings.append(Finding(
            "INPUT_BOUND", sev,
            f"input takes {_pct(inp)} of the typical step",
            f"DataLoader fetch and input copies are {_pct(inp)} of the median step "
            f"({step_ms:.0f} ms over {steps} steps){detail}; threshold {_pct(policy.share_warn)}",
            "increase DataLoader num_workers, cut per-sample preprocessing, "
            "use pin_memory with non_blocking copies; see the hot input frames",
            worst.rank, {**base, "rank_score": inp}))
    sev = _severity(wait, steps, policy, policy.share_warn, policy.share_crit)
    if sev:
        labels = worst.wait_labels
        top = ", ".join(f"{k} {_pct(v)}" for k, v in list(labels.items())[:3])
        findings.append(Finding(
            "WAIT_HEAVY", sev,
            f"{_pct(wait)} of the typical step is outside input and compute",
            f"wait is {_pct(wait)} of the median step ({step_ms:.0f} ms over {steps} steps)"
            + (f"; of it: {top}" if top else ""),
            "inspect the hot wait frames: logging, host syncs such as .item(), "
            "checkpointing and eval inside the loop",
            worst.rank, {**base, "wait_labels": labels, "rank_score": wait}))
    if findings:
        return sorted(findings, key=finding_order)
    if compute >= policy.compute_bound:
        return [Finding(
            "COMPUTE_BOUND", "info",
            f"model compute is {_pct(compute)} of the typical step",
            f"forward+backward+optimizer are {_pct(compute)} of the median step "
            f"({step_ms:.0f} ms over {steps} steps); input {_pct(inp)}, wait {_pct(wait)}",
            "optimize the largest compute phase: batch size, precision (AMP), torch.compile, "
            "then an operator profiler on the hot frames",
            worst.rank, base)]
    return [Finding(
        "BALANCED", "info",
        "no single bottleneck dominates the typical step",
        f"input {_pct(inp)}, wait {_pct(wait)}, compute {_pct(compute)} of the median step "
        f"({step_ms:.0f} ms over {steps} steps); none crosses its threshold",
        "optimize further only if throughput is still too low; compare against a known good run",
        worst.rank, base)]


def _work(r: RankStepStats, synced: bool) -> dict[str, float]:
    """A rank's milliseconds per median step by phase, on one yardstick for every rank: without
    the time blocked in syncs when every rank has CPU counters, else as sampled."""
    return (r.active_ms if synced else r.phases_ms) or {}


def _burden(work: dict[str, float]) -> tuple[float, float]:
    """(input, compute) of a rank's ``_work``."""
    return (work.get("input", 0.0) + work.get("h2d", 0.0),
            work.get("forward", 0.0) + work.get("backward", 0.0) + work.get("optimizer", 0.0))


def _stragglers(ranks: list[RankStepStats], steps: int, policy: StepTimePolicy) -> list[Finding]:
    """One rank slows the others: the one that waits least in the synchronizing phase.

    Under DDP every rank's step is as long as the slowest one's, because fast ranks wait
    in backward's all-reduce; comparing phase lengths would miss a rank whose backward
    itself is slow. The blocked time (from CPU counters) does not.
    """
    if len(ranks) < 2:
        return []
    synced = all(r.sync_wait_ms is not None and r.active_ms is not None for r in ranks)
    work = {r.rank: _work(r, synced) for r in ranks}
    if synced:
        culprit = min(ranks, key=lambda r: (r.sync_wait_ms or 0.0, -sum(_burden(work[r.rank]))))
    else:
        culprit = max(ranks, key=lambda r: sum(_burden(work[r.rank])))
    others = [r for r in ranks if r is not culprit]
    victim_step = statistics.median(r.step_ms or 0.0 for r in others)
    if not victim_step:
        return []
    v_input = statistics.median(_burden(work[r.rank])[0] for r in others)
    v_compute = statistics.median(_burden(work[r.rank])[1] for r in others)
    c_input, c_compute = _burden(work[culprit.rank])
    if synced:
        v_wait = statistics.median(r.sync_wait_ms or 0.0 for r in others)
        excess_ms = v_wait - (culprit.sync_wait_ms or 0.0)
    else:
        excess_ms = (c_input + c_compute) - (v_input + v_compute)
    score = excess_ms / victim_step
    if score < policy.straggler_warn:
        return []
    severity = _severity(score, steps, policy, policy.straggler_warn, policy.straggler_crit) or "warning"
    ex_input, ex_compute = c_input - v_input, c_compute - v_compute
    if ex_input >= policy.straggler_cause * excess_ms:
        kind, what = "INPUT_STRAGGLER", f"its input takes {ex_input:.0f} ms more per step"
        action = f"inspect the input path on rank {culprit.rank}: its DataLoader, preprocessing, storage"
    elif ex_compute >= policy.straggler_cause * excess_ms:
        def excess(phase: str) -> float:
            return work[culprit.rank].get(phase, 0.0) - statistics.median(work[r.rank].get(phase, 0.0) for r in others)
        phase = max(("forward", "backward", "optimizer"), key=excess)
        kind, what = "COMPUTE_STRAGGLER", f"its compute takes {ex_compute:.0f} ms more per step (mostly {phase})"
        action = f"inspect {phase} on rank {culprit.rank}: rank-local extra work, uneven shapes or data"
    else:
        kind, what = "STRAGGLER", (f"its extra time is spread over input (+{ex_input:.0f} ms) "
                                   f"and compute (+{ex_compute:.0f} ms)")
        action = f"inspect both input and compute on rank {culprit.rank}; isolate one issue at a time"
    how = (f"the other ranks wait {excess_ms:.0f} ms per step for it in the synchronizing phase"
           if synced else f"it carries {excess_ms:.0f} ms more work per step than the median rank")
    return [Finding(
        kind, severity,
        f"rank {culprit.rank} slows the job: {what}",
        f"{how}: {100 * score:.0f}% of the typical {victim_step:.0f} ms step (threshold "
        f"{100 * policy.straggler_warn:.0f}%); input {ex_input:+.0f} ms, compute {ex_compute:+.0f} ms",
        action, culprit.rank,
        {"score": score, "rank_score": score, "excess_ms": excess_ms, "input_excess_ms": ex_input,
         "compute_excess_ms": ex_compute, "synchronized": synced},
    )]


def refine_with_gpu(findings: list[Finding], ranks: list[RankStepStats], sm_util: dict[str, float],
                    policy: StepTimePolicy = DEFAULT_STEP_TIME_POLICY) -> list[Finding]:
    """CUDA kernels run asynchronously, so the Python thread waits at sync points (.item(),
    .cpu(), synchronize) rather than in the phase whose kernels run. Per-process GPU
    utilization tells a saturated GPU (compute-bound) from a starving one."""
    head = next((f for f in findings if f.kind == "WAIT_HEAVY"), None)
    if head is None or not sm_util:
        return findings
    sync_share = statistics.median(r.wait_labels.get("device_sync", 0.0) for r in ranks)
    util = statistics.median(sm_util.values())
    if sync_share < policy.device_sync_share:
        return findings
    if util >= policy.gpu_saturated:
        compute = Finding(
            "COMPUTE_BOUND", "info", f"the GPU is saturated ({util:.0f}% busy); the Python thread waits for it",
            f"{head.why}; {100 * sync_share:.0f}% of that wait is device sync while the rank's GPU is {util:.0f}% "
            "busy: the time belongs to GPU kernels queued by forward/backward/optimizer",
            "optimize GPU compute: precision (AMP), torch.compile, batch size; profile the kernels",
            head.worst_rank, {**head.evidence, "gpu_sm_util": util, "device_sync_share": sync_share})
        return sorted((compute if f is head else f for f in findings), key=finding_order)
    if util < policy.gpu_starving:
        starving = Finding(
            head.kind, head.severity, head.summary + f"; the GPU is idle {100 - util:.0f}% of the time",
            f"{head.why}; device sync is {100 * sync_share:.0f}% of the wait but the GPU is only {util:.0f}% "
            "busy: it waits for the host, not the other way round", head.action, head.worst_rank,
            {**head.evidence, "gpu_sm_util": util, "device_sync_share": sync_share})
        return [starving if f is head else f for f in findings]
    return findings
