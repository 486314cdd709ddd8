"""What py-spy would record of a known schedule: a sampling simulator for the step estimator.

A job is a schedule of phases per step (durations with jitter) on one or more ranks. Ranks
of a synchronized job meet in backward's all-reduce every step: the fast ones wait there
for the slowest, so they share one step period. py-spy samples each rank as a Poisson
process (py-spy draws exponential gaps to avoid aliasing) at ``rate_hz`` from a random
phase; a sample can fail (``error_rate``) and the sampler can stall (``stall_rate``
stalls per second of ``stall_ms`` each: py-spy descheduled on a busy machine). Like
py-spy's chrometrace output, only stack *changes* are kept: a span runs from one change
to the next, so the samples in between, and the ones that were never taken, are invisible.

The result is a Recording, the same object the attacher builds from its frame stream,
with each rank's true step boundaries and phase times beside it.
"""

from __future__ import annotations

import itertools
import random
import statistics
from dataclasses import dataclass, field

from tests.stacks import BACKWARD, FETCH, FORWARD, H2D, MAIN, MODULE, OPTIM, f, torch_frame
from traceml_attach.ingest.model import CodeFrame, Span, TargetMeta, ThreadInfo
from traceml_attach.ingest.stream import Recording

LOOP_ORDER = ("input", "h2d", "forward", "backward", "optimizer")
SHAPES = ("for", "while_next", "nested")
MS = 1_000_000


@dataclass(frozen=True)
class RankWork:
    """One rank's work per step, in ms, before any waiting for the other ranks."""

    input_ms: float
    h2d_ms: float
    forward_ms: float
    backward_ms: float
    optimizer_ms: float
    input_blocked: bool = True   # DataLoader workers make the batch: the loop waits, off CPU

    def of(self, phase: str) -> float:
        return float(getattr(self, f"{phase}_ms"))


@dataclass(frozen=True)
class Job:
    ranks: tuple[RankWork, ...]
    jitter: float = 0.05          # relative std of each phase's duration, every step
    shape: str = "for"            # the training loop's shape: for / while_next / nested
    sub_stacks: int = 1           # distinct stacks a phase walks through (module calls)


@dataclass
class Truth:
    bounds_ns: list[int] = field(default_factory=list)   # each step's start, and the last end
    phases_ns: list[dict[str, int]] = field(default_factory=list)

    def durations_ns(self, start_ns: int, end_ns: int) -> list[int]:
        """The steps that lie wholly inside [start_ns, end_ns)."""
        return [b - a for a, b in itertools.pairwise(self.bounds_ns) if a >= start_ns and b <= end_ns]

    def median_step_ms(self, start_ns: int, end_ns: int) -> float:
        return statistics.median(self.durations_ns(start_ns, end_ns)) / MS

    def steps_in(self, start_ns: int, end_ns: int) -> int:
        return len(self.durations_ns(start_ns, end_ns))

    def shares(self, start_ns: int, end_ns: int) -> dict[str, float]:
        steps = [p for a, b, p in zip(self.bounds_ns, self.bounds_ns[1:], self.phases_ns, strict=False)
                 if a >= start_ns and b <= end_ns]
        total = sum(sum(p.values()) for p in steps) or 1
        phases = ("input", "h2d", "forward", "backward", "optimizer", "wait")
        return {ph: sum(p.get(ph, 0) for p in steps) / total for ph in phases}


def _loop_frame(shape: str, line: int, src: str) -> tuple[CodeFrame, ...]:
    if shape == "nested":
        # the loop is in train(); each step's work is in train_step(), called from it
        if line == FETCH[0]:
            return (f("train", line=19, src="for batch in loader:"),)
        return (f("train", line=20, src="train_step(batch)"), f("train_step", line=line + 30, src=src))
    if shape == "while_next" and line == FETCH[0]:
        return (f("train", line=line, src="x, y = next(it)"),)
    return (f("train", line=line, src=src),)


