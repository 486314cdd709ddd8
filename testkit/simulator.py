"""What py-spy would record of a known schedule: a sampling simulator for the step estimator.

A job is a schedule of phases per step (durations with jitter) on one or more ranks. Ranks
of a synchronized job meet in backward's all-reduce every step: the fast ones wait there
for the slowest, so they share one step period. py-spy samples each rank as a Poisson
process (py-spy draws exponential gaps to avoid aliasing) at ``rate_hz`` from a random
phase; a sample can fail (``error_rate``) and the sampler can stall (``stall_rate``
stalls per second of ``stall_ms`` each: py-spy descheduled on a busy machine, which its own
CPU counters show as time waiting for a core, as the agent's ``scpu`` frames do). Like
py-spy's chrometrace output, only stack *changes* are kept: a span runs from one change
to the next, so the samples in between, and the ones that were never taken, are invisible.

The result is a Recording, the same object the attacher builds from its frame stream,
with each rank's true step boundaries and phase times beside it.

Beyond the three loop shapes whose phases each sit on their own line of the loop frame (``SHAPES``:
for / while_next / nested), ``NEW_SHAPES`` put nearly the whole step under ONE line of the loop frame:

* ``wrapper``: ``for batch in loader:`` then ``loss = training_step(model, batch)``, a user function
  one frame deeper that moves the batch, runs forward and backward and (``Job.optimizer_inside``)
  steps the optimizer, else ``opt.step()`` is the loop's own next line (HF Trainer's shape in user
  code). ``Job.fetch = "step"`` fetches inside ``training_step`` instead (``x, y = next(it)``): then
  the loop frame never leaves that one line.
* ``library``: the loop frame is a framework's, in site-packages (``Job.library``): Lightning's
  ``_TrainingEpochLoop.advance`` (fetch, batch_to_device, then the whole step under
  ``self.automatic_optimization.run(...)``, forward and backward in a closure inside the optimizer's
  step) or HF Trainer's ``_run_epoch`` (transformers 5.x: ``get_batch_samples``, then
  ``self.training_step(...)`` per micro-batch, then ``self.optimizer.step()``; "hf4": the same
  lines in 4.x's ``_inner_training_loop``).

``Job.accumulation`` = k runs k micro-batches (RankWork's input, h2d, forward and backward times
are per micro-batch) per optimizer step (RankWork.optimizer_ms, once); a synchronized job
all-reduces in the last micro-batch's backward only (DDP's no_sync). The truth's steps are then
optimizer steps; ``Truth.micro_bounds_ns`` has the micro-batches. ``Job.workers`` = w > 1 makes
the DataLoader's delivery bursty: w workers finish their batches together, so one batch in w
waits w times the mean input time and the others are ready (``READY_MS``).
"""

from __future__ import annotations

import itertools
import random
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from testkit.stacks import BACKWARD, FETCH, FORWARD, H2D, MAIN, MODULE, OPTIM, SP, f, torch_frame
from traceml_attach.ingest.model import CodeFrame, Span, TargetMeta, ThreadInfo
from traceml_attach.ingest.stream import Recording

LOOP_ORDER = ("input", "h2d", "forward", "backward", "optimizer")
SHAPES = ("for", "while_next", "nested")
NEW_SHAPES = ("wrapper", "library")      # nearly the whole step under one line of the loop frame
ALL_SHAPES = SHAPES + NEW_SHAPES
LIBRARIES = ("lightning", "hf", "hf4")
FETCHES = ("loop", "step")
DRIFTS = ("ramp", "shift")
CONTENDED_EVERY_MS = 850.0   # contention: a burst of other work this often (a 1.7-s window's start and end)
CONTENDED_MS = 80.0          # ...this long
UNEVEN_LO, UNEVEN_HI = 1.3, 2.2   # uneven: a slowed step's input runs this many times as long
READY_MS = 0.3     # bursty delivery: a batch a worker has ready is handed over in this long (at most)
MS = 1_000_000
# (start, end, stack key, blocked, the share of its time on a CPU where not blocked)
Piece = tuple[int, int, str, bool, float]


@dataclass(frozen=True)
class RankWork:
    """One rank's work per step, in ms, before any waiting for the other ranks."""

    input_ms: float
    h2d_ms: float
    forward_ms: float
    backward_ms: float
    optimizer_ms: float
    input_blocked: bool = True   # DataLoader workers make the batch: the loop waits, off CPU

    def of(self, phase: str) -> float:
        return float(getattr(self, f"{phase}_ms"))


