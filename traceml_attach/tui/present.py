"""The pure view-model step: a summary (live or final) and a selection in, everything the
panels draw out. It reads the typed report; no Textual, no clock, no I/O."""

from __future__ import annotations

import time

from traceml_attach.diagnose.finding import Finding
from traceml_attach.diagnose.kinds import Family, Kind, family
from traceml_attach.diagnose.report import PhaseRow, RankStepTime, StepTimeReport
from traceml_attach.output.summary import Summary
from traceml_attach.output.whatif_text import arrival_line, assumption_line, projection_line
from traceml_attach.output.words import (
    accumulates,
    listed_ranks,
    memory_leads,
    node_states,
    node_tag,
    rank_note,
    rank_place,
    rate_lines,
    rates_text,
    summarised,
    worst_offset,
)
from traceml_attach.steps.phases import PHASES
from traceml_attach.tui.viewmodel import (
    DiagnosisVM,
    GpuRow,
    HeaderVM,
    HotFramesVM,
    HotRow,
    MemoryRow,
    MemoryVM,
    ProcessRow,
    ProcessVM,
    RailVM,
    RankRow,
    RanksVM,
    Selection,
    StepRow,
    StepTableVM,
    SystemVM,
    ViewModel,
)

NONE = "-"


# --- formatting ---------------------------------------------------------------------------

def ms(x: float | None, unknown: str = NONE) -> str:
    return unknown if x is None else f"{x:.1f}"


def pct(x: float | None, scale: float = 1.0) -> str:
    return NONE if x is None else f"{scale * x:.0f}%"


def size(n: float | None) -> str:
    if n is None:
        return NONE
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20)):
        if abs(n) >= factor:
            return f"{n / factor:.1f} {unit}" if unit == "GiB" else f"{n / factor:.0f} {unit}"
    return f"{n / 2**10:.0f} KiB"


def signed_size(n: float | None) -> str:
    return NONE if n is None else ("+" if n >= 0 else "-") + size(abs(n))


def duration(seconds: float | None) -> str:
    if seconds is None:
        return NONE
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


# --- selection ----------------------------------------------------------------------------

def rank_ids(doc: Summary) -> tuple[int, ...]:
    return doc.report.rank_ids()


def default_rank(doc: Summary, ids: tuple[int, ...]) -> int | None:
    """The rank a user wants first: the one the diagnosis names, else the slowest, else rank 0."""
    st = doc.report.step_time
    for candidate in (st.diagnosis.worst_rank, st.worst.rank if st.worst else None):
        if isinstance(candidate, int) and candidate in ids:
            return candidate
    return ids[0] if ids else None


def resolve(doc: Summary, ids: tuple[int, ...], sel: Selection) -> Selection:
    rank = sel.rank if sel.rank in ids else default_rank(doc, ids)
    return Selection(rank, sel.phase if sel.phase in PHASES else PHASES[0])


def move_rank(ids: tuple[int, ...], sel: Selection, by: int) -> Selection:
    if not ids:
        return sel
    i = ids.index(sel.rank) if sel.rank in ids else 0
    return Selection(ids[(i + by) % len(ids)], sel.phase)


def move_phase(sel: Selection, by: int) -> Selection:
    i = PHASES.index(sel.phase) if sel.phase in PHASES else 0
    return Selection(sel.rank, PHASES[(i + by) % len(PHASES)])


# --- panels -------------------------------------------------------------------------------

ROWS_AROUND = 100   # rows a list panel is given either side of the selected rank: none is taller


def around(ranks: list[int], selected: int | None) -> tuple[list[int], int]:
    """The ranks a list panel (ranks, memory, process) is given, those within ROWS_AROUND of the
    selected one, and how many it is not: the panel shows a window of them around the selection
    anyway, and 1,024 ranks' rows would cost each refresh some 10 ms."""
    span = 2 * ROWS_AROUND + 1
    if len(ranks) <= span:
        return ranks, 0
    i = ranks.index(selected) if selected in ranks else 0
    start = min(max(i - ROWS_AROUND, 0), len(ranks) - span)
    return ranks[start:start + span], len(ranks) - span


def _diagnosis(title: str, d: Finding) -> DiagnosisVM:
    return DiagnosisVM(title, d.status, d.severity, d.summary, d.why, d.action)


