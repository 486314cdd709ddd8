"""The step estimator over a wide grid of simulated jobs: how often it knows, how wrong it is when it does.

    python bench/sim_grid.py [--seconds 10] [--seeds 2] [--quick] [--shape FAMILY] [--worst 20] [--reasons]
                             [--max-rate HZ]
    python bench/sim_grid.py --point SPEC      # one grid point again, rank by rank

Each grid point is a job (testkit/simulator.py) with a known schedule, sampled by a simulated py-spy
(Poisson, random phase) at 50-500 Hz on 1-8 synchronized ranks for the summary's window, every
phase's duration jittered by 2-20% each step. The full analysis runs on it. The families:

  classic  each phase on its own line of the loop frame (for / while-next / nested): step period
           5-500 ms, dominant-phase share 50-99% (input or backward on one rank; the fast ranks'
           wait in the all-reduce on 2-8 ranks). The knob is the share.
  wrapper  the loop's one line ``loss = training_step(model, batch)`` holds >= 95% of the step:
           the optimizer inside it or on its own short line after it, the batch fetched by the
           loop's ``for`` or inside the wrapper. The knob is "in|out/loop|step".
  library  the loop frame is a framework's (Lightning's advance, HF Trainer 5.x / 4.x), the step
           under one line of it. The knob is the library.
  accum    gradient accumulation, k = 2-16 micro-batches per optimizer step, a short (1-3%) or
           long (15-30%) optimizer; the micro-batch loop on the loop frame's own lines, inside the
           one-line wrapper, or in a framework's loop. Optimizer-step period 13-1300 ms. The knob
           is "k/short|long".
  bursty   DataLoader workers deliver in bursts: one batch in w (w = 2-8) waits for the input of
           w steps, the others are ready; input 20-80% of the time. The knob is w.
  contended  the job shares its cores with bursts of other work (a sampler's recorder starting, the
           last one writing its file: every 0.85 s for 80 ms): a step that overlaps one is
           stretched, every phase, by 0.5-1 or 0.5-2 times the part of the burst it overlaps (a
           25-ms step up to 3x, as nanoGPT's own loop showed). The knob is the loop: classic (a
           dominant share of 50-99%), wrapper or library.
  accum_bursty  gradient accumulation (k = 2-8) whose DataLoader workers (w = 2-4) deliver in bursts:
           micro-batches of two lengths or more, optimizer steps too. The knob is "k/w".
  uneven   a job that reads its batches in Python on cores a sampler shares: this share of the
           steps, at random, fetch their batch 1.3-2.2 times as long (one in four, as a hand-written
           loader on two cores py-spy shared showed); input 50-90% of the step. The knob is that
           share.
  drifting the job's speed changes over the stretch sampled, every phase of every rank (another
           process takes part of its cores, then lets go): "ramp/x" runs x times slower at the start
           and at its own speed at the end, "shift/x" x times slower on one side of a random moment;
           1 (twice as often), 2 or 4 micro-batches a step, a short or long optimizer. The knob is
           "ramp|shift/x". A loaded snapshot of examples/grad_accum.py sped up 2.3x in its 10 s.

The rate in use. The attacher raises a rank's rate by itself where the analysis advises it (steps
too short to tell apart, an optimizer seen too rarely: diagnose/rate.py), up to --max-rate (400 Hz
by default), and reads the job's next windows there. So each point is judged where the attacher
settles: where its analysis advises a faster rate, the same job (its schedule drawn from the same
seed) is sampled again at that rate, until none is advised, and its rank-windows are counted at
the rate in use (their samples per step too). The target's line is printed for the same points at
their own fixed rates as well; --max-rate 0 judges every point at its own rate only.

The window in use. A snapshot of the default length samples on, up to --max-seconds (30 s by
default), where its analysis advises it (a rank's step time unknown with fewer than 40 step
boundaries seen: diagnose/window.py). So where the settled window's analysis advises it, the same
job is read again over --max-seconds at the rate settled on, and judged there; --max-seconds 0
judges every point over --seconds only.

The truth is each rank's median step over the analysis window; for an accumulating job a step is
an optimizer step (and samples per step count samples per optimizer step). With bursty delivery
the steps are not alike: the median is a ready batch's step (at w = 2 the steps alternate and the
median is either kind, by the window's parity); the mean is shown beside it in the worst points.

Printed: per samples-per-step band and per family, the rank-windows, the share given a step time,
the worst |step error| among those given one and the worst |count error| (steps counted against
the steps wholly in the window); the issue's target over the rank-windows whose steps are at least
5 samples long (>= 95% known, every known step within 5%, counts within 3%), with the counts off by
more than one step and the micro-batches a step said (not null) and said wrong; and the worst points
(> 5% step or > 3% count error) with the --point SPEC that runs one again.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testkit.simulator import ALL_SHAPES, LIBRARIES, SHAPES, Job, Truth, job, shaped_job, simulate
from traceml_attach.cli.common import DEFAULT_MAX_RATE
from traceml_attach.diagnose.analysis import Analysis, analyze
from traceml_attach.diagnose.rate import advise_rates, futile
from traceml_attach.diagnose.window import advise_window
from traceml_attach.ingest.stream import Recording
from traceml_attach.policy import SNAPSHOT_MOST_S
from traceml_attach.steps.classify import load_rules

PERIODS_MS = (5, 8, 13, 20, 30, 50, 80, 130, 200, 320, 500)
ACCUM_PERIODS_MS = (13, 20, 30, 50, 80, 130, 200, 320, 500, 800, 1300)   # optimizer steps
SHARES = (0.5, 0.7, 0.9, 0.95, 0.99)
RATES_HZ = (50, 100, 200, 300, 500)
RANKS = (1, 2, 4, 8)
JITTERS = (0.02, 0.05, 0.1, 0.15, 0.2)
KS = (2, 3, 4, 6, 8, 12, 16)
WORKERS = (2, 3, 4, 6, 8)
KNOBS: dict[str, tuple[str, ...]] = {
    "classic": tuple(str(s) for s in SHARES),
    "wrapper": ("in/loop", "in/step", "out/loop", "out/step"),
    "library": LIBRARIES,
    "accum": tuple(f"{k}/{o}" for k in KS for o in ("short", "long")),
    "bursty": tuple(str(w) for w in WORKERS),
    "contended": ("classic", "wrapper", "library"),
    "uneven": ("0.1", "0.25", "0.4"),
    "accum_bursty": tuple(f"{k}/{w}" for k in (2, 3, 4, 8) for w in (2, 3, 4)),
    "drifting": ("ramp/1.5", "ramp/2.5", "shift/2"),
}
FAMILIES = tuple(KNOBS)
BANDS = ((0, 2), (2, 5), (5, 10), (10, 30), (30, 100), (100, float("inf")))
QUICK_SHARE = 0.12     # --quick: this share of each family's points, the same ones every run
TARGET_SAMPLES = 5     # the target holds for steps at least this many samples long
STEP_LIMIT, COUNT_LIMIT = 0.05, 0.03


@dataclass(frozen=True)
class Point:
    family: str
    period_ms: float
    knob: str
    rate_hz: int
    ranks: int
    seed: int

    @property
    def spec(self) -> str:
        return f"{self.family}:{self.period_ms:g}:{self.knob}:{self.rate_hz}:{self.ranks}:{self.seed}"

    @classmethod
    def parse(cls, spec: str) -> Point:
        family, period, knob, rate, ranks, seed = spec.split(":")
        if family not in KNOBS or knob not in KNOBS[family]:
            raise SystemExit(f"--point {spec!r}: FAMILY:PERIOD_MS:KNOB:RATE_HZ:RANKS:SEED, knobs {KNOBS}")
        return cls(family, float(period), knob, int(rate), int(ranks), int(seed))


@dataclass
class Outcome:
    family: str
    samples_per_step: float
    known: bool
    step_error: float | None      # relative, signed, against the median step
    mean_error: float | None      # relative, signed, against the mean step
    count_error: float | None     # relative, signed
    counted: int
    true_steps: int
    disagreement: float | None    # synchronized ranks' spread of step_ms (relative)
    point: Point
    about: str
    reason: str | None = None     # why the step time is unknown (the clock's words)
    method: str | None = None     # how the clock was found (comb, wraps, joint, ...)
    micro: int | None = None      # micro-batches per step said (None: not counted)
    true_micro: int = 1           # the job's own


def build(pt: Point) -> tuple[Job, str]:
    """The point's job (its other choices drawn from its seed) and what they were."""
    rng = random.Random(pt.seed)
    p, n = pt.period_ms, pt.ranks
    jitter = rng.choice(JITTERS)
    sub = rng.choice((1, 3))
    straggler = rng.choice((0.0, 0.3, 0.7)) if n > 1 else 0.0
    if pt.family == "classic":
        dominant = "wait" if n > 1 else rng.choice(("input", "backward"))
        shape = rng.choice(SHAPES)
        return (job(p, dominant, float(pt.knob), ranks=n, rng=rng, jitter=jitter, shape=shape, sub_stacks=sub),
                f"{dominant} {float(pt.knob):.0%}, {shape}")
    if pt.family == "wrapper":
        inside, fetch = pt.knob.split("/")
        shares = {"input": rng.choice((0.002, 0.01, 0.03))}
        if inside == "out":
            shares["optimizer"] = rng.uniform(0.01, 0.03)
        the_job = shaped_job(p, shares, ranks=n, rng=rng, straggler=straggler, jitter=jitter, sub_stacks=sub,
                             shape="wrapper", optimizer_inside=inside == "in", fetch=fetch)
        return the_job, f"input {shares['input']:.1%}, straggler {straggler:.0%}"
    if pt.family == "library":
        shares = {"input": rng.choice((0.002, 0.01, 0.03))}
        if pt.knob == "lightning":
            shares["h2d"] = rng.uniform(0.005, 0.02)
        else:
            shares["optimizer"] = rng.uniform(0.01, 0.05)
        the_job = shaped_job(p, shares, ranks=n, rng=rng, straggler=straggler, jitter=jitter, sub_stacks=sub,
                             shape="library", library=pt.knob)
        return the_job, f"input {shares['input']:.1%}, straggler {straggler:.0%}"
    if pt.family == "accum":
        k_text, length = pt.knob.split("/")
        k = int(k_text)
        opt = rng.uniform(0.01, 0.03) if length == "short" else rng.uniform(0.15, 0.30)
        shape = rng.choice(("for", "while_next", "nested", "wrapper", "wrapper", "library"))
        extra: dict[str, object] = {}
        if shape == "wrapper":
            extra = {"optimizer_inside": rng.random() < 0.5, "fetch": rng.choice(("loop", "step"))}
        elif shape == "library":
            extra = {"library": rng.choice(LIBRARIES)}
        input_share = rng.choice((0.01, 0.05, 0.2))
        straggler = min(straggler, 0.3)   # the micro-batches keep some work of their own
        the_job = shaped_job(p, {"optimizer": opt, "input": input_share}, ranks=n, rng=rng, straggler=straggler,
                             jitter=jitter, sub_stacks=sub, shape=shape, accumulation=k, **extra)
        where = "/".join(str(v) for v in extra.values())
        return the_job, (f"optimizer {opt:.0%}, input {input_share:.0%}, {shape}{' ' + where if where else ''}, "
                         f"straggler {straggler:.0%}")
    if pt.family == "contended":
        worst = rng.choice((2.0, 3.0))
        if pt.knob == "classic":
            dominant = "wait" if n > 1 else rng.choice(("input", "backward"))
            share = rng.choice(SHARES)
            shape = rng.choice(SHAPES)
            return (job(p, dominant, share, ranks=n, rng=rng, jitter=jitter, shape=shape, sub_stacks=sub,
                        contended=worst), f"{dominant} {share:.0%}, {shape}, slowed up to {worst:g}x")
        shares = {"input": rng.choice((0.002, 0.01, 0.03))}
        library = rng.choice(LIBRARIES)
        the_job = shaped_job(p, shares, ranks=n, rng=rng, straggler=straggler, jitter=jitter, sub_stacks=sub,
                             shape=pt.knob, library=library, contended=worst)
        return the_job, (f"input {shares['input']:.1%}, straggler {straggler:.0%}"
                         f"{', ' + library if pt.knob == 'library' else ''}, slowed up to {worst:g}x")
    if pt.family == "accum_bursty":
        k_text, w_text = pt.knob.split("/")
        opt = rng.uniform(0.01, 0.03) if rng.random() < 0.5 else rng.uniform(0.15, 0.30)
        input_share = rng.choice((0.2, 0.4, 0.6))
        shape = rng.choice(SHAPES)
        straggler = min(straggler, 0.3)
        the_job = shaped_job(p, {"optimizer": opt, "input": input_share}, ranks=n, rng=rng, straggler=straggler,
                             jitter=jitter, sub_stacks=sub, shape=shape, accumulation=int(k_text),
                             workers=int(w_text))
        return the_job, (f"optimizer {opt:.0%}, input {input_share:.0%}, {shape}, straggler {straggler:.0%}, "
                         f"{w_text} workers")
    if pt.family == "drifting":
        kind, times = pt.knob.split("/")
        k = rng.choice((1, 1, 2, 4))
        opt = rng.uniform(0.01, 0.03) if rng.random() < 0.5 else rng.uniform(0.15, 0.30)
        input_share = rng.choice((0.01, 0.05, 0.2))
        shape = rng.choice(SHAPES)
        straggler = min(straggler, 0.3)
        the_job = shaped_job(p, {"optimizer": opt, "input": input_share}, ranks=n, rng=rng, straggler=straggler,
                             jitter=jitter, sub_stacks=sub, shape=shape, accumulation=k, drift=float(times),
                             drift_kind=kind)
        return the_job, (f"optimizer {opt:.0%}, input {input_share:.0%}, {shape}, {k} micro-batches, "
                         f"straggler {straggler:.0%}, {kind} {float(times):g}x")
    if pt.family == "uneven":
        input_share = rng.choice((0.5, 0.7, 0.8, 0.9))
        shape = rng.choice(SHAPES)
        the_job = shaped_job(p, {"input": input_share}, ranks=n, rng=rng, straggler=straggler, jitter=jitter,
                             sub_stacks=sub, shape=shape, uneven=float(pt.knob))
        return the_job, f"input {input_share:.0%}, {shape}, straggler {straggler:.0%}, {float(pt.knob):.0%} slowed"
    # bursty
    input_share = rng.choice((0.2, 0.4, 0.6, 0.8))
    shape = rng.choice(ALL_SHAPES)
    library = rng.choice(LIBRARIES)
    the_job = shaped_job(p, {"input": input_share}, ranks=n, rng=rng, jitter=jitter, sub_stacks=sub, shape=shape,
                         library=library, workers=int(pt.knob))
    return the_job, f"input {input_share:.0%}, {shape}{' ' + library if shape == 'library' else ''}"


