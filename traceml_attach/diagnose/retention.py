"""The lines that keep tensors across steps: where to look when memory rises step over step.

Read from the training loop's own source (the agent sends the job's files, ``source`` frames)
and the phases its lines were sampled in. A tensor that carries the autograd graph (the one
``.backward()`` is called on, what a line sampled in forward assigns, and what is computed from
those) kept in something that outlives the step (a name set before the loop, an attribute, a
container that is appended to) keeps every step's graph alive: the seeds' classic
``total_loss += loss`` and ``history.append(out)``. ``.item()``, ``.detach()``, ``.tolist()``,
``float()`` and friends cut the graph, and so does computing under ``torch.no_grad()``.

This is evidence with its reason, never certainty: the analysis is of the text, and a name
that holds a tensor in one program may hold a float in another.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache

from traceml_attach.policy import RETENTION_FORWARD_SHARE
from traceml_attach.steps.dataflow import backward_of

# Calls that give a value without the graph (on a tensor: a Python number, a detached tensor)
DETACHING_METHODS = frozenset({"item", "detach", "detach_", "tolist", "numpy", "__float__"})
DETACHING_FUNCS = frozenset({"float", "int", "bool", "str", "repr", "len", "round", "print", "format"})
# A container method that keeps its argument: the container outlives the step
KEEPING_METHODS = frozenset({"append", "extend", "add", "insert", "appendleft", "update", "setdefault",
                             "put", "put_nowait", "push"})
# ...and those that grow it by one item a call (``update`` and ``setdefault`` may replace one)
GROWING_METHODS = frozenset({"append", "extend", "add", "insert", "appendleft", "put", "put_nowait", "push"})
KINDS = ("graph", "tensor", "value")   # the evidence, strongest first
# Backward on a tensor, by what the user writes: ``loss.backward()``, ``scaler.scale(loss).backward()``,
# ``accelerator.backward(loss)`` / ``engine.backward(loss)`` / ``torch.autograd.backward(loss)``
NO_GRAD = ("no_grad", "inference_mode")
FORWARD_HERE = "<the forward pass on this line>"   # what a forward line's own call keeps


@dataclass(frozen=True)
class Retention:
    """One line that keeps a tensor with its graph in something that outlives the step."""

    file: str
    line: int
    text: str            # the source line, stripped
    holder: str          # what outlives the step: "total_loss", "history", "self.losses"
    tensor: str          # the graph-carrying name it keeps: "loss"
    how: str             # "+=", "append", "item assignment"
    graph_from: str | None   # why that name carries the graph ("loss.backward() at line 41"); None: none
    kind: str = "graph"      # graph | tensor (no graph: a batch, a detached copy) | value (Python values)

    @property
    def where(self) -> str:
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line}"

    def why(self) -> str:
        if self.kind == "value":
            return (f"{self.where} `{self.text}`: `{self.holder}` outlives the step and gets one more item every "
                    "step (Python values, not tensors: small each, but it never shrinks)")
        if self.kind == "tensor":
            return (f"{self.where} `{self.text}`: `{self.tensor}` is a tensor made every step, and `{self.holder}` "
                    "outlives the step: it keeps one more each step")
        return (f"{self.where} `{self.text}`: `{self.tensor}` carries the autograd graph ({self.graph_from}) "
                f"and `{self.holder}` outlives the step; without .item() or .detach() every step's graph "
                "stays alive")


def kept_across_steps(text: str, file: str, loop_lines: Mapping[int, Mapping[str, int]],
                      called: Iterable[int] = ()) -> list[Retention]:
    """The lines of the training loop (and of the job's own functions it calls, ``called``: a line
    of each, as sampled) that keep a graph-carrying tensor across steps. ``loop_lines``: the loop
    function's sampled lines with the time per phase at each."""
    forward = frozenset(line for line, phases in loop_lines.items()
                        if phases.get("forward", 0) >= RETENTION_FORWARD_SHARE * sum(phases.values()))
    return list(_kept(text, file, frozenset(loop_lines), forward, tuple(sorted(set(called)))))


@lru_cache(maxsize=32)   # a live view asks every tick while memory rises; the answers settle
def _kept(text: str, file: str, sampled: frozenset[int], forward: frozenset[int],
          called: tuple[int, ...]) -> tuple[Retention, ...]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return ()
    lines = text.splitlines()
    found: list[Retention] = []
    loop = _loop_node(tree, set(sampled))
    if loop is not None:
        found += _scan(loop.body, _outside_names(tree, loop), set(forward), file, lines, _batch_names(loop))
    funcs = _functions(tree) if called else []
    for line in called:
        func = _innermost(funcs, line)
        if func is not None and (loop is None or not _contains(func, loop)):
            found += _scan(func.body, _nonlocal_names(func), set(), file, lines, set())
    unique: dict[int, Retention] = {}
    for r in found:
        unique.setdefault(r.line, r)
    return tuple(unique.values())


