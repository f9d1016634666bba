"""Every command kbench prints for the user to run (a resume line, a baseline to refresh, an engine's command line,
an exported selector to try) is built here, so that pasting it into a shell runs exactly what kbench meant.

    command_line(["kbench", "sweep", "--resume", run_dir])   # -> kbench sweep --resume 'res dir $(x)/quick-...'

Each argument is quoted for a POSIX shell as shlex.join quotes it (a space, `$`, a backtick, a quote: single
quotes), except one holding a control character (a line break, ESC, ...), which gets bash's `$'...'` form with
the character escaped, so the printed command is always one line: bash, zsh and ksh read it back as the same
argument (a plain POSIX sh does not know `$'...'`; no path kbench makes holds such a character).
Placeholders kbench leaves for the user (URL, NAME, MODEL_PATH, BATCH_SIZE) are plain words and stay as they are.
"""
from __future__ import annotations

import os
import shlex

_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\", "'": "\\'"}


def quote(arg: str | os.PathLike) -> str:
    """One argument, quoted for a shell (shlex.quote), on one line whatever it holds."""
    s = os.fspath(arg)
    if not any(ord(c) < 0x20 or ord(c) == 0x7F for c in s):
        return shlex.quote(s)
    return "$'" + "".join(_ESCAPES.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x20 or ord(c) == 0x7F else c)
                          for c in s) + "'"


def command_line(argv) -> str:
    """The arguments as one shell line to paste (shlex.join, with quote's rule for control characters)."""
    return " ".join(quote(a) for a in argv)


def kbench(*args) -> str:
    """`kbench ARGS...` as one shell line."""
    return command_line(["kbench", *args])
