"""Every threshold the diagnoses use, in one place (starting from TraceML's defaults)."""

from __future__ import annotations

import math
from dataclasses import dataclass

# Live views and the final diagnosis look at this much of the newest data: a longer stretch
# reacts slowly to a change, a shorter one holds too few steps of a slow job.
LIVE_WINDOW_S = 30.0
# Fewer seconds of samples than this are a first look (the first py-spy window is 0.8 s long, then
# 2-s windows): its numbers come from the first window or two and move as more arrive. The header
# and the text view say so.
FIRST_LOOK_S = 5.0
# A snapshot of the default length (no --seconds) samples on, up to --max-seconds (by default the
# live view's window), where a rank's step time is still unknown with fewer than this many step
# boundaries seen in it: a longer window holds more (diagnose/window.py)
FEW_BOUNDARIES = 40
SNAPSHOT_MOST_S = LIVE_WINDOW_S
# A step longer than this many typical steps is not typical (an eval or a checkpoint): typical
# steps are what the component shares of a step are medians over.
TYPICAL_MAX = 2.0
# A session's recording (frames.msgpack and its rotated segments) stays under this many MB by
# default (--max-recording-mb): past it the oldest segments but the first are deleted.
RECORDING_MAX_MB = 200.0
# traceml compare (diagnose/compare.py): two windows differ by more than noise beyond this many
# standard errors of the difference (a difference this unlikely under noise alone, ~0.3%, is a change)...
COMPARE_NOISE_Z = 3.0
# ...and never by less than this share of the old step: windows of one unchanged job drift by what a
# window cannot see, the data and the machine's other load (two windows of one job: docs/exports.md, "Comparing")
COMPARE_DRIFT = 0.03
# No % change is given for an old value under this many ms (a % of almost nothing says nothing).
COMPARE_MIN_PCT_BASE_MS = 1.0


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
    # ...unless no rank shows a training loop and each one's process has a child that worked at least
    # this much of a core (the median of its polls) through the stretch the call paths stayed the
    # same: a wrapper script waiting on the training it started is no stuck job (``hang.waits_on_children``)
    busy_child_pct: float = 50.0
    # CUDA jobs: when device sync is at least this share of the wait, the rank's per-process
    # GPU (SM) utilization decides what the wait means...
    device_sync_share: float = 0.5
    # ...a GPU busy at least this much: the job is compute-bound on the GPU;
    gpu_saturated: float = 70.0
    # ...a GPU busy less than this: the GPU is starving and the host side is to blame.
    gpu_starving: float = 30.0
    # A COMPUTE-BOUND rank whose GPU is busy at least this much waits for it: its phase shares say
    # where the host waited for the launch queue, and the finding says so (an H100 job syncing
    # every 50 steps: 99% busy, 83% of its step in the optimizer's launches; docs/gpu.md)
    gpu_paces: float = 90.0
    # No loop frame found, but at least this share of the training thread's time is in
    # training phases: NO DATA says the loop lives in a library and how to name it.
    loopless_work: float = 0.3


DEFAULT_STEP_TIME_POLICY = StepTimePolicy()


MIB = 1024 * 1024


@dataclass(frozen=True)
class MemoryPolicy:
    # Device memory in use (NVML: the allocator's reserved memory plus the CUDA context), or a
    # job's host RSS with its workers against its cgroup's limit (else the host's RAM), as a
    # share of capacity: HIGH PRESSURE warns at this...
    pressure_warn: float = 0.92
    # ...and is critical at this.
    pressure_crit: float = 0.97
    # IMBALANCE: the worst rank's peak at least this much above the median rank's...
    imbalance_skew: float = 0.20
    # ...while memory matters at all (worst peak at least this share of capacity).
    imbalance_min_pressure: float = 0.30
    # Warm-up is the first this many seconds of the job's own life (its process start time),
    # not of the attach: workers forking, the allocator's caches and pools filling
    # (examples/input_bound.py --workers 2: +30 to +120 MiB in the seconds after its workers
    # start). A job that has run longer than this is judged from the first sample.
    creep_warmup_s: float = 20.0
    # Nothing is judged on less than this much time past the warm-up, nor on fewer samples.
    min_judged_s: float = 6.0
    min_samples: int = 6
    # Shorter than this, a window can only say MEMORY RISING (a large rise, under way); from
    # this long on, the trend is judged on BLOCKS medians and can be MEMORY CREEP (EARLY).
    creep_min_span_s: float = 30.0
    # MEMORY RISING in a short window: the last third of the window above the first by at
    # least this much, with the middle third between them. glibc's malloc gives its heap back
    # once more than its trim threshold is free at the top (its dynamic thresholds cap that at
    # 64 MiB) and maps blocks over 32 MiB on their own, so a flat job's RSS swings by tens of MB
    # (up to 80 MiB on the flat example jobs: examples/input_bound.py, 436-506 MiB in 20-s
    # cycles; six of them read every second are tests/fixtures/rss_flat.json). A short window
    # cannot tell a smaller rise from one of its swings. Not a share of the level: a leaking job's
    # level is mostly its leak, which does not swing.
    rising_min_bytes: int = 128 * MIB
    # GPU memory (the caching allocator's reserved memory) does not swing that way: it grows
    # in steps and gives nothing back unless emptied, so a smaller steady rise is already one.
    rising_min_bytes_gpu: int = 64 * MIB
    rising_min_share_gpu: float = 0.05
    # The trend of a longer window is judged on this many equal blocks of time (their medians):
    blocks: int = 6
    # ...a rise is a trend when it is at least this many standard errors of the blocks' fit...
    trend_t: float = 4.0
    # ...every block at or above the one before (less this share of the average step between
    # them, for GPU memory that grows in steps)...
    block_slack: float = 0.25
    # ...and the last third's rise keeps at least this share of the middle third's (a rise that
    # levels off is a cache filling up; a leak keeps its pace).
    creep_keeps_pace: float = 0.5
    # MEMORY CREEP (EARLY) also needs the rise to be at least this much and this share of the
    # level: a smaller steady rise is said as such ("rose slightly"), not as creep, because an
    # allocator grows its heap for a minute or two after start-up (examples/input_bound.py
    # --workers 2: +55 MiB, 4.5% of its 1.2 GiB, from its 40th to its 120th second, then flat)
    creep_early_bytes: int = 16 * MIB
    creep_early_share: float = 0.05
    # ...for GPU memory, which grows in the allocator's segments and gives nothing back:
    creep_early_bytes_gpu: int = 64 * MIB
    creep_early_share_gpu: float = 0.01
    # ...and MEMORY CREEP this much (GPU) or this much (host RSS), or the rise going on for at
    # least creep_confirm_s.
    creep_confirmed_gpu_bytes: int = 1024 * MIB
    creep_confirmed_host_bytes: int = 512 * MIB
    creep_confirm_s: float = 120.0
    # "Steady": the window's rise within its uncertainty (the blocks' fit), never less than this
    # (a page-granular reading moves by a few MiB)...
    min_noise_bytes: int = 4 * MIB
    # ...and that uncertainty small: at most this share of the level (a window whose readings
    # jump about is not steady however its fit comes out).
    steady_noise_share: float = 0.05
    # A one-off rise (an eval, a checkpoint): one step up that holds at least this share of
    # the window's rise, with the stretches before and after it flat (each within this share).
    jump_share: float = 0.7
    jump_flat: float = 0.25
    # ...and at least this large (smaller steps are a page-granular reading's noise)
    jump_min_bytes: int = 16 * MIB
    # Time left at the rising pace before memory reaches its capacity: critical under this.
    critical_left_s: float = 600.0


