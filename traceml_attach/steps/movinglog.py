"""A moving log: a window's items appended at the end and forgotten from the front, handed out
without copying them (a data structure of the live step engine, not logging).

A live tick hands every rank's segments, boundaries, intervals and steps to the analysis it
returns. Copying them into tuples every tick costs little in itself but touches every item
(~1,000 a rank, most of them cold in the CPU cache): at 64 ranks, a few milliseconds a tick.
A Log is appended to at the end and forgets from the front by moving a head, so a view of it
(the list and the bounds it had) stays valid as the log moves on; changing an item in place,
or dropping the forgotten head, first copies the list if a view may still read it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar, overload

T = TypeVar("T")
COMPACT = 512   # the forgotten head is dropped once it is this long and half of the list


class LogView(Sequence[T]):
    """The items a Log held when the view was taken, in order."""

    __slots__ = ("hi", "items", "lo")

    def __init__(self, items: list[T], lo: int, hi: int) -> None:
        self.items, self.lo, self.hi = items, lo, hi

    def __len__(self) -> int:
        return self.hi - self.lo

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...

    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        if isinstance(index, slice):
            return tuple(self.items[self.lo:self.hi][index])
        n = self.hi - self.lo
        if not -n <= index < n:
            raise IndexError(index)
        return self.items[self.lo + index if index >= 0 else self.hi + index]

    def __iter__(self) -> Iterator[T]:
        return itertools.islice(self.items, self.lo, self.hi)

    def __repr__(self) -> str:
        return f"LogView({list(self)!r})"


class Log(Sequence[T]):
    """Items in order, appended at the end and forgotten from the front (see the module doc)."""

    __slots__ = ("head", "items", "shared")

    def __init__(self, items: Iterable[T] = ()) -> None:
        self.items: list[T] = list(items)
        self.head = 0
        self.shared = False   # a view may read the list

    def __len__(self) -> int:
        return len(self.items) - self.head

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...

    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        if isinstance(index, slice):
            return tuple(self.items[self.head:][index])
        if index < 0:
            index += len(self.items) - self.head
        if not 0 <= index < len(self.items) - self.head:
            raise IndexError(index)
        return self.items[self.head + index]

    def __iter__(self) -> Iterator[T]:
        return itertools.islice(self.items, self.head, None)

    def append(self, item: T) -> None:
        self.items.append(item)

    def extend(self, items: Iterable[T]) -> None:
        self.items.extend(items)

    def first(self) -> T | None:
        """The first item; None where there is none (a loop that forgets from the front)."""
        return self.items[self.head] if self.head < len(self.items) else None

    def popleft(self) -> T:
        item = self.items[self.head]
        self.head += 1
        if self.head >= COMPACT and 2 * self.head >= len(self.items):
            self.items = self.items[self.head:]   # a new list: the views keep the old one
            self.head, self.shared = 0, False
        return item

    def drop(self, count: int) -> None:
        """Forget the first ``count`` items."""
        for _ in range(count):
            self.popleft()

    def __setitem__(self, index: int, item: T) -> None:
        self._own()
        self.items[self.head + index if index >= 0 else index] = item

    def splice(self, lo: int, hi: int, items: Iterable[T]) -> None:
        """Replace items lo..hi (counted from the front)."""
        self._own()
        self.items[self.head + lo:self.head + hi] = items

    def reset(self, items: Iterable[T]) -> None:
        self.items, self.head, self.shared = list(items), 0, False

    def _own(self) -> None:
        if self.shared:
            self.items = self.items[self.head:]
            self.head, self.shared = 0, False

    def view(self) -> LogView[T]:
        self.shared = True
        return LogView(self.items, self.head, len(self.items))
