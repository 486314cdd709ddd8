"""Sample this node's ranks and stream them to a collector on another machine (no UI).

Run one agent per node of a multi-node job; the collector is `traceml attach` or `traceml
snapshot` with --listen. The agent samples what a single-node attach samples (py-spy windows,
CPU counters, psutil, NVML, restarts and exits) and sends it over ZeroMQ, encrypted and
authenticated with CURVE keys derived from --token-file. While the collector is unreachable it
keeps up to --buffer-mb of frames and sends them once it is back. It exits when the job on this
node ends, when the collector ends the session, or on Ctrl-C/SIGTERM; the job is never touched.
Launch recipes for Slurm, Kubernetes and ssh: docs/multinode.md.
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
from pathlib import Path

import psutil

from traceml_agent.discovery import RankProc, find_launchers
from traceml_agent.link import BUFFER_BYTES, AgentLink, Keys, LinkError, endpoint, read_token, token_warning
from traceml_agent.node import NodeAgent, Probed
from traceml_attach.cli.common import DEFAULT_TOKEN_FILE, positive_float, rate
from traceml_attach.errors import EXIT_NETWORK, EXIT_NO_PROCESS, EXIT_OK, EXIT_USAGE, CliError
from traceml_attach.runtime.session import stop_on_signals
from traceml_attach.runtime.targets import probe_ranks

SILENT_WARN_S = 10.0    # no answer from the collector this long: say so (once)
AUTO_NOTE_EVERY_S = 15.0


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", action="append", required=True, metavar="PID|auto",
                        help="the job's launcher (torchrun) or a rank's PID; repeat for several. `auto`: find "
                        "the launchers on this node (the parents of processes with RANK set), waiting for one "
                        "to start: for srun and DaemonSets, where the PID is not known in advance")
    parser.add_argument("--connect", required=True, metavar="HOST:PORT",
                        help="the collector (`traceml attach --listen HOST:PORT`)")
    parser.add_argument("--token-file", default=DEFAULT_TOKEN_FILE, metavar="FILE",
                        help=f"the collector's token file, copied to this node (default {DEFAULT_TOKEN_FILE})")
    parser.add_argument("--rate", type=rate, default=100, metavar="HZ",
                        help="stack samples per second per process (default 100; use the collector's). Fixed: an "
                        "agent does not raise it for short steps as `attach` and `snapshot` do on their own node "
                        "(--max-rate); give the rate the steps need (10 samples a step)")
    parser.add_argument("--node-name", metavar="NAME", help="how the collector names this node (default: host name)")
    parser.add_argument("--buffer-mb", type=positive_float, default=BUFFER_BYTES / 1e6, metavar="MB",
                        help=f"frames kept while the collector is unreachable (default {BUFFER_BYTES / 1e6:.0f}; "
                        "a rank sends about 2-3 KB/s at 100 Hz); past it the oldest are dropped, and the "
                        "collector says so")
    parser.add_argument("--wait", type=positive_float, metavar="S",
                        help="with --pid auto, give up after S seconds without a launcher (default: wait)")


def _pids(args: argparse.Namespace, stop: threading.Event) -> list[int]:
    """The PIDs to sample: as given, or the launchers found on this node (``auto``)."""
    if args.pid != ["auto"]:
        try:
            return [int(p) for p in args.pid]
        except ValueError as exc:
            raise CliError("--pid takes PIDs, or `auto` alone", EXIT_USAGE) from exc
    started = time.monotonic()
    next_note = started
    while not stop.is_set():
        found = find_launchers()
        if len(found) > 1:
            raise CliError(f"--pid auto: several launchers on this node ({'; '.join(map(_described, found))}): "
                           "give the job's with --pid", EXIT_USAGE)
        if found:
            return found
        now = time.monotonic()
        if args.wait is not None and now - started >= args.wait:
            raise CliError(f"--pid auto: no launcher (a process whose children have RANK set) appeared on this "
                           f"node in {args.wait:.0f} s", EXIT_NO_PROCESS)
        if now >= next_note:
            next_note = now + AUTO_NOTE_EVERY_S
            print(f"traceml agent: waiting for a torchrun job on this node ({now - started:.0f} s)", file=sys.stderr,
                  flush=True)
        stop.wait(1.0)
    raise CliError("interrupted before a launcher appeared", EXIT_OK)


def _described(pid: int) -> str:
    """``PID (its command line)``, for a user choosing among launchers."""
    try:
        cmd = " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return str(pid)
    return f"{pid} ({cmd[:80]}{'...' if len(cmd) > 80 else ''})"


def run(args: argparse.Namespace) -> int:
    token_file = Path(args.token_file).expanduser()
    try:
        host, port = endpoint(args.connect, default_host="")
        if not host:
            raise LinkError(f"--connect needs the collector's host: HOST:{port}")
        keys = Keys.from_token(read_token(token_file))
    except LinkError as exc:
        raise CliError(str(exc), EXIT_NETWORK) from exc
    if (warning := token_warning(token_file)) is not None:
        print(f"traceml agent: {warning}", file=sys.stderr)
    stop = threading.Event()
    with stop_on_signals(stop):
        node, probed = probe_ranks(_pids(args, stop), args.rate,
                                   lambda line: print(f"traceml agent: {line}", file=sys.stderr))
        name = args.node_name or socket.gethostname()
        link = AgentLink(host, port, keys, name, int(args.buffer_mb * 1e6))
        node.writer.listen(link.put)
        return _stream(node, probed, link, stop, f"{host}:{port}")


def _ranks_text(ranks: list[RankProc]) -> str:
    return ", ".join(str(r.rank) for r in sorted(ranks, key=lambda r: (r.rank is None, r.rank or 0))
                     if r.rank is not None) or "no RANK"


def _stream(node: NodeAgent, probed: list[Probed], link: AgentLink, stop: threading.Event, where: str) -> int:
    print(f"traceml agent: sampling {len(probed)} process(es) (ranks {_ranks_text([r for r, _, _ in probed])}) "
          f"and streaming to {where} as node {link.node!r}", file=sys.stderr, flush=True)
    sending = threading.Event()
    sender = threading.Thread(target=link.run, args=(sending,), name="traceml-link", daemon=True)
    sender.start()
    node.start(probed, stop)
    started, warned, answered, reason = time.monotonic(), False, False, "stopped"
    said = {rank.pid for rank, _, _ in probed}
    try:
        while not stop.is_set():
            if link.ended_by is not None:
                reason = "collector_ended"
                break
            if not node.active():
                reason = "sampling_failed" if node.sampling_failed() else "target_exited"
                break
            if not answered and link.collector_seen.is_set():
                answered = True   # what a user (and a test) waits for before counting on this node
                print(f"traceml agent: the collector at {where} answered: node {link.node!r} has joined",
                      file=sys.stderr, flush=True)
            if not warned and not link.collector_seen.is_set() and time.monotonic() - started > SILENT_WARN_S:
                warned = True
                print(f"traceml agent: no answer from {where} yet (is the collector listening there, with the "
                      "same token file?); buffering", file=sys.stderr, flush=True)
            node.tick(stop)
            if said != set(node.running):   # workers that started after the launcher was found, or restarted
                said = set(node.running)
                live = [r.rank for r in node.running.values() if r.thread.is_alive()]
                print(f"traceml agent: now sampling {len(live)} process(es) (ranks {_ranks_text(live)})",
                      file=sys.stderr, flush=True)
            stop.wait(0.1)
    finally:
        stop.set()
        node.join()
        sending.set()
        sender.join()
        delivered = link.ended_by is not None or link.finish(reason)
        link.close()
    stats = link.stats
    what = {"collector_ended": f"the collector ended the session ({link.ended_by})",
            "target_exited": "the job on this node ended", "sampling_failed": "sampling failed"}.get(reason, "stopped")
    print(f"traceml agent: {what}; sent {stats.sent_messages} messages ({stats.sent_bytes / 1e6:.1f} MB)"
          + ("" if delivered else f"; {where} did not acknowledge the last of them"), file=sys.stderr)
    if not delivered and reason != "collector_ended":
        return EXIT_NETWORK
    return EXIT_OK
