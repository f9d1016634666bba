"""Run folders: manifest.json plus rows, written row by row so a killed run keeps what it measured.

    RUN/manifest.json   command line, scenario, versions, device, timer settings, start/end, status
    RUN/rows.jsonl      the journal: one JSON row per line, flushed and fsynced as each row is measured
    RUN/rows.parquet    the rows for tools (pandas, pyarrow, DuckDB), rewritten from the journal at the end
    RUN/rows.csv        the same as CSV (list columns as JSON)

Readers take the journal when it is there (it is the truth after a kill), else the Parquet, else the CSV.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import importlib
import io
import json
import os
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from kbench import RESULT_SCHEMA_VERSION, files, shell

from kbench.runs import atomic

from kbench.cases import axes
from kbench.values import json_safe
from kbench.errors import BadInput
from kbench.names import KERNEL_NAME
from kbench.runs.lock import LOCK_FILE, RunLock
from kbench.runs.manifest import Manifest
from kbench.runs.signals import deferred_signals
from kbench.runs.rows import COLUMNS, NUMBER_COLUMNS, STATUSES, Row
MANIFEST = "manifest.json"
JOURNAL = "rows.jsonl"
PARQUET = "rows.parquet"
CSV = "rows.csv"
RESERVE = ".kbench.reserve"  # kbench.runs.atomic.SpaceReserve's file
# files a writer changes in place (appends, truncates): never through a link (the others are replaced by a rename)
WRITTEN_IN_PLACE = (JOURNAL, RESERVE)
# Row kinds: kind -> (columns, list columns). A sweep run holds kernel rows (kbench.runs.rows); other kinds
# register themselves (kbench.server.rows registers "server-bench" when kbench.server is imported).
ROW_KINDS: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "sweep": (COLUMNS, ("samples_us",)),
}
REQUIRED = ("case_id",)


def register_row_kind(kind: str, columns: list[str], list_columns: tuple[str, ...] = ()) -> None:
    """Another kind of run (a test, a plug-in); kbench's own kinds are declared in ROW_KINDS."""
    ROW_KINDS[kind] = (list(columns), tuple(list_columns))


# kbench's kinds that live in a layer above this one: the module that registers each, imported by name when a run of
# that kind is first read (so `load_run` on a server-bench folder works from Python without importing kbench.server
# first; a name, not an import: runs/ stays below server/ in the layer check)
KIND_MODULES = {"server-bench": "kbench.server.rows", "layers": "kbench.runs.layer_rows"}


def row_kind(kind: str) -> tuple[list[str], tuple[str, ...]]:
    """A run kind's (columns, list columns); a kind of KIND_MODULES is registered by importing its module first."""
    if kind not in ROW_KINDS and kind in KIND_MODULES:
        importlib.import_module(KIND_MODULES[kind])
    if kind not in ROW_KINDS:
        raise BadInput(f"unknown run kind {kind!r} (known: {', '.join(ROW_KINDS)})")
    return ROW_KINDS[kind]


def _kind_of(manifest: dict) -> str:
    kind = manifest.get("kind", "sweep")
    row_kind(kind)
    return kind
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def safe_name(name: str) -> str:
    """A file-system-safe single path component: nothing can point outside the output folder."""
    s = _SAFE.sub("-", name).strip(".-")
    return (s or "run")[:120]


def name_note(name: str | None, flag: str = "--name") -> str | None:
    """How ``name`` is written as a folder name when safe_name changes it (said, never done silently)."""
    if not name or safe_name(name) == name:
        return None
    return (f"note: {flag} {name!r} is written as {safe_name(name)!r} (folder names keep only A-Z, a-z, 0-9, "
            f"'.', '_' and '-')")


def as_run_list(runs) -> list:
    """A list of runs or paths: the list given, or one Run or path made a list (a string is not a list of
    one-letter paths)."""
    out = [runs] if isinstance(runs, (str, os.PathLike, Run)) else list(runs) if isinstance(runs, (list, tuple)) \
        else None
    if out is None or not all(isinstance(r, (str, os.PathLike, Run)) for r in out):
        raise BadInput(f"expected a run folder or a list of them, got {runs!r}"[:200])
    return out


@contextlib.contextmanager
def removed_unless_written(folder: Path) -> Iterator[None]:
    """For a block that makes a new run folder: if the block does not end (Ctrl-C, SIGTERM, a full disk), the
    folder it made is removed, so no half-made run is left for --resume to refuse or report to read. A folder
    that was already there is left alone."""
    fresh = not folder.exists()
    try:
        yield
    except BaseException:
        if fresh:
            with deferred_signals():
                shutil.rmtree(folder, ignore_errors=True)
        raise


def new_run_dir(out_dir: str | Path, name: str) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(out_dir) / f"{safe_name(name)}-{stamp}"
    p, n = base, 1
    while p.exists():
        n += 1
        p = Path(f"{base}-{n}")
    return p


