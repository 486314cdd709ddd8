"""The lines that keep tensors across steps, read from a training loop's source (retention.py)."""

from __future__ import annotations

import textwrap

import pytest

from traceml_attach.diagnose.retention import kept_across_steps

LOOP = '''
def train(model, loader, opt, loss_fn, self=None):
    {before}
    for step, (x, y) in enumerate(loader):
        out = model(x)
        loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        {line}
'''
# the loop's lines as sampled: the model call and the loss in forward, backward, the optimizer
SAMPLED = {5: {"forward": 30}, 6: {"forward": 5}, 7: {"backward": 40}, 8: {"optimizer": 3}, 9: {"wait": 1}}


def found(before: str, line: str) -> list:
    text = textwrap.dedent(LOOP).format(before=before, line=line)
    return kept_across_steps(text, "train.py", SAMPLED)


@pytest.mark.parametrize(("before", "line", "holder", "tensor", "graph"), [
    ("total_loss = 0", "total_loss += loss", "total_loss", "loss", "loss.backward() at line 7"),
    ("history = []", "history.append(out)", "history", "out", "assigned by the forward pass at line 5"),
    # no graph, still a tensor a step
    ("history = []", "history.append(out.detach())", "history", "out.detach()", None),
    ("kept = []", "kept.append(x[:2].clone())", "kept", "x[:2].clone()", None),           # the batch's
    ("cache = {}", "cache[step] = out", "cache", "out", "assigned by the forward pass at line 5"),
    ("total = 0", "total = total + loss", "total", "loss", "loss.backward() at line 7"),
    ("", "self.losses.append(loss)", "self.losses", "loss", "loss.backward() at line 7"),
])
def test_a_tensor_kept_across_steps_is_named_with_its_reason(before, line, holder, tensor, graph):
    [r] = found(before, line)
    assert (r.line, r.holder, r.tensor, r.graph_from) == (9, holder, tensor, graph)
    assert r.text == line
    assert ("carries the autograd graph" in r.why()) == (graph is not None)


@pytest.mark.parametrize(("before", "line"), [
    ("total_loss = 0", "total_loss += loss.item()"),            # a Python number
    ("total_loss = 0", "total_loss += float(loss)"),
    ("total_loss = 0", "total_loss += loss.detach()"),          # one tensor, not one a step
    ("", "last = loss"),                                        # replaced every step: one kept
    ("stats = {}", "stats['loss'] = loss.item()"),              # the same key every step
])
def test_what_does_not_grow_a_step_is_not_named(before, line):
    assert found(before, line) == []


@pytest.mark.parametrize(("before", "line"), [
    ("losses = []", "losses.append(loss.item())"),
    ("sizes = []", "sizes.append(x.shape[0])"),
    ("log = []", "log.append({'step': step, 'loss': loss.item()})"),
])
def test_a_list_of_python_values_that_grows_a_step_is_the_weakest_evidence(before, line):
    [r] = found(before, line)
    assert (r.kind, r.graph_from) == ("value", None)
    assert "Python values, not tensors" in r.why()


def test_the_strongest_evidence_comes_first():
    text = textwrap.dedent('''
    def train(model, loader):
        log, history = [], []
        for x, y in loader:
            out = model(x)
            log.append(out.sum().item())
            history.append(out)
    ''')
    found_ = kept_across_steps(text, "train.py", {5: {"forward": 9}, 6: {"wait": 1}, 7: {"wait": 1}})
    assert [(r.kind, r.line) for r in found_] == [("graph", 7), ("value", 6)]


def test_a_container_made_afresh_every_step_keeps_nothing():
    text = textwrap.dedent('''
    def train(model, loader):
        for x, y in loader:
            buf = []
            out = model(x)
            buf.append(out)
    ''')
    assert kept_across_steps(text, "t.py", {5: {"forward": 9}, 6: {"wait": 1}}) == []


def test_under_no_grad_nothing_carries_the_graph():
    text = textwrap.dedent('''
    def train(model, loader, opt):
        accs = []
        for x, y in loader:
            out = model(x)
            out.sum().backward()
            with torch.no_grad():
                val = model(x)
                accs.append(val)
    ''')
    assert kept_across_steps(text, "t.py", {5: {"forward": 9}, 6: {"backward": 9}, 8: {"wait": 3}}) == []


def test_an_epoch_total_lives_across_the_steps_of_the_inner_loop():
    text = textwrap.dedent('''
    def train(model, loader, opt, epochs):
        for epoch in range(epochs):
            epoch_loss = 0
            for x, y in loader:
                loss = model(x, y)
                loss.backward()
                epoch_loss += loss
    ''')
    [r] = kept_across_steps(text, "t.py", {5: {"input": 1}, 6: {"forward": 9}, 7: {"backward": 9}, 8: {"wait": 1}})
    assert (r.line, r.holder) == (8, "epoch_loss")


def test_a_forward_pass_on_the_keeping_line_itself_carries_the_graph():
    text = textwrap.dedent('''
    def train(model, loader, x_val, y_val, loss_fn):
        val_total = 0.0
        for x, y in loader:
            model(x).sum().backward()
            val_total += loss_fn(model(x_val), y_val)
    ''')
    [r] = kept_across_steps(text, "t.py", {5: {"forward": 5, "backward": 9}, 6: {"forward": 9}})
    assert (r.tensor, r.graph_from) == ("loss_fn(model(x_val), y_val)", "the forward pass on line 6")


def test_a_module_level_loop_and_a_function_it_calls():
    # nanoGPT's shape: a module-level `while True`; the keeping is in a helper the loop calls
    text = textwrap.dedent('''
    history = []

    def log_step(loss):
        history.append(loss)

    model = make()
    while True:
        loss = model(get_batch())
        loss.backward()
        log_step(loss)
    ''')
    found_ = kept_across_steps(text, "train.py", {9: {"forward": 9}, 10: {"backward": 9}, 11: {"wait": 1}},
                               called=[5])
    # the helper's own scan cannot see that `loss` carries a graph: only that its list grows a step
    [r] = found_
    assert (r.line, r.holder, r.kind) == (5, "history", "value")


def test_unreadable_source_is_no_evidence():
    assert kept_across_steps("def f(:\n", "t.py", {1: {"forward": 1}}) == []
