"""Two runs' summaries side by side: what changed between them, and what is only noise.

The step time of a window is the median of its typical steps, so its noise is the standard
error of that median: 1.2533 times the per-step standard deviation over the square root of the
step count (``RankStepTime.step_ms_sd``, a robust one from the quartiles, and ``steps``, of the
rank whose step is nearest the median). Two windows differ by noise
within COMPARE_NOISE_Z standard errors of the difference (both windows' errors added in quadrature);
windows of one unchanged job also drift by what a window cannot see (the data, the machine's
other load), so the band is never narrower than COMPARE_DRIFT of the old step. A phase is judged
against the same band in ms: its own per-step spread is not in the summary, and no phase can
move by less than the step can be measured to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from traceml_attach.diagnose.report import RankStepTime, Report
from traceml_attach.policy import COMPARE_DRIFT, COMPARE_MIN_PCT_BASE_MS, COMPARE_NOISE_Z
from traceml_attach.steps.phases import PHASES

MEDIAN_SE = math.sqrt(math.pi / 2)   # a median's standard error over a mean's, for normal noise


@dataclass(frozen=True)
class Noise:
    """One window's step-time noise: the median rank's per-step spread and step count."""

    rank: int
    sd_ms: float
    steps: int

    @property
    def se_ms(self) -> float:
        return MEDIAN_SE * self.sd_ms / math.sqrt(self.steps)


@dataclass(frozen=True)
class Change:
    """One number, old and new; ``verdict``: "slower", "faster", "no change", or "unknown"
    (one side has no value)."""

    old: float | None
    new: float | None
    verdict: str

    @property
    def delta(self) -> float | None:
        return None if self.old is None or self.new is None else self.new - self.old

    @property
    def pct(self) -> float | None:
        """The change in % of the old value; None under COMPARE_MIN_PCT_BASE_MS (a % of almost nothing)."""
        if self.delta is None or self.old is None or abs(self.old) < COMPARE_MIN_PCT_BASE_MS:
            return None
        return 100 * self.delta / self.old


@dataclass(frozen=True)
class PhaseChange:
    phase: str
    ms: Change
    old_share: float | None
    new_share: float | None


@dataclass(frozen=True)
class HotFrameChange:
    phase: str                      # the phase that slowed most (or changed most)
    appeared: tuple[str, ...]       # its hot frames in the new run only
    disappeared: tuple[str, ...]    # ...in the old run only


@dataclass(frozen=True)
class Comparison:
    old_name: str
    new_name: str
    warnings: tuple[str, ...]
    diagnosis: tuple[str, str]              # status, old -> new
    diagnosis_changed: bool
    step: Change                            # the median rank's step, ms
    band_ms: float | None                   # half-width of "no change", ms (None: no step to judge)
    noise: tuple[Noise | None, Noise | None]   # None for a window without per-step spread: COMPARE_DRIFT alone
    phases: tuple[PhaseChange, ...]
    worst_rank: tuple[int | None, int | None]
    skew_pct: tuple[float | None, float | None]
    wait_share: tuple[float | None, float | None]
    memory_peak: tuple[int | None, int | None]     # bytes: the judged source's worst rank's peak
    memory_source: tuple[str, str]
    memory_trend: tuple[str, str]                   # the memory diagnosis' status
    hot: HotFrameChange | None

    def regressed_beyond(self, pct: float) -> bool:
        """The step rose by more than ``pct``% of the old one beyond the noise band."""
        if self.step.old is None or self.step.new is None or self.band_ms is None or not self.step.old:
            return False
        return 100 * (self.step.new - self.step.old - self.band_ms) / self.step.old > pct


class Run(Protocol):
    """A run as compare needs it: its name and its report (a summary document is one)."""

    @property
    def run_name(self) -> str: ...

    @property
    def report(self) -> Report: ...


def compare(old: Run, new: Run, warnings: tuple[str, ...] = ()) -> Comparison:
    a, b = old.report, new.report
    noise = (_noise(a), _noise(b))
    old_ms = a.step_time.median.step_ms if a.step_time.median else None
    new_ms = b.step_time.median.step_ms if b.step_time.median else None
    band = _band(old_ms, new_ms, noise)
    step = Change(old_ms, new_ms, _verdict(old_ms, new_ms, band))
    phases = []
    for phase in PHASES:
        o = a.step_time.median.phases_ms.get(phase) if a.step_time.median else None
        n = b.step_time.median.phases_ms.get(phase) if b.step_time.median else None
        phases.append(PhaseChange(phase, Change(o, n, _verdict(o, n, band)),
                                  _share(o, old_ms), _share(n, new_ms)))
    old_diag, new_diag = a.step_time.diagnosis, b.step_time.diagnosis
    memory = (a.step_memory, b.step_memory)
    return Comparison(
        old.run_name, new.run_name, warnings + _mismatches(a, b),
        (old_diag.status, new_diag.status), old_diag.kind != new_diag.kind,
        step, band, noise, tuple(phases),
        (_worst(a), _worst(b)), (a.step_time.skew_pct, b.step_time.skew_pct),
        (a.step_time.wait_share, b.step_time.wait_share),
        (_memory_peak(a), _memory_peak(b)), (memory[0].source, memory[1].source),
        (memory[0].diagnosis.status, memory[1].diagnosis.status),
        _hot(a, b, phases),
    )


def _noise(report: Report) -> Noise | None:
    """The noise of the window's median step: of the rank whose step is nearest the median."""
    median = report.step_time.median
    rows = [r for r in report.step_time.ranks.values() if r.step_ms is not None]
    if median is None or median.step_ms is None or not rows:
        return None
    row: RankStepTime = min(rows, key=lambda r: (abs((r.step_ms or 0.0) - (median.step_ms or 0.0)), r.rank))
    if row.step_ms_sd is None or row.steps < 2:
        return None
    return Noise(row.rank, row.step_ms_sd, row.steps)


