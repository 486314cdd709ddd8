"""Helpers shared by the example training scripts (CLI, device, synthetic work)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset, default_collate

FOREVER = 10**9
IN_FEATURES = 512
CLASSES = 10
BATCH_SIZE = 256

# The clock synthetic work is sized and burnt in; setup() picks it. See burn_cpu().
_work_clock: Callable[[], float] = time.perf_counter


def parse_args(
    description: str | None, extra: Callable[[argparse.ArgumentParser], None] | None = None
) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=FOREVER,
                        help="training steps (default: forever)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto = cuda if available, else cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    if extra is not None:
        extra(parser)
    return parser.parse_args()


def setup(args: argparse.Namespace) -> torch.device:
    """Apply --threads, seed, and resolve --device."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    name = args.device
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda requested but CUDA is not available")
    global _work_clock
    # With one CPU thread doing all the compute, count work in that thread's CPU time:
    # competing processes then stretch compute and synthetic work alike and the shares
    # hold. With a GPU or intra-op threads only wall time is comparable.
    single = name == "cpu" and args.threads == 1
    _work_clock = time.thread_time if single else time.perf_counter
    return torch.device(name)


def device_sync(device: torch.device) -> Callable[[], None] | None:
    """What to call so that queued device work is finished (None on CPU)."""
    return torch.cuda.synchronize if device.type == "cuda" else None


def burn_cpu(seconds: float) -> None:
    """Busy-spin for ``seconds`` (on the work clock): a stand-in for real CPU work.

    Spinning (not sleeping) keeps the caller's frames on-CPU, so stack samplers
    see the named function that called it.
    """
    clock = _work_clock
    end = clock() + seconds
    while clock() < end:
        pass


def make_mlp(width: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(IN_FEATURES, width), nn.ReLU(),
        nn.Linear(width, width), nn.ReLU(),
        nn.Linear(width, width), nn.ReLU(),
        nn.Linear(width, CLASSES),
    )


