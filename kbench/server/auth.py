"""Credentials for the server under test, and the one place they are kept out of what kbench records or prints.

A server-bench run may need a password (`--url http://user:password@host:port`, sent as HTTP Basic auth), an API
key (`--api-key`, `--api-key-file` or $KBENCH_API_KEY; sent as `Authorization: Bearer KEY`, what SGLang's and
vLLM's `--api-key` servers check) or other headers (`--header 'Name: value'`, repeatable, `--header-file` or
$KBENCH_HEADERS, one header a line). None of their values is ever stored (manifest url, config and command
line, the rows' url column, baselines made from the run) or printed (errors, row reasons):

- `split_url` takes the password out of a URL where the URL enters kbench (ServerBenchConfig); what is kept and
  recorded is the public URL (`http://user:***@host:port`), the password lives only in `Credentials`;
- the command line the manifest records goes through kbench.redact.argv, the one redaction (values of --api-key
  and --header, a URL's password, secrets in JSON: `***`);
- `Credentials.scrub` replaces every secret value in a text that came back from the server (a 401 body that echoes
  the key) before kbench keeps or prints it (kbench.server.client does it for every reply and error), in every
  form a server may quote it in: as sent (the key; HTTP Basic's base64 of user:password, with and without
  `Basic `), as given (the password), percent-encoded, HTML-escaped and JSON-escaped;
- a value that is not Latin-1 (`sk-€uro`) cannot travel in an HTTP header: Credentials refuses it with one line;
- `origin` is decided by the parser that connects (urllib3's, which requests uses), so a URL the two readings of
  differ on (`http://OTHER\\@host/`: urlsplit reads host, urllib3 connects to OTHER) is never taken for this
  server's origin.
"""
from __future__ import annotations

import base64
import html
import json
import os
import re
from pathlib import Path
from urllib.parse import quote, quote_plus, unquote, urlsplit, urlunsplit

import urllib3.exceptions
import urllib3.util

from kbench import files, redact
from kbench.errors import BadInput

HIDDEN = redact.HIDDEN
API_KEY_ENV = "KBENCH_API_KEY"
HEADERS_ENV = "KBENCH_HEADERS"
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # an HTTP header name (RFC 9110 token)
# headers that frame or route the request: set by the HTTP client, never by hand
_REFUSED = {"host", "content-length", "transfer-encoding", "connection", "content-type", "te", "upgrade",
            "keep-alive", "proxy-connection", "trailer"}


def _latin1(what: str, value: str | None) -> None:
    """BadInput for a value an HTTP header cannot carry (not Latin-1: http.client would raise on it); the line
    names the option and the character's position, never the value."""
    if not value:
        return
    try:
        value.encode("latin-1")
    except UnicodeEncodeError as e:
        raise BadInput(f"{what}: character {e.start + 1} of the value is outside Latin-1; an HTTP header carries "
                       "Latin-1 only (give the value as the bytes the server expects)") from None


