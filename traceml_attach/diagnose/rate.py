"""A rate that fits the step: where a rank's steps are found after its rate changed, and the
rate the analysis advises its sampler to take.

Data flows one way. The sampler decides each process's rate (agent/rate.py) and records every
change as a ``rate`` frame; the analysis reads those frames (``stretch``) and, from what it
found, advises (``advise_rates``). A replay reads the same frames, so it finds the same steps
whether or not anything advises it.

**Mixed rates.** The step finder assumes one rate for a process's window: the blur of a boundary,
the chance that one goes unseen and what counts as a hole all scale with it. When a rank's rate
changed inside the window, its steps are found in the longest stretch that ends at the window's
end, at the highest rate that all of the stretch was sampled at least at, among the stretches
that start at the window's start or at a change at least ``settle_s`` old. So after a raise the
rank is read as before, at its old rate over the whole window, until ``settle_s`` has been
sampled at the new one; then from the change on, at the new rate. A raise that only refines a
step time already known at the old rate (``RateChange.refines``: its ends blur, or uneven steps
move its median) waits longer: until the new rate holds ``refine_share`` of the window, the old
rate's reading of all of it stands (read from 3 s on, such a raise late in a snapshot left too
few steps to know the step time, or counted a third of them). After a lowering, the whole
window is read at the lower rate at once (a span sampled faster than assumed errs on the safe
side). The batch analysis and the live trackers both follow ``stretch``.

**A sampler that lags.** py-spy reads every thread at each sample: with a thousand threads it
reaches a process a few times a second whatever rate it was asked. The windows say how many
samples it took, of how many threads, seen for how long in all (``reached_hz``); where that falls under
``lagging_share`` of the rate, the steps are found at the rate reached (``lagging``), and no
faster rate is advised: it cannot help.

**Advice** (policy.RatePolicy). A rank whose step time is unknown because its steps are too
short (every step is at most ``step_upper_ns``, and that is under ``raise_below_samples``
samples at its rate) is advised the rate that gives such a step ``raise_to_samples``; one whose
step time is unknown because its optimizer is seen too rarely to tell gradient accumulation's
micro-batches from steps (``UNDECIDED``) is advised the rate its clock suggests; one whose steps
are long enough but whose boundaries mostly go unseen (e^-λ over MOSTLY_UNSEEN: a step that spends
99% of itself in one place) the rate that leaves UNSEEN_TARGET of them unseen (λ grows with the
rate). A rank whose step is known but gets fewer than ``raise_below_samples`` is advised the
rate that gives it ``raise_to_samples`` too: its ends blur by a tenth of a step or more, and where
the steps vary that moves their median (read from 100 Hz, the grid's known steps of 5-10 samples
were 5.0-10.3% off in 22 rank-windows). A rank
sampled faster than the base rate whose steps (micro-batches, with accumulation) would still get
``lower_from_samples`` at a lower rate is advised that rate, if its optimizer is still seen in
most steps there (else the rate would swing back up). Never faster for steps already long
enough, never from a stretch too young to say (``advise_after_s``), and never while a change is
settling (the rank is still read at another rate than its sampler's). A rank at --max-rate whose
steps are still too short there, or whose boundaries still mostly go unseen there, goes back to the
base rate (``futile``): the faster rate bought no step time; that return is recorded with its
reason (GAVE_UP, GAVE_UP_UNSEEN), and while it is the rank's rate in
effect the rank is not raised again (``gave_up``). Ranks that synchronize
every step share one step: the fastest rate one of them is advised is advised to all of them. They
take the same steps too: where every one's step is known but their counts over the same stretch
are apart, the others missed short steps that the rank counting the most saw, and the rate that
gives those SHORT_SAMPLES is advised (``counts_apart``); a rank so raised is not lowered again
while that raise is its rate in effect.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from traceml_attach.diagnose.ranks import synchronized
from traceml_attach.ingest.stream import Recording
from traceml_attach.policy import (
    COUNTS_APART,
    DEFAULT_RATE_POLICY,
    HIDDEN_TARGET,
    LAGGING_GRID,
    MAX_UNSEEN,
    MOSTLY_UNSEEN,
    SHORT_SAMPLES,
    UNDECIDED_SEEN,
    UNSEEN_TARGET,
    RatePolicy,
    round_up,
)
from traceml_attach.steps.batch_timeline import Timeline, step_skew
from traceml_attach.steps.clock import IRREGULAR, MISSED, SHIFTED, SHORT, UNDECIDED, UNEVEN, unseen_share

# Why an unknown clock of these causes asks for the faster rate it suggests (peersplit._missed_faster,
# accumulation._comb_breaks)
_RATE_FOR = {
    MISSED: "the ranks it steps with saw boundaries it missed, far more often than its e^-λ says",
    SHIFTED: "the optimizer is seen too rarely on one side of a change in the steps' length to count it",
}

# The reason a ``futile`` return to the base rate is recorded with (its rate frame's ``why``)
GAVE_UP = "its steps are too short for every rate the sampler may take"
GAVE_UP_UNSEEN = "its step boundaries mostly go unseen at every rate the sampler may take"
SHORT_MISSED = "short steps some ranks miss"
_NS = 1_000_000_000


def stretch(rec: Recording, pid: int, start_ns: int, end_ns: int,
            policy: RatePolicy = DEFAULT_RATE_POLICY) -> tuple[int, int]:
    """(from_ns, rate_hz): where in [start_ns, end_ns) ``pid``'s steps are found, and at what rate
    (see the module doc)."""
    since, rate = _asked(rec, pid, start_ns, end_ns, policy)
    return since, _reached(rec, pid, since, end_ns, rate, policy)


def earlier_rate(rec: Recording, pid: int, start_ns: int, since_ns: int,
                 policy: RatePolicy = DEFAULT_RATE_POLICY) -> int:
    """The rate the stretch before ``since_ns`` (where ``stretch`` found the rank's steps from) is
    read at: the lowest it was sampled at there, or the rate py-spy reached where that lags."""
    changes = [c.rate_hz for c in rec.rates.get(pid, ()) if start_ns < c.ts_ns < since_ns]
    return _reached(rec, pid, start_ns, since_ns, min([rec.rate_at(pid, start_ns), *changes]), policy)


def lag_of(rec: Recording, pid: int, start_ns: int, end_ns: int,
           policy: RatePolicy = DEFAULT_RATE_POLICY) -> tuple[int, int, int] | None:
    """(the rate reached, the rate asked, threads a sample) where ``stretch`` reads ``pid`` at the
    rate py-spy reached, not the one asked (``lagging``); None where it kept up."""
    since, rate = _asked(rec, pid, start_ns, end_ns, policy)
    lag = lagging(rec, pid, since, end_ns, rate, policy)
    return None if lag is None else (lag[0], rate, lag[1])


def _asked(rec: Recording, pid: int, start_ns: int, end_ns: int, policy: RatePolicy) -> tuple[int, int]:
    """``stretch`` at the rates the sampler was asked."""
    changes = rec.rates.get(pid)
    if not changes:
        return start_ns, rec.rate_hz
    later = [c for c in changes if start_ns < c.ts_ns < end_ns]
    settled = end_ns - int(policy.settle_s * _NS)
    # a raise that refines a known step time: the old rate's reading, over the whole window, stands
    # until the new rate's holds refine_share of it, or of the process's part of it (a restarted
    # worker's): fewer, finer steps are no better answer
    spans = rec.spans.get(pid)
    first = max(start_ns, spans[0].ts_ns) if spans else start_ns
    refined = end_ns - int(policy.refine_share * (end_ns - first))
    best = (start_ns, min([rec.rate_at(pid, start_ns), *(c.rate_hz for c in later)]))
    for i, change in enumerate(later):
        if change.ts_ns > settled:
            break
        if change.refines and change.ts_ns > refined:
            continue
        rate = min([change.rate_hz, *(c.rate_hz for c in later[i + 1:])])
        if rate > best[1]:
            best = (change.ts_ns, rate)
    return best


def reached_hz(rec: Recording, pid: int, start_ns: int, end_ns: int) -> tuple[float, int] | None:
    """(samples a second, threads a sample) that py-spy reached on ``pid``'s threads over its
    windows in [start_ns, end_ns): py-spy counts a sample for each thread it reads at each
    sample, so samples over the time its threads were seen (``thread_ns``, summed over them: a
    short-lived thread counts for its life) is the rate reached. None where no window says
    (older recordings)."""
    samples = 0
    thread_ns = threads = 0
    for w in rec.windows.get(pid, ()):
        if (w.samples is None or not w.thread_ns or not w.threads or w.start_ns is None or w.end_ns is None
                or w.end_ns <= start_ns or w.start_ns >= end_ns or w.end_ns - w.start_ns < _NS // 2):
            continue
        samples += w.samples
        thread_ns += w.thread_ns
        threads = max(threads, w.threads)
    return (samples * _NS / thread_ns, threads) if thread_ns else None


def lagging(rec: Recording, pid: int, start_ns: int, end_ns: int, rate_hz: int,
            policy: RatePolicy = DEFAULT_RATE_POLICY) -> tuple[int, int] | None:
    """(the rate reached, threads a sample) where py-spy reached ``pid``'s threads less than
    ``lagging_share`` of ``rate_hz``'s samples a second; None where it kept up."""
    reached = reached_hz(rec, pid, start_ns, end_ns)
    if reached is None or reached[0] >= policy.lagging_share * rate_hz:
        return None
    floor = max((g for g in LAGGING_GRID if g <= reached[0]), default=1)
    return floor, reached[1]


def _reached(rec: Recording, pid: int, start_ns: int, end_ns: int, rate_hz: int, policy: RatePolicy) -> int:
    """``rate_hz``, or the rate py-spy reached where it lags behind it (``lagging``)."""
    lag = lagging(rec, pid, start_ns, end_ns, rate_hz, policy)
    return rate_hz if lag is None else lag[0]


@dataclass(frozen=True)
class RateAdvice:
    """The analysis's advice on one rank's rate, for its sampler to take or not."""

    pid: int
    rank: str
    rate_hz: int
    why: str
    seen_at_hz: int   # the rate of the data it was drawn from (the sampler drops it once at another)
    refines: bool = False   # a raise for a step time known at the rate in use (``stretch``)


def advise_rates(rec: Recording, pids: dict[str, int], timelines: dict[str, Timeline], end_ns: int,
                 policy: RatePolicy = DEFAULT_RATE_POLICY) -> list[RateAdvice]:
    """The ranks whose rate should change, from their timelines up to ``end_ns``. Ranks that
    synchronize every step share one step: the fastest rate one of them needs is every one's (a
    rank whose first window has not arrived yet included)."""
    out: dict[str, RateAdvice] = {}
    for rank, pid in pids.items():
        tl = timelines.get(rank)
        if tl is None or tl.start_seen_ns is None or tl.end_ns is None:
            continue
        rate = rec.rate_at(pid, end_ns)
        if tl.rate_hz != rate or tl.end_ns - tl.start_seen_ns < policy.advise_after_s * _NS:
            continue   # a change still settling, or too little data at this rate to say
        raise_it = None if gave_up(rec, pid, end_ns) else faster(tl, policy)
        # (kept where it was raised for short steps its peers' counts showed missed: at the rate that
        # sees them the counts agree, and a lower one would miss them again)
        lower = None if _raised_for_short(rec, pid, end_ns) else slower(tl, rec.rate_hz, policy)
        advice = futile(tl, rec.rate_hz, rec.max_rate_hz) or raise_it or lower
        if advice is not None and advice[0] != rate:
            out[rank] = RateAdvice(pid, rank, *advice, rate, refines=advice[0] > rate and tl.clock.known)
    sync = synchronized(rec, pids)
    short = counts_apart(rec, pids, timelines, end_ns, policy) if sync else None
    if short is not None and (short.rank not in out or out[short.rank].rate_hz < short.rate_hz):
        out[short.rank] = short
    raises = [a for a in out.values() if a.rate_hz > rec.rate_at(a.pid, end_ns)]
    if raises and sync:
        top = max(raises, key=lambda a: a.rate_hz)
        for rank, pid in pids.items():
            tl = timelines.get(rank)
            settling = tl is not None and tl.rate_hz != rec.rate_at(pid, end_ns)
            own = out.get(rank)
            if own is top or settling or rec.rate_at(pid, end_ns) >= top.rate_hz or gave_up(rec, pid, end_ns):
                continue
            if own is None or own.rate_hz < top.rate_hz:
                # it refines this rank's step time too only where that is known
                out[rank] = RateAdvice(pid, rank, top.rate_hz, f"{top.why} on rank {top.rank}, whose step it shares",
                                       rec.rate_at(pid, end_ns), top.refines and tl is not None and tl.clock.known)
    return list(out.values())


def _raised_for_short(rec: Recording, pid: int, end_ns: int) -> bool:
    """Whether ``pid``'s rate in effect at ``end_ns`` is a raise for short steps some ranks missed
    (``counts_apart``): not lowered while that stands, since at that rate the counts agree, and
    a lower one would miss them again."""
    changes = [c for c in rec.rates.get(pid, ()) if c.ts_ns <= end_ns]
    return bool(changes) and (changes[-1].why or "").startswith(SHORT_MISSED)


def counts_apart(rec: Recording, pids: dict[str, int], timelines: dict[str, Timeline], end_ns: int,
                 policy: RatePolicy = DEFAULT_RATE_POLICY) -> RateAdvice | None:
    """Ranks that synchronize every step take the same steps: where, over the stretch they all
    sampled, the rank that counted the most counted more than COUNTS_APART (and 2) more than
    another, the others missed boundaries it saw, and where its short steps (its intervals' 10th
    percentile) get under SHORT_SAMPLES samples, the rate that gives them that many, for that rank
    (``advise_rates`` gives it to every rank). A step known from the steps of a long kind says
    nothing of the short ones it lies between: 8 ranks whose workers deliver in bursts of 6 (a
    ready batch's ~13-ms step between ~120-ms ones), at 200 Hz: the step within 1%, but 82-93 of
    the job's 93 steps counted; at 400 Hz, 91-93 on every rank. Only where every rank's step is
    known at the rate in use, one micro-batch a step (a rank said to accumulate counts its
    optimizer steps), and none of them has given up on a faster rate."""
    known = {}
    for rank, pid in pids.items():
        tl = timelines.get(rank)
        if (tl is None or not tl.clock.known or tl.micro_batches != 1 or tl.start_seen_ns is None
                or tl.end_ns is None or tl.rate_hz != rec.rate_at(pid, end_ns)
                or tl.end_ns - tl.start_seen_ns < policy.advise_after_s * _NS or gave_up(rec, pid, end_ns)):
            return None
        known[rank] = tl
    if len(known) < 2:
        return None
    lo = max(tl.start_seen_ns for tl in known.values() if tl.start_seen_ns is not None)
    hi = min(tl.end_ns for tl in known.values() if tl.end_ns is not None)
    counts = {rank: sum(1 for s in tl.steps if lo <= s.start_ns and s.end_ns <= hi) for rank, tl in known.items()}
    most = max(counts, key=counts.__getitem__)
    least = min(counts, key=counts.__getitem__)
    if counts[most] - counts[least] <= max(2, COUNTS_APART * counts[most]):
        return None
    tl = known[most]
    whole = sorted(iv.dur_ns for iv in tl.intervals if iv.covered and not iv.swallowing)
    if len(whole) < policy.min_intervals:
        return None
    short = whole[len(whole) // 10]
    samples = short * tl.rate_hz / _NS
    rate = policy.raised(short, tl.rate_hz, SHORT_SAMPLES) if samples < SHORT_SAMPLES else None
    if rate is None:
        return None
    return RateAdvice(pids[most], most, rate, (
        f"{SHORT_MISSED}: over the same {(hi - lo) / _NS:.0f} s rank {most} counted {counts[most]} steps, rank {least} "
        f"{counts[least]}; steps of {short / 1e6:.0f} ms get {samples:.1f} samples at {tl.rate_hz} Hz"),
        tl.rate_hz, refines=True)


def faster(tl: Timeline, policy: RatePolicy = DEFAULT_RATE_POLICY) -> tuple[int, str] | None:
    """The rate that would tell ``tl``'s steps apart, when they are unknown for being too short for
    its rate, for an optimizer seen too rarely or for boundaries that mostly go unseen, or known
    from too few samples a step (``_known_faster``); None otherwise (long enough, or unknown for
    another reason)."""
    clock = tl.clock
    upper = clock.step_upper_ns
    if clock.cause == UNDECIDED and clock.suggested_rate_hz and len(tl.intervals) >= policy.min_intervals:
        rate = min(clock.suggested_rate_hz, policy.most_hz)
        return (rate, "the optimizer is seen too rarely to tell gradient accumulation's micro-batches from steps"
                ) if rate > tl.rate_hz else None
    if clock.known:   # (on the union's comb, for the boundaries its own returns mostly leave unseen too)
        return _known_faster(tl, policy) or _unseen_faster(tl, policy, clock.own_unseen)
    if clock.cause == UNEVEN and not clock.suggested_rate_hz:
        return _hidden_faster(tl, policy)
    if clock.cause in _RATE_FOR and clock.suggested_rate_hz:
        rate = min(clock.suggested_rate_hz, policy.most_hz)
        return (rate, _RATE_FOR[clock.cause]) if rate > tl.rate_hz else None
    if not clock.suggested_rate_hz:
        return None
    # a median the samples' lag moves (batch_timeline.judged_blurred), or a comb of steps so uneven
    # that its peers' boundaries refute it (steps/peersplit.py) at few samples a step
    if clock.cause in (IRREGULAR, UNEVEN):
        rate = min(clock.suggested_rate_hz, policy.most_hz)
        why = "the samples' lag at each end of steps so uneven moves their median"
        return (rate, why) if rate > tl.rate_hz else None
    unseen = _unseen_faster(tl, policy)
    if not upper or len(tl.intervals) < policy.min_intervals:
        return unseen
    samples = upper * tl.rate_hz / _NS
    if samples >= policy.raise_below_samples:
        return unseen
    raised = policy.raised(upper, tl.rate_hz)
    if raised is None:
        return None   # as fast as it goes
    return raised, (f"steps of at most {upper / 1e6:.0f} ms get {samples:.1f} samples at {tl.rate_hz} Hz, "
                  f"under {policy.raise_below_samples:.0f}")


def _known_faster(tl: Timeline, policy: RatePolicy) -> tuple[int, str] | None:
    """The rate that gives a known step ``raise_to_samples``, where it gets fewer than
    ``raise_below_samples`` at ``tl``'s rate. Known is not exact there: each end of a step is blurred
    by a sampling interval, a tenth or more of such a step, and where the steps vary (a loader that
    is slow now and then, workers delivering in bursts, cores shared) the blur moves their median.
    Read from the attacher's 100 Hz, 22 of the grid's rank-windows at 5-10 samples a step were known
    5.0-10.3% off (a 50-ms step with two of five steps' input slowed: +5.0% on 8 ranks), none of
    them at 15; the step time printed until the raise settles is that of the rate in use."""
    step = tl.clock.typical_ns
    if not step or len(tl.intervals) < policy.min_intervals:
        return None
    samples = step * tl.rate_hz / _NS
    if samples < policy.raise_below_samples:
        raised = policy.raised(step, tl.rate_hz)
        return None if raised is None else (raised, (
            f"steps of {step / 1e6:.0f} ms get {samples:.1f} samples at {tl.rate_hz} Hz, under "
            f"{policy.raise_below_samples:.0f}: their ends blur by a tenth of a step or more"))
    if samples >= policy.uneven_below_samples:
        return None
    skew = step_skew(tl, step)
    # (either way: short steps among long ones, 2 micro-batches a step whose 3 workers deliver in
    # bursts, put the mean 3.3% under the median, and the blur of 50 Hz moved it -5.5% there)
    if abs(skew) <= policy.uneven_skew:
        return None
    raised = policy.raised(step, tl.rate_hz, policy.uneven_to_samples)
    return None if raised is None else (raised, (
        f"steps of {step / 1e6:.0f} ms get {samples:.1f} samples at {tl.rate_hz} Hz, and their mean is "
        f"{abs(skew):.1%} {'over' if skew > 0 else 'under'} their median: steps of uneven lengths, and the blur "
        "of their ends moves the median of steps so uneven"))


def _hidden_faster(tl: Timeline, policy: RatePolicy) -> tuple[int, str] | None:
    """The rate for a rank whose slow steps left its median unknown because a draw decided which of
    its long intervals hide a boundary (``clock.uneven_clock``), its e^-λ over MAX_UNSEEN: where every
    boundary is seen each long interval is one slow step, no draw, and λ grows with the rate, so at
    least the rate at which a boundary goes unseen at most HIDDEN_TARGET of the time; but the blur of
    the steps' ends moves the median of steps so uneven, so also the rate that gives the median
    interval ``hidden_to_samples``. 8 ranks of ~130-ms steps, 40% of them fetching their batch
    1.3-2.2 times as long, at 100 Hz (e^-λ 1.1-1.8%): unknown; over 30 s, +5.4% at 200 Hz (where a
    boundary goes unseen 0.02% of the time), +3.4% at 300, +1.9% at 400 (advised), 184-185 of 185
    steps."""
    unseen = tl.clock.unseen
    if unseen is None or not MAX_UNSEEN < unseen < 1.0 or not tl.intervals:
        return None
    median = statistics.median(iv.dur_ns for iv in tl.intervals)
    sharp = policy.raised(median, tl.rate_hz, policy.hidden_to_samples) or tl.rate_hz
    rate = max(policy.seeing(unseen, tl.rate_hz, HIDDEN_TARGET), sharp)
    if rate <= tl.rate_hz:
        return None
    return rate, (f"slow steps, among which a boundary goes unseen {unseen:.1%} of the time at {tl.rate_hz} Hz: "
                  "which long intervals hide one cannot be told, and the blur of their ends moves the median")


def _unseen_faster(tl: Timeline, policy: RatePolicy, unseen: float | None = None) -> tuple[int, str] | None:
    """The rate at which a step's boundary would go unseen at most UNSEEN_TARGET of the time, where
    more than MOSTLY_UNSEEN do at ``tl``'s rate (e^-λ, measured on the visits outside the loop's
    dominant place: λ grows with the rate). Steps long enough for the rate, but spent 99% in one
    place, leave too few boundaries for a period: 4 ranks of 50-ms steps waiting 99% of the time
    showed 3-11 boundaries in 10 s at 100 Hz, and at 400 Hz their step, within 1%. ``unseen``: e^-λ
    where it is not the clock's (a clock of the union's comb: the rank's own returns'); 8 ranks of
    500-ms steps waiting 99% of them, known on it at 200 Hz and counted up to 6.8% off, counted
    every step at 400."""
    unseen = tl.clock.unseen if unseen is None else unseen
    if unseen is None or unseen <= MOSTLY_UNSEEN:
        return None
    rate = min(max(policy.seeing(unseen, tl.rate_hz, UNSEEN_TARGET), tl.rate_hz + policy.step_hz), policy.most_hz)
    if rate <= tl.rate_hz:
        return None
    return rate, f"{unseen_share(unseen)} of the step boundaries go unseen at {tl.rate_hz} Hz"


def futile(tl: Timeline, base_hz: int, max_hz: int | None) -> tuple[int, str] | None:
    """Back to ``base_hz`` for a rank raised as far as the sampler may go (``max_hz``, --max-rate)
    whose steps are still too short to tell apart there (SHORT), or whose step is unknown with its
    boundaries still mostly unseen there (e^-λ over MOSTLY_UNSEEN: 8 ranks of 50-ms steps waiting
    99% of the time, 79% and more at 400 Hz): the faster rate bought no step time, and cost py-spy's
    reads of the job (4-5 ms steps on an H100 at 400 Hz: 2.6 to 4.3% of the job, 25% of a core).
    None otherwise."""
    clock = tl.clock
    need = clock.suggested_rate_hz
    if clock.known or max_hz is None or tl.rate_hz < max_hz or tl.rate_hz <= base_hz:
        return None
    if clock.unseen is not None and clock.unseen > MOSTLY_UNSEEN and clock.cause != SHORT:
        return base_hz, f"{GAVE_UP_UNSEEN}: {unseen_share(clock.unseen)} of them at --max-rate {max_hz}"
    if clock.cause != SHORT or not need or need <= max_hz:
        return None
    return base_hz, f"{GAVE_UP}: they would take {need} Hz, and --max-rate is {max_hz}"


def gave_up(rec: Recording, pid: int, end_ns: int) -> bool:
    """Whether ``pid``'s rate in effect at ``end_ns`` is a ``futile`` return to the base rate: it
    is not raised again while that stands (its steps were too short for every rate it may take)."""
    changes = [c for c in rec.rates.get(pid, ()) if c.ts_ns <= end_ns]
    return bool(changes) and (changes[-1].why or "").startswith((GAVE_UP, GAVE_UP_UNSEEN))


def slower(tl: Timeline, base_hz: int, policy: RatePolicy = DEFAULT_RATE_POLICY) -> tuple[int, str] | None:
    """A lower rate (at least ``base_hz``) at which ``tl``'s known steps, or their micro-batches,
    still get ``lower_from_samples`` (``uneven_lower_from_samples`` where the steps are skewed by slow
    ones, as ``_known_faster`` raises them), and its optimizer is still seen in UNDECIDED_SEEN of them
    (``_optimizer_floor``); None when there is none."""
    clock = tl.clock
    step = clock.typical_ns or clock.period_ns
    if not clock.known or not step or not tl.micro_batches or tl.rate_hz <= base_hz:
        return None   # micro_batches None: optimizer steps whose micro-batches were too short to count
    unit = step / tl.micro_batches
    floor = (policy.lower_from_samples if abs(step_skew(tl, step)) <= policy.uneven_skew
             else policy.uneven_lower_from_samples)
    rate = max(base_hz, round_up(floor * _NS / unit, policy.step_hz),
               round_up(_optimizer_floor(tl), policy.step_hz))
    if rate >= tl.rate_hz:
        return None
    what = "steps" if tl.micro_batches == 1 else "micro-batches"
    return rate, f"{what} of {unit / 1e6:.0f} ms get {unit * rate / _NS:.0f} samples at {rate} Hz"


def _optimizer_floor(tl: Timeline) -> float:
    """The lowest rate at which the optimizer would still be seen in UNDECIDED_SEEN of the steps:
    its sampled time per step, d, is its true mean (samples times the interval), and a step's
    optimizer is seen with chance 1 - e^-(d·rate). Below it, its gaps could leave gradient
    accumulation undecided again (``doubts.undecided``), and the rate would go back up. 0 where
    the optimizer was not seen at all (nothing to keep)."""
    covered = [s for s in tl.steps if s.covered]
    d_ns = sum(s.phases_ns.get("optimizer", 0) for s in covered) / len(covered) if covered else 0.0
    return -math.log1p(-UNDECIDED_SEEN) * _NS / d_ns if d_ns > 0 else 0.0

