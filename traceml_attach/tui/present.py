"""The pure view-model step: a live document (or a final summary) and a selection in,
everything the panels draw out. No Textual, no clock, no I/O."""

from __future__ import annotations

import time
from typing import Any

from traceml_attach.diagnose.analysis import rank_key
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

SPARK = "▁▂▃▄▅▆▇█"
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


def sparkline(values: list[int] | list[float]) -> str:
    """Block characters, oldest first (live.SPARK_POINTS of them at most; the panel keeps what
    fits). The scale starts at the series' minimum and spans at least 2% of its peak, so
    sampling noise on a flat series stays flat."""
    if not values:
        return ""
    lo, hi = min(values), max(values)
    span = max(hi - lo, 0.02 * abs(hi), 1.0)
    return "".join(SPARK[min(int((v - lo) / span * len(SPARK)), len(SPARK) - 1)] for v in values)


# --- selection ----------------------------------------------------------------------------

def rank_ids(doc: dict[str, Any]) -> tuple[str, ...]:
    ids = set(doc["step_time"]["ranks"]) | set(doc.get("ranks") or {})
    ids |= set((doc.get("process") or {}).get("ranks") or {})
    return tuple(sorted(ids, key=rank_key))


def default_rank(doc: dict[str, Any], ids: tuple[str, ...]) -> str | None:
    """The rank a user wants first: the one the diagnosis names, else the slowest, else rank 0."""
    st = doc["step_time"]
    for candidate in (st["diagnosis"].get("worst_rank"), (st.get("worst") or {}).get("rank")):
        if candidate is not None and str(candidate) in ids:
            return str(candidate)
    return ids[0] if ids else None


def resolve(doc: dict[str, Any], ids: tuple[str, ...], sel: Selection) -> Selection:
    rank = sel.rank if sel.rank in ids else default_rank(doc, ids)
    return Selection(rank, sel.phase if sel.phase in PHASES else PHASES[0])


def move_rank(ids: tuple[str, ...], sel: Selection, by: int) -> Selection:
    if not ids:
        return sel
    i = ids.index(sel.rank) if sel.rank in ids else 0
    return Selection(ids[(i + by) % len(ids)], sel.phase)


def move_phase(sel: Selection, by: int) -> Selection:
    i = PHASES.index(sel.phase) if sel.phase in PHASES else 0
    return Selection(sel.rank, PHASES[(i + by) % len(PHASES)])


# --- panels -------------------------------------------------------------------------------

def _diagnosis(title: str, d: dict[str, Any]) -> DiagnosisVM:
    return DiagnosisVM(title, d["status"], d["severity"], d["summary"], d.get("why") or "", d.get("action") or "")


def present_header(doc: dict[str, Any], ids: tuple[str, ...], mode: str) -> HeaderVM:
    live = doc.get("live") or {}
    targets = doc.get("targets") or []
    cmd = targets[0]["cmd"] if targets else []
    script = next((a.rsplit("/", 1)[-1] for a in cmd[1:] if a.endswith(".py")), cmd[0] if cmd else "?")
    pids = ", ".join(str(t["pid"]) for t in targets[:4]) + (" …" if len(targets) > 4 else "")
    n = len(ids)
    target = f"{script} · pid {pids} · {n} rank{'s' if n != 1 else ''}"
    samp = doc["sampling"]
    win = samp["window"]
    clock_ns = live.get("clock_ns")
    epoch = clock_ns / 1e9 if clock_ns is not None else win.get("end")
    clock = NONE if epoch is None else time.strftime("%H:%M:%S", time.localtime(epoch))
    elapsed = live.get("elapsed_s")
    if elapsed is not None:
        clock += f" · {duration(elapsed)}"
    if mode == "LIVE" and live.get("warming_up"):
        mode = f"WARMING UP ({live.get('steps_seen', 0)} steps seen)"
    span = (win["end"] - win["start"]) if win.get("start") is not None and win.get("end") is not None else None
    sampling = f"{samp['backend']} {samp.get('version') or ''} · {samp['rate_hz']} Hz · window {duration(span)}"
    return HeaderVM(f"traceml attach · {doc['run_name']}", target, clock, mode, sampling)