def _plain(v):
    """numpy / pandas scalars and arrays as JSON-able Python values."""
    if hasattr(v, "tolist"):
        v = v.tolist()
    if v is pd.NA or v is pd.NaT:
        return None
    return v


def _write_json_atomic(path: Path, data: dict) -> None:
    atomic.write_text(path, json.dumps(data, indent=2, default=str) + "\n")


class RunWriter:
    """Appends rows to a run folder's journal; finalize() writes Parquet/CSV and closes the manifest."""

    def __init__(self, run_dir: str | Path, manifest: dict | Manifest, resume: bool = False):
        self.dir = Path(run_dir)
        self.lock = None
        self._reserve = None
        try:
            self._open(manifest, resume)
        except BaseException:
            self.release()
            raise

    def _open(self, manifest: dict, resume: bool) -> None:
        if resume:
            check_run_folder(self.dir)
            if not (self.dir / MANIFEST).is_file():
                raise BadInput(f"{self.dir}: not a kbench run (no {MANIFEST})")
            self.lock = RunLock(self.dir).acquire()  # one writer per run folder (a lock that is a link: refused)
            atomic.refuse_links(self.dir, WRITTEN_IN_PLACE)  # before anything is written
            # written back as read (an old or hand-edited manifest too), plus what this call adds
            self.manifest = Manifest.from_dict(read_manifest(self.dir))
            self.manifest.setdefault("resumed_at", []).append(now_iso())
        else:
            # typed before anything is made: a field of the wrong type is kbench's bug, named by a TypeError
            given = manifest.to_dict() if isinstance(manifest, Manifest) else dict(manifest)
            self.manifest = Manifest.from_dict(given).check()
            if self.dir.exists() and any(self.dir.iterdir()):
                raise BadInput(f"{self.dir}: already exists and is not empty (use --resume to finish it)")
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise BadInput(f"{self.dir}: cannot create the run folder ({e.strerror or e})") from None
            self.lock = RunLock(self.dir).acquire()
            self.manifest.setdefault("kind", "sweep")
            self.manifest.setdefault("schema_version", RESULT_SCHEMA_VERSION)
            self.manifest.setdefault("start_time", now_iso())
        self.kind = _kind_of(self.manifest)
        if resume:
            # refuse unreadable rows, or rows of another device, before anything in the folder is touched
            journal = self.dir / JOURNAL
            has_tables = (self.dir / PARQUET).exists() or (self.dir / CSV).exists()
            rows = read_journal(journal, self.kind) if journal.exists() else None
            tables = read_tables(self.dir, self.kind) if has_tables and (
                rows is None or rows_lost(self.manifest, rows, journal)) else None
            if tables is not None:
                # no journal (deleted, or a folder of tables), or a journal that lost rows the tables hold: carry
                # them over so none is lost or re-measured (the journal's own rows first, as they were)
                key = ["kernel", "case_id"] if self.kind == "sweep" else list(REQUIRED)
                if rows is not None:
                    have = set(map(tuple, rows[key].astype(str).to_numpy().tolist()))
                    tables = tables[[tuple(k) not in have for k in tables[key].astype(str).to_numpy().tolist()]]
                old = files.read_text(journal, str(journal), files.ROWS_MAX) if rows is not None else ""
                if old and not old.endswith("\n"):
                    old = old[: old.rfind("\n") + 1]  # a half row at the end: dropped, as below
                atomic.write_text(journal, old + "".join(
                    json.dumps({k: json_safe(_plain(v)) for k, v in rec.items()}) + "\n"
                    for rec in tables.to_dict("records")))
            _drop_partial_last_line(journal)
        self.manifest["status"] = "running"
        _write_json_atomic(self.dir / MANIFEST, self.manifest.to_dict())
        self._journal = open(atomic.open_no_follow(self.dir / JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a",
                             encoding="utf-8")
        self._reserve = atomic.SpaceReserve(self.dir, name=RESERVE)  # room for the last manifest when the disk fills

    def append(self, row: Row | dict) -> None:
        """One line, flushed and fsynced. A write that fails (a full disk) is cut back off the journal,
        so it keeps only complete rows, and the OSError goes up to the caller."""
        d = row.to_dict() if isinstance(row, Row) else dict(row)
        line = json.dumps({k: json_safe(v) for k, v in d.items()}) + "\n"
        start = self._journal.tell()
        try:
            self._journal.write(line)
            self._journal.flush()
            os.fsync(self._journal.fileno())
        except OSError:
            try:
                self._journal.close()
            except OSError:
                pass
            _truncate(self.dir / JOURNAL, start)
            self._reserve.free()
            raise

    def manifest_shard(self) -> tuple[int, int] | None:
        return manifest_shard(self.manifest, self.dir)

    def update_manifest(self, **fields) -> None:
        self.manifest.update(fields)  # checked against the field types
        _write_json_atomic(self.dir / MANIFEST, self.manifest.to_dict())

    def finalize(self, status: str = "complete") -> Path:
        """Parquet/CSV from the journal, then the manifest's status. When the tables cannot be written
        (a full disk) the run is marked interrupted with the reason; the journal keeps every row."""
        if not self._journal.closed:
            try:
                self._journal.close()
            except OSError:
                pass
        rows = read_journal(self.dir / JOURNAL, self.kind)
        try:
            write_tables(self.dir, rows, self.kind)
            # what the Parquet was written from: a reader takes it for the journal only while both are these
            self.manifest["tables"] = {n: files.record(self.dir / n) for n in (JOURNAL, PARQUET)}
        except BadInput as e:
            if "cannot write" not in str(e):
                raise
            self._reserve.free()
            status = "interrupted"
            self.manifest["stopped_by"] = self.manifest.get("stopped_by") or str(e)
        self.manifest["status"] = status
        self.manifest["end_time"] = now_iso()
        self.manifest["num_rows"] = len(rows)
        try:
            try:
                _write_json_atomic(self.dir / MANIFEST, self.manifest.to_dict())
            except BadInput:
                self._reserve.free()
                _write_json_atomic(self.dir / MANIFEST, self.manifest.to_dict())
        finally:
            self._reserve.free()
            self.release()
        return self.dir

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None


def _drop_partial_last_line(path: Path) -> None:
    """A kill during a write leaves half a row at the end: cut it before appending more rows after it."""
    if not path.exists():
        return
    data = files.read_bytes(path, str(path), files.ROWS_MAX)
    if not data or data.endswith(b"\n"):
        return
    _truncate(path, data.rfind(b"\n") + 1)


def _truncate(path: Path, size: int) -> None:
    fd = atomic.open_no_follow(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)


def write_tables(run_dir: Path, rows: pd.DataFrame, kind: str = "sweep") -> None:
    """Parquet and CSV beside the journal (atomically replaced)."""
    rows = normalize(rows, kind)
    list_columns = row_kind(kind)[1]
    try:
        atomic.write_with(run_dir / PARQUET, lambda tmp: rows.to_parquet(tmp, index=False))
    except (BadInput, OSError):
        raise
    except Exception as e:  # pyarrow refuses mixed types in a column (a hand-edited journal row)
        raise BadInput(f"{run_dir}: rows cannot be written as Parquet ({type(e).__name__}: "
                       f"{str(e).splitlines()[0][:200] if str(e) else ''})") from None
    csv_rows = rows.copy()
    for c in list_columns:
        if c in csv_rows:
            csv_rows[c] = csv_rows[c].map(lambda v: json.dumps(list(v)) if v is not None else "[]")
    atomic.write_with(run_dir / CSV, lambda tmp: csv_rows.to_csv(tmp, index=False))


def normalize(df: pd.DataFrame, kind: str = "sweep", where=None, lines: list[int] | None = None,
              copy: bool = True, only=None) -> pd.DataFrame:
    """Columns in schema order; missing ones added empty (rows from older writers of the same schema). For a sweep,
    an axis an older kbench did not write reads as its default, in a missing column and in a missing cell alike
    (a run started by an older kbench and finished by this one mixes both), integer axes as integers. Then every
    row is checked once (check_rows): ``where`` names the file in the error, ``lines`` the journal line of each row.
    copy=False: ``df`` is the caller's own to change (a frame just read), not copied first. only: a collection of
    column names: the rows keep only these (a reader that needs a few columns of many), the others neither added,
    kept nor checked."""
    columns, list_columns = row_kind(kind)
    if only is not None:
        columns = [c for c in columns if c in only]
        list_columns = tuple(c for c in list_columns if c in only)
        df = df[[c for c in df.columns if c in only]]
    elif copy:
        df = df.copy()
    fill = axes.defaults() if kind == "sweep" else {}
    for c in columns:
        if c not in df:  # an axis added after the run was written reads as its default
            df[c] = [[] for _ in range(len(df))] if c in list_columns else fill.get(c)
    extra = [c for c in df.columns if c not in columns]
    df = df[columns + extra].reset_index(drop=True)
    if kind == "sweep" and len(df):
        _fill_axes(df)
    for c in list_columns:
        if df[c].isna().all():  # read without its lists (lists=False) or never written: every cell []
            df[c] = [[] for _ in range(len(df))]
        else:
            try:
                df[c] = df[c].map(lambda v: float_list(v, c))
            except BadInput:  # the row that holds it, named as check_rows names a row
                i = next(i for i, v in enumerate(df[c]) if not _is_float_list(v))
                raise BadInput(f"{_where(where or 'rows', lines, i)}: {c} is {_show(df[c].iloc[i])}, expected a list "
                               f"of numbers") from None
    return check_rows(df, kind, where or "rows", lines)


def _is_float_list(v) -> bool:
    try:
        float_list(v, "")
        return True
    except BadInput:
        return False


def _show(v) -> str:
    """A cell's value in an error line, cut short (a hand-edited file may hold a long one)."""
    if isinstance(v, np.generic):
        v = v.item()
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


def _fill_axes(df: pd.DataFrame) -> None:
    for a in axes.AXES:
        if a.required or a.name not in df:  # not in df: left out by normalize(only=...)
            continue
        missing = df[a.name].isna()
        if missing.any():
            if df[a.name].dtype != object:
                df[a.name] = df[a.name].astype(object)
            df.loc[missing, a.name] = df.loc[missing, a.follows] if a.follows else a.default


def _where(where, lines, i: int) -> str:
    return f"{where}: line {lines[i]}" if lines is not None and i < len(lines) else f"{where}: row {i + 1}"


def float_list(v, column: str) -> list[float]:
    """A cell of a list column (samples_us) as floats; absent (None, or NaN from a table) is []."""
    if v is None or isinstance(v, float):  # absent (None, or NaN from a table)
        return []
    if isinstance(v, (str, bytes, dict)) or not hasattr(v, "__iter__"):
        raise BadInput(f"column {column}: expected a list of numbers, got {type(v).__name__}")
    try:
        return [float(x) for x in v]
    except (TypeError, ValueError):
        raise BadInput(f"column {column}: expected a list of numbers") from None


def release_memory() -> None:
    """Hand the memory freed while reading a run back to the system (pyarrow's pool keeps what it freed, glibc's
    heap what the parse's temporaries left), so that what a command computes next does not add to it: reading a
    300,000-row journal left about 250 MB of freed memory held."""
    try:
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    except Exception:
        pass
    try:
        import ctypes
        import sys

        if sys.platform.startswith("linux"):
            ctypes.CDLL("libc.so.6").malloc_trim(0)
    except Exception:
        pass


def read_journal(path: Path, kind: str = "sweep", lists: bool = True, only=None) -> pd.DataFrame:
    """The journal's rows, checked (normalize). lists=False: the list columns (samples_us) read as empty lists.
    A journal as kbench writes it is read by pyarrow's JSON-lines reader (kbench.runs.journal_table), a few times
    faster than a json.loads per line and without a dict per row; any journal that reader does not take whole
    (a hand-edited line, NaN, a type that changes) is read line by line, whose errors name the line.
    only: the columns to keep (normalize)."""
    from kbench.runs.journal_table import read_table

    if path.exists():
        fast = read_table(path, row_kind(kind)[1], lists, only)
        if fast is not None:
            rows = normalize(fast, kind, path, copy=False, only=only)
            del fast
            release_memory()
            return _latest_rows(rows, kind)
    records, line_nos = [], []
    drop = () if lists else row_kind(kind)[1]
    if path.exists():
        lines = files.read_text(path, str(path), files.ROWS_MAX).split("\n")
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                rec = files.loads(line)
            except files.JSONProblem as e:
                if i >= len(lines) - 2 and not e.content:  # the row being written when the process was killed
                    continue
                raise BadInput(f"{path}: line {i + 1}: {e}" if e.content else
                               f"{path}: line {i + 1} is not valid JSON ({e.in_line()})") from None
            if not isinstance(rec, dict) or any(k not in rec for k in REQUIRED):
                raise BadInput(f"{path}: line {i + 1} is not a kbench row")
            for c in drop:  # not read, but of its type: a reader of the lists would refuse it
                v = rec.pop(c, None)
                if v is not None and not isinstance(v, list):
                    raise BadInput(f"{path}: line {i + 1}: {c} is {_show(v)}, expected a list of numbers")
            records.append(rec)
            line_nos.append(i + 1)
    columns = row_kind(kind)[0]
    return _latest_rows(normalize(pd.DataFrame.from_records(records, columns=None if records else columns), kind,
                                  path, line_nos, only=only), kind)


REWRITTEN_KINDS = ("server-bench",)  # kinds whose journal may hold a row again, updated: the last one counts


def _latest_rows(rows: pd.DataFrame, kind: str) -> pd.DataFrame:
    """An interleaved A/B writes each case's row again after every round it measures (kbench.server.interleave),
    so that a kill keeps every finished round: of a case's rows the last one written is the row."""
    if kind not in REWRITTEN_KINDS or "case_id" not in rows or not rows["case_id"].duplicated().any():
        return rows
    return rows[~rows["case_id"].duplicated(keep="last")].reset_index(drop=True)


def manifest_shard(manifest: dict, where="run") -> tuple[int, int] | None:
    sh = manifest.get("shard")
    if not sh:
        return None
    ok = isinstance(sh, dict) and all(isinstance(sh.get(k), int) and not isinstance(sh.get(k), bool)
                                      for k in ("index", "count"))
    if not ok or not 0 <= sh["index"] < sh["count"]:
        raise BadInput(f"{where}/{MANIFEST}: shard {sh!r} is not {{index, count}} with 0 <= index < count")
    return sh["index"], sh["count"]


# manifest fields other commands index into: their type is checked when the manifest is read
_MANIFEST_TYPES = {"kind": str, "status": str, "device": dict, "scenario": dict, "timer": dict, "config": dict,
                   "start_time": str}


def check_rows(rows: pd.DataFrame, kind: str, where, lines: list[int] | None = None) -> pd.DataFrame:
    """Every row checked once, as it is loaded: the key columns hold strings (a hand-edited or foreign file may
    hold lists, numbers or nulls); in a sweep run, the status is one kbench writes, every axis holds a value of
    its type (integer axes become integers, so keys compare equal whatever file the row came from) and every
    number column a number or nothing. BadInput names the file, the row (or journal line), the field and value."""
    def bad(mask: pd.Series, c: str, want: str):
        i = int(mask.to_numpy().nonzero()[0][0])
        raise BadInput(f"{_where(where, lines, i)}: {c} is {_show(rows[c].iloc[i])}, {want}")

    def bad_column(c: str, want: str):  # a table's column of another type (a Parquet written by another tool)
        raise BadInput(f"{where}: column {c} holds {rows[c].dtype} values, {want}")

    for c in ("kernel", "case_id", "status") if kind == "sweep" else REQUIRED:
        if c in rows:
            m = _not_str(rows[c])
            if m.any():
                bad(m, c, "not a string")
    if kind != "sweep" or not len(rows):
        return rows
    m = ~rows["status"].isin(STATUSES)
    if m.any():
        bad(m, "status", f"not one of {', '.join(STATUSES)}")
    # what a report writes from these rows, `kbench select` reads (kbench.report.policy_schema): a kernel's name as
    # the registry spells them (no markup, no control character), a case id that prints, sizes from their minimum
    if "kernel" in rows:
        m = ~rows["kernel"].str.fullmatch(_KERNEL_NAME).astype(bool)
        if m.any():
            bad(m, "kernel", "not a kernel name (a letter or digit, then letters, digits and . _ + -; at most 64)")
    if "case_id" in rows:
        m = ~rows["case_id"].map(str.isprintable).astype(bool)
        if m.any():
            bad(m, "case_id", "holds a character that does not print")
    for a in axes.AXES:
        if a.name not in rows:  # left out by normalize(only=...): neither read nor checked
            continue
        col = rows[a.name]
        if a.type is int:
            if col.dtype != object and not _numeric(col):
                bad_column(a.name, "expected integers")
            num = pd.to_numeric(col, errors="coerce") if col.dtype == object else col
            m = col.notna() & (num.isna() | (num != num.round()))
            if col.dtype == object:
                m |= col.notna() & ~col.map(type).isin(_NUMBER_TYPES)  # "16", True: not an integer
            if a.required and not col.isna().all():  # a shape axis has no default to read a missing cell as (a
                m |= col.isna()                             # foreign run without the column at all: kept missing)
            if m.any():
                bad(m, a.name, "expected an integer")
            if a.minimum is not None:
                m = num.notna() & (num < a.minimum)
                if m.any():
                    bad(m, a.name, f"below its minimum {a.minimum}")
            # a shape axis (no default) may be absent from a foreign row: kept missing, the rest as integers
            rows[a.name] = num.astype("int64") if not num.isna().any() else num
        else:
            m = _not_str(col)
            if m.any():
                bad(m, a.name, "expected a string")
            m = ~col.map(str.isprintable).astype(bool)
            if m.any():
                bad(m, a.name, "holds a character that does not print")
    if "q_len" in rows and "kv_len" in rows:
        m = rows["q_len"] > rows["kv_len"]
        if m.any():
            i = int(m.to_numpy().nonzero()[0][0])
            raise BadInput(f"{_where(where, lines, i)}: q_len {rows['q_len'].iloc[i]} > kv_len "
                           f"{rows['kv_len'].iloc[i]}: no such shape (the query tokens are part of the KV)")
    for c in NUMBER_COLUMNS:
        if c not in rows:
            continue
        col = rows[c]
        if col.dtype == object:
            m = col.notna() & ~col.map(type).isin(_NUMBER_TYPES)
            if m.any():
                bad(m, c, "expected a number or nothing")
        elif not _numeric(col):
            bad_column(c, "expected numbers")
    return rows


def _numeric(col: pd.Series) -> bool:
    """A column of numbers (integers or floats, not booleans, timestamps or text)."""
    return pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col)


