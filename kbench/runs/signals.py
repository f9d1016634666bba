"""SIGTERM (what Slurm, Kubernetes and CI runners send) handled like Ctrl-C: the running code sees a
KeyboardInterrupt subclass, finalizes what it has, and the command exits 128 + the signal number (143).

Two scopes: terminate_as_interrupt for a block (the CLI wraps every command in one, kbench.cli.main; the blocks
that write a run or replace a folder have their own, which tell the code within which signal stopped it), and
raise_on_sigterm for a whole process (the `kbench` entry point: the moments before and after the command's block).
"""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when SIGTERM arrives."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


class Stop:
    """What stopped the work: None, or the signal number (SIGINT for Ctrl-C, SIGTERM)."""

    signum: int | None = None

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or signal.SIGINT)

    @property
    def reason(self) -> str:
        return f"stopped by {signal.Signals(self.signum or signal.SIGINT).name}"


_RAISED: list[int] = []  # the signals raised as Terminated in this process, in order


def interrupt_in(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM behind an exception: one in its chain (__cause__, __context__), or, where the
    chain lost it, a SIGTERM this process raised; None for an error of its own."""
    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return Terminated(_RAISED[0]) if _RAISED else None


def stop_reason(exc: BaseException) -> str:
    """The manifest's `stopped_by` for an interrupt."""
    return str(exc) if isinstance(exc, Terminated) else "stopped by SIGINT"


@contextlib.contextmanager
def terminate_as_interrupt(signums=(signal.SIGTERM,)) -> Iterator[Stop]:
    """Within the block, SIGTERM raises Terminated (a KeyboardInterrupt) in the main thread; the yielded
    Stop records which signal stopped the work (SIGINT when a plain KeyboardInterrupt leaves the block)."""
    stop = Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum, frame):
        if stop.signum is None:
            stop.signum = signum
            _RAISED.append(signum)
            raise Terminated(signum)

    old = {s: signal.signal(s, handler) for s in signums}
    try:
        yield stop
    except Terminated as e:
        stop.signum = e.signum
        raise
    except KeyboardInterrupt:
        stop.signum = stop.signum or signal.SIGINT
        raise
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def raise_on_sigterm() -> None:
    """For the rest of this process (the `kbench` entry point): SIGTERM raises Terminated in the main thread, once;
    a later SIGTERM is ignored while the first one's cleanup runs (what it started to leave whole is left whole).
    A terminate_as_interrupt block within puts this back when it ends."""
    if threading.current_thread() is not threading.main_thread():
        return
    raised = []

    def handler(signum, frame):
        if not raised:
            raised.append(signum)
            _RAISED.append(signum)
            raise Terminated(signum)

    signal.signal(signal.SIGTERM, handler)


def ignore_sigterm() -> None:
    """The command has ended and its exit code is set: a SIGTERM while Python shuts down changes nothing."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


@contextlib.contextmanager
def deferred_signals(signums=(signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM are held (recorded, not acted on) and delivered when it ends: for
    the few steps that must not be cut in two (swapping a folder into place, removing the one it replaced)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    old = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in signums}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        for s in dict.fromkeys(held):
            signal.raise_signal(s)  # now handled as it would have been (KeyboardInterrupt, Terminated, exit)
