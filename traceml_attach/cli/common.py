"""Options and argument types shared by the subcommands."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from traceml_agent.link import LinkError, endpoint
from traceml_attach.errors import EXIT_BAD_FILE, EXIT_USAGE, CliError
from traceml_attach.policy import RECORDING_MAX_MB
from traceml_attach.steps.classify import Rules, RulesError, load_rules


def add_rules_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rules", type=Path, metavar="FILE",
                        help="extra phase rules and [[loop]] rules for a framework's training loop (TOML, "
                        "same format as traceml_attach/steps/rules.toml); tried before the built-in ones")


def rules_from(args: argparse.Namespace) -> Rules:
    try:
        return load_rules(args.rules)
    except RulesError as exc:
        raise CliError(str(exc), EXIT_USAGE) from exc


def positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:   # (nan too)
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


# --max-rate's default: what py-spy's CPU per process costs at 100 Hz and at this rate, measured
# with bench/rate_cost.py (docs/steps.md, "A rate that fits the step")
DEFAULT_MAX_RATE = 400
PYSPY_CPU_PCT = {100: 3, DEFAULT_MAX_RATE: 6}


def add_rate_options(parser: argparse.ArgumentParser) -> None:
    """--rate and --max-rate: how fast each process is sampled, and how fast it may be by itself."""
    parser.add_argument("--rate", type=rate, default=100, metavar="HZ",
                        help="stack samples per second per process to start at, and the least it goes down to "
                        f"(default 100: py-spy then takes about {PYSPY_CPU_PCT[100]}%% of one core per process, the "
                        "attacher about 2%% more)")
    parser.add_argument("--max-rate", type=rate, default=DEFAULT_MAX_RATE, metavar="HZ",
                        help="where a rank's steps get under 10 samples at its rate (too short to tell apart, or to "
                        "time within 5%%), or under 20 where slow steps skew them, the attacher samples it faster from "
                        "its next py-spy windows, up to HZ, and "
                        "slower again once "
                        f"its steps are long enough (default {DEFAULT_MAX_RATE}: about "
                        f"{PYSPY_CPU_PCT[DEFAULT_MAX_RATE]}%% of one core per process for py-spy instead of "
                        f"{PYSPY_CPU_PCT[100]}%%). Each change is recorded; the TUI, the text and the summary say "
                        "the rate in use and why. --max-rate equal to --rate (or below it): a fixed rate. Ranks "
                        "that `traceml agent` streams from other nodes keep their agent's fixed --rate")


def rate(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError("must be between 1 and 1000 Hz")
    return value


def host_port(text: str) -> tuple[str, int]:
    """HOST:PORT, :PORT or PORT (HOST 127.0.0.1) for an option that listens."""
    try:
        return endpoint(text)
    except LinkError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_recording_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-recording-mb", type=recording_mb, default=RECORDING_MAX_MB, metavar="MB",
                        help=f"cap on the run folder's recorded frames (default {RECORDING_MAX_MB:.0f}); past it "
                        "frames.msgpack rotates: the first segment and the newest are kept, the oldest others "
                        "deleted (replay says what). 0: no cap")


def recording_mb(text: str) -> float:
    value = float(text)
    if not (value == 0 or 0.01 <= value < math.inf):
        raise argparse.ArgumentTypeError("must be at least 0.01 (MB), or 0 for no cap")
    return value


DEFAULT_TOKEN_FILE = "~/.traceml/token"


def add_listen_options(parser: argparse.ArgumentParser) -> None:
    """--listen, --expect-nodes and --token-file: collect the frames of ``traceml agent`` on other nodes."""
    group = parser.add_argument_group("multi-node (docs/multinode.md)")
    group.add_argument("--listen", metavar="HOST:PORT",
                       help="also collect the ranks of other nodes, streamed by `traceml agent --connect` there; "
                       "HOST defaults to 127.0.0.1 (give 0.0.0.0 or the interface's address for other machines)")
    group.add_argument("--expect-nodes", type=positive_int, metavar="N",
                       help="wait for N agents' nodes: --seconds/--duration count from when N have joined (at "
                       "most 120 s of waiting), and the session ends by itself only once N joined and every job ended")
    group.add_argument("--token-file", default=DEFAULT_TOKEN_FILE, metavar="FILE",
                       help=f"the session's key (default {DEFAULT_TOKEN_FILE}): created (mode 0600) when missing; "
                       "every agent needs a copy. Peers without it are refused")
    group.add_argument("--launch", metavar="CMD",
                       help="start the agents through this launcher, e.g. \"srun --overlap --jobid 123 "
                       "--ntasks-per-node=1\": runs CMD followed by `python -m traceml_attach agent --pid auto "
                       "--connect <this host>:PORT --token-file FILE --rate HZ` (the collector's Python, so the "
                       "same path on every node), its output in the run folder's launch.log, ended with the session")


def check_targets(args: argparse.Namespace, parser_prog: str) -> None:
    """Something to sample: --pid, or --listen for agents."""
    if not args.pid and not args.listen:
        command = parser_prog.split()[-1]   # printed after "traceml: ", which names the program already
        raise CliError(f"{command} needs --pid PID (the job or its launcher), or --listen HOST:PORT to collect the "
                       "ranks that `traceml agent` streams from other nodes", EXIT_USAGE)
    if args.expect_nodes and not args.listen:
        raise CliError("--expect-nodes needs --listen", EXIT_USAGE)
    if args.launch and not args.listen:
        raise CliError("--launch needs --listen (the address its agents connect to)", EXIT_USAGE)


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def frames_path(given: Path) -> Path:
    """The frames.msgpack a command was given, itself or in the run folder given; CliError (exit 7)
    when there is none."""
    path = given / "frames.msgpack" if given.is_dir() else given
    if not path.exists():
        raise CliError(f"{path} does not exist: give a frames.msgpack or its run folder", EXIT_BAD_FILE)
    return path