def advised_hz(rec: Recording, an: Analysis, max_hz: int) -> int | None:
    """The rate the attacher's sampler takes next for this job, sampled at one rate throughout:
    the fastest its analysis advises (``diagnose.rate.advise_rates``: synchronized ranks share it),
    capped at ``max_hz``; None where none is advised."""
    advice = advise_rates(rec, an.pids, an.timelines, an.end_ns or 0)
    return min(max(a.rate_hz for a in advice), max_hz) if advice else None


def run_point(pt: Point, seconds: float, rules, max_hz: int = 0, most_s: float = 0.0
              ) -> tuple[list[Outcome], list[Outcome], Analysis, list[Truth]]:
    """The point's rank-windows at its own rate, and at the rate the attacher settles on where
    ``max_hz`` (--max-rate) is above it: the attacher raises a rank's rate where the analysis
    advises it and reads the job's next windows there, so the same job (its schedule drawn from the
    same seed) is sampled again at the advised rate until no faster one is advised; a rank raised
    to ``max_hz`` whose steps are still too short there goes back to its own rate
    (``diagnose.rate.futile``). Each outcome's samples per step are at the rate it was sampled
    at. Where ``most_s`` (the snapshot's --max-seconds) is over ``seconds``, a job whose analysis
    then advises sampling on (``diagnose.window.advise_window``: a rank's step time unknown with
    few boundaries seen) is read again over ``most_s`` at the rate settled on, as a snapshot of
    the default length samples on. Returns (fixed, settled, analysis, truths), the last two of the
    settled run."""
    the_job, about = build(pt)
    about = f"{about}, jitter {the_job.jitter:.0%}"
    rec, truths = simulate(the_job, pt.rate_hz, seconds, seed=pt.seed)
    first = analyze(rec, rules)
    fixed = judged(pt, first, truths, pt.rate_hz, about)
    settled, an, truths, rate_hz, about = _settled(pt, the_job, seconds, rules, max_hz, pt.rate_hz, rec, first,
                                                   truths, fixed, about)
    longer = advise_window(an, seconds, most_s)
    if longer is not None:   # read over the longer window, its rate settled there as the attacher goes on advising
        about += f", sampled on to {longer.seconds:g} s"
        rec, truths = simulate(the_job, rate_hz, longer.seconds, seed=pt.seed)
        an = analyze(rec, rules)
        settled, an, truths, _, _ = _settled(pt, the_job, longer.seconds, rules, max_hz, rate_hz, rec, an, truths,
                                             judged(pt, an, truths, rate_hz, about), about)
    return fixed, settled, an, truths


