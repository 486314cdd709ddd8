"""Step-time diagnosis: small pure rules over per-rank statistics of one window."""

from __future__ import annotations

import bisect
import re
import statistics
from dataclasses import replace

from traceml_attach.diagnose.finding import (
    SEVERITY_ORDER,
    Finding,
    RankBurden,
    StepEvidence,
    StragglerEvidence,
    finding_order,
)
from traceml_attach.diagnose.kinds import Kind
from traceml_attach.policy import DEFAULT_STEP_TIME_POLICY, StepTimePolicy
from traceml_attach.steps.phases import COMPONENTS
from traceml_attach.steps.steptime import RankStepStats

__all__ = ["SEVERITY_ORDER", "Finding", "diagnose_step_time", "finding_order", "refine_with_gpu",
           "straggler_scores", "unknown_step_note"]


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _worst(ranks: list[RankStepStats]) -> RankStepStats:
    """The slowest rank: the longest step, or with no step time, the most input + compute."""
    if all(r.step_ms is not None for r in ranks):
        return max(ranks, key=lambda r: r.step_ms or 0.0)
    return max(ranks, key=lambda r: sum(_burden(r.shares or {})))


def unknown_step_note(ranks: list[RankStepStats], faster_hz: dict[str, int] | None = None,
                      max_rate_hz: int | None = None) -> str | None:
    """The sentence that says the step time is unknown, why, and what would tell it; None when known.
    ``faster_hz``: the rate the analysis advises each rank whose steps are too short for its rate
    (diagnose/rate.py); ``max_rate_hz``: how fast the sampler goes by itself (None: a fixed rate)."""
    unknown = [r for r in ranks if r.shares is not None and r.step_ms is None and r.clock is not None]
    if not unknown:
        return None
    clock = unknown[0].clock
    assert clock is not None
    want = (faster_hz or {}).get(unknown[0].rank)
    if max_rate_hz is not None and want is not None:
        rate = (f"; the attacher samples it at {want} Hz from its next windows" if want <= max_rate_hz else
                f"; sample faster: --max-rate {want} (the attacher goes up to {max_rate_hz} Hz by itself)")
    else:   # (the clock's own suggestion, else the analysis's: slow steps that hide boundaries, rate.faster)
        suggested = clock.suggested_rate_hz or want
        rate = f"; sample faster: --rate {suggested} or more" if suggested else ""
    return (f"step time unknown (rank {unknown[0].rank}): {clock.reason}{rate}. The phase shares and the "
            "diagnosis stand; no step time or per-step milliseconds are given")


def _job_step_ms(ranks: list[RankStepStats]) -> float | None:
    """The median rank's step time; None unless every rank's is known."""
    known = [r.step_ms for r in ranks if r.step_ms is not None]
    return statistics.median(known) if known and len(known) == len(ranks) else None


def _over(step_ms: float | None, steps: int) -> str:
    """"83 ms over 120 steps", or what is known when the step time is not."""
    if step_ms is None:
        return f"step time unknown, at least {steps} steps seen"
    return f"{step_ms:.0f} ms over {steps} steps"


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


def _loopless(all_ranks: list[RankStepStats], policy: StepTimePolicy) -> Finding | None:
    """Stacks that train, in a loop no rule knows: say so, and how to name the loop."""
    for r in all_ranks:
        shares = r.unlooped_shares
        if r.loop is not None or not shares:
            continue
        work = sum(shares.get(p, 0.0) for p in (*COMPONENTS["input"], *COMPONENTS["compute"]))
        if work < policy.loopless_work:
            continue
        seen = ", ".join(f"{p} {_pct(v)}" for p, v in sorted(shares.items(), key=lambda kv: -kv[1]) if v >= 0.05)
        hint = r.loop_hint
        if hint is not None:
            name, _, file = hint.partition(" (")
            file = file.rstrip(")").split("site-packages/")[-1]
            where = f"; {name} in {file} wraps like one"
        else:
            name, file, where = "Trainer.fit_loop", "mypkg/trainer.py", ""
        # TOML literal strings ('...'): the regular expressions' backslashes stay as they are
        example = f"[[loop]] framework = '...' func = '^{re.escape(name)}$' file = '{re.escape(file)}$'"
        return Finding(
            Kind.NO_DATA, "info", "training phases seen, but no training loop found",
            f"rank {r.rank}'s training thread spends {_pct(work)} of its time in training phases ({seen}), "
            f"but no frame on its call path is a loop that traceml knows: the loop lives in a library{where}",
            f"name the loop in a rules file and pass it with --rules FILE: {example} "
            "(regular expressions; see traceml_attach/steps/rules.toml)", r.rank)
    return None