@dataclass(frozen=True)
class Job:
    ranks: tuple[RankWork, ...]
    jitter: float = 0.05          # relative std of each phase's duration, every step
    shape: str = "for"            # the training loop's shape: for / while_next / nested / wrapper / library
    sub_stacks: int = 1           # distinct stacks a phase walks through (module calls)
    accumulation: int = 1         # micro-batches per optimizer step (RankWork's times are per micro-batch
    #                               but the optimizer's, per optimizer step)
    optimizer_inside: bool = True  # wrapper: opt.step() inside training_step, else the loop's own next line
    fetch: str = "loop"           # wrapper: batches fetched by the loop's `for` (an optimizer step's at once) or "step"
    library: str = "lightning"    # library: whose loop frame: lightning / hf (transformers 5.x) / hf4
    workers: int = 0              # > 1: bursty DataLoader delivery, one batch in `workers` waits for all
    # > 1: the job shares its cores with bursts of other work (a sampler's recorder starting, the
    # last one writing its file): every CONTENDED_EVERY_MS for CONTENDED_MS, and a step that
    # overlaps a burst runs longer, every phase, on every rank (``_contention``)
    contended: float = 0.0
    # > 0: this share of the steps, at random, fetch their batch UNEVEN_LO to UNEVEN_HI times as
    # long (a job that reads its batches in Python on two cores a sampler shares: one step in four
    # at 1.3-2x, its input alone; ``_uneven``)
    uneven: float = 0.0
    # > 1: the job's speed changes over the stretch simulated (the window sampled and the second or
    # so before and after it), every phase of every rank, as when
    # another process takes part of its cores and lets go (``_drift``): "ramp" runs ``drift`` times
    # slower at the start and at its own speed at the end, "shift" ``drift`` times slower before a
    # random moment (or, by a draw, after it). A loaded 10-s snapshot of examples/grad_accum.py
    # (tests/fixtures/truth_grad_accum_drifting) sped up from ~1.3-s to ~0.56-s steps
    drift: float = 0.0
    drift_kind: str = "ramp"

    def __post_init__(self) -> None:
        if self.shape not in ALL_SHAPES:
            raise ValueError(f"shape {self.shape!r}: one of {ALL_SHAPES}")
        if self.library not in LIBRARIES or self.fetch not in FETCHES:
            raise ValueError(f"library {self.library!r} / fetch {self.fetch!r}: one of {LIBRARIES} / {FETCHES}")
        if self.accumulation < 1 or self.workers < 0:
            raise ValueError("accumulation >= 1, workers >= 0")
        if self.drift_kind not in DRIFTS:
            raise ValueError(f"drift_kind {self.drift_kind!r}: one of {DRIFTS}")

    @property
    def legacy(self) -> bool:
        """One micro-batch a step and even delivery: scheduled exactly as before these options."""
        return self.accumulation == 1 and self.workers <= 1

    @property
    def fetches_once(self) -> bool:
        """An optimizer step's micro-batches are fetched together, before the first of them."""
        if self.shape == "wrapper":
            return self.fetch == "loop"
        return self.shape == "library" and self.library != "lightning"


@dataclass
class Truth:
    bounds_ns: list[int] = field(default_factory=list)   # each (optimizer) step's start, and the last end
    phases_ns: list[dict[str, int]] = field(default_factory=list)
    micro_batches: int = 1                                 # per step
    micro_bounds_ns: list[int] = field(default_factory=list)   # each micro-batch's start, and the last end
    optimizer_ns: list[int] = field(default_factory=list)      # each optimizer phase's start (none if 0 ms)

    def mean_step_ms(self, start_ns: int, end_ns: int) -> float:
        """The steps' mean: the time per step (with bursty input, not the median step)."""
        return statistics.fmean(self.durations_ns(start_ns, end_ns)) / MS

    def durations_ns(self, start_ns: int, end_ns: int) -> list[int]:
        """The steps that lie wholly inside [start_ns, end_ns)."""
        return [b - a for a, b in itertools.pairwise(self.bounds_ns) if a >= start_ns and b <= end_ns]

    def median_step_ms(self, start_ns: int, end_ns: int) -> float:
        return statistics.median(self.durations_ns(start_ns, end_ns)) / MS

    def steps_in(self, start_ns: int, end_ns: int) -> int:
        return len(self.durations_ns(start_ns, end_ns))

    def shares(self, start_ns: int, end_ns: int) -> dict[str, float]:
        steps = [p for a, b, p in zip(self.bounds_ns, self.bounds_ns[1:], self.phases_ns, strict=False)
                 if a >= start_ns and b <= end_ns]
        total = sum(sum(p.values()) for p in steps) or 1
        phases = ("input", "h2d", "forward", "backward", "optimizer", "wait")
        return {ph: sum(p.get(ph, 0) for p in steps) / total for ph in phases}


def _loop_frame(shape: str, line: int, src: str) -> tuple[CodeFrame, ...]:
    if shape == "nested":
        # the loop is in train(); each step's work is in train_step(), called from it
        if line == FETCH[0]:
            return (f("train", line=19, src="for batch in loader:"),)
        return (f("train", line=20, src="train_step(batch)"), f("train_step", line=line + 30, src=src))
    if shape == "while_next" and line == FETCH[0]:
        return (f("train", line=line, src="x, y = next(it)"),)
    return (f("train", line=line, src=src),)


def _stacks(shape: str, sub_stacks: int) -> dict[str, list[tuple[CodeFrame, ...]]]:
    """Each phase's stacks as py-spy sees them (outermost first)."""
    out: dict[str, list[tuple[CodeFrame, ...]]] = {}
    for phase, (line, src, below) in zip(LOOP_ORDER, (FETCH, H2D, FORWARD, BACKWARD, OPTIM), strict=False):
        base = (MODULE, MAIN, *_loop_frame(shape, line, src), *below)
        out[phase] = _variants(phase, base, sub_stacks)
    # a rank waiting for the others in backward's all-reduce: still inside backward
    line, src, below = BACKWARD
    out["sync"] = [(MODULE, MAIN, *_loop_frame(shape, line, src), *below,
                    torch_frame("_DDPSink.backward", "torch/nn/parallel/distributed.py"))]
    return out