def _settled(pt: Point, the_job: Job, seconds: float, rules, max_hz: int, rate_hz: int, rec: Recording,
             an: Analysis, truths: list[Truth], outcomes: list[Outcome], about: str
             ) -> tuple[list[Outcome], Analysis, list[Truth], int, str]:
    """``run_point``'s window read at ``rate_hz`` (``rec``, ``an``, ``truths``, ``outcomes``), then
    at each faster rate advised until none is, or at the point's own rate where the attacher gives
    up (``futile``): (outcomes, analysis, truths, rate, about) where it settles."""
    start = (outcomes, an, truths, rate_hz, about)
    for _ in range(4):
        raised = advised_hz(rec, an, max_hz) if max_hz > rate_hz else None
        if raised is None or raised <= rate_hz:
            break
        about += f", raised from {rate_hz} to {raised} Hz"
        rate_hz = raised
        rec, truths = simulate(the_job, rate_hz, seconds, seed=pt.seed)
        an = analyze(rec, rules)
        outcomes = judged(pt, an, truths, rate_hz, about)
    if rate_hz > pt.rate_hz and any(futile(tl, pt.rate_hz, rate_hz) for tl in an.timelines.values()):
        # back at its own rate, as the attacher gives up
        about = re.sub(r", raised from \d+ to \d+ Hz", "", about)
        if start[3] == pt.rate_hz:
            return (*start[:4], about)
        rec, truths = simulate(the_job, pt.rate_hz, seconds, seed=pt.seed)
        an = analyze(rec, rules)
        return judged(pt, an, truths, pt.rate_hz, about), an, truths, pt.rate_hz, about
    return outcomes, an, truths, rate_hz, about


