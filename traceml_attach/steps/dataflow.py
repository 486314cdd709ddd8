"""What the training loop's own lines compute the loss from: the data flow of its source.

The agent sends the job's own files (``source`` frames). In the training loop's body, the loss is
what ``.backward()`` is called on; the lines that make the tensors it is computed from, directly
or through other names, feed the step. A line among them that does no forward, backward or
update work of its own (its samples fall to no other rule) makes the step's input, whatever the
function it calls is named: a hand-written loader (``X, Y = fetch(split)``), a prefetch at the
end of the body (nanoGPT's ``X, Y = get_batch('train')``). classify.py labels it input.

Pure functions of the source text, cached per (file text, function): the batch and the live step
engines ask the same question many times.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import lru_cache

BACKWARD = "backward"


def backward_of(node: ast.AST) -> str | None:
    """The name ``node`` calls backward on: ``loss.backward()``, ``scaler.scale(loss).backward()``,
    ``accelerator.backward(loss)`` / ``engine.backward(loss)`` / ``torch.autograd.backward(loss)``."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == BACKWARD:
        if isinstance(func.value, ast.Name) and not node.args:
            return func.value.id
        if isinstance(func.value, ast.Call) and func.value.args and isinstance(func.value.args[0], ast.Name):
            return func.value.args[0].id
        if node.args and isinstance(node.args[0], ast.Name):
            return node.args[0].id
    return None


def bound(target: ast.AST) -> list[str]:
    """The names an assignment target binds."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [n for elt in target.elts for n in bound(elt)]
    if isinstance(target, ast.Starred):
        return bound(target.value)
    return []


def statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement of ``body``, nested blocks included (not nested functions or classes)."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for field in ("body", "orelse", "finalbody"):
            yield from statements(getattr(stmt, field, None) or [])
        for handler in getattr(stmt, "handlers", None) or []:
            yield from statements(handler.body)


@lru_cache(maxsize=64)
def feeding_lines(text: str, func: str) -> frozenset[int]:
    """The lines of ``func``'s training loop (``<module>`` for a module-level one) that assign a
    name the loss is computed from: the loop is the innermost one whose body calls backward."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return frozenset()
    name = func.rsplit(".", 1)[-1]
    scopes: list[ast.AST] = [tree] if func == "<module>" else [
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name]
    lines: set[int] = set()
    for scope in scopes:
        loop = _training_loop(scope)
        if loop is not None:
            lines |= _ancestors(list(statements(loop.body)))
    return frozenset(lines)


def _training_loop(scope: ast.AST) -> ast.For | ast.While | None:
    """The innermost loop of ``scope`` (not of a function inside it) whose body calls backward."""
    found: ast.For | ast.While | None = None
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        if isinstance(node, ast.For | ast.While) and any(backward_of(n) for n in ast.walk(node)) and (
                found is None or found.lineno <= node.lineno <= (node.end_lineno or 0) <= (found.end_lineno or 0)):
            found = node   # the first one, or one inside it
        todo.extend(ast.iter_child_nodes(node))
    return found


def _ancestors(body: list[ast.stmt]) -> set[int]:
    """The lines of the assignments the backward'd names are computed from (to a fixed point)."""
    wanted = {name for stmt in body for node in ast.walk(stmt) if (name := backward_of(node))}
    lines: set[int] = set()
    changed = True
    while changed:
        changed = False
        for stmt in body:
            if not isinstance(stmt, ast.Assign | ast.AnnAssign | ast.AugAssign) or stmt.value is None:
                continue
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if stmt.lineno in lines or not any(name in wanted for t in targets for name in bound(t)):
                continue
            lines.add(stmt.lineno)
            wanted |= {n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name)}
            changed = True
    return lines
