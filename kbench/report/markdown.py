"""report.md from the report's blocks. Result strings are HTML-escaped (markdown renders raw HTML) and
table pipes are escaped, so a kernel name or reason cannot inject markup or break a table."""
from __future__ import annotations

import html
from pathlib import Path


def _esc(s: str) -> str:
    return html.escape(str(s), quote=False).replace("|", "\\|").replace("\n", " ")


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
            headers, rows = b[1], b[2]
            lines.append("| " + " | ".join(map(_esc, headers)) + " |")
            lines.append("|" + "---|" * len(headers))
            lines += ["| " + " | ".join(map(_esc, r)) + " |" for r in rows]
            lines.append("")
        elif kind == "img":
            rel = Path(b[1]).relative_to(out_dir) if Path(b[1]).is_relative_to(out_dir) else Path(b[1]).name
            lines += [f"![{_esc(b[2])}]({rel.as_posix()})", "", f"*{_esc(b[2])}*", ""]
    return "\n".join(lines)