_KERNEL_NAME = KERNEL_NAME.strip("^$")  # for str.fullmatch
# what a number cell of a loaded row may hold (a bool, a string or a list may not)
_NUMBER_TYPES = (int, float, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
                 np.float16, np.float32, np.float64)


def _not_str(col: pd.Series) -> pd.Series:
    """Where a column holds anything but a string (a string column's only other value is missing)."""
    if pd.api.types.is_string_dtype(col) and col.dtype != object:
        return col.isna()
    return col.map(lambda v: not isinstance(v, str))


def check_resumable(run_dir: str | Path, manifest: dict) -> None:
    """What RunWriter(resume=True) refuses, checked before a command prints or writes anything."""
    d = Path(run_dir)
    kind = _kind_of(manifest)
    manifest_shard(manifest, d)
    atomic.refuse_links(d, (LOCK_FILE, *WRITTEN_IN_PLACE))
    if (d / JOURNAL).exists():
        read_journal(d / JOURNAL, kind)
    elif (d / PARQUET).exists() or (d / CSV).exists():
        read_tables(d, kind)


def rows_lost(manifest: dict, journal_rows: pd.DataFrame, journal: Path) -> int:
    """Rows the journal lost: a run records num_rows when it ends (finalize), and a journal only grows after
    that (a resume appends), so a journal with fewer rows lost some (a truncated copy, a bad edit)."""
    n = manifest.get("num_rows")
    if not isinstance(n, int) or isinstance(n, bool) or not journal.exists():
        return 0
    return max(0, n - len(journal_rows))


