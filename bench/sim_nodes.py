"""Simulated nodes of a multi-node job: one recorded two-rank DDP stream replayed as every rank
of many nodes, frame by frame as each node's agent would send it (bench/multinode_load.py).

The source is tests/fixtures/ddp_input_straggler.msgpack (8 s, two synchronized ranks): its
rank 0 keeps pace and waits ~59 ms a step in backward's all-reduce for its rank 1, an input
straggler. Every simulated rank replays rank 0's stream except the ``slow`` ones, which replay
rank 1's: the whole job waits for a few ranks, which the diagnosis should name.

Each simulated rank gets its own PID (PID_BASE + global rank) and torchrun's rank variables
(RANK = node * ranks_per_node + LOCAL_RANK, GROUP_RANK = node, WORLD_SIZE). The fixture is
looped: copy k is shifted by k periods (timestamps, window ids, the cumulative CPU counters
going on from the last copy), and the state frames (hello, target, threads) come once. Each
node's stream defines every code frame and stack once, before its first use, as the agent's
interner does.

The rewriting is done once per source frame and copy, and shared by every rank and node that
replays it (frames are only read downstream): the generator's cost per rank is a dict copy.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.live_streams import cpu_gain, loop_period, shifted
from traceml_agent.wire import unpacker

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "ddp_input_straggler.msgpack"
NS = 1_000_000_000
PID_BASE = 100_000               # simulated PID of global rank r: PID_BASE + r (below 2**22, as a real PID)
ONCE = {"hello", "target", "threads"}


@dataclass(frozen=True)
class Layout:
    """Which ranks run where: ``nodes`` x ``ranks_per_node``; ``slow`` replay the straggler."""

    nodes: int
    ranks_per_node: int
    slow: frozenset[int]

    @property
    def world(self) -> int:
        return self.nodes * self.ranks_per_node

    def ranks(self, node: int) -> range:
        return range(node * self.ranks_per_node, (node + 1) * self.ranks_per_node)


def node_name(node: int) -> str:
    return f"sim{node:02d}"


class Source:
    """The fixture, read once: its frames (the ``bye`` left out) with the time each is due, as
    offsets from the first; the loop period; and each rank's CPU counters' gain per loop."""

    def __init__(self, path: Path = FIXTURE) -> None:
        with path.open("rb") as f:
            frames = [fr for fr in unpacker(f) if isinstance(fr, dict) and fr["k"] != "bye"]
        ranks = {fr["rank"]: fr["pid"] for fr in frames if fr["k"] == "target"}
        self.window_s = float(next(fr["window_s"] for fr in frames if fr["k"] == "hello"))
        self.keeper, self.straggler = ranks[0], ranks[1]
        self.period_ns = loop_period(frames)
        self.windows = 1 + max(fr["w"] for fr in frames if fr["k"] in ("spans", "window"))
        self.cpu_gain = cpu_gain(frames)
        self.sampler_gain = cpu_gain(frames, "scpu")
        self.frames = _due(frames)
        # each rank's first CPU counter row, read at attach: a later copy goes on from the last
        self.baseline = {next(i for i, (_, fr) in enumerate(self.frames) if fr["k"] == "tcpu" and fr["pid"] == pid)
                         for pid in self.cpu_gain}
        self.origin_ns = self.frames[0][0]
        self.length_ns = self.frames[-1][0] - self.origin_ns


def _due(frames: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """Each frame with when an agent sends it: its own time (a py-spy window's spans at the
    window's end), never before the frame written before it."""
    ends = {(fr["pid"], fr["w"]): fr["end"] for fr in frames if fr["k"] == "window" and fr.get("end")}
    out: list[tuple[int, dict[str, Any]]] = []
    due = 0
    for fr in frames:
        kind = fr["k"]
        own = fr.get("t")
        if kind in ("spans", "window"):
            own = ends.get((fr["pid"], fr["w"]))
        elif kind == "tcpu" and fr["samples"]:
            own = fr["samples"][-1][0]
        due = max(due, own or 0)
        out.append((due, fr))
    return out


def _shifted(src: Source, fr: dict[str, Any], k: int, shift_ns: int) -> dict[str, Any]:
    """Frame ``fr`` of copy ``k``: its times moved by k periods and ``shift_ns`` (to the wall
    clock of now), its window ids by k loops, its CPU counters on by k loops' gain."""
    gain = {"tcpu": src.cpu_gain, "scpu": src.sampler_gain}.get(fr["k"], {})
    on, rq = gain.get(fr["pid"], (0, 0))
    out = shifted(fr, k * src.period_ns + shift_ns, (k * on, k * rq), k * src.windows)
    if fr["k"] == "spans":
        out["fdefs"], out["sdefs"] = [], []   # each node's stream defines them once (Nodes)
    return out


class Nodes:
    """The simulated nodes' frames, in the order they are due (see the module doc)."""

    def __init__(self, src: Source, layout: Layout, start_ns: int, nodes: Iterable[int] | None = None) -> None:
        self.src, self.layout, self.start_ns = src, layout, start_ns
        self.nodes = list(range(layout.nodes) if nodes is None else nodes)
        # code-frame and stack definitions not yet sent on each node: the next spans frame carries them
        self._defs: dict[int, tuple[list[Any], list[Any]]] = {n: ([], []) for n in self.nodes}

    def frames(self, seconds: float | None = None) -> Iterator[tuple[int, int, dict[str, Any]]]:
        """(due ns on the wall clock, node, frame) for ``seconds`` (default: forever)."""
        src = self.src
        shift = self.start_ns - src.origin_ns
        stop = None if seconds is None else self.start_ns + int(seconds * NS)
        last, k = 0, 0
        while True:
            for i, (offset, fr) in enumerate(src.frames):
                due = max(last, offset + k * src.period_ns + shift)
                if stop is not None and due > stop:
                    return
                last = due
                if k and (fr["k"] in ONCE or i in src.baseline):
                    continue
                base = _shifted(src, fr, k, shift)
                if fr["k"] == "spans" and (fr["fdefs"] or fr["sdefs"]):
                    for fdefs, sdefs in self._defs.values():
                        fdefs.extend(fr["fdefs"])
                        sdefs.extend(fr["sdefs"])
                for node in self.nodes:
                    for out in self._clones(base, fr, node):
                        yield due, node, out
            k += 1

    def _clones(self, base: dict[str, Any], fr: dict[str, Any], node: int) -> Iterator[dict[str, Any]]:
        kind = base["k"]
        if kind == "hello":
            yield dict(base, host=node_name(node), argv=["torchrun", f"--node-rank={node}", "train.py"])
            return
        if "pid" not in base:   # host readings: one per node
            yield base
            return
        layout = self.layout
        slow = fr["pid"] == self.src.straggler
        for rank in layout.ranks(node):
            if (rank in layout.slow) != slow:
                continue
            pid = PID_BASE + rank
            if kind == "target":
                yield dict(base, pid=pid, nspid=[pid], rank=rank, local_rank=rank - node * layout.ranks_per_node,
                           group_rank=node, world_size=layout.world)
            elif kind == "threads":
                yield dict(base, pid=pid, threads=[[t[0], pid if t[1] == fr["pid"] else t[1], *t[2:]]
                                                   for t in base["threads"]])
            elif kind == "tcpu":
                yield dict(base, pid=pid, tid=pid)
            elif kind == "spans" and any(self._defs[node]):
                fdefs, sdefs = self._defs[node]
                self._defs[node] = ([], [])
                yield dict(base, pid=pid, fdefs=fdefs, sdefs=sdefs)
            else:
                yield dict(base, pid=pid)
