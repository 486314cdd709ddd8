"""`traceml view RUN --html OUT.html`: the run as one self-contained page.

The page holds its data as JSON and Apache ECharts inlined (output/vendor/), so it opens from a
file with no network. The diagnosis (with its why and next step) is written as HTML, readable
without scripts; the script draws the rest: step time over the session per rank, the phase
breakdown per rank as stacked bars, memory per rank over time, and the hot frames of each phase
for a chosen rank. Past ``MANY_RANKS`` ranks the series over time are drawn as heatmaps (a row
per rank), which stay readable at 64 ranks and beyond where 64 lines would not.

The series over time come from the session's rollups (diagnose/history.py), replayed from the
recording: one point per rank per 2 s (older points cover longer spans once a long session's
rollups merge in pairs), at most 360 per rank however long the session.
Everything else is the summary's: the newest 30 s in detail.
"""

from __future__ import annotations

import html
import json
import re
from importlib import resources
from typing import Any

from traceml_attach import __version__
from traceml_attach.diagnose.finding import Finding
from traceml_attach.diagnose.history import History, RankHistory
from traceml_attach.diagnose.kinds import Kind, status
from traceml_attach.diagnose.ranks import rank_key
from traceml_attach.output.summary import Summary
from traceml_attach.output.whatif_text import arrival_line, assumption_line, change_line, projection_line
from traceml_attach.output.words import memory_leads
from traceml_attach.steps.phases import PHASES

MANY_RANKS = 12   # more ranks than this: heatmaps instead of a line per rank
# The report replays the recording with rollups of 2 s, not a live session's 10 s: a short run gets
# points enough, and a long one still at most MAX_BUCKETS per rank (they merge in pairs as they age).
ROLLUP_S = 2.0
MARKER = re.compile(r"(%%[A-Z]+%%)")   # the template's places to fill


def _asset(*parts: str) -> str:
    return resources.files("traceml_attach.output").joinpath(*parts).read_text(encoding="utf-8")


def _series(history: RankHistory, origin_ns: int) -> dict[str, list[list[float | None]]]:
    """One rank's rollups as [end s, start s, value]: its mean step (ms; None where a step time
    was not known) and its peak RSS and GPU memory (bytes) in each."""
    steps: list[list[float | None]] = []
    rss: list[list[float | None]] = []
    gpu: list[list[float | None]] = []
    for b in history.buckets:
        end, start = round((b.end_ns - origin_ns) / 1e9, 2), round((b.start_ns - origin_ns) / 1e9, 2)
        if b.steps:
            steps.append([end, start, round(b.timed_ns / b.timed_steps / 1e6, 2) if b.timed_steps == b.steps else None])
        if b.rss is not None:
            rss.append([end, start, b.rss.peak])
        if b.gpu_mem is not None:
            gpu.append([end, start, b.gpu_mem.peak])
    return {"step_ms": steps, "rss_bytes": rss, "gpu_bytes": gpu}


def _finding(f: Finding, section: str) -> dict[str, Any]:
    return {"section": section, "status": f.status, "severity": f.severity, "summary": f.summary, "why": f.why,
            "next": f.action, "leads": memory_leads(f) if section == "memory" else []}


def report_data(summary: Summary, history: History | None) -> dict[str, Any]:
    """What the page's script draws, as plain JSON."""
    report = summary.report
    st = report.step_time
    known = bool(st.ranks) and all(r.phases_ms is not None for r in st.ranks.values())
    phases = {str(rank): (row.phases_ms if known else {p: 100 * v for p, v in (row.shares or {}).items()})
              for rank, row in sorted(st.ranks.items()) if row.shares is not None}
    series: dict[str, Any] = {}
    if history is not None and history.origin_ns is not None:
        series = {rank: _series(h, history.origin_ns) for rank, h in sorted(history.ranks.items(),
                                                                           key=lambda kv: rank_key(kv[0]))}
    hot = {str(rank): {phase: [[h.frame, h.via, h.share, h.ms] for h in rows] for phase, rows in by_phase.items()}
           for rank, by_phase in sorted(report.hot_frames.items())}
    diagnosis = st.diagnosis
    return {
        "run": summary.run_name,
        "ranks": [str(r) for r in report.rank_ids()],
        "phases_order": list(PHASES),
        "phases": phases,
        "phase_unit": "ms" if known else "%",
        "series": series,
        "memory_source": report.step_memory.source,
        "hot": hot,
        "focus": str(diagnosis.worst_rank) if diagnosis.worst_rank is not None else None,
        "many_ranks": MANY_RANKS,
        # the session's step-time change points, drawn on the step-time chart: [s since the origin, words]
        "changes": [[round(c.at - history.origin_ns / 1e9, 2), change_line(c)] for c in report.session.changes]
        if report.session is not None and history is not None and history.origin_ns is not None else [],
    }


