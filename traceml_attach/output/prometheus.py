"""`--prometheus HOST:PORT`: the live diagnosis as Prometheus metrics, for the dashboards a team
already has (docs/grafana-dashboard.json). The CLI imports this module only for that option.

``families`` is a pure function of the recording and a tick's analysis, like every other view:
the analysis thread builds the families once per tick and ``MetricsServer`` hands the newest
set to each scrape, so a scrape never touches the recording and never waits for the analysis.
A number the analysis does not have (a step time it could not tell, a GPU it did not see) is
left out rather than exported as 0.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from traceml_attach.diagnose.analysis import Analysis
from traceml_attach.diagnose.step import straggler_scores
from traceml_attach.ingest.stream import Recording
from traceml_attach.policy import DEFAULT_STEP_TIME_POLICY

UP = ("alive", "restarted")   # a rank's statuses that count as up (restarted: its new process runs)


def families(rec: Recording, an: Analysis, diagnoses: set[tuple[str, str]]) -> list[Metric]:
    """The metric families of one tick. ``diagnoses`` is every (kind, severity) exported so far,
    updated here: those no longer current are kept at 0, so a dashboard sees the change."""
    report = an.report
    step = GaugeMetricFamily("traceml_step_seconds", "Typical step time of the rank over the live window: the "
                             "steps' median, or their mean where they vary too much for a median (statistic); "
                             "absent while it cannot be known", labels=["rank", "statistic"])
    phase = GaugeMetricFamily("traceml_phase_seconds", "Time per typical step in each phase", labels=["rank", "phase"])
    share = GaugeMetricFamily("traceml_phase_share", "Share of the step in each phase (0-1)", labels=["rank", "phase"])
    for number, row in sorted(report.step_time.ranks.items()):
        label = str(number)
        if row.step_ms is not None:
            step.add_metric([label, "mean" if row.clock is not None and row.clock.mean else "median"],
                            row.step_ms / 1e3)
        for name, ms in (row.phases_ms or {}).items():
            phase.add_metric([label, name], ms / 1e3)
        for name, value in (row.shares or {}).items():
            share.add_metric([label, name], value)

    primary = report.step_time.diagnosis
    diagnoses.add((primary.kind, primary.severity))
    diagnosis = GaugeMetricFamily("traceml_diagnosis", "1 for the current step-time diagnosis, 0 for the others "
                                  "seen this session", labels=["kind", "severity"])
    for kind, severity in sorted(diagnoses):
        diagnosis.add_metric([kind, severity], 1.0 if (kind, severity) == (primary.kind, primary.severity) else 0.0)

    straggler = GaugeMetricFamily("traceml_straggler_score", "Excess share of the step the straggler rule charges "
                                  "the rank with (what the others wait for it per step); from "
                                  f"{DEFAULT_STEP_TIME_POLICY.straggler_warn:g} on the highest is named",
                                  labels=["rank"])
    for key, score in straggler_scores(an.ranks).items():
        straggler.add_metric([key], score)

    up = GaugeMetricFamily("traceml_rank_up", "1 while the rank's process runs, 0 once it exited or its agent was "
                           "lost", labels=["rank"])
    for number, row_status in sorted(report.ranks.items()):
        up.add_metric([str(number)], 1.0 if row_status.status in UP else 0.0)

    rss = GaugeMetricFamily("traceml_rss_bytes", "Newest host RSS of the rank's process with its DataLoader workers",
                            labels=["rank"])
    gpu_mem = GaugeMetricFamily("traceml_gpu_memory_bytes", "Newest GPU memory of the rank's processes (NVML)",
                                labels=["rank"])
    sm = GaugeMetricFamily("traceml_gpu_sm_util", "Newest SM utilization of the rank's processes, percent (NVML)",
                           labels=["rank"])
    since = an.start_ns or 0
    for rank, pid in an.pids.items():
        status = report.ranks.get(int(rank)) if rank.isdigit() else None
        if status is not None and status.status not in UP:
            continue   # an exited rank's last reading is not its memory now
        procs = rec.procs.get(pid)
        if procs and procs[-1].ts_ns >= since and procs[-1].rss_bytes is not None:
            rss.add_metric([rank], float(procs[-1].rss_bytes + procs[-1].workers_rss_bytes))
        if memory := an.gpu.memory.get(rank):
            gpu_mem.add_metric([rank], float(memory[-1][1]))
        if util := an.gpu.sm_series.get(rank):
            sm.add_metric([rank], float(util[-1][1]))

    whatif = GaugeMetricFamily("traceml_whatif_step_seconds", "Projected mean step were one finding's fix applied "
                               "(diagnose/whatif.py); 'checked' says whether the window could check its assumption",
                               labels=["finding", "fix", "checked"])
    gain = GaugeMetricFamily("traceml_whatif_gain_share", "Share of the mean step that fix would save (0-1)",
                             labels=["finding", "fix"])
    for p in report.step_time.whatif:
        whatif.add_metric([p.finding, p.fix, "true" if p.checked else "false"], p.step_ms / 1e3)
        gain.add_metric([p.finding, p.fix], p.gain_pct / 100)
    last = GaugeMetricFamily("traceml_slowest_rank_share", "Share of the judged steps the rank arrived last at the "
                             "collective in (diagnose/arrival.py)", labels=["rank", "over"])
    session = report.session
    for over, arrival in (("window", report.step_time.arrival), ("session", session.arrival if session else None)):
        if arrival is not None:
            for number_last, n in arrival.last.items():
                last.add_metric([str(number_last), over], n / arrival.steps)
    change = GaugeMetricFamily("traceml_step_change_timestamp_seconds", "When the newest lasting step-time change "
                               "of the session happened (diagnose/changes.py), by its direction; absent without one",
                               labels=["direction"])
    change_pct = GaugeMetricFamily("traceml_step_change_percent", "...and its size, percent of the step before",
                                   labels=["direction"])
    if session is not None and session.changes:
        newest = session.changes[-1]
        direction = "rose" if newest.after > newest.before else "fell"
        change.add_metric([direction], newest.at)
        if newest.change_pct is not None:
            change_pct.add_metric([direction], newest.change_pct)

    window = GaugeMetricFamily("traceml_window_timestamp_seconds", "The live window the step metrics are over: its "
                               "first and last sample (Unix time); absent before the first", labels=["edge"])
    spans = rec.time_range()
    if spans is not None and an.end_ns is not None:   # a window reaching back past the first sample starts there
        window.add_metric(["start"], max(an.start_ns or 0, spans[0]) / 1e9)
        window.add_metric(["end"], an.end_ns / 1e9)

    # a rank whose rate changed inside the window has its steps found from the change on (its
    # step time is of that stretch: a loaded job sped from 286 to 230 ms a step after a raise)
    step_since = GaugeMetricFamily("traceml_step_since_timestamp_seconds", "Where the rank's step metrics start "
                                   "(Unix time): later than the window's start where its sampling rate changed "
                                   "inside the window; absent otherwise", labels=["rank"])
    for number, row in sorted(report.step_time.ranks.items()):
        if row.since is not None:
            step_since.add_metric([str(number)], row.since)

    sampling = report.sampling
    samples = CounterMetricFamily("traceml_samples", "Stack samples py-spy took over the session")
    errors = CounterMetricFamily("traceml_sampling_errors", "Stack samples py-spy could not take over the session")
    out: list[Metric] = [step, phase, share, diagnosis, straggler, up, rss, gpu_mem, sm, whatif, gain, last,
                         change, change_pct, window, step_since]
    if sampling.samples is not None:
        samples.add_metric([], sampling.samples)
        out.append(samples)
    if sampling.errors is not None:
        errors.add_metric([], sampling.errors)
        out.append(errors)
    return out


class MetricsServer(Collector):
    """The HTTP endpoint (prometheus-client's) that serves the newest tick's families.

    Listens on 127.0.0.1 unless told otherwise. ``update`` runs on the analysis thread; a scrape,
    on the server's, reads the list the last update left (one reference swap, no lock).
    """

    def __init__(self, host: str, port: int) -> None:
        self._families: list[Metric] = []
        self._diagnoses: set[tuple[str, str]] = set()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        self.host, self.port = host, int(self._server.server_port)

    def update(self, rec: Recording, an: Analysis) -> None:
        self._families = families(rec, an, self._diagnoses)

    def collect(self) -> Iterable[Metric]:
        return self._families

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
