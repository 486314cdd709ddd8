"""Loops that live in frameworks, phases that nest, and optimizer steps under gradient accumulation,
on synthetic stacks of the shapes the frameworks' real stacks have (their recorded streams are in
tests/test_framework_fixtures.py)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from testkit.live_streams import repeated, ticks
from testkit.stacks import BACKWARD, FETCH, FORWARD, MAIN, MODULE, OPTIM, SP, f, loop, torch_frame
from traceml_attach.diagnose.analysis import analyze
from traceml_attach.diagnose.dialect import speak
from traceml_attach.diagnose.finding import Finding, StepEvidence
from traceml_attach.diagnose.incremental import IncrementalAnalyzer
from traceml_attach.diagnose.step import diagnose_step_time
from traceml_attach.ingest.model import CodeFrame, Span
from traceml_attach.ingest.stream import Recording
from traceml_attach.steps.accumulation import micro_batches, visit_end, with_accumulation
from traceml_attach.steps.batch_timeline import Segment, build_timeline
from traceml_attach.steps.classify import RulesError, classify, load_rules
from traceml_attach.steps.clock import Step
from traceml_attach.steps.loopframe import find_loop, stack_traits
from traceml_attach.steps.steptime import rank_stats

RULES = load_rules()
MS = 1_000_000
FIXTURES = Path(__file__).parent / "fixtures"


def lib(name: str, rel: str, line: int = 10, src: str | None = None) -> CodeFrame:
    return CodeFrame(name, SP + rel, line, src, None)


def sampled(pieces: list[tuple[float, tuple[CodeFrame, ...]]], seconds: float, rate_hz: int = 100,
            seed: int = 1) -> list[Span]:
    """What py-spy records of a loop repeating ``pieces`` (ms, stack): Poisson samples at ``rate_hz``,
    a span from each change of stack to the next."""
    rng = random.Random(seed)
    ends, t = [], 0.0
    cycle = sum(ms for ms, _ in pieces)
    while t < seconds * 1000:
        for ms, st in pieces:
            t += ms * rng.uniform(0.9, 1.1)
            ends.append((t, st))
    spans: list[Span] = []
    now, i = 0.0, 0
    while True:
        now += rng.expovariate(rate_hz / 1000)
        if now >= seconds * 1000 or now >= ends[-1][0] - cycle:
            break
        while ends[i][0] <= now:
            i += 1
        st = ends[i][1]
        ts = int(now * MS)
        if spans and spans[-1].stack is st:
            continue
        if spans:
            last = spans[-1]
            spans[-1] = Span(last.pid, last.tid, last.ts_ns, ts - last.ts_ns, last.stack)
        spans.append(Span(42, 1, ts, 1, st))
    return spans


def timeline(spans: list[Span], rules=RULES):
    return build_timeline(42, spans, {}, rules, 100, 0, 10**13)


# --- HF Trainer: the loop lives in transformers/trainer.py -----------------------------------

HF_TOP = (MODULE, MAIN, lib("Trainer.train", "transformers/trainer.py", 1480, "return inner_training_loop("),
          lib("Trainer._inner_training_loop", "transformers/trainer.py", 1700, "self._run_epoch("))


def hf(line: int, src: str, *below: CodeFrame) -> tuple[CodeFrame, ...]:
    return (*HF_TOP, lib("Trainer._run_epoch", "transformers/trainer.py", line, src), *below)


HF_STEP = [
    (12.0, hf(1873, "batch_samples, num_items_in_batch = self.get_batch_samples(",
              lib("Trainer.get_batch_samples", "transformers/trainer.py", 2291,
                  "batch_samples.append(next(epoch_iterator))"),
              lib("DataLoaderShard.__iter__", "accelerate/data_loader.py", 577, "next_batch = next(dataloader_iter)"),
              torch_frame("_BaseDataLoaderIter.__next__", "torch/utils/data/dataloader.py"))),
    (25.0, hf(1907, "tr_loss_step = self.training_step(model, inputs, num_items_in_batch)",
              lib("Trainer.training_step", "transformers/trainer.py", 2080, "loss = self.compute_loss(model, inputs)"),
              lib("Trainer.compute_loss", "transformers/trainer.py", 2150, "outputs = model(**inputs)"),
              torch_frame("Module._wrapped_call_impl", "torch/nn/modules/module.py"),
              lib("GPT2LMHeadModel.forward", "transformers/models/gpt2/modeling_gpt2.py", 900))),
    (35.0, hf(1907, "tr_loss_step = self.training_step(model, inputs, num_items_in_batch)",
              lib("Trainer.training_step", "transformers/trainer.py", 2100,
                  "self.accelerator.backward(loss, **kwargs)"),
              lib("Accelerator.backward", "accelerate/accelerator.py", 2700, "loss.backward(**kwargs)"),
              torch_frame("Tensor.backward", "torch/_tensor.py"),
              torch_frame("_engine_run_backward", "torch/autograd/graph.py"))),
    (8.0, hf(1935, "self.optimizer.step()", lib("AcceleratedOptimizer.step", "accelerate/optimizer.py", 170),
             torch_frame("SGD.step", "torch/optim/sgd.py"))),
]


def test_the_hf_trainer_loop_is_found_inside_transformers():
    tl = timeline(sampled(HF_STEP, 10))
    assert tl.loop is not None
    assert (tl.loop.name, tl.framework) == ("Trainer._run_epoch", "HF Trainer (transformers 5.x)")
    stats = rank_stats("0", tl)
    assert stats.step_ms == pytest.approx(80, rel=0.1)
    shares = stats.shares or {}
    assert shares["input"] == pytest.approx(12 / 80, abs=0.05)
    assert shares["forward"] == pytest.approx(25 / 80, abs=0.05)
    assert shares["backward"] == pytest.approx(35 / 80, abs=0.05)
    assert shares["optimizer"] == pytest.approx(8 / 80, abs=0.05)


def test_without_its_loop_rule_the_trainer_is_named_as_a_loop_no_rule_knows(tmp_path: Path):
    bare = tmp_path / "rules.toml"   # the phase rules alone: no [[loop]]
    bare.write_text(Path(RULES_FILE()).read_text().split("[[loop]]")[0])
    rules = load_rules(bare)
    rules = type(rules)(rules.phases, ())
    tl = timeline(sampled(HF_STEP, 10), rules)
    assert tl.loop is None
    finding = diagnose_step_time([rank_stats("0", tl)])[0]
    assert finding.kind == "NO_DATA"
    assert "no training loop found" in finding.summary and "wait for more steps" not in finding.action
    assert "Trainer._run_epoch" in finding.why
    rule = "[[loop]] framework = '...' func = '^Trainer\\._run_epoch$' file = 'transformers/trainer\\.py$'"
    assert rule in finding.action
    # the rule it prints, pasted into a rules file, finds the loop
    text = rule.replace("[[loop]] ", "[[loop]]\n").replace("' ", "'\n")
    pasted = tmp_path / "pasted.toml"
    pasted.write_text(text + "\n")
    mine = load_rules(pasted)
    only_pasted = type(mine)(mine.phases, tuple(rule for rule in mine.loops if rule.framework == "..."))
    found = timeline(sampled(HF_STEP, 10), only_pasted).loop
    assert found is not None and found.name == "Trainer._run_epoch"


def RULES_FILE() -> str:
    from traceml_attach.steps.classify import DEFAULT_RULES_FILE
    return str(DEFAULT_RULES_FILE)


def test_a_user_loop_rule_names_a_framework(tmp_path: Path):
    extra = tmp_path / "mine.toml"
    extra.write_text('[[loop]]\nframework = "MyTrainer"\nfile = "mytrainer/fit\\\\.py$"\nfunc = "^Fit\\\\.run$"\n')
    rules = load_rules(extra)

    def mine(line: int, src: str, *below: CodeFrame) -> tuple[CodeFrame, ...]:
        return (MODULE, MAIN, lib("Fit.run", "mytrainer/fit.py", line, src), *below)

    spans = sampled([(20.0, mine(10, "for batch in self.loader:", *FETCH[2])),
                     (30.0, mine(12, "out = self.model(batch)", *FORWARD[2])),
                     (30.0, mine(13, "loss.backward()", *BACKWARD[2]))], 8)
    assert timeline(spans).loop is None
    tl = timeline(spans, rules)
    assert tl.loop is not None and tl.framework == "MyTrainer"
    assert rank_stats("0", tl).step_ms == pytest.approx(80, rel=0.1)


@pytest.mark.parametrize(("text", "message"), [
    ('[[loop]]\nfunc = "x"\n', "name the loop with framework"),
    ('[[loop]]\nframework = "x"\n', "give at least one of func, file"),
    ('[[loop]]\nframework = "x"\nfunc = "x"\nsrc = "y"\n', "unknown keys src"),
    ('[[loops]]\nframework = "x"\n', "unknown tables loops"),
])
def test_bad_loop_rules_say_what_is_wrong(tmp_path: Path, text: str, message: str):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(RulesError, match=message):
        load_rules(path)


# --- where the loop frame is looked for ---------------------------------------------------------

def test_a_loop_below_a_launchers_library_frames_is_found():
    # Ray Train, torch.multiprocessing.spawn: the user's loop is called from library frames
    root = (lib("main_loop", "ray/_private/workers/default_worker.py", 290),
            lib("_RayTrainWorker__execute", "ray/train/_internal/worker_group.py", 30))

    def ray(line: int, src: str, below: tuple[CodeFrame, ...]) -> tuple[CodeFrame, ...]:
        return (*root, f("train_func", line=line, src=src), *below)

    spans = sampled([(20.0, ray(*FETCH)), (30.0, ray(*FORWARD)), (30.0, ray(*BACKWARD)), (5.0, ray(*OPTIM))], 8)
    found = find_loop(spans, RULES.loops)
    assert found is not None and found.name == "train_func"


def test_a_loop_in_the_users_dataset_under_the_dataloader_is_not_the_training_loop():
    decode = [torch_frame("_BaseDataLoaderIter.__next__", "torch/utils/data/dataloader.py"),
              f("Samples.__getitem__", line=40, src="return decode(self.x[i])")]

    def fetch(line: int) -> tuple[CodeFrame, ...]:   # a per-pixel loop in the user's decode
        return (MODULE, MAIN, loop(20, "for x, y in loader:"), *decode, f("decode", line=line, src="for px in row:"))

    pieces = [(3.0, fetch(51)), (3.0, fetch(52))] * 20 + [(30.0, (MODULE, MAIN, loop(22, FORWARD[1]), *FORWARD[2]))]
    found = find_loop(sampled(pieces, 8), RULES.loops)
    assert found is not None and found.name == "train"


# --- phases that nest -------------------------------------------------------------------------

def closure_stack(*below: CodeFrame) -> tuple[CodeFrame, ...]:
    return (MODULE, MAIN, loop(30, "opt.step(closure)"), torch_frame("Optimizer.profile_hook_step.<locals>.wrapper",
                                                                     "torch/optim/optimizer.py"),
            torch_frame("LBFGS.step", "torch/optim/lbfgs.py"), f("train.<locals>.closure", line=25), *below)


@pytest.mark.parametrize(("below", "phase"), [
    ((f("train.<locals>.closure", line=26, src="loss = loss_fn(model(x), y)"),
      torch_frame("Module._wrapped_call_impl", "torch/nn/modules/module.py")), "forward"),
    ((f("train.<locals>.closure", line=27, src="loss.backward()"), torch_frame("Tensor.backward", "torch/_tensor.py"),
      torch_frame("_engine_run_backward", "torch/autograd/graph.py")), "backward"),
    ((f("train.<locals>.closure", line=24, src="opt.zero_grad()"),
      torch_frame("Optimizer.zero_grad", "torch/optim/optimizer.py")), "optimizer"),
    ((), "optimizer"),   # the optimizer's own update
])
def test_forward_and_backward_inside_an_optimizer_closure_are_forward_and_backward(below, phase):
    st = closure_stack(*below[1:]) if below else closure_stack()
    if below:
        st = (*st[:-1], below[0], *below[1:])
    assert classify(st, RULES, 2).phase == phase


ADVANCE = lib("_TrainingEpochLoop.advance", "lightning/pytorch/loops/training_epoch_loop.py", 352)


def in_lightning_step(optimizer: CodeFrame, *below: CodeFrame) -> tuple[CodeFrame, ...]:
    """A stack of Lightning's stepping micro-batch: its closure, called by the optimizer's step."""
    return (MODULE, MAIN, ADVANCE, lib("LightningOptimizer.step", "lightning/pytorch/core/optimizer.py", 154),
            optimizer, lib("Closure.__call__", "lightning/pytorch/loops/optimization/automatic.py", 146), *below)


def test_lightnings_training_step_inside_the_optimizer_step_is_forward():
    st = in_lightning_step(torch_frame("SGD.step", "torch/optim/sgd.py"),
                           lib("Strategy.training_step", "lightning/pytorch/strategies/strategy.py", 390),
                           f("Model.training_step", line=30, src="loss = (self.net(x) - y).pow(2).mean()"))
    verdict = classify(st, RULES, 2)
    assert (verdict.phase, verdict.framework) == ("forward", "Lightning")


@pytest.mark.parametrize(("inner", "phase"), [
    ((lib("Strategy.training_step", "lightning/pytorch/strategies/strategy.py", 390),
      torch_frame("Module._wrapped_call_impl", "torch/nn/modules/module.py"),
      torch_frame("Linear.forward", "torch/nn/modules/linear.py")), "forward"),
    ((lib("Closure._make_backward_fn.<locals>.backward_fn", "lightning/pytorch/loops/optimization/automatic.py", 290),
      torch_frame("Tensor.backward", "torch/_tensor.py"),
      torch_frame("_engine_run_backward", "torch/autograd/graph.py")), "backward"),
])
def test_lightnings_closure_called_by_itself_is_not_eval(inner, phase):
    # GIVEN a micro-batch that accumulates (accumulate_grad_batches > 1): Lightning calls its
    # closure with no optimizer step, and the closure is decorated with @torch.enable_grad(),
    # which runs through the decorate_context that @torch.no_grad() uses (was: eval and metric,
    # 26 pp of the step on examples/lightning_job.py --accumulate 4)
    st = (MODULE, MAIN, ADVANCE,
          lib("_AutomaticOptimization.run", "lightning/pytorch/loops/optimization/automatic.py", 210),
          lib("Closure.__call__", "lightning/pytorch/loops/optimization/automatic.py", 146),
          torch_frame("_DecoratorContextManager.__call__.<locals>.decorate_context", "torch/utils/_contextlib.py"),
          lib("Closure.closure", "lightning/pytorch/loops/optimization/automatic.py", 129), *inner)
    # THEN its forward and backward are forward and backward
    assert classify(st, RULES, 2).phase == phase


def test_lightnings_backward_hooks_inside_the_optimizer_step_are_backward():
    # GIVEN the stepping micro-batch of Lightning's closure (accumulate_grad_batches=2): a callback
    # after torch's backward sets a Module's attribute, under Strategy.backward inside Adam.step
    st = in_lightning_step(torch_frame("Adam.step", "torch/optim/adam.py"),
                           lib("Closure.closure", "lightning/pytorch/loops/optimization/automatic.py", 129),
                           lib("Strategy.backward", "lightning/pytorch/strategies/strategy.py", 210),
                           lib("Precision.post_backward", "lightning/pytorch/plugins/precision/precision.py", 80),
                           torch_frame("Module.__setattr__", "torch/nn/modules/module.py"))
    # THEN it is the backward pass's (was forward: a return to the cycle's start inside the
    # optimizer step, which split the step in two)
    assert classify(st, RULES, 2).phase == "backward"


def test_leaving_a_generator_context_manager_is_not_input():
    # GIVEN DDP's no_sync left after an accumulating micro-batch's backward: contextlib's __exit__
    # runs `next(self.gen)`
    st = (MODULE, MAIN, ADVANCE,
          lib("_AutomaticOptimization.run", "lightning/pytorch/loops/optimization/automatic.py", 210),
          f("_GeneratorContextManager.__exit__", file="/usr/lib/python3.11/contextlib.py", line=144,
            src="next(self.gen)"),
          lib("ParallelStrategy.block_backward_sync", "lightning/pytorch/strategies/parallel.py", 120, src="yield"))
    # THEN it is no batch being fetched (an input sample after backward read as the next step's start)
    assert classify(st, RULES, 2).phase != "input"
    # while a loop's own `next(it)` still is
    assert classify((MODULE, MAIN, loop(30, "x, y = next(it)")), RULES, 2).phase == "input"


def timed(*parts: tuple[str, float, tuple[CodeFrame, ...]]) -> tuple[list[Segment], Step]:
    """Segments one after another (phase, ms, stack) and the interval that holds them."""
    segments, t = [], 0
    for phase, ms, st in parts:
        span = Span(1, 1, t, int(ms * 1e6), st)
        segments.append(Segment(t, span.dur_ns, phase, None, span, None))
        t += span.dur_ns
    phases: dict[str, int] = {}
    for seg in segments:
        phases[seg.phase] = phases.get(seg.phase, 0) + seg.dur_ns
    return segments, Step(0, t, phases, None)


LIGHTNING = (MODULE, MAIN, ADVANCE,
             lib("_AutomaticOptimization.run", "lightning/pytorch/loops/optimization/automatic.py", 210))
CLEARS = (*LIGHTNING, lib("_AutomaticOptimization._optimizer_zero_grad",
                          "lightning/pytorch/loops/optimization/automatic.py", 300),
          torch_frame("Optimizer.zero_grad", "torch/optim/optimizer.py"))
UPDATES = (*LIGHTNING, torch_frame("Adam.step", "torch/optim/adam.py"))
PASSES = (*LIGHTNING, torch_frame("Tensor.backward", "torch/_tensor.py"))


def test_gradients_cleared_before_the_backward_pass_end_no_optimizer_step():
    # GIVEN Lightning's first micro-batch of two: its closure clears the gradients, then runs backward
    segments, iv = timed(("input", 30, PASSES), ("forward", 20, PASSES), ("optimizer", 2, CLEARS),
                         ("backward", 40, PASSES))
    # THEN that is no visit of the optimizer's that ends a step (such visits made the input straggler
    # of tests/fixtures/truth_lightning_ddp_accum2 count 42 optimizer steps for 38)
    assert visit_end(segments, iv) is None
    # while the update, with or without clearing after it, ends its step (where that visit ends,
    # not the interval: a wait follows it)
    segments, iv = timed(("forward", 20, PASSES), ("backward", 40, PASSES), ("optimizer", 5, UPDATES),
                         ("optimizer", 2, CLEARS), ("wait", 3, LIGHTNING))
    assert visit_end(segments, iv) == segments[3].ts_ns + segments[3].dur_ns < iv.end_ns
    # and so does clearing after the pass where the update went unsampled
    segments, iv = timed(("forward", 20, PASSES), ("backward", 40, PASSES), ("optimizer", 2, CLEARS),
                         ("wait", 3, LIGHTNING))
    assert visit_end(segments, iv) == segments[2].ts_ns + segments[2].dur_ns < iv.end_ns


def test_an_eval_function_decorated_with_no_grad_is_still_eval():
    st = (MODULE, MAIN, loop(40, "losses = estimate_loss()"),
          torch_frame("_DecoratorContextManager.__call__.<locals>.decorate_context", "torch/utils/_contextlib.py"),
          f("estimate_loss", line=50, src="logits, loss = model(X, Y)"),
          torch_frame("Module._wrapped_call_impl", "torch/nn/modules/module.py"))
    verdict = classify(st, RULES, 2)
    assert (verdict.phase, verdict.label) == ("wait", "eval")


def test_compiling_inside_a_compiled_forward_is_wait_compile():
    st = (MODULE, MAIN, loop(22, "out = model(x)"),
          torch_frame("Module._wrapped_call_impl", "torch/nn/modules/module.py"),
          torch_frame("_TorchDynamoContext.__call__.<locals>._fn", "torch/_dynamo/eval_frame.py"),
          torch_frame("ConvertFrame.__call__", "torch/_dynamo/convert_frame.py"),
          torch_frame("compile_fx", "torch/_inductor/compile_fx.py"))
    verdict = classify(st, RULES, 2)
    assert (verdict.phase, verdict.label) == ("wait", "compile")


def test_the_outermost_phase_still_decides_where_phases_do_not_nest():
    # input that calls nn.functional is input; forward under no_grad in an eval function is eval
    st = (MODULE, MAIN, loop(20, "for x, y in loader:"),
          torch_frame("_BaseDataLoaderIter.__next__", "torch/utils/data/dataloader.py"),
          torch_frame("interpolate", "torch/nn/functional.py"))
    assert classify(st, RULES, 2).phase == "input"


# --- gradient accumulation -------------------------------------------------------------------

def accumulating(k: int, optimizer_ms: float = 6.0) -> list[tuple[float, tuple[CodeFrame, ...]]]:
    """A plain loop over micro-batches that steps the optimizer every k-th one."""
    micro = [(15.0, (MODULE, MAIN, loop(20, "for i, (x, y) in enumerate(loader):"), *FETCH[2])),
             (30.0, (MODULE, MAIN, loop(22, FORWARD[1]), *FORWARD[2])),
             (40.0, (MODULE, MAIN, loop(23, BACKWARD[1]), *BACKWARD[2]))]   # 85 ms: 8 samples at 100 Hz
    step = (optimizer_ms, (MODULE, MAIN, loop(25, "opt.step()"), *OPTIM[2]))
    return micro * (k - 1) + [*micro, step]


@pytest.mark.parametrize("k", [2, 4, 8])
def test_gradient_accumulation_counts_optimizer_steps(k: int):
    tl = with_accumulation(timeline(sampled(accumulating(k), 30)))
    assert tl.micro_batches == k
    stats = rank_stats("0", tl)
    assert stats.micro_batches == k
    truth_ms = 85 * k + 6
    assert stats.step_ms == pytest.approx(truth_ms, rel=0.1)
    assert stats.steps == pytest.approx(30_000 / truth_ms, rel=0.15)
    assert (stats.shares or {})["optimizer"] == pytest.approx(6 / truth_ms, abs=0.03)
    # each group holds one optimizer step (a 6 ms one is sampled in about half of them), never two
    micro_ns = 85 * MS
    stepped = [s for s in tl.steps if s.phases_ns["optimizer"] > 0]
    assert len(stepped) >= 0.35 * len(tl.steps)
    assert all(s.dur_ns < (k + 0.5) * micro_ns + 6 * MS for s in tl.steps)


@pytest.mark.parametrize("optimizer_ms", [6.0, 0.5])
def test_without_accumulation_a_step_stays_a_step(optimizer_ms: float):
    # an optimizer too short to be seen in every step must not pass for accumulation
    tl = timeline(sampled(accumulating(1, optimizer_ms), 20))
    assert tl.clock.known
    assert micro_batches(tl.intervals, tl.clock.period_ns) == 1
    assert with_accumulation(tl) is tl


# --- advice in the framework's terms ----------------------------------------------------------

def _finding(kind: str, summary: str = "x") -> Finding:
    return Finding(kind, "warning", summary, "why", "generic action")


def test_advice_speaks_the_frameworks_language_and_skips_what_the_job_does():
    tl = timeline(sampled(HF_STEP, 5))
    stats = rank_stats("0", tl)
    (inp,) = speak([_finding("INPUT_BOUND")], [stats])
    assert "dataloader_num_workers" in inp.action
    amp = type(stats)(**{**stats.__dict__, "traits": frozenset({"autocast"})})
    (compute,) = speak([_finding("COMPUTE_BOUND")], [amp])
    assert "bf16" not in compute.action and "already on: mixed precision" in compute.action
    assert "torch_compile=True" in compute.action
    saturated = Finding("COMPUTE_BOUND", "info", "the GPU is saturated", "why", "generic action", None,
                        StepEvidence(40, 80.0, 0.02, 0.1, 0.88, gpu_sm_util=97.0))
    (gpu,) = speak([saturated], [stats])
    assert gpu.action.startswith("optimize GPU compute: TrainingArguments(bf16=True)")
    workers = type(stats)(**{**stats.__dict__, "traits": frozenset({"loader_workers"})})
    (inp,) = speak([_finding("INPUT_BOUND")], [workers])
    assert "already runs worker processes" in inp.action and "dataloader_num_workers" not in inp.action


def test_micro_batches_too_short_to_count_still_give_optimizer_steps():
    # 4 micro-batches of 28 ms (3 samples at 100 Hz: the loop's own clock cannot tell them apart)
    short = [(ms * 28 / 85, st) for ms, st in accumulating(4, optimizer_ms=8.0)]
    tl = timeline(sampled(short, 30))
    assert not tl.clock.known
    stats = rank_stats("0", with_accumulation(tl))
    truth_ms = 4 * 28 + 8
    assert stats.micro_batches is None   # optimizer steps, their micro-batches not counted
    assert stats.step_ms == pytest.approx(truth_ms, rel=0.1)
    assert stats.steps == pytest.approx(30_000 / truth_ms, rel=0.15)


def test_the_lazy_backward_compile_is_wait_compile_and_the_compiled_backward_is_backward():
    # the stacks py-spy recorded of a torch.compile'd MLP on CPU (torch 2.13), cut short
    above = (MODULE, MAIN, loop(32, "loss.backward()"), torch_frame("Tensor.backward", "torch/_tensor.py"),
             torch_frame("_engine_run_backward", "torch/autograd/graph.py"),
             torch_frame("BackwardCFunction.apply_boxed", "torch/autograd/function.py"),
             torch_frame("CompiledFunction.backward", "torch/_functorch/_aot_autograd/runtime_wrappers.py"))
    compiling = (*above, torch_frame("_AutogradBackwardCompiler.get_or_compile",
                                     "torch/_functorch/_aot_autograd/runtime_wrappers.py"),
                 torch_frame("_compile_fx_main.<locals>.bw_compiler", "torch/_inductor/compile_fx.py"))
    running = (*above, torch_frame("CompiledFxGraph.__call__", "torch/_inductor/output_code.py"),
               CodeFrame("Runner.call", "/tmp/torchinductor_root/ck/cckl.py", 40, None, None))
    assert (classify(compiling, RULES, 2).phase, classify(compiling, RULES, 2).label) == ("wait", "compile")
    assert classify(running, RULES, 2).phase == "backward"


@pytest.mark.parametrize(("ctx", "on"), [
    ("torch.autocast('cuda', dtype=torch.bfloat16)", True),
    ("torch.autocast(device.type, enabled=True)", True),
    ("torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.autocast)", False),   # may be off
    ("torch.no_grad()", False),
])
def test_autocast_is_a_trait_only_where_the_stack_shows_it_on(ctx: str, on: bool):
    st = (MODULE, MAIN, loop(22, FORWARD[1], ctx=ctx), *FORWARD[2])
    assert ("autocast" in stack_traits(st)) is on


def test_the_live_view_counts_optimizer_steps_as_the_summary_does():
    # GIVEN the real accumulating job's stream (4 micro-batches a step) fed in as it arrived
    rec, live = Recording(), IncrementalAnalyzer(RULES)
    got = None
    for end in ticks(repeated(FIXTURES / "fw_grad_accum4.msgpack", 40), rec):
        got = live.tick(rec, end)
    # THEN the newest tick counts optimizer steps of 4 micro-batches, as the batch analysis does
    assert got is not None
    want = analyze(rec, RULES, start_ns=got.start_ns, end_ns=got.end_ns)
    (mine,), (theirs,) = got.ranks, want.ranks
    assert mine.micro_batches == theirs.micro_batches == 4
    assert mine.steps == theirs.steps
    assert mine.step_ms is not None and theirs.step_ms is not None
    assert mine.step_ms == pytest.approx(theirs.step_ms, rel=0.02)
