"""The trend of one memory series, as the step-memory diagnosis judges it (diagnose/memory.py):
medians of blocks of time and their least-squares fit with its standard error, the window's
three bands, a one-off rise found by a change point, and the state they put the series in
(rising, creep, flat, a jump, falling, slight, wandering, unsettled). Pure functions."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from traceml_attach.policy import MemoryPolicy

Series = Sequence[tuple[int, int]]  # (ts_ns, bytes), in time order

# Student's t at 97.5% for the blocks' fit (degrees of freedom: blocks - 2)
T_975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31}
RISING_STATES = ("rising", "creep")
JUMP_POINTS = 120   # a long series is looked at as this many medians for its one-off step


@dataclass(frozen=True)
class Jump:
    """One step up that explains most of a window's rise."""

    at_ns: int
    bytes: int


@dataclass(frozen=True)
class Trend:
    """How a series moved past the warm-up."""

    from_ns: int                        # the first sample judged
    span_s: float                       # seconds from the first to the last sample judged
    bands_bytes: tuple[int, int, int]   # median of each third (of time)
    separated: bool                     # every tail sample at or above every head sample
    rise_bytes: float                   # the fitted rise over the span (the blocks' slope x span)
    se_bytes: float                     # its standard error
    noise_bytes: float                  # its uncertainty (95%), never under min_noise_bytes
    steady_fit: bool                    # every block at or above the one before (within slack)
    short: bool                         # under creep_min_span_s: only a large rise can be told
    jump: Jump | None = None
    gpu: bool = False                   # a GPU's memory (no allocator swings: smaller floors)
    rose_blocks: int = 0                # blocks that rose by a good part of the average step...
    block_steps: int = 0                # ...of this many steps between blocks

    @property
    def growth_bytes(self) -> int:
        return self.bands_bytes[2] - self.bands_bytes[0]

    @property
    def level_bytes(self) -> int:
        return self.bands_bytes[2]

    @property
    def bytes_per_s(self) -> float:
        return self.rise_bytes / self.span_s if self.span_s > 0 else 0.0


def judged(series: Series, from_ns: int) -> list[tuple[int, int]]:
    return [(t, v) for t, v in series if t >= from_ns]


def trend(series: Series, policy: MemoryPolicy, from_ns: int, gpu: bool = False) -> Trend | None:
    """The series from ``from_ns`` on (the warm-up ends there); None until it covers
    ``min_judged_s`` seconds and ``min_samples`` samples, or when a third holds no sample."""
    points = judged(series, from_ns)
    if len(points) < policy.min_samples:
        return None
    first, last = points[0][0], points[-1][0]
    if last - first < policy.min_judged_s * 1e9:
        return None
    thirds = _split(points, 3)
    if thirds is None:
        return None
    head, mid, tail = (int(statistics.median([v for _, v in b])) for b in thirds)
    span_s = (last - first) / 1e9
    rise, se, dof, steady, rose = _fit(points, policy)
    noise = max(T_975.get(dof, 2.0) * se, policy.min_noise_bytes)
    return Trend(first, span_s, (head, mid, tail), min(v for _, v in thirds[2]) >= max(v for _, v in thirds[0]),
                 rise, se, noise, steady, span_s < policy.creep_min_span_s, _jump(points, policy), gpu,
                 rose, (policy.blocks if _split(points, policy.blocks) else 3) - 1)


def _split(points: Sequence[tuple[int, int]], n: int) -> list[list[tuple[int, int]]] | None:
    """``points`` in ``n`` equal stretches of time; None when one holds no point."""
    first, last = points[0][0], points[-1][0]
    width = (last - first) / n
    parts: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for t, v in points:
        parts[min(int((t - first) / width), n - 1) if width else 0].append((t, v))
    return parts if all(parts) else None


