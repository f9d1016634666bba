"""Every file kbench rewrites goes through here: written to a temporary file beside it, then renamed over it.

A reader (or a crash, a full disk, a kill) sees the old file or the new one, never half of one; a failed
write removes its temporary file and leaves the old file as it was. OSError from the file system (no space,
read-only, permission) becomes BadInput: one `error:` line, exit 2.

A folder of files that belong together (a baseline, a report) is replaced the same way, as a whole:
`replaced_folder` yields a folder to write into (inside a hidden sibling) and swaps it into place in one step.
Only kill -9 can leave such a hidden sibling (`.kb-new-*`, `.kb-old-*`) behind: the next replace in that folder
removes it, but only when it is kbench's own (a marker file inside, MARKER, written by the writer that made it:
kbench, its pid and host, the time), no process holds it (its writer keeps an flock on it while it lives) and it
is STALE_AFTER_S old. A folder of that name without the marker is the user's: never removed.
Files a run changes in place (the journal, the lock) are opened with `open_no_follow`: never through a link.
A file the user names (named=True: --json, --markdown, export --out) is resolved by `named_destination`: a link
is followed, a device or FIFO (/dev/stdout) is written through rather than replaced.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
from pathlib import Path
import shutil
from typing import Callable, Iterator

from kbench import files
from kbench.errors import BadInput
from kbench.runs.signals import deferred_signals, terminate_as_interrupt


def named_destination(path: str | os.PathLike) -> tuple[Path, bool]:
    """Where a file the user named on the command line (--json F, --markdown F, export --out F) is written, and
    whether it is a stream: (the path, False) for a new or regular file; a symbolic link is followed, so the file
    it points to is replaced and the link kept, as a shell's `>` does; (the path, True) for a character device
    or a FIFO (/dev/stdout, /dev/null, a shell's process substitution), which is written through, not replaced.
    A folder, a block device or a socket is BadInput."""
    p = Path(path)
    real = Path(os.path.realpath(p)) if p.is_symlink() else p  # only for a file: /dev/stdout's is /proc/N/fd/pipe:[..]
    try:
        st = os.stat(p)  # through the links
    except FileNotFoundError:
        return real, False
    except OSError as e:
        raise BadInput(f"cannot write {p}: {e.strerror or e}") from None
    if stat.S_ISREG(st.st_mode):
        return real, False
    if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        return p, True
    what = "a folder" if stat.S_ISDIR(st.st_mode) else files.kind_of(st.st_mode)
    raise BadInput(f"cannot write {p}: {what}; give a file name")


@contextlib.contextmanager
def _through_stream(dest: Path) -> Iterator[Path]:
    """A device or FIFO: the writer writes a private temporary file, then its bytes go to ``dest`` as they are
    (a stream has no old content to keep whole; a write error is BadInput)."""
    with tempfile.TemporaryDirectory(prefix="kbench-out-") as d:
        tmp = Path(d) / ("out" + dest.suffix)
        yield tmp
        try:
            with open(tmp, "rb") as src, open(dest, "wb", buffering=0) as out:
                shutil.copyfileobj(src, out)
        except OSError as e:
            raise BadInput(f"cannot write {dest}: {e.strerror or e}") from None


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, named: bool = False) -> Iterator[Path]:
    """Yields a temporary path in the same folder as ``path``; on a clean exit it is fsynced and renamed
    to ``path``. On any error the temporary file is removed and ``path`` is untouched. named=True: a path the
    user named, resolved by named_destination (a link followed, a device or FIFO written through)."""
    dest = Path(path)
    if named:
        dest, stream = named_destination(dest)
        if stream:
            with _through_stream(dest) as tmp:
                yield tmp
            return
    try:
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, suffix=_tmp_suffix(dest), dir=dest.parent or ".")
        os.close(fd)
        os.chmod(tmp, 0o666 & ~_umask())
    except OSError as e:
        raise BadInput(f"cannot write {dest}: {e.strerror or e}") from None
    tmp_p = Path(tmp)
    try:
        yield tmp_p
        with open(tmp_p, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp_p, dest)
    except OSError as e:
        tmp_p.unlink(missing_ok=True)
        raise BadInput(f"cannot write {dest}: {e.strerror or e}") from None
    except BaseException:
        tmp_p.unlink(missing_ok=True)
        raise


# Temporary names beside an output are short, whatever the output's name: any name the file system takes (255
# bytes on most) must be writable, so the temporary one may not be longer (`.kb-` + 8 random characters + a suffix)
TMP_PREFIX = ".kb-"


def _tmp_suffix(dest: Path) -> str:
    """`.tmp` and the output's own suffix where it is a short one: writers that pick a format from the name
    (savefig, to_parquet) still can."""
    return ".tmp" + (dest.suffix if len(dest.suffix) <= 16 else "")


def open_no_follow(path: str | os.PathLike, flags: int, mode: int = 0o644, truncate: bool = False) -> int:
    """os.open for writing a file inside a run or baseline folder, never through a link: a symbolic link
    (O_NOFOLLOW), a hard link shared with another name, or anything but a regular file is BadInput, and the
    file it points to is not touched. Returns the descriptor (truncated to 0 bytes when truncate=True, only
    after those checks)."""
    p = Path(path)
    try:
        fd = os.open(p, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO):  # a symbolic link; a FIFO without a reader, a socket
            raise BadInput(_not_writable_in_place(p, os.lstat(p)) or f"{p}: cannot open for writing") from None
        raise BadInput(f"{p}: cannot open for writing ({e.strerror or e})") from None
    try:
        why = _not_writable_in_place(p, os.fstat(fd))
        if why:
            raise BadInput(why)
        os.set_blocking(fd, True)
        if truncate:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def refuse_links(folder: str | os.PathLike, names) -> None:
    """BadInput when one of ``names`` in ``folder`` is a link (symbolic, or a hard link shared with another name)
    or not a regular file: open_no_follow's refusals, checked before anything is written."""
    for n in names:
        p = Path(folder) / n
        try:
            st = os.lstat(p)
        except OSError:
            continue
        why = _not_writable_in_place(p, st)
        if why:
            raise BadInput(why)


def _not_writable_in_place(p: Path, st: os.stat_result) -> str | None:
    if stat.S_ISLNK(st.st_mode):
        return (f"{p}: a symbolic link; kbench does not write through links in a run folder (remove it, or put a "
                f"copy of the file it points to in its place)")
    if not stat.S_ISREG(st.st_mode):
        return f"{p}: {files.kind_of(st.st_mode)}, not a regular file; kbench writes only regular files in a run " \
               f"folder (remove it)"
    if st.st_nlink > 1:
        return (f"{p}: a hard link shared with {st.st_nlink - 1} other name(s); writing it would change them too "
                f"(replace it with a copy: cp --remove-destination)")
    return None


@contextlib.contextmanager
def replaced_folder(dest: str | os.PathLike, label: str, carry: Callable[[str], bool] | None = None) -> Iterator[Path]:
    """A multi-file output replaced as a whole. Yields a new empty folder to write every file into (inside a
    hidden sibling of ``dest`` that holds kbench's MARKER); on a clean exit it takes dest's place in one step
    (renameat2 RENAME_EXCHANGE; on a file system without it, two renames a moment apart), then the sibling, with
    the folder it replaced, is removed. On an error, Ctrl-C or SIGTERM before the swap (SIGTERM is handled like
    Ctrl-C within the block) the sibling is removed and dest is as it was; the two signals are held while the
    swap and the removal run. ``carry(name)``: entries of the old folder to copy into the new one before the swap
    (what a user keeps beside kbench's files). A reader sees the old folder or the new one, never a mix; only
    kill -9 can leave a hidden `.kb-new-*` or `.kb-old-*` folder behind (never a half-written dest), and the next
    replace beside it removes it (remove_stale_folders: marked by kbench, unheld, stale)."""
    dest = Path(dest)
    if dest.is_symlink():
        raise BadInput(f"{label} {dest}: a symbolic link; kbench replaces this folder as a whole and does not "
                       f"follow links (give the folder it points to)")
    if dest.exists() and not dest.is_dir():
        raise BadInput(f"{label} {dest}: exists and is not a folder")
    parent = dest.parent
    made = _missing_folders(parent)  # the folders this call makes on the way: removed again if it fails
    with terminate_as_interrupt():
        try:
            parent.mkdir(parents=True, exist_ok=True)
            remove_stale_folders(parent)
            side = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}new-", dir=parent))
            held = _hold(side)  # while this process lives: not stale to another kbench
        except OSError as e:
            raise BadInput(f"{label} {dest}: cannot write there ({e.strerror or e})") from None
        try:
            _mark(side, dest)
            tmp = side / (dest.name if dest.name not in ("", ".", "..") else "new")
            tmp.mkdir()  # the mode a new folder gets here (0777 & ~umask): what dest has after the swap
        except OSError as e:
            os.close(held)
            shutil.rmtree(side, ignore_errors=True)
            _remove_empty(made)
            raise BadInput(f"{label} {dest}: cannot write there ({e.strerror or e})") from None
        try:
            yield tmp
            if carry is not None and dest.is_dir():
                for entry in sorted(dest.iterdir()):
                    if carry(entry.name) and not (tmp / entry.name).exists():
                        if entry.is_dir() and not entry.is_symlink():
                            shutil.copytree(entry, tmp / entry.name, symlinks=True)
                        else:
                            shutil.copy2(entry, tmp / entry.name, follow_symlinks=False)
            _fsync_dir(tmp)
            with deferred_signals():
                old = _swap(tmp, dest)
                _fsync_dir(parent)
                for gone in (side, old):  # the sibling (after an exchange: dest's old content inside it)
                    if gone is not None:
                        shutil.rmtree(gone, ignore_errors=True)
        except OSError as e:
            with deferred_signals():
                shutil.rmtree(side, ignore_errors=True)
                _remove_empty(made)
            raise BadInput(f"{label} {dest}: cannot write there ({e.strerror or e}); it is as it was") from None
        except BaseException:
            with deferred_signals():
                shutil.rmtree(side, ignore_errors=True)
                _remove_empty(made)
            raise
        finally:
            os.close(held)


