"""The lines of a training loop that make what its loss is computed from (steps/dataflow.py), and
their samples as input where no rule names them (steps/classify.py)."""

from __future__ import annotations

import textwrap

from traceml_attach.ingest.model import CodeFrame
from traceml_attach.steps.classify import classify, load_rules
from traceml_attach.steps.dataflow import feeding_lines

NANOGPT = textwrap.dedent('''
    X, Y = get_batch('train')
    while True:
        lr = get_lr(iter_num)
        for micro_step in range(gradient_accumulation_steps):
            with ctx:
                logits, loss = model(X, Y)
                loss = loss / gradient_accumulation_steps
            X, Y = get_batch('train')
            scaler.scale(loss).backward()
        scaler.step(optimizer)
        lossf = loss.item()
''')


def test_the_lines_the_loss_is_computed_from_in_nanogpts_loop():
    # the model call, the scaling, and the prefetch at the end of the micro-batch loop; not the
    # learning rate, not the logging, not the fetch before the loop (outside it)
    assert feeding_lines(NANOGPT, "<module>") == {7, 8, 9}


def test_a_function_loop_through_intermediate_names():
    text = textwrap.dedent('''
        def train(model, corpus, opt):
            for step in range(1000):
                raw = corpus.sample_texts(64)
                tokens = tokenizer(raw)
                x, y = tokens[:, :-1], tokens[:, 1:]
                loss = model(x, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                print(step, loss.item())
    ''')
    assert feeding_lines(text, "train") == {4, 5, 6, 7}
    assert feeding_lines(text, "Trainer.train") == {4, 5, 6, 7}   # py-spy's qualified name
    assert feeding_lines(text, "evaluate") == frozenset()


def test_no_backward_no_loss_no_lines():
    text = "for x in loader:\n    out = model(x)\n    preds.append(out)\n"
    assert feeding_lines(text, "<module>") == frozenset()
    assert feeding_lines("def f(:", "<module>") == frozenset()


def frame(name: str, file: str, line: int, src: str | None = None) -> CodeFrame:
    return CodeFrame(name, file, line, src, None)


def test_a_feeding_line_no_rule_names_is_input_and_a_rule_still_decides_first():
    rules = load_rules()
    loop = frame("<module>", "/job/train.py", 9, "X, Y = prepare(raw)")
    python_work = (loop, frame("prepare", "/job/train.py", 3, "return [enc[c] for c in raw]"))
    # nothing names `prepare`: other work, unless its line feeds the loss
    assert classify(python_work, rules, 0).phase == "wait"
    verdict = classify(python_work, rules, 0, frozenset({9}))
    assert (verdict.phase, verdict.depth) == ("input", 0)
    # a rule decides before the data flow: the copy to the device inside it is h2d
    copy = (loop, frame("prepare", "/job/train.py", 4, "return x.to(device)"))
    assert classify(copy, rules, 0, frozenset({9})).phase == "h2d"
    # a feeding line that runs the model is forward
    model_line = (frame("<module>", "/job/train.py", 7, "logits, loss = model(X, Y)"),
                  frame("Module._call_impl", "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", 1773))
    assert classify(model_line, rules, 0, frozenset({7, 9})).phase == "forward"


def test_code_nobody_here_wrote_never_breaks_the_readers():
    # GIVEN real Python the readers were not written for: the examples, and torch's own training
    # utilities (loops with backward, closures, generators, decorators, match statements...)
    import pathlib
    import random

    import torch

    from traceml_attach.diagnose.retention import kept_across_steps

    root = pathlib.Path(torch.__file__).parent
    files = sorted((root / "optim").glob("*.py")) + sorted((root / "nn" / "utils").glob("*.py"))
    files += sorted(pathlib.Path(__file__).parents[1].joinpath("examples").glob("*.py"))
    random.Random(0).shuffle(files)
    for path in files[:40]:
        text = path.read_text(encoding="utf-8", errors="replace")
        n = text.count("\n")
        # THEN they answer, whatever is asked of them (lines sampled throughout, a few functions
        # called from the loop), without an exception
        for func in ("<module>", "train", "step", "main", "forward"):
            assert isinstance(feeding_lines(text, func), frozenset)
        found = kept_across_steps(text, str(path), {i: {"forward": 2, "backward": 1} for i in range(1, n, 7)},
                                  called=range(1, n, 97))
        assert all(r.line >= 1 and r.why() for r in found)
