"""Find the training ranks below a launcher (torchrun, accelerate, deepspeed) or given PIDs.

A rank is a process with RANK in its environment whose parent does not have the same rank
variables: the DataLoader workers a rank forks inherit them unchanged, and belong to it, while a
launcher gives each worker its own. A launcher may have RANK itself: platforms that start
torchrun with the node's index as RANK (Kubeflow's PyTorchJob, PAI-DLC). Only RANK,
LOCAL_RANK, WORLD_SIZE and GROUP_RANK are ever read from an environment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil

from traceml_agent.procstats import descendant_processes
from traceml_agent.target import rank_env
from traceml_agent.watch import exit_code, exited_for_good, read_stat


@dataclass(frozen=True)
class RankProc:
    pid: int
    rank: int | None          # None for a plain process without RANK
    local_rank: int | None
    world_size: int | None
    group_rank: int | None


def _rank_proc(pid: int, env: dict[str, int]) -> RankProc:
    return RankProc(pid, env.get("RANK"), env.get("LOCAL_RANK"), env.get("WORLD_SIZE"), env.get("GROUP_RANK"))


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def worker_of(env: dict[str, int], parent_env: dict[str, int]) -> bool:
    """A process with rank variables ``env`` is its parent's worker (a DataLoader worker, or any
    child of a rank), not a rank of its own: it inherited them unchanged."""
    return "RANK" in parent_env and parent_env == env


def ranks_below(pid: int) -> list[RankProc]:
    """The live ranks among ``pid``'s descendants, by rank."""
    try:
        descendants = descendant_processes(psutil.Process(pid))
    except psutil.Error:
        return []
    envs = {p.pid: rank_env(p.pid) for p in descendants if _alive(p)}
    envs[pid] = rank_env(pid)
    found = []
    for proc in descendants:
        env = envs.get(proc.pid)
        if not env or "RANK" not in env:
            continue
        try:
            parent = proc.ppid()
        except psutil.Error:
            continue
        if worker_of(env, envs.get(parent, {})):
            continue  # a DataLoader worker (or other child) of a rank
        found.append(_rank_proc(proc.pid, env))
    return sorted(found, key=lambda r: (r.rank if r.rank is not None else 1 << 30, r.pid))


def launcher_of(pid: int) -> int | None:
    """For a rank (or its worker), the nearest ancestor that is not that rank (its launcher), if any."""
    own = rank_env(pid)
    try:
        parent = psutil.Process(pid).parent()
    except psutil.Error:
        return None
    while parent is not None:
        if not worker_of(own, rank_env(parent.pid)):
            return parent.pid
        try:
            parent = parent.parent()
        except psutil.Error:
            return None
    return None


@dataclass(frozen=True)
class Plan:
    """What to sample: the ranks, and how they were found."""

    ranks: list[RankProc]
    launcher: int | None    # re-scanned for restarted workers when set
    note: str | None        # said to the user (e.g. "this is rank 1 of 4 ...")


def plan(pids: list[int]) -> Plan:
    """Turn the user's --pid values into ranks to sample."""
    if len(pids) == 1:
        pid = pids[0]
        env = rank_env(pid)
        below = ranks_below(pid)
        if below:   # a launcher (with RANK of its own on some platforms)
            return Plan(below, pid, None)
        if "RANK" not in env:
            return Plan([_rank_proc(pid, env)], None, None)
        launcher = launcher_of(pid)
        world = env.get("WORLD_SIZE")
        note = f"PID {pid} is rank {env['RANK']}" + (f" of {world}" if world else "")
        if launcher is not None and len(ranks_below(launcher)) > 1:   # other ranks than this one
            note += f"; to attach to every rank, give the launcher's PID: --pid {launcher}"
        return Plan([_rank_proc(pid, env)], None, note)
    return Plan([_rank_proc(pid, rank_env(pid)) for pid in dict.fromkeys(pids)], None, None)


def exit_status(pid: int) -> int | None:
    """A process's exit status while it is a zombie (before its parent reaps it), else None (also
    while only its main thread has ended: ``watch.exited_for_good``).

    Field 52 of /proc/<pid>/stat is the wait status (Linux ≥ 3.5).
    """
    stat = read_stat(pid)
    if stat is None or stat.state != "Z" or stat.wait_status is None or not exited_for_good(pid):
        return None
    return exit_code(stat.wait_status)


def find_launchers() -> list[int]:
    """The launchers on this machine (``--pid auto``): the live parents of live rank processes
    (RANK in their environment) that are not ranks themselves; torchrun, ``python -m
    torch.distributed.run``, accelerate and deepspeed alike. A DataLoader worker's parent is a rank,
    so workers add none. Ranks whose launcher died are adopted by PID 1, which counts only when it
    is Python (torchrun as a container's entrypoint): an init launched nothing. The caller itself
    is never a rank here (an agent started with RANK in its environment would name its own parent).
    Only the rank variables of each environment are read."""
    launchers: set[int] = set()
    me = os.getpid()
    for proc in psutil.process_iter(["pid", "ppid"]):
        pid, ppid = proc.info["pid"], proc.info["ppid"]
        env = rank_env(pid) if ppid and pid != me and ppid not in launchers else {}
        if "RANK" not in env or worker_of(env, rank_env(ppid)) or not _alive(proc):
            continue
        try:
            parent = psutil.Process(ppid)
        except psutil.Error:
            continue
        if _alive(parent) and (ppid != 1 or _is_python(ppid)):
            launchers.add(ppid)
    # a launcher with RANK of its own is, to the shell that started it, a "rank": keep the innermost
    return sorted(pid for pid in launchers if not any(_ancestor(pid, other) for other in launchers - {pid}))


def _ancestor(pid: int, of: int) -> bool:
    """``pid`` is an ancestor of ``of``."""
    try:
        return any(p.pid == pid for p in psutil.Process(of).parents())
    except psutil.Error:
        return False


def _is_python(pid: int) -> bool:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("python")
    except OSError:
        return False
