"""The one redaction: every value that can carry a secret, wherever kbench prints or stores a command (a run's
recorded command line, recommend's `set:` line, --json and --markdown, a --switch-command, an error line).

    argv(words)        a command's words as kbench shows them (server-bench's manifest `command`, recommend's line;
                       an argument that is itself a command line, `--switch-command '... --api-key sk-...'`, too)
    env(mapping)       environment assignments (VAR=value before a command) as kbench shows them
    line(text)         a shell line (a --switch-command): split as a shell splits it, argv(), joined again
    text(s)            free text (an error line, a value read from a file): the forms below that text can show
    secrets(words, e)  the values argv()/env() hide, raw: a message built from the line is scrubbed of them
    scrub(s, values)   ``s`` with each value replaced by *** (then text())

What is hidden (as ``***``):
- the value of an option named like a secret: a part of its name (split at `-` and `_`) is key, apikey, token,
  secret, password, passwd, passphrase, pass, pwd, pw, credential(s), pat, auth, cookie or bearer (`--api-key`,
  `--hf-token`, `--ssl-keyfile-password`; not `--tokenizer` nor `--max-prefill-tokens`), and --header's value
  (`X-Gw: ***`); given as `--api-key X` or `--api-key=X`;
- an environment assignment's value when its name is named so (HF_TOKEN, OPENAI_API_KEY, GITHUB_PAT,
  AWS_SECRET_ACCESS_KEY, MYTOKEN) or is outside the names kbench knows carry settings (SGLANG_*, VLLM_*,
  FLASHINFER_*, CUDA_*, NCCL_*, TORCH_*, PYTORCH_*, TRITON_*, OMP_*, HF_HUB_*, the proxies, ...): a name kbench
  cannot vouch for is shown as ***, never guessed harmless;
- a URL's userinfo, in any argument or value, in any scheme: `https://user:***@host` (the user kept where a
  password follows it), `https://***@host` where the userinfo is one word (a token given as the user name);
  JSON's escaped slashes too (`https:\\/\\/u:***@h`);
- inside JSON (an argument or value that is a JSON object or list: vLLM's --speculative-config, --kv-transfer-config):
  the value of a key named like a secret, and every string redacted as text; the JSON is written back compact;
- in free text: `Bearer X`, `Basic X`, `NAME=VALUE` and `"name": "value"` (escaped quotes too) where NAME is
  named like a secret, `--secret-option=VALUE`.

A redacted line is not the line to paste (*** is not the secret): the callers that print one say which values were
hidden, so the user puts theirs back. Redaction is idempotent: redacting a redacted line changes nothing.
"""
from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping

HIDDEN = "***"

# parts of a name (split at - and _) that make it a secret's name
SECRET_PARTS = frozenset({"key", "apikey", "token", "secret", "password", "passwd", "passphrase", "pass", "pwd", "pw",
                          "credential", "credentials", "pat", "auth", "cookie", "bearer", "privatekey"})
# substrings that make a name a secret's wherever they stand (MYTOKEN, DBPASSWORD; not TOKENIZER, MAX_TOKENS)
_SECRET_INFIX = re.compile(r"TOKEN(?![A-Za-z])|SECRET|PASSW|CREDENTIAL|APIKEY", re.I)
# environment variables kbench shows as given (settings of the engines and their libraries), unless named like a
# secret (VLLM_API_KEY): any other name's value is hidden
SAFE_ENV_PREFIXES = ("SGLANG_", "SGL_", "VLLM_", "FLASHINFER_", "CUDA_", "NCCL_", "TORCH_", "PYTORCH_", "TRITON_",
                     "OMP_", "MKL_", "NVIDIA_", "HF_HUB_", "HF_HOME", "TRANSFORMERS_", "TOKENIZERS_PARALLELISM",
                     "PYTHON", "LD_LIBRARY_PATH", "PATH", "KBENCH_AB_SIDE", "NO_PROXY", "HTTP_PROXY", "HTTPS_PROXY",
                     "ALL_PROXY", "no_proxy", "http_proxy", "https_proxy", "all_proxy")
HEADER_OPTIONS = frozenset({"--header", "-H"})