class Credentials:
    """What authenticates kbench to the server: an API key, extra headers, HTTP Basic user and password.
    repr() and describe() name them, never their values."""

    def __init__(self, api_key: str | None = None, headers: tuple[tuple[str, str], ...] = (),
                 basic: tuple[str, str] | None = None):
        self.api_key = api_key
        self.headers = tuple(headers)
        self.basic = basic
        _latin1("--api-key", api_key)
        for name, value in self.headers:
            _latin1(f"--header {name}", value)
        if basic:
            _latin1("--url's user name", basic[0])
            _latin1("--url's password", basic[1])

    def __repr__(self) -> str:
        return f"Credentials({', '.join(self.describe()) or 'none'})"

    def __bool__(self) -> bool:
        return bool(self.api_key or self.headers or self.basic)

    def __deepcopy__(self, memo):  # dataclasses.asdict deep-copies fields; a copy holds the same secrets
        return Credentials(self.api_key, self.headers, self.basic)

    def describe(self) -> list[str]:
        """What is sent, values hidden (the manifest records this: a resume knows what to ask for again)."""
        out = [f"Authorization: Bearer {HIDDEN} (API key)"] if self.api_key else []
        out += [f"{name}: {HIDDEN}" for name, _ in self.headers]
        if self.basic:
            out.append(f"HTTP Basic auth (user {self.basic[0]!r}, password {HIDDEN})")
        return out

    def http_headers(self) -> dict[str, str]:
        out = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        out.update(self.headers)
        return out

    def secrets(self) -> list[str]:
        """Every secret value, in every form kbench sent it or a server may quote it in (longest first)."""
        vals = [self.api_key or ""] + [v for _, v in self.headers]
        if self.basic:
            sent = base64.b64encode(f"{self.basic[0]}:{self.basic[1]}".encode("latin-1")).decode()
            vals += [self.basic[1], f"Basic {sent}", sent]
        out = set()
        for v in (v.strip() for v in vals if v and len(v.strip()) >= 3):
            out |= {v, quote(v, safe=""), quote(v), quote_plus(v), html.escape(v), html.escape(v, quote=False),
                    html.escape(v).replace("&#x27;", "&#39;"), json.dumps(v)[1:-1], json.dumps(v, ensure_ascii=False)[1:-1]}
        return sorted(out, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        """``text`` with every secret value (and any URL's password) replaced by ***."""
        for s in self.secrets():
            text = text.replace(s, HIDDEN)
        return redact.userinfo(text)


NO_CREDENTIALS = Credentials()


def split_url(url: str) -> tuple[str, tuple[str, str] | None]:
    """(the URL with its password replaced by ***, (user, password) or None). Anything unparsable is returned
    as it is with its userinfo masked, for the validation to refuse."""
    try:
        u = urlsplit(url)
        password, user, host = u.password, u.username, u.hostname
        port = u.port
    except ValueError:
        return redact.userinfo(url), None
    if password is None:
        return url, None
    netloc = f"{user or ''}:{HIDDEN}@" + (f"[{host}]" if host and ":" in host else host or "") + (
        f":{port}" if port is not None else "")
    # sent decoded, as requests reads a URL's userinfo (p%40ss is the password p@ss)
    return urlunsplit((u.scheme, netloc, u.path, u.query, u.fragment)), (unquote(user or ""), unquote(password))


def redact_url(url: str) -> str:
    return split_url(url)[0]


def without_userinfo(url: str) -> str:
    """The URL a request goes to: no user or password in it (they travel as an Authorization header)."""
    u = urlsplit(url)
    host = u.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{u.port}" if u.port is not None else "")
    return urlunsplit((u.scheme, netloc, u.path, u.query, u.fragment))


def origin(url: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port), the scheme's default port filled in: where a request to ``url`` goes, as the HTTP
    library that connects reads it (urllib3's parser, which requests uses). None where Python's urlsplit reads
    another place in it (`http://OTHER\\@host:port/`: urlsplit says host, urllib3 connects to OTHER) or it does
    not parse: such a URL is nobody's origin, so a redirect to it is never followed."""
    try:
        u = urllib3.util.parse_url(url)
        s = urlsplit(url)
        mine = (s.scheme or "").lower(), (s.hostname or "").lower(), s.port
    except (ValueError, urllib3.exceptions.LocationParseError):
        return None
    scheme = (u.scheme or "").lower()
    default = {"http": 80, "https": 443}.get(scheme)
    theirs = scheme, (u.host or "").lower().strip("[]"), u.port or default
    if not theirs[1] or theirs != (mine[0], mine[1], mine[2] or default):
        return None
    return theirs


def parse_header(text: str, where: str) -> tuple[str, str]:
    """'Name: value' -> (Name, value); BadInput naming the header (never its value)."""
    name, sep, value = text.partition(":")
    name, value = name.strip(), value.strip()
    if not sep or not _TOKEN.match(name):
        raise BadInput(f"{where}: expected 'Name: value' with a header name of letters, digits and -, got "
                       f"{(name[:40] + ': ...') if sep else 'no colon'}")
    if any(c in value for c in "\r\n\0"):
        raise BadInput(f"{where}: header {name}: a value may not hold a line break or a NUL byte")
    if not value:
        raise BadInput(f"{where}: header {name}: empty value")
    if name.lower() in _REFUSED:
        raise BadInput(f"{where}: header {name}: set by the HTTP client itself; it cannot be given")
    return name, value


def _secret_file(path: str, option: str) -> str:
    return files.read_text(Path(path).expanduser(), f"{option} {path}", files.SECRET_MAX)


def load_credentials(api_key: str | None = None, api_key_file: str | None = None, headers: tuple[str, ...] = (),
                     header_file: str | None = None, basic: tuple[str, str] | None = None,
                     environ: dict | None = None) -> Credentials:
    """The credentials from the options, else from the environment ($KBENCH_API_KEY, $KBENCH_HEADERS).
    BadInput (one line that never holds a value) for a key given twice, an empty key or a malformed header."""
    env = os.environ if environ is None else environ
    if api_key is not None and api_key_file is not None:
        raise BadInput("--api-key and --api-key-file: give one")
    if api_key_file is not None:
        key, where = _secret_file(api_key_file, "--api-key-file").strip(), f"--api-key-file {api_key_file}"
    elif api_key is not None:
        key, where = api_key.strip(), "--api-key"
    else:
        key, where = (env.get(API_KEY_ENV) or "").strip() or None, f"${API_KEY_ENV}"
    if key is not None:
        if not key:
            raise BadInput(f"{where}: an empty API key")
        if any(c.isspace() or c == "\0" for c in key):
            raise BadInput(f"{where}: an API key is one word (it holds a space or a line break)")
    lines = [(h, "--header") for h in headers]
    if header_file is not None:
        text = _secret_file(header_file, "--header-file")
        lines += [(ln, f"--header-file {header_file}") for ln in text.splitlines()]
    if not headers and header_file is None:
        lines += [(ln, f"${HEADERS_ENV}") for ln in (env.get(HEADERS_ENV) or "").splitlines()]
    parsed: list[tuple[str, str]] = []
    for text, src in lines:
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        name, value = parse_header(text, src)
        if name.lower() in (n.lower() for n, _ in parsed):
            raise BadInput(f"{src}: header {name} given twice")
        parsed.append((name, value))
    if key and any(n.lower() == "authorization" for n, _ in parsed):
        raise BadInput("an API key and an Authorization header: give one (the key is sent as Authorization: Bearer)")
    if basic and (key or any(n.lower() == "authorization" for n, _ in parsed)):
        raise BadInput("a password in --url and an API key or Authorization header: give one (both are "
                       "Authorization)")
    return Credentials(key or None, tuple(parsed), basic)
