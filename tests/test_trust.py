"""Issue #25: every hostile situation of tests/hostile_table.py, run as a test (exit code, the one line, and what
must hold afterwards: a target untouched, no secret stored or printed, an old output whole, no temporary file
left). Plus the primitives underneath: kbench.files, the folder swap, the link-refusing open, redaction."""
from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import hostile_table as ht
from helpers import shared_library

from kbench.errors import BadInput


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    s = ht.Shared(tmp_path_factory.mktemp("trust-shared"))
    yield s
    s.close()


@pytest.mark.parametrize("sit", ht.SITUATIONS, ids=[s.id for s in ht.SITUATIONS])
def test_hostile_situation(sit, shared, tmp_path):
    if sit.id == "max-seq-len-int32":
        from kbench.timing.hardware import host_available_bytes

        avail = host_available_bytes()
        if avail is None or avail >= 34 << 30:
            pytest.skip("this host could hold the 32 GiB page table: the case would run, not be skipped")
    w = ht.Workspace(tmp_path, shared)
    o = ht.run_situation(sit, w, in_process=True)
    why = ht.verdict(sit, o, w)
    assert why is None, f"{sit.id}: {why}\n{o.output[-3000:]}"


def test_the_table_covers_every_family():
    assert {s.family for s in ht.SITUATIONS} == {1, 2, 3, 4, 5, 6, 7}
    assert len({s.id for s in ht.SITUATIONS}) == len(ht.SITUATIONS)


# ---- kbench.files: the one reader ---------------------------------------------------------------------------------
def test_reader_refuses_what_is_not_a_regular_file_without_blocking(tmp_path):
    from kbench import files

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    import socket

    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    try:
        for name, what in (("fifo", "a named pipe (FIFO)"), ("dir", "a folder"), ("sock", "a socket")):
            with pytest.raises(BadInput, match=rf"^L: {re.escape(what)}, not a regular file$"):
                files.read_text(tmp_path / name, "L")
        with pytest.raises(BadInput, match=r"^/dev/zero: a character device, not a regular file$"):
            files.read_bytes("/dev/zero")
        with pytest.raises(BadInput, match="no such file"):
            files.read_text(tmp_path / "missing")
    finally:
        sock.close()


def test_reader_caps_size_and_growth_and_is_strict_utf8(tmp_path):
    from kbench import files

    f = tmp_path / "f"
    f.write_bytes(b"x" * 2048)
    with pytest.raises(BadInput, match=r"2 KiB, more than the 1 KiB"):
        files.read_text(f, max_bytes=1024)
    f.write_bytes(b"ok \xe2\x82")  # a cut multi-byte character
    with pytest.raises(BadInput, match=r"not UTF-8 text \(byte 0xe2 at offset 3\)"):
        files.read_text(f)
    f.write_bytes(b"\xef\xbb\xbfname = 1")
    assert files.read_text(f, bom=True) == "name = 1"
    f.write_text('{"a": [1, 2]}')
    assert files.read_json(f) == {"a": [1, 2]}
    f.write_text('{"a": ')
    with pytest.raises(BadInput, match=r"not valid JSON \(Expecting value, line 1 column 7\)"):
        files.read_json(f)


def test_records_catch_a_folder_of_two_writes(tmp_path):
    from kbench import files

    (tmp_path / "a").write_text("one")
    rec = {"a": files.record(tmp_path / "a")}
    files.check_records(tmp_path, rec, "F", "fix it")
    (tmp_path / "a").write_text("two")  # the same size: only the hash tells
    with pytest.raises(BadInput, match=r"^F: a does not match what was written with it \(its sha256 differs"):
        files.check_records(tmp_path, rec, "F", "fix it")
    (tmp_path / "a").unlink()
    with pytest.raises(BadInput, match="it is missing"):
        files.check_records(tmp_path, rec, "F", "fix it")
    files.check_records(tmp_path, ["a"], "F", "fix it")  # an older manifest's list: not checked


