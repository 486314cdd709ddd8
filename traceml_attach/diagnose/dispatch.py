"""CPU-BOUND DISPATCH: a rank's Python thread busy in forward/backward while its GPU idles.

CUDA kernels run asynchronously: a thread that spends its step inside forward and backward
(on a CPU, not blocked in a sync or a collective, hardly waiting) while NVML says its GPU is
mostly idle is queueing kernels slower than the GPU runs them: kernel launch overhead, many
small ops. The pair to the system section's LOW_/MODERATE_GPU_UTILIZATION: that one says the
GPU idles, this one says why.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from traceml_attach.diagnose.finding import Finding, StepEvidence, finding_order
from traceml_attach.diagnose.kinds import Kind
from traceml_attach.policy import DEFAULT_DISPATCH_POLICY, DispatchPolicy
from traceml_attach.steps.steptime import RankStepStats

# what the dispatch finding takes the place of: with an idle GPU, "compute-bound" and "balanced"
# say the wrong thing about where the time goes
REPLACES = frozenset({Kind.COMPUTE_BOUND, Kind.BALANCED})


def dispatching(r: RankStepStats, sm: float | None, policy: DispatchPolicy) -> bool:
    """The rank's thread works in compute phases while its GPU is under policy.gpu_idle_below."""
    comp = r.component_median_shares or {}
    if sm is None or sm >= policy.gpu_idle_below or not comp:
        return False
    blocked = r.sync_wait_share
    return (comp.get("compute", 0.0) >= policy.compute_share and comp.get("wait", 0.0) <= policy.wait_share
            and (blocked is None or blocked <= policy.blocked_share))


def cpu_dispatch(findings: list[Finding], ranks: Sequence[RankStepStats], sm_util: dict[str, float],
                 policy: DispatchPolicy = DEFAULT_DISPATCH_POLICY) -> list[Finding]:
    """``findings`` with CPU-BOUND DISPATCH added where most ranks with GPU readings dispatch."""
    if not sm_util or any(f.kind in (Kind.HANG, Kind.STOPPED, Kind.NO_DATA, Kind.WARMUP) for f in findings):
        return findings
    read = [r for r in ranks if r.rank in sm_util and r.shares is not None]
    hit = [r for r in read if dispatching(r, sm_util[r.rank], policy)]
    if not read or len(hit) * 2 <= len(read):
        return findings
    r = min(hit, key=lambda x: sm_util[x.rank])
    util = statistics.median(sm_util[x.rank] for x in hit)
    comp = r.component_median_shares or {}
    blocked = "" if r.sync_wait_share is None else f", blocked {100 * r.sync_wait_share:.0f}%"
    steps = min(x.steps for x in read)
    known = [x.step_ms for x in read if x.step_ms is not None]
    step_ms = statistics.median(known) if len(known) == len(read) else None
    evidence = StepEvidence(steps, step_ms, comp.get("input", 0.0), comp.get("wait", 0.0), comp.get("compute", 0.0),
                            score=comp.get("compute", 0.0), gpu_sm_util=util)
    finding = Finding(
        Kind.CPU_BOUND_DISPATCH, "warning" if util < policy.gpu_idle_below / 2 else "info",
        f"the host thread dispatches slower than the GPU runs: GPU {util:.0f}% busy while "
        f"forward/backward keep the thread busy",
        f"rank {r.rank}'s Python thread is in forward/backward/optimizer {100 * comp.get('compute', 0.0):.0f}% "
        f"of the typical step (wait {100 * comp.get('wait', 0.0):.0f}%{blocked}) while its GPU's SM utilization "
        f"is {sm_util[r.rank]:.0f}% ({len(hit)} of {len(read)} ranks): kernel launches, not the GPU, set the "
        "pace (LOW_/MODERATE_GPU_UTILIZATION is the same idle GPU)",
        "cut the launches: torch.compile (fuses small ops into fewer kernels), CUDA graphs "
        "(torch.compile mode='reduce-overhead'), larger batches; then profile the kernels",
        r.rank, evidence)
    kept = [f for f in findings if f.kind not in REPLACES]
    return sorted([*kept, finding], key=finding_order)