def _stacks(shape: str, sub_stacks: int) -> dict[str, list[tuple[CodeFrame, ...]]]:
    """Each phase's stacks as py-spy sees them (outermost first)."""
    out: dict[str, list[tuple[CodeFrame, ...]]] = {}
    for phase, (line, src, below) in zip(LOOP_ORDER, (FETCH, H2D, FORWARD, BACKWARD, OPTIM), strict=False):
        base = (MODULE, MAIN, *_loop_frame(shape, line, src), *below)
        out[phase] = [base + ((torch_frame(f"op{k}", "torch/nn/functional.py", 100 + k),) if k else ())
                      for k in range(sub_stacks)]
    # a rank waiting for the others in backward's all-reduce: still inside backward
    line, src, below = BACKWARD
    out["sync"] = [(MODULE, MAIN, *_loop_frame(shape, line, src), *below,
                    torch_frame("_DDPSink.backward", "torch/nn/parallel/distributed.py"))]
    return out


def _schedule(job: Job, seconds: float, rng: random.Random, t0_ns: int
              ) -> tuple[list[list[tuple[int, int, str, bool]]], list[Truth]]:
    """Per rank: [(start, end, phase, blocked)] pieces covering [t0, t0 + seconds); and the truth."""
    n = len(job.ranks)
    pieces: list[list[tuple[int, int, str, bool]]] = [[] for _ in range(n)]
    truths = [Truth() for _ in range(n)]
    t = t0_ns
    end = t0_ns + int(seconds * 1e9)

    def draw(ms: float) -> int:
        return max(int(rng.gauss(ms, job.jitter * ms) * MS), 0) if ms > 0 else 0

    while t < end:
        work = [{p: draw(w.of(p)) for p in LOOP_ORDER} for w in job.ranks]
        # every rank reaches the all-reduce after its input, forward and backward work
        reach = [w["input"] + w["h2d"] + w["forward"] + w["backward"] for w in work]
        sync_at = max(reach)
        opt = work[0]["optimizer"]    # the same update on every rank: they leave together
        for r in range(n):
            truths[r].bounds_ns.append(t)
            at = t
            for phase in ("input", "h2d", "forward", "backward"):
                if work[r][phase]:
                    pieces[r].append((at, at + work[r][phase], phase, phase == "input" and job.ranks[r].input_blocked))
                    at += work[r][phase]
            wait = sync_at - reach[r]
            if wait and n > 1:
                pieces[r].append((at, at + wait, "sync", True))
                at += wait
            if opt:
                pieces[r].append((at, at + opt, "optimizer", False))
            phases = {p: work[r][p] for p in LOOP_ORDER}
            phases["backward"] += wait if n > 1 else 0
            phases["optimizer"] = opt
            truths[r].phases_ns.append(phases)
        t += sync_at + opt
    for truth in truths:
        truth.bounds_ns.append(t)
    return pieces, truths


def _sample_times(rng: random.Random, rate_hz: float, t0: int, t1: int, error_rate: float,
                  stall_rate: float, stall_ms: float) -> list[int]:
    out: list[int] = []
    t = t0 + int(rng.expovariate(rate_hz) * 1e9)
    while t < t1:
        if stall_rate and rng.random() < stall_rate / rate_hz:
            t += int(stall_ms * MS)   # py-spy got no CPU: no sample for a while
        if rng.random() >= error_rate:
            out.append(t)
        t += int(rng.expovariate(rate_hz) * 1e9)
    return out


def _spans(pid: int, pieces: list[tuple[int, int, str, bool]], stacks: dict[str, list[tuple[CodeFrame, ...]]],
           times: list[int], end_ns: int) -> list[Span]:
    spans: list[Span] = []
    i = 0
    current: tuple[CodeFrame, ...] | None = None
    since = 0
    for ts in times:
        while i < len(pieces) and pieces[i][1] <= ts:
            i += 1
        if i == len(pieces):
            break
        start, stop, phase, _ = pieces[i]
        options = stacks[phase]
        stack = options[min(int((ts - start) * len(options) / max(stop - start, 1)), len(options) - 1)]
        if stack != current:
            if current is not None:
                spans.append(Span(pid, 1, since, ts - since, current))
            current, since = stack, ts
    if current is not None:
        spans.append(Span(pid, 1, since, max(end_ns - since, 1), current))
    return spans


