"""kbench's own errors as one `error: ...` line and their exit code (2 for bad input), never a traceback."""
from __future__ import annotations

import functools
import sys

import click

from kbench.errors import KbenchError


def one_line_errors(fn):
    """Wraps a command (or the group's invoke): also when a command runs outside the group (tests, plugins)."""
    @functools.wraps(fn)
    def wrapper(*a, **kw):
        try:
            return fn(*a, **kw)
        except KbenchError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(e.exit_code)
    return wrapper
