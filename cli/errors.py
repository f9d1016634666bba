"""kbench's own errors, file-system errors on a path and closed pipes as one `error: ...` line and their exit
code (2 for bad input), never a traceback."""
from __future__ import annotations

import errno
import functools
import os
import signal
import sys
from typing import NoReturn

import click

from kbench.errors import KbenchError
from kbench.text import one_line

# errors of the file system that mean "this output (or input) path cannot be used": one line, exit 2
_PATH_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOTDIR, errno.EISDIR,
                errno.EDQUOT, errno.EFBIG, errno.EEXIST, errno.ENAMETOOLONG}


def closed_pipe() -> None:
    """The reader of our output went away (`kbench report | head -2`): it has what it wanted. Send the
    rest of our output nowhere (no 'Exception ignored' at exit) and end quietly with 0."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    sys.exit(0)


def rich_closed_pipe(console) -> None:
    """rich's Console.on_broken_pipe: rich itself would exit 1; one_line_errors then ends quietly with 0."""
    raise BrokenPipeError(errno.EPIPE, "closed pipe")


def stopped(e: KeyboardInterrupt) -> NoReturn:
    """Ctrl-C, or SIGTERM (kbench.runs.signals.Terminated): one line, exit 128 + the signal's number (130, 143)."""
    signum = getattr(e, "signum", signal.SIGINT)
    click.echo(f"error: stopped by {signal.Signals(signum).name}; outputs not yet replaced are as they were", err=True)
    sys.exit(128 + signum)


def one_line_errors(fn):
    """Wraps a command (or the group's invoke): also when a command runs outside the group (tests, plugins)."""
    @functools.wraps(fn)
    def wrapper(*a, **kw):
        try:
            return fn(*a, **kw)
        except KbenchError as e:
            click.echo(f"error: {one_line(e)}", err=True)  # one line whatever the input brought (kbench.text)
            sys.exit(e.exit_code)
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM under kbench.runs.signals (a replace not yet done)
            stopped(e)
        except BrokenPipeError:
            closed_pipe()
        except OSError as e:
            if e.errno == errno.EPIPE:
                closed_pipe()
            if e.errno not in _PATH_ERRNOS:
                _stopped_or_raise(e)
            where = f"{e.filename}: " if e.filename else ""
            click.echo(f"error: {one_line(where)}{one_line(e.strerror or e)}", err=True)
            sys.exit(2)
        except ValueError as e:
            if str(e).startswith("Exceeds the limit") and "integer string conversion" in str(e):
                # Python refuses to read an integer of over 4,300 digits, wherever the input held it (a JSON
                # field, a TOML value, an option): no size kbench takes is near that
                click.echo("error: the input holds an integer of more than 4,300 digits (Python reads none that "
                           "long; no size kbench takes is near it)", err=True)
                sys.exit(2)
            _stopped_or_raise(e)
        except Exception as e:
            _stopped_or_raise(e)
    return wrapper


def _stopped_or_raise(e: Exception) -> None:
    """An exception a Ctrl-C or SIGTERM caused (an import it cut in half raises RuntimeError or ImportError, not
    KeyboardInterrupt) ends as that signal does; any other goes up."""
    from kbench.runs.signals import interrupt_in

    cause = interrupt_in(e)
    if cause is None:
        raise e
    stopped(cause)