# -- where the step is ----------------------------------------------------------------------

def _loop_node(tree: ast.AST, sampled: set[int]) -> ast.For | ast.While | None:
    """The innermost ``for`` / ``while`` that holds every sampled line of the loop function that
    any loop holds (the lines before and after the loop are not the step's)."""
    loops = [n for n in ast.walk(tree) if isinstance(n, ast.For | ast.While | ast.AsyncFor)]
    inside = {line for line in sampled if any(_spans(n, line) for n in loops)}
    holding = [n for n in loops if inside and all(_spans(n, line) for line in inside)]
    if not holding:
        return None
    best = min(holding, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
    return best if isinstance(best, ast.For | ast.While) else None


def _spans(node: ast.AST, line: int) -> bool:
    first = getattr(node, "lineno", 0)
    return bool(first <= line <= (getattr(node, "end_lineno", None) or first))


def _contains(outer: ast.AST, inner: ast.AST) -> bool:
    return _spans(outer, getattr(inner, "lineno", 0))


def _function_at(tree: ast.AST, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The innermost function defined in ``tree`` that holds ``line``."""
    return _innermost(_functions(tree), line)


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def _innermost(funcs: list[ast.FunctionDef | ast.AsyncFunctionDef], line: int
               ) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    holding = [n for n in funcs if _spans(n, line)]
    return min(holding, key=lambda n: (n.end_lineno or n.lineno) - n.lineno) if holding else None


def _outside_names(tree: ast.AST, loop: ast.For | ast.While) -> set[str]:
    """Names that outlive one pass of ``loop``: bound before it in its scope (or anywhere at
    module level, or as the scope's parameters), and not set afresh at the top of its body."""
    scope = _function_at(tree, loop.lineno) or tree
    bound: set[str] = set()
    if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        bound |= {a.arg for a in [*scope.args.posonlyargs, *scope.args.args, *scope.args.kwonlyargs]}
    for node in _walk_scope(scope):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign) and node.lineno < loop.lineno:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound |= {name for t in targets for name in _bound(t)}
        elif isinstance(node, ast.Global | ast.Nonlocal):
            bound |= set(node.names)
    fresh = {name for stmt in loop.body if isinstance(stmt, ast.Assign) for t in stmt.targets for name in _bound(t)
             if not _reads(stmt.value, name)}
    return (bound - fresh) | {"self"}


def _nonlocal_names(func: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """In a function the loop calls once a step: what outlives the call (its parameters' contents,
    ``self``, globals), i.e. every name it does not bind itself, and its parameters."""
    params = {a.arg for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]}
    local = {name for node in _walk_scope(func) if isinstance(node, ast.Assign | ast.AnnAssign)
             for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) for name in _bound(t)}
    declared = {name for node in _walk_scope(func) if isinstance(node, ast.Global | ast.Nonlocal)
                for name in node.names}
    used = {n.id for n in _walk_scope(func) if isinstance(n, ast.Name)}
    return (used - local) | params | declared


def _walk_scope(node: ast.AST) -> Iterator[ast.AST]:
    """``ast.walk`` without descending into nested functions, lambdas and classes."""
    todo = list(ast.iter_child_nodes(node))
    while todo:
        child = todo.pop()
        yield child
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            todo.extend(ast.iter_child_nodes(child))


def _bound(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [n for elt in target.elts for n in _bound(elt)]
    if isinstance(target, ast.Starred):
        return _bound(target.value)
    return []


def _reads(expr: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(expr))


# -- what carries the graph, and what keeps it ------------------------------------------------

def _batch_names(loop: ast.For | ast.While) -> set[str]:
    """The tensors the loop's ``for`` gives each step (``for x, y in loader``; an ``enumerate``'s
    count is no tensor)."""
    if not isinstance(loop, ast.For):
        return set()
    target = loop.target
    if (isinstance(loop.iter, ast.Call) and isinstance(loop.iter.func, ast.Name) and loop.iter.func.id == "enumerate"
            and isinstance(target, ast.Tuple) and len(target.elts) == 2):
        target = target.elts[1]
    return set(_bound(target))


def _scan(body: list[ast.stmt], holders: set[str], forward: set[int], file: str, lines: list[str],
          batch: set[str]) -> list[Retention]:
    graph = _graph_names(body, forward)
    tensors = _tensor_names(body, {**{name: "" for name in batch}, **graph})
    out = []
    for stmt, no_grad in _statements(body):
        if no_grad:
            continue
        # a forward pass on the line itself carries the graph: `val += loss_fn(model(x), y)`
        here = dict(graph)
        if stmt.lineno in forward:
            here[FORWARD_HERE] = f"the forward pass on line {stmt.lineno}"
        kind = "graph"
        kept = _keeps(stmt, holders, here)
        if kept is None:
            kind, kept = "tensor", _keeps_tensor(stmt, holders, tensors)
        if kept is None:
            kind, kept = "value", _keeps_tensor(stmt, holders, None)
        if kept is None:
            continue
        holder, tensor, how = kept
        graph_from = here.get(tensor) if kind == "graph" else None
        if tensor == FORWARD_HERE:
            tensor = _kept_value(stmt)
        out.append(Retention(file, stmt.lineno, _text(stmt, lines)[:200], holder, tensor, how, graph_from, kind))
    return sorted(out, key=lambda r: (KINDS.index(r.kind), r.line))


def _statements(body: list[ast.stmt], no_grad: bool = False) -> Iterator[tuple[ast.stmt, bool]]:
    """Every statement of ``body``, nested blocks included (not nested functions), with whether
    it runs under ``torch.no_grad()`` / ``inference_mode()``."""
    for stmt in body:
        yield stmt, no_grad
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        inner = no_grad or (isinstance(stmt, ast.With | ast.AsyncWith)
                            and any(any(w in ast.unparse(i.context_expr) for w in NO_GRAD) for i in stmt.items))
        for field in ("body", "orelse", "finalbody"):
            yield from _statements(getattr(stmt, field, None) or [], inner)
        for handler in getattr(stmt, "handlers", None) or []:
            yield from _statements(handler.body, inner)


def _graph_names(body: list[ast.stmt], forward: set[int]) -> dict[str, str]:
    """The names in ``body`` that carry the autograd graph, each with why: backward is called on
    it, a forward line assigns it, or it is computed from one of those (to a fixed point)."""
    graph: dict[str, str] = {}
    stmts = [(s, ng) for s, ng in _statements(body)]
    for stmt, _ in stmts:
        for node in ast.walk(stmt):
            name = backward_of(node)
            if name is not None:
                line = getattr(node, "lineno", 0)
                graph.setdefault(name, f"{name}.backward() at line {line}"
                                 if _is_method_backward(node) else f"backward({name}) at line {line}")
    for stmt, no_grad in stmts:
        if isinstance(stmt, ast.Assign) and stmt.lineno in forward and not no_grad:
            for target in stmt.targets:
                for name in _bound(target):
                    graph.setdefault(name, f"assigned by the forward pass at line {stmt.lineno}")
    changed = True
    while changed:
        changed = False
        for stmt, no_grad in stmts:
            if not isinstance(stmt, ast.Assign) or no_grad:
                continue
            source = next((n for n in _bare(stmt.value, graph)), None)
            for target in stmt.targets:
                for name in _bound(target):
                    if source is not None and name not in graph:
                        graph[name] = f"computed from `{source}` at line {stmt.lineno}"
                        changed = True
    return graph


def _tensor_names(body: list[ast.stmt], seeds: Mapping[str, str]) -> dict[str, str]:
    """The names in ``body`` that hold tensors, with or without a graph: ``seeds`` and what is
    computed from them (a slice, a ``.clone()``, a ``.detach()``), until a conversion to numbers
    (``.item()``, ``.tolist()``, ``float()``, ``.shape``) (to a fixed point)."""
    tensors = dict(seeds)
    stmts = list(_statements(body))
    changed = True
    while changed:
        changed = False
        for stmt, _ in stmts:
            if not isinstance(stmt, ast.Assign) or next(_tensor_refs(stmt.value, tensors), None) is None:
                continue
            for target in stmt.targets:
                for name in _bound(target):
                    if name not in tensors:
                        tensors[name] = f"line {stmt.lineno}"
                        changed = True
    return tensors


NUMBERS = frozenset({"item", "tolist", "size", "dim", "numel", "__float__", "__len__"})


def _tensor_refs(expr: ast.AST, tensors: Mapping[str, str]) -> Iterator[str]:
    """The tensor names ``expr`` uses as tensors (not converted to numbers)."""
    if isinstance(expr, ast.Call):
        func = expr.func
        if (isinstance(func, ast.Attribute) and func.attr in NUMBERS) or (
                isinstance(func, ast.Name) and func.id in DETACHING_FUNCS):
            return
    if isinstance(expr, ast.Attribute) and expr.attr in ("shape", "dtype", "device", "ndim", "requires_grad"):
        return
    if isinstance(expr, ast.Name) and expr.id in tensors:
        yield expr.id
        return
    if isinstance(expr, ast.Lambda | ast.JoinedStr | ast.Compare):
        return
    for child in ast.iter_child_nodes(expr):
        yield from _tensor_refs(child, tensors)


def _keeps_tensor(stmt: ast.stmt, holders: set[str], tensors: Mapping[str, str] | None
                  ) -> tuple[str, str, str] | None:
    """(holder, expression, how) where ``stmt`` adds a tensor (no graph needed) to a container
    that outlives the step, or with ``tensors`` None any value: it grows by one every step. (``+=``
    of a tensor without a graph keeps one tensor, not one a step; an item stored under the same
    key every step replaces the last, so only keys that change count.)"""
    def kept(expr: ast.AST) -> bool:
        return tensors is None or next(_tensor_refs(expr, tensors), None) is not None

    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in GROWING_METHODS:
        holder = _holder(call.func.value, holders)
        args = [*call.args, *(k.value for k in call.keywords)]
        if holder is not None and args and any(kept(a) for a in args):
            return holder, _kept_value(stmt), call.func.attr
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript):
        target = stmt.targets[0]
        holder = _holder(target.value, holders)
        if holder is not None and not isinstance(target.slice, ast.Constant) and kept(stmt.value):
            return holder, _kept_value(stmt), "item assignment"
    return None


def _is_method_backward(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and not node.args)


def _text(stmt: ast.stmt, lines: list[str]) -> str:
    """The statement as written on its first line, without a trailing comment."""
    if stmt.lineno > len(lines):
        return ast.unparse(stmt)
    line = lines[stmt.lineno - 1]
    end = stmt.end_col_offset if stmt.end_lineno == stmt.lineno and stmt.end_col_offset else len(line)
    return line[stmt.col_offset:end].strip()


def _kept_value(stmt: ast.stmt) -> str:
    """The expression a statement keeps (its value, or the argument it appends), as written."""
    value = getattr(stmt, "value", None)
    if isinstance(value, ast.Call) and isinstance(stmt, ast.Expr) and value.args:
        value = value.args[0]
    text = ast.unparse(value) if value is not None else "?"
    return text if len(text) <= 60 else text[:57] + "..."


def _bare(expr: ast.AST, graph: Mapping[str, str]) -> Iterator[str]:
    """The graph names ``expr`` uses without cutting the graph (not under .item(), .detach(),
    float(), ...); FORWARD_HERE where ``graph`` holds it and ``expr`` calls something."""
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Attribute) and func.attr in DETACHING_METHODS:
            return
        if isinstance(func, ast.Name) and func.id in DETACHING_FUNCS:
            return
    if isinstance(expr, ast.Attribute) and expr.attr in ("data", "shape", "dtype", "device", "grad"):
        return
    if isinstance(expr, ast.Name) and expr.id in graph:
        yield expr.id
        return
    if isinstance(expr, ast.Call) and FORWARD_HERE in graph:
        yield FORWARD_HERE
        return
    if isinstance(expr, ast.Lambda | ast.JoinedStr):
        return
    for child in ast.iter_child_nodes(expr):
        yield from _bare(child, graph)


