"""HANG: no rank completes a step and the stacks stop changing; name the odd rank out.
STOPPED: a rank's process is stopped (SIGSTOP, a debugger), which the agent saw in /proc."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from traceml_attach.diagnose.finding import Finding, HangEvidence, RankStack
from traceml_attach.diagnose.kinds import Kind
from traceml_attach.diagnose.step import NO_STEP_YET
from traceml_attach.policy import DEFAULT_STEP_TIME_POLICY, StepTimePolicy
from traceml_attach.steps.batch_timeline import SYNC_PHASES, Timeline
from traceml_attach.steps.loopframe import user_frame


@dataclass(frozen=True)
class RankState:
    rank: str
    phase: str
    label: str | None
    where: str | None       # innermost user-code frame, "fn (file:line)"
    src: str | None         # its source line
    stack: tuple[str, ...]  # outermost first
    idle_s: float           # since the last step boundary (or the window start)
    unchanged_s: float      # since the call path last changed

    @property
    def synchronizing(self) -> bool:
        return (self.phase, self.label) in SYNC_PHASES   # classify labels waits only

    def stalled(self, policy: StepTimePolicy) -> bool:
        """No step for policy.hang_s, and the call path unchanged for half of that."""
        return self.idle_s >= policy.hang_s and self.unchanged_s >= policy.hang_s / 2

    @property
    def what(self) -> str:
        return self.phase if self.phase != "wait" else f"wait/{self.label or 'other'}"


def rank_state(rank: str, tl: Timeline, resumed_ns: int | None = None) -> RankState | None:
    """Where the rank is at the end of its timeline; a process that ran again at ``resumed_ns``
    (after a SIGSTOP or a debugger) has been idle and unchanged since then at most."""
    if not tl.segments or tl.end_ns is None:
        return None
    last = tl.segments[-1]
    start = max(tl.bounds[-1] if tl.bounds else tl.segments[0].ts_ns, resumed_ns or 0)
    stuck = max(tl.stuck_since_ns or tl.end_ns, resumed_ns or 0)
    user = user_frame(last.span.stack)
    return RankState(
        rank, last.phase, last.label, user.where if user else None, user.src if user else None,
        tuple(f.where for f in last.span.stack), max(0.0, (tl.end_ns - start) / 1e9),
        max(0.0, (tl.end_ns - stuck) / 1e9),
    )


def _odd_ones(states: list[RankState]) -> list[RankState]:
    waiting = [s for s in states if s.synchronizing]
    elsewhere = [s for s in states if not s.synchronizing]
    if waiting and elsewhere:
        return elsewhere
    groups = Counter((s.what, s.where) for s in states)
    if len(groups) < 2:
        return []
    smallest = min(groups.values())
    if list(groups.values()).count(smallest) > 1:
        return []
    return [s for s in states if groups[(s.what, s.where)] == smallest]


def detect_hang(timelines: dict[str, Timeline], policy: StepTimePolicy = DEFAULT_STEP_TIME_POLICY,
                resumed: dict[str, int] | None = None) -> Finding | None:
    """``resumed``: rank -> when its process last ran again after being stopped (ns)."""
    resumed = resumed or {}
    states = [s for rank, tl in timelines.items() if (s := rank_state(rank, tl, resumed.get(rank))) is not None]
    if not states or len(states) < len(timelines):
        return None
    if not all(s.stalled(policy) for s in states):
        return None
    idle = min(s.idle_s for s in states)
    odd = _odd_ones(states)
    rest = [s for s in states if s not in odd]
    common = rest[0] if odd and rest else None
    evidence = HangEvidence(idle, {int(s.rank): RankStack(s.what, s.where, s.src, s.stack) for s in states},
                            tuple(int(s.rank) for s in odd), common.stack if common else None)
    if odd:
        o = odd[0]
        names = ", ".join(s.rank for s in odd)
        others = ", ".join(s.rank for s in rest)
        why = (f"no rank completed a step for {idle:.0f} s and the stacks stopped changing; "
               f"rank {names} is in {o.what} at {o.where}" + (f" `{o.src}`" if o.src else ""))
        if common:
            why += (f", while rank{'s' if len(rest) > 1 else ''} {others} wait{'' if len(rest) > 1 else 's'} "
                    f"in {common.what} at {common.where}" + (f" `{common.src}`" if common.src else ""))
        return Finding(Kind.HANG, "critical", f"the job is stuck: rank {names} is not where the others are",
                       why, f"look at rank {o.rank}'s {o.where}; run `traceml stacks --pid PID` for every "
                       "rank's current stack", o.rank, evidence)
    s0 = states[0]
    return Finding(Kind.HANG, "critical", "the job is stuck: every rank is at the same place",
                   f"no rank completed a step for {idle:.0f} s and the stacks stopped changing; all ranks "
                   f"are in {s0.what} at {s0.where}", "look for a collective that one rank never reaches, "
                   "a dead DataLoader worker or an external dependency; `traceml stacks --pid PID`",
                   None, evidence)


def waits_on_children(finding: Finding, timelines: dict[str, Timeline], busy: dict[str, list[tuple[int, float]]]
                      ) -> Finding | None:
    """What a HANG, or NO DATA with no step and no training phases seen (``finding``, its summary
    ``step.NO_STEP_YET``), is where no rank's process shows a training loop and each has a child of
    its own that worked (``busy``: rank -> (child PID, median % of a core) over the stretch judged,
    the busiest first): a process that waits on its child. A wrapper script that started the
    training as a child and reads its output (a PID a user may give by mistake) shows one call path
    and no step: it was said stuck, critically, and before that told only to wait. The children may
    be the job's own helpers too (a pool that prepares the data before the loop starts:
    ``datasets.map(num_proc=...)``), so the advice is given for both. None where some rank has a
    loop or no busy child: the finding stands (a loop that waits on a DataLoader worker that never
    returns its batch is stuck, however busy that worker is)."""
    hang = finding.evidence if isinstance(finding.evidence, HangEvidence) else None   # (else NO DATA's)
    if ((hang is None and finding.summary != NO_STEP_YET) or not timelines
            or not all(busy.get(rank) and tl.loop is None for rank, tl in timelines.items())):
        return None
    rank, tl = next(iter(timelines.items()))
    child, pct = busy[rank][0]
    more = sum(len(children) for children in busy.values()) - 1
    others = f" (and {more} more)" if more else ""
    if hang is not None:
        stack = hang.ranks.get(int(rank))
        why = (f"rank {rank} (PID {tl.pid}) completed no step for {hang.idle_s:.0f} s: no training loop was "
               f"found in it, and its call path stayed at {stack.where if stack and stack.where else 'one place'}")
    else:
        why = f"no training loop was found in rank {rank}'s process (PID {tl.pid})"
    why += f", while its child process {child}{others} worked {pct:.0f}% of a core"
    why += ": it waits on that child" if hang is not None else ""
    if len(timelines) > 1:
        why += f"; each of the {len(timelines)} ranks has a child of its own that works"
    summary = NO_STEP_YET if hang is None else f"no training step here: PID {tl.pid} waits on its child process {child}"
    action = (f"if the child runs the training (a script that started it, not a launcher traceml knows), "
              f"attach to it: `traceml attach --pid {child}`; under torchrun, give the launcher's PID; if it is "
              "the job's own helper (a pool preparing the data before training starts), wait for the steps")
    return Finding(Kind.NO_DATA, "info", summary, why, action)


def detect_stopped(stopped: dict[str, tuple[int, int, str, int]], timelines: dict[str, Timeline]) -> Finding | None:
    """STOPPED when a rank's process is stopped now. ``stopped``: rank -> (pid, since ns, why, the
    newest reading of the process in ns, which goes on while it is stopped); each rank's timeline
    ends where it stopped (its spans leave the stopped stretch out)."""
    if not stopped:
        return None
    states = {rank: rank_state(rank, tl) for rank, tl in timelines.items()}
    rank = min(stopped, key=lambda r: (len(r), r))
    pid, since_ns, why, newest_ns = stopped[rank]
    state = states.get(rank)
    stopped_s = max(0.0, (newest_ns - since_ns) / 1e9)
    clock = time.strftime("%H:%M:%S", time.localtime(since_ns / 1e9))
    at = (f"; it stopped in {state.what} at {state.where}" + (f" `{state.src}`" if state.src else "")
          if state is not None and state.where else "")
    others = sorted(set(stopped) - {rank}, key=lambda r: (len(r), r))
    also = f" (and rank{'s' if len(others) > 1 else ''} {', '.join(others)})" if others else ""
    resume = ("it runs again when the debugger lets it go (continue or detach)" if "debugger" in why
              else f"`kill -CONT {pid}` resumes it")
    evidence = HangEvidence(stopped_s, {int(r): RankStack(s.what, s.where, s.src, s.stack)
                                        for r, s in states.items() if s is not None},
                            tuple(int(r) for r in sorted(stopped, key=lambda r: (len(r), r))), None)
    return Finding(Kind.STOPPED, "critical", f"rank {rank}{also} is not running: {why}",
                   f"process {pid} has been stopped for {stopped_s:.0f} s, since {clock}{at}; no sample counts "
                   "that time as a phase",
                   f"{resume}; traceml goes on when it does", int(rank), evidence)