def judged(pt: Point, an: Analysis, truths: list[Truth], rate_hz: int, about: str) -> list[Outcome]:
    """Each rank's outcome in ``an`` against its truth, sampled at ``rate_hz``."""
    lo, hi = an.start_ns or 0, an.end_ns or 0
    known = [r.step_ms for r in an.ranks if r.step_ms is not None]
    spread = (max(known) - min(known)) / min(known) if len(known) > 1 else None
    out = []
    for r, truth in zip(an.ranks, truths, strict=True):
        if not truth.steps_in(lo, hi):
            continue   # no whole step in the window: nothing to judge
        true_ms, mean_ms = truth.median_step_ms(lo, hi), truth.mean_step_ms(lo, hi)
        true_steps = truth.steps_in(lo, hi)
        mean = r.clock is not None and r.clock.mean   # the step given is the mean: judged against the mean
        err = None if r.step_ms is None else r.step_ms / (mean_ms if mean else true_ms) - 1
        mean_err = None if r.step_ms is None else r.step_ms / mean_ms - 1
        count = None if r.step_ms is None or not true_steps else r.steps / true_steps - 1
        out.append(Outcome(pt.family, true_ms * rate_hz / 1000, r.step_ms is not None, err, mean_err, count,
                           r.steps, true_steps, spread, pt, about, r.clock.reason if r.clock else None,
                           r.clock.method if r.clock else None, r.micro_batches, truth.micro_batches))
    return out