def _keeps(stmt: ast.stmt, holders: set[str], graph: Mapping[str, str]) -> tuple[str, str, str] | None:
    """(holder, tensor, how) where ``stmt`` keeps a graph name in something that outlives the step."""
    if isinstance(stmt, ast.AugAssign):
        holder = _holder(stmt.target, holders)
        tensor = next(_bare(stmt.value, graph), None)
        if holder is not None and tensor is not None and holder != tensor:
            return holder, tensor, f"{_op(stmt.op)}="
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target = stmt.targets[0]
        if isinstance(target, ast.Subscript):
            holder = _holder(target.value, holders)
            tensor = next(_bare(stmt.value, graph), None)
            if holder is not None and tensor is not None:
                return holder, tensor, "item assignment"
        holder = _holder(target, holders)
        if holder is not None and isinstance(stmt.value, ast.BinOp) and _reads(stmt.value, holder.split(".")[0]):
            tensor = next((n for n in _bare(stmt.value, graph) if n != holder), None)
            if tensor is not None:
                return holder, tensor, f"{_op(stmt.value.op)}="
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in KEEPING_METHODS:
        holder = _holder(call.func.value, holders)
        tensor = next((n for arg in [*call.args, *(k.value for k in call.keywords)] for n in _bare(arg, graph)), None)
        if holder is not None and tensor is not None:
            return holder, tensor, call.func.attr
    return None


def _holder(node: ast.AST, holders: set[str]) -> str | None:
    """The dotted name of ``node`` when its root outlives the step, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute | ast.Subscript):
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in holders:
        return ".".join([node.id, *reversed(parts)])
    return None


def _op(op: ast.operator) -> str:
    return {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}.get(type(op), "op")