DDP_SINK = torch_frame("_DDPSink.backward", "torch/nn/parallel/distributed.py")
MICRO = ("input", "h2d", "forward", "backward")
ACC = ":acc"   # a stack key's suffix: a micro-batch that does not step the optimizer


def lib(name: str, rel: str, line: int, src: str | None = None) -> CodeFrame:
    """A frame of a package in site-packages."""
    return CodeFrame(name, SP + rel, line, src, None)


def _wrapper_stacks(job: Job) -> dict[str, tuple[CodeFrame, ...]]:
    """The loop calls one user function for the whole step (HF Trainer's shape, in user code)."""
    k, in_step = job.accumulation, job.fetch == "step"
    top = (MODULE, MAIN)
    call = f("train", line=20, src=f"loss = training_step(model, {'it' if in_step else 'batch'})")

    def ts(line: int, src: str) -> CodeFrame:
        return f("training_step", line=line, src=src)

    out: dict[str, tuple[CodeFrame, ...]] = {}
    if in_step:
        out["input"] = (*top, call, ts(41, "for x, y in itertools.islice(it, accum):" if k > 1 else "x, y = next(it)"),
                        *FETCH[2])
    else:   # the loop fetches an optimizer step's batch; training_step splits it into micro-batches
        out["input"] = (*top, f("train", line=19, src="for batch in loader:"), *FETCH[2])
    out["h2d"] = (*top, call, ts(42, "x, y = x.to(device), y.to(device)"))
    out["forward"] = (*top, call, ts(43, FORWARD[1]), *FORWARD[2])
    out["backward"] = (*top, call, ts(44, "(loss / accum).backward()" if k > 1 else "loss.backward()"), *BACKWARD[2])
    if job.optimizer_inside:
        out["optimizer"] = (*top, call, ts(46, "opt.step()"), *OPTIM[2])
    else:
        out["optimizer"] = (*top, f("train", line=21, src="opt.step()"), *OPTIM[2])
    out["sync"] = (*out["backward"], DDP_SINK)
    return out


LP = "lightning/pytorch/"
LIGHTNING_TOP = (
    MODULE, f("main", line=90, src="trainer.fit(model, datamodule=dm)"),
    lib("Trainer.fit", LP + "trainer/trainer.py", 538, "call._call_and_handle_interrupt("),
    lib("_call_and_handle_interrupt", LP + "trainer/call.py", 47, "return trainer_fn(*args, **kwargs)"),
    lib("Trainer._fit_impl", LP + "trainer/trainer.py", 574, "self._run(model, ckpt_path=ckpt_path)"),
    lib("Trainer._run", LP + "trainer/trainer.py", 981, "results = self._run_stage()"),
    lib("Trainer._run_stage", LP + "trainer/trainer.py", 1025, "self.fit_loop.run()"),
    lib("_FitLoop.run", LP + "loops/fit_loop.py", 205, "self.advance()"),
    lib("_FitLoop.advance", LP + "loops/fit_loop.py", 363, "self.epoch_loop.run(self._data_fetcher)"),
    lib("_TrainingEpochLoop.run", LP + "loops/training_epoch_loop.py", 140, "self.advance(data_fetcher)"),
)
AUTO = LP + "loops/optimization/automatic.py"
CALL = LP + "trainer/call.py"