@dataclass(frozen=True)
class SystemPolicy:
    low_gpu_util: float = 30.0        # median GPU utilization % below this: LOW_GPU_UTILIZATION
    moderate_gpu_util: float = 70.0   # ...below this: MODERATE_GPU_UTILIZATION
    high_cpu: float = 90.0            # median host CPU % at or above this: HIGH_CPU (or HOST_BUSY_WITH_JOB)
    job_cpu_share: float = 0.75       # ...at least this share of it the job's own: HOST_BUSY_WITH_JOB (context)
    high_host_memory: float = 0.92    # peak host RAM in use / total: HIGH_HOST_MEMORY
    high_gpu_memory: float = 0.92     # peak device memory used / total: HIGH_GPU_MEMORY
    high_gpu_temp_c: float = 85.0     # peak GPU temperature: HIGH_GPU_TEMPERATURE
    high_gpu_power: float = 0.98      # median power draw / enforced limit: HIGH_GPU_POWER
    # Per process:
    high_process_gpu_memory: float = 0.90   # a rank's device memory / device capacity
    rank_gpu_memory_skew: float = 0.20      # worst rank's GPU memory above the median rank's
    high_process_rss: float = 0.50          # a rank's RSS with its workers / host RAM
    high_process_cpu: float = 95.0          # a rank's main process CPU %, median (a core saturated)


@dataclass(frozen=True)
class RatePolicy:
    """When the analysis advises a rank's sampler to sample faster or slower (diagnose/rate.py);
    the sampler keeps it within --rate and --max-rate (agent/rate.py)."""

    # A rank whose step time is unknown, and whose steps (the clock's upper bound on them) get
    # fewer samples than this at its rate, is advised a faster rate (period.TARGET_SAMPLES_PER_STEP;
    # 5 is the least that tells one step from two); so is one whose known step gets fewer...
    raise_below_samples: float = 10.0
    # ...the one that gives that bound this many: it is loose (the shortest tenth of the
    # intervals between the returns seen, each a step or more), and the 27 ms DDP job's step time
    # came out within 2.5% at 10 samples a step, within 4-5% at 7 (docs/steps.md, "A rate that fits").
    raise_to_samples: float = 15.0
    # A rank sampled faster than --rate is advised a slower rate only where its steps (its
    # micro-batches, with gradient accumulation) still get this many samples at that rate:
    # above what a raise aims at, so that the rate does not go up and down.
    lower_from_samples: float = 20.0
    # A known step whose steps are skewed by slow ones (their mean over their median by more than
    # ``uneven_skew``: a loader slow now and then, workers delivering in bursts, cores shared) is
    # raised below this many samples too, to ``uneven_to_samples``: above ``lower_from_samples``, so
    # it stays. The blur of each end fills the gap such steps leave above their median: at 10-15
    # samples a step, 40% of 200-ms steps slowed 1.3-2.2x gave +6.2% (every boundary seen), 2
    # workers delivering in bursts +7.5%; at 21-29 samples +2.3% and +1.1%. Steps that vary by their
    # jitter alone (5-20% on each phase) had a mean 0.3-1.9% under their median (docs/steps.md, stop 59).
    uneven_below_samples: float = 20.0
    uneven_to_samples: float = 25.0
    uneven_skew: float = 0.025
    # ...and such a rank is advised a slower rate only where its steps still get this many there
    # (``lower_from_samples`` for steps that are not skewed): above what its raise aims at
    uneven_lower_from_samples: float = 30.0
    # A rank whose slow steps left its median unknown because a draw decided which long intervals
    # hide a boundary is advised the rate that gives its median interval this many samples, or more
    # where HIDDEN_TARGET asks it (diagnose/rate.py ``_hidden_faster``): the blur of the ends of
    # steps so uneven moves their median once every boundary is seen (8 ranks of ~130-ms steps, 40%
    # of them slowed, over 30 s: +5.4% at 27 samples, +3.4% at 40, +1.9% at 53)
    hidden_to_samples: float = 50.0
    # Advised rates are multiples of this (so a drift of a few ms changes nothing)...
    step_hz: int = 50
    # ...and at most this: what --rate and --max-rate accept (py-spy's CPU grows by about a
    # point of a core per 100 Hz: bench/rate_cost.py).
    most_hz: int = 1000
    # After a rate change, a rank's steps are found at the new rate, from the change on, once
    # this much has been sampled at it (27 ms steps: ~110 of them); until then at the lower of
    # the two rates, over the whole window (data taken faster than the rate assumed errs on
    # the safe side: fewer boundaries judged unseen, wider blur).
    settle_s: float = 3.0
    # A raise advised for a step time already known at the old rate (to time its ends more finely:
    # ``RateChange.refines``) is read from only once the new rate holds this share of the window:
    # until then the old rate's reading of the whole window stands. Read from its settling, a raise
    # 6.5 s into a 10-s snapshot left 19 steps of a Lightning job under torchrun and its step time
    # unknown; one 21 s into a 25-s window counted 21 of an elastic restart's 60 steps.
    refine_share: float = 0.5
    # Advice is given from this much data at the rate in use (one py-spy window and a half)...
    advise_after_s: float = 1.5
    # ...holding at least this many intervals between the loop's wraps.
    min_intervals: int = 5
    # A process whose threads py-spy reached less than this share of its rate's samples (a
    # thousand threads to read at each sample) is read at the rate reached (``reached_hz``),
    # floored to one of LAGGING_GRID (so that its live tracker is not made anew for every
    # window's jitter); a higher rate cannot help it.
    lagging_share: float = 0.7

    def seeing(self, unseen: float, rate_hz: int, target: float) -> int:
        """The rate at which a boundary that goes unseen with chance ``unseen`` (e^-λ) at ``rate_hz``
        would go unseen with chance ``target`` (λ grows with the rate): a multiple of ``step_hz``, at
        most ``most_hz`` (that where nothing is seen)."""
        lam = -math.log(unseen) if unseen < 1.0 else 0.0
        if lam <= 0.0:
            return self.most_hz
        return min(round_up(rate_hz * -math.log(target) / lam, self.step_hz), self.most_hz)

    def raised(self, step_ns: float, rate_hz: int, samples: float | None = None) -> int | None:
        """The rate that gives steps of ``step_ns`` ``samples`` (``raise_to_samples`` by default): a
        multiple of ``step_hz``, at least one such step over ``rate_hz`` and at most ``most_hz``; None
        where that is no faster than ``rate_hz``."""
        wanted = self.raise_to_samples if samples is None else samples
        rate = max(round_up(wanted * 1e9 / step_ns, self.step_hz), rate_hz + self.step_hz)
        rate = min(rate, self.most_hz)
        return rate if rate > rate_hz else None


