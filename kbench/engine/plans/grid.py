"""The full-grid sweep plan: every case of the grid, or of its shard, in one round."""
from __future__ import annotations

from typing import Iterator

from kbench.cases.case import Case
from kbench.engine.plans.base import PlannedCase, Round, SweepState
from kbench.engine.shards import shard_cases


class FullGridPlan:
    """SweepPlan: the grid's cases (those of shard i/N with `shard`), each with every kernel, in grid order."""
    intro = ""

    def __init__(self, cases: list[Case], shard: tuple[int, int] | None = None):
        self.grid = list(cases)
        self.shard = shard

    def manifest_fields(self) -> dict:
        return {"shard": {"index": self.shard[0], "count": self.shard[1]} if self.shard else None}

    def open(self, run, kernels: dict[str, str]) -> None:
        self.shard = self.shard or run.shard  # a resumed slice stays its slice

    def cases(self) -> list[Case]:
        return shard_cases(self.grid, self.shard)

    def rounds(self, state: SweepState) -> Iterator[Round]:
        yield Round("measuring", [PlannedCase(c) for c in self.cases()])

    def close(self, run) -> None:
        pass
