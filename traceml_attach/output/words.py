"""The words the text summary, the TUI and the HTML report share: a rank's note, where rising
memory goes, the sampling rates in use, many ranks and nodes in a line, micro-batches."""

from __future__ import annotations

import time
from collections.abc import Iterable

from traceml_attach.diagnose.finding import Finding, MemoryEvidence
from traceml_attach.diagnose.report import (
    NetReport,
    NodeRow,
    RankStepTime,
    Report,
    SamplingReport,
    StepTimeReport,
)


def rank_note(r: RankStepTime) -> str | None:
    """A rank's sampling problems with the coverage they cost: beside the numbers they weaken."""
    if not r.problem_count:
        return None
    coverage = "coverage unknown" if r.coverage is None else f"coverage {100 * r.coverage:.1f}%"
    more = f" ({r.problem_count} problems, the last)" if r.problem_count > 1 else ""
    return f"rank {r.rank}: {coverage}; sampling problem{more}: {r.problems[-1].line()}"


# --- where rising memory goes: shared with the TUI and the HTML report ------------------------

def memory_leads(d: Finding) -> list[str]:
    """What the step-memory finding's evidence points at when memory rises: the pace a step, the
    lines that keep tensors across steps, the phase it grows in, the workers that grow."""
    ev = d.evidence
    if not isinstance(ev, MemoryEvidence):
        return []
    out = []
    if ev.bytes_per_step is not None:
        out.append(f"{ev.bytes_per_step / 2**20:.1f} MiB more memory a step (its pace times the step time)")
    leak = ev.leak
    if leak is None:
        return out
    out += [line.why for line in leak.lines]
    if leak.growth_phase is not None and leak.phase_bytes_per_step:
        grows = leak.phase_bytes_per_step[leak.growth_phase]
        rest = sum(v for p, v in leak.phase_bytes_per_step.items() if p != leak.growth_phase)
        out.append(f"its RSS grows while the job is in {leak.growth_phase}: {grows / 2**20:+.1f} MiB a step, and the "
                   f"rest of the step gives back {max(-rest, 0.0) / 2**20:.1f} MiB (where the allocator first needs "
                   "new memory in a step, which need not be where the kept tensors were made)")
    for w in leak.workers[:3]:
        out.append(f"DataLoader worker {w.pid} grew {w.growth_bytes / 2**20:+.0f} MiB ({_pace(w.bytes_per_s)}): a "
                   "Dataset that caches what it loads, or copies of its Python objects as workers touch them")
    if not leak.lines and leak.main_bytes_per_s is not None and leak.workers_bytes_per_s is not None:
        out.append(f"the rank's own process {_pace(leak.main_bytes_per_s)}, its DataLoader workers "
                   f"{_pace(leak.workers_bytes_per_s)}")
    if not leak.lines and not leak.workers:
        out.append("no line of the training loop's source keeps a tensor across steps that the text shows: look at "
                   "caches, lists and attributes filled in the functions it calls")
    return out


def _pace(bytes_per_s: float) -> str:
    if abs(bytes_per_s) >= 2**20:
        return f"{bytes_per_s / 2**20:+.1f} MiB/s"
    return f"{bytes_per_s * 60 / 2**20:+.1f} MiB/min"


# --- the rates in use: shared with the TUI (tui/present.py) --------------------------------

def missed_text(samples: int | None, errors: int | None) -> str:
    """What py-spy's failed samples were and whether they matter (they cost coverage, not accuracy:
    a stack read without pausing the job that met it mid-change is dropped, never guessed)."""
    if not errors:
        return ""
    share = errors / (samples + errors) if samples else 1.0
    matters = ("too few to matter" if share < 0.01 else
               "the numbers cover the rest" if share < 0.05 else "coverage is low: see Sampling below")
    return (f" ({errors} more could not be read, {100 * share:.1f}%: the job's stack changed during a read that "
            f"does not pause it; {matters})")


def rates_text(samp: SamplingReport, ranks: Iterable[int]) -> str:
    """The rates in use over ``ranks``: "100 Hz", "100 Hz (up to 300)", "100/300 Hz (up to 300)"."""
    now = {samp.rates[r].rate_hz if r in samp.rates else samp.rate_hz for r in ranks} or {samp.rate_hz}
    top = f" (up to {samp.max_rate_hz})" if samp.adaptive else ""
    return f"{'/'.join(map(str, sorted(now)))} Hz{top}"