def _lightning_stacks() -> dict[str, tuple[CodeFrame, ...]]:
    """Lightning 2.x: the loop frame is the epoch loop's ``advance``, one call per batch; the whole
    step is under its ``automatic_optimization.run`` line: forward and backward in a closure that
    the optimizer's step calls (a micro-batch that does not step calls the closure itself)."""

    def advance(line: int, src: str) -> CodeFrame:
        return lib("_TrainingEpochLoop.advance", LP + "loops/training_epoch_loop.py", line, src)

    run = advance(250, "batch_output = self.automatic_optimization.run(trainer.optimizers[0], batch_idx, kwargs)")
    stepping = (
        lib("_AutomaticOptimization.run", AUTO, 192, "self._optimizer_step(batch_idx, closure)"),
        lib("_AutomaticOptimization._optimizer_step", AUTO, 270, "call._call_lightning_module_hook("),
        lib("_call_lightning_module_hook", CALL, 167, "output = fn(*args, **kwargs)"),
        lib("LightningModule.optimizer_step", LP + "core/module.py", 1306, "optimizer.step(closure=optimizer_closure)"),
        lib("LightningOptimizer.step", LP + "core/optimizer.py", 153,
            "step_output = self._strategy.optimizer_step(self._optimizer, closure, **kwargs)"),
        lib("Strategy.optimizer_step", LP + "strategies/strategy.py", 238,
            "return self.precision_plugin.optimizer_step(optimizer, model=model, closure=closure, **kwargs)"),
        lib("Precision.optimizer_step", LP + "plugins/precision/precision.py", 122,
            "return optimizer.step(closure=closure, **kwargs)"),
        torch_frame("Optimizer.profile_hook_step.<locals>.wrapper", "torch/optim/optimizer.py", 487),
    )
    in_step = (*stepping, torch_frame("SGD.step", "torch/optim/sgd.py", 80),
               lib("Precision._wrap_closure", LP + "plugins/precision/precision.py", 108, "closure_result = closure()"))
    accumulating = (lib("_AutomaticOptimization.run", AUTO, 186, "closure()"),)
    closure = (lib("Closure.__call__", AUTO, 146, "self._result = self.closure(*args, **kwargs)"),)
    forward = (
        lib("Closure.closure", AUTO, 129, "step_output = self._step_fn()"),
        lib("_AutomaticOptimization._training_step", AUTO, 319,
            'training_step_output = call._call_strategy_hook(trainer, "training_step", *kwargs.values())'),
        lib("_call_strategy_hook", CALL, 319, "output = fn(*args, **kwargs)"),
        lib("Strategy.training_step", LP + "strategies/strategy.py", 390,
            "return self.lightning_module.training_step(*args, **kwargs)"),
        f("Model.training_step", line=30, src="loss = F.mse_loss(self.net(x), y)"),
        *FORWARD[2],
    )
    backward = (
        lib("Closure.closure", AUTO, 140, "self._backward_fn(step_output.closure_loss)"),
        lib("_AutomaticOptimization._make_backward_fn.<locals>.backward_fn", AUTO, 220,
            'call._call_strategy_hook(self.trainer, "backward", loss, optimizer)'),
        lib("_call_strategy_hook", CALL, 319, "output = fn(*args, **kwargs)"),
        lib("Strategy.backward", LP + "strategies/strategy.py", 212,
            "self.precision_plugin.backward(closure_loss, self.lightning_module, optimizer, *args, **kwargs)"),
        lib("Precision.backward", LP + "plugins/precision/precision.py", 73, "model.backward(tensor, *args, **kwargs)"),
        lib("LightningModule.backward", LP + "core/module.py", 1101, "loss.backward(*args, **kwargs)"),
        *BACKWARD[2],
    )
    top = LIGHTNING_TOP
    out = {
        "input": (*top, advance(220, "batch, _, __ = next(data_fetcher)"),
                  lib("_PrefetchDataFetcher.__next__", LP + "loops/fetchers.py", 133, "batch = super().__next__()"),
                  lib("_DataFetcher.__next__", LP + "loops/fetchers.py", 61, "batch = next(self.iterator)"),
                  lib("_CombinedLoaderIterator.__next__", LP + "utilities/combined_loader.py", 341,
                      "out = next(self._iterator)"),
                  *FETCH[2]),
        "h2d": (*top, advance(236, 'batch = call._call_strategy_hook(trainer, "batch_to_device", batch)'),
                lib("_call_strategy_hook", CALL, 319, "output = fn(*args, **kwargs)"),
                lib("Strategy.batch_to_device", LP + "strategies/strategy.py", 275,
                    "return model._apply_batch_transfer_handler(batch, device=device, dataloader_idx=dataloader_idx)"),
                lib("move_data_to_device", "lightning_fabric/utilities/apply_func.py", 103,
                    "return apply_to_collection(batch, dtype=_TransferableDataType, function=batch_to)"),
                lib("batch_to", "lightning_fabric/utilities/apply_func.py", 99,
                    "data_output = data.to(device, **kwargs)")),
        "forward": (*top, run, *in_step, *closure, *forward),
        "backward": (*top, run, *in_step, *closure, *backward),
        "forward" + ACC: (*top, run, *accumulating, *closure, *forward),
        "backward" + ACC: (*top, run, *accumulating, *closure, *backward),
        "optimizer": (*top, run, *stepping, torch_frame("SGD.step", "torch/optim/sgd.py", 125),
                      torch_frame("_single_tensor_sgd", "torch/optim/sgd.py", 350)),
    }
    out["sync"] = (*out["backward"], DDP_SINK)
    return out


HF = "transformers/trainer.py"


def _hf_stacks(version: str) -> dict[str, tuple[CodeFrame, ...]]:
    """HF Trainer: ``get_batch_samples`` fetches an optimizer step's micro-batches, then one
    ``training_step`` line per micro-batch (inputs to the device, forward, backward), then the
    optimizer's line. transformers 5.x loops in ``_run_epoch``, 4.x in ``_inner_training_loop``."""
    main = f("main", line=90, src="trainer.train()")
    if version == "hf":
        top = (MODULE, main, lib("Trainer.train", HF, 1480, "return inner_training_loop("),
               lib("Trainer._inner_training_loop", HF, 1700, "self._run_epoch("))
        name = "Trainer._run_epoch"
    else:
        top = (MODULE, main, lib("Trainer.train", HF, 2245, "return inner_training_loop("))
        name = "Trainer._inner_training_loop"

    def loop(line: int, src: str) -> CodeFrame:
        return lib(name, HF, line, src)

    step = loop(1907, "tr_loss_step = self.training_step(model, inputs, num_items_in_batch)")
    out = {
        "input": (*top, loop(1873, "batch_samples, num_items_in_batch = self.get_batch_samples("),
                  lib("Trainer.get_batch_samples", HF, 2291, "batch_samples.append(next(epoch_iterator))"),
                  lib("DataLoaderShard.__iter__", "accelerate/data_loader.py", 577,
                      "next_batch = next(dataloader_iter)"),
                  *FETCH[2]),
        "h2d": (*top, step, lib("Trainer.training_step", HF, 2075, "inputs = self._prepare_inputs(inputs)"),
                lib("Trainer._prepare_inputs", HF, 2020, "inputs = self._prepare_input(inputs)"),
                lib("Trainer._prepare_input", HF, 2001, "return {k: self._prepare_input(v) for k, v in data.items()}"),
                lib("Trainer._prepare_input", HF, 2010, "return data.to(**kwargs)")),
        "forward": (*top, step, lib("Trainer.training_step", HF, 2080, "loss = self.compute_loss(model, inputs)"),
                    lib("Trainer.compute_loss", HF, 2150, "outputs = model(**inputs)"), *FORWARD[2],
                    lib("GPT2LMHeadModel.forward", "transformers/models/gpt2/modeling_gpt2.py", 900)),
        "backward": (*top, step, lib("Trainer.training_step", HF, 2100, "self.accelerator.backward(loss, **kwargs)"),
                     lib("Accelerator.backward", "accelerate/accelerator.py", 2700, "loss.backward(**kwargs)"),
                     *BACKWARD[2]),
        "optimizer": (*top, loop(1935, "self.optimizer.step()"),
                      lib("AcceleratedOptimizer.step", "accelerate/optimizer.py", 170,
                          "self.optimizer.step(closure)"), *OPTIM[2]),
    }
    out["sync"] = (*out["backward"], DDP_SINK)
    return out