def points(family: str) -> list[Point]:
    periods = ACCUM_PERIODS_MS if family in ("accum", "accum_bursty") else PERIODS_MS
    grid = [(p, k, r, n) for p in periods for k in KNOBS[family] for r in RATES_HZ for n in RANKS]
    return [Point(family, p, k, r, n, 1000 * i) for i, (p, k, r, n) in enumerate(grid)]


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def show_point(spec: str, seconds: float, rules, max_hz: int, most_s: float = 0.0) -> None:
    pt = Point.parse(spec)
    _, outcomes, an, truths = run_point(pt, seconds, rules, max_hz, most_s)
    print(f"{pt.spec}: {outcomes[0].about}")
    lo, hi = an.start_ns or 0, an.end_ns or 0
    for r, truth, o in zip(an.ranks, truths, outcomes, strict=True):
        clock = r.clock
        print(f"  rank {r.rank}: step {r.step_ms and round(r.step_ms, 2)} ms vs median "
              f"{truth.median_step_ms(lo, hi):.2f} / mean {truth.mean_step_ms(lo, hi):.2f} ms ({pct(o.step_error)}), "
              f"{r.steps} steps vs {o.true_steps} ({pct(o.count_error)}), micro-batches {r.micro_batches} "
              f"(true {truth.micro_batches}), {o.samples_per_step:.1f} samples/step, loop {r.loop}, "
              f"method {clock.method if clock else None}{': ' + clock.reason if clock and clock.reason else ''}")


