"""The gate's output formats behind one small interface (after hyperfine's export/ and guidellm's output
registry): a format is a module with a `write_X(result, path)` function (markdown, junit, json_out) and
one `Exporter` line in `formats()`, in the order they are written; `kbench gate` makes one `--NAME FILE`
option per entry. A new format is its module plus its line here.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kbench.errors import BadInput
from kbench.gate.compare import GateResult


@dataclass(frozen=True)
class Exporter:
    name: str  # the option: --NAME FILE
    help: str
    write: Callable[[GateResult, Path | None], object]  # path None: the format was not asked for
    always: bool = False  # called with None too (markdown also appends to $GITHUB_STEP_SUMMARY)


def formats() -> tuple[Exporter, ...]:
    from kbench.gate import json_out, junit, markdown

    return (
        Exporter("markdown", "Write the markdown summary here.", markdown.write_markdown, always=True),
        Exporter("junit", "Write JUnit XML here.", junit.write_junit),
        Exporter("json", "Write the result as JSON to this FILE (kernels, env and select take --json as a flag "
                 "that prints JSON; the gate's JSON is a report to keep beside --markdown and --junit).",
                 json_out.write_json),
    )


def check_paths(paths: dict[str, str | Path | None]) -> None:
    """Every asked-for output can be written, and $GITHUB_STEP_SUMMARY (where set) appended to: BadInput before
    the gate judges, so no report is written when another cannot be."""
    import os

    from kbench.runs.outputs import appendable_file, writable_file

    for ex in formats():
        if paths.get(ex.name) is not None:
            if str(paths[ex.name]).strip() == "-":  # not stdout here: it would be a file named '-'
                raise BadInput(f"--{ex.name} -: the gate prints its table on stdout; give a file name")
            writable_file(paths[ex.name], f"--{ex.name}")
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        appendable_file(os.environ["GITHUB_STEP_SUMMARY"], "GITHUB_STEP_SUMMARY")


def export(res: GateResult, paths: dict[str, str | Path | None]) -> None:
    """Write every asked-for format; a file that cannot be written is one BadInput line."""
    try:
        for ex in formats():
            path = paths.get(ex.name)
            if path or ex.always:
                ex.write(res, Path(path) if path else None)
    except OSError as e:
        raise BadInput(f"cannot write the gate report: {e}") from None
