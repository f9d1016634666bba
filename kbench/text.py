"""Text from inputs (a run's kernel names and case ids, a manifest's device, a policy, a server's answer) made safe
for where kbench shows it, in one place each:

    terminal(s)   a terminal or log: control characters (ESC, NUL, BEL, DEL, C1, bidi overrides) shown as
                  escapes (``\\x1b``), so no input moves the cursor, recolours or hides text; newlines and tabs kept
    one_line(s)   one line (an error line): terminal(), and newlines shown as ``\\n``
    markdown(s)   markdown text or a table cell (a PR comment, report.md): one_line()'s characters, HTML escaped
                  (markdown renders raw HTML), pipes escaped, newlines folded
    code(s)       a markdown code span of ``s`` whatever backticks it holds
    xml(s)        XML 1.0 text or an attribute (JUnit): terminal(), and what XML cannot hold (NUL, lone
                  surrogates, U+FFFE) shown as escapes; ElementTree escapes the rest
    recorded(v)   a value a run may lack, for a message: repr(v), or `not recorded` (never `None`)

kbench's own text goes through them unchanged: they touch only what an input could bring.
"""
from __future__ import annotations

import html
import re

# C0 controls but tab and newline; DEL and C1; zero-width and bidirectional formatting (a name that reads as
# another); line and paragraph separators
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2028\u2029\u2066-\u2069\ufeff]")
# what XML 1.0 cannot hold at all, after terminal() (which leaves tab and newline)
_NOT_XML = re.compile("[\ud800-\udfff\ufffe\uffff]")


def _escape(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def terminal(s) -> str:
    s = str(s)
    return _CONTROL.sub(_escape, s) if _CONTROL.search(s) else s


def one_line(s) -> str:
    return terminal(s).replace("\n", "\\n")  # a carriage return is a control character: terminal() showed it


def markdown(s) -> str:
    return html.escape(terminal(s), quote=False).replace("|", "\\|").replace("\n", " ")


def code(s) -> str:
    s = terminal(s).replace("\n", " ")
    runs = re.findall(r"`+", s)
    fence = "`" * (max(map(len, runs)) + 1 if runs else 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}".replace("|", "\\|")


def recorded(v) -> str:
    """A value read from a run (a model, a backend) for a message: repr(), or `not recorded` where the run has none
    (never `None` in a line the user reads)."""
    return "not recorded" if v is None or v == "" else repr(v)


def xml(s) -> str:
    s = terminal(s)
    return _NOT_XML.sub(_escape, s) if _NOT_XML.search(s) else s