def _cpu_rows(pieces: list[tuple[int, int, str, bool]], t0: int, t1: int, every_ns: int = 20 * MS
              ) -> list[tuple[int, int, int]]:
    """The training thread's cumulative on-CPU ns every 20 ms, as the agent reads it."""
    rows, busy, i = [], 0, 0
    last = t0
    for ts in range(t0, t1, every_ns):
        while i < len(pieces) and pieces[i][0] < ts:
            start, stop, _, blocked = pieces[i]
            lo, hi = max(start, last), min(stop, ts)
            if hi > lo and not blocked:
                busy += hi - lo
            if stop <= ts:
                i += 1
            else:
                break
        last = ts
        rows.append((ts, busy, 0))
    return rows


def simulate(job: Job, rate_hz: float, seconds: float = 10.0, seed: int = 0, error_rate: float = 0.0,
             stall_rate: float = 0.0, stall_ms: float = 0.0) -> tuple[Recording, list[Truth]]:
    """A Recording of ``seconds`` of ``job`` sampled at ``rate_hz``, and each rank's truth."""
    rng = random.Random(seed)
    t0 = 1_000_000_000_000
    # the job has been running for a while when sampling starts, at a random phase of its step
    lead_ns = int(rng.uniform(0.5, 1.5) * 1e9)
    pieces, truths = _schedule(job, seconds + lead_ns / 1e9 + 1.0, rng, t0 - lead_ns)
    stacks = _stacks(job.shape, job.sub_stacks)
    rec = Recording()
    rec.hello = {"k": "hello", "rate_hz": rate_hz}
    end = t0 + int(seconds * 1e9)
    n = len(job.ranks)
    for r in range(n):
        pid = 1000 + r
        rec.targets[pid] = TargetMeta(pid, None, ("train.py",), r if n > 1 else None, r if n > 1 else None,
                                      n if n > 1 else None, t0)
        rec.threads[pid] = {1: ThreadInfo(1, pid, "MainThread", True)}
        times = _sample_times(rng, rate_hz, t0, end, error_rate, stall_rate, stall_ms)
        rec.spans[pid] = _spans(pid, pieces[r], stacks, times, end)
        rec.cpu[pid] = _cpu_rows(pieces[r], t0, end + 20 * MS)
    first = min(s[0].ts_ns for s in rec.spans.values() if s)
    last = max(s[-1].end_ns for s in rec.spans.values() if s)
    rec._range = (first, last)
    return rec, truths


def job(period_ms: float, dominant: str, share: float, ranks: int = 1, rng: random.Random | None = None,
        **kwargs: object) -> Job:
    """A job whose ``dominant`` phase (input, forward, backward, or "wait" for the fast ranks of
    a synchronized job) takes ``share`` of a ``period_ms`` step; the rest is spread over the
    other phases at random (seeded by ``rng``)."""
    rng = rng or random.Random(0)
    rest = (1 - share) * period_ms
    if dominant == "wait":
        # ranks - 1 fast ranks wait `share` of the step in backward for one slow rank, whose
        # extra forward work is that wait
        weights = [rng.uniform(0.2, 1.0) for _ in LOOP_ORDER]
        base = {p: rest * w / sum(weights) for p, w in zip(LOOP_ORDER, weights, strict=False)}
        fast = RankWork(**{f"{p}_ms": base[p] for p in LOOP_ORDER})
        slow = RankWork(**{f"{p}_ms": base[p] + (share * period_ms if p == "forward" else 0.0) for p in LOOP_ORDER})
        return Job((slow, *[fast] * (ranks - 1)), **kwargs)  # type: ignore[arg-type]
    others = [p for p in LOOP_ORDER if p != dominant]
    weights = [rng.uniform(0.2, 1.0) for _ in others]
    parts = {p: rest * w / sum(weights) for p, w in zip(others, weights, strict=False)}
    parts[dominant] = share * period_ms
    work = RankWork(**{f"{p}_ms": parts[p] for p in LOOP_ORDER})
    return Job(tuple([work] * ranks), **kwargs)  # type: ignore[arg-type]
