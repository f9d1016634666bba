"""A table's rows made when read: the report shows the first TABLE_ROWS_MAX rows of a table and says how many it
has, and the terminal the first --max-rows, so a table of 56,000 rows (the per-case and realistic tables of a
300,000-row run) need not make the other 55,000 to be shown."""
from __future__ import annotations

from collections.abc import Callable, Sequence


class LazyRows(Sequence):
    """``n`` rows, row i made by ``make(i)`` each time it is read (a list of lists, as a table's rows are, to a
    reader that iterates, slices, counts or compares it)."""

    def __init__(self, n: int, make: Callable[[int], list]):
        self.n, self.make = n, make

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.make(j) for j in range(*i.indices(self.n))]
        if not -self.n <= i < self.n:
            raise IndexError(i)
        return self.make(i % self.n)

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and not isinstance(other, str) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"LazyRows({self.n} rows)"
