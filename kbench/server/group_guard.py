"""Process groups ended with kbench, however kbench ends: also by kill -9, which no handler of its own sees.

`--switch-command` runs each command in a process group of its own (a session), and what it leaves running there
(the server it started in the background) is kbench's to end. kbench ends the groups itself at the end of a run,
on an error, Ctrl-C and SIGTERM (kbench.server.interleave); for the one end it cannot see, a small guard process
holds the list: kbench writes `+PGID` when a group starts and `-PGID` once it has ended it, through a pipe whose
writing end only kbench holds. When kbench dies the pipe reads end of file, and the guard ends every group still on
its list (SIGTERM, then SIGKILL to what is left after GRACE_S) and exits; after a normal end the list is empty and
it just exits.

Why not PR_SET_PDEATHSIG alone: the kernel gives the parent-death signal only to the direct child, and clears it
in that child's own children (fork), while the switch command has usually exited already and left the server as
a grandchild in its group; the guard reaches the whole group. Its limit: a process that leaves the group
(`setsid`, a daemon's double fork, `systemd-run`) is no longer in it and is not ended; run such a server in the
foreground of the switch command's group (e.g. `nohup server &`, not `setsid server &`).

The guard itself is this file run as a script with this Python (`python -I group_guard.py`): standard library
only, nothing of kbench imported, in a session of its own so that a Ctrl-C at the terminal does not end it before
kbench has ended the groups.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

GRACE_S = 5.0


class GroupGuard:
    """kbench's side: the guard started at the first group, told of each group started and ended."""

    def __init__(self):
        self._proc: subprocess.Popen | None = None

    def add(self, pgid: int) -> None:
        if self._proc is None:
            self._proc = subprocess.Popen([sys.executable, "-I", os.path.abspath(__file__)], stdin=subprocess.PIPE,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          start_new_session=True, text=True, bufsize=1)
        self._say(f"+{pgid}")

    def forget(self, pgid: int) -> None:
        """The group was ended by kbench itself: the guard must not signal its number again (it may be reused)."""
        self._say(f"-{pgid}")

    def _say(self, line: str) -> None:
        if self._proc is None or self._proc.stdin is None:
            return
        try:
            self._proc.stdin.write(line + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass  # the guard is gone (killed by the user): kbench still ends the groups itself on every end it sees


def end_groups(groups, grace: float = GRACE_S) -> None:
    """SIGTERM to each process group, then SIGKILL to those with a member left after ``grace`` seconds."""
    alive = []
    for g in groups:
        try:
            os.killpg(g, signal.SIGTERM)
            alive.append(g)
        except (ProcessLookupError, PermissionError):
            pass
    end = time.monotonic() + grace
    while alive and time.monotonic() < end:
        alive = [g for g in alive if group_alive(g)]
        if alive:
            time.sleep(0.05)
    for g in alive:
        try:
            os.killpg(g, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def group_alive(pgid: int) -> bool:
    try:
        os.waitpid(pgid, os.WNOHANG)  # reap the leader if it is our child (a zombie still counts as alive)
    except ChildProcessError:
        pass
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _watch(stream) -> None:
    """The guard: read +PGID / -PGID lines until end of file (kbench ended, or died), then end what is listed."""
    groups: list[int] = []
    for line in stream:
        line = line.strip()
        try:
            pgid = int(line[1:])
        except ValueError:
            continue
        if line.startswith("+") and pgid not in groups:
            groups.append(pgid)
        elif line.startswith("-") and pgid in groups:
            groups.remove(pgid)
    end_groups(groups)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ended by end of file only
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    _watch(sys.stdin)
