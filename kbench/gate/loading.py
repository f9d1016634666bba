"""Load the two runs, refusing a result schema version other than this kbench's unless forced."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kbench import RESULT_SCHEMA_VERSION, files
from kbench.errors import BadInput
from kbench.runs.store import (JOURNAL, MANIFEST, PARQUET, Run, check_files, check_run_folder, float_list, load_rows,
                               load_run, parquet_current, row_kind)


class ParquetList:
    """One list column of rows.parquet (a sweep's samples_us), read on first use and handed out a row at a time.
    The gate tests few rows for noise (those beyond the threshold and the run-to-run band), and the samples of
    every row are most of a run's bytes: a 100,000-row run's, as Python lists, took a gigabyte."""

    def __init__(self, path: Path, column: str):
        self.path, self.column, self._rows = path, column, {}

    def read(self, rows) -> None:
        """Read these rows' values in one pass over the column, a batch at a time (the column whole, decoded at
        once, took a few hundred MB)."""
        import pyarrow.parquet as pq

        want = sorted(set(rows) - set(self._rows))
        if not want:
            return
        with files.open_regular(self.path, str(self.path), files.ROWS_MAX) as f, files.arrow_file(f) as af:
            try:
                start, j = 0, 0
                for batch in pq.ParquetFile(af).iter_batches(batch_size=8192, columns=[self.column]):
                    col = batch.column(0)
                    while j < len(want) and want[j] < start + len(col):
                        self._rows[want[j]] = col[want[j] - start].as_py()
                        j += 1
                    start += len(col)
            except Exception as e:
                raise BadInput(f"{self.path}: unreadable Parquet ({type(e).__name__})") from None

    def row(self, i: int) -> list[float]:
        if i not in self._rows:
            self.read([i])
        try:
            return float_list(self._rows.get(i), self.column)
        except BadInput as e:
            raise BadInput(f"{self.path}: {e}") from None


class JournalList(ParquetList):
    """One list column of a run's journal (rows.jsonl), where it has no current rows.parquet (a run that never
    ended): the rows that need it parsed on first use, one pass over the lines, as ParquetList does."""

    def read(self, rows) -> None:
        want = set(rows) - set(self._rows)
        if not want:
            return
        last = max(want)
        i = 0
        with files.open_regular(self.path, str(self.path), files.ROWS_MAX) as f:
            for line in f:  # the journal's rows are its lines with something on them, in order (read_journal)
                if not line.strip():
                    continue
                if i in want:
                    try:
                        rec = files.loads(line)
                    except files.JSONProblem as e:
                        raise BadInput(f"{self.path}: row {i + 1}: {e}") from None
                    self._rows[i] = rec.get(self.column) if isinstance(rec, dict) else None
                if i >= last:
                    break
                i += 1


class RowSamples:
    """Row i's samples of a ParquetList, read when iterated (as the list it stands for would be)."""

    __slots__ = ("source", "i")

    def __init__(self, source: ParquetList, i: int):
        self.source, self.i = source, i

    def __iter__(self):
        return iter(self.source.row(self.i))


def read_samples(values) -> None:
    """Read in one pass per file the samples these row values stand for (RowSamples; other values are lists)."""
    by_source: dict[int, tuple[ParquetList, list[int]]] = {}
    for v in values:
        if isinstance(v, RowSamples):
            by_source.setdefault(id(v.source), (v.source, []))[1].append(v.i)
    for source, rows in by_source.values():
        source.read(rows)


@dataclass
class GateRun(Run):
    samples: ParquetList | None = None  # rows.samples_us left empty: read from here when a row needs them


def _peek_schema(path: Path):
    try:
        m = files.read_json(path / MANIFEST, max_bytes=files.MANIFEST_MAX)
    except BadInput:
        return None, None  # load_run says what is wrong with it
    return (m, m.get("schema_version")) if isinstance(m, dict) else (None, None)


def _has_rows(run: Run, role: str) -> Run:
    """A run of no rows has nothing to gate (and no timing state, power mode or device to compare): said as such."""
    if not len(run.rows):
        raise BadInput(f"{role} {run.path}: the run holds no rows (status {run.manifest.get('status')!r}): nothing "
                       f"to gate")
    return run


def load_for_gate(path: str | Path, role: str, force: bool, warnings: list[str], columns=None) -> Run:
    """columns: where the run is a sweep of this kbench's schema, the rows keep only these columns (the others are
    neither read from rows.parquet nor kept from the journal): the gate reads a few dozen of a row's columns."""
    try:
        p = check_run_folder(path)
    except BadInput as e:
        raise BadInput(f"{role} {e}") from None
    manifest, version = _peek_schema(p)
    if manifest is not None and version != RESULT_SCHEMA_VERSION:
        if not force:
            raise BadInput(f"{role} {path} has result schema version {version!r}, this kbench writes "
                           f"{RESULT_SCHEMA_VERSION}: record it again with this kbench, or pass --force")
        kind = manifest.get("kind", "sweep")
        try:
            row_kind(kind)
        except BadInput:
            raise BadInput(f"{role} {path}: unknown run kind {kind!r}") from None
        warnings.append(f"{role} has result schema version {version!r} (this kbench: "
                        f"{RESULT_SCHEMA_VERSION}); compared anyway (--force)")
        check_files(p, manifest)
        rows = load_rows(p, kind, manifest=manifest)  # tables cut short: refused as load_run does
        for col in ("case_id", "status") if kind == "sweep" else ("case_id",):
            if col not in rows:
                raise BadInput(f"{role} {path}: rows lack column {col!r}")
        return _has_rows(Run(p, manifest, rows), role)
    # a sweep's rows without samples_us, which are read for the rows that need them: from rows.parquet where it
    # holds the rows (a baseline, a complete run), else from the journal (a run that never ended)
    sweep = manifest is not None and manifest.get("kind", "sweep") == "sweep"
    from_parquet = sweep and (p / PARQUET).is_file() and (not (p / JOURNAL).exists() or parquet_current(p, manifest))
    from_journal = sweep and not from_parquet and (p / JOURNAL).is_file()
    lean = from_parquet or from_journal
    try:
        run = load_run(p, lists=not lean, only=columns if lean else None)
    except BadInput as e:
        raise BadInput(f"{role}: {e}") from None
    _has_rows(run, role)
    if run.manifest.get("status") not in (None, "complete"):
        warnings.append(f"{role} run status is {run.manifest.get('status')!r}, not complete: "
                        "rows it did not reach count as missing")
    samples = ParquetList(p / PARQUET, "samples_us") if from_parquet else \
        JournalList(p / JOURNAL, "samples_us") if from_journal else None
    return GateRun(run.path, run.manifest, run.rows, samples)
