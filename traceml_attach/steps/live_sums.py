"""Running sums over a live window's steps (live_intervals.py): what ``steptime.step_totals`` sums
over a batch window's steps, kept as steps come and go instead of summed again each tick."""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable

from traceml_attach.steps.clock import Step
from traceml_attach.steps.phases import PHASES
from traceml_attach.steps.steptime import StepTotals, typical_limit_ns


class StepSums:
    """The steps' count, time, covered time, phase times and blocked times, and their sorted lengths."""

    def __init__(self) -> None:
        self.durs = array("q")                # every step's duration, sorted
        self.n_steps = self.steps_ns = self.covered = self.covered_ns = self.measured = self.measured_ns = 0
        self.phases_ns = dict.fromkeys(PHASES, 0)
        self.blocked_ns = dict.fromkeys(PHASES, 0)

    def add(self, steps: tuple[Step, ...], sign: int) -> None:
        """Add (1) or take away (-1) steps (an interval's: most often one, covered)."""
        for step in steps:
            dur = step.dur_ns
            self.n_steps += sign
            self.steps_ns += sign * dur
            if sign > 0:
                bisect.insort(self.durs, dur)
            else:
                del self.durs[bisect.bisect_left(self.durs, dur)]
            if not step.covered:
                continue
            self.covered += sign
            self.covered_ns += sign * dur
            phases_ns = self.phases_ns
            for phase, ns in step.phases_ns.items():
                if ns:
                    phases_ns[phase] += sign * ns
            blocked = step.blocked_sync_ns
            if blocked is not None:
                self.measured += sign
                self.measured_ns += sign * dur
                for phase, ns in blocked.items():
                    self.blocked_ns[phase] += sign * ns

    def median(self) -> float:
        durs = self.durs
        n = len(durs)
        if not n:
            return 0.0
        return float(durs[n // 2]) if n % 2 else (durs[n // 2 - 1] + durs[n // 2]) / 2

    def totals(self, step_ms: float | None, steps: Iterable[Step]) -> StepTotals:
        """``steptime.step_totals`` of the window's ``steps``, from the sums: only where a step is
        longer than a typical one (rare: an eval, a checkpoint) are the steps walked."""
        typical_ns, typical = self.covered_ns, dict(self.phases_ns)
        limit = typical_limit_ns(step_ms)
        if limit is not None and self.durs and self.durs[-1] > limit:
            longer = [s for s in steps if s.covered and s.dur_ns > limit]
            if longer and len(longer) < self.covered:
                for step in longer:
                    typical_ns -= step.dur_ns
                    for phase, ns in step.phases_ns.items():
                        typical[phase] -= ns
        return StepTotals(self.n_steps, self.steps_ns, self.covered, self.covered_ns, dict(self.phases_ns),
                          typical_ns, typical, self.measured, self.measured_ns, dict(self.blocked_ns))
