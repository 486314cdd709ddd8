"""final_summary.json (built from an Analysis) and final_summary.txt (rendered from the JSON)."""

from __future__ import annotations

import statistics
from dataclasses import asdict
from typing import Any

from traceml_attach import __version__
from traceml_attach.diagnose.analysis import Analysis, rank_of, rank_pids
from traceml_attach.diagnose.gpu import RankGpu, rank_gpu
from traceml_attach.diagnose.memory import combine, diagnose_memory
from traceml_attach.diagnose.step import Finding, unknown_step_note
from traceml_attach.diagnose.system import diagnose_process, diagnose_system
from traceml_attach.ingest.stream import Recording
from traceml_attach.steps.phases import PHASES

SCHEMA_VERSION = 1


def _finding(f: Finding) -> dict[str, Any]:
    return {"kind": f.kind, "status": f.status, "severity": f.severity, "summary": f.summary,
            "why": f.why, "action": f.action, "worst_rank": f.worst_rank}


def _round(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _step_time(an: Analysis) -> dict[str, Any]:
    ranks = {}
    for r in an.ranks:
        ranks[r.rank] = {
            "pid": r.pid, "steps": r.steps, "step_ms": _round(r.step_ms),
            "phases_ms": {k: _round(v) for k, v in r.phases_ms.items()} if r.phases_ms else None,
            "shares": {k: _round(v, 4) for k, v in r.shares.items()} if r.shares else None,
            "wait_labels": {k: _round(v, 4) for k, v in r.wait_labels.items()},
            "loop": r.loop, "thread": r.thread,
            "coverage": _round(r.coverage, 3),
            "sync_wait_ms": _round(r.sync_wait_ms),
            "sync_wait_share": _round(r.sync_wait_share, 4),
            "clock": _clock(r),
        }
    measured = [r for r in an.ranks if r.step_ms is not None and r.phases_ms]
    seen = [r for r in an.ranks if r.shares]
    out: dict[str, Any] = {"diagnosis": _finding(an.findings[0]),
                           "findings": [_finding(f) for f in an.findings], "ranks": ranks,
                           "step_time_known": bool(measured) and len(measured) == len(seen),
                           "step_time_note": unknown_step_note(an.ranks)}
    if measured:
        med_step = statistics.median(r.step_ms or 0.0 for r in measured)
        med_phases = {p: statistics.median((r.phases_ms or {})[p] for r in measured) for p in PHASES}
        worst = max(measured, key=lambda r: r.step_ms or 0.0)
        out["median"] = {"step_ms": _round(med_step),
                         "phases_ms": {k: _round(v) for k, v in med_phases.items()}}
        out["worst"] = {"rank": worst.rank, "step_ms": _round(worst.step_ms),
                        "phases_ms": {k: _round(v) for k, v in (worst.phases_ms or {}).items()}}
        out["skew_pct"] = _round(100 * ((worst.step_ms or 0.0) - med_step) / med_step, 2) if med_step else None
        out["wait_share"] = _round(statistics.median((r.shares or {})["wait"] for r in measured), 4)
    else:
        out.update({"median": None, "worst": None, "skew_pct": None, "wait_share": None})
    return out


def _clock(r: Any) -> dict[str, Any] | None:
    """How the rank's steps were counted (see timeline.StepClock)."""
    c = r.clock
    if c is None:
        return None
    return {"method": c.method, "visible": _round(c.visible, 3), "concentration": _round(c.concentration, 3),
            "reason": c.reason, "suggested_rate_hz": c.suggested_rate_hz,
            "step_upper_ms": _round(None if c.step_upper_ns is None else c.step_upper_ns / 1e6, 1)}


def host_memory_series(rec: Recording, lo: int, hi: int) -> dict[str, list[tuple[int, int]]]:
    """Each rank's RSS plus its DataLoader workers', inside [lo, hi] (ns)."""
    out = {}
    for rank, pid in rank_pids(rec, lo, hi).items():
        out[rank] = [(p.ts_ns, p.rss_bytes + p.workers_rss_bytes)
                     for p in rec.procs.get(pid, []) if p.rss_bytes is not None and lo <= p.ts_ns <= hi]
    return out


def _window(an: Analysis) -> tuple[int, int]:
    return an.start_ns or 0, an.end_ns or (1 << 62)


MemorySeries = dict[str, list[tuple[int, int]]]   # rank -> (ts_ns, bytes)


def _step_memory(rec: Recording, lo: int, hi: int, gpu: RankGpu) -> tuple[dict[str, Any], str, MemorySeries]:
    """The step-memory section, and which series it judged ("gpu" when there are GPU readings)."""
    host_series = host_memory_series(rec, lo, hi)
    host = diagnose_memory("host", host_series, {})
    gpu_report = diagnose_memory("gpu", gpu.memory, gpu.capacity) if gpu.memory else None
    finding = combine(gpu_report, host)
    section = {"diagnosis": _finding(finding), "host": host.as_dict(),
               "gpu": gpu_report.as_dict() if gpu_report else None, "notes": gpu.notes}
    return (section, "gpu", gpu.memory) if gpu.memory else (section, "host", host_series)


def _telemetry(rec: Recording, an: Analysis, memory_from_ns: int | None
               ) -> tuple[tuple[dict[str, Any], str, MemorySeries], dict[str, Any], dict[str, Any]]:
    lo, hi = _window(an)
    system, sys_ev = diagnose_system(rec, lo, hi, an.findings[0].kind)
    process, proc_ev = diagnose_process(rec, an.pids, an.gpu, lo, hi)
    if memory_from_ns is None or memory_from_ns >= lo:
        memory = _step_memory(rec, lo, hi, an.gpu)
    else:
        memory = _step_memory(rec, memory_from_ns, hi, rank_gpu(rec, an.pids, memory_from_ns, hi))
    return (memory,
            {"diagnosis": _finding(system), "host": _host(rec), **sys_ev},
            {"diagnosis": _finding(process), **proc_ev})


def _host(rec: Recording) -> dict[str, Any]:
    cpus = [h.cpu_percent for h in rec.hosts if h.cpu_percent is not None]
    used = [h.mem_used_bytes for h in rec.hosts if h.mem_used_bytes is not None]
    return {
        "cpu_percent_median": _round(statistics.median(cpus), 1) if cpus else None,
        "mem_used_peak_bytes": max(used) if used else None,
        "mem_total_bytes": rec.hosts[-1].mem_total_bytes if rec.hosts else None,
    }


def _sampling(rec: Recording, an: Analysis) -> dict[str, Any]:
    windows = [w for ws in rec.windows.values() for w in ws]
    counts = [w.samples for w in windows if w.samples is not None]
    errors = [w.errors for w in windows if w.errors is not None]
    return {
        "backend": rec.hello.get("backend", "py-spy"),
        "version": rec.hello.get("backend_version"),
        "rate_hz": rec.rate_hz,
        "samples": sum(counts) if counts else None,
        "errors": sum(errors) if errors else None,
        "windows": len(windows),
        "window": {"start": None if an.start_ns is None else round(an.start_ns / 1e9, 3),
                   "end": None if an.end_ns is None else round(an.end_ns / 1e9, 3)},
        "problems": [f"{e.kind}: {e.message}" for e in rec.errors][:20],
        "bad_frames": rec.bad_frames,
    }


def _rank_status(rec: Recording) -> dict[str, Any]:
    """alive / exited (with status when it could be read) / restarted, per rank."""
    out: dict[str, Any] = {}
    for index, pid in enumerate(rec.targets):
        rank = rank_of(rec, pid, index)
        row = out.setdefault(rank, {"pids": [], "restarts": 0})
        row["pids"].append(pid)
        row["pid"] = pid
        ex = rec.exits.get(pid)
        row["status"] = "exited" if ex else "alive"
        row["exit_status"] = ex.status if ex else None
    for _, rank_no, _, _ in rec.restarts:
        row = out.get(str(rank_no))
        if row is not None:
            row["restarts"] += 1
    for row in out.values():
        if row["restarts"] and row["status"] == "alive":
            row["status"] = "restarted"
    return out


def build_summary(rec: Recording, an: Analysis, run_name: str) -> dict[str, Any]:
    """The summary document of one analysis window."""
    return summary_and_memory(rec, an, run_name)[0]


def summary_and_memory(rec: Recording, an: Analysis, run_name: str, memory_from_ns: int | None = None
                       ) -> tuple[dict[str, Any], str, MemorySeries]:
    """``build_summary``, with the memory series its step-memory diagnosis judged and their
    source ("gpu" or "host"). Memory trends need a longer view than step times:
    ``memory_from_ns`` lets them start earlier than the window (a live view uses it)."""
    primary = an.findings[0]
    (step_memory, source, series), system, process = _telemetry(rec, an, memory_from_ns)
    doc = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "traceml-attach", "version": __version__},
        "run_name": run_name,
        "targets": [{"pid": t.pid, "rank": t.rank, "cmd": list(t.cmd),
                     "exit_status": rec.exits[t.pid].status if t.pid in rec.exits else None,
                     "exited": t.pid in rec.exits} for t in rec.targets.values()],
        "end_reason": rec.end_reason,
        "ranks": _rank_status(rec),
        "primary_diagnosis": {"kind": primary.kind, "status": primary.status,
                              "severity": primary.severity, "summary": primary.summary},
        "step_time": _step_time(an),
        "step_memory": step_memory,
        "system": system,
        "process": process,
        "hot_frames": {rank: {phase: [asdict(h) for h in rows] for phase, rows in phases.items()}
                       for rank, phases in an.hot.items()},
        "sampling": _sampling(rec, an),
    }
    return doc, source, series