def _variants(key: str, stack: tuple[CodeFrame, ...], n: int) -> list[tuple[CodeFrame, ...]]:
    """``n`` stacks of a phase, each a different call below it (a module, an autograd function)."""
    phase = key.split(":")[0]
    if n == 1 or phase == "h2d":     # the line that copies is the innermost frame
        return [stack]
    below = {"input": ("default_collate", "torch/utils/data/_utils/collate.py"),
             "forward": ("op", "torch/nn/functional.py"), "backward": ("op", "torch/nn/functional.py"),
             "sync": ("op", "torch/nn/functional.py"), "optimizer": ("_single_tensor_adam", "torch/optim/adam.py")}
    name, rel = below[phase]
    return [stack + ((torch_frame(f"{name}{k}", rel, 100 + k),) if k else ()) for k in range(n)]


def _job_stacks(job: Job) -> dict[str, list[tuple[CodeFrame, ...]]]:
    """Each stack key's stacks as py-spy sees them: the phases, "sync" (waiting in backward's
    all-reduce) and, with accumulation, the phases of a micro-batch that does not step (ACC)."""
    if job.shape in SHAPES:
        out = _stacks(job.shape, job.sub_stacks)
    else:
        if job.shape == "wrapper":
            bare = _wrapper_stacks(job)
        elif job.library == "lightning":
            bare = _lightning_stacks()
        else:
            bare = _hf_stacks(job.library)
        out = {key: _variants(key, stack, job.sub_stacks) for key, stack in bare.items()}
    for phase in MICRO:
        out.setdefault(phase + ACC, out[phase])
    return out


def _contention(job: Job, rng: random.Random, t0_ns: int) -> Callable[[int], float]:
    """How much longer each phase of a step that starts at a time runs (``Job.contended``): a step
    that overlaps a burst of other work is stretched by 0.5 to ``contended`` - 1 times the part of
    the burst it overlaps (the burst's CPU taken from it: a 25-ms step up to 3 times, a 320-ms
    one by 1.1-1.5). 1.0 for every step without contention (and no draw from ``rng``, so such a
    job's schedule is as before)."""
    if job.contended <= 1.0:
        return lambda t: 1.0
    every, width = int(CONTENDED_EVERY_MS * MS), int(CONTENDED_MS * MS)
    k = job.accumulation
    step_ms = max(sum(w.of(p) for p in MICRO) * k + w.optimizer_ms for w in job.ranks)
    step = int(step_ms * MS)
    offset = int(rng.uniform(0, CONTENDED_EVERY_MS) * MS)
    draws = random.Random(rng.random())

    def factor(t: int) -> float:
        at = (t - t0_ns - offset) % every
        if not (at < width or at > every - step):
            return 1.0
        return 1.0 + draws.uniform(0.5, 1.0) * (job.contended - 1.0) * min(CONTENDED_MS, step_ms) / step_ms

    return factor


def _drift(job: Job, rng: random.Random, start_ns: int, end_ns: int) -> Callable[[int], float]:
    """How much slower every phase of a step that starts at a time runs (``Job.drift``): from
    ``drift`` times at ``start_ns`` to 1 at ``end_ns`` ("ramp"), or ``drift`` times on one side of a
    moment drawn in the middle 80% of the stretch and 1 on the other ("shift"). 1.0 without drift
    (and no draw from ``rng``, so such a job's schedule is as before)."""
    if job.drift <= 1.0:
        return lambda t: 1.0
    span = max(end_ns - start_ns, 1)
    if job.drift_kind == "ramp":
        return lambda t: job.drift - (job.drift - 1.0) * min(max((t - start_ns) / span, 0.0), 1.0)
    draws = random.Random(rng.random())
    at = start_ns + int(draws.uniform(0.1, 0.9) * span)
    before, after = (job.drift, 1.0) if draws.random() < 0.5 else (1.0, job.drift)
    return lambda t: before if t < at else after


