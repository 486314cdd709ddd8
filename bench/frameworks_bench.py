"""Accuracy on real framework jobs: each one times itself with the framework's own callbacks or
hooks (examples/*.py, TRACEML_GROUND_TRUTH); a `traceml snapshot` of it is compared with that.

    python bench/frameworks_bench.py [--seconds 12] [--repeat 1] [--device cuda] [--extra="--width 16384"]
                                     [--keep DIR] [NAME ...]

Prints, per job: the loop and framework found, the diagnosis, micro-batches per step, optimizer
steps and the median step against the truth, and the worst phase-share error.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
from launch import PHASES, rank_truth, read_truth, start_example, start_torchrun, stop_example  # noqa: E402

# name -> (example, arguments, ranks)
JOBS = {
    "hf_trainer": ("hf_trainer", (), 1),
    "hf_trainer --grad-accum 4": ("hf_trainer", ("--grad-accum", "4"), 1),
    "hf_trainer --grad-accum 4, input 20%": ("hf_trainer", ("--grad-accum", "4", "--input-share", "0.2"), 1),
    "lightning (input-bound)": ("lightning_job", (), 1),
    "lightning --accumulate 4": ("lightning_job", ("--accumulate", "4"), 1),
    "accelerate": ("accelerate_job", (), 1),
    "deepspeed": ("deepspeed_job", (), 1),
    "plain --accum 4": ("grad_accum", ("--accum", "4"), 1),
    "plain --accum 4 --autocast": ("grad_accum", ("--accum", "4", "--autocast"), 1),
    "plain --compile": ("grad_accum", ("--accum", "1", "--compile"), 1),
    "closure": ("closure", (), 1),
    "lightning torchrun, input straggler r1": ("lightning_job", ("--straggler", "input", "--slow-rank", "1",
                                                                "--input-share", "0.1"), 2),
    "accelerate torchrun, input straggler r1": ("accelerate_job", ("--straggler", "input", "--slow-rank", "1"), 2),
    # the shapes of issue "Every step counted": one line holds nearly the whole step, accumulation
    # with a long optimizer and no DataLoader, a bursty loader, short synchronized steps
    "hf_trainer, compute 99%": ("hf_trainer", ("--input-share", "0.01"), 1),
    "lightning torchrun, compute": ("lightning_job", ("--input-share", "0.02"), 2),
    "stream --accum 4 --opt-repeat 4": ("grad_accum", ("--accum", "4", "--stream", "--opt-repeat", "4"), 1),
    "loader 2 workers": ("input_bound", ("--workers", "2"), 1),
    "module-level loop --accum 4": ("module_loop", ("--accum", "4"), 1),
    "ddp 27 ms, compute straggler r0": ("ddp", ("--straggler", "compute", "--slow-rank", "0", "--extra-ms", "8",
                                                "--width", "256"), 2),
}


def snapshot(pid: int, seconds: int, logs: Path) -> dict:
    subprocess.run([sys.executable, "-m", "traceml_attach", "snapshot", "--pid", str(pid), "--seconds", str(seconds),
                    "--quiet", "--logs-dir", str(logs), "--run-name", "bench"], cwd=ROOT, check=False,
                   capture_output=True, timeout=300)
    return json.loads((logs / "bench" / "final_summary.json").read_text())


def run(name: str, seconds: int, extra: tuple[str, ...] = (), keep: Path | None = None, nth: int = 1) -> list[str]:
    """One job's rows; with ``keep``, its frames, summary and truth stay in keep/<name>/<nth>
    (each repeat its own: a folder used again read the first run's summary back)."""
    example, args, ranks = JOBS[name]
    args = (*args, *extra)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        if keep is not None:
            out = keep / "".join(c if c.isalnum() else "_" for c in name) / str(nth)
            out.mkdir(parents=True, exist_ok=True)
        if ranks == 1:
            job = start_example(example, *args, truth=out / "gt_0.jsonl", ready_timeout_s=300)
        else:
            job = start_torchrun(ranks, *args, truth_dir=out, script=example)
        try:
            time.sleep(3)
            summary = snapshot(job.pid, seconds, out / "logs")
        finally:
            stop_example(job)
        window = summary["sampling"]["window"]
        diagnosis = summary["step_time"]["diagnosis"]
        rows = []
        for rank, row in summary["step_time"]["ranks"].items():
            since = row.get("since") or window["start"]   # where its rate changed, its steps are from there
            try:
                truth = (read_truth(out / "gt_0.jsonl", since, window["end"]) if ranks == 1
                         else rank_truth(out, int(rank), since, window["end"]))
            except ValueError as e:      # no step of the job's own ended inside the window
                rows.append(f"| {name} | r{rank} | {row['framework'] or 'plain loop'} | {diagnosis['kind']} | "
                            f"{row['micro_batches']} | {row['steps']} / ? | {row['step_ms']} / ? | {e} |")
                continue
            step = "unknown" if row["step_ms"] is None else f"{row['step_ms']:.1f}"
            err = "" if row["step_ms"] is None else f" ({100 * (row['step_ms'] / truth.judged(row) - 1):+.1f}%)"
            share = max(abs((row["shares"] or {}).get(p, 0.0) - truth.shares[p]) for p in PHASES)
            who = f" {diagnosis['worst_rank']}" if "STRAGGLER" in diagnosis["kind"] else ""
            rate = f" @{row['rate_hz']} Hz" if row.get("rate_hz") else ""
            rows.append(f"| {name}{rate} | r{rank} | {row['framework'] or 'plain loop'} | {diagnosis['kind']}{who} | "
                        f"{row['micro_batches']} | {row['steps']} / {truth.steps} | "
                        f"{step} / {truth.judged(row):.1f}{err} | {100 * share:.1f} pp |")
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help=f"jobs to run (default: all): {', '.join(JOBS).replace('%', '%%')}")
    parser.add_argument("--seconds", type=int, default=12, help="snapshot length (default 12)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--device", help="passed to each example as --device (cuda: the jobs on a GPU)")
    parser.add_argument("--extra", default="", help="more arguments for each example, one string")
    parser.add_argument("--keep", type=Path, help="keep each job's frames, summary and truth in this folder")
    args = parser.parse_args()
    extra = (*(("--device", args.device) if args.device else ()), *args.extra.split())
    print(f"snapshot {args.seconds} s from 100 Hz (the attacher raises it where steps are short); truth from each "
          "framework's own callbacks/hooks, over the stretch each rank's steps were found in")
    print("| job | rank | framework | diagnosis | micro-batches | steps (traceml / truth) | "
          "median step ms (traceml / truth) | worst share error |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.names or list(JOBS):
        for nth in range(1, args.repeat + 1):
            for row in run(name, args.seconds, extra, args.keep, nth):
                print(row, flush=True)


if __name__ == "__main__":
    main()
