"""A window that fits the step: how long a snapshot samples where its steps are long.

A snapshot samples for 10 s unless told otherwise. Steps of a second or more, or steps whose
boundaries mostly go unseen, leave few boundaries in that: too few to time steps that vary
(a DataLoader whose workers deliver in bursts), to count the micro-batches of an optimizer step
from its optimizer's visits, or to fit a period to the few boundaries seen. A longer window holds
more of them, as a faster rate holds more samples of a short step (diagnose/rate.py).

So where the user gave no length, the analysis of the first 10 s advises (``advise_window``) that
the snapshot samples on, to ``most_s`` (--max-seconds; by default the live view's window,
LIVE_WINDOW_S, which the summary details whole), where a rank's step time is unknown with fewer
than FEW_BOUNDARIES step boundaries seen in it: a rank counting steps it cannot time. Never for a
job that is stuck (a longer window of a hang holds no more steps), never for a step time already
known, and never for one unknown with many boundaries seen (steps too short for the rate, which the
rate's advice answers). Steps under 5 samples whose boundaries mostly go unseen are sampled on for
too: where their micro-batches are what is short (an optimizer step of 800 ms at 50 Hz), the
optimizer steps are then known; where the steps themselves are, the longer window buys nothing.
Data flows one way: the session decides, records its decision as an ``extend`` frame (the length
and why), and says so on stderr; the summary's header names it, and a replay reads it from the
recording.

Measured on the quick grid (bench/sim_grid.py; every rank-window whose steps get 5 samples or
more): of the 473 unknown after 10 s, the 292 with fewer than 40 boundaries seen were read again
over 30 s, and 199 of those were then known; in all, 3,778 of 4,248 known before, 3,980 of 4,272
after, none beyond 5% (docs/steps.md, "A window that fits the step").
"""

from __future__ import annotations

from dataclasses import dataclass

from traceml_attach.diagnose.analysis import Analysis
from traceml_attach.diagnose.kinds import Family, family
from traceml_attach.policy import FEW_BOUNDARIES


@dataclass(frozen=True)
class WindowAdvice:
    """The analysis's advice on a snapshot's length, for the session to take or not."""

    seconds: float   # how long the snapshot should sample in all
    why: str


def advise_window(an: Analysis, elapsed_s: float, most_s: float) -> WindowAdvice | None:
    """Whether a snapshot that has sampled ``elapsed_s`` should sample on, to ``most_s``: where a
    rank's step time is unknown with fewer than FEW_BOUNDARIES boundaries seen, and some (none in
    10 s says nothing of what 30 s would hold: a loop not found, a job that does not step; see the
    module doc); None otherwise."""
    if most_s <= elapsed_s or any(family(f.kind) is Family.STUCK for f in an.findings):
        return None
    few = [r for r in an.ranks if r.step_ms is None and 0 < r.steps < FEW_BOUNDARIES]
    if not few:
        return None
    fewest = min(few, key=lambda r: r.steps)
    seen = f"{fewest.steps} step boundar{'y' if fewest.steps == 1 else 'ies'}"
    who = f"rank {fewest.rank}'s" if len(an.ranks) > 1 else "the"
    return WindowAdvice(most_s, f"{who} step time was unknown after {elapsed_s:.0f} s, with only {seen} seen; "
                        f"{most_s:.0f} s hold about {most_s / elapsed_s:.0f} times as many")
