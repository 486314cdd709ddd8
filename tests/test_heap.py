"""A collector's GC policy (runtime/heap.py): what is alive is frozen each second, a cycle frozen
while alive is still collected at the next thaw, and the process's GC is put back at the end."""

from __future__ import annotations

import gc
import weakref

from traceml_attach.runtime.heap import COLLECTOR_GC_THRESHOLDS, FREEZE_EVERY_S, THAW_EVERY_S, FrozenHeap


class Node:
    def __init__(self) -> None:
        self.me = self   # a cycle: only the cyclic GC frees it


def test_a_collector_heap_freezes_each_second_thaws_and_restores_the_gc():
    gc.unfreeze()
    before = gc.get_threshold()
    heap = FrozenHeap(now=0.0)
    try:
        heap.tick(FREEZE_EVERY_S / 2)
        assert gc.get_freeze_count() == 0 and gc.get_threshold() == before   # not yet due
        cycle = Node()
        gone = weakref.ref(cycle)
        heap.tick(FREEZE_EVERY_S)
        assert gc.get_freeze_count() > 0 and gc.get_threshold() == COLLECTOR_GC_THRESHOLDS
        # the cycle turns to garbage after it was frozen: a collection leaves it alone...
        del cycle
        gc.collect()
        assert gone() is not None
        # ...until the thaw goes through everything once
        heap.tick(THAW_EVERY_S)
        assert gone() is None and gc.get_freeze_count() > 0
    finally:
        heap.restore()
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before