def round_up(rate: float, step: int) -> int:
    """``rate`` rounded up to a multiple of ``step`` (a rate a hair over one is that one)."""
    return int(math.ceil(rate / step - 1e-9) * step)


# The rates a lagging process is read at (RatePolicy.lagging_share): about 25% apart.
LAGGING_GRID = (1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 60, 80, 100, 120, 150, 200, 250, 300,
                400, 500, 600, 800, 1000)


@dataclass(frozen=True)
class WhatIfPolicy:
    """What-if projections (diagnose/whatif.py), straggler persistence (diagnose/arrival.py) and
    change points in the session's rollups (diagnose/changes.py)."""

    # A projection whose gain is under this share of the step is not shown (within the noise of a
    # window's mean step: two windows of one unchanged job differ by up to 3%, COMPARE_DRIFT).
    min_gain_share: float = 0.02
    # Straggler what-ifs: the worst rank, then the 2 and 3 worst (never more than half the ranks).
    max_worst_ranks: int = 3
    # A rank arrived last at the collective in a step when its blocked time there is the least of
    # all ranks by at least this share of the step (closer than that, sampling cannot tell them apart)...
    arrival_margin_share: float = 0.02
    # ...and "the slow rank" persists when one rank is last in at least this share of the judged steps
    # (with 4 ranks drawn at random each would be last in about 25%).
    persistent_share: float = 0.6
    # Persistence is said from this many judged steps on.
    arrival_min_steps: int = 10
    # A window's steps are judged up to this many ranks x steps, the newest first (64 ranks: 468 steps,
    # a whole 30-s window of 64-ms steps; 1,024 ranks: the newest 29, 40 ms of CPU a window).
    arrival_max_cells: int = 30_000
    # A change point in the rollups: the means of the two sides differ by at least this many
    # standard errors (the noise: neighbouring rollups' median difference, which the change's own
    # rollups inflate: examples/input_bound.py slowing halfway through 70 s scores 5.4)...
    change_t: float = 5.0
    # ...and by at least this share of the earlier level (a steady job's rollups of 10 s drift by a
    # few %: examples/input_bound.py over 10 minutes, tests/test_changes.py)...
    change_min_share: float = 0.15
    # ...with at least this many rollups on each side.
    change_min_rollups: int = 3
    # At most this many change points are named per series.
    max_changes: int = 3
    # The job's series is the median of at most this many ranks (an even sample of them).
    change_max_ranks: int = 64
    # A phase "grew" with a step change when its own change is at least this share of the step's.
    change_phase_share: float = 0.25
    # Memory "rose at the same time" when the rollups after the change hold at least this much more.
    change_memory_bytes: int = 64 * 1024 * 1024


@dataclass(frozen=True)
class DispatchPolicy:
    """CPU-BOUND DISPATCH (diagnose/dispatch.py): a rank's Python thread busy in forward/backward
    while its GPU idles: the host cannot queue kernels fast enough."""

    # forward + backward + optimizer at least this share of the step...
    compute_share: float = 0.6
    # ...the thread blocked (in a sync, a collective) at most this share of it...
    blocked_share: float = 0.15
    # ...the wait (device syncs included) at most this share...
    wait_share: float = 0.25
    # ...while the rank's per-process SM utilization is under this (TraceML's MODERATE_GPU_UTILIZATION bound).
    gpu_idle_below: float = 70.0


