"""One writer per run folder: an advisory lock on RUN/.kbench.lock that holds the writer's pid.

The lock is an flock(2) on the file, so it goes away with its process however that ends (kill -9 too);
the file itself stays (it only names the last holder). A second writer is refused with one line that
names the holder's pid. A lock file that is a link (symbolic or hard) is refused, never written through.
Within one process the lock is re-entrant: a command that takes it before it prints anything (kbench sweep
--resume: refused before its plan line) keeps it while the run's writer takes it again.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from kbench.errors import BadInput
from kbench.runs.atomic import open_no_follow

LOCK_FILE = ".kbench.lock"
_HELD: dict[str, list] = {}  # the run folders this process holds: real path -> [fd, holders]


class RunLock:
    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: int | None = None
        self._key = os.path.realpath(Path(run_dir))

    def acquire(self) -> "RunLock":
        held = _HELD.get(self._key)
        if held is not None:  # this process holds it already (another RunLock of the same folder)
            held[1] += 1
            self._fd = held[0]
            return self
        try:  # never through a link: the pid written below would land in the file it points to
            fd = open_no_follow(self.path, os.O_RDWR | os.O_CREAT)
        except BadInput as e:
            raise BadInput(f"{self.path.parent}: cannot lock the run folder: {e}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise BadInput(f"{self.path.parent}: another kbench process (pid {holder}) is writing this run; "
                           f"wait for it to end or stop it first") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:  # a full disk: the lock holds all the same, only the pid is not recorded
            pass
        self._fd = fd
        _HELD[self._key] = [fd, 1]
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        held = _HELD.get(self._key)
        self._fd = None
        if held is not None:
            held[1] -= 1
            if held[1] > 0:
                return
            del _HELD[self._key]
            fcntl.flock(held[0], fcntl.LOCK_UN)
            os.close(held[0])

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


def holder(run_dir: str | os.PathLike) -> int | None:
    """The pid writing the run now (-1 when it is not recorded), or None when nobody holds its lock.
    Creates nothing: a folder without a lock file has no writer."""
    path = Path(run_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    except BlockingIOError:
        text = os.pread(fd, 64, 0).decode(errors="replace").strip()
        return int(text) if text.isdecimal() else -1
    finally:
        os.close(fd)
