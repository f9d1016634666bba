"""Errors the CLI turns into exit codes. Anything else is a bug and may show a traceback."""


class KbenchError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class BadInput(KbenchError):
    """The user gave something kbench cannot use: one line, exit 2, nothing written is lost."""

    exit_code = 2
