"""System and process diagnoses: context for the step-time diagnosis, never its replacement."""

from __future__ import annotations

import statistics
from typing import Any

from traceml_attach.diagnose.gpu import RankGpu
from traceml_attach.diagnose.kinds import Kind
from traceml_attach.diagnose.step import SEVERITY_ORDER, Finding
from traceml_attach.ingest.model import HostSample, os_pid
from traceml_attach.ingest.stream import Recording
from traceml_attach.policy import DEFAULT_SYSTEM_POLICY, SystemPolicy


def _med(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _pick(findings: list[Finding], evidence: dict[str, Any], normal: str) -> tuple[Finding, dict[str, Any]]:
    """The most severe finding (NORMAL when there is none), and the evidence with every kind found."""
    if not findings:
        return Finding(Kind.NORMAL, "info", normal, "", "", None, evidence), {"findings": [], **evidence}
    return max(findings, key=lambda f: SEVERITY_ORDER[f.severity]), {"findings": [f.kind for f in findings], **evidence}


def _busy_host(rec: Recording, ranks: dict[str, int], hosts: list[HostSample], cpu: float, start_ns: int,
               end_ns: int, evidence: dict[str, Any], policy: SystemPolicy) -> Finding:
    """A host whose CPUs are busy: context when the job's own processes (its ranks and their
    DataLoader workers) are what keeps them busy, as in training on the CPU; a warning when
    something else takes a share of them, or when that cannot be told (no CPU count recorded)."""
    counts = [h.cpus for h in hosts if h.cpus]
    job = 0.0
    for pid in ranks.values():
        used = [p.cpu_percent + sum(c[1] or 0 for c in p.children)
                for p in rec.procs_between(pid, start_ns, end_ns) if p.cpu_percent is not None]
        job += _med(used) or 0.0
    if counts:
        busy = cpu * max(counts)   # in percent of one CPU, as a process's CPU is
        share = min(job / busy, 1.0) if busy else 0.0
        evidence = {**evidence, "job_cpu_share": round(share, 3), "host_cpus": max(counts)}
        if share >= policy.job_cpu_share:
            return Finding(Kind.HOST_BUSY_WITH_JOB, "info",
                           f"host CPU is {cpu:.0f}% busy (median), {100 * share:.0f}% of it this job's own processes",
                           "the job itself keeps the CPUs busy (training or loading data on the CPU)",
                           "nothing competes with it; to go faster, see the step-time diagnosis", None, evidence)
        return Finding(Kind.HIGH_CPU, "warning",
                       f"host CPU is {cpu:.0f}% busy (median), only {100 * share:.0f}% of it this job's processes",
                       "other processes compete with the job for the CPUs",
                       "find them (top, nvitop) and move them off this host, or pin the job to its own cores", None,
                       evidence)
    return Finding(Kind.HIGH_CPU, "warning", f"host CPU is {cpu:.0f}% busy (median)", "the host is saturated",
                   "check DataLoader workers and other processes", None, evidence)


def diagnose_system(rec: Recording, start_ns: int, end_ns: int, step_kind: str,
                    policy: SystemPolicy = DEFAULT_SYSTEM_POLICY,
                    ranks: dict[str, int] | None = None) -> tuple[Finding, dict[str, Any]]:
    """The host's and GPUs' findings in the window; ``ranks`` (rank -> pid) tell the job's own
    CPU use from the rest of the host's."""
    hosts = [h for h in rec.hosts if start_ns <= h.ts_ns <= end_ns]
    gpus = [g for g in rec.gpus if start_ns <= g.ts_ns <= end_ns]
    cpu = _med([h.cpu_percent for h in hosts if h.cpu_percent is not None])
    mem = [h.mem_used_bytes / h.mem_total_bytes for h in hosts if h.mem_used_bytes and h.mem_total_bytes]
    devices: dict[int, dict[str, Any]] = {}
    for g in gpus:
        for d in g.devices:
            row = devices.setdefault(d.index, {"util": [], "mem": [], "temp": [], "power": []})
            if d.util_percent is not None:
                row["util"].append(d.util_percent)
            if d.mem_used_bytes is not None and d.mem_total_bytes:
                row["mem"].append(d.mem_used_bytes / d.mem_total_bytes)
            if d.temp_c is not None:
                row["temp"].append(d.temp_c)
            if d.power_w is not None and d.power_limit_w:
                row["power"].append(d.power_w / d.power_limit_w)
    table = {str(i): {"util_percent_median": _med(r["util"]), "mem_used_peak": max(r["mem"], default=None),
                      "temp_c_peak": max(r["temp"], default=None), "power_share_median": _med(r["power"])}
             for i, r in devices.items()}
    evidence = {"host_cpu_percent_median": cpu, "host_mem_peak": max(mem, default=None), "gpus": table}
    findings: list[Finding] = []
    for i, r in table.items():
        util = r["util_percent_median"]
        if r["mem_used_peak"] is not None and r["mem_used_peak"] >= policy.high_gpu_memory:
            peak = 100 * r["mem_used_peak"]
            findings.append(Finding(Kind.HIGH_GPU_MEMORY, "warning", f"GPU {i} memory peaks at {peak:.0f}%",
                                    "near capacity", "see Step Memory", None, evidence))
        if r["temp_c_peak"] is not None and r["temp_c_peak"] >= policy.high_gpu_temp_c:
            findings.append(Finding(Kind.HIGH_GPU_TEMPERATURE, "warning", f"GPU {i} reaches {r['temp_c_peak']:.0f} °C",
                                    "it may throttle", "check cooling and clocks", None, evidence))
        if r["power_share_median"] is not None and r["power_share_median"] >= policy.high_gpu_power:
            findings.append(Finding(Kind.HIGH_GPU_POWER, "info", f"GPU {i} runs at its power limit",
                                    "clocks may be capped by power", "expected for a saturated GPU", None, evidence))
        if util is not None and util < policy.moderate_gpu_util:
            kind = Kind.LOW_GPU_UTILIZATION if util < policy.low_gpu_util else Kind.MODERATE_GPU_UTILIZATION
            cause = ("cause unexplained: step time looks balanced" if step_kind in (Kind.BALANCED, Kind.COMPUTE_BOUND)
                     else f"see Step Time ({step_kind})")
            findings.append(Finding(kind, "warning" if kind.startswith("LOW") else "info",
                                    f"GPU {i} is busy {util:.0f}% of the time ({cause})",
                                    "utilization alone does not say why: read it with the step-time diagnosis",
                                    "follow the step-time diagnosis", None, evidence))
    if cpu is not None and cpu >= policy.high_cpu:
        findings.append(_busy_host(rec, ranks or {}, hosts, cpu, start_ns, end_ns, evidence, policy))
    if mem and max(mem) >= policy.high_host_memory:
        findings.append(Finding(Kind.HIGH_HOST_MEMORY, "warning", f"host RAM peaks at {100 * max(mem):.0f}%",
                                "near capacity: risk of swapping or the OOM killer", "see Step Memory", None, evidence))
    return _pick(findings, evidence, "no system-level pressure")


def diagnose_process(rec: Recording, ranks: dict[str, int], gpu: RankGpu, start_ns: int, end_ns: int,
                     policy: SystemPolicy = DEFAULT_SYSTEM_POLICY) -> tuple[Finding, dict[str, Any]]:
    total = rec.hosts[-1].mem_total_bytes if rec.hosts else None
    rows: dict[str, Any] = {}
    for rank, pid in ranks.items():
        ps = rec.procs_between(pid, start_ns, end_ns)
        cpus = [p.cpu_percent for p in ps if p.cpu_percent is not None]
        rss = [p.rss_bytes + p.workers_rss_bytes for p in ps if p.rss_bytes is not None]
        workers = ps[-1].children if ps else ()
        gmem = [v for _, v in gpu.memory.get(rank, [])]
        rows[rank] = {"pid": os_pid(pid), "cpu_percent_median": _med(cpus), "rss_peak_bytes": max(rss, default=None),
                      "threads": ps[-1].num_threads if ps else None, "workers": len(workers) if ps else None,
                      "workers_cpu_percent": sum(c[1] or 0 for c in workers) if workers else None,
                      "workers_rss_bytes": ps[-1].workers_rss_bytes if workers else None,
                      "gpu_mem_peak_bytes": max(gmem, default=None), "gpu_capacity_bytes": gpu.capacity.get(rank),
                      "gpu_sm_util_median": _med([float(x) for x in gpu.sm_util.get(rank, [])])}
    evidence = {"ranks": rows, "notes": gpu.notes}
    findings = []
    for rank, r in rows.items():
        if r["gpu_mem_peak_bytes"] and r["gpu_capacity_bytes"] and \
                r["gpu_mem_peak_bytes"] / r["gpu_capacity_bytes"] >= policy.high_process_gpu_memory:
            findings.append(Finding(Kind.HIGH_PROCESS_GPU_MEMORY, "warning", f"rank {rank} holds most of its GPU",
                                    "near the device's capacity", "see Step Memory", rank, evidence))
        if r["rss_peak_bytes"] and total and r["rss_peak_bytes"] / total >= policy.high_process_rss:
            findings.append(Finding(Kind.HIGH_PROCESS_RSS, "warning", f"rank {rank} with its workers holds "
                                    f"{100 * r['rss_peak_bytes'] / total:.0f}% of host RAM", "", "see Step Memory",
                                    rank, evidence))
        if r["cpu_percent_median"] is not None and r["cpu_percent_median"] >= policy.high_process_cpu:
            findings.append(Finding(Kind.HIGH_PROCESS_CPU, "info", f"rank {rank} keeps a core busy "
                                    f"({r['cpu_percent_median']:.0f}%)", "its Python thread is CPU-bound",
                                    "expected on CPU training; on GPU jobs look at the hot frames", rank, evidence))
    peaks = {k: r["gpu_mem_peak_bytes"] for k, r in rows.items() if r["gpu_mem_peak_bytes"]}
    if len(peaks) > 1:
        med = statistics.median(peaks.values())
        worst = max(peaks, key=lambda k: peaks[k])
        if med and (peaks[worst] - med) / med >= policy.rank_gpu_memory_skew:
            findings.append(Finding(Kind.RANK_GPU_MEMORY_IMBALANCE, "warning",
                                    f"rank {worst} uses {100 * (peaks[worst] - med) / med:.0f}% more GPU memory",
                                    "than the median rank", "see Step Memory", worst, evidence))
    return _pick(findings, evidence, "no process-level pressure")
