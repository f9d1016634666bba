"""Output folders checked before anything runs: one `error:` line (exit 2) instead of a traceback later."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from kbench.errors import BadInput


def given_path(path: str | os.PathLike | None, option: str, example: str, what: str = "folder") -> Path:
    """An output path given from Python: BadInput naming ``option`` for an empty one ('' or blanks), which Path
    reads as the current folder (the CLI refuses it as it parses: kbench.cli.options.OutputPath)."""
    if path is None or not str(path).strip():
        raise BadInput(f"{option}: an empty path; give a {what} (e.g. {option} {example})")
    if not isinstance(path, (str, os.PathLike)):
        raise BadInput(f"{option} {path!r}: give a {what} path (e.g. {option} {example})")
    return Path(path)


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
        fd, tmp = tempfile.mkstemp(dir=probe, prefix=".kb-probe-", suffix=".tmp")
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


def writable_file(path: str | os.PathLike, option: str) -> None:
    """BadInput naming ``option`` when no file can be written at ``path`` (a folder, a read-only or missing
    place): checked before a command works, so that a bad third output is not found after two were written. A
    device or FIFO (/dev/stdout) is a stream and passes; a file is replaced by a rename, so its folder must take
    a new file."""
    from kbench.runs.atomic import named_destination

    if path is None or not str(path).strip():
        raise BadInput(f"{option}: an empty path; give a file name")
    try:
        dest, stream = named_destination(path)
    except BadInput as e:
        raise BadInput(f"{e} ({option})") from None
    if stream:
        return
    folder = dest.parent
    if not folder.is_dir():
        raise BadInput(f"cannot write {path} ({option}): its folder {folder} does not exist")
    try:
        writable_dir(folder, option, create=False)
    except BadInput:
        raise BadInput(f"cannot write {path} ({option}): its folder {folder} takes no new file") from None


def appendable_file(path: str | os.PathLike, what: str) -> None:
    """BadInput when ``path`` cannot be appended to (a file a command adds to, as $GITHUB_STEP_SUMMARY)."""
    p = Path(path)
    if p.exists():
        if p.is_dir():
            raise BadInput(f"{what} {path}: a folder, not a file to append to")
        if not os.access(p, os.W_OK):
            raise BadInput(f"{what} {path}: cannot append to it (permission denied)")
    elif not p.parent.is_dir():
        raise BadInput(f"{what} {path}: its folder {p.parent} does not exist")
    elif not os.access(p.parent, os.W_OK):
        raise BadInput(f"{what} {path}: cannot create it (permission denied)")


def _real(p: str | os.PathLike) -> str:
    return os.path.realpath(os.path.expanduser(str(p)))


def distinct_outputs(outputs: dict[str, str | os.PathLike | None], inputs=()) -> None:
    """BadInput, before anything is written, when two output options name the same file (`--markdown out.md
    --json out.md`: one would silently replace the other) or an output names one of the command's inputs: an
    input file itself (`export P --out P`), or a file kbench reads in an input run or baseline folder
    (`--markdown RUN/rows.csv`). Paths compare after links are followed. Devices (/dev/stdout, /dev/null) are
    streams, not files: two options may both write to one."""
    from kbench.runs.atomic import named_destination
    from kbench.runs.lock import LOCK_FILE
    from kbench.runs.store import CSV, JOURNAL, MANIFEST, PARQUET  # lazy: store imports pandas

    seen: dict[str, str] = {}
    guarded: dict[str, str] = {}
    for src in inputs:
        if src is None or not str(src).strip():
            continue
        real = _real(src)
        if os.path.isdir(real):  # a run or baseline folder: the files kbench reads in it
            for name in (MANIFEST, JOURNAL, PARQUET, CSV, LOCK_FILE):
                guarded[os.path.join(real, name)] = f"{os.path.join(str(src), name)}, a file of the input {src}"
        else:
            guarded[real] = f"the input {src}"
    for option, path in outputs.items():
        if path is None or not str(path).strip() or str(path) == "-":
            continue
        if named_destination(path)[1]:  # a device or FIFO: a stream, not a file to replace
            continue
        real = _real(path)
        if real in guarded:
            raise BadInput(f"{option} {path}: that is {guarded[real]}; writing there would replace what the command "
                           f"reads (name another file)")
        if real in seen:
            raise BadInput(f"{option} {path} and {seen[real]} name the same file; one would replace the other")
        seen[real] = f"{option} {path}"
