"""What each fix is worth: the job's step if one step-time finding's cause were removed.

Pure projections from what the window measured (each rank's mean step, its phase shares, its
blocked time in the collective, its wait labels, the DataLoader workers and the host's cores).
Every projection is the job's *mean* step (the inverse of its throughput: an occasional long
step, a checkpoint, counts), with the one assumption it rests on and whether the window could
check that assumption. The interval is the projection give or take the measured per-step spread
(the typical steps' IQR / 1.349), scaled to the projected step.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from traceml_attach.diagnose.finding import Finding, StragglerEvidence
from traceml_attach.diagnose.kinds import Kind
from traceml_attach.diagnose.report import Projection
from traceml_attach.policy import DEFAULT_WHATIF_POLICY, WhatIfPolicy
from traceml_attach.steps.phases import COMPONENTS
from traceml_attach.steps.steptime import RankStepStats

RANKS = "RANKS"   # the rank-level bound's ``finding``: no finding's, every rank's

# What removing each wait label assumes, and whether a CPU-only window can check it.
WAIT_FIXES: dict[str, tuple[str, str, bool]] = {
    "device_sync": ("without the device sync (.item()/.cpu() each step)",
                    "the GPU work the sync waited for overlaps the next step's host work; not checkable "
                    "from the host: a GPU busy at that point moves the wait to the next sync", False),
    "logging": ("without the logging", "the logging's own work is gone, not moved to another thread", True),
    "metric": ("without the metric computation", "the metric's own work is gone, not moved", True),
    "checkpoint": ("without the checkpoint writes", "checkpoints move out of the loop (async or less often); "
                   "the time measured in torch.save goes with them", True),
    "eval": ("without the evaluation", "evaluation moves out of the training loop", True),
    "sleep": ("without the sleep", "nothing waits on the sleep", True),
    "compile": ("without recompiling", "the compiled graphs stop changing (no recompiles in the loop)", False),
    "other": ("without the other (unlabelled) wait", "the unlabelled wait is work the step does not need; "
              "what it is, only its hot frames say", False),
}


@dataclass(frozen=True)
class Host:
    """The host's cores as the window saw them."""

    cpus: int | None                 # logical CPUs
    cpu_percent: float | None        # median host CPU %, of all of them


def mean_steps_ms(stats: Sequence[RankStepStats], totals: dict[str, tuple[int, int]]) -> dict[str, float]:
    """Each rank's mean covered step, ms, from (covered steps, their total ns)."""
    return {r.rank: ns / n / 1e6 for r in stats if (n_ns := totals.get(r.rank)) and (n := n_ns[0]) and (ns := n_ns[1])}