def table(outcomes: list[Outcome], families: list[str]) -> None:
    print("| samples per step | family | rank-windows | known | worst step error | worst count error |")
    print("|---|---|---|---|---|---|")
    for lo, hi in BANDS:
        label = f"{lo}-{hi:g}" if hi != float("inf") else f"{lo}+"
        rows = [*families, "all"] if len(families) > 1 else families
        for family in rows:
            band = [o for o in outcomes if lo <= o.samples_per_step < hi and family in (o.family, "all")]
            if not band:
                continue
            known = [o for o in band if o.known]
            worst = max((abs(o.step_error or 0.0) for o in known), default=None)
            worst_n = max((abs(o.count_error or 0.0) for o in known), default=None)
            given = f"{len(known)} ({100 * len(known) / len(band):.0f}%)"
            w = "-" if worst is None else f"{100 * worst:.1f}%"
            wn = "-" if worst_n is None else f"{100 * worst_n:.1f}%"
            name = f"**{family}**" if family == "all" else family
            print(f"| {label} | {name} | {len(band)} | {given} | {w} | {wn} |")


def target(outcomes: list[Outcome], families: list[str]) -> None:
    print(f"\nsteps at least {TARGET_SAMPLES} samples long (target: >= 95% known, every known step within "
          f"{STEP_LIMIT:.0%}, counts within {COUNT_LIMIT:.0%}):")
    for family in [*families, "all"] if len(families) > 1 else families:
        long = [o for o in outcomes if o.samples_per_step >= TARGET_SAMPLES and family in (o.family, "all")]
        known = [o for o in long if o.known]
        off = sum(1 for o in known if abs(o.step_error or 0.0) > STEP_LIMIT)
        miscounted = sum(1 for o in known if abs(o.count_error or 0.0) > COUNT_LIMIT)
        # of them, off by more than one step (under 34 steps in the window, one step is over 3%)
        by_more = sum(1 for o in known if abs(o.count_error or 0.0) > max(COUNT_LIMIT, 1.5 / max(o.true_steps, 1)))
        # micro-batches a step, where a step time is given with them: said, and said wrong
        micro = [o for o in known if o.micro is not None]
        micro_wrong = sum(1 for o in micro if o.micro != o.true_micro)
        share = 100 * len(known) / max(len(long), 1)
        print(f"  {family:8s} {len(known)} of {len(long)} rank-windows known ({share:.1f}%); "
              f"known beyond {STEP_LIMIT:.0%}: {off}; counts beyond {COUNT_LIMIT:.0%}: {miscounted} "
              f"({by_more} by more than one step); "
              f"micro-batches said {len(micro)}, wrong {micro_wrong}")