def present_header(doc: Summary, ids: tuple[int, ...], mode: str) -> HeaderVM:
    live = doc.live
    targets = doc.report.targets
    cmd = targets[0].cmd if targets else ()
    script = next((a.rsplit("/", 1)[-1] for a in cmd[1:] if a.endswith(".py")), cmd[0] if cmd else "?")
    pids = ", ".join(str(t.pid) for t in targets[:4]) + (" …" if len(targets) > 4 else "")
    n = len(ids)
    where = "" if doc.report.nodes else f" · pid {pids}"   # PIDs of many nodes would repeat (each its own)
    target = f"{script}{where} · {n} rank{'s' if n != 1 else ''}"
    frameworks = sorted({r.framework for r in doc.report.step_time.ranks.values() if r.framework})
    if frameworks:
        target += f" · loop: {', '.join(frameworks)}"
    accumulating = sorted({r.micro_batches for r in doc.report.step_time.ranks.values() if accumulates(r)},
                          key=lambda k: k or 0)
    if accumulating:
        target += f" · {'/'.join(str(k) if k else '?' for k in accumulating)} micro-batches a step"
    samp = doc.report.sampling
    win = samp.window
    clock_ns = live.clock_ns if live else None
    epoch = clock_ns / 1e9 if clock_ns is not None else win.end
    clock = NONE if epoch is None else time.strftime("%H:%M:%S", time.localtime(epoch))
    if live is not None and live.elapsed_s is not None:
        clock += f" · {duration(live.elapsed_s)}"
    span = (win.end - win.start) if win.start is not None and win.end is not None else None
    if mode == "LIVE" and live is not None and live.warming_up:
        mode = f"WARMING UP ({live.steps_seen} steps seen)"
    elif mode == "LIVE" and live is not None and live.first_look:
        mode = "FIRST LOOK"
    sampling = f"{samp.backend} {samp.version or ''} · {rates_text(samp, ids)} · window {duration(span)}"
    nodes = doc.report.nodes
    far = worst_offset(nodes)
    offset = "" if far is None else f" · clock {far.clock_offset_ms:+.1f} ms (n{far.node})"
    return HeaderVM(f"traceml attach · {doc.run_name}", target, clock, mode, sampling,
                    f"{node_states(nodes)}{offset}" if nodes else "", any(n.state == "lost" for n in nodes),
                    _change(doc))


def _change(doc: Summary) -> str:
    """The session's newest step-time change, short."""
    session = doc.report.session
    if session is None or not session.changes:
        return ""
    c = session.changes[-1]
    pct = "" if c.change_pct is None else f" ({c.change_pct:+.0f}%)"
    return f"step {c.before:.0f}→{c.after:.0f} ms at {time.strftime('%H:%M:%S', time.localtime(c.at))}{pct}"


def _whatif(st: StepTimeReport, kind: str) -> list[DiagnosisVM]:
    """A finding's what-ifs, as rail lines."""
    return [DiagnosisVM("what-if", "", "info", projection_line(p), assumption_line(p), "")
            for p in st.whatif if p.finding == kind]


def present_rail(doc: Summary) -> RailVM:
    rep = doc.report
    st = rep.step_time
    live = doc.live
    first = _diagnosis("Step time", st.diagnosis)
    if live is not None and live.warming_up:
        first = DiagnosisVM("Step time", "WARMING UP", "pending", f"warming up ({live.steps_seen} steps seen)",
                            first.why or first.summary, first.action)
    sampling = rep.sampling.diagnosis
    failed = [_diagnosis("Sampling", sampling)] if sampling.kind == Kind.SAMPLING_FAILED else []
    items = [*failed, first]   # a thread of ours that failed goes first: what follows may be stale
    items += _whatif(st, st.diagnosis.kind)
    if st.arrival is not None and (st.arrival.persistent or family(st.diagnosis.kind) is Family.STRAGGLER):
        items.append(DiagnosisVM("slowest", "", "info", arrival_line(st.arrival, "of the window"), "", ""))
    for f in st.findings[1:3]:
        items += [_diagnosis("also", f), *_whatif(st, f.kind)]
    items.append(_diagnosis("Memory", rep.step_memory.diagnosis))
    for title, d in (("System", rep.system.diagnosis), ("Process", rep.process.diagnosis)):
        if d.kind != Kind.NORMAL:
            items.append(_diagnosis(title, d))
    if sampling.kind != Kind.NORMAL and not failed:
        items.append(_diagnosis("Sampling", sampling))
    return RailVM(tuple(items))