# scheme://userinfo@ (the slashes may be JSON-escaped: \/\/); userinfo holds no /, \, @, space or quote
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*:(?:\\?/){2})([^/\\\s@\"'<>]*)@")
_BEARER = re.compile(r"(?i)\b(bearer|basic)(\s+)([A-Za-z0-9._~+/=-]{3,})")
_ASSIGN = re.compile(r"(?<![\w-])([A-Za-z_][A-Za-z0-9_]*)=((?:'[^']*'|\"(?:[^\"\\]|\\.)*\"|[^\s;&|'\"])+)")
_OPTION_EQ = re.compile(r"(?<![\w-])(--?[A-Za-z0-9][A-Za-z0-9_-]*)=((?:'[^']*'|\"(?:[^\"\\]|\\.)*\"|[^\s;&|'\"])+)")
# "name": "value" in JSON text, or \"name\": \"value\" (JSON inside a JSON string)
_JSON_PAIR = re.compile(r'((\\*)"([A-Za-z0-9_.-]+)\2"\s*:\s*\2")((?:(?!\2").)*)(\2")')


# a last part that says the value is where a secret is, or about one, not the secret (--speculative-token-map PATH,
# --api-key-file PATH)
NOT_SECRET_LAST = frozenset({"map", "path", "file", "dir", "mode", "ids", "id", "len", "size", "limit", "num", "env"})


def secret_name(name: str) -> bool:
    """An option's or a variable's name that says its value is a secret (module docstring)."""
    bare = name.lstrip("-")
    parts = [p.lower() for p in re.split(r"[-_.\s]+", bare) if p]
    if not parts or parts[-1] in NOT_SECRET_LAST:
        return False
    return bool(set(parts) & SECRET_PARTS) or bool(_SECRET_INFIX.search(bare))


def _safe_env(name: str) -> bool:
    return name.startswith(SAFE_ENV_PREFIXES) and not secret_name(name)


def userinfo(s: str) -> str:
    """``s`` with every URL's userinfo hidden: `user:***@` where a password follows the user, else `***@`."""
    def one(m: re.Match) -> str:
        user, colon, rest = m.group(2).partition(":")
        if rest == HIDDEN or m.group(2) == HIDDEN:
            return m.group(0)
        return m.group(1) + (f"{user}:{HIDDEN}@" if colon and user else f"{HIDDEN}@")
    return _USERINFO.sub(one, s) if "@" in s else s


def _json(value):
    """A parsed JSON value with its secrets hidden (keys named like a secret; every string as text())."""
    if isinstance(value, dict):
        return {k: (HIDDEN if isinstance(k, str) and secret_name(k) and v not in (None, "", False) else _json(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_json(v) for v in value]
    if isinstance(value, str):
        return text(value)
    return value


def value(s: str) -> str:
    """One argument or value: a JSON object or list redacted structurally (written back compact), else text()."""
    t = s.strip()
    if t[:1] in "{[" and t[-1:] in "}]":
        from kbench.files import JSONProblem, loads

        try:
            parsed = loads(t)
        except JSONProblem:
            parsed = None
        if isinstance(parsed, (dict, list)):
            red = _json(parsed)
            return s if red == parsed else json.dumps(red, separators=(",", ":"), ensure_ascii=False)
    return text(s)


def text(s: str) -> str:
    """Free text with the secrets text can show hidden (module docstring)."""
    if not isinstance(s, str) or not s:
        return s
    s = userinfo(s)
    if "=" in s:
        s = _ASSIGN.sub(lambda m: f"{m.group(1)}={HIDDEN}" if secret_name(m.group(1)) and m.group(2) != HIDDEN
                        else m.group(0), s)
        s = _OPTION_EQ.sub(lambda m: f"{m.group(1)}={HIDDEN}" if secret_name(m.group(1)) and m.group(2) != HIDDEN
                           else m.group(0), s)
    if '"' in s:
        s = _JSON_PAIR.sub(lambda m: m.group(1) + HIDDEN + m.group(5) if secret_name(m.group(3)) and m.group(4)
                           and m.group(4) != HIDDEN else m.group(0), s)
    s = _BEARER.sub(lambda m: m.group(0) if m.group(3) == HIDDEN else f"{m.group(1)}{m.group(2)}{HIDDEN}", s)
    return s


def _header(v: str) -> str:
    name, colon, _ = v.partition(":")
    return f"{name.strip()}: {HIDDEN}" if colon and name.strip() else HIDDEN


def _pairs(words: list[str]):
    """(index, option name, how) for each word: how is 'eq' (--opt=value), 'next' (the word after is the value),
    or None."""
    pending = None
    for i, w in enumerate(words):
        if pending is not None and not (w.startswith("-") and len(w) > 1):  # a flag: the option took no value
            yield i, pending, "value"
            pending = None
            continue
        pending = None
        name, eq, _ = w.partition("=")
        if w.startswith("-") and (secret_name(name) or name in HEADER_OPTIONS):
            if eq:
                yield i, name, "eq"
            else:
                pending = name
            continue
        yield i, None, None


def argv(words: Iterable[str]) -> list[str]:
    """A command's words as kbench shows them: secret options' values, --header's value, env assignments before
    the command (VAR=value), URL userinfo and JSON secrets hidden (module docstring)."""
    words = [str(w) for w in words]
    out = list(words)
    head = True  # VAR=value words before the command are environment assignments
    for i, name, how in _pairs(words):
        w = words[i]
        if head and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", w, re.S):
            k, _, v = w.partition("=")
            out[i] = f"{k}={env({k: v})[k]}"
            continue
        head = False
        if how == "value":
            out[i] = w if w == HIDDEN else _header(w) if name in HEADER_OPTIONS else HIDDEN
        elif how == "eq":
            v = w.partition("=")[2]
            out[i] = f"{name}={v if v == HIDDEN else _header(v) if name in HEADER_OPTIONS else HIDDEN}"
        else:
            out[i] = value(w)
            if out[i] == w and any(c in w for c in " \t\n") and w.strip()[:1] not in "{[":
                out[i] = line(w)  # a command line given as one argument (--switch-command, --current)
    return out


def env(mapping: Mapping[str, str]) -> dict[str, str]:
    """Environment assignments as kbench shows them: a value hidden unless its name is one kbench knows carries a
    setting (module docstring); URL userinfo and JSON secrets hidden in the values it shows."""
    return {k: value(str(v)) if _safe_env(k) else (v if v == HIDDEN or v == "" else HIDDEN)
            for k, v in mapping.items()}


def hidden(words: Iterable[str], mapping: Mapping[str, str] | None = None) -> list[str]:
    """What argv(words)/env(mapping) hide, by name (`--api-key`, `--model-path`, `HF_TOKEN`), for a note."""
    words = [str(w) for w in words]
    red = argv(words)
    names = []
    for i, name, how in _pairs(words):
        if red[i] != words[i]:
            w = words[i]
            names.append(name if name else w.partition("=")[0] if w.startswith("-") and "=" in w
                         else words[i - 1] if i and words[i - 1].startswith("-") else f"argument {i + 1}")
    for k, v in (mapping or {}).items():
        if env({k: v})[k] != v:
            names.append(k)
    return sorted(set(names))


def secrets(words: Iterable[str], mapping: Mapping[str, str] | None = None) -> list[str]:
    """The raw values argv()/env() hide (each whole value, and a URL's userinfo): what a message built from the
    words must not show (longest first)."""
    words = [str(w) for w in words]
    red = argv(words)
    found = [w for w, r in zip(words, red) if w != r]
    found += [str(v) for k, v in (mapping or {}).items() if env({k: v})[k] != v]
    out = set()
    for f in found:
        out.add(f.partition("=")[2] if f.startswith("-") and "=" in f else f)
        for m in _USERINFO.finditer(f):
            out.add(m.group(2))
            out.update(p for p in m.group(2).split(":") if p)
        if ":" in f and not f.startswith(("http", "{", "[")):  # a header's value
            out.add(f.partition(":")[2].strip())
    return sorted((s for s in out if len(s) >= 3 and s != HIDDEN), key=len, reverse=True)


def scrub(s: str, values: Iterable[str]) -> str:
    """``s`` with each of ``values`` replaced by ***, then text()."""
    for v in sorted(set(values), key=len, reverse=True):
        if v and len(v) >= 3:
            s = s.replace(v, HIDDEN)
    return text(s)


def line(s: str) -> str:
    """A shell line (a --switch-command) as kbench shows it: its words (split as a shell splits them) through
    argv(), quoted again; a line that does not split is shown through text()."""
    from kbench import shell

    try:
        words = shlex.split(s)
    except ValueError:
        return text(s)
    red = argv(words)
    return s if red == words else shell.command_line(red)


def record(obj):
    """A stored record (a run's manifest, copied into a baseline) with its commands redacted: a `command` or
    `command_line` list through argv(), a string under a key naming a command (`switch_command`, `command_line`)
    through line(), every other string's URL userinfo hidden. A run an older kbench recorded is stored clean."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            commandish = isinstance(k, str) and (k == "command" or k.endswith(("_command", "command_line")))
            if commandish and isinstance(v, list) and all(isinstance(x, str) for x in v):
                out[k] = argv(v)
            elif commandish and isinstance(v, str):
                out[k] = line(v)
            else:
                out[k] = record(v)
        return out
    if isinstance(obj, list):
        return [record(v) for v in obj]
    if isinstance(obj, str):
        return userinfo(obj)
    return obj