# Where rising memory goes (diagnose/leak.py, retention.py): RSS readings in the window before
# the phases are fitted against it; a phase with less of the window's time is left out of the
# fit; the phase named holds at least this share of the net growth a step; a DataLoader worker
# that grew less than this is not listed.
LEAK_MIN_READINGS = 20
LEAK_MIN_PHASE_SHARE = 0.02
LEAK_PHASE_HOLDS = 0.6
LEAK_WORKER_GROWTH_BYTES = 8 * MIB
# A line of the loop function is a forward line (its values carry a graph) where forward has
# at least this share of its samples.
RETENTION_FORWARD_SHARE = 0.5

DEFAULT_RATE_POLICY = RatePolicy()
DEFAULT_WHATIF_POLICY = WhatIfPolicy()
DEFAULT_DISPATCH_POLICY = DispatchPolicy()
DEFAULT_MEMORY_POLICY = MemoryPolicy()
DEFAULT_SYSTEM_POLICY = SystemPolicy()


# The step engine (traceml_attach/steps/): how the steps are counted from the samples. A step time is
# given only when known within MAX_STEP_ERROR; these thresholds decide when it is (docs/steps.md).

# -- period.py: fitting a step period to the intervals between the returns seen
MIN_INTERVALS = 10            # fewer observed intervals: a comb fit is not significant
MIN_CONCENTRATION = 0.2       # R̄ at the period: below it, the comb is lost in the blur
MIN_RAYLEIGH_Z = 9.0          # m·R̄²: a chance fit among ~100 candidate periods stays below this
GIVEN_RAYLEIGH_Z = 6.9        # ...and on one period given (a synchronized peer's), P(m·R̄² ≥ z) = e^-z: 0.1%
# ...which takes at least 7 intervals even at R̄ = 1: a period given is tested on as few as this
# (a search needs MIN_INTERVALS), so that a rank whose slow optimizer steps left it 9 visits in a
# 10-s window (800-ms steps, one visit unseen) may take its peers' step where its visits sit on it
MIN_GIVEN_INTERVALS = 7
PEER_COUNT = 0.02              # a rank counted on its peers' period counts within this of their median count
MIN_SAMPLES_PER_STEP = 5.0    # a boundary is blurred by ~1 sampling interval: below this, n is a guess
HARMONIC_KEEP = 0.85          # a longer candidate within this factor of the best R̄ is the fundamental
INLIER = 0.3                  # |I - n·P| ≤ this·P: an interval counts in refining the period
MAX_SCORED = 64               # intervals (evenly spaced) used to screen candidates
MAX_CANDIDATES_PER_SEED = 16  # periods a 16th of the shortest intervals: boundaries seen 1 in 16
TARGET_SAMPLES_PER_STEP = 10.0  # a rate advised for short steps gives them this many samples
SURE = 0.8                    # an interval's step count is sure when its posterior is at least this...
MAX_AMBIGUOUS = 0.1           # ...and a period is known only when at most this share of them is not
MAX_UNSURE_STEPS = 0.05       # ...or, its intervals of one step or two sure, the unsure at most this share of the steps
MAX_STEP_ERROR = 0.05         # the step time is given only when known within this (relative)
MAX_RATE_HZ = 1000            # no rate above this is advised
# A change of length within the window (``period.shift_cut``): at least SHIFT_FILLED of the intervals of a
# stretch (and of either half of it) whose median interval is SHIFT_RATIO times the rest's were counted as
# several steps, and either SHIFT_APART times the share of the rest's so counted or SHIFT_SEVERAL of all so
# counted, that many there at most SHIFT_CHANCE likely by chance: the job's steps changed length there, and
# one period counts the longer ones as several (a job slowed 2x mid-window: 333 steps of 30 ms for its 196
# of 30 and 60, -50% on the median). Each side is then counted on its own period (``clock.by_regimes``)
SHIFT_RATIO = 1.5
SHIFT_FILLED = 0.5
SHIFT_APART = 3.0
SHIFT_SEVERAL = 0.8
# (2 ranks of 13-ms steps at 400 Hz, 5 samples a step, many boundaries unseen, had 5-interval stretches
# pass the rest by chance)
SHIFT_CHANCE = 1e-4
SHIFT_CHANCE_LONG = 1e-3   # ...for a side of MIN_INTERVALS or more, SHIFT_WHOLE of it longer (or shorter)
# ...or, boundaries mostly unseen, SHIFT_WHOLE of a stretch's counts whole multiples of 2 (or 3), the rest's
# at most SHIFT_APART_WHOLE less: that stretch's steps are 2 (3) periods long
SHIFT_WHOLE = 0.9
# A job whose steps drift in length through the window (another process takes a growing or
# shrinking part of its cores: the grid's ramp), nearly every boundary seen (e^-λ at most DRIFT_UNSEEN)
# but not all (MAX_UNSEEN), fits no one period: each interval is counted on the median of the
# DRIFT_HALF intervals either side of it (``clock.drift_clock``), where the first and last quarters'
# local steps are DRIFT_RATIO apart or more (else the one period's refusal stands: its cause is no drift)
DRIFT_UNSEEN = 0.1
DRIFT_HALF = 8
DRIFT_RATIO = 1.25
DRIFT_SLACK = 0.02    # ...drifting one way: the quarters' medians in order, back by at most this
DRIFT_Z = 3.3         # ...and the last quarter beyond the first by a rank-sum test's z of this (1 in 2,000)
DRIFT_CHANCE = 1e-3   # ...and no more intervals of several steps than unseen boundaries make, beyond this
SHIFT_APART_WHOLE = 0.3
# A comb of the optimizer's visits that holds on one side of a moment and breaks on the other
# (``accumulation._comb_breaks``): the gaps of a stretch at either end fall INLIER of
# a period or more off the comb's multiples so much more often than the rest's that the window's off
# gaps fall there that often at most BREAK_CHANCE likely over every stretch looked at: the steps changed
# length there, and the visits are too few on that side to count it (2 ranks, 4 micro-batches, 22 s of
# 26-ms optimizer steps, then 8 s of 13, the optimizer seen in 16% of them: the 26-ms comb counted
# 1,155 steps for the job's 1,454, +26% on the mean; 19 of the last 44 gaps off, 4 of the 138 before:
# 2e-8). At 1e-2, one rank of a steady 8-rank job broke at 9e-4, and its peers with it
BREAK_CHANCE = 1e-4
MEDIAN_RANKS = 0.05   # steady_median: the median holds over this share of the steps either side,
NEAR_MEDIAN = 0.10    # and at least NEAR_SHARE of the steps are this close to it (a jitter of 20%:
NEAR_SHARE = 0.25     # 38% of the steps are)
# A median of steps between boundaries all seen, skewed by slow ones (their mean over it by more
# than BLUR_SKEW) and under BLUR_SAMPLES samples a step, holds only where the sampling's blur moved it
# by at most BLUR_MOVES by both of two measures (batch_timeline.judged_blurred): blurred once more
# (period.blur_moves, BLUR_ITERATIONS halvings find the blurred median), and the steps as the job ran
# them recovered from the seen ones (period.deblurred_moves). One slow step in three among 25-ms ones
# at 400 Hz gave +5.4%, and blurred again it moved +5.8%; on two jobs whose phases jitter 20% it
# moved 0.3% and 1.4%. 40% of 30-ms steps slowed 1.3-2.2 times at 400 Hz: the median seen 7.4% long,
# more blur moved it 2%, the steps recovered put it at +6.4%; that move is found within about 1.5% on
# 300 steps (s.d., tests/test_period.py). The deconvolution's grid: DEBLUR_BINS bins a sampling
# interval, DEBLUR_SPAN intervals either side of the median, DEBLUR_ITERATIONS rounds (3.4 ms a rank
# judged). Not on fewer than DEBLUR_MIN_STEPS steps: steps with a smooth tail of slower ones (the mean
# 4% over the median), whose median the blur barely moves, were said moved beyond 3% in 9 of 60 draws
# of 100 steps (the recovered move's s.d. 2.1%), 2 of 60 of 150, 1 of 60 of 300.
BLUR_SKEW = 0.025
BLUR_SAMPLES = 30.0
BLUR_MOVES = 0.03
BLUR_ITERATIONS = 24
DEBLUR_BINS = 2
DEBLUR_SPAN = 10
DEBLUR_ITERATIONS = 150
DEBLUR_MIN_STEPS = 150
# ...and so on a comb, or on the boundaries its peers saw too, where a rank's e^-λ is at most
# BLUR_UNSEEN: a few split pieces among steps seen whole. 8 ranks of 13-ms steps, 40% slowed, at 400 Hz
# (e^-λ 2.2-2.8%): their median 20.3 ms for the job's 18.5 (+9.8%), the steps recovered put 5 ranks'
# moves at 4.5-6.2%. `--shape uneven`: known beyond 5% 85 -> 41, known 3,369 -> 3,276 (stop 86)
BLUR_UNSEEN = 0.05
# Optimizer steps under BLUR_SAMPLES samples counted on the optimizer's visits, whose median is within this
# of their mean, are given their mean, said so (accumulation._visit_steps): the blur leaves the two alike
# whatever the job's steps, and moves only the median (8 ranks of 18- and 24-ms steps at 400 Hz: -4.6 to -6.3%
# on the job's median; their means within 1.7% of the medians seen, and within 1% of the job's)
BLURRED_AGREE = 0.025
# the median of optimizer steps timed by the optimizer's visits is no valley between two lengths:
# at least VALLEY_SHARE as many steps within VALLEY_NEAR of it as of the busier quartile, where
# VALLEY_LEAST or more are (period.in_valley; accumulation.by_optimizer gives their mean otherwise)
VALLEY_NEAR = 0.025
VALLEY_SHARE = 0.5
VALLEY_LEAST = 6
# ...and two intervals in a row, each under SPLIT_PART of the period, that add up to it within
# SPLIT_SLACK, are one step that a boundary split (or two steps whose others went unseen), not
# two steps seen whole: more such pairs than SPLIT_SHARE of the intervals and the wraps are not
# every boundary (period.split_pairs). Steps jittered by 20% make one in ~25,000 intervals so.
SPLIT_PART = 0.7
SPLIT_SLACK = 0.2
SPLIT_SHARE = 0.05
# ...unless the optimizer ran in this share of the intervals or more: they are the steps (clock.optimizer_marked)
SPLIT_MARKED = 0.8

