from __future__ import annotations

from pathlib import Path

import pytest

from testkit.stacks import BACKWARD, FETCH, FORWARD, H2D, ITEM, MODULE, OPTIM, f, loop, stack, torch_frame
from traceml_attach.steps.classify import RulesError, classifier, classify, load_rules

RULES = load_rules()
LOOP_DEPTH = 2


@pytest.mark.parametrize(
    ("phase", "expected"),
    [(FETCH, "input"), (H2D, "h2d"), (FORWARD, "forward"), (BACKWARD, "backward"), (OPTIM, "optimizer")],
)
def test_training_phases(phase, expected):
    assert classify(stack(phase), RULES, LOOP_DEPTH).phase == expected


def test_a_dynamo_wrapper_around_zero_grad_is_still_optimizer():
    st = (f("<module>"), loop(24, "opt.zero_grad()"),
          torch_frame("_disable_dynamo.<locals>.inner", "torch/_dynamo/eval_frame.py"),
          torch_frame("Optimizer.zero_grad", "torch/optim/optimizer.py"))
    assert classify(st, RULES, 1).phase == "optimizer"


def test_host_sync_in_a_print_is_wait_sync():
    verdict = classify(stack(ITEM), RULES, LOOP_DEPTH)
    assert (verdict.phase, verdict.label) == ("wait", "device_sync")


@pytest.mark.parametrize(
    ("line_src", "below", "label"),
    [
        ("time.sleep(0.05)", (), "sleep"),
        ("save_checkpoint(model)", (f("save_checkpoint", line=5, src="torch.save(m, p)"),
                                    torch_frame("save", "torch/serialization.py")), "checkpoint"),
        ("evaluate(model)", (f("evaluate", line=7, src="out = model(x)"),
                             torch_frame("Module._call_impl", "torch/nn/modules/module.py")), "eval"),
        ("dist.all_reduce(t)", (torch_frame("all_reduce", "torch/distributed/distributed_c10d.py"),), "collective"),
        ("log.info('step')", (torch_frame("Logger.info", "../lib/python3.11/logging/__init__.py"),), "logging"),
        ("x = 1 + 1", (), "other"),
    ],
)
def test_wait_sub_labels(line_src, below, label):
    verdict = classify((f("<module>"), loop(30, line_src), *below), RULES, 1)
    assert (verdict.phase, verdict.label) == ("wait", label)


def test_forward_under_no_grad_in_the_loop_is_eval_not_forward():
    under = loop(40, "val = model(vx)", ctx="torch.no_grad()")
    st = (f("<module>"), under, torch_frame("Module._call_impl", "torch/nn/modules/module.py"))
    assert classify(st, RULES, 1).label == "eval"


def test_the_frame_nearest_the_loop_decides():
    # forward calls .to() internally: still forward, because the Module frame comes first
    st = (*stack(FORWARD), f("MyNet.forward", line=3, src="h = x.to(self.dtype)"))
    assert classify(st, RULES, LOOP_DEPTH).phase == "forward"


def test_frames_above_the_loop_are_not_scanned():
    # the caller's line would say "eval" (it is under no_grad) but the loop frame is below it
    outer = f("main", line=90, src="train()", ctx="torch.no_grad()")
    st = (outer, loop(23, "loss.backward()"), torch_frame("Tensor.backward", "torch/_tensor.py"))
    assert classify(st, RULES, 1).phase == "backward"


def test_the_memoised_classifier_agrees_with_classify_at_each_loop_depth():
    above = (f("main", line=90, src="train()", ctx="torch.no_grad()"), loop(23, "loss.backward()"),
             torch_frame("Tensor.backward", "torch/_tensor.py"))
    stacks = [stack(p) for p in (FETCH, H2D, FORWARD, BACKWARD, OPTIM, ITEM)] + [above]
    per_depth = {}
    for depth in (None, 1, LOOP_DEPTH):
        verdict = classifier(RULES, depth)
        per_depth[depth] = [verdict(st) for st in stacks * 3]   # each stack seen again: from the memo
        assert per_depth[depth] == [classify(st, RULES, depth) for st in stacks * 3]
    assert per_depth[None][6] != per_depth[1][6]   # the loop depth is part of the verdict


