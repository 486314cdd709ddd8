"""Readable text from a summary: diagnosis first, then evidence."""

from __future__ import annotations

import time

from traceml_attach.diagnose.finding import Finding
from traceml_attach.diagnose.report import PhaseRow, RankStepTime, Report, StepTimeReport
from traceml_attach.ingest.segments import duration_text
from traceml_attach.output.summary import Summary
from traceml_attach.steps.phases import PHASES, REGISTRY

_HEAD = {p.name: p.head for p in REGISTRY}


def _ms(x: float | None) -> str:
    return "?" if x is None else f"{x:.1f}"


def _n(x: int | None) -> str:
    return "-" if x is None else str(x)


def _clock(epoch: float | None) -> str:
    return "?" if epoch is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


def _mb(x: float | None) -> str:
    return "-" if x is None else f"{x / 2**20:.0f} MB"


def _diag_block(title: str, d: Finding) -> list[str]:
    lines = [f"{title}  [{d.status}] {d.severity}: {d.summary}"]
    if d.why:
        lines.append(f"  why:  {d.why}")
    if d.action:
        lines.append(f"  next: {d.action}")
    return lines


def rank_note(r: RankStepTime) -> str | None:
    """A rank's sampling problems with the coverage they cost: beside the numbers they weaken."""
    if not r.problem_count:
        return None
    coverage = "coverage unknown" if r.coverage is None else f"coverage {100 * r.coverage:.1f}%"
    more = f" ({r.problem_count} problems, the last)" if r.problem_count > 1 else ""
    return f"rank {r.rank}: {coverage}; sampling problem{more}: {r.problems[-1].line()}"


def _phase_row(label: str, row: PhaseRow) -> str:
    return (f"  {label:<12}{'':>6}{_ms(row.step_ms):>9}"
            + "".join(f"{_ms(row.phases_ms.get(p)):>10}" for p in PHASES))


def _table(st: StepTimeReport) -> list[str]:
    head = f"  {'Rank':<12}{'Steps':>6}{'Step ms':>9}" + "".join(f"{_HEAD[p]:>10}" for p in PHASES)
    rows = [head]
    for rank, r in st.ranks.items():
        phases = r.phases_ms or {}
        steps = f"{r.steps}+" if r.step_ms is None else str(r.steps)
        rows.append(f"  {rank:<12}{steps:>6}{_ms(r.step_ms):>9}"
                    + "".join(f"{_ms(phases.get(p)):>10}" for p in PHASES))
        note = rank_note(r)
        if note:
            rows.append(f"    ! {note}")
    if st.median is not None and st.worst is not None:
        rows.append(_phase_row("Median", st.median))
        rows.append(_phase_row(f"Worst (r{st.worst.rank})", st.worst))
        rows.append(f"  Skew {st.skew_pct or 0.0:.1f}%   WAIT share {100 * (st.wait_share or 0.0):.1f}%")
    if st.step_time_note:
        rows.append(f"  {st.step_time_note}")
    for rank, r in st.ranks.items():
        if r.shares:
            shares = r.shares
            rows.append(f"  rank {rank} shares: " + ", ".join(f"{p} {100 * shares[p]:.1f}%" for p in PHASES))
        if r.wait_labels:
            rows.append(f"  rank {rank} wait: " + ", ".join(
                f"{k} {100 * v:.0f}%" for k, v in list(r.wait_labels.items())[:5]))
        if r.loop:
            rows.append(f"  rank {rank} loop: {r.loop} on thread {r.thread or '?'}"
                        + (f" ({r.framework})" if r.framework else ""))
        elif r.framework:
            rows.append(f"  rank {rank} framework: {r.framework}")
        if r.micro_batches != 1:
            rows.append(f"  rank {rank}: a step is an optimizer step {micro_text(r.micro_batches)} "
                        "(gradient accumulation)")
    return rows


def micro_text(micro_batches: int | None) -> str:
    """How many micro-batches a step holds, as the text and the TUI say it."""
    if micro_batches is None:
        return "(found from the optimizer; its micro-batches not counted)"
    return f"of {micro_batches} micro-batches"


def _head(s: Summary) -> list[str]:
    rep = s.report
    samp = rep.sampling
    win = samp.window
    span_s = (win.end - win.start) if win.start is not None and win.end is not None else 0.0
    out = [f"traceml-attach summary: {s.run_name}"]
    for t in rep.targets:
        state = "exited" if t.exited else "running"
        status = f" (status {t.exit_status})" if t.exit_status is not None else ""
        out.append(f"Target: pid {t.pid}  {' '.join(t.cmd)[:90]}  [{state}{status}]")
    ranks = rep.step_time.ranks.values()
    frameworks = sorted({r.framework for r in ranks if r.framework})
    accumulating = sorted({micro_text(r.micro_batches) for r in ranks if r.micro_batches != 1})
    if frameworks or accumulating:
        micro = f"a step is an optimizer step {' / '.join(accumulating)}" if accumulating else ""
        out.append(f"Loop: {'; '.join(x for x in (', '.join(frameworks), micro) if x)}")
    for rank, r in rep.ranks.items():
        if r.status != "alive" or r.restarts:
            extra = f" with status {r.exit_status}" if r.exit_status is not None else ""
            out.append(f"Rank {rank}: {r.status}{extra}; pids {', '.join(map(str, r.pids))}"
                       + (f", {r.restarts} restart(s)" if r.restarts else ""))
    backend = f"{samp.backend} {samp.version}" if samp.version else samp.backend
    out.append(f"Window: {_clock(win.start)} for {span_s:.1f} s; {backend} at {samp.rate_hz} Hz, {samp.samples or 0} samples, "
               f"{samp.errors or 0} errors")
    out.append("")
    p = rep.primary_diagnosis
    out.append(f"PRIMARY  [{p.status}] {p.severity}: {p.summary}")
    if samp.diagnosis.kind == "SAMPLING_FAILED":   # a thread of ours failed: before anything it may have left stale
        out += _diag_block("FAILED ", samp.diagnosis)
    out.append("")
    return out


