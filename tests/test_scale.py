"""What keeps report and gate usable on a 100,000-row run, checked on small runs (the figures come from
benchmarks/scale.py, not from timed tests): rows read without samples_us where they are not needed, from
rows.parquet only when it holds what the journal holds; every terminal listing bounded by --max-rows."""
from __future__ import annotations

import json
import os

import gate_synth
import pandas as pd
import pytest
from report_synth import DECODE, FA2, case, cli, demo_rows, row, write_run

from kbench.errors import BadInput
from kbench.runs.store import JOURNAL, PARQUET, load_run, parquet_current, read_journal, read_manifest


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


def _flipping_rows():
    """16 (batch, kv_len) slices per timing state (32 crossover rows); unthrottled, decode wins q 1-2 and 6-8 and
    fa2 q 3-5, sustained fa2 wins every q: 80 decisions flip between the states."""
    rows = []
    for bs in (1, 2, 4, 8):
        for kv in (1024, 2048, 4096, 8192):
            for q in range(1, 9):
                for power, dec in (("unthrottled", 20.0 if 3 <= q <= 5 else 10.0), ("sustained", 25.0)):
                    c = case(bs, q, kv, power=power)
                    rows += [row(DECODE, c, dec), row(FA2, c, 15.0)]
    return rows


def _listed(output: str, title: str) -> list[str]:
    """The body lines of the rich table whose title starts with ``title``."""
    lines = output.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(title))
    body = []
    for ln in lines[start + 1:]:
        if ln.startswith("└"):
            break
        if ln.startswith("│"):
            body.append(ln)
    return body


def test_max_rows_bounds_every_listing_and_says_what_was_left_out(tmp_path):
    run = write_run(tmp_path / "r", _flipping_rows())
    res = cli("report", run, "--out", tmp_path / "rep", "--max-rows", 3)
    assert res.exit_code == 0, res.output
    out = res.output
    assert len(_listed(out, "Per case")) == 3 and "... 253 more cases in" in out
    assert len(_listed(out, "Crossovers")) == 3
    assert f"... 29 more crossover rows in {tmp_path / 'rep' / 'crossovers.csv'}" in out
    assert "80 decision(s) flip" in out and out.count("  flip: ") == 3
    assert f"... 77 more flips in {tmp_path / 'rep' / 'power.csv'}" in out
    # the files keep every line
    assert len(pd.read_csv(tmp_path / "rep" / "crossovers.csv")) == 32
    assert pd.read_csv(tmp_path / "rep" / "power.csv")["flipped"].sum() == 80
    every = cli("report", run, "--out", tmp_path / "rep2", "--max-rows", -1)
    assert len(_listed(every.output, "Crossovers")) == 32 and every.output.count("  flip: ") == 80
    assert "more crossover rows" not in every.output and "more flips" not in every.output


def test_plots_for_the_first_groups_only_and_the_report_says_so(tmp_path):
    """Six groups (kv_dist x sinks); --plot-groups 2 draws the idealised batch and one more, in group order,
    and report.md and the screen say how many groups were plotted."""
    rows = []
    for kv_dist in ("fixed", "lognormal:1.0", "zipf:1.0"):
        for sinks in ("off", "on"):
            for q in (1, 2, 3):
                c = case(4, q, 1024, kv_dist=kv_dist, sinks=sinks)
                rows += [row(DECODE, c, 10.0 * q), row(FA2, c, 20.0)]
    run = write_run(tmp_path / "r", rows)
    res = cli("report", run, "--out", tmp_path / "rep", "--plot-groups", 2)
    assert res.exit_code == 0, res.output
    heat = sorted(p.name for p in (tmp_path / "rep").glob("speedup-heatmap-*.png"))
    assert heat == ["speedup-heatmap-32-8-128-bf16-p64-HND-sinks-on.png", "speedup-heatmap-32-8-128-bf16-p64-HND.png"]
    assert "plots for 2 of the 6 groups (--plot-groups N draws more)" in res.output
    assert "time-vs-q_len plots for 2 of the 6 groups" in (tmp_path / "rep" / "report.md").read_text()
    every = cli("report", run, "--out", tmp_path / "rep2", "--plot-groups", -1)
    assert len(list((tmp_path / "rep2").glob("speedup-heatmap-*.png"))) == 6
    assert "of the 6 groups" not in (tmp_path / "rep2" / "report.md").read_text()