# NO DATA's summary where no step was seen and, without a loop, no training phases either (``_loopless``
# says those): what ``hang.waits_on_children`` may say more of
NO_STEP_YET = "no complete training step seen yet"


def _no_data(all_ranks: list[RankStepStats], policy: StepTimePolicy) -> Finding | None:
    if not any(r.steps for r in all_ranks):
        loopless = _loopless(all_ranks, policy)
        if loopless is not None:
            return loopless
        loops = [r for r in all_ranks if r.loop]
        why = ("no training loop was found in the sampled threads"
               if not loops else f"the loop in {loops[0].loop} completed no full step in the window")
        return Finding(Kind.NO_DATA, "info", NO_STEP_YET, why,
                       "wait for more steps; make sure the training loop is running")
    return None


def diagnose_step_time(
    all_ranks: list[RankStepStats], policy: StepTimePolicy = DEFAULT_STEP_TIME_POLICY
) -> list[Finding]:
    """Findings for one window, most severe first. Never empty."""
    none = _no_data(all_ranks, policy)
    if none:
        return [none]
    ranks = [r for r in all_ranks if r.shares is not None]
    steps = min(r.steps for r in ranks)
    worst = _worst(ranks)
    # the shares rest on the loop's complete cycles: a first look of 1 s holds several even where
    # the steps surely counted are fewer (a count unsure of micro-batches: the optimizer's visits)
    seen = min(max(r.steps, r.cycles) for r in ranks)
    if seen < policy.min_steps_warn:
        return [Finding(Kind.WARMUP, "info", f"warming up ({seen} complete step seen)",
                        f"a diagnosis needs {policy.min_steps_warn} complete steps",
                        "keep sampling", worst.rank)]
    inp = _median_component(ranks, "input")
    wait = _median_component(ranks, "wait")
    compute = _median_component(ranks, "compute")
    step_ms = _job_step_ms(ranks)
    over = _over(step_ms, steps)
    base = StepEvidence(steps, step_ms, inp, wait, compute)
    findings = _stragglers(ranks, steps, policy)
    sev = _severity(inp, steps, policy, policy.share_warn, policy.share_crit)
    if sev and findings and findings[0].kind in (Kind.INPUT_STRAGGLER, Kind.STRAGGLER):
        # the typical rank's input is the straggler's alone (of two ranks, the median is their
        # mean): the input straggler leads. Lightning under torchrun, input 8.7% and 36.2% of the
        # two ranks' steps: 23% "typical" made INPUT-BOUND critical above the warning that named rank 1
        others = [r for r in ranks if r.rank != str(findings[0].worst_rank)]
        if others and _severity(_median_component(others, "input"), steps, policy, policy.share_warn,
                                policy.share_crit) is None:
            sev = min(sev, findings[0].severity, key=SEVERITY_ORDER.__getitem__)
    if sev:
        h2d = statistics.median((r.shares or {}).get("h2d", 0.0) for r in ranks)
        detail = f" (host-to-device copies {_pct(h2d)})" if h2d >= 0.02 else ""
        findings.append(Finding(
            Kind.INPUT_BOUND, sev,
            f"input takes {_pct(inp)} of the typical step",
            f"DataLoader fetch and input copies are {_pct(inp)} of the typical step "
            f"({over}){detail}; threshold {_pct(policy.share_warn)}",
            "increase DataLoader num_workers, cut per-sample preprocessing, "
            "use pin_memory with non_blocking copies; see the hot input frames",
            worst.rank, replace(base, score=inp)))
    sev = _severity(wait, steps, policy, policy.share_warn, policy.share_crit)
    if sev:
        labels = worst.wait_labels
        top = ", ".join(f"{k} {_pct(v)}" for k, v in list(labels.items())[:3])
        findings.append(Finding(
            Kind.WAIT_HEAVY, sev,
            f"{_pct(wait)} of the typical step is outside input and compute",
            f"wait is {_pct(wait)} of the typical step ({over})"
            + (f"; of it: {top}" if top else ""),
            "inspect the hot wait frames: logging, host syncs such as .item(), "
            "checkpointing and eval inside the loop",
            worst.rank, replace(base, wait_labels=labels, score=wait)))
    if findings:
        return sorted(findings, key=finding_order)
    if compute >= policy.compute_bound:
        return [Finding(
            Kind.COMPUTE_BOUND, "info",
            f"model compute is {_pct(compute)} of the typical step",
            f"forward+backward+optimizer are {_pct(compute)} of the typical step "
            f"({over}); input {_pct(inp)}, wait {_pct(wait)}",
            "optimize the largest compute phase: batch size, precision (AMP), torch.compile, "
            "then an operator profiler on the hot frames",
            worst.rank, base)]
    return [Finding(
        Kind.BALANCED, "info",
        "no single bottleneck dominates the typical step",
        f"input {_pct(inp)}, wait {_pct(wait)}, compute {_pct(compute)} of the typical step "
        f"({over}); none crosses its threshold",
        "optimize further only if throughput is still too low; compare against a known good run",
        worst.rank, base)]


