"""The words for what-ifs, straggler persistence and change points: one phrasing shared by the text
summary, the TUI and the HTML report (they render the report's numbers, never re-derive them)."""

from __future__ import annotations

import time

from traceml_attach.diagnose.kinds import status
from traceml_attach.diagnose.report import Arrival, Change, Projection
from traceml_attach.policy import DEFAULT_WHATIF_POLICY


def _status(kind: str) -> str:
    return status(kind)   # the rank-level bound's "RANKS" reads as itself


def projection_line(p: Projection) -> str:
    """"input fully overlapped with compute: 73 ms a step (66–80), −81 ms (−53%)"."""
    workers = f"; DataLoader num_workers={p.workers}" if p.workers is not None else ""
    spread = "" if p.low_ms is None or p.high_ms is None else f" ({p.low_ms:.0f}–{p.high_ms:.0f})"
    return f"{p.fix}: {p.step_ms:.0f} ms a step{spread}, −{p.gain_ms:.0f} ms (−{p.gain_pct:.0f}%){workers}"


def assumption_line(p: Projection) -> str:
    return f"assumes {p.assumption}" + ("" if p.checked else " (not checked: the window cannot tell)")


def whatif_lines(whatif: tuple[Projection, ...], indent: str = "  ") -> list[str]:
    """The what-if block of the text summary: a line and its assumption per projection."""
    if not whatif:
        return []
    out = [f"{indent}what-if (mean step {whatif[0].base_ms:.0f} ms now; each fix on its own):"]
    for p in whatif:
        out.append(f"{indent}  [{_status(p.finding)}] {projection_line(p)}")
        out.append(f"{indent}      {assumption_line(p)}")
    return out


def arrival_line(a: Arrival, over: str = "") -> str:
    """"rank 3 was the slowest in 97% of 412 steps" or "the slowest rank rotates: 8 ranks each 9–16% of steps"."""
    where = f" {over}" if over else ""
    if a.persistent and a.rank is not None and a.share is not None:
        return f"rank {a.rank} was the slowest in {100 * a.share:.0f}% of {a.steps} steps{where}"
    if a.steps < DEFAULT_WHATIF_POLICY.arrival_min_steps:
        return f"too few steps to tell the slowest rank ({a.steps} judged{where})"
    told = sum(a.last.values())
    if told < a.steps / 2:
        return (f"no rank is clearly the slowest: in {100 * (1 - told / a.steps):.0f}% of {a.steps} steps{where} "
                "the last two arrived together")
    shares = sorted(100 * n / a.steps for n in a.last.values())
    return (f"the slowest rank rotates: {len(shares)} ranks each {shares[0]:.0f}–{shares[-1]:.0f}% "
            f"of {a.steps} steps{where}")


def _clock(epoch: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(epoch))


def _mb(n: int) -> str:
    return f"{n / 2**20:.0f} MB"


def change_line(c: Change) -> str:
    """"step time rose from 120 to 180 ms at 14:03:10 (+50%); input grew 58 ms; memory rose at the same time"."""
    verb = "rose" if c.after > c.before else "fell"
    pct = "" if c.change_pct is None else f" ({c.change_pct:+.0f}%)"
    out = f"step time {verb} from {c.before:.0f} to {c.after:.0f} ms at {_clock(c.at)}{pct}"
    for phase, delta in sorted(c.phases.items(), key=lambda kv: -abs(kv[1])):
        out += f"; {phase} {'grew' if delta > 0 else 'shrank'} {abs(delta):.0f} ms"
    for which, delta_bytes in c.memory_bytes.items():
        out += f"; {'GPU memory' if which == 'gpu_mem' else 'memory'} rose {_mb(delta_bytes)} at the same time"
    return out