def reasons(outcomes: list[Outcome], families: list[str]) -> None:
    """Why the step time is unknown where the steps are long enough (the target's windows): each
    family's reasons, their numbers made N, most common first, with a point that gave each."""
    print(f"\nwhy unknown, steps at least {TARGET_SAMPLES} samples long:")
    for family in families:
        unknown = [o for o in outcomes if o.family == family and o.samples_per_step >= TARGET_SAMPLES and not o.known]
        if not unknown:
            continue
        said: Counter[str] = Counter()
        example: dict[str, Point] = {}
        for o in unknown:
            words = re.sub(r"\d+(\.\d+)?", "N", o.reason or "no reason given")[:100]
            said[words] += 1
            example.setdefault(words, o.point)
        print(f"  {family}: {len(unknown)} unknown")
        for words, n in said.most_common():
            print(f"    {n:4d}  {words}  (--point {example[words].spec})")


OUTSIDE_BANDS = ((0.0, 0.5), (0.5, 1.0), (1.0, 2.0), (2.0, 5.0), (5.0, float("inf")))


def outside(outcomes: list[Outcome]) -> None:
    """The classic family's known share by the samples a step spends outside its dominant phase
    ((1 - share) x samples per step): under one, most boundaries cannot be seen at that rate."""
    classic = [o for o in outcomes if o.family == "classic" and o.samples_per_step >= TARGET_SAMPLES]
    if not classic:
        return
    print(f"\nclassic, steps at least {TARGET_SAMPLES} samples long, by the samples a step spends outside its "
          "dominant phase:")
    for lo, hi in OUTSIDE_BANDS:
        band = [o for o in classic if lo <= (1 - float(o.point.knob)) * o.samples_per_step < hi]
        if band:
            known = sum(o.known for o in band)
            print(f"  {lo:g}-{hi:g}: {known} of {len(band)} known ({100 * known / len(band):.0f}%)")


