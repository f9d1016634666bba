"""Output folders checked before anything runs: one `error:` line (exit 2) instead of a traceback later."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from kbench.errors import BadInput


def writable_dir(path: str | os.PathLike | None, option: str, create: bool = True) -> Path:
    """Creates ``path`` (and its parents) when missing and proves a file can be written in it.
    BadInput names ``option`` when the path is empty, a file, or not writable (read-only, /proc, full).
    create=False creates nothing: the nearest existing folder on the way to ``path`` is probed instead."""
    if path is None or not str(path).strip():
        raise BadInput(f"{option}: an empty path; give a folder (e.g. {option} results)")
    p = Path(path)
    probe = p
    if not create:
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if not probe.is_dir():
            raise BadInput(f"{option} {path}: {probe} exists and is not a folder")
    if p.exists() and not p.is_dir():
        raise BadInput(f"{option} {path}: exists and is not a folder")
    tmp = None
    try:
        if create:
            p.mkdir(parents=True, exist_ok=True)
        # mkstemp + os.write, not NamedTemporaryFile: on a full disk its closer fails again at garbage collection
        fd, tmp = tempfile.mkstemp(dir=probe, prefix=".kbench-probe-", suffix=".tmp")
        try:
            os.write(fd, b"\0" * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise BadInput(f"{option} {path}: cannot write there ({e.strerror or e})") from None
    finally:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
    return p