def _burden(work: dict[str, float]) -> tuple[float, float]:
    """(input, compute) of a rank's phase amounts (ms or shares)."""
    return (sum(work.get(p, 0.0) for p in COMPONENTS["input"]),
            sum(work.get(p, 0.0) for p in COMPONENTS["compute"]))


def _stragglers(ranks: list[RankStepStats], steps: int, policy: StepTimePolicy) -> list[Finding]:
    """One rank slows the others: the one that waits least in the synchronizing phase.

    Under DDP every rank's step is as long as the slowest one's, because fast ranks wait
    in backward's all-reduce; comparing phase lengths would miss a rank whose backward
    itself is slow. The blocked time (from CPU counters) does not. Everything is compared as
    a share of the step, which synchronized ranks have in common: the shares are totals over
    the window, right even where single steps were miscounted or the step time is unknown.
    """
    compared = _compared(ranks)
    if compared is None:
        return []
    synced, work = compared
    if synced:
        culprit = min(ranks, key=lambda r: (r.sync_wait_share or 0.0, -sum(_burden(work[r.rank]))))
    else:
        culprit = max(ranks, key=lambda r: sum(_burden(work[r.rank])))
    others = [r for r in ranks if r is not culprit]
    v_input = statistics.median(_burden(work[r.rank])[0] for r in others)
    v_compute = statistics.median(_burden(work[r.rank])[1] for r in others)
    c_input, c_compute = _burden(work[culprit.rank])
    excess = _excess(ranks, synced, work)[culprit.rank]
    if excess < policy.straggler_warn:
        return []
    step_ms = _job_step_ms(ranks)

    def amount(share: float, signed: bool = False) -> str:
        """A share of the step in ms when the step time is known, else in % of the step."""
        sign = "+" if signed else ""
        if step_ms is None:
            return f"{100 * share:{sign}.0f}% of a step"
        return f"{share * step_ms:{sign}.0f} ms"

    severity = _severity(excess, steps, policy, policy.straggler_warn, policy.straggler_crit) or "warning"
    ex_input, ex_compute = c_input - v_input, c_compute - v_compute
    if ex_input >= policy.straggler_cause * excess:
        kind, what = Kind.INPUT_STRAGGLER, f"its input takes {amount(ex_input)} more per step"
        action = f"inspect the input path on rank {culprit.rank}: its DataLoader, preprocessing, storage"
    elif ex_compute >= policy.straggler_cause * excess:
        def extra(phase: str) -> float:
            return work[culprit.rank].get(phase, 0.0) - statistics.median(work[r.rank].get(phase, 0.0) for r in others)
        phase = max(COMPONENTS["compute"], key=extra)
        kind, what = Kind.COMPUTE_STRAGGLER, f"its compute takes {amount(ex_compute)} more per step (mostly {phase})"
        action = f"inspect {phase} on rank {culprit.rank}: rank-local extra work, uneven shapes or data"
    else:
        kind, what = Kind.STRAGGLER, (f"its extra time is spread over input ({amount(ex_input, True)}) "
                                   f"and compute ({amount(ex_compute, True)})")
        action = f"inspect both input and compute on rank {culprit.rank}; isolate one issue at a time"
    how = (f"the other ranks wait {amount(excess)} per step for it in the synchronizing phase"
           if synced else f"it carries {amount(excess)} more work per step than the median rank")
    step = f"the typical {step_ms:.0f} ms step" if step_ms is not None else "the typical step"
    evidence = StragglerEvidence(
        excess, synced, ex_input, ex_compute,
        None if step_ms is None else excess * step_ms,
        None if step_ms is None else ex_input * step_ms,
        None if step_ms is None else ex_compute * step_ms,
        {int(r.rank): RankBurden(*_burden(work[r.rank]), r.sync_wait_share) for r in ranks},
    )
    return [Finding(
        kind, severity,
        f"rank {culprit.rank} slows the job: {what}",
        f"{how}: {100 * excess:.0f}% of {step} (threshold {100 * policy.straggler_warn:.0f}%); "
        f"input {amount(ex_input, True)}, compute {amount(ex_compute, True)}",
        action, culprit.rank, evidence,
    )]