def worst_points(outcomes: list[Outcome], n: int) -> None:
    bad: dict[Point, Outcome] = {}
    for o in outcomes:
        if not o.known:
            continue
        score = max(abs(o.step_error or 0.0) / STEP_LIMIT, abs(o.count_error or 0.0) / COUNT_LIMIT)
        if score > 1 and (o.point not in bad or score > max(abs(bad[o.point].step_error or 0.0) / STEP_LIMIT,
                                                           abs(bad[o.point].count_error or 0.0) / COUNT_LIMIT)):
            bad[o.point] = o
    ranked = sorted(bad.values(), key=lambda o: -max(abs(o.step_error or 0.0) / STEP_LIMIT,
                                                     abs(o.count_error or 0.0) / COUNT_LIMIT))
    print(f"\nworst points (> {STEP_LIMIT:.0%} step or > {COUNT_LIMIT:.0%} count error, worst rank each): "
          f"{len(ranked)} points" + (f", the worst {n}:" if len(ranked) > n else ":"))
    for o in ranked[:n]:
        pt = o.point
        print(f"  step {pct(o.step_error)} (mean {pct(o.mean_error)}), steps {o.counted} vs {o.true_steps} "
              f"({pct(o.count_error)}), {o.samples_per_step:.1f} samples/step: {pt.family} {pt.period_ms:g} ms "
              f"{pt.knob}, {pt.rate_hz} Hz, {pt.ranks} rank(s), {o.about}\n"
              f"      python bench/sim_grid.py --point {pt.spec}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="sampling window per job (default 10, a snapshot)")
    parser.add_argument("--seeds", type=int, help="seeds per grid point (default 2; 1 with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_SHARE * 100:.0f}%% of each family's points (the same every run), "
                             "one seed: ~7 min on one core (~4 with --max-rate 0)")
    parser.add_argument("--shape", choices=FAMILIES, help="one family only")
    parser.add_argument("--worst", type=int, default=20, help="worst points listed (default 20)")
    parser.add_argument("--reasons", action="store_true",
                        help="also tally why the step time is unknown where the steps are long enough")
    parser.add_argument("--dump", metavar="FILE", type=Path,
                        help="also write each rank-window's outcome as a JSON line (to compare two runs)")
    parser.add_argument("--point", metavar="SPEC", help="run one point (as the worst points print it), rank by rank")
    parser.add_argument("--max-rate", type=int, default=DEFAULT_MAX_RATE, metavar="HZ",
                        help="the attacher's --max-rate: where the analysis advises a faster rate (steps too short "
                        "to tell apart, an optimizer seen too rarely), the job is read again there, as the attacher "
                        f"does, and judged at the rate in use (default {DEFAULT_MAX_RATE}, the attacher's; 0: every "
                        "point at its own fixed rate only)")
    parser.add_argument("--max-seconds", type=float, default=SNAPSHOT_MOST_S, metavar="S",
                        help="the snapshot's --max-seconds: where the analysis of the window advises sampling on (a "
                        "rank's step time unknown with few boundaries seen), the job is read again over S seconds, as "
                        f"a snapshot of the default length does (default {SNAPSHOT_MOST_S:g}; 0: every window "
                        "--seconds long)")
    parser.add_argument("--start", type=int, metavar="HZ",
                        help="every point sampled first at this rate instead of its own (100: the attacher's default "
                        "--rate, as a user who passes none), then raised as advised up to --max-rate: the rates a "
                        "point's own rate passes over (400 for a point at 500) are read too")
    args = parser.parse_args()
    rules = load_rules()
    if args.point:
        show_point(args.point, args.seconds, rules, args.max_rate, args.max_seconds)
        return
    families = [args.shape] if args.shape else list(FAMILIES)
    seeds = args.seeds or (1 if args.quick else 2)
    todo = [pt for family in families for pt in points(family)]
    if args.quick:
        pick = random.Random(0)
        todo = [pt for pt in todo if pick.random() < QUICK_SHARE]
    if args.start:   # the same jobs (each point's seed draws its job), from another rate
        todo = [Point(pt.family, pt.period_ms, pt.knob, args.start, pt.ranks, pt.seed) for pt in todo]
    outcomes: list[Outcome] = []
    fixed: list[Outcome] = []
    t0 = time.monotonic()
    for i, pt in enumerate(todo):
        for s in range(seeds):
            at_own, settled, _, _ = run_point(Point(pt.family, pt.period_ms, pt.knob, pt.rate_hz, pt.ranks,
                                                    pt.seed + s), args.seconds, rules, args.max_rate,
                                              args.max_seconds)
            fixed += at_own
            outcomes += settled
        if i % 100 == 0:
            print(f"  {i}/{len(todo)} grid points, {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    print(f"{len(todo)} grid points x {seeds} seed(s), {len(outcomes)} rank-windows, {args.seconds:g} s windows, "
          f"families {', '.join(families)}\n")
    if args.max_rate:
        raised = sum(1 for o in outcomes if ", raised from" in o.about)
        longer = sum(1 for o in outcomes if ", sampled on to" in o.about)
        print(f"at the rate the attacher settles on (--max-rate {args.max_rate}; {raised} of {len(outcomes)} "
              f"rank-windows read again at an advised rate, {longer} sampled on to {args.max_seconds:g} s "
              "(--max-seconds); samples per step at the rate in use):\n")
    table(outcomes, families)
    target(outcomes, families)
    if args.max_rate:
        print("\nthe same points, each at its own fixed rate (--max-rate 0):", end="")
        target(fixed, families)
    known = [o for o in outcomes if o.known]
    over5 = [o for o in known if abs(o.step_error or 0.0) > 0.05]
    over10 = [o for o in known if abs(o.step_error or 0.0) > 0.10]
    spreads = [o.disagreement for o in outcomes if o.disagreement is not None]
    print(f"\nstep time given for {len(known)} of {len(outcomes)} rank-windows; "
          f"beyond 5%: {len(over5)}, beyond 10%: {len(over10)}")
    print(f"worst disagreement between synchronized ranks: {100 * max(spreads, default=0.0):.1f}%")
    worst_points(outcomes, args.worst)
    if args.dump:
        with args.dump.open("w") as out:
            for o in outcomes:
                out.write(json.dumps({"point": o.point.spec, "samples_per_step": round(o.samples_per_step, 2),
                                      "raised": ", raised from" in o.about,
                                      "longer": ", sampled on to" in o.about,
                                      "known": o.known, "step_error": o.step_error, "mean_error": o.mean_error,
                                      "count_error": o.count_error, "true_steps": o.true_steps,
                                      "method": o.method, "reason": o.reason,
                                      "micro": o.micro, "true_micro": o.true_micro}) + "\n")
    if args.reasons:
        reasons(outcomes, families)
        outside(outcomes)
    print(f"\n{time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