def check_journal(run_dir: Path, manifest: dict, rows: pd.DataFrame, kind: str) -> None:
    """A reader's check: the journal holds every row the run recorded (else BadInput saying how to restore them)."""
    lost = rows_lost(manifest, rows, run_dir / JOURNAL)
    if lost:
        where = "rows.parquet" if (run_dir / PARQUET).exists() else "rows.csv" if (run_dir / CSV).exists() else None
        raise BadInput(f"{run_dir / JOURNAL}: {len(rows)} row(s), but the run recorded {manifest.get('num_rows')} "
                       f"({MANIFEST} num_rows): {lost} row(s) lost from the journal; {shell.kbench(kind, '--resume', run_dir)} "
                       f"restores them ({f'from {where} where it holds them, else ' if where else ''}by measuring "
                       f"them again)")


def check_device(rows: pd.DataFrame, manifest: dict, where, kind: str = "sweep") -> None:
    """Every row of a sweep run was measured on the run's device (rows appended from another GPU would mix two
    devices in one answer): BadInput naming the first row that was not (kbench.runs.resume: --force resumes
    anyway, as it does on another device)."""
    dev = manifest.get("device")
    if kind != "sweep" or not isinstance(dev, dict) or not len(rows):
        return
    name, sm = dev.get("name"), dev.get("sm")
    if isinstance(name, str) and name and "device" in rows:
        m = rows["device"].map(lambda v: isinstance(v, str) and v != "" and v != name)
        if m.any():
            i = int(m.to_numpy().nonzero()[0][0])
            raise BadInput(f"{where}: row {i + 1} was measured on {rows['device'].iloc[i]!r}, this run on {name!r}: "
                           f"rows of another device were added to it; resuming would mix two devices in one run "
                           f"(--force to resume anyway)")
    if isinstance(sm, int) and sm and "sm" in rows:
        num = pd.to_numeric(rows["sm"], errors="coerce")
        m = num.notna() & (num != 0) & (num != sm)
        if m.any():
            i = int(m.to_numpy().nonzero()[0][0])
            raise BadInput(f"{where}: row {i + 1} was measured on SM{int(num.iloc[i])}, this run on SM{sm}: rows of "
                           f"another device were added to it; resuming would mix two devices in one run (--force to "
                           f"resume anyway)")


