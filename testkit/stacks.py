"""Builders for synthetic stacks and spans used by the unit tests."""

from __future__ import annotations

from traceml_attach.ingest.model import CodeFrame, Span

SP = "/usr/lib/python3.11/site-packages/"
USER = "/home/u/train.py"


def f(name: str, file: str = USER, line: int = 1, src: str | None = None, ctx: str | None = None) -> CodeFrame:
    return CodeFrame(name, file, line, src, ctx)


def torch_frame(name: str, rel: str, line: int = 10) -> CodeFrame:
    return CodeFrame(name, SP + rel, line, None, None)


MODULE = f("<module>", line=100, src="main()")
MAIN = f("main", line=90, src="train(model, loader)")


def loop(line: int, src: str, ctx: str | None = None) -> CodeFrame:
    return f("train", line=line, src=src, ctx=ctx)


# The phases of a typical step, as (loop line, stack below the loop frame).
FETCH = (20, "for x, y in loader:", (torch_frame("_BaseDataLoaderIter.__next__", "torch/utils/data/dataloader.py"),))
H2D = (21, "x = x.to(device)", ())
FORWARD = (22, "loss = loss_fn(model(x), y)", (torch_frame("Module._wrapped_call_impl", "torch/nn/modules/module.py"),))
BACKWARD = (23, "loss.backward()", (torch_frame("Tensor.backward", "torch/_tensor.py"),
                                    torch_frame("_engine_run_backward", "torch/autograd/graph.py")))
OPTIM = (24, "opt.step()", (torch_frame("SGD.step", "torch/optim/sgd.py"),))
ITEM = (25, "print(loss.item())", ())


def stack(phase: tuple[int, str, tuple[CodeFrame, ...]]) -> tuple[CodeFrame, ...]:
    line, src, below = phase
    return (MODULE, MAIN, loop(line, src), *below)


def steps(pattern: list[tuple[tuple[int, str, tuple[CodeFrame, ...]], int]], n: int,
          t0_ns: int = 1_000_000_000, tid: int = 1, pid: int = 42) -> list[Span]:
    """n repetitions of a step made of (phase, duration ms) parts."""
    out, t = [], t0_ns
    for _ in range(n):
        for phase, ms in pattern:
            out.append(Span(pid, tid, t, ms * 1_000_000, stack(phase)))
            t += ms * 1_000_000
    return out
