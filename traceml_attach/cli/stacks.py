"""Print the current Python stack of every rank, grouped by identical stacks, with each rank's phase.

One non-blocking `py-spy dump` per rank: use it on a hung job to see who is where. Give the
launcher's PID (torchrun, accelerate, deepspeed) for every rank, or one or more rank PIDs.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from traceml_agent import source
from traceml_agent.pyspy import PySpyError, find_pyspy, process_exe
from traceml_agent.threads import ThreadDump, ThreadNames, dump
from traceml_attach.cli.common import add_rules_option, rules_from
from traceml_attach.errors import KIND_TO_EXIT, CliError
from traceml_attach.ingest.model import CodeFrame
from traceml_attach.runtime.targets import plan_targets
from traceml_attach.steps.classify import Rules, classify
from traceml_attach.steps.loopframe import is_background


def prepare_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pid", type=int, required=True, action="append",
                        help="the launcher's PID (every rank), or a rank's PID; repeat for several")
    parser.add_argument("--all-threads", action="store_true",
                        help="show every thread, not only each rank's training thread")
    add_rules_option(parser)


def _training_thread(threads: list[ThreadDump]) -> list[ThreadDump]:
    """The thread most likely to run the training loop: the main thread, else the deepest."""
    useful = [t for t in threads if t.frames and not is_background((f[0] for f in t.frames), t.name)]
    main = [t for t in useful if t.name == "MainThread"]
    return main[:1] or sorted(useful, key=lambda t: -len(t.frames))[:1]


def _frames(pid: int, thread: ThreadDump) -> tuple[CodeFrame, ...]:
    return tuple(CodeFrame(name, path, line, *source.describe(pid, path, line))
                 for name, path, line in thread.frames)


def run(args: argparse.Namespace) -> int:
    rules: Rules = rules_from(args)
    plan = plan_targets(args.pid)
    try:
        binary = find_pyspy()
    except PySpyError as exc:
        raise CliError(str(exc), KIND_TO_EXIT[exc.kind]) from exc
    groups: dict[tuple[CodeFrame, ...], list[str]] = defaultdict(list)
    phases: dict[str, str] = {}
    problems = []
    for index, rank in enumerate(plan.ranks):
        name = str(rank.rank) if rank.rank is not None else str(index)
        try:
            threads = ThreadNames(rank.pid, process_exe(rank.pid))(dump(binary, rank.pid))
        except PySpyError as exc:
            if len(plan.ranks) == 1:
                raise CliError(str(exc), KIND_TO_EXIT.get(exc.kind, 6)) from exc
            problems.append(f"rank {name} (pid {rank.pid}): {exc}")
            continue
        for thread in threads if args.all_threads else _training_thread(threads):
            stack = _frames(rank.pid, thread)
            label = name if not args.all_threads else f"{name}/{thread.name or thread.tid}"
            groups[stack].append(label)
            verdict = classify(stack, rules, None)
            phases[label] = verdict.phase if verdict.phase != "wait" else f"wait/{verdict.label}"
    if plan.note:
        print(f"# {plan.note}")
    for stack, labels in sorted(groups.items(), key=lambda kv: (len(kv[1]), kv[1])):
        who = ", ".join(f"{label} [{phases[label]}]" for label in labels)
        print(f"rank{'s' if len(labels) > 1 else ''} {who}: {len(labels)} of {sum(map(len, groups.values()))}")
        for frame in reversed(stack):
            code = f"    {frame.src}" if frame.src else ""
            print(f"    {frame.where}{code}")
        print()
    for line in problems:
        print(f"# could not read {line}")
    return 0