def check_run_folder(path: str | Path) -> Path:
    """The one check of a path given as a run (report, gate, baseline, merge, recommend, sweep and server-bench
    --resume): BadInput "no such run folder" where nothing is there, what it is where it is no folder."""
    if not isinstance(path, (str, os.PathLike)):
        raise BadInput(f"{path!r}: not a run folder's path"[:200])
    p = Path(path)
    if p.is_dir():
        return p
    if p.is_symlink() and not p.exists():
        raise BadInput(f"{path}: a symbolic link to nothing ({os.readlink(p)}), not a run folder")
    if p.exists():
        mode = p.stat().st_mode
        raise BadInput(f"{path}: {'a file' if stat.S_ISREG(mode) else files.kind_of(mode)}, not a run folder")
    raise BadInput(f"{path}: no such run folder")


def read_manifest(run_dir: Path) -> dict:
    check_run_folder(run_dir)
    p = Path(run_dir) / MANIFEST
    if not p.exists() and not p.is_symlink():
        raise BadInput(f"{run_dir}: not a kbench run (no {MANIFEST})")
    m = files.read_json(p, str(p), files.MANIFEST_MAX)
    if not isinstance(m, dict):
        raise BadInput(f"{p}: expected a JSON object")
    ver = m.get("schema_version")
    if ver != RESULT_SCHEMA_VERSION:
        raise BadInput(f"{p}: result schema version {ver!r} is not {RESULT_SCHEMA_VERSION} (this kbench)")
    for k, t in _MANIFEST_TYPES.items():
        if m.get(k) is not None and not isinstance(m[k], t):
            raise BadInput(f"{p}: {k} is {type(m[k]).__name__}, expected {'a JSON object' if t is dict else 'a string'}")
    manifest_shard(m, run_dir)
    return m