def _compared(ranks: list[RankStepStats]) -> tuple[bool, dict[str, dict[str, float]]] | None:
    """What the straggler rule compares: whether the ranks are synchronized (compared on their
    blocked time, each phase's work as active shares), else each rank's phase time per step in
    shares of the median rank's step; None with fewer than two ranks or nothing comparable."""
    if len(ranks) < 2:
        return None
    if all(r.sync_wait_share is not None and r.active_shares is not None for r in ranks):
        return True, {r.rank: r.active_shares or {} for r in ranks}
    if all(r.phases_ms is not None and r.step_ms for r in ranks):
        unit = statistics.median(r.step_ms or 0.0 for r in ranks)
        return False, {r.rank: {p: v / unit for p, v in (r.phases_ms or {}).items()} for r in ranks}
    return None


def _excess(ranks: list[RankStepStats], synced: bool, work: dict[str, dict[str, float]]) -> dict[str, float]:
    """Each rank's excess share, as if it were the culprit: what the others wait for it per step
    (their median blocked share less its own), or its input + compute beyond the others'
    medians. One pass over sorted values: a 1,024-rank job costs no more than a sort."""
    def median_without(ordered: list[float], value: float) -> float:
        """The median of ``ordered`` (sorted) with one occurrence of ``value`` taken out."""
        at = bisect.bisect_left(ordered, value)
        m = len(ordered) - 1

        def nth(j: int) -> float:
            return ordered[j] if j < at else ordered[j + 1]

        return nth(m // 2) if m % 2 else (nth(m // 2 - 1) + nth(m // 2)) / 2

    if synced:
        blocked = {r.rank: r.sync_wait_share or 0.0 for r in ranks}
        ordered = sorted(blocked.values())
        return {rank: median_without(ordered, own) - own for rank, own in blocked.items()}
    burden = {r.rank: _burden(work[r.rank]) for r in ranks}
    inputs, computes = sorted(b[0] for b in burden.values()), sorted(b[1] for b in burden.values())
    return {rank: (c_input + c_compute) - (median_without(inputs, c_input) + median_without(computes, c_compute))
            for rank, (c_input, c_compute) in burden.items()}


def straggler_scores(ranks: list[RankStepStats]) -> dict[str, float]:
    """Every rank's straggler score: the excess share the straggler rule would charge it with as
    the culprit (the named straggler's is its finding's score). {} when the rule cannot compare
    the ranks (one rank, or no shares)."""
    shared = [r for r in ranks if r.shares is not None]
    compared = _compared(shared)
    return {} if compared is None else _excess(shared, *compared)


def refine_with_gpu(findings: list[Finding], ranks: list[RankStepStats], sm_util: dict[str, float],
                    policy: StepTimePolicy = DEFAULT_STEP_TIME_POLICY) -> list[Finding]:
    """CUDA kernels run asynchronously, so the Python thread waits at sync points (.item(),
    .cpu(), synchronize) rather than in the phase whose kernels run. Per-process GPU
    utilization tells a saturated GPU (compute-bound) from a starving one."""
    if not sm_util:
        return findings
    util = statistics.median(sm_util.values())
    findings = _paced_input(findings, ranks, util, policy)
    head = next((f for f in findings if f.kind == Kind.WAIT_HEAVY), None)
    if head is None:
        return _saturated_compute(findings, ranks, util, policy)
    sync_share = statistics.median(r.wait_labels.get("device_sync", 0.0) for r in ranks)
    if sync_share < policy.device_sync_share:
        return findings
    if util >= policy.gpu_saturated:
        compute = Finding(
            Kind.COMPUTE_BOUND, "info", f"the GPU is saturated ({util:.0f}% busy); the Python thread waits for it",
            f"{head.why}; {100 * sync_share:.0f}% of that wait is device sync while the rank's GPU is {util:.0f}% "
            "busy: the time belongs to GPU kernels queued by forward/backward/optimizer",
            "optimize GPU compute: precision (AMP), torch.compile, batch size; profile the kernels",
            head.worst_rank, _with_gpu(head, util, sync_share))
        paced = next((f for f in findings if f.kind == Kind.COMPUTE_BOUND), None)    # ``_paced_input``'s
        if paced is not None:        # one finding says it, with both reasons
            compute = replace(paced, why=f"{paced.why}; and {compute.why}")
            findings = [f for f in findings if f is not paced]
        return sorted((compute if f is head else f for f in findings), key=finding_order)
    if util < policy.gpu_starving:
        starving = Finding(
            head.kind, head.severity, head.summary + f"; the GPU is idle {100 - util:.0f}% of the time",
            f"{head.why}; device sync is {100 * sync_share:.0f}% of the wait but the GPU is only {util:.0f}% "
            "busy: it waits for the host, not the other way round", head.action, head.worst_rank,
            _with_gpu(head, util, sync_share))
        return [starving if f is head else f for f in findings]
    return findings


def _paced_input(findings: list[Finding], ranks: list[RankStepStats], util: float,
                 policy: StepTimePolicy) -> list[Finding]:
    """INPUT-BOUND on a GPU that sets the pace (busy at least ``gpu_paces``) is COMPUTE-BOUND: the
    GPU hardly ever waits for the input, so the host's input ran while the GPU worked through what
    was queued, and its host-to-device copies waited for it (a copy from pageable memory starts
    after the kernels queued before it). Faster input cannot shorten such a step. (On the H100,
    accumulation over a 16384-wide MLP: the GPU 99% busy, the host 71% of its step in ``.to()``,
    the INPUT-BOUND it read as advised DataLoader workers.)"""
    head = next((f for f in findings if f.kind == Kind.INPUT_BOUND), None)
    if head is None or util < policy.gpu_paces or not isinstance(head.evidence, StepEvidence):
        return findings
    ev = head.evidence
    h2d = statistics.median((r.shares or {}).get("h2d", 0.0) for r in ranks)
    compute = Finding(
        Kind.COMPUTE_BOUND, "info", f"the GPU is {util:.0f}% busy: it sets the pace, not the input",
        f"input is {_pct(ev.input_share)} of the host's typical step ({_over(ev.step_ms, ev.steps)}; host-to-device "
        f"copies {_pct(h2d)}), but the rank's GPU is {util:.0f}% busy through it: the host runs ahead of the GPU, "
        "loads its next batch while the GPU works, and waits for the GPU in its copies (a copy from pageable memory "
        "starts after the kernels queued before it); faster input would not shorten the step",
        "optimize GPU compute: precision (AMP), torch.compile, batch size; profile the kernels",
        head.worst_rank, replace(ev, score=None, gpu_sm_util=util))
    return sorted((compute if f is head else f for f in findings), key=finding_order)


def _saturated_compute(findings: list[Finding], ranks: list[RankStepStats], util: float,
                       policy: StepTimePolicy) -> list[Finding]:
    """A COMPUTE-BOUND head on a GPU that sets the pace (or a BALANCED one that is, ``_paced_balance``),
    told where its phase shares come from: the host
    runs ahead of the GPU and waits wherever its launches queue up (an H100 job syncing every 50
    steps waited in the optimizer's foreach kernels 83% of the step), so they say where the thread
    waited, not which phase's kernels take the GPU's time."""
    if util < policy.gpu_paces:
        return findings
    stated = next((f for f in findings if f.kind == Kind.COMPUTE_BOUND), None)
    head = stated or _paced_balance(findings, ranks, policy)
    if head is None or not isinstance(head.evidence, StepEvidence) or head.evidence.gpu_sm_util is not None:
        return findings
    shares = next((r.shares for r in ranks if r.rank == str(head.worst_rank) and r.shares), None)
    where = ""
    if shares:
        top = max(("forward", "backward", "optimizer"), key=lambda p: shares.get(p, 0.0))
        where = f" ({top} {100 * shares[top]:.0f}%)"
    told = replace(head, why=f"{head.why}; the GPU is {util:.0f}% busy, so the Python thread runs ahead of it "
                             f"and waits wherever its kernel launches queue up: the phase shares say where it "
                             f"waited{where}, not which phase's kernels take the GPU's time",
                   action="optimize GPU compute: precision (AMP), torch.compile, batch size; profile the kernels",
                   evidence=replace(head.evidence, gpu_sm_util=util))
    replaced = stated or findings[0]       # the COMPUTE-BOUND finding, or the BALANCED one it reads as
    return [told if f is replaced else f for f in findings]


def _paced_balance(findings: list[Finding], ranks: list[RankStepStats], policy: StepTimePolicy) -> Finding | None:
    """A BALANCED head on a GPU that sets the pace, as COMPUTE-BOUND where compute and the host's
    wait for the GPU (device sync) together reach ``compute_bound``: that wait is the GPU's kernels
    too. (The H100 job that syncs every 50 steps: compute 86%, device sync 7% of its step, input 7%
    on the host while the GPU ran ahead, 100% busy.)"""
    head = findings[0] if findings else None
    if head is None or head.kind != Kind.BALANCED or not isinstance(head.evidence, StepEvidence):
        return None
    ev = head.evidence
    sync = statistics.median(r.wait_labels.get("device_sync", 0.0) for r in ranks) * ev.wait_share
    if ev.compute_share + sync < policy.compute_bound:
        return None
    return Finding(
        Kind.COMPUTE_BOUND, "info",
        f"model compute is {_pct(ev.compute_share)} of the typical step, and the host waits for the GPU in "
        f"{_pct(sync)} more",
        f"forward+backward+optimizer are {_pct(ev.compute_share)} of the typical step and device sync "
        f"{_pct(sync)} ({_over(ev.step_ms, ev.steps)}); input {_pct(ev.input_share)}, other wait "
        f"{_pct(ev.wait_share - sync)}",
        "optimize GPU compute", head.worst_rank, replace(ev, device_sync_share=sync / ev.wait_share if ev.wait_share
                                                          else None))


def _with_gpu(head: Finding, util: float, sync_share: float) -> StepEvidence | None:
    """The head finding's evidence with what the GPU told."""
    if not isinstance(head.evidence, StepEvidence):
        return None
    return replace(head.evidence, gpu_sm_util=util, device_sync_share=sync_share)
