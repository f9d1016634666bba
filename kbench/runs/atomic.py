"""Every file kbench rewrites goes through here: written to a temporary file beside it, then renamed over it.

A reader (or a crash, a full disk, a kill) sees the old file or the new one, never half of one; a failed
write removes its temporary file and leaves the old file as it was. OSError from the file system (no space,
read-only, permission) becomes BadInput: one `error:` line, exit 2.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from kbench.errors import BadInput


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yields a temporary path in the same folder as ``path``; on a clean exit it is fsynced and renamed
    to ``path``. On any error the temporary file is removed and ``path`` is untouched."""
    dest = Path(path)
    try:
        # the real suffix last: writers that pick a format from the name (savefig, to_parquet) still can
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp" + dest.suffix, dir=dest.parent or ".")
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


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def write_text(path: str | os.PathLike, text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_with(path: str | os.PathLike, writer: Callable[[Path], object]) -> Path:
    """``writer(tmp_path)`` writes the file (pandas' to_parquet, matplotlib's savefig, ...)."""
    with atomic_path(path) as tmp:
        writer(tmp)
    return Path(path)


class SpaceReserve:
    """A few KiB held in a hidden file while a run writes, freed when the disk fills so that the final
    manifest (status `interrupted` and why) can still be written. Best effort: no reserve when even it
    does not fit."""

    def __init__(self, folder: str | os.PathLike, nbytes: int = 16 << 10, name: str = ".kbench.reserve"):
        self.path = Path(folder) / name
        try:
            with open(self.path, "wb") as f:
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