def _fit(points: Sequence[tuple[int, int]], policy: MemoryPolicy) -> tuple[float, float, int, bool, int]:
    """(rise over the span, its standard error, the fit's degrees of freedom, every block at or
    above the one before, the blocks that rose by a good part of the average step) from a line
    through the medians of ``policy.blocks`` equal blocks of time: a block's median is robust to
    one reading, and the blocks' scatter around the line holds the allocator's swings, which
    one-second readings would understate."""
    blocks = _split(points, policy.blocks) or _split(points, 3)
    if blocks is None:
        return 0.0, math.inf, 0, False, 0
    # lists, not generators: fmean takes a list about 4 times as fast (the trend is worked out every tick)
    xs = [statistics.fmean([t for t, _ in b]) / 1e9 for b in blocks]
    ys = [statistics.median([v for _, v in b]) for b in blocks]
    x0, y0 = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - x0) ** 2 for x in xs)
    slope = sum((x - x0) * (y - y0) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    span = (points[-1][0] - points[0][0]) / 1e9
    dof = len(xs) - 2
    resid = [y - (y0 + slope * (x - x0)) for x, y in zip(xs, ys, strict=True)]
    se = math.sqrt(sum(r * r for r in resid) / dof / sxx) if dof > 0 and sxx else math.inf
    steps = [b - a for a, b in itertools.pairwise(ys)]
    average = (ys[-1] - ys[0]) / max(len(steps), 1)
    slack = policy.block_slack * abs(average)
    rose = sum(1 for s in steps if average > 0 and s >= policy.block_slack * average)
    return slope * span, se * span, dof, all(s >= -slack for s in steps), rose


def _jump(points: Sequence[tuple[int, int]], policy: MemoryPolicy) -> Jump | None:
    """A one-off rise: the split of the series with the largest step between the medians before
    and after it, where that step holds ``jump_share`` of the whole rise and each side is flat."""
    points = _thinned(points)
    n = len(points)
    if n < 6:
        return None
    values = [v for _, v in points]
    i = _change_point(values)
    step = statistics.median(values[i:]) - statistics.median(values[:i])
    whole = max(values[-3:]) - min(values[:3])
    if step < policy.jump_min_bytes or whole <= 0 or step < policy.jump_share * whole:
        return None
    # flat on either side, a reading next to the step aside (a large allocation is filled over a
    # reading or two)
    before, after = values[:max(i - 1, 1)], values[min(i + 1, n - 1):]
    flat = policy.jump_flat * step
    if max(before) - min(before) > flat * 2 or _third_rise(after) > flat or _third_rise(before) > flat:
        return None
    return Jump(points[i][0], int(step))


def _change_point(values: Sequence[int]) -> int:
    """Where a series is best cut in two flat stretches: the least squared error around each
    stretch's mean (prefix sums: one pass); a stretch may be one reading long (a step at the
    window's edge is still one step)."""
    n = len(values)
    sums, squares = [0.0], [0.0]
    for v in values:
        sums.append(sums[-1] + v)
        squares.append(squares[-1] + float(v) * v)

    def sse(a: int, b: int) -> float:
        total = sums[b] - sums[a]
        return squares[b] - squares[a] - total * total / (b - a)

    return min(range(1, n), key=lambda i: sse(0, i) + sse(i, n))


def _thinned(points: Sequence[tuple[int, int]]) -> Sequence[tuple[int, int]]:
    """At most JUMP_POINTS points: runs of consecutive points as their first time and median value."""
    if len(points) <= JUMP_POINTS:
        return points
    size = math.ceil(len(points) / JUMP_POINTS)
    return [(points[i][0], int(statistics.median(v for _, v in points[i:i + size])))
            for i in range(0, len(points), size)]


def _third_rise(values: Sequence[int]) -> float:
    third = max(len(values) // 3, 1)
    return abs(statistics.median(values[-third:]) - statistics.median(values[:third]))


def series_state(tr: Trend, policy: MemoryPolicy) -> str:
    rising = _rising_short(tr, policy) if tr.short else _rising_long(tr, policy)
    if tr.jump is not None and not rising:
        return "jump"
    if rising:
        return "rising" if tr.short else "creep"
    if (abs(tr.rise_bytes) <= tr.noise_bytes <= max(policy.steady_noise_share * tr.level_bytes, policy.min_noise_bytes)
            and abs(tr.growth_bytes) <= tr.noise_bytes):
        return "flat"
    head, mid, tail = tr.bands_bytes
    if tr.rise_bytes < -tr.noise_bytes and head > mid > tail:
        return "falling"
    if tr.short:
        return "unsettled"
    return "slight" if _steady_rise(tr, policy) else "wandering"


def _rising_short(tr: Trend, policy: MemoryPolicy) -> bool:
    """A large rise under way across a short window: each third above the one before by a fifth
    of it at least, every tail reading above every head reading, and more than an allocator swing."""
    head, mid, tail = tr.bands_bytes
    rise = tail - head
    return (tr.separated and rise >= short_floor(tr, policy)
            and mid - head >= 0.2 * rise and tail - mid >= 0.2 * rise
            and tr.rose_blocks >= tr.block_steps - 1)   # spread over the window: not one ramp that stopped


def short_floor(tr: Trend, policy: MemoryPolicy) -> float:
    level = tr.bands_bytes[0]
    if tr.gpu:
        return max(policy.rising_min_bytes_gpu, policy.rising_min_share_gpu * level)
    return float(policy.rising_min_bytes)


def _rising_long(tr: Trend, policy: MemoryPolicy) -> bool:
    """Creep: a steady rise (``_steady_rise``) of at least the floor."""
    return _steady_rise(tr, policy) and tr.rise_bytes >= _long_floor(tr, policy)


def _steady_rise(tr: Trend, policy: MemoryPolicy) -> bool:
    """The blocks rise one after the other, the fit's rise is far beyond its standard error, and
    the last third keeps the middle third's pace."""
    head, mid, tail = tr.bands_bytes
    return (tr.steady_fit and tr.rise_bytes >= policy.trend_t * tr.se_bytes
            and tr.rise_bytes >= policy.min_noise_bytes
            and mid - head > 0 and tail - mid >= policy.creep_keeps_pace * (mid - head))


def _long_floor(tr: Trend, policy: MemoryPolicy) -> float:
    level = tr.bands_bytes[0]
    if tr.gpu:
        return max(policy.creep_early_bytes_gpu, policy.creep_early_share_gpu * level)
    return max(policy.creep_early_bytes, policy.creep_early_share * level)


def detectable_per_s(tr: Trend, policy: MemoryPolicy) -> float:
    """The slowest pace of rise the window would have called a rise: a slower leak could hide
    in it (what "steady" does not exclude)."""
    if tr.short:
        return short_floor(tr, policy) / tr.span_s
    return max(policy.trend_t * tr.se_bytes, _long_floor(tr, policy)) / tr.span_s