# a hidden sibling this old, that no process holds, is a killed writer's: removed (younger: it may be a writer's
# between making the folder and taking its lock, a few microseconds)
STALE_AFTER_S = 2.0
# on a file system without flock, a marker of another host is a writer's there for this long (its pid means
# nothing here); one of this host is stale once its process is gone
OTHER_HOST_STALE_S = 24 * 3600.0
_SIBLINGS = (f"{TMP_PREFIX}new-", f"{TMP_PREFIX}old-")
# the file inside a hidden sibling that says kbench made it: only such a folder is ever removed by the sweep
MARKER = ".kbench-writer.json"
MARKER_MAX = 4096
WRITER = "kbench.runs.atomic"


def _mark(folder: Path, dest: Path) -> None:
    """Write MARKER into a hidden sibling this process just made: who made it (kbench, pid, host), when, for
    which output."""
    import json
    import socket
    import time

    from kbench import __version__

    doc = {"writer": WRITER, "kbench": __version__, "pid": os.getpid(), "host": socket.gethostname(),
           "time": time.time(), "for": dest.name[:200]}
    fd = os.open(folder / MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with open(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps(doc) + "\n")


def marker_of(folder: str | os.PathLike) -> dict | None:
    """The MARKER a kbench writer left in ``folder`` (a regular file, not a link, of at most MARKER_MAX bytes,
    JSON naming this writer), or None: not kbench's."""
    try:
        fd = os.open(Path(folder) / MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, MARKER_MAX + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > MARKER_MAX:
        return None
    try:
        doc = files.parse_json(data, MARKER)
    except BadInput:
        return None
    return doc if isinstance(doc, dict) and doc.get("writer") == WRITER else None


def _hold(folder: Path) -> int:
    """An flock on ``folder`` for as long as the returned descriptor is open (the process ends: released)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        pass  # a file system without flock: the marker's pid and host tell
    return fd


def _writer_alive(mark: dict, age_s: float) -> bool:
    """Where flock cannot tell (a file system without it): is the marker's writer perhaps still at work? On this
    host, while its pid lives; on another, for OTHER_HOST_STALE_S."""
    import socket

    pid = mark.get("pid")
    if mark.get("host") != socket.gethostname() or not isinstance(pid, int) or isinstance(pid, bool):
        return age_s < OTHER_HOST_STALE_S
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process of that pid: alive
    return True


def remove_stale_folders(parent: str | os.PathLike) -> list[Path]:
    """Removes the `.kb-new-*` / `.kb-old-*` folders in ``parent`` that a kbench writer killed mid-write left
    behind: only a real folder (not a link) holding kbench's MARKER, STALE_AFTER_S old or more, whose flock no
    process holds (a live writer's is held). A folder of such a name without the marker is the user's and is
    left as it is. Best effort, never an error; returns what was removed."""
    import time

    removed = []
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(_SIBLINGS)]
    except OSError:
        return removed
    for e in entries:
        try:
            st = e.stat(follow_symlinks=False)
            age = time.time() - st.st_mtime
            if not stat.S_ISDIR(st.st_mode) or age < STALE_AFTER_S:
                continue
            fd = os.open(e.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            mark = marker_of(e.path)
            if mark is None:
                continue  # not kbench's: never removed
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES) or _writer_alive(mark, age):
                    continue  # held: a writer at work
            shutil.rmtree(e.path, ignore_errors=True)
            removed.append(Path(e.path))
        finally:
            os.close(fd)
    return removed


def _missing_folders(folder: Path) -> list[Path]:
    """The folders on the way to ``folder`` (itself included) that do not exist yet, deepest first."""
    out = []
    p = Path(os.path.abspath(folder))
    while not p.exists() and p != p.parent:
        out.append(p)
        p = p.parent
    return out


def _remove_empty(folders: list[Path]) -> None:
    """Remove these folders (deepest first) while they are empty: what a failed write made, nothing else."""
    for f in folders:
        try:
            f.rmdir()
        except OSError:
            return


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """renameat2(a, b, RENAME_EXCHANGE): the two paths swap their contents in one step. False where the C
    library or the file system lacks it (the caller falls back to two renames)."""
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _swap(new: Path, dest: Path) -> Path | None:
    """Puts ``new`` at ``dest``; returns the marked `.kb-old-*` folder that now holds dest's old content where
    the two-rename fallback made one (None: there was no old content, or it went where ``new`` was)."""
    if not dest.exists():
        os.rename(new, dest)
        return None
    if not any(dest.iterdir()):
        os.rename(new, dest)  # onto an empty folder: replaced by the rename itself
        return None
    if _exchange(new, dest):
        return None  # dest's old content is at ``new`` now, inside the marked sibling the caller removes
    old = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}old-", dir=dest.parent))
    _mark(old, dest)
    os.rename(dest, old / "x")
    os.rename(new, dest)
    return old


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def write_text(path: str | os.PathLike, text: str, named: bool = False) -> Path:
    with atomic_path(path, named) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_bytes(path: str | os.PathLike, data: bytes, named: bool = False) -> Path:
    with atomic_path(path, named) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_with(path: str | os.PathLike, writer: Callable[[Path], object], named: bool = False) -> Path:
    """``writer(tmp_path)`` writes the file (pandas' to_parquet, matplotlib's savefig, ...). named: see
    atomic_path."""
    with atomic_path(path, named) as tmp:
        writer(tmp)
    return Path(path)


class SpaceReserve:
    """A few KiB held in a hidden file while a run writes, freed when the disk fills so that the final
    manifest (status `interrupted` and why) can still be written. Best effort: no reserve when even it
    does not fit."""

    def __init__(self, folder: str | os.PathLike, nbytes: int = 16 << 10, name: str = ".kbench.reserve"):
        self.path = Path(folder) / name
        fd = open_no_follow(self.path, os.O_WRONLY | os.O_CREAT, truncate=True)  # a link there: BadInput
        try:
            with open(fd, "wb") as f:
                try:
                    os.posix_fallocate(f.fileno(), 0, nbytes)
                except (AttributeError, OSError):
                    f.write(b"\0" * nbytes)
                    f.flush()
                    os.fsync(f.fileno())
        except OSError:
            self.free()

    def free(self) -> None:
        try:
            self.path.unlink()
        except OSError:
            pass
