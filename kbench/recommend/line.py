"""`kbench recommend --current`'s line: read (inline or @FILE, bounded), split into the words bash would pass
(kbench.shell.split: one simple command, or one line saying why not), and its engine, environment and arguments
told apart; every message about it redacted (kbench.redact), never a value of the line echoed.

    engine, env, argv = split_line(read_current("@serve.sh"))

One line in, one line out: the words kbench prices are the words bash runs, and the `set:` line kbench prints
passes the same words back (kbench.shell.quote), so what is priced is what is pasted. A line bash would read as
more than that one command (two lines, `;`, `&&`, `|`, a redirection, `$VAR`, an unquoted glob) or that holds a
control character (a tab or a NUL in a value) is refused in one line naming what and where; so is a wrapper in
front of the server command (`sudo`, `export VAR=...;`, `env`, `nohup`, ...): give the server command itself.
"""
from __future__ import annotations

import contextlib
from pathlib import Path

from kbench import files, redact, shell
from kbench.errors import BadInput

LINE_MAX = 64 << 10  # bytes of a --current line (inline or @FILE): a server's command line is a few KiB

# commands that run another command: the server command is what kbench reads, not what wraps it
WRAPPERS = {"sudo", "doas", "su", "env", "exec", "nohup", "time", "nice", "ionice", "taskset", "numactl", "command",
            "builtin", "eval", "source", ".", "setsid", "stdbuf", "timeout", "xargs", "srun", "mpirun", "torchrun",
            "docker", "podman", "bash", "sh", "zsh", "ssh", "uv", "conda", "pixi", "poetry"}
BUILTINS = {"export", "set", "unset", "declare", "local", "readonly", "cd", "alias"}


def read_current(text: str) -> str:
    """`--current` is the line itself, or @FILE: the file's text (a regular UTF-8 file of at most LINE_MAX bytes;
    a FIFO, a device, a larger file: one line); CRLF line ends read as LF."""
    if not isinstance(text, str):
        raise BadInput("--current: give the server's command line, @FILE or a server-bench run folder")
    if text.startswith("@"):
        data = files.read_bytes(text[1:], f"--current {text}", LINE_MAX)
        text = files.decode(data, f"--current {text}", bom=True).replace("\r\n", "\n")
    elif len(text.encode("utf-8", "surrogatepass")) > LINE_MAX:
        raise BadInput(f"--current: a line of {len(text):,} characters, more than the {LINE_MAX >> 10} KiB kbench "
                       "reads (a server's command line is a few KiB)")
    return text


def split_line(text: str) -> tuple[str, dict[str, str], list[str]]:
    """(engine, env, argv) of a server command line: `[VAR=v ...] python -m sglang.launch_server ARGS`,
    `sglang serve ARGS`, `vllm serve MODEL ARGS` or `python -m vllm.entrypoints.openai.api_server ARGS`; the words
    as bash passes them (kbench.shell.split)."""
    try:
        words = shell.split(text)
    except shell.NotOneCommand as e:
        raise BadInput(f"--current: {e}") from None
    env = {}
    while words and "=" in words[0] and words[0].partition("=")[0].isidentifier():
        k, _, v = words.pop(0).partition("=")
        env[k] = v
    if not words:
        raise BadInput("--current: no command on the line (give `python -m sglang.launch_server ...`, `sglang serve "
                       "...` or `vllm serve MODEL ...`)")
    first = Path(words[0]).name
    if first in BUILTINS:
        raise BadInput(f"--current: `{first}` is a shell command of its own, not the server's: give the variables "
                       "before the server command on its one line (VAR=value python -m sglang.launch_server ...)")
    if first in WRAPPERS:
        raise BadInput(f"--current: `{first}` wraps the server command: give the server command itself "
                       "([VAR=value ...] python -m sglang.launch_server ..., sglang serve ... or vllm serve MODEL "
                       "...)" + (", not via env" if first == "env" else ""))
    head = words[:3]
    if len(head) >= 3 and Path(head[0]).name.startswith("python") and head[1] == "-m":
        if head[2] == "sglang.launch_server":
            return "sglang", env, words[3:]
        if head[2] == "vllm.entrypoints.openai.api_server":
            return "vllm", env, words[3:]
    if len(head) >= 2 and first == "sglang" and head[1] == "serve":
        return "sglang", env, words[2:]
    if len(head) >= 2 and first == "vllm" and head[1] == "serve":
        rest = words[2:]
        if rest and not rest[0].startswith("-"):
            rest = ["--model", rest[0], *rest[1:]]
        return "vllm", env, rest
    shown = shell.command_line(redact.argv(words[:3]))
    raise BadInput(f"--current: {shown!r} is no server command kbench reads: give `python -m sglang.launch_server "
                   "...`, `sglang serve ...` or `vllm serve MODEL ...` (or @FILE holding one)")


def secrets(text: str) -> list[str]:
    """The secret values of a --current line (kbench.redact.secrets), none when it does not read."""
    try:
        if not text.startswith("@") and Path(text).is_dir():
            return []
        _, env, argv = split_line(read_current(text))
    except (BadInput, OSError, ValueError):
        return []
    return redact.secrets(argv, env)


@contextlib.contextmanager
def scrubbed(text: str):
    """Any BadInput raised inside, about the --current line ``text``, with the line's secrets as *** (a message
    that quotes a word next to a value: `'x' is not a flag (after sk-...)`)."""
    try:
        yield
    except BadInput as e:
        found = secrets(text) if isinstance(text, str) else []
        msg = redact.scrub(str(e), found)
        if msg == str(e):
            raise
        raise BadInput(msg) from None
