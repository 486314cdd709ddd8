"""The training phases, once: their order, labels, colours and the component each belongs to.

Every table, column, colour and component sum in the codebase reads this registry; adding a
phase means adding one row here (and rules that produce it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Phase:
    name: str        # as in rules.toml and the summary JSON
    head: str        # column head of the text summary
    short: str       # column head of the TUI
    tiny: str        # the one-line live view
    colour: str      # Rich colour of the TUI
    component: str   # input | compute | wait: what the diagnoses add up


REGISTRY: tuple[Phase, ...] = (
    Phase("input", "Input", "Input", "in", "dodger_blue1", "input"),
    Phase("h2d", "H2D", "H2D", "h2d", "cyan", "input"),
    Phase("forward", "Forward", "Fwd", "fwd", "green3", "compute"),
    Phase("backward", "Backward", "Bwd", "bwd", "dark_orange", "compute"),
    Phase("optimizer", "Optim", "Optim", "opt", "medium_purple1", "compute"),
    Phase("wait", "Wait*", "Wait*", "wait", "grey50", "wait"),
)

PHASES: tuple[str, ...] = tuple(p.name for p in REGISTRY)
BY_NAME: dict[str, Phase] = {p.name: p for p in REGISTRY}
COMPONENTS: dict[str, tuple[str, ...]] = {
    c: tuple(p.name for p in REGISTRY if p.component == c) for c in ("input", "compute", "wait")
}
# The phases of the training loop itself (not waiting): a stack in one of them is inside a step.
WORK_PHASES: frozenset[str] = frozenset(COMPONENTS["input"] + COMPONENTS["compute"])

# Phases that nest: the time of a phase found inside another belongs to the inner one when the
# outer one yields to it (``classify`` scans from the loop frame inwards). The optimizer is only
# its own work: forward and backward inside ``optimizer.step(closure)`` are forward and backward
# (Lightning, LBFGS). Compilation inside a compiled model's call is compilation, not forward or
# backward. Everything else: the outermost phase decides (input that calls nn.functional is input,
# forward under no_grad in an eval function is eval).
NESTING: dict[tuple[str, str | None], frozenset[tuple[str, str | None]]] = {
    ("optimizer", None): frozenset({("forward", None), ("backward", None), ("wait", "compile")}),
    # an update under no_grad (a decorated `sgd_step`) is the update, not eval or a metric
    ("wait", "eval"): frozenset({("optimizer", None)}),
    ("wait", "metric"): frozenset({("optimizer", None)}),
    # Lightning's closure called by itself (a micro-batch that accumulates: rules.toml)
    ("wait", "closure"): frozenset({("forward", None), ("backward", None), ("optimizer", None), ("wait", "compile")}),
    ("forward", None): frozenset({("wait", "compile")}),
    ("backward", None): frozenset({("wait", "compile")}),
}


def yields(outer: str, outer_label: str | None, inner: str | None = None, inner_label: str | None = None) -> bool:
    """Whether ``outer`` gives way to ``inner`` nested in it; without ``inner``, to any phase."""
    ways = NESTING.get((outer, outer_label))
    if ways is None:
        return False
    return inner is None or (inner, inner_label) in ways