def rate_lines(samp: SamplingReport) -> list[str]:
    """One line per rate the sampler changed ranks to: "300 Hz on ranks 0-1 since 22:20:39: why"
    (the why of the rank that took it first)."""
    by_rate: dict[int, list[int]] = {}
    for rank, r in samp.rates.items():
        by_rate.setdefault(r.rate_hz, []).append(rank)
    out = []
    for rate_hz, ranks in sorted(by_rate.items(), key=lambda kv: -kv[0]):
        first = min((samp.rates[rank] for rank in ranks), key=lambda r: r.since)
        who = f"rank{'s' if len(ranks) > 1 else ''} {rank_ranges(ranks)}"
        since = time.strftime("%H:%M:%S", time.localtime(first.since))
        out.append(f"{rate_hz} Hz on {who} since {since}" + (f": {first.why}" if first.why else ""))
    return out


# --- many ranks and many nodes: shared with the TUI (tui/present.py) ----------------------

MANY_RANKS = 64     # past this many ranks the step table summarises instead of listing every rank
WORST_RANKS = 8     # ...listing this many of the slowest, and every rank a finding names


def summarised(st: StepTimeReport) -> bool:
    return len(st.ranks) > MANY_RANKS


def listed_ranks(st: StepTimeReport, n: int = WORST_RANKS) -> tuple[int, ...]:
    """The ranks a summarised step table lists, slowest first: the ``n`` slowest by typical
    step, and every rank a finding names (a hang's rank need not be slow)."""
    named = {f.worst_rank for f in st.findings if isinstance(f.worst_rank, int)} & set(st.ranks)
    slow = sorted(st.ranks.values(), key=lambda r: (r.step_ms is None, -(r.step_ms or 0.0), r.rank))
    keep = {r.rank for r in slow[:n]} | named
    return tuple(r.rank for r in slow if r.rank in keep)


def rank_place(rep: Report, rank: int) -> str:
    """Where a global rank runs in a multi-node session: "n1/l1" (node 1, local rank 1); "" on
    one machine."""
    status = rep.ranks.get(rank)
    if not rep.nodes or status is None:
        return ""
    return f"n{status.node}" + ("" if status.local_rank is None else f"/l{status.local_rank}")


def node_tag(rep: Report, rank: int) -> str:
    """The place beside a global rank: "65 (n1/l1)"."""
    place = rank_place(rep, rank)
    return f" ({place})" if place else ""


def rank_ranges(ranks: tuple[int, ...] | list[int]) -> str:
    """Ranks as compact ranges: 0-63, 65, 70-71."""
    out: list[str] = []
    ordered = sorted(set(ranks))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ", ".join(out) if out else "none yet"


def node_states(nodes: tuple[NodeRow, ...]) -> str:
    """"3 nodes (2 joined, 1 lost)": a node that came back counts as joined."""
    counts: dict[str, int] = {}
    for n in nodes:
        state = "joined" if n.state == "back" else n.state
        counts[state] = counts.get(state, 0) + 1
    states = ", ".join(f"{k} {state}" for state, k in sorted(counts.items(), key=lambda kv: kv[0] != "joined"))
    return f"{len(nodes)} node{'s' if len(nodes) != 1 else ''} ({states})"


def worst_offset(nodes: tuple[NodeRow, ...]) -> NodeRow | None:
    """The node whose clock is furthest from the collector's."""
    known = [n for n in nodes if n.clock_offset_ms is not None]
    return max(known, key=lambda n: abs(n.clock_offset_ms or 0.0), default=None)


def net_line(net: NetReport) -> str:
    return (f"net: {net.messages} messages, {net.bytes / 1e6:.1f} MB, {net.refused_peers} refused peers, "
            f"{net.bad_messages} bad messages, {net.agent_dropped} dropped by agents")


def accumulates(r: RankStepTime) -> bool:
    """Whether a rank's step is said to be an optimizer step of several micro-batches: counted, or
    not counted beside a known step time (with its step unknown, its reason says what they may be)."""
    return r.micro_batches != 1 and (r.micro_batches is not None or r.step_ms is not None)


def micro_text(micro_batches: int | None) -> str:
    """How many micro-batches a step holds, as the text and the TUI say it."""
    if micro_batches is None:
        return "(its micro-batches not counted)"
    return f"of {micro_batches} micro-batches"