@dataclass
class Run:
    path: Path
    manifest: dict
    rows: pd.DataFrame

    @property
    def kind(self) -> str:
        return self.manifest.get("kind", "sweep")

    @property
    def name(self) -> str:
        return self.path.name


def parquet_current(run_dir: Path, manifest: dict) -> bool:
    """rows.parquet holds the journal's rows, so a reader may take it for the journal: the run is complete and the
    journal and the Parquet are both the files finalize recorded (manifest ``tables``: size and sha256) as it wrote
    the one from the other. Otherwise (a Parquet or journal edited since, a run written before the record) the
    journal is the one source of truth, for every reader alike."""
    rec = manifest.get("tables")
    if manifest.get("status") != "complete" or not isinstance(rec, dict):
        return False
    try:
        for name in (JOURNAL, PARQUET):
            want, p = rec.get(name), Path(run_dir) / name
            st = os.stat(p)
            if not isinstance(want, dict) or st.st_size != want.get("bytes"):
                return False
            if _sha256(p, st) != want.get("sha256"):
                return False
        return True
    except Exception:  # unreadable: the journal decides, and its reader says what is wrong
        return False


_HASHED: dict[tuple, str] = {}  # (path, inode, size, mtime, ctime) -> sha256: one command asks twice (the gate)