def present_steps(doc: Summary, sel: Selection) -> StepTableVM:
    """Every rank's row; past words.MANY_RANKS ranks, the slowest (and those a finding names)
    worst first, the selected one, and the spread of the step and its phases instead of the
    median and worst rows."""
    rep = doc.report
    st = rep.step_time
    worst = st.worst
    named = st.diagnosis.worst_rank
    flagged = named if named is not None else (worst.rank if worst else None)
    many = summarised(st)
    listed = listed_ranks(st) if many else tuple(sorted(st.ranks))
    if many and sel.rank in st.ranks and sel.rank not in listed:
        listed += (sel.rank,)
    rows = []
    for rank in listed:
        r = st.ranks[rank]
        shares = r.shares
        steps = str(r.steps) + ("+" if r.step_ms is None else "")
        rows.append(StepRow(f"r{rank}{node_tag(rep, rank)}", "rank", steps, ms(r.step_ms, unknown="?"),
                            _cells(r.phases_ms or {}, shares), tuple(shares[p] for p in PHASES) if shares else None,
                            selected=rank == sel.rank, flagged=rank == flagged, alert=r.problem_count > 0,
                            blocked_ms=None if r.sync_wait_ms is None or len(st.ranks) < 2 else ms(r.sync_wait_ms)))
    if many:   # each column ranked on its own: no bar, which would read as one rank's step
        rows += [StepRow(label, "spread", "", ms(row.step_ms), tuple(ms(row.phases_ms.get(p)) for p in PHASES), None)
                 for label, row in st.spread.items()]
    elif st.median is not None and worst is not None:
        rows.append(StepRow("median", "median", "", ms(st.median.step_ms),
                            tuple(ms(st.median.phases_ms.get(p)) for p in PHASES), _shares(st.median)))
        rows.append(StepRow(f"worst r{worst.rank}", "worst", "", ms(worst.step_ms),
                            tuple(ms(worst.phases_ms.get(p)) for p in PHASES), _shares(worst)))
    skew = NONE if st.skew_pct is None else f"{st.skew_pct:+.1f}%"
    wait = NONE if st.wait_share is None else f"{100 * st.wait_share:.1f}%"
    # what is unknown about the rows, else why a rank's rate changed (the header says the rates)
    changed = rate_lines(rep.sampling)
    note = (st.step_time_note or (f"sampling {changed[0]}" if changed else "")) if rows else st.diagnosis.summary
    return StepTableVM(tuple(rows), sel.phase, skew, wait, None if worst is None else str(worst.rank), note,
                       _alerts(st.ranks, sel.rank), len(st.ranks) - len(listed))


def _alerts(ranks: dict[int, RankStepTime], selected: int | None) -> tuple[str, ...]:
    """Each rank's sampling problems with its coverage, the selected rank's first."""
    order = sorted(ranks, key=lambda rank: (rank != selected, rank))
    return tuple(note for rank in order if (note := rank_note(ranks[rank])))


def _cells(phases_ms: dict[str, float], shares: dict[str, float] | None) -> tuple[str, ...]:
    """Milliseconds per step; shares of the step (%) when the step time is unknown."""
    if not phases_ms and shares:
        return tuple(pct(shares[p]) for p in PHASES)
    return tuple(ms(phases_ms.get(p)) for p in PHASES)


def _shares(row: PhaseRow) -> tuple[float, ...] | None:
    if not row.step_ms:
        return None
    return tuple((row.phases_ms.get(p) or 0.0) / row.step_ms for p in PHASES)


def present_memory(doc: Summary, sel: Selection) -> MemoryVM:
    sm = doc.report.step_memory
    report = sm.shown
    series = doc.live.memory_series if doc.live else {}
    rows = []
    ranks, hidden = around(sorted(set(report.ranks) | set(series)), sel.rank)
    for rank in ranks:
        r = report.ranks.get(rank)
        values = series.get(rank, ())
        peak = r.peak_bytes if r is not None else (max(values) if values else None)
        rows.append(MemoryRow(str(rank), values, size(peak),
                              signed_size(r.delta_bytes if r is not None else None),
                              selected=rank == sel.rank, flagged=rank == report.worst_rank))
    label = "GPU memory (NVML: reserved + context)" if report.source == "gpu" else "host RSS + DataLoader workers"
    skew = report.skew_pct
    d = sm.diagnosis
    return MemoryVM(label, tuple(rows), size(report.median_peak_bytes), size(report.worst_peak_bytes),
                    None if report.worst_rank is None else str(report.worst_rank),
                    NONE if skew is None else f"{skew:+.1f}%", hidden, tuple(memory_leads(d)))


