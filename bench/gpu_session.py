"""One prepared run on a machine with an NVIDIA GPU: the GPU tests, the CUDA jobs' errors and
slowdown, the time to the first diagnosis, and the frame streams to keep as fixtures.

    python bench/gpu_session.py --out DIR [--quick]

Writes into DIR as it goes (each part has its own time limit, so one that hangs loses nothing
of the others):

  env.txt          nvidia-smi, torch and its CUDA, py-spy
  pytest.log       tests/test_gpu.py, run with --basetemp so that what each test saw is kept
  bench.md         bench/attach_bench.py --device cuda: the diagnosis, the step-time and share
                   errors against each job's own (host-side) timing, the slowdown, the attacher's CPU
  first.txt        seconds from `traceml attach` to its first diagnosis line, input_bound on the GPU,
                   with `nvidia-smi`'s reading of the job beside the summary's
  frameworks.md    bench/frameworks_bench.py --device cuda on the plain loop with accumulation,
                   bf16 autocast and torch.compile, its MLP widened (``--width``) to ~17 ms micro-batches
  streams.tar.gz   each test's frames.msgpack, final_summary.json and the job's truth (*.jsonl)
  frameworks.tar.gz  the same for the frameworks bench's jobs

tests/fixtures/cuda_*.msgpack are made from streams.tar.gz (tests/test_gpu_recorded.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples"), str(ROOT / "bench")]
from first_look_bench import first_lines  # noqa: E402

from launch import start_example, stop_example  # noqa: E402


def run(cmd: list[str], log: Path, timeout_s: float) -> None:
    """Run ``cmd`` with its output to ``log``; a timeout is written there, never raised."""
    t0 = time.monotonic()
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        try:
            rc: int | str = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, timeout=timeout_s,
                                check=False).returncode
        except subprocess.TimeoutExpired:
            rc = "timed out"
        except OSError as e:
            rc = f"not run: {e}"
        f.write(f"[rc {rc} after {time.monotonic() - t0:.0f} s]\n\n")
    print(f"gpu_session: {cmd[-1] if len(cmd) < 4 else ' '.join(cmd[:4])} ... rc {rc}", flush=True)


def environment(out: Path) -> None:
    log = out / "env.txt"
    run(smi(), log, 30)
    run([sys.executable, "-c", "import torch; print(torch.__version__, torch.version.cuda, "
         "torch.cuda.get_device_name())"], log, 60)
    run(["py-spy", "--version"], log, 10)


def smi(*args: str) -> list[str]:
    return ["nvidia-smi", *args] if shutil.which("nvidia-smi") else ["true"]


def first_diagnosis(out: Path, runs: int, device: str) -> None:
    """Seconds from starting `traceml attach --no-tui` to its first live line with a verdict."""
    lines = []
    env = dict(os.environ, TRACEML_GROUND_TRUTH_SYNC="0")
    for i in range(runs):
        job = start_example("input_bound", "--device", device, env=env)
        util_log = subprocess.Popen(smi("--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader", "-l", "1"),
                                    stdout=subprocess.PIPE, text=True)
        with tempfile.TemporaryDirectory() as tmp:
            seen = [f"{t:6.2f} s  {line}" for t, line in first_lines(job.pid, Path(tmp))]
            apps = subprocess.run(smi("--query-compute-apps=pid,used_memory", "--format=csv"),
                                  capture_output=True, text=True, check=False).stdout
            util_log.terminate()
            util = util_log.communicate(timeout=10)[0]
            summary_file = Path(tmp) / "first" / "final_summary.json"
            summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
        stop_example(job)
        gpu = {k: summary.get(k) for k in ("process", "system")}
        lines += [f"## run {i + 1} (job pid {job.pid})", *seen, "nvidia-smi compute apps:", apps,
                  "nvidia-smi utilization.gpu, memory.used each second:", util,
                  "summary's process and system:", json.dumps(gpu, indent=1), ""]
        (out / "first.txt").write_text("\n".join(lines))
    print("gpu_session: first diagnosis done", flush=True)


def streams(basetemp: Path, archive: Path) -> None:
    keep = (".msgpack", ".json", ".jsonl", ".txt")
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(basetemp.rglob("*")):
            if path.is_file() and path.suffix in keep and path.stat().st_size < 20_000_000:
                tar.add(path, arcname=str(path.relative_to(basetemp)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true", help="one bench cycle and one first-diagnosis run")
    ap.add_argument("--device", default="cuda", help="the examples' --device (cpu: try this script without a GPU)")
    ap.add_argument("--width", type=int, default=16384,
                    help="the frameworks bench's MLP width (16384: ~17 ms fp32 micro-batches on an H100)")
    args = ap.parse_args()
    out = args.out
    os.environ["TRACEML_GROUND_TRUTH_SYNC"] = "0"   # the jobs' truth is the host thread's time (tests/test_gpu.py)
    out.mkdir(parents=True, exist_ok=True)
    basetemp = Path(tempfile.mkdtemp(prefix="traceml-gpu-"))
    environment(out)
    run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", "--basetemp", str(basetemp),
         "tests/test_gpu.py"], out / "pytest.log", 240)
    streams(basetemp, out / "streams.tar.gz")
    cycles = "1" if args.quick else "2"
    run([sys.executable, "bench/attach_bench.py", "--device", args.device, "--cycles", cycles, "--baseline", "6",
         "--seconds", "8", "input_bound", "compute_bound", "wait_heavy"], out / "bench.md", 150)
    first_diagnosis(out, 1 if args.quick else 3, args.device)
    jobs = Path(tempfile.mkdtemp(prefix="traceml-gpu-frameworks-"))
    run([sys.executable, "bench/frameworks_bench.py", "--device", args.device, f"--extra=--width {args.width}",
         "--keep", str(jobs), "plain --accum 4", "plain --accum 4 --autocast", "plain --compile"],
        out / "frameworks.md", 200)
    streams(jobs, out / "frameworks.tar.gz")


if __name__ == "__main__":
    main()
