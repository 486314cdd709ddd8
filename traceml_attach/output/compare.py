"""A Comparison as text (diagnosis first) and as its JSON document (docs/compare-schema.md)."""

from __future__ import annotations

from typing import Any

from traceml_attach.diagnose.compare import Change, Comparison, Noise
from traceml_attach.policy import COMPARE_DRIFT, COMPARE_NOISE_Z

COMPARE_SCHEMA_VERSION = 1


def render_compare(c: Comparison) -> str:
    lines = [f"traceml compare: {c.old_name} -> {c.new_name}", ""]
    diag = f"{c.diagnosis[0]} -> {c.diagnosis[1]}" if c.diagnosis_changed else f"{c.diagnosis[1]} (unchanged)"
    lines.append(f"Diagnosis   {diag}")
    lines.append(f"Step        {_change(c.step)}")
    lines.append(f"            {_how(c)}")
    lines.append("")
    lines.append(f"{'Phase':<11} {'old ms':>8} {'share':>6}   {'new ms':>8} {'share':>6}   change")
    for p in c.phases:
        lines.append(f"{p.phase:<11} {_ms(p.ms.old):>8} {_pct(p.old_share):>6}   {_ms(p.ms.new):>8} "
                     f"{_pct(p.new_share):>6}   {_delta(p.ms)}")
    lines.append("")
    lines.append(f"Worst rank  {_rank(c.worst_rank[0])} (skew {_signed(c.skew_pct[0])}) -> "
                 f"{_rank(c.worst_rank[1])} (skew {_signed(c.skew_pct[1])})")
    lines.append(f"WAIT share  {_pct(c.wait_share[0])} -> {_pct(c.wait_share[1])}")
    lines.append(f"Memory      {c.memory_source[0]} peak {_bytes(c.memory_peak[0])}, {c.memory_trend[0]} -> "
                 f"{c.memory_source[1]} peak {_bytes(c.memory_peak[1])}, {c.memory_trend[1]}")
    if c.hot is not None:
        lines.append(f"Hot frames  in {c.hot.phase}: appeared {', '.join(c.hot.appeared) or 'none'}; "
                     f"gone {', '.join(c.hot.disappeared) or 'none'}")
    return "\n".join(lines) + "\n"


def compare_json(c: Comparison) -> dict[str, Any]:
    return {
        "schema_version": COMPARE_SCHEMA_VERSION,
        "old": c.old_name, "new": c.new_name,
        "warnings": list(c.warnings),
        "diagnosis": {"old": c.diagnosis[0], "new": c.diagnosis[1], "changed": c.diagnosis_changed},
        "step": {**_change_json(c.step), "band_ms": _r(c.band_ms),
                 "noise": [_noise_json(n) for n in c.noise], "noise_z": COMPARE_NOISE_Z, "drift": COMPARE_DRIFT},
        "phases": {p.phase: {**_change_json(p.ms), "old_share": _r(p.old_share, 4), "new_share": _r(p.new_share, 4)}
                   for p in c.phases},
        "worst_rank": {"old": c.worst_rank[0], "new": c.worst_rank[1]},
        "skew_pct": {"old": c.skew_pct[0], "new": c.skew_pct[1]},
        "wait_share": {"old": c.wait_share[0], "new": c.wait_share[1]},
        "memory": {"old": {"source": c.memory_source[0], "peak_bytes": c.memory_peak[0], "status": c.memory_trend[0]},
                   "new": {"source": c.memory_source[1], "peak_bytes": c.memory_peak[1], "status": c.memory_trend[1]}},
        "hot_frames": None if c.hot is None else {"phase": c.hot.phase, "appeared": list(c.hot.appeared),
                                                  "disappeared": list(c.hot.disappeared)},
    }


def _change_json(ch: Change) -> dict[str, Any]:
    return {"old_ms": _r(ch.old), "new_ms": _r(ch.new), "delta_ms": _r(ch.delta), "pct": _r(ch.pct, 2),
            "verdict": ch.verdict}


def _noise_json(n: Noise | None) -> dict[str, Any] | None:
    return None if n is None else {"rank": n.rank, "sd_ms": _r(n.sd_ms), "steps": n.steps, "se_ms": _r(n.se_ms)}


def _how(c: Comparison) -> str:
    if c.band_ms is None:
        return "no change cannot be judged: a run without a step time"
    a, b = c.noise
    if a is None or b is None:
        missing = " and ".join(w for w, n in zip(("old", "new"), c.noise, strict=True) if n is None)
        return (f"no change within ±{c.band_ms:.1f} ms, {100 * COMPARE_DRIFT:.0f}% of the larger step (the {missing} "
                "window has no per-step spread to estimate its noise from)")
    return (f"no change within ±{c.band_ms:.1f} ms: {COMPARE_NOISE_Z:.0f} standard errors of the difference of the two "
            f"windows' median steps (per-step sd {a.sd_ms:.1f} ms over {a.steps} steps, {b.sd_ms:.1f} ms over "
            f"{b.steps}; rank {a.rank} and {b.rank}), at least {100 * COMPARE_DRIFT:.0f}% of the old step")


def _change(ch: Change) -> str:
    if ch.old is None or ch.new is None:
        return f"{_ms(ch.old)} -> {_ms(ch.new)} ms: unknown (a step time one side could not tell)"
    return f"{ch.old:.1f} -> {ch.new:.1f} ms  {_delta(ch)}"


def _delta(ch: Change) -> str:
    if ch.delta is None:
        return "unknown"
    pct = f" ({ch.pct:+.1f}%)" if ch.pct is not None else ""
    return f"{ch.delta:+.1f} ms{pct} {ch.verdict}"


def _ms(v: float | None) -> str:
    return "?" if v is None else f"{v:.1f}"


def _pct(v: float | None) -> str:
    return "?" if v is None else f"{100 * v:.1f}%"


def _signed(v: float | None) -> str:
    return "?" if v is None else f"{v:+.0f}%"


def _rank(v: int | None) -> str:
    return "?" if v is None else f"rank {v}"


def _bytes(v: int | None) -> str:
    return "?" if v is None else f"{v / 2**20:.0f} MiB"


def _r(v: float | None, digits: int = 3) -> float | None:
    return None if v is None else round(v, digits)