def present_system(doc: Summary) -> SystemVM:
    system = doc.report.system
    host = system.host
    used, total = host.mem_used_peak_bytes, host.mem_total_bytes
    window = system.window   # the window's (host's is of the whole recording)
    gpus = tuple(
        GpuRow(str(i), pct(g.util_percent_median), pct(g.mem_used_peak, 100),
               NONE if g.temp_c_peak is None else f"{g.temp_c_peak:.0f}°C", pct(g.power_share_median, 100))
        for i, g in sorted(window.gpus.items()))
    d = system.diagnosis
    return SystemVM(pct(window.host_cpu_percent_median), f"{size(used)} / {size(total)}",
                    used / total if used and total else None, gpus, d.status, d.severity, d.summary)


def present_process(doc: Summary, sel: Selection) -> ProcessVM:
    proc = doc.report.process
    rows = []
    ranks, hidden = around(sorted(proc.ranks), sel.rank)
    for rank in ranks:
        r = proc.ranks[rank]
        workers = NONE if r.workers is None else str(r.workers)
        if r.workers_cpu_percent is not None:
            workers += f" ({r.workers_cpu_percent:.0f}%)"
        gpu = size(r.gpu_mem_peak_bytes)
        if r.gpu_sm_util_median is not None:
            gpu += f" · SM {r.gpu_sm_util_median:.0f}%"
        rows.append(ProcessRow(str(rank), str(r.pid), pct(r.cpu_percent_median), size(r.rss_peak_bytes), gpu,
                               workers, NONE if r.threads is None else str(r.threads), selected=rank == sel.rank))
    d = proc.diagnosis
    return ProcessVM(tuple(rows), proc.notes, d.status, d.severity, d.summary, hidden)


def present_hot(doc: Summary, sel: Selection) -> HotFramesVM:
    rank, phase = sel.rank, sel.phase
    frames = doc.report.hot_frames.get(rank, {}).get(phase, ()) if rank is not None else ()
    rows = tuple(HotRow(pct(h.share, 100), f"{h.ms:.0f} ms", h.frame, h.via) for h in frames)
    r = doc.report.step_time.ranks.get(rank) if rank is not None else None
    phase_ms = (r.phases_ms or {}).get(phase) if r is not None else None
    if rows:
        note = ""
    elif rank is None:
        note = "no rank sampled yet"
    else:
        note = f"no {phase} samples on rank {rank} in this window"
    return HotFramesVM(None if rank is None else str(rank), phase,
                       NONE if phase_ms is None else f"{phase_ms:.1f} ms/step", rows, note)


def present_ranks(doc: Summary, ids: tuple[int, ...], sel: Selection) -> RanksVM:
    status = doc.report.ranks
    steps = doc.report.step_time.ranks
    rows = []
    lost = {n.node: n.reason for n in doc.report.nodes if n.state == "lost"}
    ranks, hidden = around(list(ids), sel.rank)
    for rank in ranks:
        s = status.get(rank)
        step = steps.get(rank)
        state = s.status if s is not None else "alive"
        if s is not None and s.status == "exited":
            detail = "exited" + (f" with status {s.exit_status}" if s.exit_status is not None else "")
        elif s is not None and s.status == "agent lost":   # before stalled: its spans stopped with its agent
            detail = f"node {s.node}'s agent went silent" + (f" ({lost[s.node]})" if lost.get(s.node) else "")
        elif s is not None and s.stall is not None and s.stall.stalled:
            state = "stalled"
            detail = f"no step for {s.stall.idle_s:.0f} s, in {s.stall.what}" + (
                f" at {s.stall.where}" if s.stall.where else "")
        else:
            detail = f"{step.steps if step else 0} steps · {ms(step.step_ms if step else None)} ms"
        if s is not None and s.restarts:
            detail += f" · {s.restarts} restart{'s' if s.restarts > 1 else ''}"
        pid = s.pid if s is not None else (step.pid if step is not None else None)
        rows.append(RankRow(str(rank), NONE if pid is None else str(pid), state, detail, selected=rank == sel.rank,
                            node=rank_place(doc.report, rank)))
    return RanksVM(tuple(rows), hidden)


def present(doc: Summary, sel: Selection, mode: str = "LIVE") -> ViewModel:
    """The whole screen's view-model for a summary (live or final) and a selection."""
    ids = rank_ids(doc)
    sel = resolve(doc, ids, sel)
    return ViewModel(
        header=present_header(doc, ids, mode),
        rail=present_rail(doc),
        steps=present_steps(doc, sel),
        memory=present_memory(doc, sel),
        system=present_system(doc),
        process=present_process(doc, sel),
        hot=present_hot(doc, sel),
        ranks=present_ranks(doc, ids, sel),
        rank_ids=ids,
        selection=sel,
    )
