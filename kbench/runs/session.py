"""One run session for every command that writes a run folder (`kbench sweep`, `kbench server-bench`):

    with RunSession.new(out_dir, name, manifest) as run:        # a new folder, OUT/<name>-<time>/
    with RunSession.resume(run_dir, kind="sweep") as run:       # finish an interrupted run
        todo = [c for c in cases if (c.case_id,) not in run.done]
        run.append(row)                     # the journal, flushed and fsynced; the row's key joins run.done
        run.stop("why")                     # a stop the command handled itself: the run ends interrupted

Opening: a resumed folder must be a kbench run of the command's kind (checked before anything in it is
touched); then kbench.runs.store.RunWriter takes the lock (one writer per folder, kbench.runs.lock), makes the
folder (new) or carries its rows over (resume), writes the typed manifest (kbench.runs.manifest) with status
running and opens the journal; the done set is rebuilt from the journal (the keys of its rows).

Closing, the same finish rules for every kind of run:
  complete      the block ended (or the status the command set in `run.status`: a server bench's "stopped"
                by --fail-fast)
  interrupted   Ctrl-C or SIGTERM (stopped_by says which, interrupted_at when); a stop the command handled
                (`run.stop`: a lost CUDA context, a journal that cannot grow); an OSError or a KbenchError (a
                write that failed, bad data met mid-run): stopped_by is its message
  crashed       anything else (a bug): stopped_by names the exception
then the tables are written from the journal and the manifest closed (RunWriter.finalize). An exception goes on
up; a run that cannot be closed then (the disk that failed the row) does not hide it, and its journal keeps
every complete row.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from kbench.errors import BadInput, KbenchError, first_line
from kbench.runs.manifest import Manifest
from kbench.runs.signals import stop_reason
from kbench.runs.store import (JOURNAL, RunWriter, new_run_dir, now_iso, read_journal, read_manifest,
                               removed_unless_written)

# the columns that name a row of a run kind (a second row with the same key is not measured again); a kind not
# listed: case_id (a server bench's row is its case)
KEYS = {"sweep": ("kernel", "case_id")}


class RunSession:
    """A run folder open for writing, as a context manager (see the module's docstring)."""

    def __init__(self, run_dir: str | Path, manifest: Manifest | dict | None = None, *, resume: bool = False,
                 kind: str | None = None):
        self.dir = Path(run_dir)
        self.resumed = resume
        self.kind = kind  # a resumed run must be of this kind (None: any)
        self.status = "complete"  # how the run ends when its block does
        self.done: set[tuple] = set()  # keys of the rows in the journal (KEYS)
        self._new_manifest = manifest
        self._writer: RunWriter | None = None
        self.opened = False  # the folder is a run (its manifest written, or the resumed one read): the block runs

    @classmethod
    def new(cls, out_dir: str | Path, name: str, manifest: Manifest | dict) -> "RunSession":
        """A new run folder OUT/<name>-<time> (kbench.runs.store.new_run_dir), made when the session opens."""
        return cls(new_run_dir(out_dir, name), manifest)

    @classmethod
    def resume(cls, run_dir: str | Path, kind: str | None = None) -> "RunSession":
        return cls(run_dir, resume=True, kind=kind)

    # -- opening ----------------------------------------------------------------------------------------------
    def __enter__(self) -> "RunSession":
        if self.resumed and self.kind is not None:
            found = read_manifest(self.dir)
            if found.get("kind", "sweep") != self.kind:
                raise BadInput(f"{self.dir}: not a {self.kind} run (kind {found.get('kind')!r})")
        if not self.resumed:  # a new folder, removed if it is cut short while it is made (not left without a manifest)
            with removed_unless_written(self.dir):
                self._writer = RunWriter(self.dir, self._new_manifest or {}, resume=False)
        else:
            self._writer = RunWriter(self.dir, self._new_manifest or {}, resume=True)
            try:
                rows = self.rows()
                self.done = set(zip(*(rows[c] for c in self.key))) if len(rows) else set()
            except BaseException:
                self._writer.release()
                raise
        self.opened = True
        return self

    @property
    def key(self) -> tuple[str, ...]:
        return KEYS.get(self._writer.kind, ("case_id",))

    @property
    def manifest(self) -> Manifest:
        """The run's manifest (typed; written when the run closes, or by update_manifest)."""
        return self._writer.manifest

    @property
    def shard(self) -> tuple[int, int] | None:
        """The slice (i, N) the run holds, from its manifest (None: the whole grid)."""
        return self._writer.manifest_shard()

    # -- while open -------------------------------------------------------------------------------------------
    def append(self, row) -> None:
        """One row (a Row, a ServerBenchRow or a dict) to the journal; its key joins `done`. An OSError (a full
        disk) goes up with the journal cut back to its complete rows."""
        self._writer.append(row)
        self.done.add(tuple(row[c] if isinstance(row, dict) else getattr(row, c) for c in self.key))

    def rows(self) -> pd.DataFrame:
        """Every row of the run so far (its journal, all calls)."""
        return read_journal(self.dir / JOURNAL, self._writer.kind)

    def update_manifest(self, **fields) -> None:
        """Set manifest fields and write the manifest now (it is written again when the run closes)."""
        self._writer.update_manifest(**fields)

    def stop(self, reason: str) -> None:
        """The command stopped the run itself (and goes on to report it): it ends interrupted, for `reason`."""
        self.status = "interrupted"
        self.manifest["stopped_by"] = reason

    # -- closing: the finish rules ----------------------------------------------------------------------------
    def __exit__(self, exc_type, exc, tb) -> bool:
        if isinstance(exc, KeyboardInterrupt):  # Ctrl-C, or SIGTERM under kbench.runs.signals.terminate_as_interrupt
            self.status = "interrupted"
            self.manifest.update(interrupted_at=now_iso(), stopped_by=stop_reason(exc))
        elif isinstance(exc, (OSError, KbenchError)):
            self.status = "interrupted"
            self.manifest["stopped_by"] = str(exc)[:300]
        elif exc is not None:
            self.status = "crashed"
            self.manifest["stopped_by"] = first_line(exc)
        try:
            self._writer.finalize(self.status)
        except (OSError, KbenchError):
            if exc is None:
                raise
        return False