# -- clock.py: when the returns seen are every boundary, and when a rate is suggested; drop-outs
# A higher rate is suggested for long steps only where their boundaries go unseen at least this often
MOSTLY_UNSEEN = 0.3
# ...and a rate raised for them aims to leave at most this many unseen (diagnose/rate._unseen_faster)
UNSEEN_TARGET = 0.3
# Ranks that step together take the same steps: over the stretch they all sampled, counts apart by
# more than this share (and 2 steps) say some ranks missed boundaries others saw (diagnose/rate.py,
# ``counts_apart``), and the short steps then get SHORT_SAMPLES samples from a faster rate
COUNTS_APART = 0.03
SHORT_SAMPLES = 5.0
# An interval as long as several steps is one step slowed throughout (clock.slow_throughout) where
# the share of it outside the loop's dominant place is one step's, judged only where the intervals
# of one step show that share steadily: its spread (IQR / 1.349) at most STEADY_OUTSIDE of its
# median, over at least MIN_STEADY of them. On the grid, 0.3 / 0.35 / 0.45 gave 86 / 82 / 102
# rank-windows counted beyond 3% (102 without it); nanoGPT's own loop on two busy cores shows
# 0.21-0.30.
STEADY_OUTSIDE = 0.35
# An interval counted as several steps is one slow step or several by the thread's time on a CPU
# through it (clock.worked), judged only where the intervals of one step show that time steadily:
# its spread (IQR / 1.349) at most STEADY_WORK of its median. 2 gloo ranks of 33-ms steps on 2
# busy cores showed 0.10.
STEADY_WORK = 0.2
# ...and one that worked as long as its count of steps holds them only where the intervals that
# worked at least halfway to their count worked their count of steps' time less at most this many
# steps' (their median): 0.0 where boundaries went unseen, -0.23 where steps were slowed on the
# CPU or a garbage collection held the thread for 2.8 steps' time
SEVERAL_WORK = 0.1
# ...and where a step of one interval is on a CPU for at most this share of its time (the median):
# 0.80-0.86 on 2 gloo ranks on 2 busy cores; 0.98 on a CUDA job's host thread that spins in its
# synchronizations, and 0.99-1.0 on single-threaded CPU jobs, whose work is their time
ON_CPU = 0.9
MIN_STEADY = 20
# Synchronized ranks whose reference fitted a comb (sync.slow_not_unseen): where most of the ranks
# find their own intervals too ambiguous at its period (period._too_ambiguous), and the ranks
# together count more steps hidden in their intervals than SLOW_HIDDEN times what their e^-λ
# expects (plus three standard deviations and three), the long intervals are slow steps, not
# boundaries unseen, and the period (the slow steps' median split) is no step. On the grid, 8
# ranks whose input ran 1.3-2.2x as long in 40% of the steps counted 113 hidden for 18 expected
# (and 24.2 ms for 26.0, counts +12-17%); a right comb it leaves alone (8 ranks, 5 samples a step)
# counted 0.83-0.88 times what e^-λ expects, its ranks together. Most ranks unsure alone made 24
# right step times unknown on the grid (5-8 samples a step); the hidden count alone made right
# recorded ones unknown: 2 gloo ranks whose sampler starved for a core (39 hidden for 10), and, rank
# by rank, a GPU job's single rank (40 hidden for 1.2 expected).
SLOW_HIDDEN = 2.0
# A rank alone (no peers to agree with) whose comb counts more steps hidden than its e^-λ expects,
# beyond chance (sync.beyond_chance, once the expected), has slow steps for long intervals only
# where its lengths say so too: its intervals counted as two steps shorter than two of those counted
# as one by more than this many standard errors of their ratio (period.twos_short), on the intervals
# its CPU time leaves undecided (clock.lengths_say_slow). Boundaries unseen by chance, or where e^-λ
# says too little (the recorded cuda_compute_bound, 29 hidden for 1.2 expected: ratio 1.10), leave intervals
# of two steps as long as two; slow steps taken for two were 0.86-0.92 of it on the grid (stop 87).
TWOS_SHORT_Z = 3.0
# Returns that vary too much on a synchronized rank that saw them all are said to be micro-batches
# of longer optimizer steps only where the intervals the optimizer was seen in are the long ones, by
# this factor (their median over the others'), nine in ten of them above the others' median: 1.8-2.4
# on the grid's ranks accumulating 2-3 micro-batches behind a straggler, every one above (1.4 at
# 130-ms steps); a job whose input comes in bursts shows its optimizer in steps of any length,
# half of them above (accumulation._stepping_longer)
STEPPING_LONGER = 1.25
STEPPING_ABOVE = 0.9
# ...and only where the optimizer was seen in at most this share of the rank's intervals: 1/k of
# them, and some of the next as a visit spills over the return (Lightning with 2 micro-batches at
# 350 Hz: 0.53); a job stretched by other work on its cores, no accumulation, showed it in 18 of
# 22, the stretched steps the longer and its optimizer seen more often in them
STEPPING_SEEN = 0.6
# ...judged only on ranks whose visits outside the dominant place are as alike as sampling visits of
# one length makes them (period.visits_vary: their squared coefficient of variation at most this
# many times that model's). The grid's ranks looked at showed 0.3-1.0 times it; a recorded GPU job that waits
# long now and then, 19 times (e^-λ 2%, its comb counting 40 steps hidden for 1.2 expected, right).
OVERDISPERSED = 3.0
# Observed wraps are trusted as every boundary, without a period, when a step's boundary goes
# unseen with at most this probability (e^-λ, λ the samples outside the dominant line per step).
MAX_UNSEEN = 0.01
# Where slow steps left the median unknown because a draw decided which long intervals hide a
# boundary (diagnose/rate.py ``_hidden_faster``), or a rank's peers saw the boundaries it missed
# beyond its e^-λ (``peersplit._missed_faster``, judged on the share they saw it miss), the rate
# advised is at least the one at which a boundary goes unseen with at most this chance (λ grows
# with the rate): a tenth of MAX_UNSEEN, so that the faster windows see every boundary with room to
# spare
HIDDEN_TARGET = 0.001
# Intervals shorter than this share of the typical step that show the optimizer far less often than
# the longer ones do (Fisher's exact test: at most EXTRA_RETURN_CHANCE likely by chance) are no
# steps: returns inside an optimizer step whose micro-batches differ in length (steps/extra_returns.py)
SHORT_RETURN = 0.5
EXTRA_RETURN_CHANCE = 0.01
# ...and in at most this share of the longer ones' share: the short steps of a bursty loader (each
# a step) show it a little less often where their ends blur, 76% against 87%
EXTRA_RETURN_SHARE = 0.75
# optimizer steps fitted to the optimizer's visits that leave more than this share of them (and
# three times the chance its work goes unseen) without a visit are a divisor of the visits' gaps
# (accumulation._visits_too_few)
VISITS_MISSED = 0.5
# Boundaries that go unseen at most this often (e^-λ: λ ≥ 3 samples outside the dominant place a
# step) are missed k in a row by chance only while e^-kλ ≥ DROPOUT_UNSEEN (clock.hidden_by_chance);
# more often, λ is an average over visits too uneven to bound a run of misses. 1% left a job whose
# estimate sat at 1.3% (32 DataLoader workers) counting an epoch's 0.8 s start as 10 steps.
CHANCE_UNSEEN = 0.05
# A boundary that Poisson sampling hides with less than this probability (e^-8: eight sampling
# intervals outside the dominant line went unsampled) was hidden by a drop-out of the sampler...
DROPOUT_UNSEEN = math.exp(-8.0)
# ...which shows as a span this many times its stack's median span, and at least 8 intervals long,
SWALLOW_RATIO = 2.0
# and in which the thread was on a CPU at least this many times a typical step's time on a CPU,
# where its counters say: a thread blocked that long (on a DataLoader's queue, a lock), or runnable
# behind other processes (32 DataLoader workers starting), ran no step that a drop-out hid
SWALLOW_WORK = 1.0
# and through which the sampler itself waited for a core at least this share of the span's time
# beyond its stack's usual span, where its own counters say (``scpu`` frames): py-spy runs at a
# higher priority than the job, and one that was not kept from a core sampled on, so the span was
# the job's (a garbage collection in a hand-written loader's slicing, 80 ms every few steps, read
# as drop-outs over 2.7 steps each: 146 steps counted for 115, input 4.6 points under its own)
DROPOUT_WAIT = 0.5

