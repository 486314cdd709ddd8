"""Every threshold the diagnoses use, in one place (starting from TraceML's defaults)."""

from __future__ import annotations

from dataclasses import dataclass

# Live views and the final diagnosis look at this much of the newest data: a longer stretch
# reacts slowly to a change, a shorter one holds too few steps of a slow job.
LIVE_WINDOW_S = 30.0
# A step longer than this many typical steps is not typical (an eval or a checkpoint): typical
# steps are what the component shares of a step are medians over.
TYPICAL_MAX = 2.0
# A session's recording (frames.msgpack and its rotated segments) stays under this many MB by
# default (--max-recording-mb): past it the oldest segments but the first are deleted.
RECORDING_MAX_MB = 200.0


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
    # CUDA jobs: when device sync is at least this share of the wait, the rank's per-process
    # GPU (SM) utilization decides what the wait means...
    device_sync_share: float = 0.5
    # ...a GPU busy at least this much: the job is compute-bound on the GPU;
    gpu_saturated: float = 70.0
    # ...a GPU busy less than this: the GPU is starving and the host side is to blame.
    gpu_starving: float = 30.0


DEFAULT_STEP_TIME_POLICY = StepTimePolicy()


MIB = 1024 * 1024


@dataclass(frozen=True)
class MemoryPolicy:
    # Device memory in use (NVML: the allocator's reserved memory plus the CUDA context) as
    # a share of capacity: HIGH PRESSURE warns at this...
    pressure_warn: float = 0.92
    # ...and is critical at this.
    pressure_crit: float = 0.97
    # IMBALANCE: the worst rank's peak at least this much above the median rank's...
    imbalance_skew: float = 0.20
    # ...while memory matters at all (worst peak at least this share of capacity).
    imbalance_min_pressure: float = 0.30
    # Creep is judged on a series of (time, bytes) after its warm-up: the first this many
    # seconds are not judged. Warm-up growth is not creep: DataLoader workers forking, the
    # allocator's caches and pools filling (examples/input_bound.py --workers 2: +30 to +120 MiB
    # in the seconds after its workers start, flat after that). A rise must go on past it.
    creep_warmup_s: float = 20.0
    # After the warm-up, the series must cover at least this many seconds (three bands of
    # a few one-second samples) before creep is judged at all.
    creep_min_span_s: float = 10.0
    # Creep compares the medians of the head, middle and tail thirds (by time) of what
    # follows the warm-up, on the rank that grew most and on the median rank. Each band must
    # rise by at least this much...
    creep_band_rise_bytes: int = 8 * MIB
    # ...the tail's rise must keep at least this share of the middle's (a rise that levels
    # off is a cache filling up; a leak keeps its pace)...
    creep_keeps_pace: float = 0.5
    # ...and the tail must exceed the head by this much for MEMORY CREEP (EARLY): a
    # consistent rise that is more than allocator noise...
    creep_early_bytes: int = 64 * MIB
    # ...and by this much (GPU) for MEMORY CREEP,
    creep_confirmed_gpu_bytes: int = 1024 * MIB
    # or by this much of host RSS (a rank with its DataLoader workers), for which there is
    # no capacity per process: half a GiB retained past the warm-up is a leak, not a cache.
    creep_confirmed_host_bytes: int = 512 * MIB
    # A window needs this many memory samples per rank (one a second) to judge a trend.
    min_samples: int = 6


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
    # 5 is the least that tells one step from two)...
    raise_below_samples: float = 10.0
    # ...the one that gives that bound this many: it is loose (the shortest tenth of the
    # intervals between the returns seen, each a step or more), and the 27 ms DDP job's step time
    # came out within 2.5% at 10 samples a step, within 4-5% at 7 (README, "A rate that fits").
    raise_to_samples: float = 15.0
    # A rank sampled faster than --rate is advised a slower rate only where its steps (its
    # micro-batches, with gradient accumulation) still get this many samples at that rate:
    # above what a raise aims at, so that the rate does not go up and down.
    lower_from_samples: float = 20.0
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
    # Advice is given from this much data at the rate in use (one py-spy window and a half)...
    advise_after_s: float = 1.5
    # ...holding at least this many intervals between the loop's wraps.
    min_intervals: int = 5


DEFAULT_RATE_POLICY = RatePolicy()
DEFAULT_MEMORY_POLICY = MemoryPolicy()
DEFAULT_SYSTEM_POLICY = SystemPolicy()
