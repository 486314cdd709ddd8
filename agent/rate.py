"""Each process's sampling rate: the sampler decides it, the analysis only advises.

The analysis (traceml_attach/diagnose/rate.py) may find that a rank's steps are too short for
its rate, or long enough to sample more slowly, and advise a rate with its reason
(``advise``, from the session's analysis thread). The sampler asks ``rate_for`` when it starts
each py-spy window (and starts one at once when ``pending`` says the rate is to change) and
records a ``rate`` frame when a window at a new rate is emitted (agent/sampler.py), so a replay
of the recording reads the decision, never re-makes it.

What the sampler decides here:

- the rate stays within [base, max]: ``--rate`` (the floor: the user's own choice) and
  ``--max-rate`` (the CPU budget); a clamped advice says so in its reason;
- a process's rate goes down no sooner than HOLD_S after its last change, and up again no
  sooner than RAISE_HOLD_S after it: the analysis needs a few seconds at a new rate before
  its advice says anything about that rate (policy.RatePolicy.settle_s), and a raise that fell
  short (the steps' length is an upper bound, from a few seconds at the old rate) is followed
  up sooner than anything goes down;
- an advice that would not change the rate is dropped, and so is one drawn from data at
  another rate than the one in use (the analysis reads a change only once its ``rate`` frame and
  spans have arrived: until then its advice is about the old rate).

Hysteresis (raise below 10 samples a step, lower only at 20 at the lower rate) is the
analysis's: only it knows how long the steps are.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

HOLD_S = 10.0        # a process's rate goes down no sooner than this after its last change (s)...
RAISE_HOLD_S = 5.0   # ...and up again no sooner than this


@dataclass(frozen=True)
class Rate:
    """The rate a process is to be sampled at, and why it is not the base rate (None: it is)."""

    rate_hz: int
    why: str | None = None
    refines: bool = False   # a raise for a step time already known at the old rate (ingest RateChange)


class RateGovernor:
    """The rate of each process of one node, between ``base_hz`` and ``max_hz`` (thread-safe:
    the analysis thread advises, each sampler thread asks)."""

    def __init__(self, base_hz: int, max_hz: int, hold_s: float = HOLD_S, raise_hold_s: float = RAISE_HOLD_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.base_hz = base_hz
        self.max_hz = max(max_hz, base_hz)
        self.hold_s = hold_s
        self.raise_hold_s = raise_hold_s
        self._clock = clock
        self._lock = threading.Lock()
        self._current: dict[int, Rate] = {}
        self._changed_at: dict[int, float] = {}
        self._advice: dict[int, Rate] = {}
        self._seen_at: dict[int, int | None] = {}   # the rate each advice was drawn from

    @property
    def adaptive(self) -> bool:
        return self.max_hz > self.base_hz

    def advise(self, pid: int, rate_hz: int, why: str, seen_at_hz: int | None = None, refines: bool = False) -> None:
        """The analysis's advice for ``pid``: taken (clamped) at its next window, if at all.
        ``seen_at_hz``: the rate of the data it was drawn from; an advice drawn from another rate
        than the one in use is stale (the analysis had not yet read the last change) and dropped.
        ``refines``: it raises the rate of a step time already known (recorded with the change)."""
        with self._lock:
            self._advice[pid] = Rate(rate_hz, why, refines)
            self._seen_at[pid] = seen_at_hz

    def pending(self, pid: int) -> bool:
        """Whether ``pid``'s next window would start at another rate (its sampler then starts one
        at once, rather than at the end of the window that runs)."""
        with self._lock:
            return self._change(pid) is not None

    def rate_for(self, pid: int) -> Rate:
        """The rate for ``pid``'s next py-spy window: its current one, or the advice taken now."""
        with self._lock:
            chosen = self._change(pid)
            if chosen is None:
                return self._current.get(pid, Rate(self.base_hz))
            del self._advice[pid]
            self._current[pid] = chosen
            self._changed_at[pid] = self._clock()
            return chosen

    def _change(self, pid: int) -> Rate | None:
        """The rate the advice on ``pid`` changes it to now; None when it changes nothing (yet: an
        advice within the hold is kept until then, unless another replaces it)."""
        advice = self._advice.get(pid)
        current = self._current.get(pid, Rate(self.base_hz)).rate_hz
        seen_at = self._seen_at.get(pid)
        if advice is None or not self.adaptive or seen_at not in (None, current):
            self._advice.pop(pid, None)
            return None
        chosen = self._clamp(advice)
        if chosen.rate_hz == current:
            self._advice.pop(pid, None)
            return None
        hold = self.raise_hold_s if chosen.rate_hz > current else self.hold_s
        if self._clock() - self._changed_at.get(pid, -float("inf")) < hold:
            return None
        return chosen

    def forget(self, pid: int) -> None:
        """``pid`` has exited: nothing of it is kept."""
        with self._lock:
            for table in (self._current, self._changed_at, self._advice, self._seen_at):
                table.pop(pid, None)

    def _clamp(self, advice: Rate) -> Rate:
        if advice.rate_hz > self.max_hz:
            return Rate(self.max_hz, f"{advice.why} (it would take {advice.rate_hz} Hz; --max-rate is {self.max_hz})",
                        advice.refines)
        if advice.rate_hz <= self.base_hz:
            return Rate(self.base_hz, advice.why)
        return advice