def _uneven(job: Job, rng: random.Random) -> Callable[[], float]:
    """How much longer the next step's input runs (``Job.uneven``): UNEVEN_LO to UNEVEN_HI times
    for that share of the steps, else 1.0 (and no draw from ``rng``, so such a job's schedule is
    as before)."""
    if job.uneven <= 0.0:
        return lambda: 1.0
    draws = random.Random(rng.random())
    return lambda: draws.uniform(UNEVEN_LO, UNEVEN_HI) if draws.random() < job.uneven else 1.0


def _schedule_micro(job: Job, seconds: float, rng: random.Random, t0_ns: int
                    ) -> tuple[list[list[Piece]], list[Truth]]:
    """``_schedule`` with k micro-batches per optimizer step and bursty delivery: per rank,
    [(start, end, stack key, blocked)] pieces covering [t0, t0 + seconds); and the truth."""
    n, k, w = len(job.ranks), job.accumulation, job.workers
    pieces: list[list[Piece]] = [[] for _ in range(n)]
    truths = [Truth(micro_batches=k) for _ in range(n)]
    t = t0_ns
    end = t0_ns + int(seconds * 1e9)

    slow, uneven = _contention(job, rng, t0_ns), _uneven(job, rng)
    drifted = _drift(job, rng, t0_ns, end)
    factor = stretch = 1.0

    def draw(ms: float) -> int:
        return max(int(rng.gauss(ms, job.jitter * ms) * factor * MS), 0) if ms > 0 else 0

    # each rank's DataLoader is at its own point of its workers' cycle
    turn = [rng.randrange(w) if w > 1 else 0 for _ in range(n)]

    def fetch(r: int) -> int:
        ms = job.ranks[r].input_ms * stretch
        if w <= 1:
            return draw(ms)
        turn[r] = (turn[r] + 1) % w
        ready = min(READY_MS, ms / 10)
        return draw(w * ms - (w - 1) * ready) if turn[r] == 0 else draw(ready)

    while t < end:
        factor, stretch = slow(t) * drifted(t), uneven()
        on = 1.0 / factor   # a stretched step waited for a core through the rest
        # per rank, k micro-batches: [{phase: ns}]
        work = [[{p: fetch(r) if p == "input" else draw(rw.of(p)) for p in MICRO} for _ in range(k)]
                for r, rw in enumerate(job.ranks)]
        reach = [sum(sum(m.values()) for m in micro) for micro in work]
        sync_at = max(reach)
        opt = draw(job.ranks[0].optimizer_ms)    # the same update on every rank: they leave together
        for r in range(n):
            truth, blocked = truths[r], job.ranks[r].input_blocked
            truth.bounds_ns.append(t)
            at = t
            if job.fetches_once:
                fetched = sum(m["input"] for m in work[r])
                if fetched:
                    pieces[r].append((at, at + fetched, "input", blocked, on))
                    at += fetched
            for i, micro in enumerate(work[r]):
                truth.micro_bounds_ns.append(t if i == 0 else at)
                suffix = "" if i == k - 1 else ACC
                for phase in MICRO:
                    if micro[phase] and not (phase == "input" and job.fetches_once):
                        pieces[r].append((at, at + micro[phase], phase + suffix, phase == "input" and blocked, on))
                        at += micro[phase]
            wait = sync_at - reach[r]
            if wait and n > 1:
                pieces[r].append((at, at + wait, "sync", True, on))
                at += wait
            if opt:
                truth.optimizer_ns.append(at)
                pieces[r].append((at, at + opt, "optimizer", False, on))
            phases = {p: sum(m[p] for m in work[r]) for p in MICRO}
            phases["backward"] += wait if n > 1 else 0
            phases["optimizer"] = opt
            truth.phases_ns.append(phases)
        t += sync_at + opt
    for truth in truths:
        truth.bounds_ns.append(t)
        truth.micro_bounds_ns.append(t)
    return pieces, truths


def _plan(job: Job, seconds: float, rng: random.Random, t0_ns: int
          ) -> tuple[list[list[Piece]], list[Truth]]:
    if not job.legacy:
        return _schedule_micro(job, seconds, rng, t0_ns)
    pieces, truths = _schedule(job, seconds, rng, t0_ns)
    for r, truth in enumerate(truths):
        truth.micro_bounds_ns = list(truth.bounds_ns)
        truth.optimizer_ns = [start for start, _, key, _, _ in pieces[r] if key == "optimizer"]
    return pieces, truths


