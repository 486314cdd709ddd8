"""`traceml`: attach to a PyTorch training job from outside and tell why it is slow."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

from traceml_attach import __version__
from traceml_attach.cli import agent, attach, compare, export, replay, snapshot, stacks, view
from traceml_attach.errors import EXIT_INTERNAL, CliError

COMMANDS = {
    "attach": (attach, "attach to a live job and diagnose it until you stop (Ctrl-C)"),
    "snapshot": (snapshot, "sample a live job for N seconds, print and write the summary"),
    "stacks": (stacks, "print every rank's current stack, grouped, with its phase (for hangs)"),
    "view": (view, "print a saved final_summary.json as text, or write the run as an HTML report (--html)"),
    "replay": (replay, "re-diagnose a recorded frames.msgpack"),
    "export": (export, "write a recording as a trace for ui.perfetto.dev (--perfetto OUT.json)"),
    "compare": (compare, "what changed between two runs' summaries, beyond the noise (a CI gate)"),
    "agent": (agent, "sample this node's ranks for a collector on another node (attach/snapshot --listen)"),
}

EPILOG = """\
exit codes: 0 ok; 2 usage; 3 no such process; 4 not Python / unsupported Python;
5 not permitted (ptrace); 6 py-spy missing or failing; 7 missing or corrupt file;
8 target exited before the requested duration (summary still written); 9 multi-node: cannot
listen or connect, or a bad token file; --prometheus: the port is taken; compare
--fail-on-regression: the step rose beyond the noise; 10 the run folder could not be written
(a full disk, a read-only folder): the summary went elsewhere or was only printed; 70 internal error.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="traceml",
        description="Attach to a running PyTorch training process with py-spy, without pausing "
        "or changing it, and diagnose where its step time goes.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"traceml-attach {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=module.__doc__, epilog=EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.prepare_parser(p)
        p.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except CliError as exc:
        print(f"traceml: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("traceml: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the one place a bug becomes one line instead of a traceback
        print(f"traceml: internal error: {type(exc).__name__}: {exc} "
              "(please report it; set TRACEML_DEBUG=1 for the traceback)", file=sys.stderr)
        if _debug():
            traceback.print_exc()
        return EXIT_INTERNAL


def _debug() -> bool:
    import os

    return os.environ.get("TRACEML_DEBUG") == "1"


def entry() -> None:
    sys.exit(main())