def project(findings: Sequence[Finding], stats: Sequence[RankStepStats], mean_ms: dict[str, float],
            workers: dict[str, int | None], host: Host,
            policy: WhatIfPolicy = DEFAULT_WHATIF_POLICY) -> tuple[Projection, ...]:
    """The projections for every step-time finding of the window, and the rank-level bound."""
    ranks = [r for r in stats if r.shares is not None and r.rank in mean_ms]
    if not ranks or len(ranks) != len([r for r in stats if r.shares is not None]):
        return ()
    base = statistics.median(mean_ms[r.rank] for r in ranks)
    sds = [r.step_sd_ms for r in ranks if r.step_sd_ms is not None]
    sd = statistics.median(sds) if sds else None
    median_rank = sorted(ranks, key=lambda r: mean_ms[r.rank])[(len(ranks) - 1) // 2]
    out: list[Projection] = []

    def add(kind: str, fix: str, gain_share: float, assumption: str, checked: bool,
            workers_n: int | None = None, who: tuple[int, ...] = ()) -> None:
        gain = max(0.0, min(gain_share, 1.0)) * base
        if gain < policy.min_gain_share * base:
            return
        step = base - gain
        spread = None if sd is None else sd * step / base   # unknown in live views (they keep sums only)
        low = None if spread is None else round(max(0.0, step - spread), 3)
        high = None if spread is None else round(step + spread, 3)
        out.append(Projection(kind, fix, round(base, 3), round(step, 3), round(gain, 3),
                              round(100 * gain / base, 1), low, high, assumption, checked, workers_n, who))

    for f in findings:
        if f.kind == Kind.INPUT_BOUND:
            _input(f, median_rank, base, workers, host, add)
        elif f.kind == Kind.WAIT_HEAVY:
            for label, share in median_rank.wait_labels.items():
                if label in WAIT_FIXES and label != "collective":
                    fix, assumption, checked = WAIT_FIXES[label]
                    add(f.kind, fix, (median_rank.shares or {}).get("wait", 0.0) * share, assumption, checked)
        elif isinstance(f.evidence, StragglerEvidence):
            _stragglers(f, ranks, policy, add)
    if len(ranks) >= 2:
        late = _lateness(ranks)
        values = sorted(late[0].values(), reverse=True) if late is not None else []
        # with two ranks the bound is the straggler's own projection: not said twice
        if late is not None and not any(abs(p.gain_ms - (values[0] - values[-1]) * base) < 0.5 for p in out):
            add(RANKS, "every rank at the fastest rank's active time", values[0] - values[-1],
                "every rank's work shrinks to the fastest rank's; the collective's own cost stays"
                if late[1] else "every rank's input + compute shrinks to the lightest rank's", late[1])
    return tuple(out)


def _input(f: Finding, r: RankStepStats, base: float, workers: dict[str, int | None], host: Host, add) -> None:
    """INPUT-BOUND: the step with the DataLoader's fetch fully overlapped with the rest of the
    step, and the workers the measured per-batch time asks for."""
    shares = r.shares or {}
    fetch = shares.get("input", 0.0)
    rest = (1.0 - fetch) * base                    # the step without its wait for a batch
    now = workers.get(r.rank)
    # a batch takes this long to make: the main process's own fetch without workers; with W workers
    # keeping the loop waiting, they make W batches a step
    per_batch = fetch * base if not now else now * base
    want = max(1, math.ceil(per_batch / rest - 1e-9)) if rest > 0 else None
    free = None if host.cpus is None or host.cpu_percent is None else \
        max(0, math.floor(host.cpus * (1 - host.cpu_percent / 100) + 1e-9))
    fits_all = free is not None and want is not None and want - (now or 0) <= free
    short = "" if fits_all or free is None or want is None else \
        f"; the host has {free} free core{'s' if free != 1 else ''} for {want - (now or 0)} more workers: " \
        "they would take CPU from the compute"
    add(f.kind, "input fully overlapped with compute", fetch,
        "enough DataLoader workers, each on a core of its own, that a batch is always ready; "
        "host-to-device copies stay" + short, fits_all, want)
    if want is None or free is None:
        return
    fits = (now or 0) + free
    if want > fits and fits >= 1:
        step = max(rest, per_batch / fits)
        add(f.kind, f"{fits} DataLoader workers (the host's {free} free cores)", 1 - step / base,
            f"each worker makes a batch in {per_batch:.0f} ms as the main process does; "
            f"{want} would be needed to hide the input entirely", True, fits)


def _lateness(ranks: Sequence[RankStepStats]) -> tuple[dict[str, float], bool] | None:
    """How much each rank holds the job back, in shares of the step (larger: later): minus its
    blocked share in the collective (synchronized ranks: the last to arrive waits least), else its
    input + compute. Only differences between ranks mean anything."""
    if all(r.sync_wait_share is not None for r in ranks):
        return {r.rank: -(r.sync_wait_share or 0.0) for r in ranks}, True
    if not all(r.phases_ms for r in ranks):
        return None
    return {r.rank: sum((r.shares or {}).get(p, 0.0) for p in (*COMPONENTS["input"], *COMPONENTS["compute"]))
            for r in ranks}, False


def _stragglers(f: Finding, ranks: Sequence[RankStepStats], policy: WhatIfPolicy, add) -> None:
    """The job's step if the worst rank (then the k worst) did no more than the median rank: every
    rank's wait in the collective shrinks by the time the slowest rank held it, and the next
    slowest rank sets the pace (a gain of the worst rank's lateness less that rank's)."""
    late = _lateness(ranks)
    if late is None:
        return
    lateness, synced = late
    order = sorted(lateness, key=lambda k: -lateness[k])
    top = lateness[order[0]]
    how = ("the others' wait in the collective shrinks by its excess; nothing else changes" if synced else
           "its extra input + compute goes; assumes the ranks synchronize each step (no blocked time was "
           "measured to check it)")
    for k in range(1, min(policy.max_worst_ranks, max(1, len(order) // 2)) + 1):
        if k > 1 and lateness[order[k - 1]] - lateness[order[k]] < policy.min_gain_share:
            break   # fixing one rank more gains nothing: the same projection again
        who = tuple(int(x) for x in order[:k])
        what = f"rank {who[0]} at the median rank" if k == 1 else \
            f"the {k} worst ranks ({', '.join(map(str, who))}) at the median"
        add(f.kind, what, top - lateness[order[k]], how + f"; then rank {order[k]} sets the pace", synced, None, who)
