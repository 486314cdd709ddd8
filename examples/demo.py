"""Demo: start an example training job, attach traceml to it from outside, show the diagnosis.

In a terminal the live TUI opens (q detaches early); elsewhere, or with --no-tui, the text
view is printed. Either way the summary is printed and written under ./logs at the end.

    python examples/demo.py [--example input_bound] [--seconds 30] [--no-tui]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch import start_example, stop_example

EXAMPLES = ("input_bound", "compute_bound", "wait_heavy", "balanced")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--example", choices=EXAMPLES, default="input_bound")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long to stay attached (default 30)")
    parser.add_argument("--no-tui", action="store_true", help="the text view instead of the TUI")
    args = parser.parse_args()
    print(f"demo: starting examples/{args.example}.py (calibrating for a few seconds)...", flush=True)
    job = start_example(args.example)
    try:
        print(f"demo: job is running as pid {job.pid}; attaching: traceml attach --pid {job.pid}\n", flush=True)
        return subprocess.call([sys.executable, "-m", "traceml_attach", "attach", "--pid", str(job.pid),
                                "--duration", str(args.seconds), *(["--no-tui"] if args.no_tui else [])])
    finally:
        stop_example(job)


if __name__ == "__main__":
    sys.exit(main())