# -- batch_timeline.py: the sampler's holes
MAX_SPAN_GAP_INTERVALS = 5  # a hole in sampling longer than this invalidates its step

# -- loopframe.py: which frame is the training loop
MIN_PATH_SHARE = 0.5        # a loop-frame candidate is on the path for ≥ this share of time
OUTER_TIE = 0.8             # an outer candidate wins with ≥ this fraction of the most wraps

# -- live_tracker.py: the live engine's loop frame and training thread
LOOP_TIE_MARGIN = 0.02     # the current loop frame stays this close to find_loop's tie between nested loops
THREAD_KEEP = 1.1          # another thread becomes the training thread with this much more training time

# -- sync.py: synchronized ranks' shared period
AGREE = 0.10   # synchronized ranks' own periods must agree within this (relative)
# ...and a rank whose own period strays further, where it and the reference leave at most this share of
# boundaries unseen, steps apart from it between synchronizations (micro-batches: sync.apart)
SEEN_APART = 0.05
# -- mean.py: the mean step, every boundary seen, where the steps vary too much for a median. Ranks
# that step together and each saw every boundary count the same steps: their means agree to a sample
# or two over the window (2 ranks of a slowed-at-random job, 63 steps each, 158.1 and 158.0 ms),
# while one that missed 5 of 63 boundaries its e^-λ of 0.1% never expected was 8.7% long.
MEAN_AGREE = 0.01
# ...and a rank's mean is given only where the chance that sampling hid enough of its boundaries to
# move it beyond MAX_STEP_ERROR (Poisson, at its e^-λ a boundary) is under this: 17 steps of 500 ms
# at 50 Hz, e^-λ 0.04% (a 150-ms compute phase unsampled), had one boundary hidden, and the mean of
# its 17 intervals was 5.9% long (one step in 17)
MEAN_RISK = 1e-3
# ...and its long intervals are one slow step each where no peer that covers them saw a boundary
# inside: at most this many peers are asked (the next ranks after it), as all of them missing one
# boundary together is rare (not as rare as the product of their e^-λ: ranks that step together
# miss the same boundaries more often, docs/steps.md, stop 64). Asking every peer, each
# offset from all its boundaries, cost ~1.9 ms a pair of ranks over a 30-s window of 700
# boundaries: at 64 ranks ~7.6 s a live tick
PEERS_ASKED = 3
# ...whose boundaries, where they saw one inside a rank's interval (and both its ends), are one that
# rank missed (steps/mean._filled): a rank whose peers saw more than this share of its steps'
# boundaries that it did not misses so many that those every rank missed may not be few (8 ranks of
# bursty 50-ms steps at 100 Hz each missed 4-24% of theirs, e^-λ 0.04-0.4%; filled from 3 peers each,
# their means agreed on 203 ms for the job's 184). The step error a mean may have: at half of it,
# 2 bursty ranks at 100 Hz, one of which missed 5 of 195, were refused (their mean, filled, within 0.02%)
MISSED_AT_MOST = MAX_STEP_ERROR
# ...unless the boundaries that neither it nor its peers saw, estimated from how many of them saw each
# of the others (mean.unseen_by_all), are at most this share of its steps: half the mean's error. The
# quick grid gave 8 more ranks a mean (3,770 -> 3,778 known), none beyond 5%, at 2%, 3.5% and 5% alike
UNSEEN_BY_ALL = MAX_STEP_ERROR / 2
# A live reference stays while no rank is clearly better: among equals (ranks that see their loop
# alike), each one's warm checks come at other times, and the best would change every tick.
REF_MARGIN = 0.1
# The ranks that step together share the median of their typical steps where at least this many
# ranks' own clocks give one of a kind (sync._ranks_median): over two, the median is their mean.
RANKS_MEDIAN = 3

