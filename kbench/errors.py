"""Errors the CLI turns into exit codes. Anything else is a bug and may show a traceback."""


class KbenchError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class BadInput(KbenchError):
    """The user gave something kbench cannot use: one line, exit 2, nothing written is lost."""

    exit_code = 2


def first_line(e: BaseException, limit: int = 300) -> str:
    """`Type: first line of the message`, for a row's reason or a one-line error (kernel errors run long)."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:limit]