def _schedule(job: Job, seconds: float, rng: random.Random, t0_ns: int
              ) -> tuple[list[list[Piece]], list[Truth]]:
    """Per rank: [(start, end, phase, blocked)] pieces covering [t0, t0 + seconds); and the truth."""
    n = len(job.ranks)
    pieces: list[list[Piece]] = [[] for _ in range(n)]
    truths = [Truth() for _ in range(n)]
    t = t0_ns
    end = t0_ns + int(seconds * 1e9)

    slow, uneven = _contention(job, rng, t0_ns), _uneven(job, rng)
    drifted = _drift(job, rng, t0_ns, end)
    factor = 1.0

    def draw(ms: float) -> int:
        return max(int(rng.gauss(ms, job.jitter * ms) * factor * MS), 0) if ms > 0 else 0

    while t < end:
        factor, stretch = slow(t) * drifted(t), uneven()
        on = 1.0 / factor   # a stretched step waited for a core through the rest
        work = [{p: draw(w.of(p) * (stretch if p == "input" else 1.0)) for p in LOOP_ORDER} for w in job.ranks]
        # every rank reaches the all-reduce after its input, forward and backward work
        reach = [w["input"] + w["h2d"] + w["forward"] + w["backward"] for w in work]
        sync_at = max(reach)
        opt = work[0]["optimizer"]    # the same update on every rank: they leave together
        for r in range(n):
            truths[r].bounds_ns.append(t)
            at = t
            for phase in ("input", "h2d", "forward", "backward"):
                if work[r][phase]:
                    blocked = phase == "input" and job.ranks[r].input_blocked
                    pieces[r].append((at, at + work[r][phase], phase, blocked, on))
                    at += work[r][phase]
            wait = sync_at - reach[r]
            if wait and n > 1:
                pieces[r].append((at, at + wait, "sync", True, on))
                at += wait
            if opt:
                pieces[r].append((at, at + opt, "optimizer", False, on))
            phases = {p: work[r][p] for p in LOOP_ORDER}
            phases["backward"] += wait if n > 1 else 0
            phases["optimizer"] = opt
            truths[r].phases_ns.append(phases)
        t += sync_at + opt
    for truth in truths:
        truth.bounds_ns.append(t)
    return pieces, truths


def _sample_times(rng: random.Random, rate_hz: float, t0: int, t1: int, error_rate: float,
                  stall_rate: float, stall_ms: float, stalls: list[tuple[int, int]] | None = None) -> list[int]:
    """Poisson sample times; each stall (start, end) also goes to ``stalls``."""
    out: list[int] = []
    t = t0 + int(rng.expovariate(rate_hz) * 1e9)
    while t < t1:
        if stall_rate and rng.random() < stall_rate / rate_hz:
            if stalls is not None:
                stalls.append((t, t + int(stall_ms * MS)))
            t += int(stall_ms * MS)   # py-spy got no CPU: no sample for a while
        if rng.random() >= error_rate:
            out.append(t)
        t += int(rng.expovariate(rate_hz) * 1e9)
    return out


def _spans(pid: int, pieces: list[Piece], stacks: dict[str, list[tuple[CodeFrame, ...]]],
           times: list[int], end_ns: int) -> list[Span]:
    spans: list[Span] = []
    i = 0
    current: tuple[CodeFrame, ...] | None = None
    since = 0
    for ts in times:
        while i < len(pieces) and pieces[i][1] <= ts:
            i += 1
        if i == len(pieces):
            break
        start, stop, phase, _, _ = pieces[i]
        options = stacks[phase]
        stack = options[min(int((ts - start) * len(options) / max(stop - start, 1)), len(options) - 1)]
        if stack != current:
            if current is not None:
                spans.append(Span(pid, 1, since, ts - since, current))
            current, since = stack, ts
    if current is not None:
        spans.append(Span(pid, 1, since, max(end_ns - since, 1), current))
    return spans


def _cpu_rows(pieces: list[Piece], t0: int, t1: int, every_ns: int = 20 * MS
              ) -> list[tuple[int, int, int]]:
    """The training thread's cumulative (on-CPU, run-queue) ns every 20 ms, as the agent reads it:
    a piece of a step that other work on the cores stretched (``Job.contended``) is on a CPU for
    its unstretched time and waits for one through the rest."""
    rows, busy, queued, i = [], 0.0, 0.0, 0
    last = t0
    for ts in range(t0, t1, every_ns):
        while i < len(pieces) and pieces[i][0] < ts:
            start, stop, _, blocked, on = pieces[i]
            lo, hi = max(start, last), min(stop, ts)
            if hi > lo and not blocked:
                busy += (hi - lo) * on
                queued += (hi - lo) * (1.0 - on)
            if stop <= ts:
                i += 1
            else:
                break
        last = ts
        rows.append((ts, int(busy), int(queued)))
    return rows


SAMPLER_BUSY = 0.05   # the share of a core the simulated recorder is on while it samples


def _sampler_rows(stalls: list[tuple[int, int]], t0: int, t1: int, every_ns: int = 20 * MS
                  ) -> list[tuple[int, int, int]]:
    """The recorder's cumulative (on-CPU, run-queue) ns every 20 ms, as the agent reads it
    (``scpu``): a stall is time it waited for a core, sampling nothing."""
    rows, queued, last = [], 0, t0
    for ts in range(t0, t1, every_ns):
        queued += sum(max(0, min(b, ts) - max(a, last)) for a, b in stalls)
        last = ts
        rows.append((ts, int(SAMPLER_BUSY * (ts - t0 - queued)), queued))
    return rows