def test_gate_max_rows_shows_failing_rows_first_and_says_what_was_left_out(tmp_path):
    """12 cases; the candidate's decode row is 20% faster in the even ones (improvements, listed first) and 20%
    slower in the odd ones (regressions). --max-rows 4 shows 4 table rows, all regressions, and says 8 more."""
    from kbench.cases.case import Case

    cases = [Case(batch_size=4, q_len=q, kv_len=4096, num_qo_heads=32, num_kv_heads=8, head_dim=128)
             for q in range(1, 13)]
    base_t = {(gate_synth.DECODE, "decode", c): 10.0 for c in cases} | \
        {(gate_synth.CONTEXT, "context", c): 30.0 for c in cases}
    cand_t = {k: t * ((0.8 if k[2].q_len % 2 == 0 else 1.2) if k[0] == gate_synth.DECODE else 1.0)
              for k, t in base_t.items()}
    base = gate_synth.write_run(tmp_path / "base", gate_synth.sweep_rows(base_t, seed=1))
    cand = gate_synth.write_run(tmp_path / "cand", gate_synth.sweep_rows(cand_t, seed=2))
    res = gate_synth.gate_cli("--baseline", base, "--candidate", cand, "--max-rows", 4, "--json", tmp_path / "g.json")
    assert res.exit_code == 1, res.output
    table = [ln for ln in res.output.splitlines() if ln.startswith("│")]
    assert len(table) == 4 and all("regression" in ln for ln in table)
    assert "... 8 more row(s) of the table not shown" in res.output
    assert res.output.startswith("FAIL: 6 of 24 rows fail") and "6 regression, 6 improvement, 12 pass" in res.output
    assert len(json.loads((tmp_path / "g.json").read_text())["rows"]) == 24  # the file keeps every row
    every = gate_synth.gate_cli("--baseline", base, "--candidate", cand, "--max-rows", -1)
    assert len([ln for ln in every.output.splitlines() if ln.startswith("│")]) == 12
    assert "not shown" not in every.output


def test_the_journal_read_by_pyarrow_is_the_journal_read_line_by_line(tmp_path, monkeypatch):
    """read_journal's fast path (kbench.runs.journal_table) gives the frame the line reader gives, samples and all,
    also for a journal whose last line was cut short by a kill; what it does not take whole goes to the line reader."""
    from kbench.runs import journal_table
    from kbench.runs.store import read_journal

    run = gate_synth.write_run(tmp_path / "g", gate_synth.sweep_rows())
    cut = tmp_path / "cut.jsonl"
    cut.write_text((run / JOURNAL).read_text() + '{"kernel": "k", "case_id": "bs1-q1')
    demo = write_run(tmp_path / "d", demo_rows()) / JOURNAL
    for path in (run / JOURNAL, cut, demo):
        for lists in (True, False):
            assert journal_table.read_table(path, ("samples_us",), lists) is not None
            fast = read_journal(path, "sweep", lists)
            with monkeypatch.context() as m:
                m.setattr(journal_table, "read_table", lambda *a, **k: None)
                slow = read_journal(path, "sweep", lists)
            pd.testing.assert_frame_equal(fast, slow)
    nan = tmp_path / "nan.jsonl"  # NaN and Infinity, Python's JSON tokens, read as json.loads reads them
    nan.write_text((run / JOURNAL).read_text().replace('"median_us": ', '"median_us": NaN, "x": ', 1)
                   .replace('"p25_us": ', '"p25_us": Infinity, "y": ', 1))
    with monkeypatch.context() as m:
        m.setattr(journal_table, "read_table", lambda *a, **k: None)
        slow = read_journal(nan)
    pd.testing.assert_frame_equal(read_journal(nan), slow)
    typed = tmp_path / "typed.jsonl"  # a column whose type changes: the line reader, which names the line
    lines = (run / JOURNAL).read_text().splitlines()
    lines[1] = lines[1].replace('"window_left": -1', '"window_left": "wide"')
    typed.write_text("\n".join(lines) + "\n")
    assert journal_table.read_table(typed, ("samples_us",)) is None
    with pytest.raises(BadInput, match=r"typed\.jsonl: line 2: window_left is 'wide', expected an integer"):
        read_journal(typed)


