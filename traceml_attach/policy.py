"""Every threshold the diagnoses use, in one place (starting from TraceML's defaults)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepTimePolicy:
    # A non-compute component (input = DataLoader fetch + host-to-device copies, or wait)
    # whose median share of the step is at least this raises a warning...
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


DEFAULT_STEP_TIME_POLICY = StepTimePolicy()