def present_rail(doc: dict[str, Any]) -> RailVM:
    st = doc["step_time"]
    live = doc.get("live") or {}
    first = _diagnosis("Step time", st["diagnosis"])
    if live.get("warming_up"):
        first = DiagnosisVM("Step time", "WARMING UP", "pending",
                            f"warming up ({live.get('steps_seen', 0)} steps seen)", first.why or first.summary,
                            first.action)
    items = [first]
    items += [_diagnosis("also", f) for f in st.get("findings", [])[1:3]]
    items.append(_diagnosis("Memory", doc["step_memory"]["diagnosis"]))
    for title, key in (("System", "system"), ("Process", "process")):
        d = doc[key]["diagnosis"]
        if d["kind"] != "NORMAL":
            items.append(_diagnosis(title, d))
    return RailVM(tuple(items))


def present_steps(doc: dict[str, Any], sel: Selection) -> StepTableVM:
    st = doc["step_time"]
    worst = st.get("worst") or {}
    named = st["diagnosis"].get("worst_rank")
    flagged = str(named if named is not None else worst.get("rank"))
    rows = []
    for rank, r in sorted(st["ranks"].items(), key=lambda kv: rank_key(kv[0])):
        phases = r.get("phases_ms") or {}
        shares = r.get("shares")
        steps = str(r["steps"]) + ("+" if r.get("step_ms") is None else "")
        rows.append(StepRow(f"r{rank}", "rank", steps, ms(r.get("step_ms"), unknown="?"),
                            _cells(phases, shares), tuple(shares[p] for p in PHASES) if shares else None,
                            selected=rank == sel.rank, flagged=rank == flagged))
    if st.get("median"):
        med = st["median"]
        rows.append(StepRow("median", "median", "", ms(med["step_ms"]),
                            tuple(ms(med["phases_ms"].get(p)) for p in PHASES), _shares(med)))
        rows.append(StepRow(f"worst r{worst['rank']}", "worst", "", ms(worst["step_ms"]),
                            tuple(ms(worst["phases_ms"].get(p)) for p in PHASES), _shares(worst)))
    skew = NONE if st.get("skew_pct") is None else f"{st['skew_pct']:+.1f}%"
    wait = NONE if st.get("wait_share") is None else f"{100 * st['wait_share']:.1f}%"
    note = (st.get("step_time_note") or "") if rows else st["diagnosis"]["summary"]
    return StepTableVM(tuple(rows), sel.phase, skew, wait, None if not worst else str(worst["rank"]), note)


def _cells(phases_ms: dict[str, float], shares: dict[str, float] | None) -> tuple[str, ...]:
    """Milliseconds per step; shares of the step (%) when the step time is unknown."""
    if not phases_ms and shares:
        return tuple(pct(shares[p]) for p in PHASES)
    return tuple(ms(phases_ms.get(p)) for p in PHASES)


def _shares(row: dict[str, Any]) -> tuple[float, ...] | None:
    step = row.get("step_ms")
    phases = row.get("phases_ms") or {}
    if not step:
        return None
    return tuple((phases.get(p) or 0.0) / step for p in PHASES)


def present_memory(doc: dict[str, Any], sel: Selection) -> MemoryVM:
    sm = doc["step_memory"]
    live = doc.get("live") or {}
    source = live.get("memory_source") or ("gpu" if sm.get("gpu") else "host")
    report = sm.get(source) or sm.get("host") or {}
    series = live.get("memory_series") or {}
    ranks = report.get("ranks") or {}
    rows = []
    for rank in sorted(set(ranks) | set(series), key=rank_key):
        r = ranks.get(rank) or {}
        values = series.get(rank) or []
        peak = r.get("peak_bytes", max(values) if values else None)
        rows.append(MemoryRow(rank, sparkline(values), size(peak), signed_size(r.get("delta_bytes")),
                              selected=rank == sel.rank, flagged=rank == report.get("worst_rank")))
    label = "GPU memory (NVML: reserved + context)" if source == "gpu" else "host RSS + DataLoader workers"
    skew = report.get("skew_pct")
    return MemoryVM(label, tuple(rows), size(report.get("median_peak_bytes")), size(report.get("worst_peak_bytes")),
                    report.get("worst_rank"), NONE if skew is None else f"{skew:+.1f}%")


