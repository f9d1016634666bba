"""report.md from the report's blocks. Result strings are HTML-escaped (markdown renders raw HTML) and
table pipes are escaped, so a kernel name or reason cannot inject markup or break a table."""
from __future__ import annotations

from pathlib import Path

from kbench import text

# a markdown table cell and the report's results: HTML-escaped (markdown renders raw HTML), pipes escaped,
# newlines folded and control characters shown as escapes (kbench.text.markdown), so no value can inject markup
# or break its table
cell = text.markdown


def table(headers: list, rows: list, esc=cell) -> list[str]:
    """A markdown table's lines, every header and cell through `esc`."""
    return (["| " + " | ".join(map(esc, headers)) + " |", "|" + "---|" * len(headers)]
            + ["| " + " | ".join(map(esc, r)) + " |" for r in rows])


_esc = text.markdown


def render(doc: list[tuple], out_dir: Path) -> str:
    lines: list[str] = []
    for b in doc:
        kind = b[0]
        if kind == "h":
            lines += ["#" * b[1] + " " + _esc(b[2]), ""]
        elif kind == "p":
            lines += [_esc(b[1]), ""]
        elif kind == "list":
            lines += [f"- {_esc(i)}" for i in b[1]] + [""]
        elif kind == "table":
            lines += table(b[1], b[2], _esc) + [""]
        elif kind == "img":
            rel = Path(b[1]).relative_to(out_dir) if Path(b[1]).is_relative_to(out_dir) else Path(b[1]).name
            lines += [f"![{_esc(b[2])}]({rel.as_posix()})", "", f"*{_esc(b[2])}*", ""]
    return "\n".join(lines)
