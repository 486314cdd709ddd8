"""The step estimator over a wide grid of simulated jobs: how often it knows, how wrong it is when it does.

    python bench/sim_grid.py [--seconds 10] [--seeds 2] [--quick]

Each grid point is a job (tests/simulator.py) with a known schedule: step period 5-500 ms,
dominant-phase share 50-99% (input or backward on one rank; the fast ranks' wait in the
all-reduce on 2-8 synchronized ranks), per-phase jitter 2-15%, a for / while-next / nested loop,
sampled by a simulated py-spy (Poisson, random phase) at 50-200 Hz for the summary's window. The
full analysis runs on it. Printed: for each samples-per-step band, how many ranks got a step time
and the worst errors against the truth (median step over the window, steps counted), and the
worst disagreement between synchronized ranks.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.simulator import SHAPES, job, simulate
from traceml_attach.diagnose.analysis import analyze
from traceml_attach.steps.classify import load_rules

PERIODS_MS = (5, 8, 13, 20, 30, 50, 80, 130, 200, 320, 500)
SHARES = (0.5, 0.7, 0.9, 0.95, 0.99)
RATES_HZ = (50, 100, 200)
RANKS = (1, 2, 4, 8)
BANDS = ((0, 5), (5, 10), (10, 30), (30, 101))


@dataclass
class Outcome:
    samples_per_step: float
    known: bool
    step_error: float | None      # relative, signed
    count_error: float | None     # relative, signed
    disagreement: float | None    # synchronized ranks' spread of step_ms (relative)
    point: str


def run_point(period_ms: float, share: float, rate_hz: int, ranks: int, seconds: float, seed: int,
              rules: list) -> list[Outcome]:
    rng = random.Random(seed)
    dominant = "wait" if ranks > 1 else rng.choice(("input", "backward"))
    shape = rng.choice(SHAPES)
    jitter = rng.choice((0.02, 0.05, 0.15))
    the_job = job(period_ms, dominant, share, ranks=ranks, rng=rng, jitter=jitter, shape=shape,
                  sub_stacks=rng.choice((1, 3)))
    rec, truths = simulate(the_job, rate_hz, seconds, seed=seed)
    an = analyze(rec, rules)
    lo, hi = an.start_ns or 0, an.end_ns or 0
    known = [r.step_ms for r in an.ranks if r.step_ms is not None]
    spread = (max(known) - min(known)) / min(known) if len(known) > 1 else None
    point = (f"{period_ms} ms, {dominant} {share:.0%}, {rate_hz} Hz, {ranks} rank(s), {shape}, "
             f"jitter {jitter:.0%}, seed {seed}")
    out = []
    for r, truth in zip(an.ranks, truths, strict=True):
        true_ms = truth.median_step_ms(lo, hi)
        true_steps = truth.steps_in(lo, hi)
        err = None if r.step_ms is None else r.step_ms / true_ms - 1
        count = None if r.step_ms is None or not true_steps else r.steps / true_steps - 1
        out.append(Outcome(true_ms * rate_hz / 1000, r.step_ms is not None, err, count, spread, point))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="sampling window per job (default 10, a snapshot)")
    parser.add_argument("--seeds", type=int, default=2, help="seeds per grid point (default 2)")
    parser.add_argument("--quick", action="store_true", help="one rank count per point, chosen at random")
    args = parser.parse_args()
    rules = load_rules()
    outcomes: list[Outcome] = []
    t0 = time.monotonic()
    points = [(p, s, r, n) for p in PERIODS_MS for s in SHARES for r in RATES_HZ for n in RANKS]
    if args.quick:
        pick = random.Random(0)
        points = [pt for pt in points if pick.random() < 0.25]
    for i, (p, s, r, n) in enumerate(points):
        for seed in range(args.seeds):
            outcomes += run_point(p, s, r, n, args.seconds, 1000 * i + seed, rules)
        if i % 50 == 0:
            print(f"  {i}/{len(points)} grid points, {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    print(f"{len(points)} grid points x {args.seeds} seeds, {len(outcomes)} ranks, {args.seconds:.0f} s windows\n")
    print("| samples per true step | ranks | step time given | worst step error | worst count error |")
    print("|---|---|---|---|---|")
    for lo, hi in BANDS:
        band = [o for o in outcomes if lo <= o.samples_per_step < hi]
        known = [o for o in band if o.known]
        worst = max((abs(o.step_error or 0.0) for o in known), default=0.0)
        worst_n = max((abs(o.count_error or 0.0) for o in known), default=0.0)
        given = f"{len(known)} ({100 * len(known) / max(len(band), 1):.0f}%)"
        label = f"{lo}-{hi if hi < 101 else 100}"
        print(f"| {label} | {len(band)} | {given} | {100 * worst:.1f}% | {100 * worst_n:.1f}% |")
    known = [o for o in outcomes if o.known]
    over5 = [o for o in known if abs(o.step_error or 0.0) > 0.05]
    over10 = [o for o in known if abs(o.step_error or 0.0) > 0.10]
    spreads = [o.disagreement for o in outcomes if o.disagreement is not None]
    print(f"\nstep time given for {len(known)} of {len(outcomes)} ranks; "
          f"beyond 5%: {len(over5)}, beyond 10%: {len(over10)}")
    print(f"worst disagreement between synchronized ranks: {100 * max(spreads, default=0.0):.1f}%")
    print("\nworst step errors:")
    for o in sorted(known, key=lambda o: -abs(o.step_error or 0.0))[:5]:
        print(f"  {100 * (o.step_error or 0.0):+.1f}% (steps {100 * (o.count_error or 0.0):+.1f}%): {o.point}")
    print("\nworst step-count errors:")
    for o in sorted(known, key=lambda o: -abs(o.count_error or 0.0))[:5]:
        print(f"  {100 * (o.count_error or 0.0):+.1f}% (step {100 * (o.step_error or 0.0):+.1f}%): {o.point}")
    print(f"\n{time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
