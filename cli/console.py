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


def print_command(console: Console, line: str, style: str | None = None) -> None:
    """A line that holds a command to paste (recommend's `set: ...`): printed whole on one line, whatever the
    console's width. rich wraps what it prints at that width (a log's 250 columns, a terminal's 100), and a pasted
    first half runs another command; a terminal may fold the one long line on screen, but a copy takes it whole."""
    from rich.markup import escape

    console.print(escape(line), style=style, soft_wrap=True, highlight=False)
