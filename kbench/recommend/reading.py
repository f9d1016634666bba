"""The one place recommend reads a file it did not write (a workload file; a policy goes through
kbench.report.policy.load_policy, a run through kbench.report.runs.combine).

Same contract as the safe reader another change adds as kbench/files.py (when it is on main, `read_text` here
becomes a call to kbench.files.read_text): only a regular file is read (a folder, a FIFO, a device: one line,
never a hang), at most `max_bytes`, strict UTF-8 (other bytes: one line naming the offset).
"""
from __future__ import annotations

import errno
import os
import stat

from kbench.errors import BadInput

WORKLOAD_MAX = 256 << 20  # a JSONL of batches: millions of lines


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


def read_text(path, label: str | None = None, max_bytes: int = WORKLOAD_MAX) -> str:
    label = label or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ENOENT:
            raise BadInput(f"{label}: no such file") from None
        raise BadInput(f"{label}: cannot read ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"{label}: {_kind(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:
            raise BadInput(f"{label}: {st.st_size} bytes, more than the {max_bytes} kbench reads from such a file")
        chunks, total = [], 0
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            total += len(b)
            if total > max_bytes:
                raise BadInput(f"{label}: more than the {max_bytes} bytes kbench reads from such a file")
            chunks.append(b)
    except OSError as e:
        raise BadInput(f"{label}: cannot read ({e.strerror or e})") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(f"{label}: not UTF-8 text (byte {e.start})") from None
