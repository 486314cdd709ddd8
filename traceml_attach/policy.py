"""Every threshold the diagnoses use, in one place (starting from TraceML's defaults)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepTimePolicy:
    # A non-compute component (input = DataLoader fetch + host-to-device copies, or wait)
    # whose share of the typical step (steps up to 2x the median; median over ranks) is at
    # least this raises a warning...
    share_warn: float = 0.10
    # ...and at least this, a critical finding.
    share_crit: float = 0.20
    # Compute (forward + backward + optimizer) at least this share of the median step,
    # with no other component at share_warn, is COMPUTE-BOUND (informational).
    compute_bound: float = 0.90
    # Complete steps needed before any warning; with fewer the window is WARMUP.
    min_steps_warn: int = 2
    # Complete steps needed before a finding may be critical; with fewer it stays a warning.
    min_steps_crit: int = 20
    # Straggler score = (victim's visible time - culprit's) / victim's step, where "visible"
    # is the time blocked in the synchronizing phase (DDP's all-reduce in backward), or, with
    # no such wait, the input + compute burden. A warning at this score...
    straggler_warn: float = 0.10
    # ...critical at this one.
    straggler_crit: float = 0.20
    # A cause (input or compute) is named only when its excess covers this much of the score.
    straggler_cause: float = 0.80
    # HANG: no rank completed a step for this long, and every rank's call path stopped changing
    # for at least half of it.
    hang_s: float = 10.0


DEFAULT_STEP_TIME_POLICY = StepTimePolicy()
