"""A run's journal (rows.jsonl) read whole by pyarrow's JSON-lines reader: the fast path of
kbench.runs.store.read_journal.

It takes a journal as kbench writes it: one JSON object per line, each column of one type throughout, the key
columns present in every row. Anything else (a line that is not an object, NaN or Infinity, a column whose type
changes, a missing case_id) returns None, and the caller reads the journal line by line, whose errors name the
line. A last line cut short (the row being written when the process was killed) is left out, as that reader
does. The file is read through kbench.files.open_regular (a FIFO or a device is refused there, not waited on)
and streamed in blocks, never held whole.
"""
from __future__ import annotations

import io
import os
from pathlib import Path

import pandas as pd

from kbench import files

BLOCK = 8 << 20
REQUIRED = ("case_id",)
TEXT = ("measured_at",)  # text columns whose values look like dates (read as text, as json.loads reads them)


class _Prefix(io.RawIOBase):
    """The first ``n`` bytes of a binary file (where the system gives pyarrow no file of its own)."""

    def __init__(self, f, n: int):
        self.f, self.left = f, n

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self.left <= 0:
            return 0
        n = self.f.readinto(memoryview(b)[: min(len(b), self.left)])
        self.left -= n or 0
        return n or 0


def _first(f, n: int):
    """The first ``n`` bytes of ``f`` as pyarrow reads them: a stream of its own file (kbench.files.arrow_file),
    read from the start whatever was read of it before."""
    if hasattr(f, "get_stream"):
        return f.get_stream(0, n)
    f.seek(0)
    return _Prefix(f, n)


def whole_lines_end(f, size: int) -> int:
    """Where the journal's rows end: its size, or the start of a last line that is not JSON (cut short)."""
    end, tail = size, b""
    while end > 0 and not tail.strip():  # the last line with something on it
        start = max(0, end - (1 << 16))
        f.seek(start)
        tail = f.read(end - start) + tail
        end = start
        if tail.rstrip().rfind(b"\n") >= 0 or start == 0:
            break
    body = tail.rstrip()
    cut = body.rfind(b"\n") + 1
    while cut == 0 and end > 0:  # a last line longer than the window: read further back
        start = max(0, end - (1 << 20))
        f.seek(start)
        tail = f.read(end - start) + tail
        end = start
        body = tail.rstrip()
        cut = body.rfind(b"\n") + 1
    last = body[cut:]
    if not last.strip():
        return size
    try:
        files.loads(last)
    except files.JSONProblem as e:
        if not e.content:
            return end + cut
    return size


def read_table(path: Path, list_columns: tuple[str, ...], lists: bool = True, only=None) -> pd.DataFrame | None:
    """The journal's rows as a DataFrame as the line reader builds one (list columns as lists, or as empty lists
    with lists=False), or None where this reader does not take the journal whole. only: the columns to keep (the
    others are parsed, and checked as this reader checks them, but not kept)."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return None
    with files.open_regular(path, str(path), files.ROWS_MAX) as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return None
        end = whole_lines_end(f, size)
        f.seek(0)
        try:  # the text columns the rows have (a column named in the schema but in no row would be added)
            first = files.loads(f.readline())
        except files.JSONProblem:
            return None
        if not isinstance(first, dict):
            return None
        as_text = [c for c in TEXT if c in first]
        # in blocks (the types the first block shows must hold in every block), else whole (each column's type
        # from all its rows, at about twice the memory)
        with files.arrow_file(f) as af:
            got = (_read(af, end, as_text, list_columns, lists, BLOCK, only)
                   or _read(af, end, as_text, list_columns, lists, None, only))
    if got is None:
        return None
    df, kept = got
    for c, values in kept.items():
        df[c] = values if lists else None
    return df


def _read(f, end: int, as_text: list[str], list_columns, lists: bool, block: int | None, only=None):
    """(the rows less their list columns, {list column: its values}) read by pyarrow, in blocks of ``block`` bytes
    (None: whole), or None where pyarrow does not take them (or they are not what the line reader would take)."""
    import pyarrow as pa
    import pyarrow.json as pj

    for _ in range(2):  # pyarrow reads a text that looks like a date as a timestamp: such columns again as text
        opts = pj.ReadOptions(block_size=block or BLOCK, use_threads=True)
        parse = pj.ParseOptions(explicit_schema=pa.schema([(c, pa.string()) for c in as_text]),
                                unexpected_field_behavior="infer")
        try:
            if block:
                reader = pj.open_json(_first(f, end), read_options=opts, parse_options=parse)
                schema = reader.schema
            else:
                table = pj.read_json(_first(f, end), read_options=opts, parse_options=parse)
                schema = table.schema
        except (pa.ArrowException, ValueError, OSError):
            return None
        dated = [n.name for n in schema if pa.types.is_temporal(n.type)]
        if not dated:
            break
        as_text = as_text + dated
    else:
        return None
    for c in REQUIRED:
        if c not in schema.names or not pa.types.is_string(schema.field(c).type):
            return None
    for fld in schema:
        t = fld.type
        if fld.name not in list_columns and not (pa.types.is_string(t) or pa.types.is_integer(t)
                                                 or pa.types.is_floating(t) or pa.types.is_boolean(t)
                                                 or pa.types.is_null(t)):
            return None  # a nested value where a plain one belongs: the line reader says where
        if fld.name in list_columns and not (pa.types.is_null(t) or (pa.types.is_list(t) and (
                pa.types.is_integer(t.value_type) or pa.types.is_floating(t.value_type)
                or pa.types.is_null(t.value_type)))):
            return None  # a list column of something else (text): the line reader says where, lists or not
    kept = {c: [] for c in list_columns if c in schema.names and (only is None or c in only)}
    drop = [x.name for x in schema if x.name in list_columns
            or (only is not None and x.name not in only and x.name not in REQUIRED)]
    try:
        batches = []
        for b in (reader if block else table.to_batches()):
            for c in kept:
                if lists:
                    kept[c].extend(b.column(c).to_pylist())
            batches.append(b.drop_columns(drop))
        table = pa.Table.from_batches(batches, schema=pa.schema([x for x in schema if x.name not in drop]))
        del batches
    except (pa.ArrowException, ValueError, OSError):
        return None
    for c in REQUIRED:
        if table.column(c).null_count:
            return None
    return table.to_pandas(), kept
