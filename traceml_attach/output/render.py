"""Readable text from a summary: diagnosis first, then evidence."""

from __future__ import annotations

import time
from collections.abc import Iterable

from traceml_attach.diagnose.finding import Finding
from traceml_attach.diagnose.kinds import Kind
from traceml_attach.diagnose.report import (
    PhaseRow,
    Report,
)
from traceml_attach.ingest.segments import duration_text
from traceml_attach.output.summary import Summary
from traceml_attach.output.whatif_text import arrival_line, change_line, whatif_lines
from traceml_attach.output.words import (
    WORST_RANKS,
    accumulates,
    listed_ranks,
    memory_leads,
    micro_text,
    missed_text,
    net_line,
    node_states,
    node_tag,
    rank_note,
    rank_place,
    rank_ranges,
    rate_lines,
    rates_text,
    summarised,
)
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


def _nodes(rep: Report) -> list[str]:
    """A multi-node session's nodes: nothing at all on one machine."""
    if not rep.nodes:
        return []
    out = [f"Nodes: {node_states(rep.nodes)}"]
    for n in rep.nodes:
        name = n.name if n.host in (None, n.name) else f"{n.name} ({n.host})"
        state = f"{n.state} ({n.reason})" if n.reason and n.state in ("lost", "ended") else n.state
        offset = "offset unknown" if n.clock_offset_ms is None else f"offset {n.clock_offset_ms:+.1f} ms"
        out.append(f"  n{n.node:<3} {name}  {state}; ranks {rank_ranges(n.ranks)}; clock {offset}")
    out.append("  (a clock offset is the collector's clock minus the node's; cross-node diagnoses compare "
               "durations, which it does not change)")
    if rep.net is not None:
        out.append(f"  {net_line(rep.net)}")
    return out


# --- the step table -----------------------------------------------------------------------

def _phase_row(label: str, row: PhaseRow, width: int = 12) -> str:
    return (f"  {label:<{width}}{'':>6}{_ms(row.step_ms):>9}"
            + "".join(f"{_ms(row.phases_ms.get(p)):>10}" for p in PHASES))


def _table(rep: Report) -> list[str]:
    st = rep.step_time
    many = summarised(st)
    listed = listed_ranks(st) if many else tuple(st.ranks)
    labels = {rank: f"{rank}{node_tag(rep, rank)}" for rank in listed}
    width = max([12, *(len(label) + 2 for label in labels.values())])
    # synchronized ranks: the time one blocks in the collective waiting for the others
    blocked = len(st.ranks) > 1 and any(st.ranks[rank].sync_wait_ms is not None for rank in listed)
    head = (f"  {'Rank':<{width}}{'Steps':>6}{'Step ms':>9}" + "".join(f"{_HEAD[p]:>10}" for p in PHASES)
            + (f"{'Blocked*':>10}" if blocked else ""))
    rows = [head]
    for rank in listed:
        r = st.ranks[rank]
        phases = r.phases_ms or {}
        steps = f"{r.steps}+" if r.step_ms is None else str(r.steps)
        rows.append(f"  {labels[rank]:<{width}}{steps:>6}{_ms(r.step_ms):>9}"
                    + "".join(f"{_ms(phases.get(p)):>10}" for p in PHASES)
                    + (f"{_ms(r.sync_wait_ms):>10}" if blocked else ""))
        note = rank_note(r)
        if note:
            rows.append(f"    ! {note}")
    if many:
        troubled = sum(1 for rank, r in st.ranks.items() if r.problem_count and rank not in labels)
        rows.append(f"  ... {len(st.ranks) - len(listed)} more ranks (listed: the {WORST_RANKS} slowest and those "
                    "a finding names)" + (f"; {troubled} of them had sampling problems" if troubled else ""))
        if st.spread:
            known = sum(1 for r in st.ranks.values() if r.step_ms is not None)
            rows.append(f"  Across {known} ranks (each column on its own):")
            rows += [_phase_row(label, row, width) for label, row in st.spread.items()]
    if st.median is not None and st.worst is not None:
        rows.append(_phase_row("Median", st.median, width))
        rows.append(_phase_row(f"Worst (r{st.worst.rank})", st.worst, width))
        rows.append(f"  Skew {st.skew_pct or 0.0:.1f}%   WAIT share {100 * (st.wait_share or 0.0):.1f}%")
    if blocked:
        rows.append("  Blocked*: of the phases' time, ms per step blocked in the collective (DDP's all-reduce) "
                    "waiting for the other ranks")
    if st.step_time_note:
        rows.append(f"  {st.step_time_note}")
    for rank in listed:
        r = st.ranks[rank]
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
        if accumulates(r):
            rows.append(f"  rank {rank}: a step is an optimizer step {micro_text(r.micro_batches)} "
                        "(gradient accumulation)")
        if r.since is not None:
            rows.append(f"  rank {rank}: steps from {_clock(r.since)} on, at {r.rate_hz} Hz (its rate changed "
                        "in the window)")
    return rows