# ---- the folder swap --------------------------------------------------------------------------------------------
def test_replaced_folder_swaps_whole_keeps_carried_files_and_cleans_up(tmp_path):
    from kbench.runs.atomic import replaced_folder

    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "old").write_text("old")
    (dest / "README.md").write_text("mine")
    with replaced_folder(dest, "--out", carry=lambda n: n == "README.md") as new:
        (new / "fresh").write_text("new")
        assert sorted(p.name for p in dest.iterdir()) == ["README.md", "old"]  # untouched until the swap
    assert sorted(p.name for p in dest.iterdir()) == ["README.md", "fresh"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no sibling left
    with pytest.raises(RuntimeError):
        with replaced_folder(dest, "--out") as new:
            (new / "half").write_text("x")
            raise RuntimeError("stopped half way")
    assert sorted(p.name for p in dest.iterdir()) == ["README.md", "fresh"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert stat.S_IMODE(dest.stat().st_mode) == 0o777 & ~_umask()


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def test_baseline_force_carries_a_users_files(shared, tmp_path):
    from click.testing import CliRunner

    from kbench.cli.main import cli

    r = CliRunner().invoke(cli, ["baseline", str(shared.kernel_run), "--name", "b", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    (tmp_path / "b" / "README.md").write_text("why this baseline")
    r = CliRunner().invoke(cli, ["baseline", str(shared.kernel_run2), "--name", "b", "--out", str(tmp_path), "--force"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "b" / "README.md").read_text() == "why this baseline"
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["README.md", "manifest.json", "rows.csv",
                                                                  "rows.parquet"]


# ---- links --------------------------------------------------------------------------------------------------------
def test_open_no_follow_refuses_links_and_devices(tmp_path):
    from kbench.runs.atomic import open_no_follow

    (tmp_path / "t").write_text("keep")
    os.symlink(tmp_path / "t", tmp_path / "sym")
    os.link(tmp_path / "t", tmp_path / "hard")
    os.mkfifo(tmp_path / "fifo")
    for name, what in (("sym", "a symbolic link"), ("hard", "a hard link"), ("fifo", "a named pipe")):
        with pytest.raises(BadInput, match=what):
            open_no_follow(tmp_path / name, os.O_WRONLY | os.O_CREAT, truncate=True)
    assert (tmp_path / "t").read_text() == "keep"


# ---- redaction -----------------------------------------------------------------------------------------------------
def test_redact_argv_and_scrub():
    from kbench.redact import argv as redact_argv
    from kbench.server.auth import Credentials, split_url

    argv = ["--url", "http://u:p4ss@h:1", "--api-key", "K123", "--header", "X-A: v123", "--header=X-B: w123",
            "--api-key=K456", "--base-url=https://x:y@z", "--out", "r"]
    assert redact_argv(argv) == ["--url", "http://u:***@h:1", "--api-key", "***", "--header", "X-A: ***",
                                 "--header=X-B: ***", "--api-key=***", "--base-url=https://x:***@z", "--out", "r"]
    assert split_url("http://u:p4ss@[::1]:8/v") == ("http://u:***@[::1]:8/v", ("u", "p4ss"))
    c = Credentials("K123", (("X-A", "v123"),), ("u", "p4ss"))
    assert "K123" not in repr(c) and c.scrub("got K123 and v123 at http://a:b@c p4ss") == \
        "got *** and *** at http://a:***@c ***"


def test_signal_after_the_swap_is_held_until_it_is_done(tmp_path):
    """deferred_signals: a SIGTERM inside the block is delivered after it, as the handler outside would."""
    code = ("import os, signal, sys\n"
            "from kbench.runs.signals import deferred_signals\n"
            "done = []\n"
            "with deferred_signals():\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    done.append(1)\n"
            "    open(sys.argv[1], 'w').write('swapped')\n"
            "print('not reached')\n")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m")], capture_output=True, text=True, timeout=60)
    assert p.returncode == -signal.SIGTERM and (tmp_path / "m").read_text() == "swapped"
    assert "not reached" not in p.stdout


# ---- the one JSON parser -------------------------------------------------------------------------------------
def test_json_problems_are_named_not_raised_as_tracebacks():
    from kbench import files

    def problem(text, **kw):
        with pytest.raises(files.JSONProblem) as e:
            files.loads(text, **kw)
        return str(e.value)

    assert problem("[" * 100_000 + "]" * 100_000) == "nested too deeply"
    assert problem('{"groups": [{"cells": [{"q": 1}, {"time_us": ' + "7" * 5000 + "}]}]}") == \
        "groups[0].cells[1].time_us: an integer of 5000 digits, more than the 4,300 kbench reads"
    assert problem('{"a": 1, "a": 2}', unique_keys=True) == "the key 'a' appears twice in one object"
    assert files.loads('{"a": 1, "a": 2}') == {"a": 2}  # where the caller does not ask, JSON's own rule
    assert problem(b"[1, \xff]").startswith("not UTF-8")
    with pytest.raises(BadInput, match=r"^F: not valid JSON \(Expecting ',' delimiter, line 1 column 4\)$"):
        files.parse_json("[1 2]", "F")


def test_no_json_is_parsed_but_by_the_one_parser():
    """Every JSON kbench reads goes through kbench.files.loads (its guards: depth, long integers, duplicate keys);
    the one other parser is pyarrow's in the journal's fast path, whose every refusal goes to the line reader."""
    root = Path(__file__).resolve().parent.parent
    hits = [f"{p.relative_to(root)}:{n}" for folder in ("kbench", "cli", "kernels") for p in (root / folder).rglob("*.py")
            if p != root / "kbench" / "files.py"
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if re.search(r"\bjson\.loads?\(|\bread_json\(|\bopen_json\(|from json import", line)
            and "files.read_json" not in line and "def read_json" not in line
            and not (p == root / "kbench" / "runs" / "journal_table.py" and re.search(r"\bpj\.(read|open)_json\(", line))]
    assert hits == []


# ---- the one prebuild archive reader -------------------------------------------------------------------------
def _archive(path: Path, modules: dict[str, bytes]) -> Path:
    import hashlib
    import io
    import json
    import tarfile

    man = {"format": 1, "flashinfer": "x", "modules": {n: {"bytes": len(d), "sha256": hashlib.sha256(d).hexdigest()}
                                                        for n, d in modules.items()}}
    with tarfile.open(path, "w:gz") as tar:
        for name, data in {"aot/KBENCH_PREBUILD.json": json.dumps(man).encode(),
                           **{f"aot/{n}/{n}.so": d for n, d in modules.items()}}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_archive_reader_writes_only_inside_the_target(tmp_path):
    from kbench.engine import aot_archive

    for name in (".", ".."):
        with pytest.raises(BadInput, match=rf"module name '{re.escape(name)}' is not a plain name"):
            aot_archive.read_manifest(_archive(tmp_path / "a.tgz", {name: b"lib"}))
    dest, outside = tmp_path / "aot", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    os.symlink(outside, dest / "m1")  # the module's folder a link to elsewhere: not written through
    with aot_archive.opened(_archive(tmp_path / "b.tgz", {"m1": shared_library(b"lib-one"),
                                                          "m2": shared_library(b"lib-two")})) as tar:
        arc = aot_archive.Archive(tar, "b.tgz")
        with pytest.raises(BadInput, match=r"m1 is not a folder inside .*aot \(a link\?\)"):
            arc.install("m1", dest)
        arc.install("m2", dest)
        assert arc.present("m2", dest) and not arc.present("m1", dest)
    assert list(outside.iterdir()) == [] and sorted(p.name for p in (dest / "m2").iterdir()) == ["m2.so"]


def test_the_kernel_names_without_torch_are_the_registry():
    from kbench.kernels import kernel_names
    from kbench.names import KERNEL_NAMES, unknown_kernel_note

    assert tuple(kernel_names()) == KERNEL_NAMES
    assert unknown_kernel_note("fa2-prefill") is None and "'x'" in unknown_kernel_note("x")


# ---- #48 trust-net: the mechanisms under the table's rows ----------------------------------------------------------
def test_scrub_hides_every_form_a_secret_was_sent_or_may_come_back_in():
    import base64
    import html
    import json
    from urllib.parse import quote, quote_plus

    from kbench.server.auth import Credentials

    pw, key = "k3y&x<y>z'q", "sk&<t>\"k"
    c = Credentials(key, (), None)
    b = Credentials(None, (), ("bob", pw))
    sent = base64.b64encode(f"bob:{pw}".encode()).decode()
    for creds, s, extra in ((c, key, []), (b, pw, [f"Basic {sent}", sent])):
        forms = [s, quote(s, safe=""), quote_plus(s), html.escape(s), html.escape(s, quote=False),
                 html.escape(s).replace("&#x27;", "&#39;"), json.dumps(s)[1:-1], *extra]
        text = creds.scrub(" | ".join(forms))
        assert text == " | ".join(["***"] * len(forms)), text


def test_origin_is_the_connecting_parsers_and_nobodys_where_the_parsers_differ():
    from kbench.server.auth import origin

    assert origin("http://127.0.0.1:8000/x") == ("http", "127.0.0.1", 8000)
    assert origin("HTTPS://Host/x") == ("https", "host", 443)
    assert origin("http://[::1]:9/") == ("http", "::1", 9)
    assert origin("http://127.0.0.1:5\\@127.0.0.1:6/r") is None  # urlsplit: port 6; urllib3 connects to port 5
    assert origin("http://a:b:c@/") is None


@pytest.mark.parametrize("value,where", [("sk-€uro", "--api-key"), ("é€", "--header X-Gw")])
def test_a_header_value_outside_latin1_is_one_line_without_the_value(value, where):
    from kbench.server.auth import Credentials

    kw = {"api_key": value} if where == "--api-key" else {"headers": (("X-Gw", value),)}
    with pytest.raises(BadInput, match=rf"^{where}: character \d+ of the value is outside Latin-1") as e:
        Credentials(**kw)
    assert value not in str(e.value)
    Credentials(api_key="sk-é-latin1")  # Latin-1 travels


def test_a_deadline_ends_a_server_that_answers_every_read_in_time():
    """kbench.server.client's total deadline, in-process: `100 Continue` for ever (each read answered in 0.2 s)."""
    import time

    from fake_sglang import FakeSGLang, Faults

    from kbench.server.client import ServerClient, ServerError

    with FakeSGLang(Faults(stall="continue", drip=0.2)) as srv:
        client = ServerClient(srv.url, timeout=2.0)
        t0 = time.monotonic()
        with pytest.raises(ServerError, match=r"request timeout: no complete answer within 2 s"):
            client.request("GET", "/server_info")
        assert time.monotonic() - t0 < 10
        srv.faults = Faults()
        assert client.request("GET", "/server_info")[0] == 200  # the pool's next connection is a good one


def test_stale_hidden_folders_are_removed_a_held_or_fresh_one_kept(tmp_path):
    import fcntl
    import time

    from kbench.runs.atomic import MARKER, STALE_AFTER_S, _mark, remove_stale_folders, replaced_folder

    old = time.time() - 10 * STALE_AFTER_S
    for name in (".kb-new-dead", ".kb-old-dead", ".kb-new-held", ".kb-new-fresh", ".kb-newer", ".kb-new-results",
                 ".kb-old-backup", ".kb-new-forged", ".kb-new-linked-marker"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_text("x")
        if name in (".kb-new-dead", ".kb-old-dead", ".kb-new-held", ".kb-new-fresh", ".kb-newer"):
            _mark(tmp_path / name, tmp_path / "out")  # what a kbench writer leaves (killed: dead)
    (tmp_path / ".kb-new-forged" / MARKER).write_text('{"writer": "someone else"}')
    (tmp_path / ".kb-new-linked-marker" / MARKER).symlink_to(tmp_path / ".kb-new-dead" / MARKER)
    for name in (".kb-new-dead", ".kb-old-dead", ".kb-new-held", ".kb-newer", ".kb-new-results", ".kb-old-backup",
                 ".kb-new-forged", ".kb-new-linked-marker"):
        os.utime(tmp_path / name, (old, old))
    (tmp_path / ".kb-new-link").symlink_to(tmp_path / ".kb-newer")
    fd = os.open(tmp_path / ".kb-new-held", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert sorted(p.name for p in remove_stale_folders(tmp_path)) == [".kb-new-dead", ".kb-old-dead"]
        with replaced_folder(tmp_path / "out", "--out") as new:  # a writer holds its own: another is not taking it
            assert remove_stale_folders(tmp_path) == [] and new.exists()
            os.utime(new.parent, (old, old))
            assert remove_stale_folders(tmp_path) == []
    finally:
        os.close(fd)
    # the user's folders of such names (no marker, a marker of another writer, a marker through a link) are kept
    assert sorted(p.name for p in tmp_path.iterdir()) == [".kb-new-forged", ".kb-new-fresh", ".kb-new-held",
                                                          ".kb-new-link", ".kb-new-linked-marker", ".kb-new-results",
                                                          ".kb-newer", ".kb-old-backup", "out"]
    assert (tmp_path / ".kb-new-results" / "f").read_text() == "x"


def test_the_two_rename_fallback_marks_its_old_folder_and_leaves_nothing(tmp_path, monkeypatch):
    from kbench.runs import atomic

    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "old").write_text("old")
    marked = []
    real_mark = atomic._mark
    monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)  # a file system without RENAME_EXCHANGE
    monkeypatch.setattr(atomic, "_mark", lambda folder, d: (real_mark(folder, d), marked.append(
        (folder.name[:8], atomic.marker_of(folder) is not None))))
    with atomic.replaced_folder(dest, "--out") as new:
        (new / "fresh").write_text("new")
        assert new.parent.name.startswith(".kb-new-") and atomic.marker_of(new.parent) is not None
        assert not (new / atomic.MARKER).exists()  # the marker stays beside the content, never in the output
    assert sorted(p.name for p in dest.iterdir()) == ["fresh"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert marked == [(".kb-new-", True), (".kb-old-", True)]


def test_a_marker_names_its_writer_and_without_flock_its_pid_decides(tmp_path, monkeypatch):
    import errno
    import fcntl
    import json
    import socket
    import subprocess
    import sys
    import time

    from kbench.runs import atomic

    mark = tmp_path / ".kb-new-x"
    mark.mkdir()
    atomic._mark(mark, tmp_path / "report")
    doc = json.loads((mark / atomic.MARKER).read_text())
    assert doc["writer"] == atomic.WRITER and doc["pid"] == os.getpid() and doc["host"] == socket.gethostname()
    assert doc["for"] == "report" and abs(doc["time"] - time.time()) < 60 and atomic.marker_of(mark) == doc
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    real_flock = fcntl.flock

    def no_flock(fd, op):  # a file system without flock (some NFS, FUSE)
        raise OSError(errno.ENOLCK, "no locks available")

    old = time.time() - 60
    for name, pid, host in ((".kb-new-alive", os.getpid(), None), (".kb-new-gone", int(dead.stdout), None),
                            (".kb-new-elsewhere", 1, "another-host")):
        (tmp_path / name).mkdir()
        doc = {**json.loads((mark / atomic.MARKER).read_text()), "pid": pid, "host": host or socket.gethostname()}
        (tmp_path / name / atomic.MARKER).write_text(json.dumps(doc))
        os.utime(tmp_path / name, (old, old))
    os.utime(mark, (old, old))
    monkeypatch.setattr(fcntl, "flock", no_flock)
    try:
        assert [p.name for p in atomic.remove_stale_folders(tmp_path)] == [".kb-new-gone"]
    finally:
        monkeypatch.setattr(fcntl, "flock", real_flock)


# ---- #48: one rule per output for text an input brings -----------------------------------------------------------
def test_text_rules_neutralise_what_inputs_bring_and_keep_the_rest():
    from kbench import text

    evil = "k\x1b[2J\x00\x07\u202egpj.exe\u2028x\x9b1m"
    assert text.terminal(evil) == "k\\x1b[2J\\x00\\x07\\u202egpj.exe\\u2028x\\x9b1m"
    assert text.terminal("trtllm-decode\tbs 16\nnext line") == "trtllm-decode\tbs 16\nnext line"  # kbench's own text
    assert text.one_line("H100\r\n--x\ny") == "H100\\x0d\\n--x\\ny"
    assert text.markdown("<img src=x onerror=a()> | b\nc & d") == "&lt;img src=x onerror=a()&gt; \\| b c &amp; d"
    assert text.code("a `b` c") == "``a `b` c``" and text.code("`x") == "`` `x ``" and text.code("p|q") == "`p\\|q`"
    assert text.xml("a\x00b\ud800c\x1b") == "a\\x00b\\ud800c\\x1b"


def test_junit_is_well_formed_whatever_a_row_holds(tmp_path):
    import xml.dom.minidom

    from kbench.gate.compare import GateResult, RowResult
    from kbench.gate.junit import write_junit

    evil = "boom \x1b[31m\x00\x01\ufffe end"
    row = RowResult(key={}, kernel="k\x00", case_id=evil, metric=None, outcome="failed", fails=True, note=evil)
    res = GateResult(baseline="b", candidate="c", kind="sweep", threshold=0.05, alpha=0.01, rows=[row],
                     winner_changes=[], winners_compared=[], baseline_hw="H200", candidate_hw="H200")
    write_junit(res, tmp_path / "j.xml")
    doc = xml.dom.minidom.parse(str(tmp_path / "j.xml"))
    case = doc.getElementsByTagName("testcase")[0]
    assert case.getAttribute("name") == "boom \\x1b[31m\\x00\\x01\\ufffe end"


def test_a_console_shows_control_characters_of_a_table_cell():
    import io

    from rich.table import Table

    from kbench.cli.console import make_console

    buf = io.StringIO()
    con = make_console(file=buf, width=120, color_system=None)
    t = Table()
    t.add_column("kernel")
    t.add_row("dec\x1b[31mRED\x00")
    con.print(t)
    con.print("line \x1b]0;title\x07")
    out = buf.getvalue()
    assert "\x1b" not in out and "\x00" not in out and "\x07" not in out
    assert "dec\\x1b[31mRED\\x00" in out and "line \\x1b]0;title\\x07" in out


def test_prebuild_archive_total_is_capped_before_anything_is_written(tmp_path, monkeypatch):
    from kbench.engine import aot_archive

    mods = {"m1": shared_library(b"one" * 100), "m2": shared_library(b"two" * 100)}
    monkeypatch.setattr(aot_archive, "TOTAL_MAX", len(mods["m1"]) + len(mods["m2"]) - 1)
    with aot_archive.opened(_archive(tmp_path / "a.tgz", mods)) as tar:
        with pytest.raises(BadInput, match=r"its modules add up to \d+ bytes, more than the \d+ bytes kbench installs"):
            aot_archive.Archive(tar, "a.tgz")
    monkeypatch.setattr(aot_archive, "TOTAL_MAX", 1 << 30)
    import shutil
    from collections import namedtuple

    monkeypatch.setattr(shutil, "disk_usage", lambda p: namedtuple("U", "total used free")(1 << 30, 0, 100))
    with aot_archive.opened(_archive(tmp_path / "a.tgz", mods)) as tar:
        with pytest.raises(BadInput, match=r"its modules need \d+ bytes, .* has 100 bytes free: nothing installed"):
            aot_archive.Archive(tar, "a.tgz").check_room(tmp_path)


def test_the_group_guard_ends_listed_groups_at_end_of_file_and_only_those():
    """kbench.server.group_guard: at end of file (kbench died) the guard ends each group still listed, a grandchild
    too, and leaves a group kbench said it had ended itself (its number may belong to another group by then)."""
    import time

    from kbench.server.group_guard import GroupGuard, group_alive

    def group():  # a shell in a session of its own, with a sleep of its own (a grandchild of this test)
        return subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)

    kept, ended = group(), group()
    guard = GroupGuard()
    guard.add(kept.pid)
    guard.add(ended.pid)
    guard.forget(kept.pid)
    guard._proc.stdin.close()  # as when kbench dies: the pipe's only writer is gone
    assert guard._proc.wait(timeout=10) == 0
    assert ended.wait(timeout=5) == -signal.SIGTERM
    t0 = time.monotonic()
    while group_alive(ended.pid) and time.monotonic() - t0 < 5:  # its sleep too (a zombie until init reaps it)
        time.sleep(0.05)
    assert not group_alive(ended.pid)
    assert kept.poll() is None
    os.killpg(kept.pid, signal.SIGKILL)
    kept.wait(timeout=5)
