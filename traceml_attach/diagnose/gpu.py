"""GPU readings per rank: NVML's host PIDs mapped to ranks (NSpid first, then the rank's device)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from traceml_attach.ingest.stream import Recording


@dataclass
class RankGpu:
    memory: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # rank -> (ts, bytes)
    capacity: dict[str, int | None] = field(default_factory=dict)
    sm_util: dict[str, list[int]] = field(default_factory=dict)             # rank -> SM % samples
    sm_series: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # rank -> (ts, SM %)
    notes: list[str] = field(default_factory=list)


def rank_gpu(rec: Recording, ranks: dict[str, int], start_ns: int, end_ns: int) -> RankGpu:
    """Per-rank GPU memory and SM utilization in the window; ``ranks`` maps rank -> pid."""
    out = RankGpu()
    owner_of: dict[int, str] = {}   # every PID a rank's process has (host and container namespaces) -> rank
    for rank, pid in ranks.items():
        meta = rec.targets.get(pid)
        for ns_pid in meta.nspid if meta is not None and meta.nspid else (pid,):
            owner_of.setdefault(ns_pid, rank)   # the first rank if two namespaces share a PID
    device_of = {}
    for index, (rank, pid) in enumerate(ranks.items()):
        meta = rec.targets.get(pid)
        local = meta.local_rank if meta is not None and meta.local_rank is not None else index
        device_of[rank] = local
    by_device: dict[int, list[str]] = defaultdict(list)
    for rank, device in device_of.items():
        by_device[device].append(rank)
    fallback_used = False
    for sample in rec.gpus:
        if not start_ns <= sample.ts_ns <= end_ns:
            continue
        totals = {d.index: d.mem_total_bytes for d in sample.devices}
        used: dict[str, int] = defaultdict(int)
        matched: list[tuple[str, int, int | None, int | None]] = []
        unmatched = []
        for device, host_pid, mem, sm in sample.procs:
            owner = owner_of.get(host_pid)
            if owner is None:
                unmatched.append((device, mem, sm))
            else:
                matched.append((owner, device, mem, sm))
        by_pid = {owner for owner, *_ in matched}
        for device, mem, sm in unmatched:
            # a container's PID namespace hides the host PID: the process on a rank's own device
            # is taken for the rank, but only for a device with one rank whose PID matched nothing
            # (another job's process on the same GPU must not be counted as the rank's)
            candidates = by_device.get(device, [])
            if len(candidates) == 1 and candidates[0] not in by_pid:
                matched.append((candidates[0], device, mem, sm))
                fallback_used = True
        for owner, device, mem, sm in matched:
            out.capacity[owner] = totals.get(device)
            if mem is not None:   # NVML could not say: no point, rather than a false 0
                used[owner] += mem
            if sm is not None:
                out.sm_util.setdefault(owner, []).append(sm)
                out.sm_series.setdefault(owner, []).append((sample.ts_ns, sm))
        for rank, value in used.items():
            out.memory.setdefault(rank, []).append((sample.ts_ns, value))
    if fallback_used:
        out.notes.append("NVML's PIDs did not match the ranks' (another PID namespace): matched by the ranks' devices")
    if any(d.mig for s in rec.gpus for d in s.devices):
        out.notes.append("MIG is enabled: NVML gives no per-process utilization there")
    return out
