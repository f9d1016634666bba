"""The timing states a case can be measured in (the `power` axis takes its values from here).

unthrottled: duty-cycled, off the power cap (the default); sustained: after a pre-load to the steady state at
the power cap, timed back to back (kbench.timing.power). On a machine without CUDA every state is timed by the
wall clock (kbench.timing.timer.WallClockTimer).
"""
from __future__ import annotations

POWER_STATES = ("unthrottled", "sustained")
DEFAULT_STATE = POWER_STATES[0]
