"""The rich Console every command prints with. Without a terminal (CI logs, `| tee`, a file) rich would
render at 80 columns and break words inside table cells (`trtl/lm-d/ecod/e`): there tables get LOG_WIDTH
columns instead, unless COLUMNS says otherwise."""
from __future__ import annotations

import os

from rich.console import Console

LOG_WIDTH = 250


def make_console(**kw) -> Console:
    c = Console(**kw)
    if not c.is_terminal and "width" not in kw and not os.environ.get("COLUMNS"):
        c = Console(width=LOG_WIDTH, **kw)
    return c
