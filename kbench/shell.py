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


# ---- reading a line a user pasted: the words bash would pass, or one line saying why not --------------------------
class NotOneCommand(ValueError):
    """Why a pasted line is not one simple command kbench reads word for word as bash would (the words, never a
    value, in the message)."""


_OPERATORS = ("&&", "||", ";;", ">>", "<<", "&>", ">&", "<&", "|&", ";", "&", "|", "<", ">", "(", ")")
_EXPANDS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_0123456789{(@*#?$!-'\"")
_DQ_ESCAPES = set('$`"\\')
_NAME = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_0123456789")


def _control(c: str) -> str | None:
    """The words for a control character a value cannot hold on one line (None: not one)."""
    from kbench.text import _CONTROL

    if c == "\0":
        return "a NUL byte"
    if c == "\t":
        return "a tab"
    if c == "\n":
        return "a line break"
    if _CONTROL.match(c):
        return f"the control character U+{ord(c):04X}"
    return None


def split(text: str) -> list[str]:
    """The words bash passes to the one simple command ``text`` is (quotes removed, backslash escapes and
    backslash-newline continuations applied, a `#` comment where bash starts one: only at a word's start, `~` and
    `~/path` at a word's start, or after `=` in a VAR=value word, expanded to the home folder), or NotOneCommand
    naming what bash would read otherwise: several commands (a line break between two, `;`, `&&`, `||`, `|`, `&`),
    redirections and subshells (`<`, `>`, `(`), expansions kbench does not do (`$VAR`, `${...}`, `$(...)`,
    backquotes, `$'...'`), globs and braces bash would turn into other words (an unquoted `*`, `?`, `[`,
    `{a,b}`), a quote left open, and a control character in a word (a tab or a line break inside a value, a NUL:
    a value kbench would print back on more than one line, or that bash cuts). Linear in the text's length."""
    words: list[str] = []
    cur: list[str] | None = None
    lines_with_words = 0  # physical lines holding a word: a second one is a second command
    line_has_word = False
    i, n = 0, len(text)

    def refuse(what: str, at: int) -> NotOneCommand:
        line = text.count("\n", 0, at) + 1
        return NotOneCommand(f"{what} (line {line}, column {at - (text.rfind(chr(10), 0, at) + 1) + 1})")

    def start() -> list[str]:
        nonlocal cur, line_has_word, lines_with_words
        if cur is None:
            cur = []
            if not line_has_word:
                line_has_word = True
                lines_with_words += 1
                if lines_with_words > 1:
                    raise refuse("several commands, one a line: kbench reads one server command (join a long "
                                 "one with a backslash at each line's end)", i)
        return cur

    def end() -> None:
        nonlocal cur
        if cur is not None:
            words.append("".join(cur))
            cur = None

    def tilde(at: int) -> int:
        """`~` or `~user` (then `/`, `:` or the word's end) at ``at``, expanded into cur; the index after it."""
        import os.path

        j = at + 1
        while j < n and (text[j] in _NAME or text[j] in ".-"):
            j += 1
        if j < n and text[j] not in "/: \t\n":
            return at
        home = os.path.expanduser(text[at:j])
        if home.startswith("~"):
            return at  # no such user: bash leaves the word as it is
        start().append(home)
        return j

    while i < n:
        c = text[i]
        if c == "\\":
            if i + 1 >= n:
                raise refuse("a backslash ends the text (nothing follows it)", i)
            nxt = text[i + 1]
            if nxt == "\n":
                i += 2
                continue
            what = _control(nxt)
            if what:
                raise refuse(f"{what} inside a value", i + 1)
            start().append(nxt)
            i += 2
        elif c in " \t":
            end()
            i += 1
        elif c == "\n":
            end()
            line_has_word = False
            i += 1
        elif c == "#" and cur is None:
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c == "'":
            j = text.find("'", i + 1)
            if j < 0:
                raise refuse("a ' quote is not closed", i)
            for k in range(i + 1, j):
                what = _control(text[k])
                if what:
                    raise refuse(f"{what} inside a quoted value", k)
            start().append(text[i + 1:j])
            i = j + 1
        elif c == '"':
            buf = start()
            j = i + 1
            while True:
                if j >= n:
                    raise refuse('a " quote is not closed', i)
                d = text[j]
                if d == '"':
                    break
                if d == "\\" and j + 1 < n and (text[j + 1] in _DQ_ESCAPES or text[j + 1] == "\n"):
                    if text[j + 1] != "\n":
                        buf.append(text[j + 1])
                    j += 2
                    continue
                if d == "`" or (d == "$" and j + 1 < n and text[j + 1] in _EXPANDS and text[j + 1] not in "'\""):
                    raise refuse(f"a shell expansion ({text[j:j + 2]}...) in a value: kbench reads the line as "
                                 "written and does not expand it; write the value out", j)
                what = _control(d)
                if what:
                    raise refuse(f"{what} inside a quoted value", j)
                buf.append(d)
                j += 1
            i = j + 1
        elif c == "$" and i + 1 < n and text[i + 1] in _EXPANDS:
            raise refuse(f"a shell expansion ({text[i:i + 2]}...): kbench reads the line as written and does not "
                         "expand it; write the value out", i)
        elif c == "`":
            raise refuse("a command substitution (`...`): kbench reads the line as written; write the value out", i)
        elif c in ";&|<>()":
            op = next(o for o in _OPERATORS if text.startswith(o, i))
            what = {";": "a second command after `;`", "&&": "a second command after `&&`",
                    "||": "a second command after `||`", "|": "a pipe `|`", "&": "a background `&`",
                    "(": "a subshell `(`", ")": "a subshell `)`"}.get(op, f"a redirection `{op}`")
            raise refuse(f"{what}: kbench reads one server command, not shell syntax", i)
        elif c in "*?[" or (c == "{" and _brace(text, i)):
            raise refuse(f"an unquoted {c} (bash would expand it into other words, e.g. file names): quote "
                         "the value", i)
        elif c == "~" and (cur is None or (not words_started_value(cur) and _assignment(cur))):
            j = tilde(i)
            if j == i:
                start().append(c)
                i += 1
            else:
                i = j
        else:
            what = _control(c)
            if what:
                raise refuse(f"{what} in the line", i)
            start().append(c)
            i += 1
    end()
    return words


def words_started_value(cur: list[str]) -> bool:
    """A VAR= word whose value already began (a `~` only expands right after the `=`)."""
    s = "".join(cur)
    return not s.endswith("=")


def _assignment(cur: list[str]) -> bool:
    s = "".join(cur)
    return s.endswith("=") and s[:-1].isidentifier() and s[:1] not in "0123456789"


def _brace(text: str, at: int) -> bool:
    """An unquoted `{` that opens a brace expansion bash would make two words of (`{a,b}`, `{1..3}`)."""
    j = at + 1
    while j < len(text) and text[j] not in " \t\n":
        if text[j] == "}":
            inner = text[at + 1:j]
            return "," in inner or ".." in inner
        j += 1
    return False
