"""What a faster sampling rate costs and what it buys, on real jobs.

CPU (the default): for each example job and each rate, the agent's own sampler (agent/node.py:
overlapping py-spy recording windows, a `py-spy dump` every 5 s, the psutil and CPU-counter polls)
samples the job for --seconds; py-spy's CPU is what its processes used (they are this process's
children), the attacher's is this process's own (reading py-spy's windows and making frames).
1 core = 100%.

--ddp: the 27 ms torchrun job of issue 23 (examples/ddp.py, 2 gloo ranks, rank 0 a compute
straggler) alternates --baseline s unattached with a --seconds s `traceml snapshot` at each
--max-rate given (100: the fixed default rate), --cycles times: each rank's step time and count
against the job's own ground truth from where its steps were found (``since``), and the job's
median step attached against unattached.

Prints Markdown tables (the ones in docs/steps.md, "A rate that fits the step").

    python bench/rate_cost.py [--seconds 12] [--rates 100 200 300 400 500] [examples...]
    python bench/rate_cost.py --ddp [--max-rates 100 300 400] [--cycles 3] [--seconds 10] [--baseline 8]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))
import psutil  # noqa: E402

from launch import rank_truth, start_example, start_torchrun, stop_example  # noqa: E402
from traceml_agent import discovery  # noqa: E402
from traceml_agent.node import NodeAgent  # noqa: E402
from traceml_agent.sampler import SamplerConfig  # noqa: E402
from traceml_agent.writer import FrameWriter  # noqa: E402

# name: (example, its arguments, what it is)
JOBS = {
    "short_steps": ("input_bound", ("--input-share", "0.9", "--width", "64"), "≈ 21 ms steps, input ≈ 90%"),
    "compute_bound": ("compute_bound", (), "≈ 125 ms steps, deep torch stacks"),
}


def _cpu_s(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def sample(pid: int, rate: int, seconds: float) -> tuple[float, float, int]:
    """Sample ``pid`` at ``rate`` for ``seconds``: py-spy's and the attacher's CPU (% of a core), and
    the stack samples py-spy took."""
    frames: list[dict] = []
    writer = FrameWriter(None)
    writer.listen(lambda f: frames.append(f) if f.get("k") == "window" else None)
    node = NodeAgent(discovery.plan([pid]), SamplerConfig(rate_hz=rate), writer, [])
    probed = node.probe()
    stop = threading.Event()
    children0, self0, wall0 = _cpu_s(resource.RUSAGE_CHILDREN), _cpu_s(resource.RUSAGE_SELF), time.monotonic()
    node.start(probed, stop)
    while time.monotonic() - wall0 < seconds:
        node.tick(stop)
        time.sleep(0.1)
    stop.set()
    node.join()
    wall = time.monotonic() - wall0
    children, own = _cpu_s(resource.RUSAGE_CHILDREN) - children0, _cpu_s(resource.RUSAGE_SELF) - self0
    return 100 * children / wall, 100 * own / wall, sum(f.get("samples") or 0 for f in frames)


DDP_ARGS = ("--straggler", "compute", "--slow-rank", "0", "--width", "64", "--extra-ms", "20", "--base-input-ms", "1")


def _steps_ms(truth: Path, spans: list[tuple[float, float]]) -> list[float]:
    rows = [json.loads(line) for line in truth.read_text().splitlines() if line.endswith("}")]
    return [1000 * (r["end"] - r["start"]) for r in rows if any(a <= r["start"] and r["end"] <= b for a, b in spans)]


def _cpu_children() -> float:
    return _cpu_s(resource.RUSAGE_CHILDREN)


def ddp(max_rates: list[int], cycles: int, seconds: float, baseline: float) -> None:
    """The --ddp table (module doc)."""
    with tempfile.TemporaryDirectory(prefix="rate-ddp-") as tmp:
        _ddp(max_rates, cycles, seconds, baseline, Path(tmp))


def _ddp(max_rates: list[int], cycles: int, seconds: float, baseline: float, work: Path) -> None:
    job = start_torchrun(2, *DDP_ARGS, truth_dir=work)
    off: list[tuple[float, float]] = []
    on: dict[int, list[tuple[float, float]]] = {m: [] for m in max_rates}
    rows: dict[int, list[str]] = {m: [] for m in max_rates}
    cpu: dict[int, list[float]] = {m: [] for m in max_rates}
    try:
        time.sleep(2)
        for cycle in range(cycles):
            for top in max_rates:
                t0 = time.time()
                time.sleep(baseline)
                off.append((t0, time.time()))
                name = f"ddp-{top}-{cycle}"
                cpu0, wall0 = _cpu_children(), time.monotonic()
                out = subprocess.run([sys.executable, "-m", "traceml_attach", "snapshot", "--pid", str(job.pid),
                                      "--seconds", str(seconds), "--max-rate", str(top), "--quiet", "--logs-dir",
                                      str(work / "logs"), "--run-name", name],
                                     capture_output=True, text=True, check=False, cwd=ROOT)
                cpu[top].append(100 * (_cpu_children() - cpu0) / (time.monotonic() - wall0))
                if out.returncode != 0:
                    raise RuntimeError(f"snapshot failed: {out.stderr.strip()}")
                doc = json.loads((work / "logs" / name / "final_summary.json").read_text())
                window = doc["sampling"]["window"]
                on[top].append((window["start"], window["end"]))
                for rank in ("0", "1"):
                    r = doc["step_time"]["ranks"][rank]
                    truth = rank_truth(work, int(rank), r["since"] or window["start"], window["end"])
                    step = "unknown" if r["step_ms"] is None else f"{100 * (r['step_ms'] / truth.judged(r) - 1):+.1f}%"
                    rows[top].append(f"{step} ({r['steps']}/{truth.steps} steps, {r['rate_hz']} Hz)")
                print(f"  {name}: {'; '.join(rows[top][-2:])}", file=sys.stderr, flush=True)
    finally:
        for child in psutil.Process(job.pid).children(recursive=True):
            child.terminate()
        stop_example(job)
    unattached = statistics.median(ms for r in (0, 1) for ms in _steps_ms(work / f"gt_{r}.jsonl", off))
    print(f"examples/ddp.py {' '.join(DDP_ARGS)}: 2 ranks; {cycles} x ({baseline:.0f} s unattached, "
          f"{seconds:.0f} s snapshot) per --max-rate; unattached median step {unattached:.1f} ms\n")
    print("| --max-rate | step time vs truth (rank 0; rank 1), per snapshot | median step attached | slowdown "
          "| attacher CPU (1 core = 100%) |")
    print("|---|---|---|---|---|")
    for top in max_rates:
        attached = statistics.median(ms for r in (0, 1) for ms in _steps_ms(work / f"gt_{r}.jsonl", on[top]))
        pairs = "; ".join(" / ".join(rows[top][i:i + 2]) for i in range(0, len(rows[top]), 2))
        print(f"| {top} | {pairs} | {attached:.1f} ms | {100 * (attached - unattached) / unattached:+.1f}% | "
              f"{statistics.median(cpu[top]):.0f}% |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--rates", type=int, nargs="+", default=[100, 200, 300, 400, 500])
    parser.add_argument("--ddp", action="store_true", help="the 27 ms torchrun job at each --max-rate")
    parser.add_argument("--max-rates", type=int, nargs="+", default=[100, 300, 400])
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--baseline", type=float, default=8.0)
    parser.add_argument("jobs", nargs="*", default=list(JOBS))
    args = parser.parse_args()
    if args.ddp:
        ddp(args.max_rates, args.cycles, args.seconds, args.baseline)
        return
    print(f"{args.seconds:.0f} s of sampling per rate and job; CPU in % of one core\n")
    print("| job | rate | py-spy CPU | attacher CPU | total | samples / s |")
    print("|---|---|---|---|---|---|")
    for name in args.jobs:
        script, job_args, _ = JOBS[name]
        job = start_example(script, *job_args)
        try:
            time.sleep(2)
            for rate in args.rates:
                spy, own, samples = sample(job.pid, rate, args.seconds)
                print(f"| {name} | {rate} Hz | {spy:.1f}% | {own:.1f}% | {spy + own:.1f}% | "
                      f"{samples / args.seconds:.0f} |", flush=True)
        finally:
            stop_example(job)
    for name in args.jobs:
        print(f"\n{name}: examples/{JOBS[name][0]}.py {' '.join(JOBS[name][1])} ({JOBS[name][2]})")


if __name__ == "__main__":
    main()
