"""Issue #55 items 3 and 4: one redaction (kbench.redact) and one line in, one line out (kbench.shell.split,
kbench.recommend.line): the words kbench reads of a pasted line are bash's own, the `set:` line passes them back
(checked through bash and SGLang's own parser), and no form of a secret comes back."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from kbench import redact, shell
from kbench.cli.main import cli
from kbench.errors import BadInput
from kbench.recommend.line import read_current, split_line

ROOT = Path(__file__).resolve().parent.parent
SERVERS = ROOT / "tests" / "servers"
ROUTES = str(ROOT / "results/baselines/h100-engine-routes-kv4096")
SPEC = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4"]


def bash_words(line: str) -> list[str]:
    """The words bash passes to a command given ``line`` (its own word splitting, quote removal, expansions)."""
    p = subprocess.run(["bash", "-c", 'f() { for a in "$@"; do printf "%s\\0" "$a"; done; }; f ' + line],
                       capture_output=True, text=True, timeout=30, cwd=tempfile.gettempdir())
    assert p.returncode == 0, p.stderr
    return p.stdout.split("\0")[:-1]


# ---- kbench.shell.split: bash's words, or one line why not -------------------------------------------------------
SAME_AS_BASH = [
    "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B#v2 --page-size 64",
    "python -m x --a 'b c' \"d\\\"e\" f\\ g 'h#i' j#k # a comment",
    "A=1 B='x y' python -m x ~/models/m --p=~/q x=~/y",
    "python -m x \\\n  --a 1 \\\n  --b '2'",
    "python -m x --json '{\"a\": [1, 2], \"b\": \"c d\"}' --e \"$\" --f 'a$b'",
    "python -m x --g '*' --h \"?\" --i '{a,b}' --j {} --k a{b}",
    "\n# a comment line\npython -m x --a 1\n\n",
    "python -m x --model-path=-h --draft=--trust-remote-code",
]


@pytest.mark.parametrize("line", SAME_AS_BASH)
def test_split_gives_the_words_bash_passes(line):
    assert shell.split(line) == bash_words(line.replace("\n# a comment line\n", "").strip())  # bash: one a line


REFUSED = [
    ("python -m x; rm -rf ~", "a second command after `;`"),
    ("cd /srv && python -m x", "a second command after `&&`"),
    ("python -m x || true", "a second command after `||`"),
    ("python -m x | tee log", "a pipe `|`"),
    ("python -m x &", "a background `&`"),
    ("python -m x > log", "a redirection `>`"),
    ("python -m x 2>&1", "a redirection `>&`"),
    ("(python -m x)", "a subshell `(`"),
    ("python -m x --m $MODEL", "a shell expansion ($M...)"),
    ("python -m x --m \"${MODEL}\"", "a shell expansion (${...)"),
    ("python -m x --m $(cat f)", "a shell expansion ($(...)"),
    ("python -m x --m `cat f`", "a command substitution"),
    ("python -m x --m $'a\\tb'", "a shell expansion ($'...)"),
    ("python -m x --m /models/*", "an unquoted *"),
    ("python -m x --m {a,b}", "an unquoted {"),
    ("python -m x --m 'a\tb'", "a tab inside a quoted value"),
    ("python -m x --m a\\\tb", "a tab inside a value"),
    ("python -m x --m a\0b", "a NUL byte in the line"),
    ("python -m x --m 'a\nb'", "a line break inside a quoted value"),
    ("python -m x --m a\x1b[2Jb", "the control character U+001B"),
    ("python -m x --m 'open", "a ' quote is not closed"),
    ("python -m x\npython -m y", "several commands, one a line"),
    ("python -m x \\", "a backslash ends the text"),
]


@pytest.mark.parametrize("line, says", REFUSED)
def test_what_bash_reads_otherwise_is_one_line(line, says):
    with pytest.raises(shell.NotOneCommand) as e:
        shell.split(line)
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("line, says", [
    ("sudo HF_TOKEN=hf_x55 python -m sglang.launch_server --model-path m", "`sudo` wraps the server command"),
    ("export HF_TOKEN=hf_x55", "`export` is a shell command of its own"),
    ("env HF_TOKEN=hf_x55 python -m sglang.launch_server --model-path m", "not via env"),
    ("nohup python -m sglang.launch_server --model-path m", "`nohup` wraps"),
    ("HF_TOKEN=hf_x55", "no command on the line"),
    ("python serve.py --api-key hf_x55", "is no server command kbench reads"),
])
def test_wrappers_and_other_commands_are_refused_without_the_secret(line, says):
    with pytest.raises(BadInput) as e:
        split_line(line)
    assert says in str(e.value) and "hf_x55" not in str(e.value), str(e.value)


def test_at_file_is_bounded_and_crlf_reads_as_lf(tmp_path):
    f = tmp_path / "serve.sh"
    f.write_bytes(b"python -m sglang.launch_server \\\r\n  --model-path m\r\n")
    assert split_line(read_current(f"@{f}")) == ("sglang", {}, ["--model-path", "m"])
    f.write_bytes(b"x" * ((64 << 10) + 1))
    with pytest.raises(BadInput, match=r"more than the 64 KiB"):
        read_current(f"@{f}")
    with pytest.raises(BadInput, match=r"more than the 64 KiB"):
        read_current("python " + "a" * (64 << 10))


# ---- the set: line passes the user's words back -----------------------------------------------------------------
def _recommend(line: str, *extra) -> str:
    r = CliRunner().invoke(cli, ["recommend", ROUTES, "--engine", "sglang", "--batch-size", "8", "--kv-len", "4096",
                                 "--current", line, *extra], env={"COLUMNS": "250", "GITHUB_STEP_SUMMARY": ""})
    assert r.exit_code == 0, r.output
    return r.output


def _set_line(out: str) -> str:
    return next(ln for ln in out.splitlines() if ln.startswith("set: "))[5:]


def _user_line(model: str, draft: str) -> str:
    return shell.command_line(["SGLANG_X=1", "python", "-m", "sglang.launch_server", f"--model-path={model}", *SPEC,
                               f"--speculative-draft-model-path={draft}", "--page-size", "64",
                               "--attention-backend", "flashinfer"])


ODD_PATHS = [("meta-llama/Llama-3.1-8B#v2", "-h"), ("/m/it's here/llama", "--trust-remote-code"),
             ("/m/a;b|c&d/llama", "/d/$(x)`y`")]


@pytest.mark.parametrize("model, draft", ODD_PATHS)
def test_the_set_line_passes_the_users_words_through_bash(model, draft):
    user = _user_line(model, draft)
    words = bash_words(_set_line(_recommend(user, "--model", "llama3-8b")))
    assert words[:4] == ["SGLANG_X=1", "python", "-m", "sglang.launch_server"]
    assert words[4] in (f"--model-path={model}", "--model-path") and model in (words[4][13:], words[5])
    assert f"--speculative-draft-model-path={draft}" in words or draft in words[words.index(
        "--speculative-draft-model-path") + 1:][:1]
    assert not {"-h", "--help", "--trust-remote-code"} & set(words), words
    assert words[words.index("--attention-backend") + 1] == "fa3"  # the one word the answer changes


@pytest.mark.server
@pytest.mark.parametrize("model, draft", ODD_PATHS)
def test_sglangs_own_parser_reads_the_set_line_as_the_users_paths(model, draft):
    sys.path.insert(0, str(SERVERS))
    import sglang_args

    if not sglang_args.venv_ready():
        pytest.skip("SGLang's argument parser venv is not built (bash tests/servers/setup_sglang_args.sh)")
    words = bash_words(_set_line(_recommend(_user_line(model, draft), "--model", "llama3-8b")))
    code = ("import json, sys\nsys.path.insert(0, sys.argv[1])\nimport sglang_args\n"
            "print(json.dumps(sglang_args.parse(json.load(sys.stdin))))\n")
    r = subprocess.run([str(sglang_args.venv_python()), "-c", code, str(SERVERS)], input=json.dumps(words[4:]),
                       capture_output=True, text=True, timeout=600, cwd=tempfile.gettempdir())
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert (got["model_path"], got["speculative_draft_model_path"], got["page_size"]) == (model, draft, 64), got


# ---- kbench.redact: the forms of a secret ------------------------------------------------------------------------
FORMS = [  # (words, the secret, what kbench shows)
    (["--api-key", "sk-1a2b3c"], "sk-1a2b3c", ["--api-key", "***"]),
    (["--api-key=sk-1a2b3c"], "sk-1a2b3c", ["--api-key=***"]),
    (["--hf-token", "hf_1a2b3c"], "hf_1a2b3c", ["--hf-token", "***"]),
    (["--ssl-keyfile-password", "pw1a2b3c"], "pw1a2b3c", ["--ssl-keyfile-password", "***"]),
    (["--header", "X-Gw: t1a2b3c"], "t1a2b3c", ["--header", "X-Gw: ***"]),
    (["HTTPS_PROXY=http://me:pw1a2b3c@proxy:3128", "x"], "pw1a2b3c", ["HTTPS_PROXY=http://me:***@proxy:3128", "x"]),
    (["GITHUB_PAT=ghp_1a2b3c", "x"], "ghp_1a2b3c", ["GITHUB_PAT=***", "x"]),
    (["MY_SETTING=v1a2b3c", "x"], "v1a2b3c", ["MY_SETTING=***", "x"]),
    (["--model-path", "https://u:pw1a2b3c@h/m"], "pw1a2b3c", ["--model-path", "https://u:***@h/m"]),
    (["--model-path", "https://tok1a2b3c@h/m"], "tok1a2b3c", ["--model-path", "https://***@h/m"]),
    (["--sc", '{"model": "https:\\/\\/u:pw1a2b3c@h\\/d", "n": 3}'], "pw1a2b3c",
     ["--sc", '{"model":"https://u:***@h/d","n":3}']),
    (["--kv-transfer-config", '{"api_key": "k1a2b3c"}'], "k1a2b3c", ["--kv-transfer-config", '{"api_key":"***"}']),
    (["--switch-command", "./sw.sh {side} --api-key sk-1a2b3c"], "sk-1a2b3c",
     ["--switch-command", "./sw.sh '{side}' --api-key '***'"]),
]


@pytest.mark.parametrize("words, secret, want", FORMS)
def test_every_form_of_a_secret_is_hidden(words, secret, want):
    assert redact.argv(words) == want
    assert redact.argv(want) == want  # idempotent
    assert secret in redact.secrets(words) or any(secret in s for s in redact.secrets(words))


@pytest.mark.parametrize("text", [
    "sudo HF_TOKEN=hf_1a2b3c python", "curl -H 'Authorization: Bearer hf_1a2b3c'", '{"token": "hf_1a2b3c"}',
    '{\\"password\\": \\"hf_1a2b3c\\"}', "--api-key=hf_1a2b3c", "see https://u:hf_1a2b3c@h/x",
    "see https:\\/\\/u:hf_1a2b3c@h"])
def test_free_text_forms(text):
    assert "hf_1a2b3c" not in redact.text(text), redact.text(text)


def test_names_that_are_not_secrets_are_kept():
    words = ["--tokenizer", "t/x", "--max-prefill-tokens", "8", "--speculative-token-map", "/m.pt", "--page-size",
             "64", "SGLANG_OPT_X=1", "--skip-tokenizer-init", "--allow-credentials", "--port", "1"]
    assert redact.argv(words) == words
    assert redact.env({"SGLANG_OPT_X": "1", "CUDA_VISIBLE_DEVICES": "0,1", "VLLM_API_KEY": "k1"}) == {
        "SGLANG_OPT_X": "1", "CUDA_VISIBLE_DEVICES": "0,1", "VLLM_API_KEY": "***"}


def test_the_not_a_flag_error_never_names_the_key():
    r = CliRunner().invoke(cli, ["recommend", ROUTES, "--engine", "sglang", "--batch-size", "8", "--kv-len", "4096",
                                 "--current", "python -m sglang.launch_server --model-path m --api-key sk-77a extra"])
    assert r.exit_code == 2 and "sk-77a" not in r.output and "(after ***)" in r.output, r.output