def random_data(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(n, IN_FEATURES), torch.randint(0, CLASSES, (n,))


def decode_sample(raw: torch.Tensor, cost_s: float) -> torch.Tensor:
    """Pretend to decode and augment one sample: pure CPU work."""
    burn_cpu(cost_s)
    return raw.clone()


class EncodedSamples(Dataset):
    """In-memory samples that take ``decode_cost_s`` of CPU each to make (``decode_sample``)."""

    def __init__(self, n: int) -> None:
        self.raw, self.labels = random_data(n)
        self.decode_cost_s = 0.0

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return decode_sample(self.raw[i], self.decode_cost_s), self.labels[i]


def add_input_straggler_args(parser: argparse.ArgumentParser) -> None:
    """--straggler input, --slow-rank, --extra-ms: one rank's samples slower to make (torchrun)."""
    parser.add_argument("--straggler", choices=("none", "input"), default="none")
    parser.add_argument("--slow-rank", type=int, default=1)
    parser.add_argument("--extra-ms", type=float, default=48.0,
                        help="the slow rank's extra decode_sample CPU ms per step (default 48)")


def straggler_input_s(args: argparse.Namespace, rank: int) -> float:
    """The extra input seconds per step of this rank (add_input_straggler_args)."""
    return args.extra_ms / 1000 if args.straggler == "input" and rank == args.slow_rank else 0.0


def median_time(fn: Callable[[], object], repeats: int, device: torch.device) -> float:
    """Median wall time of ``fn()`` in seconds (device work included)."""
    sync = device_sync(device) or (lambda: None)
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


CALIBRATION_ENV = "TRACEML_CALIBRATION"


def pinned(key: str, measure: Callable[[], float]) -> float:
    """``measure()``, or with TRACEML_CALIBRATION=FILE the value a run before this one measured and
    wrote there under ``key``: a job and its fixed version (bench/whatif_bench.py) then do the same
    synthetic work, however busy the machine was when each started. Without the variable: measured."""
    path = os.environ.get(CALIBRATION_ENV)
    if not path:
        return measure()
    held = json.loads(Path(path).read_text()) if Path(path).exists() else {}
    if key not in held:
        held[key] = measure()
        Path(path).write_text(json.dumps(held))
    return float(held[key])


def calibrate(model: nn.Module, loss_fn: nn.Module, opt: torch.optim.Optimizer,
              device: torch.device, dataset: Dataset, warmup: int = 3,
              repeats: int = 9) -> tuple[float, float]:
    """Median seconds (work clock) to build one batch in-process and to train on it.

    Fetch and compute alternate as in the real loop, so caches are as cold as there.
    Call it before any synthetic work is switched on.
    """
    sync = device_sync(device) or (lambda: None)
    fetch_s, compute_s = [], []
    for i in range(warmup + repeats):
        idx = torch.randint(len(dataset), (BATCH_SIZE,)).tolist()
        t0 = _work_clock()
        x, y = default_collate([dataset[j] for j in idx])
        t1 = _work_clock()
        loss = loss_fn(model(x.to(device, non_blocking=True)), y.to(device, non_blocking=True))
        loss.backward()
        opt.step()
        opt.zero_grad()
        sync()
        if i >= warmup:
            fetch_s.append(t1 - t0)
            compute_s.append(_work_clock() - t1)
    return statistics.median(fetch_s), statistics.median(compute_s)


def plan_work(compute_s: float, input_share: float, wait_share: float,
              input_base_s: float = 0.0, wait_base_s: float = 0.0) -> tuple[float, float]:
    """Seconds of synthetic input and wait work per step that hit the target shares.

    Compute is whatever is left: step = compute_s / (1 - input_share - wait_share).
    The measured base cost already in each phase is subtracted.
    """
    step_s = compute_s / (1.0 - input_share - wait_share)
    return (max(0.0, input_share * step_s - input_base_s),
            max(0.0, wait_share * step_s - wait_base_s))


def announce_ready(**calibration_s: float) -> None:
    """Print the ``ready pid=`` line (stdout); calibration results go to stderr. The fault hooks
    (``fault_hooks``) start here, once the job trains."""
    fault_hooks()
    if calibration_s:
        parts = " ".join(f"{k}={v * 1e3:.1f}ms" for k, v in calibration_s.items())
        print(f"calibrated {parts}", file=sys.stderr, flush=True)
    print(f"ready pid={os.getpid()}", flush=True)


# -- fault hooks (docs/faults.md): opt-in by environment, so that a test can put a job in the
# state a fault needs without a script of its own. None of them changes the training loop.

SIGNAL_LOG_ENV = "TRACEML_SIGNAL_LOG"        # a file: every catchable signal the job receives, one per line
IDLE_THREADS_ENV = "TRACEML_IDLE_THREADS"    # N: start N threads that wait forever (a large thread pool)
EXEC_ENV = "TRACEML_EXEC_AFTER"              # "S PROGRAM ARG...": the job exec()s PROGRAM S seconds after ready
# what a job is sent by accident or by a tool; SIGKILL and SIGSTOP cannot be caught (a test sees their effect)
LOGGED_SIGNALS = ("SIGHUP", "SIGINT", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM", "SIGCONT",
                  "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGURG", "SIGXCPU", "SIGXFSZ", "SIGVTALRM", "SIGPROF",
                  "SIGWINCH", "SIGIO", "SIGTRAP")


def fault_hooks() -> None:
    log = os.environ.get(SIGNAL_LOG_ENV)
    if log:
        _log_signals(log)
    idle = int(os.environ.get(IDLE_THREADS_ENV) or 0)
    never = threading.Event()
    for i in range(idle):
        threading.Thread(target=never.wait, name=f"idle-{i}", daemon=True).start()
    plan = os.environ.get(EXEC_ENV)
    if plan:
        seconds, *argv = plan.split()

        def replace() -> None:
            time.sleep(float(seconds))
            sys.stdout.flush()
            os.execvp(argv[0], argv)

        threading.Thread(target=replace, name="exec", daemon=True).start()


def _log_signals(path: str) -> None:
    """Write each signal's name to ``path`` as it arrives, then let it do what it would have done."""
    def handle(signum: int, frame: object) -> None:
        with open(path, "a", encoding="ascii") as fh:
            fh.write(f"{signal.Signals(signum).name}\n")
        previous = defaults.get(signum)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL and signum not in (signal.SIGCONT, signal.SIGURG, signal.SIGWINCH):
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    defaults = {}
    for name in LOGGED_SIGNALS:
        signum = getattr(signal, name)
        defaults[signum] = signal.signal(signum, handle)
