"""The one writer of a command's answer to standard output (`kbench select`, and any command whose output is
its answer): the answer is written whole or the command says it was not.

- stdout closed (`>&-`): nothing can take the answer: one line on stderr, exit 2;
- a write that fails (`> /dev/full`, an I/O error): one line on stderr, exit 2;
- the reader went away (`| head -c0`, `| head -1`): a closed pipe is the reader's choice, not an error: exit 0,
  no traceback (kbench.cli.errors.closed_pipe).
The exported selector (kbench.recommend.export) holds its own copy of this rule: it is dependency-free.
"""
from __future__ import annotations

import errno
import os
import sys

from kbench.cli.errors import closed_pipe
from kbench.errors import BadInput


def write_answer(text: str) -> None:
    """``text`` and a newline to stdout, flushed; BadInput (exit 2) when it cannot be written."""
    out = sys.stdout
    if out is None or _closed(out):
        raise BadInput("cannot write the answer: standard output is closed")
    try:
        out.write(text if text.endswith("\n") else text + "\n")
        out.flush()
    except BrokenPipeError:
        closed_pipe()
    except OSError as e:
        if e.errno == errno.EPIPE:
            closed_pipe()
        _drop_unwritten()
        raise BadInput(f"cannot write the answer to standard output: {e.strerror or e}") from None


def _closed(out) -> bool:
    try:
        fd = out.fileno()
    except (OSError, ValueError, AttributeError):  # not a file (a test's capture): its writes tell
        return False
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def _drop_unwritten() -> None:
    """What stdout still buffers goes nowhere: Python's flush at exit would print a second error about it."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
