"""Run the kbench CLI with one function made to stop at a chosen moment, so a test can signal it exactly there.

    python tests/pause_at.py MODULE:FUNCTION[#N] before|after MARKER -- kbench-args...

Before (or after) the first (or the Nth) call of MODULE.FUNCTION the process writes MARKER and waits (until MARKER.go exists,
at most 120 s), so the test waits for MARKER and sends SIGTERM or SIGINT at that moment: the dangerous ones of a
multi-file replace (the new folder half written; the swap itself, where kbench holds the signal until the swap is
done: the test then writes MARKER.go to let it go on). Test-only; kbench has no such hook.
"""
from __future__ import annotations

import functools
import importlib
import signal
import sys
import time
from pathlib import Path


def main() -> None:
    # a shell's background job (`cmd &` without job control) starts with SIGINT ignored, and Python then installs
    # no KeyboardInterrupt handler: Ctrl-C as a terminal sends it must reach kbench wherever the tests run
    signal.signal(signal.SIGINT, signal.default_int_handler)
    target, when, marker = sys.argv[1:4]
    target, _, nth = target.partition("#")  # MODULE:FUNCTION#N: at its Nth call (default the first)
    nth = int(nth or 1)
    assert sys.argv[4] == "--"
    args = sys.argv[5:]
    mod_name, func_name = target.split(":")
    mod = importlib.import_module(mod_name)
    orig = getattr(mod, func_name)
    state = {"done": False, "calls": 0}

    def pause():
        state["calls"] += 1
        if not state["done"] and state["calls"] >= nth:
            state["done"] = True
            Path(marker).write_text("here\n")
            t0 = time.monotonic()
            while time.monotonic() - t0 < 120 and not Path(marker + ".go").exists():  # the signal arrives here
                time.sleep(0.05)

    @functools.wraps(orig)
    def wrapped(*a, **kw):
        if when == "before":
            pause()
        out = orig(*a, **kw)
        if when == "after":
            pause()
        return out

    setattr(mod, func_name, wrapped)
    from kbench.cli.main import cli

    cli.main(args, prog_name="kbench")


if __name__ == "__main__":
    main()
