"""The adaptive sweep's settings (`kbench sweep --adaptive`; the planner is kbench.engine.plans.adaptive). Their own light
module, so that the command line's defaults are these without importing the planner (pandas)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from kbench.errors import BadInput


@dataclass
class AdaptiveOptions:
    """Settings of an adaptive sweep (`kbench sweep --adaptive`). Fractions, not percents."""
    regret_bound: float = 0.02  # stop when no unmeasured point can cost more than this (2%)
    # coarse_step and prune_factor were 4 and 2 until the H200's full draft-extend grid (kv 512/4096/32768,
    # issue #15; results/baselines/h200-draft-extend-full-kv512-4096-32768) showed them measuring 42% of it;
    # 8 and 1.5 measure 30% of it (replayed on its rows; 31% in a real H200 run), with the same regret (mean
    # 0.05%, worst 1.64%), and 39% instead of 52% of the committed kv 4096 baseline
    coarse_step: int = 8  # every 8th value of each axis (and the last) in the coarse sub-grid: ends and middle
    close: float = 0.05  # a runner-up within 5% of the winner at one end may overtake between the ends
    prune_factor: float = 1.5  # not measured between neighbours where it is this much slower than the best
    # a kernel that timed within `twin` of another at every measured neighbour is not measured between them and
    # taken to be as fast as that twin (on the H200 decode-wrapper and fa2-prefill, the same FlashInfer prefill
    # kernel for q_len > 1, are within 1% nearly everywhere): 30% -> 27% of the full grid's measurements
    twin: float = 0.01
    budget_measurements: int | None = None  # stop after this many timed (kernel, case) measurements in the run
    budget_minutes: float | None = None  # stop after this many minutes of sweep wall time (all calls of the run)

    def check(self) -> "AdaptiveOptions":
        def number(v, integer=False):
            kinds = (int,) if integer else (int, float)
            return not isinstance(v, bool) and isinstance(v, kinds) and (integer or v == v)

        for name in ("regret_bound", "close", "prune_factor", "twin", "coarse_step", "budget_measurements",
                     "budget_minutes"):
            v = getattr(self, name)
            if not (v is None and name.startswith("budget")) and not number(v, name in ("coarse_step",
                                                                                         "budget_measurements")):
                raise BadInput(f"adaptive {name} {v!r}: expected {'an integer' if name in ('coarse_step', 'budget_measurements') else 'a number'}")
        if not 0 <= self.regret_bound < 1:
            raise BadInput(f"--regret-bound: expected 0 to 100%, got {self.regret_bound * 100:g}%")
        if self.coarse_step < 1:
            raise BadInput(f"--coarse-step: expected >= 1, got {self.coarse_step}")
        if self.prune_factor <= 1:
            raise BadInput(f"--prune-factor: expected > 1, got {self.prune_factor}")
        if not 0 <= self.twin < 0.5:
            raise BadInput(f"twin: expected 0 to 50%, got {self.twin * 100:g}%")
        if self.budget_measurements is not None and self.budget_measurements < 1:
            raise BadInput(f"--budget-measurements: expected >= 1, got {self.budget_measurements}")
        if self.budget_minutes is not None and not 0 < self.budget_minutes < float("inf"):
            raise BadInput(f"--budget-minutes: expected a finite number > 0, got {self.budget_minutes}")
        return self

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "AdaptiveOptions":
        if not isinstance(d, dict):
            raise BadInput(f"the run's adaptive settings are not an object: {d!r}")
        try:
            return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__}).check()
        except TypeError as e:
            raise BadInput(f"the run's adaptive settings are unreadable ({e})") from None
