"""report.html: one self-contained file (plots embedded as base64 PNG data URIs, inline CSS, no scripts).
Every string from the results goes through html.escape."""
from __future__ import annotations

import base64
import html
from pathlib import Path

CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;font-size:13px;margin:0.5em 0 1.5em}th,td{border:1px solid #ccc;padding:3px 7px}
th{background:#f0f0f0;position:sticky;top:0}tr:nth-child(even){background:#fafafa}
figure{margin:1em 0}img{max-width:100%;border:1px solid #ddd}figcaption{font-size:13px;color:#555}"""


def _e(s) -> str:
    return html.escape(str(s), quote=True)


def render(doc: list[tuple], title: str = "kbench report") -> str:
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{_e(title)}</title>",
           f"<style>{CSS}</style></head><body>"]
    for b in doc:
        kind = b[0]
        if kind == "h":
            out.append(f"<h{b[1]}>{_e(b[2])}</h{b[1]}>")
        elif kind == "p":
            out.append(f"<p>{_e(b[1])}</p>")
        elif kind == "list":
            out.append("<ul>" + "".join(f"<li>{_e(i)}</li>" for i in b[1]) + "</ul>")
        elif kind == "table":
            head = "".join(f"<th>{_e(h)}</th>" for h in b[1])
            body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in b[2])
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif kind == "img":
            data = base64.b64encode(Path(b[1]).read_bytes()).decode("ascii")
            out.append(f'<figure><img alt="{_e(b[2])}" src="data:image/png;base64,{data}">'
                       f"<figcaption>{_e(b[2])}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out)
