"""What keeps report and gate usable on a 100,000-row run, checked on small runs (the figures come from
benchmarks/scale.py, not from timed tests): rows read without samples_us where they are not needed, from
rows.parquet only when it holds what the journal holds; every terminal listing bounded by --max-rows."""
from __future__ import annotations

import json
import os

import gate_synth
import pandas as pd
from report_synth import demo_rows, write_run

from kbench.runs.store import JOURNAL, PARQUET, load_run, parquet_current, read_manifest


def test_rows_without_lists_are_the_rows_less_samples(tmp_path):
    run = gate_synth.write_run(tmp_path / "r", gate_synth.sweep_rows())  # rows with 60 samples each
    assert parquet_current(run, read_manifest(run))
    full, lean = load_run(run).rows, load_run(run, lists=False).rows
    assert (full.loc[full["path"] != "reference", "samples_us"].map(len) == 60).all()
    assert (lean["samples_us"].map(len) == 0).all()
    pd.testing.assert_frame_equal(full.drop(columns="samples_us"), lean.drop(columns="samples_us"))


def _touch_later(path, than):
    st = os.stat(than)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def test_a_journal_changed_after_the_tables_is_what_is_read(tmp_path):
    """rows.parquet is only a faster copy: a row appended to the journal after the run ended (by hand, or a
    resume that did not finish), or a journal edited in place, is read from the journal."""
    run = write_run(tmp_path / "r", demo_rows())
    lines = (run / JOURNAL).read_text().splitlines()
    extra = json.loads(lines[0]) | {"kernel": "late-kernel"}
    (run / JOURNAL).write_text("\n".join(lines + [json.dumps(extra)]) + "\n")
    assert not parquet_current(run, read_manifest(run))
    assert "late-kernel" in set(load_run(run, lists=False).rows["kernel"])

    run2 = write_run(tmp_path / "r2", demo_rows())
    first = json.loads((run2 / JOURNAL).read_text().splitlines()[0])
    edited = (run2 / JOURNAL).read_text().replace(first["kernel"], "edited-kernel", 1)
    (run2 / JOURNAL).write_text(edited)
    _touch_later(run2 / JOURNAL, run2 / PARQUET)
    assert not parquet_current(run2, read_manifest(run2))
    assert "edited-kernel" in set(load_run(run2, lists=False).rows["kernel"])
