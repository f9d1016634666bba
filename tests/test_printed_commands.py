"""Issue #48: every command kbench prints for the user to run pastes whole (kbench.shell), recommend's `set:` line is
one line at any width, in a log and in a real terminal (a pty), and the engine command keeps a model path that
starts with `-` a path."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from kbench import shell
from kbench.errors import BadInput
from kbench.recommend import flags as F

ROOT = Path(__file__).resolve().parent.parent
ROUTES = ROOT / "results/baselines/h100-engine-routes-kv4096"
SHAPE = ["--batch-size", "8", "--q-len", "4", "--kv-len", "4096", "--host-overlap", "sum"]


# ---- kbench.shell -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arg", ["plain", "res dir $(touch PWNED)", "it's", "a`b`", "-h", "", "tab\there",
                                 "new\nline", "esc\x1b[31mred", "back\\slash'quote\n"])
def test_a_quoted_argument_is_one_line_that_bash_reads_back_as_the_same(arg, tmp_path):
    q = shell.quote(arg)
    assert "\n" not in q and "\x1b" not in q
    line = shell.command_line(["printf", "%s\\0", arg, "next"])
    r = subprocess.run(["bash", "-c", line], capture_output=True, cwd=tmp_path)
    assert r.stdout.split(b"\0")[:2] == [arg.encode(), b"next"]
    assert list(tmp_path.iterdir()) == []  # nothing ran


def test_plain_words_stay_as_they_are():
    assert shell.kbench("server-bench", "--resume", "results/run-1", "--url", "URL") == \
        "kbench server-bench --resume results/run-1 --url URL"
    assert shell.command_line(["a b", "c"]) == shlex.join(["a b", "c"])


def test_no_command_is_printed_with_a_raw_path():
    """Every `kbench ...` line kbench prints with a value in it is built by kbench.shell: no f-string that puts a
    value after `kbench <command>` by hand (a constant committed path is the one exception)."""
    hits = []
    for folder in ("kbench", "cli"):
        for p in (ROOT / folder).rglob("*.py"):
            for n, line in enumerate(p.read_text().splitlines(), 1):
                if re.search(r"kbench (sweep|server-bench|baseline|report|gate|prebuild|export|select|recommend|merge) "
                             r"(--[a-z-]+ )?\{(?!COMMITTED|b\}|COMMITTED_BASELINE)", line):
                    hits.append(f"{p.relative_to(ROOT)}:{n}: {line.strip()}")
    assert hits == []


# ---- recommend's set: line --------------------------------------------------------------------------------------
def _expected(engine: str) -> list[str]:
    from kbench.recommend.price import load_source, recommend
    from kbench.recommend.render import command
    from kbench.recommend.settings import load_table
    from kbench.recommend.workload import from_options

    wl = from_options({"batch_size": "8", "q_len": "4", "kv_len": "4096"}, {}, ("verify", "draft_extend"))
    rec = recommend(load_source([str(ROUTES)]), wl, load_table().engine(engine, None), overlap="sum")
    return shlex.split(command(rec))


def _set_line(text: str) -> list[str]:
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r", "")
    lines = [ln for ln in text.splitlines() if ln.startswith("set: ")]
    assert len(lines) == 1, text[-3000:]
    return shlex.split(lines[0][5:])


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize("columns", [80, 100, 120])
def test_set_line_is_whole_in_a_log(engine, columns):
    r = subprocess.run([sys.executable, "-m", "kbench.cli.main", "recommend", str(ROUTES), "--engine", engine, *SHAPE],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": str(columns)})
    assert r.returncode == 0, r.stderr
    assert _set_line(r.stdout) == _expected(engine)


@pytest.mark.parametrize("columns", [80, 100, 120])
def test_set_line_is_whole_in_a_real_terminal(columns):
    """In a pty of COLUMNS columns (rich sees a terminal and its width): one line of bytes, whatever the terminal
    shows folded."""
    import fcntl
    import pty
    import struct
    import termios

    main, sub = pty.openpty()
    fcntl.ioctl(sub, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    p = subprocess.Popen([sys.executable, "-m", "kbench.cli.main", "recommend", str(ROUTES), "--engine", "vllm",
                          *SHAPE], stdin=sub, stdout=sub, stderr=sub, env={**env, "TERM": "xterm-256color"},
                         close_fds=True)
    os.close(sub)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    assert p.wait(timeout=300) == 0, out.decode(errors="replace")[-2000:]
    argv = _set_line(out.decode())
    assert argv == _expected("vllm")
    json.loads(argv[argv.index("--speculative-config") + 1])


# ---- model and draft paths that look like options -----------------------------------------------------------------
@pytest.mark.parametrize("model", ["--trust-remote-code", "-h"])
def test_a_model_path_starting_with_a_dash_is_given_as_flag_equals_value(model):
    spec = F.SpecConfig.chain(4)
    s = F.command_line("sglang", F.server_flags("sglang", "--attention-backend fa3", spec, 64, draft_model=model),
                       model=model)
    argv = shlex.split(s)
    assert argv[3] == f"--model-path={model}" and f"--speculative-draft-model-path={model}" in argv
    assert model not in argv  # never a bare word a parser would take for its flag
    v = shlex.split(F.command_line("vllm", F.server_flags("vllm", "--attention-backend FLASHINFER", spec, 64,
                                                          draft_model=model), model=model))
    assert v[2] == f"--model={model}" and json.loads(v[v.index("--speculative-config") + 1])["model"] == model


def test_a_model_path_holding_nul_is_refused_in_one_line():
    spec = F.SpecConfig.chain(4)
    with pytest.raises(BadInput, match=r"^model 'a<NUL> --x': holds a NUL byte"):
        F.command_line("sglang", [], model="a\0 --x")
    with pytest.raises(BadInput, match=r"^draft model .*holds a NUL byte"):
        F.server_flags("sglang", "--attention-backend fa3", spec, 64, draft_model="d\0--x")