# -- accumulation.py: gradient accumulation (a step is an optimizer step)
MAX_MICRO_BATCHES = 64    # larger k are not looked for
MIN_GAPS = 6              # optimizer intervals apart: at least this many gaps to judge k
MULTIPLE_SHARE = 0.8      # at least this share of the gaps are whole multiples of k...
# the optimizer's visits end the runs of k micro-batches in at least this share of them: the runs are its
# steps, whatever period its visits fit (accumulation._visits_end_groups)
ENDS_SHARE = 0.9
MAX_ADJACENT = 0.1        # ...at most this share are one micro-batch...
MIN_SEEN = 0.3            # ...the optimizer was seen in at least this share of the optimizer steps...
# ...and that many multiples would arise by chance without accumulation (the optimizer seen in
# random steps) with at most this probability: a live view tests every rank at every tick
MAX_CHANCE = 1e-5
# A k whose multiples would arise by chance with at most this probability, short of MAX_CHANCE or
# from fewer than MIN_GAPS gaps, is not counted, but the step time is then unknown: a micro-batch
# taken for a step is the one wrong answer
SUGGESTED = 1e-3
# Where the optimizer is seen too rarely for either, gradient accumulation of some k that its few
# gaps make at least this many times likelier than none leaves the step time unknown (``undecided``)...
UNDECIDED_ODDS = 8.0
# ...with this share of the gaps taken as miscounted by a step (a return missed or doubled)
MISCOUNTED = 0.1
# ...or, where the intervals' counts are unsure (``accumulation.step_miscount``: a job whose speed
# drifts, timed over one period), the chance that some step of the gap is miscounted, up to this: a
# gap as likely wrong as right weighs nothing either way
MAX_MISCOUNTED = 0.5
# ...and on fewer than PROVISIONAL_GAPS gaps, a k at least this likely as none: three gaps of 5, 4
# and 4 micro-batches of 2.1 s (bf16 autocast on a CPU, 4 to an 8.4-s optimizer step; 30 s seen)
# made k = 4 7.5 times likelier than none, and the micro-batch was given as the step, 75% short
FEW_GAPS_ODDS = 1.0
# Gaps between the optimizer's visits that counted k, this share of them or more one short of a
# multiple of k: returns went unseen, and the visits, not runs of k returns, end the steps...
ONE_SHORT_SHARE = 0.1
# ...and this share where the returns' clock saw every return by its e^-λ (a "wraps" clock, whose runs
# of k returns are the steps only if it did): 20 gaps of 205 (4 micro-batches of an 80-ms step, 3
# workers delivering in bursts, at 500 Hz over 30 s) grouped 356 steps for the job's 372, 80.4 ms for
# 75.4 (+6.5%); 1 in 35 (a long micro-batch timed as two) left runs of 4 the steps, 49 within 1%. Not
# on a comb, which expects returns missed and times them: the recorded GPU stream cuda_accum4 (e^-λ
# 5.5%, 3 of 51 one short) keeps its 100 optimizer steps of 90.3 ms for the job's 101 of 89.8
ONE_SHORT_SEEN_ALL = 0.05
# Where more than MAX_ADJACENT of the gaps are one micro-batch (which ``_multiples_in`` takes as no
# accumulation), only odds of at least this much leave the step time unknown: an input-bound job
# without accumulation had 1 gap of 1 in 9 and 123:1 for k = 2 (its step time stays known), HF
# Trainer with 4 micro-batches and optimizer frames in other micro-batches 6 in 48 and 5,733:1
# for k = 4 (its 25 ms micro-batch was given as the step, 4x short)
ADJACENT_ODDS = 1000.0
# ...and a k at least this many times likelier (1 / MAX_CHANCE), seen in MIN_SEEN of its optimizer
# steps, is counted though some gaps were miscounted (more than MULTIPLE_SHARE allows)
COUNTED_ODDS = 1e5
# A live view looks for accumulation every few seconds (diagnose/incremental.py), but every tick
# while the optimizer's visits are this few gaps apart: each new one may settle it or turn it
PROVISIONAL_GAPS = 12
# The rate advised where accumulation of k is undecided shows the optimizer in this share of its
# optimizer steps, were they k steps each: above MIN_SEEN, so that k is counted, and without
# accumulation the optimizer is then seen in steps one apart often enough to rule k out
UNDECIDED_SEEN = 0.6
# The optimizer is seen in every optimizer step but with at most this chance of missing one (e^-λ, λ
# its samples per step), and at least this share of the intervals between observed returns hold
# none of it: the returns are micro-batches (or returns inside a step), and the optimizer's own
# visits mark the steps (``by_optimizer``).
OPTIMIZER_UNSEEN = 0.01
# ...or missed at most this often, where that many intervals without it would be chance at most
# MAX_CHANCE (``marks_steps``). At 5% a rank of 8 with 8 micro-batches (e^-λ 4.8%) had its visits
# taken for steps and made its peers' right step times unknown
MARKS_UNSEEN = 0.025
# Fetches mark the optimizer steps (``accumulation.by_fetch``) where at least this share of the gaps
# between them are 2 returns or more, and this share of the optimizer's visits fall right before one
# (and, of the gaps, this share of one length says the micro-batches per step)
FETCH_PLACE = 0.9
# ...and this share of the optimizer's visits a whole number of steps' returns before one (the fetch
# right after a visit can go unseen: HF Trainer's 4 micro-batches at 400 Hz, its input 5% of the step,
# missed a tenth of its fetches; 35 of its 40 visits so placed, 5 in the middle of a step)
FETCH_VISITS = 0.85
# Steps aligned on the optimizer's visits (``by_counted_returns``) stand with at most this share of them
# as long as several (the step count allows 3%)
ALIGNED_LONG = 0.02
MIN_WITHOUT = 0.25
# ...or fewer, or missed more often, where the intervals without it are at most this share of the
# length of those with it (the median of each) and that many without it would be chance at most
# MAX_CHANCE: micro-batches, not steps whose optimizer went unseen
SHORT_WITHOUT = 0.5
# ``_spaced`` judges only optimizer visits missed at most this often (e^-λ): a shorter optimizer
# step is seen in few steps, and a few visits are spaced apart by chance as often as not
SPACED_UNSEEN = 0.3
# ``by_optimizer``: groups of intervals as many as the intervals themselves (this share) are no news
SAME_GROUPS = 0.9
# Where every boundary is seen but the steps vary too much for a typical one, a step fitted to the
# optimizer's visits is taken only at least this many times the intervals' mean: several micro-batches.
# Without accumulation it is their mean (bursty delivery: the grid's fits read 0.9-1.18 of it; with
# accumulation, 1.32-7.6)
VISITS_APART = 1.25
# A comb clock whose optimizer visits fit a step at least WHOLE_APART times its period counts
# micro-batches (``accumulation._visits_apart``): k of them where the ratio is within WHOLE_SLACK of
# a whole k (the grid's misses read 2.93-2.99 for k = 3: the last micro-batch holds the all-reduce's
# wait, the optimizer and the next fetch), otherwise no step (a bursty job's visits read 1.7)
WHOLE_APART = 1.5
WHOLE_SLACK = 0.15
# ``_lumped`` compares the compute of long intervals with k steps' (its phases), given at least this
# many samples of it a step: with fewer, the steps whose boundaries went unseen are those whose
# compute went unsampled
LUMPED_MIN_SAMPLES = 5