def _band(old_ms: float | None, new_ms: float | None, noise: tuple[Noise | None, Noise | None]) -> float | None:
    """Half-width of "no change" in ms, for the step and every phase; without a window's per-step
    spread (an older summary), COMPARE_DRIFT of the larger step alone. None without both steps."""
    if old_ms is None or new_ms is None:
        return None
    if noise[0] is None or noise[1] is None:
        return COMPARE_DRIFT * max(old_ms, new_ms)
    return max(COMPARE_NOISE_Z * math.hypot(noise[0].se_ms, noise[1].se_ms), COMPARE_DRIFT * old_ms)


def _verdict(old: float | None, new: float | None, band: float | None) -> str:
    if old is None or new is None or band is None:
        return "unknown"
    if abs(new - old) <= band:
        return "no change"
    return "slower" if new > old else "faster"


def _share(ms: float | None, step_ms: float | None) -> float | None:
    return None if ms is None or not step_ms else ms / step_ms


def _worst(report: Report) -> int | None:
    worst = report.step_time.worst
    return worst.rank if worst is not None else None


def _memory_peak(report: Report) -> int | None:
    return report.step_memory.shown.worst_peak_bytes


def _hot(a: Report, b: Report, phases: list[PhaseChange]) -> HotFrameChange | None:
    """The hot frames that appeared or disappeared in the phase that slowed most (or, with
    none slower, the one that changed most), summed over every rank."""
    known = [p for p in phases if p.ms.delta is not None]
    if not known:
        return None
    slowed = [p for p in known if p.ms.verdict == "slower"]
    pick = max(slowed or known, key=lambda p: (p.ms.delta or 0.0) if slowed else abs(p.ms.delta or 0.0))
    old, new = _frames(a, pick.phase), _frames(b, pick.phase)
    return HotFrameChange(pick.phase, tuple(f for f in new if f not in old), tuple(f for f in old if f not in new))


def _frames(report: Report, phase: str) -> list[str]:
    seen: list[str] = []
    for rows in report.hot_frames.values():
        for row in rows.get(phase, ()):
            if row.frame not in seen:
                seen.append(row.frame)
    return seen


def _mismatches(a: Report, b: Report) -> tuple[str, ...]:
    out = []
    if len(a.step_time.ranks) != len(b.step_time.ranks):
        out.append(f"the runs have {len(a.step_time.ranks)} and {len(b.step_time.ranks)} ranks: "
                   "the median rank's step is compared")
    if a.sampling.rate_hz != b.sampling.rate_hz:
        out.append(f"sampled at {a.sampling.rate_hz} and {b.sampling.rate_hz} Hz: "
                   "short phases are seen differently")
    elif _rates(a) != _rates(b):
        out.append(f"steps found at {_rates(a)} and {_rates(b)} Hz (raised where the steps were short): "
                   "short phases are seen differently")
    return tuple(out)


def _rates(report: Report) -> str:
    """The rates the ranks' steps were found at ("100", "100/300"): --rate, or what the attacher
    raised it to where the steps were short."""
    rates = {row.rate_hz or report.sampling.rate_hz for row in report.step_time.ranks.values()}
    return "/".join(map(str, sorted(rates or {report.sampling.rate_hz})))
