"""Readable text from a final_summary.json document: diagnosis first, then evidence."""

from __future__ import annotations

import time
from typing import Any

from traceml_attach.steps.phases import PHASES, REGISTRY

_HEAD = {p.name: p.head for p in REGISTRY}


def _ms(x: float | None) -> str:
    return "?" if x is None else f"{x:.1f}"


def _n(x: int | None) -> str:
    return "-" if x is None else str(x)


def _clock(epoch: float | None) -> str:
    return "?" if epoch is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


def _mb(x: int | None) -> str:
    return "-" if x is None else f"{x / 2**20:.0f} MB"


def _diag_block(title: str, d: dict[str, Any]) -> list[str]:
    lines = [f"{title}  [{d['status']}] {d['severity']}: {d['summary']}"]
    if d.get("why"):
        lines.append(f"  why:  {d['why']}")
    if d.get("action"):
        lines.append(f"  next: {d['action']}")
    return lines


def _table(st: dict[str, Any]) -> list[str]:
    head = f"  {'Rank':<12}{'Steps':>6}{'Step ms':>9}" + "".join(f"{_HEAD[p]:>10}" for p in PHASES)
    rows = [head]
    for rank, r in st["ranks"].items():
        phases = r.get("phases_ms") or {}
        steps = f"{r['steps']}+" if r["step_ms"] is None else str(r["steps"])
        rows.append(f"  {rank:<12}{steps:>6}{_ms(r['step_ms']):>9}"
                    + "".join(f"{_ms(phases.get(p)):>10}" for p in PHASES))
    if st.get("median"):
        m, w = st["median"], st["worst"]
        rows.append(f"  {'Median':<12}{'':>6}{_ms(m['step_ms']):>9}"
                    + "".join(f"{_ms(m['phases_ms'][p]):>10}" for p in PHASES))
        rows.append(f"  {'Worst (r' + str(w['rank']) + ')':<12}{'':>6}{_ms(w['step_ms']):>9}"
                    + "".join(f"{_ms(w['phases_ms'].get(p)):>10}" for p in PHASES))
        rows.append(f"  Skew {st['skew_pct']:.1f}%   WAIT share {100 * st['wait_share']:.1f}%")
    if st.get("step_time_note"):
        rows.append(f"  {st['step_time_note']}")
    for rank, r in st["ranks"].items():
        shares = r.get("shares")
        if shares:
            rows.append(f"  rank {rank} shares: " + ", ".join(
                f"{p} {100 * shares[p]:.1f}%" for p in PHASES))
        if r.get("wait_labels"):
            rows.append(f"  rank {rank} wait: " + ", ".join(
                f"{k} {100 * v:.0f}%" for k, v in list(r["wait_labels"].items())[:5]))
        if r.get("loop"):
            rows.append(f"  rank {rank} loop: {r['loop']} on thread {r.get('thread') or '?'}")
    return rows


def render_text(s: dict[str, Any]) -> str:
    samp = s["sampling"]
    win = samp["window"]
    span_s = (win["end"] - win["start"]) if win["start"] is not None and win["end"] is not None else 0.0
    out = [f"traceml-attach summary: {s['run_name']}"]
    for t in s.get("targets", []):
        state = "exited" if t.get("exited") else "running"
        status = f" (status {t['exit_status']})" if t.get("exit_status") is not None else ""
        out.append(f"Target: pid {t['pid']}  {' '.join(t.get('cmd') or [])[:90]}  [{state}{status}]")
    for rank, r in (s.get("ranks") or {}).items():
        if r["status"] != "alive" or r["restarts"]:
            extra = f" with status {r['exit_status']}" if r.get("exit_status") is not None else ""
            out.append(f"Rank {rank}: {r['status']}{extra}; pids {', '.join(map(str, r['pids']))}"
                       + (f", {r['restarts']} restart(s)" if r["restarts"] else ""))
    out.append(f"Window: {_clock(win['start'])} for {span_s:.1f} s; {samp['backend']} "
               f"{samp['version'] or ''} at {samp['rate_hz']} Hz, {samp['samples'] or 0} samples, "
               f"{samp['errors'] or 0} errors")
    out.append("")
    p = s["primary_diagnosis"]
    out.append(f"PRIMARY  [{p['status']}] {p['severity']}: {p['summary']}")
    out.append("")
    st = s["step_time"]
    out += _diag_block("Step Time", st["diagnosis"])
    for extra in st.get("findings", [])[1:]:
        out.append(f"  also [{extra['status']}] {extra['severity']}: {extra['summary']}")
    out += _table(st)
    out.append("")
    for rank, phases in s.get("hot_frames", {}).items():
        if not phases:
            continue
        out.append(f"Hot frames (rank {rank}; share of each phase)")
        for phase in PHASES:
            for h in (phases.get(phase) or [])[:3]:
                via = f"  via {h['via']}" if h.get("via") else ""
                out.append(f"  {phase:<10}{100 * h['share']:>4.0f}%  {h['frame']}{via}")
        out.append("")
    out += _diag_block("Step Memory", s["step_memory"]["diagnosis"])
    for source in ("gpu", "host"):
        mem = s["step_memory"].get(source)
        if not mem or not mem.get("ranks"):
            continue
        label = "GPU memory (NVML: reserved + context)" if source == "gpu" else "host RSS + workers"
        out.append(f"  {label}: median peak {_mb(mem['median_peak_bytes'])}, worst peak "
                   f"{_mb(mem['worst_peak_bytes'])} (rank {mem['worst_rank']}), skew {mem['skew_pct']}%")
        for rank, r in mem["ranks"].items():
            bands = r.get("head_mid_tail_bytes")
            trend = " → ".join(_mb(b) for b in bands) if bands else "too few samples"
            out.append(f"    rank {rank}: head/mid/tail {trend}")
    out += _diag_block("System", s["system"]["diagnosis"])
    host = s["system"].get("host") or {}
    out.append(f"  host CPU {host.get('cpu_percent_median', '-')}% (median), RAM peak "
               f"{_mb(host.get('mem_used_peak_bytes'))} of {_mb(host.get('mem_total_bytes'))}")
    out += _diag_block("Process", s["process"]["diagnosis"])
    for i, g in (s["system"].get("gpus") or {}).items():
        out.append(f"  GPU {i}: util {g['util_percent_median']}% (median), memory peak "
                   f"{None if g['mem_used_peak'] is None else round(100 * g['mem_used_peak'])}%, "
                   f"temp peak {g['temp_c_peak']} C")
    for rank, r in (s["process"].get("ranks") or {}).items():
        cpu = r["cpu_percent_median"]
        gpu = f", GPU memory peak {_mb(r['gpu_mem_peak_bytes'])}" if r.get("gpu_mem_peak_bytes") else ""
        out.append(f"  rank {rank}: pid {r['pid']} CPU {'-' if cpu is None else f'{cpu:.0f}'}% (median), RSS peak "
                   f"{_mb(r['rss_peak_bytes'])} with {_n(r['workers'])} workers, {_n(r['threads'])} threads{gpu}")
    for note in s["process"].get("notes") or []:
        out.append(f"  note: {note}")
    problems = list(samp.get("problems") or [])
    if samp.get("bad_frames"):
        problems.append(f"{samp['bad_frames']} recorded frame(s) could not be decoded and were skipped")
    if problems:
        out.append("")
        out.append("Problems while sampling:")
        out += [f"  {line}" for line in problems]
    return "\n".join(out) + "\n"