def test_arrow_threads_never_call_back_into_python_while_reading_rows(tmp_path, monkeypatch):
    """pyarrow reads a journal and a rows.parquet with threads of its own. Given a Python file object, those threads
    call back into Python (read, readinto), and one still holding it when Python shuts down aborts the process
    ("terminate called without an active exception", exit -6: apache/arrow#34314; a CI run of server-bench ended
    so, its rows written). So every read of a run's file, by kbench or by pyarrow, happens on the main thread: in
    blocks (many), with a date-like column (a reader opened, then opened again), and from rows.parquet."""
    import threading

    from kbench import files
    from kbench.runs import journal_table
    from kbench.runs.store import read_tables

    run = gate_synth.write_run(tmp_path / "g", gate_synth.sweep_rows())
    dated = tmp_path / "dated.jsonl"  # pyarrow takes a date-like text for a timestamp: read again, as text
    dated.write_text("".join(json.dumps({**json.loads(x), "started": "2026-12-07T19:00:00"}) + "\n"
                             for x in (run / JOURNAL).read_text().splitlines()))
    seen = []
    real = files.open_regular.__wrapped__

    class Watched:
        def __init__(self, f):
            self.f = f

        def __getattr__(self, name):
            got = getattr(self.f, name)
            if name in ("read", "readinto", "read1", "readinto1", "readline", "readall", "seek", "tell"):
                def called(*a, **k):
                    seen.append(threading.current_thread() is threading.main_thread())
                    return got(*a, **k)
                return called
            return got

        def __iter__(self):
            return iter(self.f)

    def watched(*a, **k):
        for f in real(*a, **k):
            yield Watched(f)

    monkeypatch.setattr(files, "open_regular", files.contextlib.contextmanager(watched))
    monkeypatch.setattr(journal_table, "BLOCK", 4096)  # many blocks: pyarrow reads ahead of the batches taken
    for path in (run / JOURNAL, dated):
        seen.clear()
        assert journal_table.read_table(path, ("samples_us",)) is not None
        assert seen and all(seen), f"{path.name}: {seen.count(False)} of {len(seen)} reads off the main thread"
    seen.clear()
    assert len(read_tables(run)) == len(gate_synth.sweep_rows())
    assert all(seen), f"rows.parquet: {seen.count(False)} of {len(seen)} reads off the main thread"


def test_gate_reads_the_samples_of_a_journal_only_run_from_the_journal(tmp_path):
    """A run that never ended (no rows.parquet) is gated without its samples in memory: the rows that need them
    read them from the journal; the answer is the one its tables give."""
    import shutil

    from kbench.gate import run_gate
    from kbench.gate.loading import JournalList

    base = gate_synth.write_run(tmp_path / "b", gate_synth.sweep_rows(seed=1))
    cand = gate_synth.write_run(tmp_path / "c", gate_synth.sweep_rows(seed=2))
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in ("manifest.json", JOURNAL):
        shutil.copy(cand / f, bare / f)
    whole, lean = run_gate(base, cand), run_gate(base, bare)
    assert [(r.case_id, r.outcome) for r in whole.rows] == [(r.case_id, r.outcome) for r in lean.rows]
    rows = load_run(cand).rows
    js = JournalList(bare / JOURNAL, "samples_us")
    assert js.row(len(rows) - 1) == rows["samples_us"].iloc[-1] and js.row(0) == rows["samples_us"].iloc[0]
    # a journal edited by hand (blank and white-space lines, a row indented, CRLF, no newline at the end) is read
    # row for row as read_journal reads it, in blocks small enough to cut lines, and in one block
    lines = (bare / JOURNAL).read_bytes().splitlines()
    edited = tmp_path / "edited.jsonl"
    edited.write_bytes(b"\n".join([lines[0], b"", b"   ", lines[1] + b"\r", b"  " + lines[2], b"\t\n",
                                    *lines[3:]]))
    want = read_journal(edited)["samples_us"].tolist()
    for block in (64, 1 << 20):
        js = JournalList(edited, "samples_us")
        js.BLOCK = block
        js.read(range(len(want) + 2))  # two rows past the end: none
        assert [js.row(i) for i in range(len(want) + 2)] == want + [[], []]
