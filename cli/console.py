"""The rich Console every command prints with. Without a terminal (CI logs, `| tee`, a file) rich would
render at 80 columns and break words inside table cells (`trtl/lm-d/ecod/e`): there tables get LOG_WIDTH
columns instead, unless COLUMNS says otherwise."""
from __future__ import annotations

import os

import click
from rich.console import Console

from kbench.text import terminal

LOG_WIDTH = 250
HIGHLIGHT_MAX = 1000  # characters: a longer string (an input's, never kbench's own) is printed without highlighting


class SafeConsole(Console):
    """A Console whose every string (a printed line, a table cell) has its control characters shown as escapes
    (kbench.text.terminal): a kernel name or device from a run cannot move the cursor or recolour the terminal.
    rich's own styling is added after, as usual; a string of more than HIGHLIGHT_MAX characters is not highlighted
    (rich's highlighter takes minutes on 100 KB)."""

    def render_str(self, text: str, **kw):
        if len(text) > HIGHLIGHT_MAX:  # rich's highlighter is quadratic in a long text (a 100 KB device name)
            kw["highlight"] = False
        return super().render_str(terminal(text), **kw)


def make_console(**kw) -> Console:
    c = SafeConsole(**kw)
    if not c.is_terminal and "width" not in kw and not os.environ.get("COLUMNS"):
        c = SafeConsole(width=LOG_WIDTH, **kw)
    return c


def print_command(console: Console, line: str, style: str | None = None) -> None:
    """A line that holds a command to paste (recommend's `set: ...`): printed whole on one line, whatever the
    console's width. rich wraps what it prints at that width (a log's 250 columns, a terminal's 100), and a pasted
    first half runs another command; a terminal may fold the one long line on screen, but a copy takes it whole."""
    from rich.markup import escape

    console.print(escape(line), style=style, soft_wrap=True, highlight=False)


def echo(message="", err: bool = False, **kw) -> None:
    """click.echo of text an input may hold (a warning naming a kernel, a file, a device), control characters
    shown as escapes."""
    click.echo(terminal(message), err=err, **kw)