TARGET_LINES = 8    # "Target:" lines; the rest are counted in one
STATUS_LINES = 16   # "Rank N: exited ..." lines; the rest are counted in one


def _rank_states(rep: Report) -> list[str]:
    """The ranks that are not simply alive: the ranks of a node whose agent went silent in one
    line per node (their own fate is unknown), then each exited or restarted rank."""
    lost: dict[int, list[int]] = {}
    lines = []
    for rank, r in rep.ranks.items():
        if r.status == "agent lost":
            lost.setdefault(r.node, []).append(rank)
        elif r.status != "alive" or r.restarts:
            extra = f" with status {r.exit_status}" if r.exit_status is not None else ""
            lines.append(f"Rank {rank}{node_tag(rep, rank)}: {r.status}{extra}; pids {', '.join(map(str, r.pids))}"
                         + (f", {r.restarts} restart(s)" if r.restarts else ""))
    reasons = {n.node: n.reason for n in rep.nodes}
    out = [f"Rank{'s' if len(ranks) > 1 else ''} {rank_ranges(ranks)} (n{node}): AGENT LOST"
           + (f" ({reasons[node]})" if reasons.get(node) else "")
           + ": the node's agent went silent; whether these ranks still run is unknown"
           for node, ranks in sorted(lost.items())]
    out += lines[:STATUS_LINES]
    if len(lines) > STATUS_LINES:
        out.append(f"... {len(lines) - STATUS_LINES} more ranks exited or restarted")
    return out


def _head(s: Summary) -> list[str]:
    rep = s.report
    samp = rep.sampling
    win = samp.window
    span_s = (win.end - win.start) if win.start is not None and win.end is not None else 0.0
    out = [f"traceml-attach summary: {s.run_name}"]
    for t in rep.targets[:TARGET_LINES]:
        state = "exited" if t.exited else "running"
        status = f" (status {t.exit_status})" if t.exit_status is not None else ""
        where = f" on n{t.node}" if rep.nodes else ""
        out.append(f"Target: pid {t.pid}{where}  {' '.join(t.cmd)[:90]}  [{state}{status}]")
    if len(rep.targets) > TARGET_LINES:
        exited = sum(1 for t in rep.targets[TARGET_LINES:] if t.exited)
        out.append(f"... {len(rep.targets) - TARGET_LINES} more targets ({exited} exited)")
    out += _nodes(rep)
    ranks = rep.step_time.ranks.values()
    frameworks = sorted({r.framework for r in ranks if r.framework})
    accumulating = sorted({micro_text(r.micro_batches) for r in ranks if accumulates(r)})
    if frameworks or accumulating:
        micro = f"a step is an optimizer step {' / '.join(accumulating)}" if accumulating else ""
        out.append(f"Loop: {'; '.join(x for x in (', '.join(frameworks), micro) if x)}")
    out += _rank_states(rep)
    backend = f"{samp.backend} {samp.version}" if samp.version else samp.backend
    out.append(f"Window: {_clock(win.start)} for {span_s:.1f} s; {backend} at {rates_text(samp, rep.step_time.ranks)}, "
               f"{samp.samples or 0} samples{missed_text(samp.samples, samp.errors)}")
    out += [f"Rate: {line}" for line in rate_lines(samp)]
    if samp.extended is not None:
        ext = samp.extended
        out.append(f"Length: sampled on to {ext.to_s:.0f} s, not {ext.from_s:.0f}: {ext.why} "
                   "(--seconds fixes the length)")
    out.append("")
    p = rep.primary_diagnosis
    out.append(f"PRIMARY  [{p.status}] {p.severity}: {p.summary}")
    if samp.diagnosis.kind == Kind.SAMPLING_FAILED:   # a thread of ours failed: before anything it may have left stale
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
    if ses.arrival is not None:
        out.append(f"  slowest rank: {arrival_line(ses.arrival, 'of the session')}")
    out += [f"  changed: {change_line(c)}" for c in ses.changes]
    return [*out, ""]


def _detailed(rep: Report) -> set[int] | None:
    """With many ranks, the ranks the per-rank lines are given for: those the step table lists,
    and the one with the worst memory peak; None: every rank."""
    st = rep.step_time
    if not summarised(st):
        return None
    worst = rep.step_memory.shown.worst_rank
    return {*listed_ranks(st), *([] if worst is None else [worst])}