def _sha256(p: Path, st: os.stat_result) -> str:
    key = (str(p), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key not in _HASHED:
        h = hashlib.sha256()
        with files.open_regular(p, str(p), files.ROWS_MAX) as f:  # a FIFO there: refused, not waited on
            while chunk := f.read(1 << 20):
                h.update(chunk)
        if len(_HASHED) >= 8:  # the last few asked: no cache that grows with the runs a process reads
            _HASHED.clear()
        _HASHED[key] = h.hexdigest()
    return _HASHED[key]


def load_rows(run_dir: Path, kind: str = "sweep", lists: bool = True, manifest: dict | None = None,
              only=None) -> pd.DataFrame:
    """The run's rows, checked (check_rows): from the journal when there is one (the truth after a kill), else
    from the Parquet, else from the CSV. lists=False: the list columns (samples_us) read as empty lists, for
    readers that never use them; the rows then come from rows.parquet without those columns when it holds what
    the journal holds (parquet_current, with ``manifest``), which reads a 100,000-row run in a fraction of the
    time and memory. only: the columns to keep, the others not read where the file allows (normalize)."""
    run_dir = Path(run_dir)
    if (run_dir / JOURNAL).exists() and (lists or manifest is None or not parquet_current(run_dir, manifest)):
        return read_journal(run_dir / JOURNAL, kind, lists, only)
    rows = read_tables(run_dir, kind, lists, only)
    if manifest is not None:
        check_table_rows(run_dir, manifest, rows, kind)
    return rows


def table_rows_recorded(manifest: dict) -> tuple[int, str] | None:
    """How many rows the run's tables hold by its manifest, and the field that says so: a baseline's own count
    (baseline.num_rows: the rows it wrote, where a single-run baseline keeps its source's num_rows as the run wrote
    it), else the num_rows finalize recorded as it wrote the tables; None when neither is recorded (an older run,
    one killed before it ended: its rows are in the journal)."""
    b = manifest.get("baseline")
    for n, field in ((b.get("num_rows") if isinstance(b, dict) else None, "baseline.num_rows"),
                     (manifest.get("num_rows"), "num_rows")):
        if isinstance(n, int) and not isinstance(n, bool):
            return n, field
    return None


def check_table_rows(run_dir: Path, manifest: dict, rows: pd.DataFrame, kind: str = "sweep") -> None:
    """A reader's check of rows read from the tables (read_tables): they hold the rows the manifest recorded, else
    BadInput naming the file and both counts (a copy cut short, a bad edit: a report or gate on part of a run would
    answer for the part as if it were the whole). Writers (finalize, a baseline) record the count with the tables;
    a resume that rewrites the journal from them measures what they lack again and is not checked."""
    recorded = table_rows_recorded(manifest)
    if recorded is None or recorded[0] == len(rows):
        return
    n, field = recorded
    table = run_dir / (PARQUET if (run_dir / PARQUET).exists() else CSV)
    if isinstance(manifest.get("baseline"), dict):
        fix = "rebuild it from its runs (kbench baseline RUN ... --name NAME --force)"
    elif kind == "sweep":
        fix = f"{shell.kbench('sweep', '--resume', run_dir)} measures the missing rows again"
    elif kind == "server-bench":
        fix = f"{shell.kbench('server-bench', '--resume', run_dir, '--url', 'URL')} measures the missing rows again"
    else:
        fix = "write it again"
    raise BadInput(f"{table}: {len(rows)} row(s), but the run recorded {n} ({MANIFEST} {field}): the file was cut "
                   f"short or edited; {fix}")


PARQUET_BATCH = 1 << 16  # rows per batch of read_tables' Parquet reads


def read_tables(run_dir: Path, kind: str = "sweep", lists: bool = True, only=None) -> pd.DataFrame:
    """The rows of rows.parquet, else of rows.csv (the journal aside). only: the columns to keep (normalize);
    from rows.parquet, only those are read."""
    if (run_dir / PARQUET).exists():
        with files.open_regular(run_dir / PARQUET, str(run_dir / PARQUET), files.ROWS_MAX) as pf, \
                files.arrow_file(pf) as f:
            try:
                import pyarrow as pa
                import pyarrow.parquet as pqf

                pfile = pqf.ParquetFile(f)
                schema = pfile.schema_arrow
            except Exception as e:
                raise BadInput(f"{run_dir / PARQUET}: unreadable Parquet ({type(e).__name__})") from None
            _check_list_types(schema, row_kind(kind)[1], run_dir / PARQUET)  # also where they are not read
            try:
                skip = () if lists else row_kind(kind)[1]
                columns = [c for c in schema.names if c not in skip and (only is None or c in only)]
                # read as batches that span row groups, then one table: pandas' read_parquet keeps a chunk per row
                # group per column, and a file of one row per group (20,000 rows, another tool's writer) took report
                # 87 s of CPU and 7.5 GiB that way, 14.6 s and 1.5 GiB (mostly its footer) this way (design-notes)
                table = pa.Table.from_batches(
                    list(pfile.iter_batches(batch_size=PARQUET_BATCH, columns=columns)),
                    schema=pa.schema([schema.field(c) for c in columns], metadata=schema.metadata)).to_pandas()
            except Exception as e:
                raise BadInput(f"{run_dir / PARQUET}: unreadable Parquet ({type(e).__name__})") from None
        rows = normalize(table, kind, run_dir / PARQUET, copy=False, only=only)
        del table
        release_memory()
        return rows
    if (run_dir / CSV).exists():
        data = files.read_bytes(run_dir / CSV, str(run_dir / CSV), files.ROWS_MAX)
        try:
            if data and not data.endswith(b"\n"):  # cut short (a kill, a full disk): drop the half row
                data = data[: data.rfind(b"\n") + 1]
            df = pd.read_csv(io.BytesIO(data))
        except Exception as e:
            raise BadInput(f"{run_dir / CSV}: unreadable CSV ({type(e).__name__})") from None
        missing = set(REQUIRED) - set(df.columns)
        if missing:
            raise BadInput(f"{run_dir / CSV}: missing column {sorted(missing)[0]!r}")
        for c in row_kind(kind)[1]:
            if c in df:
                try:
                    df[c] = df[c].map(lambda s: files.loads(s) if isinstance(s, str) else [])
                except files.JSONProblem as e:
                    raise BadInput(f"{run_dir / CSV}: column {c} is not JSON lists ({e})") from None
        return normalize(df.astype(object).where(pd.notna(df), None), kind, run_dir / CSV, only=only)
    raise BadInput(f"{run_dir}: no rows ({JOURNAL}, {PARQUET} or {CSV})")


def _check_list_types(schema, list_columns, where) -> None:
    """A list column of a Parquet run (samples_us) holds lists of numbers, or nothing: its type is checked from the
    schema, so a reader that never reads the column (report, the gate's lean load) refuses a file of another type
    as the readers of the column would."""
    import pyarrow as pa

    for c in list_columns:
        if c not in schema.names:
            continue
        t = schema.field(c).type
        ok = pa.types.is_null(t) or ((pa.types.is_list(t) or pa.types.is_large_list(t)) and (
            pa.types.is_integer(t.value_type) or pa.types.is_floating(t.value_type) or pa.types.is_null(t.value_type)))
        if not ok:
            raise BadInput(f"{where}: column {c} holds {t} values, expected lists of numbers")


def check_files(folder: Path, manifest: dict) -> None:
    """The files the manifest records (a baseline's tables) are there as written, or BadInput."""
    b = manifest.get("baseline")
    fix = ("rebuild it from its runs (kbench baseline RUN ... --name NAME --force)" if isinstance(b, dict)
           else "write it again")
    files.check_records(folder, manifest.get("files"), str(folder), fix)


def load_run(path: str | Path, lists: bool = True, only=None) -> Run:
    """lists=False: without the list columns (samples_us read as empty lists; see load_rows). only: the columns to
    keep (load_rows)."""
    p = check_run_folder(path)
    manifest = read_manifest(p)
    kind = _kind_of(manifest)
    check_files(p, manifest)
    rows = load_rows(p, kind, lists, manifest, only)
    check_journal(p, manifest, rows, kind)
    required = {"kernel", "case_id", "status"} if kind == "sweep" else set(REQUIRED)
    missing = required - set(rows.columns)
    if missing:
        raise BadInput(f"{p}: rows lack column {sorted(missing)[0]!r}")
    return Run(p, manifest, rows)