SESSION_RANKS = 8   # rank rows of the session block; the rest are summed up in one line


def _session(rep: Report) -> list[str]:
    """The whole session from its rollups: the sections above detail only the newest window."""
    ses = rep.session
    if ses is None or not ses.ranks:
        return []
    out = [f"Session  {duration_text(ses.duration_s)} from {_clock(ses.start)} (rollups of {ses.rollup_s:.0f} s; "
           "the sections above cover the newest window)"]
    rows = list(ses.ranks.values())
    for r in rows[:SESSION_RANKS]:
        mean = "step time unknown" if r.step_ms_mean is None else f"mean step {r.step_ms_mean:.1f} ms"
        shares = (", " + ", ".join(f"{p} {100 * r.shares[p]:.0f}%" for p in PHASES if r.shares[p] >= 0.005)
                  if r.shares else "")
        out.append(f"  rank {r.rank}: {r.steps} steps, {mean}{shares}; RSS peak {_mb(r.rss_peak_bytes)}"
                   + (f", GPU memory peak {_mb(r.gpu_mem_peak_bytes)}" if r.gpu_mem_peak_bytes else ""))
    if len(rows) > SESSION_RANKS:
        out.append(f"  ... {len(rows) - SESSION_RANKS} more ranks, {sum(r.steps for r in rows[SESSION_RANKS:])} steps")
    return [*out, ""]


def _hot(rep: Report) -> list[str]:
    out = []
    for rank, phases in rep.hot_frames.items():
        if not phases:
            continue
        out.append(f"Hot frames (rank {rank}; share of each phase)")
        for phase in PHASES:
            for h in phases.get(phase, ())[:3]:
                via = f"  via {h.via}" if h.via else ""
                out.append(f"  {phase:<10}{100 * h.share:>4.0f}%  {h.frame}{via}")
        out.append("")
    return out


def _memory(rep: Report) -> list[str]:
    sm = rep.step_memory
    out = _diag_block("Step Memory", sm.diagnosis)
    for mem in (sm.gpu, sm.host):
        if mem is None or not mem.ranks:
            continue
        label = "GPU memory (NVML: reserved + context)" if mem.source == "gpu" else "host RSS + workers"
        out.append(f"  {label}: median peak {_mb(mem.median_peak_bytes)}, worst peak "
                   f"{_mb(mem.worst_peak_bytes)} (rank {mem.worst_rank}), skew {mem.skew_pct}%")
        for rank, r in mem.ranks.items():
            trend = " → ".join(_mb(b) for b in r.head_mid_tail_bytes) if r.head_mid_tail_bytes else "too few samples"
            pace = (f"; past warm-up {r.growth_bytes / 2**20:+.0f} MB over {r.judged_s:.0f} s"
                    if r.growth_bytes is not None and r.judged_s else "")
            out.append(f"    rank {rank}: head/mid/tail {trend}{pace}")
    return out


def _system_process(rep: Report) -> list[str]:
    host = rep.system.host
    out = _diag_block("System", rep.system.diagnosis)
    cpu = "-" if host.cpu_percent_median is None else host.cpu_percent_median
    out.append(f"  host CPU {cpu}% (median), RAM peak "
               f"{_mb(host.mem_used_peak_bytes)} of {_mb(host.mem_total_bytes)}")
    out += _diag_block("Process", rep.process.diagnosis)
    for i, g in rep.system.window.gpus.items():
        out.append(f"  GPU {i}: util {g.util_percent_median}% (median), memory peak "
                   f"{None if g.mem_used_peak is None else round(100 * g.mem_used_peak)}%, "
                   f"temp peak {g.temp_c_peak} C")
    for rank, r in rep.process.ranks.items():
        cpu_pct = r.cpu_percent_median
        gpu = f", GPU memory peak {_mb(r.gpu_mem_peak_bytes)}" if r.gpu_mem_peak_bytes else ""
        out.append(f"  rank {rank}: pid {r.pid} CPU {'-' if cpu_pct is None else f'{cpu_pct:.0f}'}% (median), "
                   f"RSS peak {_mb(r.rss_peak_bytes)} with {_n(r.workers)} workers, {_n(r.threads)} threads{gpu}")
    for note in rep.process.notes:
        out.append(f"  note: {note}")
    return out


def _sampling(rep: Report) -> list[str]:
    samp = rep.sampling
    problems = [p.line() for p in samp.problems]
    if samp.problem_count > len(samp.problems):
        problems.append(f"... {samp.problem_count - len(samp.problems)} more")
    if samp.bad_frames:
        problems.append(f"{samp.bad_frames} recorded frame(s) could not be decoded and were skipped")
    if not problems:
        return []
    out = ["", *_diag_block("Sampling", samp.diagnosis)] if samp.diagnosis.kind != "NORMAL" else [""]
    out.append("Problems while sampling:")
    return out + [f"  {line}" for line in problems]


def render_text(s: Summary) -> str:
    rep = s.report
    st = rep.step_time
    out = _head(s)
    out += _diag_block("Step Time", st.diagnosis)
    for extra in st.findings[1:]:
        out.append(f"  also [{extra.status}] {extra.severity}: {extra.summary}")
    out += _table(st)
    out.append("")
    out += _session(rep)
    out += _hot(rep)
    out += _memory(rep)
    out += _system_process(rep)
    out += _sampling(rep)
    return "\n".join(out) + "\n"