def test_user_rules_come_first(tmp_path: Path):
    extra = tmp_path / "rules.toml"
    extra.write_text('[[rule]]\nphase = "input"\nfunc = "^fetch_remote$"\n')
    rules = load_rules(extra)
    st = (f("<module>"), loop(30, "batch = fetch_remote()"), f("fetch_remote", line=3))
    assert classify(st, RULES, 1).phase == "wait"
    assert classify(st, rules, 1).phase == "input"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[rule]]\nphase = "lunch"\nfunc = "x"\n', "phase must be one of"),
        ('[[rule]]\nphase = "input"\n', "give at least one of"),
        ('[[rule]]\nphase = "input"\nfunc = "("\n', "bad regular expression"),
        ('[[rule]]\nphase = "input"\nfunk = "x"\n', "unknown keys funk"),
        ("not toml [", "not valid TOML"),
    ],
)
def test_bad_rules_files_say_what_is_wrong(tmp_path: Path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(RulesError, match=message):
        load_rules(path)


# --- code nobody here wrote: a hand-written data loader and update (examples/hand_written.py) ---

MODULE_NN = "torch/nn/modules/module.py"
PARAMS = torch_frame("Module._named_members", MODULE_NN, 2600)


@pytest.mark.parametrize(("frames", "expected"), [
    # word_language_model's SGD, with and without no_grad around it
    ((loop(30, "p.data.add_(p.grad, alpha=-lr)"),), "optimizer"),
    ((loop(30, "p.data.add_(p.grad, alpha=-lr)", ctx="torch.no_grad()"),), "optimizer"),
    ((loop(30, "p -= lr * p.grad", ctx="torch.no_grad()"),), "optimizer"),
    ((loop(30, "p.grad = None"),), "optimizer"),
    # the loop over the parameters that does it, inside the generator
    ((loop(29, "for p in model.parameters():"), torch_frame("Module.parameters", MODULE_NN, 2580), PARAMS),
     "optimizer"),
    ((loop(29, "for p in model.parameters():", ctx="torch.no_grad()"), PARAMS), "optimizer"),
    # a Module's zero_grad is the update's, not forward's
    ((loop(26, "model.zero_grad()"), torch_frame("Module.zero_grad", MODULE_NN, 2800)), "optimizer"),
    # clip_grad_norm_ iterating the parameters: the optimizer already
    ((loop(28, "torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)"),
      torch_frame("clip_grad_norm_", "torch/nn/utils/clip_grad.py"), PARAMS), "optimizer"),
    # the parameters iterated inside a Module's forward are forward's
    ((loop(27, "out = model(x)"), torch_frame("Module._call_impl", MODULE_NN), PARAMS), "forward"),
    # nanoGPT's get_batch: a memmap opened and sliced, tensors from numpy, a name that says it
    ((loop(25, "X, Y = get_batch('train')"),
      f("get_batch", line=40, src="data = np.memmap(os.path.join(data_dir, 'train.bin'), dtype=np.uint16, mode='r')"),
      torch_frame("memmap.__new__", "numpy/_core/memmap.py", 236)), "input"),
    ((loop(25, "X, Y = get_batch('train')"),
      f("get_batch", line=42, src="x = torch.stack([torch.from_numpy((data[i:i+block_size]).astype(np.int64)) "
                                  "for i in ix])"),
      f("get_batch.<locals>.<listcomp>", line=42, src="x = torch.stack([torch.from_numpy((data[i:i+block_size])"),
      torch_frame("memmap.__getitem__", "numpy/_core/memmap.py", 350)), "input"),
    ((loop(25, "X, Y = get_batch('train')"), f("get_batch", line=41, src="ix = torch.randint(len(data) - "
                                                                           "block_size, (batch_size,))")), "input"),
    # ...whose copy to the device stays h2d
    ((loop(25, "X, Y = get_batch('train')"),
      f("get_batch", line=44, src="x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, "
                                  "non_blocking=True)")), "h2d"),
])
def test_roles_of_hand_written_code(frames, expected):
    assert classify((MODULE, *frames), RULES, 1).phase == expected


# --- eval is forward passes without a gradient; no_grad lines without one are a metric ----------

CALL = torch_frame("Module._call_impl", MODULE_NN)
DECORATED = torch_frame("context_decorator.<locals>.decorate_context", "torch/utils/_contextlib.py", 116)


@pytest.mark.parametrize(("frames", "expected"), [
    # a forward pass under `with torch.no_grad()` in the loop: eval
    ((loop(40, "val_loss = loss_fn(model(xv), yv)", ctx="torch.no_grad()"), CALL), ("wait", "eval")),
    # nanoGPT's @torch.no_grad() estimate_loss(): the decorator, a forward pass beneath
    ((loop(41, "losses = estimate_loss()"), DECORATED,
      f("estimate_loss", line=60, src="logits, loss = model(X, Y)"), CALL), ("wait", "eval")),
    # an accuracy under no_grad inside the training step: a metric of the step, not eval
    ((loop(31, "acc = (out.argmax(1) == y).float().mean()", ctx="torch.no_grad()"),), ("wait", "metric")),
    ((loop(31, "acc = accuracy(out, y)"), DECORATED, f("accuracy", line=70, src="return (out.argmax(1) == y).mean()")),
     ("wait", "metric")),
    # a decorated hand-written update is the update
    ((loop(32, "sgd_step(model, lr)"), DECORATED, f("sgd_step", line=80, src="p.add_(p.grad, alpha=-lr)")),
     ("optimizer", None)),
])
def test_eval_is_a_forward_pass_without_gradients(frames, expected):
    verdict = classify((MODULE, *frames), RULES, 1)
    assert (verdict.phase, verdict.label) == expected