def _findings(summary: Summary) -> list[dict[str, Any]]:
    """The diagnosis first, then every other finding that is not NORMAL, most severe first."""
    report = summary.report
    out = [_finding(f, "step time") for f in report.step_time.findings]
    for section, f in (("memory", report.step_memory.diagnosis), ("system", report.system.diagnosis),
                       ("process", report.process.diagnosis), ("sampling", report.sampling.diagnosis)):
        if f.kind != Kind.NORMAL:
            out.append(_finding(f, section))
    return out


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _diagnosis_html(summary: Summary) -> str:
    findings = _findings(summary)
    head, rest = findings[0], findings[1:]
    parts = [f'<section class="diagnosis sev-{_e(head["severity"])}" id="diagnosis">',
             f'<div class="status">{_e(head["status"])} <span class="severity">{_e(head["severity"])}</span></div>',
             f'<div class="summary">{_e(head["summary"])}</div>']
    if head["why"]:
        parts.append(f'<div class="why"><b>Why</b> {_e(head["why"])}</div>')
    if head["next"]:
        parts.append(f'<div class="next"><b>Next</b> {_e(head["next"])}</div>')
    note = summary.report.step_time.step_time_note
    if note:
        parts.append(f'<div class="note">{_e(note)}</div>')
    parts.append("</section>")
    parts += _whatif_html(summary)
    if rest:
        parts.append('<section class="findings"><h2>Other findings</h2><ul>')
        for f in rest:
            why = f' <span class="why">{_e(f["why"])}</span>' if f["why"] else ""
            nxt = f' <span class="next"><b>Next</b> {_e(f["next"])}</span>' if f["next"] else ""
            leads = "".join(f"<li>{_e(lead)}</li>" for lead in f["leads"])
            where = f'<div class="leads"><b>Where to look</b> (evidence, not certainty)<ul>{leads}</ul></div>' \
                if leads else ""
            parts.append(f'<li class="sev-{_e(f["severity"])}"><b>{_e(f["status"])}</b> ({_e(f["section"])}, '
                         f'{_e(f["severity"])}): {_e(f["summary"])}.{why}{nxt}{where}</li>')
        parts.append("</ul></section>")
    return "\n".join(parts)


def _whatif_html(summary: Summary) -> list[str]:
    """What each fix is worth, which rank the others wait for, and when the step time changed."""
    st, session = summary.report.step_time, summary.report.session
    items = [f'<li><b>{_e(status(p.finding))}</b> {_e(projection_line(p))}'
             f'<div class="assumption">{_e(assumption_line(p))}</div></li>' for p in st.whatif]
    facts = [arrival_line(a, over) for a, over in ((st.arrival, "of the window"),
                                                   (session.arrival if session else None, "of the session")) if a]
    facts += [change_line(c) for c in (session.changes if session else ())]
    if not items and not facts:
        return []
    out = ['<section class="whatif" id="whatif">']
    if items:
        out.append(f"<h2>What each fix is worth</h2><p>Projected mean step, each fix on its own; the range is "
                   f"the measured per-step spread.</p><ul>{''.join(items)}</ul>")
    if facts:
        out.append("<ul>" + "".join(f"<li>{_e(f)}</li>" for f in facts) + "</ul>")
    return [*out, "</section>"]


def _script_json(value: Any) -> str:
    """JSON safe inside a <script> element: no "</" can close it early."""
    return json.dumps(value, separators=(",", ":")).replace("</", "<\\/")


def html_report(summary: Summary, history: History | None, note: str | None = None) -> str:
    """The self-contained page. ``note`` says what is missing (for example the recording)."""
    report = summary.report
    window = report.sampling.window
    ranks = len(report.rank_ids())
    facts = [f"{ranks} rank{'s' if ranks != 1 else ''}", f"traceml-attach {__version__}"]
    if window.start is not None and window.end is not None:
        facts.insert(1, f"detail: the last {window.end - window.start:.0f} s")
    if report.session is not None:
        facts.insert(1, f"{report.session.duration_s:.0f} s of data")
    page = _asset("html", "report.html")
    fills = {
        "%%TITLE%%": _e(f"traceml-attach: {summary.run_name}"),
        "%%RUN%%": _e(summary.run_name),
        "%%FACTS%%": _e(" · ".join(facts)),
        "%%NOTE%%": f'<p class="note">{_e(note)}</p>' if note else "",
        "%%DIAGNOSIS%%": _diagnosis_html(summary),
        "%%CSS%%": _asset("html", "report.css"),
        "%%DATA%%": _script_json(report_data(summary, history)),
        "%%ECHARTS%%": _asset("vendor", "echarts.min.js").replace("</script", "<\\/script"),
        "%%SCRIPT%%": _asset("html", "report.js"),
    }
    pieces = MARKER.split(page)   # text, marker, text, ...: each filled once, filled text never searched
    markers = set(pieces[1::2])
    if markers != set(fills):
        raise ValueError(f"the report template's markers {sorted(markers)} are not {sorted(fills)}")
    pieces[1::2] = [fills[marker] for marker in pieces[1::2]]
    return "".join(pieces)