def present_system(doc: dict[str, Any]) -> SystemVM:
    system = doc["system"]
    host = system.get("host") or {}
    used, total = host.get("mem_used_peak_bytes"), host.get("mem_total_bytes")
    cpu = system["host_cpu_percent_median"]   # of the window (host's is of the whole recording)
    gpus = tuple(
        GpuRow(i, pct(g.get("util_percent_median")), pct(g.get("mem_used_peak"), 100),
               NONE if g.get("temp_c_peak") is None else f"{g['temp_c_peak']:.0f}°C",
               pct(g.get("power_share_median"), 100))
        for i, g in sorted((system.get("gpus") or {}).items(), key=lambda kv: rank_key(kv[0])))
    d = system["diagnosis"]
    return SystemVM(pct(cpu), f"{size(used)} / {size(total)}", used / total if used and total else None,
                    gpus, d["status"], d["severity"], d["summary"])


def present_process(doc: dict[str, Any], sel: Selection) -> ProcessVM:
    proc = doc["process"]
    rows = []
    for rank, r in sorted((proc.get("ranks") or {}).items(), key=lambda kv: rank_key(kv[0])):
        workers = NONE if r.get("workers") is None else str(r["workers"])
        if r.get("workers_cpu_percent") is not None:
            workers += f" ({r['workers_cpu_percent']:.0f}%)"
        gpu = size(r.get("gpu_mem_peak_bytes"))
        if r.get("gpu_sm_util_median") is not None:
            gpu += f" · SM {r['gpu_sm_util_median']:.0f}%"
        rows.append(ProcessRow(rank, str(r["pid"]), pct(r.get("cpu_percent_median")), size(r.get("rss_peak_bytes")),
                               gpu, workers, NONE if r.get("threads") is None else str(r["threads"]),
                               selected=rank == sel.rank))
    d = proc["diagnosis"]
    return ProcessVM(tuple(rows), tuple(proc.get("notes") or ()), d["status"], d["severity"], d["summary"])


def present_hot(doc: dict[str, Any], sel: Selection) -> HotFramesVM:
    rank, phase = sel.rank, sel.phase
    frames = (doc.get("hot_frames") or {}).get(rank or "", {}).get(phase) or []
    rows = tuple(HotRow(pct(h["share"], 100), f"{h['ms']:.0f} ms", h["frame"], h.get("via")) for h in frames)
    r = doc["step_time"]["ranks"].get(rank or "") or {}
    phase_ms = (r.get("phases_ms") or {}).get(phase)
    if rows:
        note = ""
    elif rank is None:
        note = "no rank sampled yet"
    else:
        note = f"no {phase} samples on rank {rank} in this window"
    return HotFramesVM(rank, phase, NONE if phase_ms is None else f"{phase_ms:.1f} ms/step", rows, note)


def present_ranks(doc: dict[str, Any], ids: tuple[str, ...], sel: Selection) -> RanksVM:
    status = doc.get("ranks") or {}
    live = (doc.get("live") or {}).get("ranks") or {}
    st = doc["step_time"]["ranks"]
    rows = []
    for rank in ids:
        s = status.get(rank) or {}
        state = s.get("status", "alive")
        stall = live.get(rank) or {}
        step = st.get(rank) or {}
        if state == "exited":
            code = s.get("exit_status")
            detail = "exited" + (f" with status {code}" if code is not None else "")
        elif stall.get("stalled"):
            state = "stalled"
            detail = f"no step for {stall['idle_s']:.0f} s, in {stall['what']}" + (
                f" at {stall['where']}" if stall.get("where") else "")
        else:
            detail = f"{step.get('steps', 0)} steps · {ms(step.get('step_ms'))} ms"
        if s.get("restarts"):
            detail += f" · {s['restarts']} restart{'s' if s['restarts'] > 1 else ''}"
        pid = s.get("pid", step.get("pid"))
        rows.append(RankRow(rank, NONE if pid is None else str(pid), state, detail, selected=rank == sel.rank))
    return RanksVM(tuple(rows))


def present(doc: dict[str, Any], sel: Selection, mode: str = "LIVE") -> ViewModel:
    """The whole screen's view-model for a live document (or a final summary) and a selection."""
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
