"""Which process is which rank: the rank labels every diagnosis is keyed by."""

from __future__ import annotations

from traceml_attach.ingest.stream import Recording


def rank_of(rec: Recording, pid: int, index: int) -> str:
    meta = rec.targets.get(pid)
    return str(meta.rank) if meta is not None and meta.rank is not None else str(index)


def rank_key(rank: str) -> tuple[bool, int, str]:
    """Ranks in numeric order; non-numeric labels after them."""
    return (False, int(rank), "") if rank.isdigit() else (True, 0, rank)


def rank_pids(rec: Recording, start_ns: int, end_ns: int) -> dict[str, int]:
    """Each rank's process for the window: after an elastic restart, the one sampled last
    that has samples in the window."""
    chosen: dict[str, int] = {}
    pids = list(rec.targets) or list(rec.spans)
    for index, pid in enumerate(pids):
        rank = rank_of(rec, pid, index)
        spans = rec.spans.get(pid, [])
        inside = bool(spans) and spans[0].ts_ns < end_ns and spans[-1].end_ns > start_ns
        if rank not in chosen or inside:
            chosen[rank] = pid
    return dict(sorted(chosen.items(), key=lambda kv: rank_key(kv[0])))


def pid_ranks(rec: Recording) -> dict[int, int]:
    """Every process the recording knows, to its rank."""
    return {pid: int(rank_of(rec, pid, index)) for index, pid in enumerate(rec.targets)}


def synchronized(rec: Recording, pids: dict[str, int]) -> bool:
    """Ranks of one distributed job (torchrun's RANK/WORLD_SIZE): they meet in a collective
    every step (DDP's all-reduce in backward, FSDP's gathers), so they share one step period."""
    metas = [rec.targets.get(pid) for pid in pids.values()]
    return len(metas) > 1 and all(m is not None and m.rank is not None and (m.world_size or 0) > 1 for m in metas)