def _fewer(shown: set[int] | None, ranks: Iterable[int], indent: str) -> list[str]:
    """The line that says how many of ``ranks`` had their lines left out."""
    left = 0 if shown is None else sum(1 for rank in ranks if rank not in shown)
    return [f"{indent}... {left} more ranks (lines for the ranks the step table lists)"] if left else []


def _hot(rep: Report) -> list[str]:
    out = []
    shown = _detailed(rep)
    for rank, phases in rep.hot_frames.items():
        if not phases or (shown is not None and rank not in shown):
            continue
        place = rank_place(rep, rank)
        out.append(f"Hot frames (rank {rank}{f' on {place}' if place else ''}; share of each phase)")
        for phase in PHASES:
            for h in phases.get(phase, ())[:3]:
                via = f"  via {h.via}" if h.via else ""
                out.append(f"  {phase:<10}{100 * h.share:>4.0f}%  {h.frame}{via}")
        out.append("")
    return out


# each rank's memory series as memory.py judged it, in words
MEMORY_STATES = {"warmup": "warming up", "short": "too short to judge", "rising": "rising", "creep": "rising steadily",
                 "slight": "rising slightly", "flat": "steady", "jump": "one-off rise", "falling": "falling",
                 "wandering": "no trend", "unsettled": "not judged yet"}


def _memory(rep: Report) -> list[str]:
    sm = rep.step_memory
    shown = _detailed(rep)
    out = _diag_block("Step Memory", sm.diagnosis)
    leads = memory_leads(sm.diagnosis)
    if leads:
        out.append("  where to look (evidence, not certainty):")
        out += [f"    {lead}" for lead in leads]
    for mem in (sm.gpu, sm.host):
        if mem is None or not mem.ranks:
            continue
        label = "GPU memory (NVML: reserved + context)" if mem.source == "gpu" else "host RSS + workers"
        out.append(f"  {label}: median peak {_mb(mem.median_peak_bytes)}, worst peak "
                   f"{_mb(mem.worst_peak_bytes)} (rank {mem.worst_rank}), skew {mem.skew_pct}%")
        for rank, r in mem.ranks.items():
            if shown is not None and rank not in shown:
                continue
            trend = " → ".join(_mb(b) for b in r.head_mid_tail_bytes) if r.head_mid_tail_bytes else "too few samples"
            state = MEMORY_STATES.get(r.state or "", r.state)
            pace = (f"; judged {r.growth_bytes / 2**20:+.0f} MB over {r.judged_s:.0f} s: {state}"
                    if r.growth_bytes is not None and r.judged_s else f"; {state}" if state else "")
            out.append(f"    rank {rank}{node_tag(rep, rank)}: head/mid/tail {trend}{pace}")
        out += _fewer(shown, mem.ranks, "    ")
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
    shown = _detailed(rep)
    for rank, r in rep.process.ranks.items():
        if shown is not None and rank not in shown:
            continue
        cpu_pct = "-" if r.cpu_percent_median is None else f"{r.cpu_percent_median:.0f}"
        gpu = f", GPU memory peak {_mb(r.gpu_mem_peak_bytes)}" if r.gpu_mem_peak_bytes else ""
        out.append(f"  rank {rank}{node_tag(rep, rank)}: pid {r.pid} CPU {cpu_pct}% (median), "
                   f"RSS peak {_mb(r.rss_peak_bytes)} with {_n(r.workers)} workers, {_n(r.threads)} threads{gpu}")
    out += _fewer(shown, rep.process.ranks, "  ")
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
    out = ["", *_diag_block("Sampling", samp.diagnosis)] if samp.diagnosis.kind != Kind.NORMAL else [""]
    out.append("Problems while sampling:")
    return out + [f"  {line}" for line in problems]


def render_text(s: Summary) -> str:
    rep = s.report
    st = rep.step_time
    out = _head(s)
    out += _diag_block("Step Time", st.diagnosis)
    for extra in st.findings[1:]:
        out.append(f"  also [{extra.status}] {extra.severity}: {extra.summary}")
    out += whatif_lines(st.whatif)
    if st.arrival is not None:
        out.append(f"  slowest rank: {arrival_line(st.arrival, 'of the window')}")
    out += _table(rep)
    out.append("")
    out += _session(rep)
    out += _hot(rep)
    out += _memory(rep)
    out += _system_process(rep)
    out += _sampling(rep)
    return "\n".join(out) + "\n"
