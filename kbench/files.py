"""The one reader of files kbench did not write in this call: lengths files (`--kv-dist file:`), draft-tree files,
workload files (`kbench recommend --workload`), scenarios, a run's rows and manifest, baselines, policies, API-key
and header files, a server's model config.

Whatever the path names, reading it is one line or the file's content, never a hang and never a traceback:
- only a regular file is read (symbolic links to one are followed); a folder, a named pipe (FIFO, whose open
  would wait for a writer forever), a device (/dev/zero never ends), a socket: BadInput naming what it is;
- at most ``max_bytes`` (each caller says how much its kind of file may hold): a larger file is one line;
- text is strict UTF-8: other bytes are one line naming the file and the offset, not a decode traceback
  (nor characters silently replaced).

JSON is parsed by `loads` (or `parse_json`, `read_json`), the one JSON parser of what kbench did not write in this
call (files, journal lines, a server's answers): a document nested too deeply, an integer too long for Python,
a key twice in one object (where the caller asks), are a one-line problem naming where, never a traceback.

A folder whose files must agree records them with `record()` (size and sha256, written last by the writer) and
its readers check them with `check_records()`.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import BinaryIO, Iterator

from kbench.errors import BadInput
from kbench.values import long_int

# how much each kind of file may hold (bytes): far beyond any real one, far below what would exhaust memory
LENGTHS_MAX = 16 << 20  # a list of per-request lengths (at most 1,000,000 values)
WORKLOAD_MAX = 256 << 20  # a workload (kbench.recommend.workload: millions of JSONL batches), a file of draft trees
SCENARIO_MAX = 16 << 20
MANIFEST_MAX = 64 << 20
POLICY_MAX = 512 << 20
ROWS_MAX = 4 << 30  # rows.jsonl / rows.parquet / rows.csv (100,000 rows with their samples: a few hundred MB)
SECRET_MAX = 64 << 10  # an API key or header file
CHUNK = 1 << 20


# what a non-regular file is, in words (the first test that holds)
KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
         (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    return next((words for test, words in KINDS if test(mode)), "not a regular file")


def _size(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB" if n >= 2**10 else f"{n} bytes"


@contextlib.contextmanager
def open_regular(path: str | os.PathLike, label: str | None = None,
                 max_bytes: int = MANIFEST_MAX) -> Iterator[BinaryIO]:
    """A regular file opened for binary reading, or BadInput (`LABEL: ...`, LABEL defaults to the path).
    The open itself cannot block: O_NONBLOCK (a FIFO opens at once, then is refused by its type)."""
    label = label or str(path)
    if not isinstance(path, (str, os.PathLike)):
        raise BadInput(f"{label}: not a file's path")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        if e.errno == errno.ENOENT:
            raise BadInput(f"{label}: no such file") from None
        if e.errno == errno.ENXIO:  # a socket (or a FIFO on some systems) cannot be opened for reading
            try:
                what = kind_of(os.stat(path).st_mode)
            except OSError:
                what = "not a regular file"
            raise BadInput(f"{label}: {what}, not a regular file") from None
        raise BadInput(f"{label}: cannot read ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"{label}: {kind_of(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:
            raise BadInput(f"{label}: {_size(st.st_size)}, more than the {_size(max_bytes)} kbench reads from "
                           f"such a file")
        os.set_blocking(fd, True)
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        yield f


@contextlib.contextmanager
def arrow_file(f: BinaryIO):
    """The open regular file ``f`` as a file of pyarrow's own (pyarrow.OSFile on the same file, through
    /proc/self/fd or /dev/fd), closed on leaving; ``f`` itself where the system has neither.

    pyarrow reads with threads of its own. Given a Python file object, they call back into Python to read it, and
    one still holding it when Python shuts down aborts the process ("terminate called without an active exception",
    exit -6: apache/arrow#34314). Through its own file, no pyarrow thread runs Python."""
    import pyarrow as pa

    for folder in ("/proc/self/fd", "/dev/fd"):
        if os.path.isdir(folder):
            native = pa.OSFile(f"{folder}/{f.fileno()}")
            try:
                yield native
            finally:
                native.close()
            return
    yield f


def read_bytes(path: str | os.PathLike, label: str | None = None, max_bytes: int = MANIFEST_MAX) -> bytes:
    """The whole file, at most max_bytes (a file that grows past it while read is refused too)."""
    label = label or str(path)
    with open_regular(path, label, max_bytes) as f:
        parts, total = [], 0
        try:
            while True:
                chunk = f.read(CHUNK)
                if not chunk:
                    break
                total += len(chunk)
                if total > max_bytes:
                    raise BadInput(f"{label}: more than the {_size(max_bytes)} kbench reads from such a file")
                parts.append(chunk)
        except OSError as e:
            raise BadInput(f"{label}: cannot read ({e.strerror or e})") from None
    return b"".join(parts)


def decode(data: bytes, label: str, bom: bool = False) -> str:
    """Strict UTF-8 (a leading byte-order mark dropped when bom=True), or BadInput naming the offset."""
    try:
        return data.decode("utf-8-sig" if bom else "utf-8")
    except UnicodeDecodeError as e:
        bad = data[e.start:e.start + 1].hex()
        raise BadInput(f"{label}: not UTF-8 text (byte 0x{bad} at offset {e.start})") from None


def read_text(path: str | os.PathLike, label: str | None = None, max_bytes: int = MANIFEST_MAX,
              bom: bool = False) -> str:
    label = label or str(path)
    return decode(read_bytes(path, label, max_bytes), label, bom)


class JSONProblem(ValueError):
    """Why a text is not JSON kbench takes, in words (`Expecting value, line 1 column 7`, `nested too deeply`, ...):
    callers that word their own line (a journal's line number, a stream's) catch this; others use parse_json."""

    def __init__(self, words: str, reason: str | None = None, column: int | None = None, content: bool = False):
        super().__init__(words)
        self.reason, self.column = reason, column
        self.content = content  # JSON, but not what kbench reads: a key twice, an integer too long

    def in_line(self) -> str:
        """The problem in a text of one line (a journal's, a workload's): its column, not `line 1`."""
        return f"{self.reason} at column {self.column}" if self.reason else str(self)


class _LongInt(str):
    """An integer literal too long for int(): kept as its digits so its place in the document can be named."""


def _dup_refused(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise JSONProblem(f"the key {k!r} appears twice in one object", content=True)
        seen[k] = v
    return seen


def _path_of(value, want=_LongInt, at: str = "") -> tuple[str, str] | None:
    """(where, the value) of the first value of type ``want`` in a parsed document: `groups[0].cells[3].time_us`."""
    stack = [(at, value)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, want):
            return where or "the document", v
        if isinstance(v, dict):
            stack.extend((f"{where}.{k}" if where else str(k), x) for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((f"{where}[{i}]", x) for i, x in reversed(list(enumerate(v))))
    return None


def loads(text: str | bytes, unique_keys: bool = False):
    """The one JSON parser: json.loads, or JSONProblem saying why not. unique_keys=True: a key twice in one
    object is refused (json.loads keeps the last one silently). A document nested deeper than Python's stack,
    bytes that are not UTF-8 and an integer of more digits than int() converts are problems, not tracebacks;
    the last names where the integer is."""
    hook = _dup_refused if unique_keys else None
    try:
        return json.loads(text, object_pairs_hook=hook)
    except JSONProblem:
        raise
    except json.JSONDecodeError as e:
        raise JSONProblem(f"{e.msg}, line {e.lineno} column {e.colno}", e.msg, e.colno) from None
    except RecursionError:
        raise JSONProblem("nested too deeply") from None
    except UnicodeDecodeError as e:
        raise JSONProblem(f"not UTF-8 (byte 0x{e.object[e.start:e.start + 1].hex()} at offset {e.start})") from None
    except ValueError:  # int(): "Exceeds the limit (4300 digits) for integer string conversion"
        pass
    found = None
    try:
        found = _path_of(json.loads(text, object_pairs_hook=hook,
                                    parse_int=lambda s: _LongInt(s) if long_int(s) else int(s)))
    except (ValueError, RecursionError):
        pass
    where, digits = found if found else ("the document", "")
    raise JSONProblem(f"{where}: {long_int(digits) or 'an integer of more digits than kbench reads'}",
                      content=True) from None


def parse_json(text: str | bytes, label: str, unique_keys: bool = False):
    """Parsed JSON, or BadInput (`LABEL: not valid JSON (...)`)."""
    try:
        return loads(text, unique_keys)
    except JSONProblem as e:
        raise BadInput(f"{label}: {e}" if e.content else f"{label}: not valid JSON ({e})") from None


def read_json(path: str | os.PathLike, label: str | None = None, max_bytes: int = MANIFEST_MAX,
              unique_keys: bool = False):
    """Parsed JSON of a UTF-8 file, or BadInput (`LABEL: not valid JSON (...)`)."""
    label = label or str(path)
    return parse_json(read_text(path, label, max_bytes), label, unique_keys)


# ---- a folder's files as its writer left them ----------------------------------------------------------------
def record(path: str | os.PathLike) -> dict:
    """{"bytes", "sha256"} of a file kbench just wrote (what a reader checks it against)."""
    h, n = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            n += len(chunk)
    return {"bytes": n, "sha256": h.hexdigest()}


def check_records(folder: str | os.PathLike, records, label: str, fix: str) -> None:
    """BadInput unless every file named in ``records`` ({name: {"bytes", "sha256"}}, what the writer recorded
    last) is in ``folder`` as written: a folder that mixes files of two writes (a replace stopped half way, a
    hand copy) is refused. Records in another form (older kbench) are not checked."""
    if not isinstance(records, dict):
        return
    for name, want in records.items():
        if not isinstance(want, dict) or not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
            continue
        if "\0" in name:  # no file has such a name (the OS refuses it): a hand-edited or foreign record
            raise BadInput(f"{label}: the manifest's files name {name!r}, which no file can be named (a NUL "
                           f"byte); {fix}")
        p = Path(folder) / name
        why = None
        try:
            st = os.stat(p)
        except OSError:
            why = "it is missing"
        else:
            if not stat.S_ISREG(st.st_mode):
                why = f"it is {kind_of(st.st_mode)}"
            elif want.get("bytes") is not None and st.st_size != want.get("bytes"):
                why = f"{st.st_size} bytes, {want.get('bytes')} were written"
            elif want.get("sha256") and record(p)["sha256"] != want.get("sha256"):
                why = "its sha256 differs from the one written"
        if why:
            raise BadInput(f"{label}: {name} does not match what was written with it ({why}): the folder mixes "
                           f"files of two writes (a replace stopped half way, or an edit); {fix}")