def simulate(job: Job, rate_hz: float, seconds: float = 10.0, seed: int = 0, error_rate: float = 0.0,
             stall_rate: float = 0.0, stall_ms: float = 0.0, stalls_queued: bool = True
             ) -> tuple[Recording, list[Truth]]:
    """A Recording of ``seconds`` of ``job`` sampled at ``rate_hz``, and each rank's truth.
    ``stalls_queued=False``: the recorder's counters show no wait through its stalls (as if it
    sampled on and the job's stack held: what the analysis must then take for the job's own)."""
    rng = random.Random(seed)
    t0 = 1_000_000_000_000
    # the job has been running for a while when sampling starts, at a random phase of its step
    lead_ns = int(rng.uniform(0.5, 1.5) * 1e9)
    pieces, truths = _plan(job, seconds + lead_ns / 1e9 + 1.0, rng, t0 - lead_ns)
    stacks = _job_stacks(job)
    rec = Recording()
    rec.hello = {"k": "hello", "rate_hz": rate_hz}
    end = t0 + int(seconds * 1e9)
    n = len(job.ranks)
    for r in range(n):
        pid = 1000 + r
        rec.targets[pid] = TargetMeta(pid, None, ("train.py",), r if n > 1 else None, r if n > 1 else None,
                                      n if n > 1 else None, t0)
        rec.threads[pid] = {1: ThreadInfo(1, pid, "MainThread", True)}
        stalls: list[tuple[int, int]] = []
        times = _sample_times(rng, rate_hz, t0, end, error_rate, stall_rate, stall_ms, stalls)
        rec.spans[pid] = _spans(pid, pieces[r], stacks, times, end)
        rec.cpu[pid] = _cpu_rows(pieces[r], t0, end + 20 * MS)
        rec.sampler_cpu[pid] = _sampler_rows(stalls if stalls_queued else [], t0, end + 20 * MS)
    first = min(s[0].ts_ns for s in rec.spans.values() if s)
    last = max(s[-1].end_ns for s in rec.spans.values() if s)
    rec._range = (first, last)
    return rec, truths


def job(period_ms: float, dominant: str, share: float, ranks: int = 1, rng: random.Random | None = None,
        **kwargs: object) -> Job:
    """A job whose ``dominant`` phase (input, forward, backward, or "wait" for the fast ranks of
    a synchronized job) takes ``share`` of a ``period_ms`` step; the rest is spread over the
    other phases at random (seeded by ``rng``)."""
    rng = rng or random.Random(0)
    rest = (1 - share) * period_ms
    if dominant == "wait":
        # ranks - 1 fast ranks wait `share` of the step in backward for one slow rank, whose
        # extra forward work is that wait
        weights = [rng.uniform(0.2, 1.0) for _ in LOOP_ORDER]
        base = {p: rest * w / sum(weights) for p, w in zip(LOOP_ORDER, weights, strict=False)}
        fast = RankWork(**{f"{p}_ms": base[p] for p in LOOP_ORDER})
        slow = RankWork(**{f"{p}_ms": base[p] + (share * period_ms if p == "forward" else 0.0) for p in LOOP_ORDER})
        return Job((slow, *[fast] * (ranks - 1)), **kwargs)  # type: ignore[arg-type]
    others = [p for p in LOOP_ORDER if p != dominant]
    weights = [rng.uniform(0.2, 1.0) for _ in others]
    parts = {p: rest * w / sum(weights) for p, w in zip(others, weights, strict=False)}
    parts[dominant] = share * period_ms
    work = RankWork(**{f"{p}_ms": parts[p] for p in LOOP_ORDER})
    return Job(tuple([work] * ranks), **kwargs)  # type: ignore[arg-type]


def true_timeline(job: Job, seconds: float = 10.0, seed: int = 0
                  ) -> tuple[list[list[tuple[int, int, str, tuple[CodeFrame, ...]]]], list[Truth]]:
    """What ``simulate(job, rate, seconds, seed)`` samples, unsampled: per rank, every piece of the
    schedule as (start, end, stack key, its first stack), and each rank's truth."""
    rng = random.Random(seed)
    t0 = 1_000_000_000_000
    lead_ns = int(rng.uniform(0.5, 1.5) * 1e9)
    pieces, truths = _plan(job, seconds + lead_ns / 1e9 + 1.0, rng, t0 - lead_ns)
    stacks = _job_stacks(job)
    return [[(a, b, key, stacks[key][0]) for a, b, key, _, _ in rank] for rank in pieces], truths


def shaped_job(period_ms: float, shares: Mapping[str, float], ranks: int = 1, rng: random.Random | None = None,
               straggler: float = 0.0, **kwargs: object) -> Job:
    """A job whose (optimizer) step takes about ``period_ms``: each phase named in ``shares`` takes
    that share of it (input, h2d, forward and backward summed over the step's micro-batches when
    ``accumulation`` is among ``kwargs``), the other phases split the rest at random (seeded by
    ``rng``). With ``ranks`` > 1, ``straggler`` = s gives rank 0 s × period_ms more forward work a
    step, which the others wait for in backward's all-reduce."""
    rng = rng or random.Random(0)
    k = int(kwargs.get("accumulation", 1))  # type: ignore[call-overload]
    s = straggler if ranks > 1 else 0.0
    others = [p for p in LOOP_ORDER if p not in shares]
    rest = max(1 - sum(shares.values()) - s, 0.0)
    weights = [rng.uniform(0.2, 1.0) for _ in others]
    total = {**shares, **{p: rest * wt / sum(weights) for p, wt in zip(others, weights, strict=True)}}
    per = {p: total[p] * period_ms / (1 if p == "optimizer" else k) for p in LOOP_ORDER}
    fast = RankWork(**{f"{p}_ms": per[p] for p in LOOP_ORDER})
    if ranks == 1:
        return Job((fast,), **kwargs)  # type: ignore[arg-type]
    slow = replace(fast, forward_ms=fast.forward_ms + s * period_ms / k)
    return Job((slow, *[fast] * (ranks - 1)), **kwargs)  # type: ignore[arg-type]
