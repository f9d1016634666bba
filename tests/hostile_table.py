"""Issue #25's hostile situations and what kbench does in each, as one table: the situation, the command, the exit
code and the one line kbench prints. tests/test_trust.py runs every row as a test (in-process where that is safe,
as a real process where a regression could hang or a signal is sent); this script runs them all as real
processes and prints the table:

    python tests/hostile_table.py [--markdown FILE] [--only ID,ID]

Families (the issue's): 1 secrets, 2 outputs half replaced (by a signal) or replaced that must not be (a device, a
link, the command's own input), 3 links in a run folder, 4 measurements
lost or invented, 5 the gate and broken candidates, 6 inputs that hang or blow up, 7 outputs an input could forge
(markup in a PR comment, control characters on a terminal or in JUnit, a second line in an error line; #48). The situations the earlier
issues settled are in tests/edges_table.py (#17), tests/test_hostile_inputs.py and tests/test_server_bench_hostile.py.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for p in (HERE, HERE / "servers"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from fake_sglang import FakeSGLang, Faults  # noqa: E402
from gate_synth import CASE_A, DECODE, sweep_rows, write_run  # noqa: E402

SECRET_PW = "pw-Zq81-secret"
_P_CELL = r"^error: P\.json: group 32/8/128 bf16 p64 HND: cell bs 16 q 4 kv 4096: "
SECRET_KEY = "sk-trust-4f2a9c"
SECRET_HDR = "hdr-tok-77e1"
TINY = "--scenario quick -b 1 -q 1 -k 64 --kernels reference"
SERVER = "--backend sglang --skip-warmup --batch-size 1 --input-len 4 --output-len 2 --flush-retry-wait 0"


# ---- the workspace a situation runs in ------------------------------------------------------------------------
class Workspace:
    """A fresh folder per situation, the shared inputs copied into it, and the fake SGLang servers."""

    def __init__(self, root: Path, shared: "Shared"):
        self.root = root
        self.shared = shared
        self.vars: dict[str, str] = {}
        self.env: dict[str, str] = {}

    def path(self, name: str) -> Path:
        return self.root / name

    def copy(self, src: Path, name: str) -> Path:
        shutil.copytree(src, self.root / name, symlinks=True)
        return self.root / name


class Shared:
    """Made once: a complete CPU sweep run, synthetic kernel runs, the fake servers."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.cpu_run = _cpu_run(root / "cpu")
        self.kernel_run = write_run(root / "kernel-run", sweep_rows(seed=1))
        self.kernel_run2 = write_run(root / "kernel-run2", sweep_rows(seed=2))
        self.server = FakeSGLang(Faults()).start()  # per situation: faults reset by the setup
        self.other = FakeSGLang(Faults()).start()  # another origin (a redirect target)

    def reset_servers(self) -> None:
        for s in (self.server, self.other):
            s.faults = Faults()
            with s._lock:
                s.requests.clear()
                s._flush_calls = s._generate_calls = 0

    def close(self) -> None:
        self.server.stop()
        self.other.stop()


def _cpu_run(out: Path) -> Path:
    p = subprocess.run([sys.executable, "-m", "kbench.cli.main", "sweep", *shlex.split(TINY), "-q", "1,2",
                        "--out", str(out), "--name", "cpu"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return next(out.glob("cpu-*"))


def setup_kbench(*args) -> str:
    """A kbench command a situation's setup needs done (a baseline, a report, an export to be hostile to), run in
    this process: the same command as a real process, without its start-up (seconds each, on a busy 2-core
    machine). Exit 0 asserted; its output returned."""
    code, out = _run_in_process([str(a) for a in args], {"COLUMNS": "250", "GITHUB_STEP_SUMMARY": ""}, os.getcwd())
    assert code == 0, out
    return out


def digest(path: Path) -> str:
    h = hashlib.sha256()
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(path)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def leftovers(folder: Path) -> list[str]:
    """Temporary files or folders kbench may have left: .kb-*, .NAME.kbench-* (older names), .*.tmp*, zero-byte
    files."""
    out = []
    for p in folder.rglob("*"):
        n = p.name
        if n.startswith(".kb-") or ".kbench-new-" in n or ".kbench-old-" in n or (n.startswith(".") and ".tmp" in n):
            out.append(str(p.relative_to(folder)))
        elif p.is_file() and not p.is_symlink() and p.stat().st_size == 0 and not n.startswith(".kbench"):
            out.append(str(p.relative_to(folder)) + " (0 bytes)")
    return out


def holds(folder: Path, secret: str) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and not p.is_symlink()
            and secret.encode() in p.read_bytes()]


def set_manifest(run: Path, **kw) -> None:
    m = json.loads((run / "manifest.json").read_text())
    for k, v in kw.items():
        if v is None:
            m.pop(k, None)
        else:
            m[k] = v
    (run / "manifest.json").write_text(json.dumps(m))


def journal(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "rows.jsonl").read_text().splitlines() if x.strip()]


def write_journal(run: Path, rows: list[dict], raw_tail: str = "") -> None:
    (run / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + raw_tail)


# #55 item 2 and 8: interleaved A/Bs that keep what they measured; server baselines of one setting
AB_SERVERS = f"--url {{url}} --url-b {{url2}} {SERVER} --repeat 7 --out r"


def _ab_servers(w):
    _server(w)
    w.shared.other.faults = Faults()
    w.vars["url2"] = w.shared.other.url


def _ab_halves(w) -> list[Path]:
    return sorted(w.path("r").glob("server-bench-default-*"))


def _ab_rounds_kept(n: int, status: str):
    """Both halves hold every finished round (their journals: the last row of the case, its rounds 0..n-1), their
    manifests say so (status, interleave.rounds_done) and no --resume command is printed (an interleaved A/B is not
    resumed); the gate pairs the n rounds both hold."""
    def check(w, out):
        halves = _ab_halves(w)
        assert [h.name.split("-")[3] for h in halves] == ["a", "b"], halves
        for h in halves:
            m = json.loads((h / "manifest.json").read_text())
            assert m["status"] == status, (h.name, m["status"])
            assert m["interleave"]["rounds_done"] == n, m["interleave"]
            last = journal(h)[-1]
            assert [int(x) for x in last["sample_rounds"]] == list(range(n)), last.get("sample_rounds")
            assert len(last["latency_samples"]) == n
        assert "--resume" not in out, out[-500:]
        from kbench.gate import run_gate

        res = run_gate(halves[0], halves[1])
        lat = next(r for r in res.rows if r.metric == "latency")
        assert res.paired and f"{n} rounds" in lat.note, lat.note
    return check


def _kill9_at_pause(w):
    pid = int((_ab_halves(w)[0] / ".kbench.lock").read_text().split()[0])
    os.kill(pid, signal.SIGKILL)


def _server_runs(w, manifests: list[dict]) -> None:
    from test_gate_server import ensure_server_kind, server_row

    ensure_server_kind()
    for i, extra in enumerate(manifests):
        run = write_run(w.path(f"run{i}"), [server_row(c, seed=i) for c in ("bs1-in64-out16", "bs2-in64-out16")],
                        kind="server-bench")
        set_manifest(run, **extra)
        w.vars[f"run{i}"] = str(run)
    w.vars["bl"] = str(w.path("bl"))


def _ab_halves_runs(w):
    _server_runs(w, [{"interleave": {"id": "p1", "side": s, "order": "ABBA", "rounds": 8, "mode": "two-servers"}}
                     for s in "ab"])


def _two_settings_runs(w):
    _server_runs(w, [{"server": {"attention_backend": b, "page_size": 64}} for b in ("flashinfer", "fa3")])


def _no_baseline(w, out):
    assert not w.path("bl").exists() or not any(w.path("bl").iterdir())


# ---- situations ------------------------------------------------------------------------------------------------
@dataclass
class Situation:
    id: str
    family: int
    what: str  # the hostile situation, in words
    command: str  # `kbench ...` with {name} fields from the workspace's vars
    code: int  # the exit code kbench must give
    line: str  # a regex the one line kbench prints must match (search)
    setup: Callable[[Workspace], None] | None = None
    check: Callable[[Workspace, str], None] | None = None  # more that must hold afterwards (files, secrets)
    process: bool = False  # run as a real process (a regression could hang; or a signal is sent)
    signal_at: tuple[str, str, int] | None = None  # (MODULE:FUNCTION, before|after, signal): tests/pause_at.py
    at_pause: Callable[[Workspace], None] | None = None  # with signal_at: done there instead of the signal
    env: dict = field(default_factory=dict)
    stdout: str | None = None  # where stdout goes (a real process): "head-c0" (| head -c0), "full" (> /dev/full),
    # "closed" (>&-); a command `python FILE ...` runs FILE (an exported selector) with this Python


# bash runs the command with its stdout as a situation says; the command's own exit status is the one kept
STDOUT = {"head-c0": '"$@" | head -c0; exit "${PIPESTATUS[0]}"', "full": '"$@" > /dev/full', "closed": '"$@" >&-'}


def _interrupted_cpu_run(w: Workspace) -> Path:
    run = w.copy(w.shared.cpu_run, "run")
    set_manifest(run, status="interrupted")
    w.vars["run"] = str(run)
    return run


def _outside(w: Workspace, content: str = "precious\n") -> Path:
    f = w.path("outside.txt")
    f.write_text(content)
    w.vars["outside"] = str(f)
    return f


def _untouched(name: str = "outside.txt", content: str = "precious\n"):
    def check(w: Workspace, out: str) -> None:
        assert w.path(name).read_text() == content, f"{name} was changed: {w.path(name).read_text()[:80]!r}"
    return check


# family 6: inputs that hang or blow up
def _fifo(w):
    os.mkfifo(w.path("lens.csv"))


def _dev_zero(w):
    os.symlink("/dev/zero", w.path("lens.csv"))


def _non_utf8(w):
    w.path("lens.csv").write_bytes(b"\xff\xfe1,2\n")


def _folder(w):
    w.path("lens.csv").mkdir()


def _huge(w):
    with open(w.path("lens.csv"), "wb") as f:
        f.truncate(17 << 20)


def _fifo_journal(w):
    run = _interrupted_cpu_run(w)
    (run / "rows.jsonl").unlink()
    os.mkfifo(run / "rows.jsonl")


def _fifo_result_file(w):
    os.mkfifo(w.path("result.jsonl"))
    w.vars["url"] = w.shared.server.url


# family 3: links in a run folder
def _resume_running(w):
    """The run being resumed is taken by another process now: this test process takes its lock (flock), as a
    kbench sweep --resume does while it runs."""
    import fcntl

    run = Path(w.vars["run"])
    fd = os.open(run / ".kbench.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    w.vars["held_fd"] = str(fd)  # held until the check: closed there, and the lock with it


def _lock_released_and_run_kept(w, out):
    os.close(int(w.vars["held_fd"]))
    assert json.loads((Path(w.vars["run"]) / "manifest.json").read_text())["status"] == "interrupted"


def _lock_symlink(w):
    run, out = _interrupted_cpu_run(w), _outside(w)
    (run / ".kbench.lock").unlink(missing_ok=True)
    os.symlink(out, run / ".kbench.lock")


def _lock_hardlink(w):
    run, out = _interrupted_cpu_run(w), _outside(w)
    (run / ".kbench.lock").unlink(missing_ok=True)
    os.link(out, run / ".kbench.lock")


def _journal_symlink(w):
    run = _interrupted_cpu_run(w)
    rows = journal(run)
    out = _outside(w, "".join(json.dumps(r) + "\n" for r in rows[:1]))
    (run / "rows.jsonl").unlink()
    os.symlink(out, run / "rows.jsonl")
    w.vars["outside_text"] = out.read_text()


def _reserve_symlink(w):
    run, out = _interrupted_cpu_run(w), _outside(w)
    os.symlink(out, run / ".kbench.reserve")


# family 2: outputs half replaced
def _baseline_pair(w):
    """An existing baseline (from kernel-run) to be replaced by one from kernel-run2."""
    bl = w.path("bl")
    setup_kbench("baseline", w.shared.kernel_run, "--name", "b", "--out", bl)
    w.vars.update(new=str(w.shared.kernel_run2), bl=str(bl), base=str(bl / "b"))
    w.vars["old_digest"] = digest(bl / "b")


def _baseline_old_whole(w, out):
    assert digest(w.path("bl") / "b") == w.vars["old_digest"], "the old baseline was changed"
    assert leftovers(w.path("bl")) == [], leftovers(w.path("bl"))


def _baseline_new_whole(w, out):
    b = w.path("bl") / "b"
    assert digest(b) != w.vars["old_digest"], "the baseline was not replaced"
    m = json.loads((b / "manifest.json").read_text())
    assert m["baseline"]["source_run"] == w.vars["new"]
    assert leftovers(w.path("bl")) == [], leftovers(w.path("bl"))


def _report_pair(w):
    rep = w.path("rep")
    setup_kbench("report", w.shared.kernel_run, "--out", rep)
    w.vars.update(new=str(w.shared.kernel_run2), rep=str(rep), old_digest=digest(rep))


def _report_old_whole(w, out):
    assert digest(w.path("rep")) == w.vars["old_digest"], "the old report was changed"
    assert leftovers(w.root) == [], leftovers(w.root)


def _mixed_baseline(w):
    _baseline_pair(w)
    other = w.path("other")
    setup_kbench("baseline", w.shared.kernel_run2, "--name", "o", "--out", other)
    shutil.copy(other / "o" / "rows.parquet", w.path("bl") / "b" / "rows.parquet")  # half of a replace


def _mixed_report(w):
    _report_pair(w)
    pol = json.loads(w.path("rep/policy.json").read_text())
    pol["created_at"] = "2026-01-01T00:00:00+00:00"  # a policy from another report, beside this one's files
    w.path("rep/policy.json").write_text(json.dumps(pol, indent=2))


def _runs_folder(w):
    w.copy(w.shared.kernel_run, "runs/kernel-run")
    w.vars.update(run=str(w.path("runs/kernel-run")), runs=str(w.path("runs")), old_digest=digest(w.path("runs")))


def _runs_untouched(w, out):
    assert digest(w.path("runs")) == w.vars["old_digest"]


# family 4: measurements lost or invented
def _lost_last_line(w):
    run = w.copy(w.shared.cpu_run, "run")
    rows = journal(run)
    write_journal(run, rows[:-1])
    w.vars["run"] = str(run)
    w.vars["n"] = str(len(rows))


def _restored(w, out):
    run = Path(w.vars["run"])
    assert len(journal(run)) == int(w.vars["n"]), "the lost row was not restored"


def _old_journal(w):
    """A run an older kbench measured (its rows without the realistic-batch and timing-state fields), kept as a
    baseline; the same run finished by this kbench (its journal mixes those rows with rows of this kbench)."""
    run = w.copy(w.shared.kernel_run, "run")
    rows = journal(run)
    newer = ("kv_dist", "q_dist", "window_left", "sinks", "max_seq_len", "q_dtype", "skip_softmax", "power",
             "kv_mean", "kv_max", "kv_min", "kv_hash", "q_mean", "q_max", "q_min", "q_hash", "chosen_by",
             "sm_clock_mean_mhz", "power_w", "gpu_temp_c", "throttle_reasons", "power_settle", "calls_per_sample")
    old = [{k: v for k, v in r.items() if k not in newer} for r in rows[: len(rows) // 2]]
    older = w.copy(w.shared.kernel_run, "older-run")
    write_journal(older, old)
    for f in ("rows.parquet", "rows.csv"):
        (older / f).unlink()
    set_manifest(older, num_rows=len(old))
    setup_kbench("baseline", older, "--name", "older", "--out", w.path("bl"))
    write_journal(run, old + rows[len(rows) // 2:])
    w.vars.update(run=str(run), base=str(w.path("bl/older")))


def _bad_axis_value(w):
    run = w.copy(w.shared.kernel_run, "run")
    rows = journal(run)
    rows[1]["window_left"] = "wide"
    write_journal(run, rows)
    w.vars["run"] = str(run)


def _other_device_rows(w):
    run = _interrupted_cpu_run(w)
    rows = journal(run)
    rows[-1] = {**rows[-1], "device": "NVIDIA H100 80GB HBM3", "sm": 90}
    write_journal(run, rows)


def _cut_csv(w):
    """The committed baseline copied without its rows.parquet and its rows.csv cut to its first 60,000 bytes (a copy
    cut short): 39 of its 224 rows, the last one whole."""
    src = ROOT / "results/baselines/h200-draft-extend-kv4096"
    run = w.copy(src, "cut")
    (run / "rows.parquet").unlink()
    with open(run / "rows.csv", "r+b") as f:
        f.truncate(60000)
    w.vars.update(run=str(run), whole=str(src))


def _short_tables(w):
    """A complete run copied without its journal, its rows.csv one row short and no rows.parquet."""
    run = w.copy(w.shared.cpu_run, "run")
    (run / "rows.jsonl").unlink()
    (run / "rows.parquet").unlink()
    data = (run / "rows.csv").read_bytes()
    (run / "rows.csv").write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 1])
    w.vars.update(run=str(run), n=str(json.loads((run / "manifest.json").read_text())["num_rows"]))


def _named_run(w):
    run = w.copy(w.shared.kernel_run, "run")
    w.vars["run"] = str(run)
    w.vars["run_digest"] = json.dumps({p.name: digest(p) for p in sorted(run.iterdir()) if p.is_file()})


def _run_unchanged(w, out):
    run = Path(w.vars["run"])
    assert json.dumps({p.name: digest(p) for p in sorted(run.iterdir()) if p.is_file()}) == w.vars["run_digest"]


def _shard_runs(w):
    """The two shards of a tiny CPU sweep (kbench merge's input), as w.vars s1 and s2."""
    for i in (1, 2):
        p = subprocess.run([sys.executable, "-m", "kbench.cli.main", "sweep", *shlex.split(TINY), "-q", "1,2",
                            "--shard", f"{i - 1}/2", "--out", str(w.path(f"s{i}")), "--name", f"s{i}"],
                           capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stdout + p.stderr
        w.vars[f"s{i}"] = str(next(w.path(f"s{i}").glob("s*-*")))
    w.vars["s1_digest"] = digest(Path(w.vars["s1"]))


def _shard_untouched(w, out):
    assert digest(Path(w.vars["s1"])) == w.vars["s1_digest"], "the input run was changed"


def _named_link(w):
    _named_run(w)
    w.path("latest.json").symlink_to("gate-1.json")


def _link_kept_file_written(w, out):
    assert w.path("latest.json").is_symlink(), "the link was replaced"
    assert json.loads(w.path("gate-1.json").read_text())["counts"], "the file the link points to was not written"


def _dev_null_link(w):
    _named_run(w)
    w.path("sink").symlink_to("/dev/null")


def _dev_null_kept(w, out):
    assert w.path("sink").is_symlink() and Path("/dev/null").is_char_device()


def _exported_report(w):
    run = w.copy(w.shared.kernel_run, "run")
    rep = w.path("rep")
    setup_kbench("report", run, "--out", rep)
    w.vars.update(rep=str(rep), policy_digest=digest(rep / "policy.json"))


def _exported_selector(w):
    _exported_report(w)
    setup_kbench("export", f"{w.vars['rep']}/policy.json", "--out", w.path("sel.py"))


LONG_FOLDER = "r" * 250  # names the file system takes (255 bytes at most)
LONG_FILE = "s" * 252 + ".py"


def _written(name: str, *inside: str):
    def check(w, out):
        p = w.path(name)
        assert p.exists() and all((p / n).exists() for n in inside), f"{name[:20]}... not written whole"
        assert leftovers(w.root) == [], leftovers(w.root)
    return check


def _policy_unchanged(w, out):
    assert digest(Path(w.vars["rep"]) / "policy.json") == w.vars["policy_digest"], "the policy was replaced"


def _nothing_written(*names):
    def check(w, out):
        assert not any(w.path(n).exists() for n in names), [n for n in names if w.path(n).exists()]
    return check


def _tables_restored(w, out):
    run = Path(w.vars["run"])
    assert len(journal(run)) == int(w.vars["n"]), "the row the table lost was not measured again"


# family 4, policies: a copy of the committed kv4096 baseline's policy (bs 16, 64 x q 1..16 at kv 4096), edited
_BASE_POLICY: list = []


def _edited_policy(edit):
    def setup(w):
        if not _BASE_POLICY:
            from kbench.recommend.price import load_source  # builds the policy as kbench report does

            _BASE_POLICY.append(json.dumps(load_source([str(ROOT / "results/baselines/h200-draft-extend-kv4096")]).policy))
        pol = json.loads(_BASE_POLICY[0])
        edit(pol["groups"][0])
        w.path("P.json").write_text(json.dumps(pol, indent=1))  # NaN as Python's json writes it
    return setup


def _answered(out: str, line: str) -> None:
    assert any(ln.startswith(line) for ln in out.splitlines()), f"no answer {line!r}"


def _file_holds(w, name: str, text: str) -> None:
    assert text in w.path(name).read_text(), f"{name} lacks {text!r}"


def _policy_cell(g, bs=16, q=4):
    return next(c for c in g["cells"] if (c["batch_size"], c["q_len"]) == (bs, q))


# family 5: the gate and broken candidates
def _broken_candidate(value: str):
    def setup(w):
        cand = w.copy(w.shared.kernel_run2, "cand")
        rows = journal(cand)
        text = "".join(json.dumps(r) + "\n" for r in rows)
        i = next(i for i, r in enumerate(rows) if r["kernel"] == DECODE and r["case_id"] == CASE_A.case_id)
        line = json.dumps(rows[i])
        text = text.replace(line, re.sub(r'"median_us": [^,]+', f'"median_us": {value}', line))
        (cand / "rows.jsonl").write_text(text)  # NaN and Infinity are JSON tokens Python reads
        w.vars.update(base=str(w.shared.kernel_run), cand=str(cand))
    return setup


def _two_server_runs(w) -> list:
    """Two kbench server-bench runs (a, b) of the shared fake SGLang server, as run folders."""
    runs = []
    for name in ("a", "b"):
        p = subprocess.run([sys.executable, "-m", "kbench.cli.main", "server-bench", "--url", w.shared.server.url,
                            *shlex.split(SERVER), "--out", str(w.path(name))], capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        runs.append(next(w.path(name).iterdir()))
    return runs


def _broken_server_candidate(w):
    runs = _two_server_runs(w)
    rows = journal(runs[1])
    rows[0]["latency"] = None
    write_journal(runs[1], rows)
    w.vars.update(base=str(runs[0]), cand=str(runs[1]))


# family 1: secrets
def _server(w, **faults):
    w.shared.server.faults = Faults(**faults)
    w.vars["url"] = w.shared.server.url
    w.vars["pw_url"] = w.shared.server.url.replace("http://", f"http://bob:{SECRET_PW}@")


def _no_secret(*secrets):
    def check(w, out):
        for s in secrets:
            assert s not in out, f"{s} printed"
            assert holds(w.root, s) == [], f"{s} stored in {holds(w.root, s)}"
    return check


def _pw_run(w):
    _server(w)
    p = subprocess.run([sys.executable, "-m", "kbench.cli.main", "server-bench", "--url", w.vars["pw_url"],
                        *shlex.split(SERVER), "--out", str(w.path("r"))], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    run = next(w.path("r").iterdir())
    set_manifest(run, status="interrupted")
    w.vars["run"] = str(run)


def _key_file_fifo(w):
    _server(w, api_key=SECRET_KEY)
    os.mkfifo(w.path("key.txt"))


def _redirect(same_origin: bool):
    def setup(w):
        _server(w)
        w.shared.server.faults.redirect_to = (w.shared.server.url if same_origin else
                                              w.shared.other.url.replace("127.0.0.1", "localhost"))
    return setup


def _ab_runs(b_backend: str | None = None):
    """Two server-bench runs of the fake SGLang server (a, b) and the committed sweep to price them with; B's rows
    relabelled as another backend's when b_backend is given."""
    def setup(w):
        _server(w)
        runs = _two_server_runs(w)
        if b_backend:
            write_journal(runs[1], [{**r, "backend": b_backend} for r in journal(runs[1])])
        w.vars.update(a=str(runs[0]), b=str(runs[1]), wl=str(runs[0] / "workload.jsonl"),
                      src=str(ROOT / "results/baselines/h200-draft-extend-kv4096"))
    return setup


AB = ("kbench recommend {src} --engine sglang --workload {wl} --max-extrapolation 1000 --ab-settings "
      "flashinfer,trtllm_mha --ab")


def _no_request_to_other(w, out):
    assert not w.shared.other.requests, "kbench followed the redirect to another origin"


# JSON nested deeper than a recursive parser's stack (Python's json: RecursionError), valid otherwise
DEEP = "[" * 100_000 + "]" * 100_000


def _deep_lengths(w):
    w.path("lens.json").write_text(DEEP)


def _deep_journal_line(w):
    run = _interrupted_cpu_run(w)
    rows = journal(run)
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (run / "rows.jsonl").write_text(text.replace("\n", "\n" + DEEP + "\n", 1))  # line 2, not the last


def _deep_workload(w):
    w.path("w.jsonl").write_text(DEEP + "\n")
    w.vars["run"] = str(ROOT / "results/baselines/h200-draft-extend-kv4096")


LONG_INT = "1" * 5000  # more digits than Python's int() converts


def _workload_line(line: str):
    def setup(w):
        w.path("w.jsonl").write_text(line + "\n")
        w.vars["run"] = str(ROOT / "results/baselines/h200-draft-extend-kv4096")
    return setup


def _long_int_scenario(w):
    w.path("s.toml").write_text(f'name = "x"\nmodel = "llama3-8b"\n[grid]\nbatch_size = {LONG_INT}\nq_len = 1\n'
                                'kv_len = 64\n')


def _server_fault(**faults):
    def setup(w):
        _server(w, **faults)
    return setup


def _rows_ok(w, out):
    runs = list(w.path("r").iterdir())
    got = [r["status"] for r in journal(runs[0])]
    assert got and set(got) == {"ok"}, got


def _one_run(status: str, min_rows: int = 0):
    """The run server-bench made under r/ ended with ``status`` and at least ``min_rows`` rows."""
    def check(w, out):
        runs = list(w.path("r").iterdir()) if w.path("r").exists() else []
        assert len(runs) == 1, runs
        m = json.loads((runs[0] / "manifest.json").read_text())
        n = len(journal(runs[0])) if (runs[0] / "rows.jsonl").exists() else 0
        assert m.get("status") == status and n >= min_rows, f"status {m.get('status')!r}, {n} rows"
    return check


# prebuild --load: a fake FlashInfer package (its version is all --load asks of it) whose data/aot folder is the
# target, put first on PYTHONPATH of the real process; archives made by hand
FAKE_FI = "0.0.0+kbench-test"


def _aot_archive(w, members: dict[str, bytes] | None = None, manifest: bytes | None = None, **modules) -> None:
    """aot.tgz with KBENCH_PREBUILD.json (``manifest``, else one listing ``modules``: name -> {bytes, sha256}) and
    ``members`` (name -> bytes; default: each module's library as listed); the fake FlashInfer beside it."""
    import io
    import tarfile

    pkg = w.path("fi/flashinfer")
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"__version__ = {FAKE_FI!r}\n")
    w.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(w.path("fi")), os.environ.get("PYTHONPATH")) if p)
    if manifest is None:
        manifest = json.dumps({"format": 1, "flashinfer": FAKE_FI, "arch": "9.0a", "modules": {
            n: {"bytes": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in modules.items()}}).encode()
    if members is None:
        members = {f"aot/{n}/{n}.so": d for n, d in modules.items()}
    with tarfile.open(w.path("aot.tgz"), "w:gz", compresslevel=1) as tar:
        for name, data in {"aot/KBENCH_PREBUILD.json": manifest, **members}.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))


def _aot_untouched(w, out):
    """Nothing was written but the fake FlashInfer's own file: not in its aot folder, not beside it."""
    made = sorted(str(p.relative_to(w.path("fi"))) for p in w.path("fi").rglob("*")
                  if not p.is_dir() and "__pycache__" not in p.parts)
    assert made == ["flashinfer/__init__.py"], made


def _aot_dotdot(w):
    _aot_archive(w, **{"..": b"\x7fELF up one"})


def _aot_huge_manifest(w):
    head = json.dumps({"format": 1, "flashinfer": FAKE_FI, "arch": "9.0a", "modules": {}})[:-1]
    _aot_archive(w, manifest=(head + ', "pad": "' + " " * (64 << 20) + '"}').encode())


def _aot_size_lie(w):
    lib = bytes(8 << 20)
    _aot_archive(w, members={"aot/m1/m1.so": lib}, manifest=json.dumps({
        "format": 1, "flashinfer": FAKE_FI, "arch": "9.0a",
        "modules": {"m1": {"bytes": 100, "sha256": hashlib.sha256(lib[:100]).hexdigest()}}}).encode())


def _aot_deep_manifest(w):
    _aot_archive(w, manifest=('{"format": 1, "modules": {}, "x": ' + DEEP + "}").encode())


# --- #48 trust-net ---------------------------------------------------------------------------------------------
# credentials that never reach another host, commands that paste whole, no hang, no hidden folder left for ever
ECHO_PW = "k3y&x<y>z-Zq81"  # a password with characters each encoding changes
ECHO_KEY = "sk&<trust>-9b1e"


def secret_forms(secret: str, user: str | None = None) -> dict[str, str]:
    """The forms a credential kbench sent may come back in: as given, HTTP Basic's base64 of user:password,
    percent-encoded, HTML-escaped, JSON-escaped."""
    import base64
    import html
    from urllib.parse import quote

    out = {"raw": secret, "percent-encoded": quote(secret, safe=""), "HTML-escaped": html.escape(secret),
           "JSON-escaped": json.dumps(secret)[1:-1]}
    if user is not None:
        out["base64 of user:password"] = base64.b64encode(f"{user}:{secret}".encode()).decode()
    return out


def _no_secret_form(secret: str, user: str | None = None):
    """No form of the secret in what kbench printed or in any file under the workspace."""
    def check(w, out):
        for what, s in secret_forms(secret, user).items():
            assert s not in out, f"the {what} secret ({s}) printed"
            assert holds(w.root, s) == [], f"the {what} secret stored in {holds(w.root, s)}"
    return check


def _echo_auth(path: str, status: int, api_key: str | None = None):
    def setup(w):
        from urllib.parse import quote

        _server(w, echo_auth=(path, status))
        w.vars["echo_url"] = w.shared.server.url.replace("http://", f"http://bob:{quote(ECHO_PW, safe='')}@")
    return setup


def _backslash_redirect(w):
    """A Location that urlsplit reads as this server and urllib3 connects to the other one with."""
    _server(w, api_key=SECRET_KEY)
    w.shared.server.faults.redirect_to = f"http://127.0.0.1:{w.shared.other.port}\\@127.0.0.1:{w.shared.server.port}"


def _no_request_to_other_nor_key(w, out):
    got = [(r.path, r.headers.get("Authorization")) for r in w.shared.other.requests]
    assert not got, f"the other origin received {got}"
    _no_secret(SECRET_KEY)(w, out)


def _stall(how: str):
    def setup(w):
        _server(w, stall=how, drip=0.5)
        w.vars["t0"] = str(time.monotonic())
    return setup


def _stall_on(how: str, *paths: str):
    """The server stalls (Faults.stall) on these paths only, a byte each 0.5 s; the rest answers."""
    def setup(w):
        _server(w, stall=how, drip=0.5, stall_paths=paths)
        w.vars["t0"] = str(time.monotonic())
    return setup


def _failed_row(reason: str, seconds: float):
    """Ended within ``seconds``; the run's one row is failed with a reason matching ``reason``."""
    def check(w, out):
        _ended_within(seconds)(w, out)
        rows = journal(next(w.path("r").iterdir()))
        assert [r["status"] for r in rows] == ["failed"], rows
        assert re.search(reason, rows[0]["reason"]), rows[0]["reason"]
    return check


def _ended_within(seconds: float):
    def check(w, out):
        took = time.monotonic() - float(w.vars["t0"])
        assert took < seconds, f"took {took:.0f} s"
    return check


PWNED = "res dir $(touch PWNED)"  # a folder name a shell would run a command from, pasted unquoted


def _pasted(*names: str):
    """The printed command names each of these workspace paths quoted for a shell, and no PWNED was made."""
    def check(w, out):
        for n in names:
            q = shlex.quote(w.vars[n])
            assert q in out, f"{q} not in the output"
        assert not list(w.root.rglob("PWNED")), "PWNED exists"
    return check


def _quoted_interrupted_run(w):
    src = _interrupted_cpu_run(w)
    run = w.path("my runs") / "x $(touch PWNED)"
    run.parent.mkdir()
    src.rename(run)
    w.vars.update(run=str(run), qrun=shlex.quote(str(run)))


def _improved_candidate(w):
    """A candidate whose rows are all twice as fast, in a folder named as a shell would run a command from."""
    from gate_synth import scaled

    cand = w.path(PWNED) / "cand"
    cand.parent.mkdir()
    write_run(cand, sweep_rows(times=scaled(0.5), seed=2))
    w.vars.update(base=str(w.shared.kernel_run), cand=str(cand), qcand=shlex.quote(str(cand)))


def _export_named(w):
    _exported_report(w)
    w.vars.update(sel=PWNED + ".py", qsel=shlex.quote(PWNED + ".py"))


def _set_line_whole(*must):
    """The `set:` line is one line that a shell splits into the whole command: every flag of ``must`` on it, and a
    vLLM --speculative-config that is JSON."""
    def check(w, out):
        line = next((ln for ln in out.splitlines() if ln.startswith("set: ")), None)
        assert line is not None, "no set: line"
        try:
            argv = shlex.split(line[5:])
        except ValueError as e:  # a quote opened and closed on the next line
            raise AssertionError(f"the set: line does not split as a shell would run it ({e})") from None
        for m in must:
            assert m in argv, f"{m} not on the set: line"
        if "--speculative-config" in argv:
            json.loads(argv[argv.index("--speculative-config") + 1])
    return check


def _json_answer(w, out):
    data = json.loads(out)
    assert data["settings"] and any(s["command"] for s in data["settings"])


def _pasted_run():
    """The resume line names the run folder made under the workspace's PWNED folder, quoted; no PWNED made."""
    def check(w, out):
        runs = list(w.path(PWNED).iterdir())
        assert len(runs) == 1, runs
        q = shlex.quote(str(runs[0]))
        assert q in out or shlex.quote(os.path.relpath(runs[0], w.root)) in out, f"{q} not in the output"
        assert not list(w.root.rglob("PWNED")), "PWNED exists"
    return check


ROUTES = str(ROOT / "results/baselines/h100-engine-routes-kv4096")
TREES = str(ROOT / "results/baselines/h100-eagle-tree-kv4096")


def _killed_report_leftovers(w):
    """A report killed by kill -9 while writing over its old one (a hidden .kb-new-* left beside it), and a live
    writer's .kb-new-* folder (this process holds its flock), both made a minute ago."""
    import fcntl

    _report_pair(w)
    marker = w.path(".pause-killed")
    p = subprocess.Popen([sys.executable, str(HERE / "pause_at.py"), "kbench.report.build:save_policy", "before",
                          str(marker), "--", "report", w.vars["new"], "--out", w.vars["rep"]], cwd=w.root,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.monotonic()
    while not marker.exists() and time.monotonic() - t0 < 120 and p.poll() is None:
        time.sleep(0.05)
    p.kill()
    p.wait()
    marker.unlink()
    left = [x for x in w.root.iterdir() if x.name.startswith(".kb-new-")]
    assert left, "the killed report left nothing"
    live = w.path(".kb-new-live")
    live.mkdir()
    (live / "policy.json").write_text("{}")
    fd = os.open(live, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    w.vars["live_fd"] = str(fd)
    for x in [*left, live]:
        os.utime(x, (time.time() - 60, time.time() - 60))


def _stale_removed_live_kept(w, out):
    os.close(int(w.vars["live_fd"]))
    assert leftovers(w.root) == [".kb-new-live"], leftovers(w.root)  # the killed writer's removed, the live one kept
    assert digest(w.path("rep")) != w.vars["old_digest"], "the report was not written"
# --- #48 trust-files: outputs no input can forge, files that disagree or lie ---------------------------------
EVIL_HTML = "<img src=x onerror=alert(1)>"
EVIL_TERM = "boom \x1b[2J\x1b]0;pwned\x07 \x00 end"  # clear the screen, retitle the terminal, a NUL


def _device_named(run: Path, name: str) -> None:
    m = json.loads((run / "manifest.json").read_text())
    m["device"] = {**(m.get("device") or {}), "name": name}
    (run / "manifest.json").write_text(json.dumps(m))


def _html_device_runs(w):
    """Baseline and candidate (the kernel runs) whose manifest names the GPU with markup."""
    for name, src in (("base", w.shared.kernel_run), ("cand", w.shared.kernel_run2)):
        _device_named(w.copy(src, name), EVIL_HTML)
        w.vars[name] = str(w.path(name))


def _html_device_source(w):
    """The committed kv4096 baseline, its manifest's GPU named with markup (its tables untouched), and a workload."""
    src = w.copy(ROOT / "results/baselines/h200-draft-extend-kv4096", "src")
    _device_named(src, "NVIDIA H200 " + EVIL_HTML)
    w.path("w.jsonl").write_text('{"batch_size": 16, "q_len": 4, "kv_len": 4096, "weight": 1}\n')
    w.vars["src"] = str(src)


def _markdown_escaped(name: str):
    def check(w, out):
        text = w.path(name).read_text()
        assert "<img" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text, text[:600]
    return check


def _failed_with_reason(reason: str):
    """A candidate whose decode row of CASE_A failed with ``reason`` (was ok in the baseline)."""
    def setup(w):
        cand = w.copy(w.shared.kernel_run2, "cand")
        rows = journal(cand)
        r = next(r for r in rows if r["kernel"] == DECODE and r["case_id"] == CASE_A.case_id)
        r.update(status="failed", reason=reason, median_us=None, samples_us=[])
        write_journal(cand, rows)
        for f in ("rows.parquet", "rows.csv"):
            (cand / f).unlink()
        w.vars.update(base=str(w.shared.kernel_run), cand=str(cand))
    return setup


def _no_control_chars_and_xml(w, out):
    import xml.dom.minidom

    assert not re.search("[\x00-\x08\x0b-\x1f\x7f]", out), repr(out[-400:])
    xml.dom.minidom.parse(str(w.path("j.xml")))  # a CI reader's parser takes it
    text = w.path("j.xml").read_text()
    assert "\\x1b[2J" in text and "\\x00" in text, "the reason is not shown, escaped"
    assert "\x1b" not in w.path("g.md").read_text()


def _workload_gpu_newline(w):
    w.path("w.jsonl").write_text(json.dumps({"kbench_workload": 1, "gpu": "H100\n--x"}) + "\n" +
                                 '{"batch_size": 16, "q_len": 4, "kv_len": 4096, "weight": 1}\n')
    w.vars["src"] = str(ROOT / "results/baselines/h200-draft-extend-kv4096")


def _parquet_run(edit, name: str = "cand"):
    """A copy of a kernel run as its tables alone (no journal), its rows.parquet rewritten by edit(frame)."""
    def setup(w):
        import pandas as pd

        run = w.copy(w.shared.kernel_run2, name)
        (run / "rows.jsonl").unlink()
        edit(pd.read_parquet(run / "rows.parquet")).to_parquet(run / "rows.parquet", index=False)
        w.vars.update(base=str(w.shared.kernel_run), cand=str(run), run=str(run))
    return setup


def _parquet_tenfold(w):
    """A complete run whose rows.parquet, rewritten after the run, says 10x the journal's times."""
    import pandas as pd

    run = w.copy(w.shared.kernel_run2, "run")
    df = pd.read_parquet(run / "rows.parquet")
    df["median_us"] = df["median_us"] * 10
    df.to_parquet(run / "rows.parquet", index=False)
    os.utime(run / "rows.parquet", ns=(time.time_ns(), time.time_ns() + 10**9))  # newer than the journal
    w.vars["run"] = str(run)


def _reported_from_journal(w, out):
    import pandas as pd

    times = {(r["kernel"], r["case_id"]): r["median_us"] for r in journal(Path(w.vars["run"])) if r["status"] == "ok"}
    cases = pd.read_csv(w.path("rep/cases.csv"))
    for _, c in cases.iterrows():
        assert c["decode_us"] == times[(c["best_decode"], c["case_id"])], "report answered from the Parquet"


def _journal_edit(edit):
    """A copy of a kernel run whose journal rows are edited (edit(rows)), its tables removed."""
    def setup(w):
        run = w.copy(w.shared.kernel_run2, "run")
        rows = journal(run)
        edit(rows)
        write_journal(run, rows)
        for f in ("rows.parquet", "rows.csv"):
            (run / f).unlink()
        set_manifest(run, num_rows=len(rows), tables=None)
        w.vars["run"] = str(run)
    return setup


def _first_decode(rows) -> dict:
    return next(r for r in rows if r["kernel"] == DECODE)


def _zero_rows(w):
    run = w.copy(w.shared.kernel_run2, "cand")
    write_journal(run, [])
    for f in ("rows.parquet", "rows.csv"):
        (run / f).unlink()
    set_manifest(run, num_rows=None, tables=None)
    w.vars.update(base=str(w.shared.kernel_run), cand=str(run))


def _baseline_files_nul(w):
    _baseline_pair(w)
    m = json.loads((Path(w.vars["base"]) / "manifest.json").read_text())
    m["files"]["rows\x00.csv"] = {"bytes": 1, "sha256": "0" * 64}
    (Path(w.vars["base"]) / "manifest.json").write_text(json.dumps(m))


def _policy_exported(edit):
    """The committed baseline's policy edited (edit(policy)), exported as sel.py."""
    def setup(w):
        _edited_policy(lambda g: None)(w)
        pol = json.loads(w.path("P.json").read_text())
        edit(pol)
        w.path("P.json").write_text(json.dumps(pol, indent=1))
        setup_kbench("export", w.path("P.json"), "--out", w.path("sel.py"))
    return setup


def _nested(depth: int) -> dict:
    d: dict = {}
    for _ in range(depth):
        d = {"x": d}
    return d


def _deep_device_policy(w):
    _edited_policy(lambda g: None)(w)
    pol = json.loads(w.path("P.json").read_text())
    pol["device"]["extra"] = _nested(200)
    w.path("P.json").write_text(json.dumps(pol))


def _aot_zeros(w):
    """An archive that honestly lists three modules of zeros (1 MiB each here; the issue's were 1 GiB)."""
    _aot_archive(w, m1=bytes(1 << 20), m2=bytes(1 << 20), m3=bytes(1 << 20))


def _aot_other_machine(w):
    """A shared library of another machine (this Python's ELF header with another e_machine)."""
    head = bytearray(Path(sys.executable).read_bytes()[:64])
    order = "little" if head[5] == 1 else "big"
    head[16:18] = (3).to_bytes(2, order)
    head[18:20] = (183 if int.from_bytes(head[18:20], order) != 183 else 62).to_bytes(2, order)  # AArch64 / x86-64
    _aot_archive(w, m1=bytes(head) + b"code")


TRUST_FILES = [
    # --- #48 trust-files ---
    Situation("gate-markdown-device-html", 7, "gate --markdown of runs whose GPU name is markup",
              "kbench gate --baseline {base} --candidate {cand} --markdown g.md", 0, r"^PASS",
              _html_device_runs, _markdown_escaped("g.md")),
    Situation("recommend-markdown-device-html", 7, "recommend --markdown from measurements whose GPU name is markup",
              "kbench recommend {src} --engine sglang --workload w.jsonl --markdown r.md", 0, r"^wrote r\.md",
              _html_device_source, _markdown_escaped("r.md")),
    Situation("gate-reason-control-chars", 7, "a candidate row failed with a reason holding ESC sequences and a NUL",
              "kbench gate --baseline {base} --candidate {cand} --junit j.xml --markdown g.md", 1, r"^FAIL",
              _failed_with_reason(EVIL_TERM), _no_control_chars_and_xml),
    Situation("error-line-newline", 7, "a workload header's gpu of 'H100\\n--x' (the error quotes it)",
              "kbench recommend {src} --engine sglang --workload w.jsonl", 2,
              r"^error: w\.jsonl: its header's gpu H100\\n--x: the measurements are from", _workload_gpu_newline),
    Situation("parquet-journal-disagree", 4, "a complete run whose rows.parquet, newer, says 10x the journal's times",
              "kbench report {run} --out rep", 0, r"^wrote \d+ files to rep", _parquet_tenfold,
              _reported_from_journal),
    Situation("parquet-median-text", 4, "a Parquet run whose median_us is text: report",
              "kbench report {run} --out rep", 2, r"^error: .*rows\.parquet: column median_us holds str values, "
              r"expected numbers$", _parquet_run(lambda d: d.assign(median_us=d["median_us"].astype(str))),
              _nothing_written("rep")),
    Situation("parquet-median-timestamps", 4, "a Parquet run whose median_us is timestamps: gate",
              "kbench gate --baseline {base} --candidate {cand}", 2,
              r"^error: candidate: .*rows\.parquet: column median_us holds datetime64\[\w+\] values",
              _parquet_run(lambda d: d.assign(median_us=__import__("pandas").to_datetime(d["median_us"], unit="s")))),
    Situation("parquet-batch-nan", 4, "a Parquet run whose batch_size is float with a NaN: baseline",
              "kbench baseline {run} --name b --out bl", 2,
              r"^error: .*rows\.parquet: row 1: batch_size is nan, expected an integer$",
              _parquet_run(lambda d: d.assign(batch_size=d["batch_size"].astype(float).where(d.index != 0))),
              _nothing_written("bl")),
    Situation("parquet-samples-text", 4, "a Parquet run whose samples_us is text: report (which never reads it)",
              "kbench report {run} --out rep", 2,
              r"^error: .*rows\.parquet: column samples_us holds \w+ values, expected lists of numbers$",
              _parquet_run(lambda d: d.assign(samples_us=d["samples_us"].map(lambda v: "[1, 2]"))),
              _nothing_written("rep")),
    Situation("gate-zero-rows", 4, "a candidate run of no rows", "kbench gate --baseline {base} --candidate {cand}", 2,
              r"^error: candidate .*: the run holds no rows \(status 'complete'\): nothing to gate$", _zero_rows),
    Situation("manifest-files-nul", 4, "a baseline whose manifest's files name a path with a NUL byte: gate",
              "kbench gate --baseline {base} --candidate {new}", 2,
              r"^error: baseline: .*: the manifest's files name 'rows\\x00\.csv', which no file can be named",
              _baseline_files_nul),
    Situation("report-kernel-html", 4, "a journal row whose kernel name is markup: report (select refused its policy)",
              "kbench report {run} --out rep", 2,
              r"^error: .*rows\.jsonl: row \d+: kernel is '<img src=x onerror=alert\(1\)>', not a kernel name",
              _journal_edit(lambda rows: _first_decode(rows).update(kernel=EVIL_HTML)), _nothing_written("rep")),
    Situation("report-batch-zero", 4, "a journal row of batch size 0: report", "kbench report {run} --out rep", 2,
              r"^error: .*rows\.jsonl: row \d+: batch_size is 0, below its minimum 1$",
              _journal_edit(lambda rows: _first_decode(rows).update(batch_size=0)), _nothing_written("rep")),
    Situation("report-q-above-kv", 4, "a journal row of q_len 8 at kv_len 4: report", "kbench report {run} --out rep", 2,
              r"^error: .*rows\.jsonl: row \d+: q_len 8 > kv_len 4: no such shape",
              _journal_edit(lambda rows: _first_decode(rows).update(q_len=8, kv_len=4)), _nothing_written("rep")),
    Situation("report-row-twice", 4, "a journal holding one row twice with different times: report",
              "kbench report {run} --out rep", 0,
              r"^warning: .*: 1 \(kernel, case\) measured more than once with different times .*the last row of each "
              r"counts", _journal_edit(lambda rows: rows.append({**_first_decode(rows),
                                                                 "median_us": _first_decode(rows)["median_us"] * 3}))),
    Situation("export-help-percent", 6, "an exported selector's --help, a filter value of the policy holding '%'",
              "python sel.py --help", 0, r"group filter; the policy has: file:50%\.csv",
              _policy_exported(lambda p: p["groups"][0].update(kv_dist="file:50%.csv"))),
    Situation("export-device-deep", 6, "kbench export of a policy whose device field nests 200 deep",
              "kbench export P.json --out sel.py", 2, r"^error: P\.json: device\.extra\.x \.\.\.: nested more than 32 "
              r"levels deep", _deep_device_policy, _nothing_written("sel.py")),
    Situation("prebuild-zeros-modules", 6, "prebuild --load: an archive honestly listing three modules of zeros",
              "kbench prebuild --load aot.tgz", 2,
              r"^error: aot\.tgz: aot/m1/m1\.so is not a shared library \(no ELF header\): nothing installed$",
              _aot_zeros, _aot_untouched, process=True),
    Situation("prebuild-other-machine", 6, "prebuild --load: a shared library of another machine",
              "kbench prebuild --load aot.tgz", 2,
              r"^error: aot\.tgz: aot/m1/m1\.so is a 64-bit library for \S+ \(ELF machine \d+\), this machine runs",
              _aot_other_machine, _aot_untouched, process=True),
]



# --- #55 trust round 6: one redaction, one line in and out, checks that compare something, bounded input ----------
ROUTES_REC = f"kbench recommend {ROUTES} --engine sglang --batch-size 8 --kv-len 4096"
SPEC = ("--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 4")
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
SGL = f"python -m sglang.launch_server --model-path {LLAMA} {SPEC}"
PROXY_PW, GH_PAT, URL_PW, USER_TOK = "pxy-Pw-6614", "ghp_Trust55PatSecret", "url-Pw-9921", "hfUserTok5501"
DRAFT_PW, JSON_PW, HF_TOK, API_KEY55 = "drf-Pw-3318", "json-Pw-7740", "hf_Tok55Secret", "sk-NotFlag55"
SWITCH_KEY = "sk-Switch55live"


def _line(line: str, file: bool = False):
    """--current's line (quoted for the table's command) as {line}; file=True: written to cur.sh (@cur.sh)."""
    def setup(w):
        w.vars["line"] = shlex.quote(line)
        if file:
            w.path("cur.sh").write_text(line)
    return setup


def _model_config_fifo(w):
    """A local model folder whose config.json is a named pipe no one writes (its open would wait for ever)."""
    w.path("model").mkdir()
    os.mkfifo(w.path("model/config.json"))
    _line(f"python -m sglang.launch_server --model-path model {SPEC}")(w)


def _set_words(w, out) -> list[str]:
    """The set: line's words as bash itself splits them."""
    line = next((ln for ln in out.splitlines() if ln.startswith("set: ")), None)
    assert line is not None, "no set: line"
    p = subprocess.run(["bash", "-c", 'f() { for a in "$@"; do printf "%s\\0" "$a"; done; }; f ' + line[5:]],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return p.stdout.split("\0")[:-1]


def _bash_passes(*words):
    """bash, splitting the printed set: line, passes each of these words whole."""
    def check(w, out):
        got = _set_words(w, out)
        for x in words:
            assert x in got, f"{x!r} not a word of the set: line as bash splits it: {got}"
        assert not any(g in ("-h", "--help", "--trust-remote-code") for g in got), got
    return check


def _no_secret_and(*secrets, also=None):
    def check(w, out):
        _no_secret(*secrets)(w, out)
        if also:
            also(w, out)
    return check


SGLANG_INFO55 = {"model_path": LLAMA, "tp_size": 1, "dp_size": 1, "version": "0.5.23", "max_running_requests": 48,
                 "speculative_algorithm": "EAGLE", "page_size": 64, "speculative_num_draft_tokens": 4,
                 "speculative_num_steps": 3, "speculative_eagle_topk": 1, "attention_backend": "flashinfer",
                 "disable_overlap_schedule": False, "internal_states": [{}]}


def _info_run(edit=None):
    """A server-bench run of the fake SGLang server whose /server_info holds a resolved EAGLE configuration (page
    64, flashinfer), its manifest's kept `server` entry then edited by edit(server)."""
    def setup(w):
        _server(w, info_body=json.dumps(SGLANG_INFO55))
        p = subprocess.run([sys.executable, "-m", "kbench.cli.main", "server-bench", "--url", w.vars["url"],
                            *shlex.split(SERVER), "--out", str(w.path("r"))], capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        run = next(w.path("r").iterdir())
        if edit:
            m = json.loads((run / "manifest.json").read_text())
            edit(m["server"])
            (run / "manifest.json").write_text(json.dumps(m))
        w.vars["run"] = str(run)
    return setup


def _deep_info_run(w):
    _info_run()(w)
    m = Path(w.vars["run"]) / "manifest.json"
    text = m.read_text()
    assert '"internal_states"' not in text or True
    m.write_text(text.replace('"server": {', '"server": {"deep": ' + DEEP + ", ", 1))


def _child_ended(w, out):
    pid = int(w.path("child.pid").read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"the switch command's child {pid} still runs after kbench ended")


def _switch_script(w):
    """A switch command that leaves a child (a shell waiting) and a grandchild (its sleep) running in its group;
    each switch (A, then B) adds their pids to child.pid and grandchild.pid."""
    _server(w)
    w.path("switch.sh").write_text("sh -c 'sleep 300 & echo $! >> grandchild.pid; wait' > /dev/null 2>&1 &\n"
                                   "echo $! >> child.pid\n")


def _children_ended(*names: str):
    """Every process whose pid the files list has ended within 10 s of kbench's end (else killed here, and the
    check fails)."""
    def check(w, out):
        pids = {f"{n}:{i}": int(x) for n in names for i, x in enumerate(w.path(n).read_text().split())}
        assert len(pids) >= 2 * len(names), pids
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            left = {n: pid for n, pid in pids.items() if _running(pid)}
            if not left:
                return
            time.sleep(0.1)
        for pid in left.values():
            os.kill(pid, signal.SIGKILL)
        raise AssertionError(f"still running 10 s after kbench ended: {left}")
    return check


def _running(pid: int) -> bool:
    """The process runs (a zombie, ended and waiting for its parent to read its status, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _old_switch_run(w):
    """A server-bench run whose manifest (as an older kbench wrote it) holds a --switch-command with an API key."""
    _server(w)
    p = subprocess.run([sys.executable, "-m", "kbench.cli.main", "server-bench", "--url", w.vars["url"],
                        *shlex.split(SERVER), "--out", str(w.path("r"))], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    run = next(w.path("r").iterdir())
    m = json.loads((run / "manifest.json").read_text())
    raw = f"./switch.sh {{side}} --api-key {SWITCH_KEY}"
    m["config"]["switch_command"] = raw
    m["command"] = [*m["command"], "--switch-command", raw]
    (run / "manifest.json").write_text(json.dumps(m))
    w.vars["run"] = str(run)


def _baseline_clean(w, out):
    assert SWITCH_KEY not in out and holds(w.path("bl"), SWITCH_KEY) == [], holds(w.path("bl"), SWITCH_KEY)


def _two_model_runs(w):
    """Two server-bench runs of one grid, the second of another model (--model)."""
    _server(w)
    for name, extra in (("a", []), ("b", ["--model", "other/model"])):
        p = subprocess.run([sys.executable, "-m", "kbench.cli.main", "server-bench", "--url", w.vars["url"],
                            *shlex.split(SERVER), *extra, "--out", str(w.path(name))], capture_output=True,
                           text=True, timeout=300)
        if p.returncode != 0:  # the fake serves fake/model only: relabel b's run instead
            p = subprocess.run([sys.executable, "-m", "kbench.cli.main", "server-bench", "--url", w.vars["url"],
                                *shlex.split(SERVER), "--out", str(w.path(name))], capture_output=True, text=True,
                               timeout=300)
            run = next(w.path(name).iterdir())
            set_manifest(run, model="other/model")
        w.vars[name] = str(next(w.path(name).iterdir()))


def _two_grid_runs(w, sizes=("1", "2")):
    _server(w)
    for name, bs in zip(("a", "b"), sizes):
        p = subprocess.run([sys.executable, "-m", "kbench.cli.main", "server-bench", "--url", w.vars["url"],
                            *shlex.split(SERVER.replace("--batch-size 1", f"--batch-size {bs}")), "--out",
                            str(w.path(name))], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        w.vars[name] = str(next(w.path(name).iterdir()))


def _medians_tenfold(w):
    """A candidate (the kernel run's copy as tables alone) whose rows.parquet medians are 10x, its samples not."""
    _parquet_run(lambda d: d.assign(median_us=d["median_us"] * 10))(w)


def _long_device(w):
    """Baseline and candidate (the kernel runs) whose manifest names the GPU with 100 KB of digits (rich's
    highlighter takes 68 s on 20 KB of them, quadratic); the committed source for recommend likewise."""
    name = "NVIDIA H200 " + "1" * 100_000
    for n, src in (("base", w.shared.kernel_run), ("cand", w.shared.kernel_run2)):
        _device_named(w.copy(src, n), name)
        w.vars[n] = str(w.path(n))
    src = w.copy(ROOT / "results/baselines/h200-draft-extend-kv4096", "src")
    _device_named(src, name)
    w.path("w.jsonl").write_text('{"batch_size": 16, "q_len": 4, "kv_len": 4096, "weight": 1}\n')
    w.vars["src"] = str(src)


AA = "python {aa} {ra} {rb}"


def _aa(b: str | None = None):
    def setup(w):
        w.vars.update(aa=str(ROOT / "benchmarks/recommend_aa.py"),
                      ra=str(ROOT / "results/baselines/h100-engine-routes-page1-64-kv4096"),
                      rb=str(ROOT / "results/baselines" / (b or "h100-engine-routes-page1-64-kv4096-r2")))
    return setup


def _big_file(size: int, name: str = "cur.sh"):
    def setup(w):
        with open(w.path(name), "wb") as f:
            f.truncate(size)
    return setup


ROUND6 = [
    # 3: one redaction
    Situation("current-secret-env-url-forms", 1, "--current with HTTPS_PROXY=http://me:PW@proxy, GITHUB_PAT=..., a "
              "password in --model-path's URL and in the draft's: set: line and rec.md",
              ROUTES_REC + " --current {line} --markdown rec.md", 0, r"^set: .*GITHUB_PAT='\*\*\*'",
              _line(f"HTTPS_PROXY=http://me:{PROXY_PW}@proxy:3128 GITHUB_PAT={GH_PAT} python -m sglang.launch_server "
                    f"--model-path https://user:{URL_PW}@hub.example/{LLAMA} {SPEC} --speculative-draft-model-path "
                    f"https://u:{DRAFT_PW}@hub.example/draft --page-size 64 --attention-backend flashinfer"),
              _no_secret(PROXY_PW, GH_PAT, URL_PW, DRAFT_PW)),
    Situation("current-secret-user-token-json", 1, "--current whose --model-path URL carries a token as its user "
              "(https://TOKEN@host): --json", ROUTES_REC + " --current {line} --json", 0, r'"command"',
              _line(f"python -m sglang.launch_server --model-path https://{USER_TOK}@hub.example/{LLAMA} {SPEC}"),
              _no_secret(USER_TOK)),
    Situation("current-secret-vllm-json-escaped", 1, "vLLM --current whose --speculative-config JSON holds a URL "
              "password with escaped slashes (https:\\/\\/u:PW@h)",
              f"kbench recommend {ROUTES} --engine vllm --batch-size 8 --kv-len 4096 --current {{line}}", 0,
              r"^note: the secrets of your line \(--speculative-config\) are printed as \*\*\*",
              _line(f"vllm serve {LLAMA} --speculative-config "
                                         f"'{{\"method\": \"eagle\", \"model\": \"https:\\/\\/u:{JSON_PW}@h\\/d\", "
                                         f"\"num_speculative_tokens\": 3}}' --block-size 64"),
              _no_secret(JSON_PW)),
    Situation("current-secret-sudo-error", 1, "--current 'sudo HF_TOKEN=... python -m sglang...': the error line",
              ROUTES_REC + " --current {line}", 2, r"^error: --current: `sudo` wraps the server command",
              _line(f"sudo HF_TOKEN={HF_TOK} {SGL}"), _no_secret(HF_TOK)),
    Situation("current-model-config-fifo", 6, "--current whose --model-path folder's config.json is a named pipe "
              "(FIFO) no one writes", ROUTES_REC + " --current {line}", 2,
              r"^error: --current: model/config\.json: a named pipe \(FIFO\), not a regular file$", _model_config_fifo,
              process=True),
    Situation("current-secret-export-error", 1, "--current 'export HF_TOKEN=...; python -m sglang...': the error",
              ROUTES_REC + " --current {line}", 2, r"^error: --current: a second command after `;`",
              _line(f"export HF_TOKEN={HF_TOK}; {SGL}"), _no_secret(HF_TOK)),
    Situation("current-secret-not-a-flag", 1, "--current '... --api-key sk-... extra': the 'not a flag' error",
              ROUTES_REC + " --current {line}", 2, r"^error: --current: 'extra' is not a flag \(after \*\*\*\)",
              _line(f"{SGL} --api-key {API_KEY55} extra"), _no_secret(API_KEY55)),
    Situation("current-run-server-info-secret", 1, "--current RUN whose server_info model_path is a URL with a "
              "password: rec.md", ROUTES_REC + " --current {run} --markdown rec.md", 0, r"^wrote rec\.md",
              _info_run(lambda s: s.update(model_path=f"https://bob:{URL_PW}@hub.example/{LLAMA}")),
              lambda w, out: assert_clean(out, w.path("rec.md"), URL_PW)),
    Situation("switch-command-api-key", 1, "server-bench --switch-command '... --api-key sk-...': printed on each "
              "switch, stored in both manifests",
              f"kbench server-bench --url {{url}} {SERVER} --repeat 7 --switch-command 'true {{{{side}}}} --api-key "
              f"{SWITCH_KEY}' --out r", 0, r"^judge it \(PASS, FAIL or INCONCLUSIVE\) with: kbench gate", lambda w: _server(w), _no_secret(SWITCH_KEY)),
    Situation("baseline-old-switch-secret", 1, "a server baseline of a run whose manifest (an older kbench's) holds a "
              "--switch-command with an API key", "kbench baseline {run} --name b --out bl", 0, r"^baseline bl/b written",
              _old_switch_run, _baseline_clean),
    # 4: one line in, one line out
    Situation("current-hash-in-word", 4, "--current whose model path holds '#' inside a word (bash: no comment), at "
              "page 64 on flashinfer", ROUTES_REC + " --current {line}", 0, r"^you run: flashinfer .*page 64",
              _line(f"python -m sglang.launch_server --model-path {LLAMA}#v2 {SPEC} --page-size 64 "
                    "--attention-backend flashinfer"), _bash_passes(f"{LLAMA}#v2", "64")),
    Situation("current-two-lines", 4, "--current @FILE holding two commands (bash runs the first alone)",
              ROUTES_REC + " --current @cur.sh", 2, r"^error: --current: several commands, one a line",
              _line(f"{SGL}\n{SGL} --page-size 64 --attention-backend flashinfer\n", file=True)),
    Situation("current-tab-in-value", 4, "--current whose model path holds a tab", ROUTES_REC + " --current {line}",
              2, r"^error: --current: a tab inside a quoted value",
              _line(f"python -m sglang.launch_server --model-path '{LLAMA}\tv2' {SPEC}")),
    Situation("current-nul", 4, "--current @FILE holding a NUL byte in a value", ROUTES_REC + " --current @cur.sh",
              2, r"^error: --current: a NUL byte", _line(f"python -m sglang.launch_server --model-path {LLAMA}\0x {SPEC}", file=True)),
    *[Situation(f"current-shell-{name}", 4, f"--current holding {what}", ROUTES_REC + " --current {line}", 2,
                line, _line(text))
      for name, what, text, line in (
          ("semicolon", "two commands joined by ;", f"{SGL}; {SGL}", r"^error: --current: a second command after `;`"),
          ("and", "two commands joined by &&", f"cd /srv && {SGL}", r"^error: --current: a second command after `&&`"),
          ("pipe", "a pipe", f"{SGL} | tee log", r"^error: --current: a pipe `\|`"),
          ("redirect", "a redirection", f"{SGL} > log 2>&1", r"^error: --current: a redirection `>`"),
          ("variable", "a $VAR", f"python -m sglang.launch_server --model-path $MODEL {SPEC}",
           r"^error: --current: a shell expansion \(\$M\.\.\.\)"),
          ("export", "export VAR=1 alone", "export SGLANG_X=1", r"^error: --current: `export` is a shell command"),
          ("glob", "an unquoted *", f"python -m sglang.launch_server --model-path /models/* {SPEC}",
           r"^error: --current: an unquoted \*"))],
    Situation("current-draft-path-dash-h", 4, "--current with --speculative-draft-model-path=-h (a path that "
              "starts with -): the set: line", ROUTES_REC + " --current {line}", 0, r"^set: ",
              _line(f"{SGL} --speculative-draft-model-path=-h --page-size 64 --attention-backend flashinfer"),
              _bash_passes("--speculative-draft-model-path=-h")),
    Situation("current-model-trust-remote-code", 4, "--current with --model-path=--trust-remote-code",
              ROUTES_REC + " --model llama3-8b --current {line}", 0, r"^set: ",
              _line(f"python -m sglang.launch_server --model-path=--trust-remote-code {SPEC} --page-size 64 "
                    "--attention-backend flashinfer"), _bash_passes("--model-path=--trust-remote-code")),
    # 5: checks that prove they compared something
    *[Situation(f"recommend-aa-{name}", 5, f"benchmarks/recommend_aa.py on runs {what}", AA + extra, 2, line,
                _aa(b)) for name, what, b, extra, line in (
        ("other-gpu", "of two GPU models", "h200-draft-extend-kv4096", "",
         r"^error: the runs are of two GPU models"),
        ("no-page", "at a page neither measured", None, " --page-size 7", r"^error: the runs share no workload"),
        ("no-kv", "at a KV length far beyond both", None, " --kv-len 999999", r"^error: the runs share no workload"),
        ("mla", "of another model (MLA)", "h100-deepseek-mtp-kv4096-32768", "", r"^error: the runs share no workload"),
        ("no-routes", "of kernels without engine routes", "h100-fa3-draft-extend-kv4096", "",
         r"^error: the runs share no workload"))],
    Situation("server-baseline-other-model", 5, "a server baseline pooled from runs of two models",
              "kbench baseline {a} {b} --name s --out bl", 2, r"^error: .*model", _two_model_runs,
              _nothing_written("bl")),
    Situation("server-baseline-model-not-recorded", 5, "a server baseline pooled from two runs, the second's "
              "manifest without a model: the error says so, not 'model None'",
              "kbench baseline {a} {b} --name s --out bl", 2,
              r"^error: refusing to pool .*different model \('fake/model' vs not recorded\)",
              lambda w: (_two_grid_runs(w, ("1", "1")), set_manifest(Path(w.vars["b"]), model=None)),
              _nothing_written("bl")),
    Situation("server-baseline-other-grid", 5, "a server baseline pooled from runs of two grids (batch 1 and 2)",
              "kbench baseline {a} {b} --name s --out bl", 2, r"^error: .*(grid|cases)", _two_grid_runs,
              _nothing_written("bl")),
    Situation("gate-medians-tenfold", 5, "a candidate Parquet whose medians are 10x while its samples did not move",
              "kbench gate --baseline {base} --candidate {cand}", 2,
              r"^error: candidate: .*median_us .*disagrees with its own samples", _medians_tenfold),
    # 6: bounded input
    Situation("current-at-fifo", 6, "--current @FIFO", ROUTES_REC + " --current @cur.sh", 2,
              r"^error: --current @cur\.sh: a named pipe \(FIFO\), not a regular file",
              lambda w: os.mkfifo(w.path("cur.sh")), process=True),
    Situation("current-at-dev-zero", 6, "--current @/dev/zero", ROUTES_REC + " --current @/dev/zero", 2,
              r"^error: --current @/dev/zero: a character device, not a regular file", process=True),
    Situation("current-at-2gb", 6, "--current @FILE of 2 GB", ROUTES_REC + " --current @cur.sh", 2,
              r"^error: --current @cur\.sh: 2048 MiB, more than the 64 KiB", _big_file(2 << 30), process=True),
    Situation("current-at-4mb-line", 6, "--current @FILE of one 4 MB line", ROUTES_REC + " --current @cur.sh", 2,
              r"^error: --current @cur\.sh: 4 MiB, more than the 64 KiB",
              lambda w: w.path("cur.sh").write_text(SGL + " --x " + "a" * (4 << 20) + "\n"), process=True),
    *[Situation(f"server-info-{name}", 6, f"--current RUN whose server info's {key} is {what}",
                ROUTES_REC + " --current {run}", 2,
                rf"^error: --current .*: its server info's {key} is {shown}, not", _info_run(
                    lambda s, key=key, v=v: s.update({key: v})))
      for name, key, v, what, shown in (
          ("page-text", "page_size", "sixty-four", "the text 'sixty-four'", r"'sixty-four'"),
          ("page-list", "page_size", [64], "a list", "a list of 1"),
          ("page-dict", "page_size", {"v": 64}, "an object", "an object of 1 keys"),
          ("topk-nan", "speculative_eagle_topk", float("nan"), "NaN", "NaN"),
          ("cap-inf", "max_running_requests", float("inf"), "infinity", "infinity"),
          ("overlap-text", "disable_overlap_schedule", "maybe", "the text 'maybe'", "'maybe'"))],
    Situation("server-info-false-text", 6, "--current RUN whose server info's disable_overlap_schedule is the text "
              "\"false\" (overlap on)", ROUTES_REC + " --current {run}", 0,
              r"^you run: .*host work overlapped", _info_run(lambda s: s.update(disable_overlap_schedule="false"))),
    Situation("server-info-huge-text", 6, "--current RUN whose server info's attention_backend is 1 MB of text",
              ROUTES_REC + " --current {run}", 2, r"^error: --current .*: its server info's attention_backend is "
              r"'f+\.\.\.' \(1,048,576 characters\)", _info_run(lambda s: s.update(attention_backend="f" * (1 << 20))),
              process=True),
    Situation("server-info-deep", 6, "--current RUN whose server info holds a value nested 100,000 deep",
              ROUTES_REC + " --current {run}", 2, r"^error: .*manifest\.json.*nested too deeply", _deep_info_run,
              process=True),
    Situation("recommend-device-100kb", 6, "recommend from a source whose GPU name is 100 KB of digits",
              "kbench recommend {src} --engine sglang --workload w.jsonl", 0, r"SM90 \(Hopper\): 1 batch kind",
              _long_device, process=True),
    Situation("gate-device-100kb", 6, "gate of runs whose GPU name is 100 KB of digits", "kbench gate --baseline {base} "
              "--candidate {cand}", 0, r"^PASS", _long_device, process=True),
    Situation("switch-command-child-ended", 6, "server-bench --switch-command whose command leaves a child running",
              f"kbench server-bench --url {{url}} {SERVER} --repeat 7 --switch-command "
              "\"sh -c 'sleep 300 & echo $! > child.pid'\" --out r", 0, r"^judge it \(PASS, FAIL or INCONCLUSIVE\) with: kbench gate",
              lambda w: _server(w), _child_ended, process=True),
    Situation("switch-command-children-kill9", 6, "server-bench --switch-command whose command leaves a child and a "
              "grandchild running; kbench killed (kill -9) after round 1",
              f"kbench server-bench --url {{url}} {SERVER} --repeat 7 --switch-command 'sh switch.sh' --out r", -9,
              r"^round 1/7 bs1-in4-out2: ", _switch_script, _children_ended("child.pid", "grandchild.pid"),
              signal_at=("kbench.server.interleave:_round_finished#1", "after", signal.SIGKILL)),
    *[Situation(f"redirect-unparsable-{name}", 6, f"the server redirects to {what}",
                f"kbench server-bench --url {{url}} {SERVER} --out r", 1,
                r"^error: cannot use the server: GET .* redirected( \(307\))? to (a Location that is no URL|another "
                r"origin)",
                lambda w, loc=loc: (_server(w), setattr(w.shared.server.faults, "redirect_to", loc)))
      for name, what, loc in (("two-ports", "http://h:1:2/ (two ports)", "http://h:1:2"),
                              ("ipv6", "http://[::1/ (a bad IPv6 literal)", "http://[::1"))],
]


def assert_clean(out: str, md: Path, secret: str) -> None:
    assert secret not in out, f"{secret} printed"
    assert secret not in md.read_text(), f"{secret} in {md.name}"


# --- #55 what kbench removes is its own; ELF checks that name the field ------------------------------------------
USERS_FOLDERS = (".kb-new-results", ".kb-old-backup")


def _users_kb_folders(where: str):
    """The user's own folders whose names start like kbench's hidden siblings, beside an output (a minute old,
    holding the user's files), and, for a baseline, the run it is made from."""
    def setup(w):
        for name in USERS_FOLDERS:
            d = w.path(where) / name
            d.mkdir(parents=True)
            (d / "notes.txt").write_text(f"mine: {name}\n")
            os.utime(d, (time.time() - 60, time.time() - 60))
        w.vars.update(run=str(w.shared.kernel_run), new=str(w.shared.kernel_run2))
    return setup


def _users_kb_folders_kept(where: str):
    def check(w, out):
        for name in USERS_FOLDERS:
            f = w.path(where) / name / "notes.txt"
            assert f.is_file() and f.read_text() == f"mine: {name}\n", f"{where}/{name} was removed or changed"
    return check


def _aot_real_lib(edit=None, cut: int | None = None):
    """An archive of one real shared library of this machine (this Python's smallest extension module), edited
    (``edit(bytes) -> bytes``) or cut to ``cut`` bytes as the manifest lists it."""
    from elf_samples import real_library

    def setup(w):
        lib = real_library()
        lib = edit(lib) if edit else lib
        _aot_archive(w, m1=lib[:cut] if cut else lib)
    return setup


def _aot_pie_executable(w):
    """An archive whose module is this Python's own executable (a PIE); skipped where it is none."""
    import pytest
    from elf_samples import pie_executable

    exe = pie_executable()
    if exe is None:
        pytest.skip("this Python's executable is not a position-independent executable with DF_1_PIE")
    _aot_archive(w, m1=exe)


def _aot_real_modules(dot_slash: bool):
    """A hand-made archive of three real libraries (two of this Python's extension modules, System V, and one of
    GNU/Linux OS ABI this process has loaded, as C++ libraries are), packed with the tar command from a folder
    (regular files; `./aot/...` names with dot_slash)."""
    from elf_samples import gnu_abi_library, real_library

    def setup(w):
        mods = {"m1": real_library(0), "m2": real_library(1)}
        gnu = gnu_abi_library()
        if gnu is not None:
            mods["m3"] = gnu
        _aot_archive(w, **mods)  # the fake FlashInfer and a manifest; the archive is made again below
        stage = w.path("stage")
        with __import__("tarfile").open(w.path("aot.tgz")) as tar:
            manifest = tar.extractfile("aot/KBENCH_PREBUILD.json").read()
        w.path("aot.tgz").unlink()
        for name, data in {"KBENCH_PREBUILD.json": manifest, **{f"{n}/{n}.so": d for n, d in mods.items()}}.items():
            (stage / "aot" / name).parent.mkdir(parents=True, exist_ok=True)
            (stage / "aot" / name).write_bytes(data)
        subprocess.run(["tar", "czf", str(w.path("aot.tgz")), "./aot" if dot_slash else "aot"], cwd=stage,
                       check=True)
        shutil.rmtree(stage)
        w.vars["mods"] = json.dumps({n: hashlib.sha256(d).hexdigest() for n, d in mods.items()})
    return setup


_BACKGROUND: dict[str, subprocess.Popen] = {}


def _aot_two_at_once(w):
    """The same archive loaded by another `kbench prebuild --load` at the same moment."""
    _aot_real_modules(dot_slash=False)(w)
    _BACKGROUND[str(w.root)] = subprocess.Popen(
        [sys.executable, "-m", "kbench.cli.main", "prebuild", "--load", "aot.tgz"], cwd=w.root,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **w.env})


def _aot_installed(w, out):
    """Every module is installed whole (its sha256 the library's), nothing else written beside them."""
    p = _BACKGROUND.pop(str(w.root), None)
    if p is not None:
        other = p.communicate(timeout=120)[0]
        assert p.returncode == 0, f"the other --load: exit {p.returncode}: {other[-300:]}"
    aot = w.path("fi/flashinfer/data/aot")
    mods = json.loads(w.vars["mods"])
    got = {f.parent.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in aot.rglob("*") if f.is_file()}
    assert got == mods, sorted(got)
    assert not leftovers(w.path("fi")), leftovers(w.path("fi"))


def _elf_fail(what: str) -> str:
    return rf"^error: aot\.tgz: aot/m1/m1\.so {what}.*: nothing installed$"


OWN_AND_ELF = [
    Situation("report-users-kb-folders", 2, "report beside the user's own folders .kb-new-results and "
              ".kb-old-backup (a minute old, files inside)", "kbench report {new} --out results/rep", 0,
              r"^wrote \d+ files", _users_kb_folders("results"), _users_kb_folders_kept("results")),
    Situation("baseline-users-kb-folders", 2, "baseline beside the user's own folders .kb-new-results and "
              ".kb-old-backup", "kbench baseline {run} --name b --out bl", 0, r"^baseline bl/b written",
              _users_kb_folders("bl"), _users_kb_folders_kept("bl")),
    Situation("prebuild-other-byte-order", 6, "prebuild --load: a real library whose header is written in the "
              "other byte order", "kbench prebuild --load aot.tgz", 2,
              _elf_fail(r"is (big|little)-endian \(ELF data \d\), this Python is (little|big)-endian \(ELF data "
                        r"\d\)"), _aot_real_lib(lambda b: __import__("elf_samples").byte_swapped(b)), _aot_untouched,
              process=True),
    Situation("prebuild-other-os-abi", 6, "prebuild --load: a real library marked for FreeBSD (OS ABI 9)",
              "kbench prebuild --load aot.tgz", 2,
              _elf_fail(r"is built for OS ABI FreeBSD \(9\) \(e_ident\[EI_OSABI\]\), this Python's loader takes "
                        r"System V \(0\) or GNU/Linux \(3\)"),
              _aot_real_lib(lambda b: __import__("elf_samples").edited(b, {7: 9})), _aot_untouched, process=True),
    Situation("prebuild-elf-version", 6, "prebuild --load: a real library of ELF version 2",
              "kbench prebuild --load aot.tgz", 2,
              _elf_fail(r"has ELF version 2 \(e_ident\[EI_VERSION\]\), the loader reads version 1"),
              _aot_real_lib(lambda b: __import__("elf_samples").edited(b, {6: 2})), _aot_untouched, process=True),
    Situation("prebuild-truncated", 6, "prebuild --load: a real library cut to 4 KiB (its manifest lists 4 KiB)",
              "kbench prebuild --load aot.tgz", 2,
              _elf_fail(r"is cut short: its section header table ends at byte [\d,]+, the file has 4,096 bytes "
                        r"\(a truncated copy\)"), _aot_real_lib(cut=4096), _aot_untouched, process=True),
    Situation("prebuild-non-pie-executable", 6, "prebuild --load: a library marked as an executable that is not "
              "position-independent (ET_EXEC)", "kbench prebuild --load aot.tgz", 2,
              _elf_fail(r"is an executable that is not position-independent \(ET_EXEC, e_type 2\), not a shared "
                        r"object \(ET_DYN\)"),
              _aot_real_lib(lambda b: __import__("elf_samples").edited(b, e_type=2)), _aot_untouched, process=True),
    Situation("prebuild-pie-executable", 6, "prebuild --load: a module that is a position-independent executable "
              "(this Python's own, ET_DYN like a library; glibc refuses to dlopen it)",
              "kbench prebuild --load aot.tgz", 2,
              _elf_fail(r"is a position-independent executable \(DT_FLAGS_1 has DF_1_PIE\), not a shared object a "
                        r"program loads"), _aot_pie_executable, _aot_untouched, process=True),
    Situation("prebuild-real-modules-dot-slash", 6, "prebuild --load: real libraries packed by hand with "
              "`tar czf aot.tgz ./aot` (regular files, ./ names)", "kbench prebuild --load aot.tgz", 0,
              r"^\d modules installed, 0 already there", _aot_real_modules(dot_slash=True), _aot_installed,
              process=True),
    Situation("prebuild-real-modules-two-at-once", 6, "prebuild --load: real libraries packed with tar, loaded by "
              "two kbench at the same moment", "kbench prebuild --load aot.tgz", 0,
              r"^\d modules installed, \d already there", _aot_two_at_once, _aot_installed, process=True),
]


SITUATIONS: list[Situation] = [
    # 1 secrets ------------------------------------------------------------------------------------------------
    Situation("password-url", 1, "--url holds user:password", f"kbench server-bench --url {{pw_url}} {SERVER} --out r",
              0, r"^rows: ", lambda w: _server(w), _no_secret(SECRET_PW)),
    Situation("password-url-down", 1, "--url holds a password, the server is down",
              f"kbench server-bench --url http://bob:{SECRET_PW}@127.0.0.1:9 {SERVER} --out r", 1,
              r"^error: cannot use the server: .*127\.0\.0\.1:9.*connection refused", None, _no_secret(SECRET_PW)),
    Situation("password-url-resume", 1, "resume a run whose --url had a password, without it",
              "kbench server-bench --resume {run}", 2,
              r"^error: --resume .*the run sent HTTP Basic auth \(user .bob., password \*\*\*\), which kbench does not keep",
              _pw_run, _no_secret(SECRET_PW)),
    Situation("api-key", 1, "--api-key to a server that requires it (SGLang/vLLM --api-key)",
              f"kbench server-bench --url {{url}} --api-key {SECRET_KEY} {SERVER} --out r", 0, r"^rows: ",
              lambda w: _server(w, api_key=SECRET_KEY), _no_secret(SECRET_KEY)),
    Situation("api-key-env", 1, "the API key in $KBENCH_API_KEY", f"kbench server-bench --url {{url}} {SERVER} --out r",
              0, r"^rows: ", lambda w: _server(w, api_key=SECRET_KEY), _no_secret(SECRET_KEY),
              env={"KBENCH_API_KEY": SECRET_KEY}),
    Situation("api-key-missing", 1, "no key for a server that requires one",
              f"kbench server-bench --url {{url}} {SERVER} --out r", 1,
              r"^error: cannot use the server: GET .* -> 401 .*without credentials.*--api-key-file",
              lambda w: _server(w, api_key=SECRET_KEY)),
    Situation("api-key-echoed", 1, "a wrong key, and a 401 page that echoes it",
              f"kbench server-bench --url {{url}} --api-key {SECRET_KEY}-wrong {SERVER} --out r", 1,
              r"^error: cannot use the server: .*401 .*Bearer \*\*\*.*with credentials",
              lambda w: _server(w, api_key="another-key"), _no_secret(SECRET_KEY)),
    Situation("api-key-file-fifo", 1, "--api-key-file is a FIFO",
              f"kbench server-bench --url {{url}} --api-key-file key.txt {SERVER} --out r", 2,
              r"^error: --api-key-file key\.txt: a named pipe \(FIFO\), not a regular file", _key_file_fifo,
              process=True),
    Situation("api-key-twice", 1, "--api-key and --api-key-file both",
              f"kbench server-bench --url {{url}} --api-key k1 --api-key-file key.txt {SERVER} --out r", 2,
              r"^error: --api-key and --api-key-file: give one", lambda w: _server(w)),
    Situation("header", 1, "--header for a gateway's auth",
              f"kbench server-bench --url {{url}} --header 'X-Gw: {SECRET_HDR}' {SERVER} --out r", 0, r"^rows: ",
              lambda w: _server(w, required_headers={"X-Gw": SECRET_HDR}), _no_secret(SECRET_HDR)),
    Situation("header-malformed", 1, "--header without a colon",
              f"kbench server-bench --url {{url}} --header 'X-Gw {SECRET_HDR}' {SERVER} --out r", 2,
              r"^error: --header: expected 'Name: value'", lambda w: _server(w), _no_secret(SECRET_HDR)),
    Situation("header-framing", 1, "--header sets Host", f"kbench server-bench --url {{url}} --header 'Host: evil' "
              f"{SERVER} --out r", 2, r"^error: --header: header Host: set by the HTTP client", lambda w: _server(w)),
    Situation("redirect-other-origin", 1, "the server redirects to another host",
              f"kbench server-bench --url {{url}} {SERVER} --out r", 1,
              r"^error: cannot use the server: GET .* redirected \(307\) to another origin, http://localhost:\d+/r/",
              _redirect(False), _no_request_to_other),
    Situation("redirect-same-origin", 1, "the server redirects within itself (a proxy's prefix)",
              f"kbench server-bench --url {{url}} {SERVER} --out r", 0, r"^rows: ", _redirect(True)),
    # 2 outputs half replaced ------------------------------------------------------------------------------------
    Situation("baseline-sigterm-mid-write", 2, "baseline --force stopped by SIGTERM after the new rows.parquet",
              "kbench baseline {new} --name b --out {bl} --force", 143, r"^error: stopped by SIGTERM",
              _baseline_pair, _baseline_old_whole, signal_at=("kbench.gate.baselines:write_tables", "after",
                                                              signal.SIGTERM)),
    Situation("baseline-ctrl-c-mid-write", 2, "baseline --force stopped by Ctrl-C after the new rows.parquet",
              "kbench baseline {new} --name b --out {bl} --force", 130, r"^error: stopped by SIGINT",
              _baseline_pair, _baseline_old_whole, signal_at=("kbench.gate.baselines:write_tables", "after",
                                                              signal.SIGINT)),
    Situation("baseline-sigterm-in-swap", 2, "baseline --force: SIGTERM arrives during the swap",
              "kbench baseline {new} --name b --out {bl} --force", 143, r"^error: stopped by SIGTERM",
              _baseline_pair, _baseline_new_whole, signal_at=("kbench.runs.atomic:_exchange", "before",
                                                              signal.SIGTERM)),
    Situation("report-sigterm-mid-write", 2, "report --out over a report, SIGTERM after the new plots",
              "kbench report {new} --out {rep}", 143, r"^error: stopped by SIGTERM", _report_pair, _report_old_whole,
              signal_at=("kbench.report.build:save_policy", "before", signal.SIGTERM)),
    Situation("report-ctrl-c-mid-write", 2, "report --out over a report, Ctrl-C after the new plots",
              "kbench report {new} --out {rep}", 130, r"^error: stopped by SIGINT", _report_pair, _report_old_whole,
              signal_at=("kbench.report.build:save_policy", "before", signal.SIGINT)),
    Situation("gate-mixed-baseline", 2, "gate on a baseline whose rows.parquet is another baseline's",
              "kbench gate --baseline {base} --candidate {new}", 2,
              r"^error: baseline: .*rows\.parquet does not match what was written with it", _mixed_baseline),
    Situation("select-mixed-report", 2, "select on a policy.json that is not the one its report wrote",
              "kbench select --policy {rep}/policy.json --batch-size 4 --q-len 4 --kv-len 4096", 2,
              r"^error: .*policy\.json does not match what was written with it", _mixed_report),
    Situation("report-out-runs-folder", 2, "report --out a folder of runs (it would be replaced whole)",
              "kbench report {run} --out {runs}", 2, r"^error: --out .*holds 'kernel-run'.*a report does not write",
              _runs_folder, _runs_untouched),
    Situation("gate-json-through-link", 2, "gate --json latest.json, a link to gate-1.json",
              "kbench gate --baseline {run} --candidate {run} --json latest.json", 0, r"^PASS: ", _named_link,
              _link_kept_file_written),
    Situation("gate-markdown-dev-null", 2, "gate --markdown to a link to /dev/null (as root it replaced the device)",
              "kbench gate --baseline {run} --candidate {run} --markdown sink", 0, r"^PASS: ", _dev_null_link,
              _dev_null_kept),
    Situation("export-over-its-policy", 2, "export P.json --out P.json (its own input)",
              "kbench export {rep}/policy.json --out {rep}/policy.json", 2,
              r"^error: --out .*policy\.json: that is the input", _exported_report, _policy_unchanged),
    Situation("gate-markdown-over-rows", 2, "gate --markdown RUN/rows.csv (a file of its input)",
              "kbench gate --baseline {run} --candidate {run} --markdown {run}/rows.csv", 2,
              r"^error: --markdown .*rows\.csv: that is .*rows\.csv, a file of the input", _named_run, _run_unchanged),
    Situation("prebuild-load-dotdot", 2, "prebuild --load: an archive whose module is named '..'",
              "kbench prebuild --load aot.tgz", 2, r"^error: aot\.tgz: module name '\.\.' is not a plain name",
              _aot_dotdot, _aot_untouched, process=True),
    *[Situation(f"{who}-stdout-{how}", 2, f"{what}: {shown}", cmd, code, line, setup, stdout=how)
      for who, what, cmd, setup in (
          ("select", "kbench select", "kbench select --policy {rep}/policy.json --batch-size 16 --q-len 4 --kv-len 4096",
           _exported_report),
          ("selector", "the exported selector (python sel.py)", "python sel.py 16 4 4096", _exported_selector))
      for how, shown, code, line in (
          ("head-c0", "stdout piped into head -c0 (a reader that takes nothing)", 0, r"^$"),
          ("full", "stdout is /dev/full", 2, r"^error: cannot write the answer to standard output: No space left"),
          ("closed", "stdout closed (>&-)", 2, r"^error: cannot write the answer: standard output is closed$"))],
    Situation("report-out-long-name", 2, "report --out a folder of 250 characters (the file system takes 255)",
              f"kbench report {{run}} --out {LONG_FOLDER}", 0, r"^wrote \d+ files", _named_run,
              _written(LONG_FOLDER, "policy.json")),
    Situation("export-out-long-name", 2, "export --out a file of 255 characters",
              f"kbench export {{rep}}/policy.json --out {LONG_FILE}", 0, r"^wrote s+\.py", _exported_report,
              _written(LONG_FILE)),
    Situation("merge-out-in-its-input", 2, "merge --out one of the runs it merges",
              "kbench merge {s1} {s2} --out {s1}", 2, r"^error: --out .*: inside the input run .*would nest in its own",
              _shard_runs, _shard_untouched),
    Situation("gate-two-outputs-one-file", 2, "gate --markdown o.md --json o.md",
              "kbench gate --baseline {run} --candidate {run} --markdown o.md --json o.md", 2,
              r"^error: --json o\.md and --markdown o\.md name the same file", _named_run, _nothing_written("o.md")),
    # 3 links in a run folder -----------------------------------------------------------------------------------
    Situation("resume-while-resumed", 3, "two sweep --resume of one run at once: the other takes the run after this "
              "one checked it", "kbench sweep --resume {run}", 2,
              r"^error: .*another kbench process \(pid \d+\) is writing this run", _interrupted_cpu_run,
              _lock_released_and_run_kept, signal_at=("kbench.cli.sweep_cmd:Sweep", "after", 0), at_pause=_resume_running),
    Situation("lock-symlink", 3, ".kbench.lock is a symbolic link to a file outside the run",
              "kbench sweep --resume {run}", 2, r"^error: .*\.kbench\.lock: a symbolic link", _lock_symlink,
              _untouched()),
    Situation("lock-hardlink", 3, ".kbench.lock is a hard link to a file outside the run",
              "kbench sweep --resume {run}", 2, r"^error: .*\.kbench\.lock: a hard link", _lock_hardlink, _untouched()),
    Situation("journal-symlink", 3, "rows.jsonl is a symbolic link to a file outside the run",
              "kbench sweep --resume {run}", 2, r"^error: .*rows\.jsonl: a symbolic link", _journal_symlink,
              lambda w, out: _untouched(content=w.vars["outside_text"])(w, out)),
    Situation("reserve-symlink", 3, ".kbench.reserve is a symbolic link to a file outside the run",
              "kbench sweep --resume {run}", 2, r"^error: .*\.kbench\.reserve: a symbolic link", _reserve_symlink,
              _untouched()),
    # 4 measurements lost or invented ----------------------------------------------------------------------------
    Situation("lost-line-report", 4, "rows.jsonl lost its last line (rows.parquet still has it): report",
              "kbench report {run} --out rep", 2, r"^error: .*rows\.jsonl: \d+ row\(s\), but the run recorded \d+ "
              r".*kbench sweep --resume", _lost_last_line),
    Situation("lost-line-merge", 4, "rows.jsonl lost its last line: merge", "kbench merge {run} {run} --out m", 2,
              r"^error: .*1 row\(s\) lost from the journal", _lost_last_line),
    Situation("lost-line-resume", 4, "rows.jsonl lost its last line: resume", "kbench sweep --resume {run}", 0,
              r"^rows: \d+ .*timed 0 this call", _lost_last_line, _restored),
    Situation("old-journal-report", 4, "a journal an older kbench started (no newer fields), this one finished",
              "kbench report {run} --out rep", 0, r"^wrote \d+ files", _old_journal),
    Situation("old-journal-gate", 4, "that run gated against a baseline of its older rows",
              "kbench gate --baseline {base} --candidate {run}", 0, r"^Rows: \d+ pass, \d+ new", _old_journal),
    Situation("bad-axis-value", 4, "a journal row with window_left 'wide'", "kbench report {run} --out rep", 2,
              r"^error: .*rows\.jsonl: line 2: window_left is 'wide', expected an integer", _bad_axis_value),
    Situation("other-device-rows", 4, "rows of another GPU appended to the journal", "kbench sweep --resume {run}",
              2, r"^error: .*row \d+ was measured on 'NVIDIA H100 80GB HBM3'.*--force", _other_device_rows),
    Situation("cut-csv-report", 4, "rows.csv cut short (39 of 224 rows), no rows.parquet: report",
              "kbench report {run} --out rep", 2, r"^error: .*cut/rows\.csv: 39 row\(s\), but the run recorded 224 "
              r"\(manifest\.json baseline\.num_rows\): the file was cut short or edited", _cut_csv,
              _nothing_written("rep")),
    Situation("cut-csv-gate", 4, "that baseline in a gate", "kbench gate --baseline {run} --candidate {whole}", 2,
              r"^error: baseline: .*rows\.csv: 39 row\(s\), but the run recorded 224", _cut_csv),
    Situation("cut-csv-baseline", 4, "a baseline made from it", "kbench baseline {run} --name t --out x", 2,
              r"^error: .*rows\.csv: 39 row\(s\), but the run recorded 224", _cut_csv, _nothing_written("x")),
    Situation("short-csv-report", 4, "a run without journal or Parquet, its rows.csv one row short: report",
              "kbench report {run} --out rep", 2, r"^error: .*rows\.csv: \d+ row\(s\), but the run recorded \d+ "
              r"\(manifest\.json num_rows\).*kbench sweep --resume", _short_tables),
    Situation("short-csv-resume", 4, "that run resumed", "kbench sweep --resume {run}", 0, r"^rows: \d+ ",
              _short_tables, _tables_restored),
    *[Situation(f"policy-{name}", 4, f"a policy.json (copied out of its report) with {what}",
                "kbench select --policy P.json --batch-size 16 --q-len 4 --kv-len 4096", 2, line, _edited_policy(edit))
      for name, what, edit, line in (
          ("time-us-text", "time_us 'x'", lambda g: _policy_cell(g).update(time_us="x"),
           rf"{_P_CELL}time_us 'x' is not a number$"),
          ("time-us-nan", "time_us NaN", lambda g: _policy_cell(g).update(time_us=float("nan")),
           rf"{_P_CELL}time_us nan is not a number \(JSON has no NaN or Infinity\)$"),
          ("path-banana", "path 'banana'", lambda g: _policy_cell(g).update(path="banana"),
           rf"{_P_CELL}path 'banana' is not one of decode, context$"),
          ("verdict-7", "verdict 7", lambda g: _policy_cell(g).update(verdict=7), rf"{_P_CELL}verdict 7 is not a string$"),
          ("kernel-newline", "a kernel name holding a newline", lambda g: _policy_cell(g).update(kernel="evil\nkernel"),
           rf"{_P_CELL}kernel 'evil\\nkernel' holds a character that does not print"),
          ("duplicate-cell", "a second cell for one shape, another kernel",
           lambda g: g["cells"].append({**_policy_cell(g), "kernel": "fa2-prefill", "path": "context"}),
           rf"{_P_CELL}a second cell for this shape \(cells\[3\] trtllm-decode, cells\[32\] fa2-prefill\)"),
          ("cell-off-grid", "a cell at batch 9999, outside the group's grid",
           lambda g: g["cells"].append({**_policy_cell(g), "batch_size": 9999}),
           r"^error: P\.json: group .*: cell bs 9999 q 4 kv 4096: batch_size 9999 is not in the group's grid \(16, 64\)"),
          ("grid-without-cells", "5 of its grid's 32 cells (the grid unchanged)",
           lambda g: g.update(cells=g["cells"][:5]),
           r"^error: P\.json: group .*: grid\.batch_size lists 64, but no cell has it"))],
    Situation("policy-unknown-kernel", 4, "a policy naming a kernel this kbench does not have (a newer kbench's)",
              "kbench select --policy P.json --batch-size 16 --q-len 4 --kv-len 4096", 0,
              r"^warning: the policy names kernel 'trtllm-future', which this kbench does not know",
              _edited_policy(lambda g: _policy_cell(g).update(kernel="trtllm-future")),
              lambda w, out: _answered(out, "trtllm-future (decode path) for bs 16 q 4 kv 4096")),
    Situation("policy-unknown-kernel-export", 4, "kbench export of a policy naming a kernel this kbench does not have",
              "kbench export P.json --out sel.py", 0,
              r"^warning: the policy names kernel 'trtllm-future', which this kbench does not know \(a policy from a "
              r"newer kbench\?\); exported as the policy says$",
              _edited_policy(lambda g: _policy_cell(g).update(kernel="trtllm-future")),
              lambda w, out: _file_holds(w, "sel.py", "trtllm-future")),
    Situation("policy-unknown-kernel-recommend", 4, "kbench recommend from a policy timing kernels this kbench does "
              "not have", "kbench recommend P.json --engine sglang --batch-size 16 --q-len 4 --kv-len 4096", 0,
              r"^warning: the policy names kernels 'a-future-kernel', 'trtllm-future', which this kbench does not "
              r"know .*; no engine setting runs them: not priced$",
              _edited_policy(lambda g: _policy_cell(g)["kernels_us"].update({"trtllm-future": 1.0,
                                                                              "a-future-kernel": 2.0}))),
    Situation("policy-export-kernel-newline", 4, "kbench export of a policy whose kernel name holds a newline",
              "kbench export P.json --out sel.py", 2, rf"{_P_CELL}kernel 'evil\\nkernel' holds a character",
              _edited_policy(lambda g: _policy_cell(g).update(kernel="evil\nkernel")), _nothing_written("sel.py")),
    Situation("policy-hole", 4, "a policy without the cell of one grid point (as an adaptive run's)",
              "kbench select --policy P.json --batch-size 64 --q-len 16 --kv-len 4096", 0,
              r"^not measured: the policy's grid has this shape but no result for it",
              _edited_policy(lambda g: g["cells"].remove(_policy_cell(g, 64, 16)))),
    # 5 the gate and broken candidates ---------------------------------------------------------------------------
    *[Situation(f"gate-median-{name}", 5, f"a candidate ok row with median_us {value}",
                "kbench gate --baseline {base} --candidate {cand}", 1, r"^FAIL: 1 of \d+ rows fail; worst .* invalid", _broken_candidate(value))
      for name, value in (("null", "null"), ("nan", "NaN"), ("inf", "Infinity"), ("negative", "-5.0"),
                          ("zero", "0.0"))],
    Situation("gate-server-latency-null", 5, "a server-bench candidate ok row without latency",
              "kbench gate --baseline {base} --candidate {cand}", 1, r"^FAIL: .*invalid", _broken_server_candidate),
    # 6 inputs that hang or blow up ------------------------------------------------------------------------------
    Situation("lengths-fifo", 6, "--kv-dist file: a FIFO", f"kbench sweep {TINY} --kv-dist file:lens.csv --out o", 2,
              r"^error: .*kv_dist: cannot read lens\.csv: a named pipe \(FIFO\), not a regular file", _fifo,
              process=True),
    Situation("lengths-dev-zero", 6, "--q-dist file: /dev/zero (a link to it)",
              f"kbench sweep {TINY} --q-dist file:lens.csv --out o", 2,
              r"^error: .*q_dist: cannot read lens\.csv: a character device, not a regular file", _dev_zero,
              process=True),
    Situation("lengths-non-utf8", 6, "--kv-dist file: with non-UTF-8 bytes",
              f"kbench sweep {TINY} --kv-dist file:lens.csv --out o", 2,
              r"^error: .*lens\.csv: not UTF-8 text \(byte 0xff at offset 0\)", _non_utf8),
    Situation("lengths-folder", 6, "--kv-dist file: a folder", f"kbench sweep {TINY} --kv-dist file:lens.csv --out o",
              2, r"^error: .*lens\.csv: a folder, not a regular file", _folder),
    Situation("lengths-huge", 6, "--kv-dist file: of 17 MiB", f"kbench sweep {TINY} --kv-dist file:lens.csv --out o",
              2, r"^error: .*lens\.csv: 17 MiB, more than the 16 MiB", _huge),
    Situation("tree-file-fifo", 6, "--tree file: a FIFO", "kbench sweep --scenario quick -b 1 -q 4 -k 64 --kernels "
              "reference --tree file:lens.csv --out o", 2,
              r"^error: .*grid\.tree: cannot read lens\.csv: a named pipe \(FIFO\), not a regular file", _fifo,
              process=True),
    Situation("workload-fifo", 6, "kbench recommend --workload a FIFO",
              "kbench recommend {run} --engine vllm --workload lens.csv", 2,
              r"^error: lens\.csv: a named pipe \(FIFO\), not a regular file", lambda w: (_fifo(w), w.vars.update(
                  run=str(ROOT / "results/baselines/h200-draft-extend-kv4096"))), process=True),
    Situation("journal-fifo", 6, "a run's rows.jsonl is a FIFO", "kbench report {run} --out rep", 2,
              r"^error: .*rows\.jsonl: a named pipe \(FIFO\), not a regular file", _fifo_journal, process=True),
    Situation("result-filename-fifo", 6, "server-bench --result-filename is a FIFO",
              f"kbench server-bench --url {{url}} {SERVER} --out r --result-filename result.jsonl", 2,
              r"^error: --result-filename result\.jsonl: a named pipe \(FIFO\), not a regular file",
              _fifo_result_file, process=True),
    Situation("lengths-deep-json", 6, "--kv-dist file: a JSON list nested 100,000 deep",
              f"kbench sweep {TINY} --kv-dist file:lens.json --out o", 2,
              r"^error: .*kv_dist: lens\.json is not a JSON list: nested too deeply$", _deep_lengths),
    Situation("journal-deep-json-report", 6, "a rows.jsonl line nested 100,000 deep: report",
              "kbench report {run} --out rep", 2, r"^error: .*rows\.jsonl: line 2 is not valid JSON \(nested too deeply\)",
              _deep_journal_line, _nothing_written("rep")),
    Situation("journal-deep-json-resume", 6, "a rows.jsonl line nested 100,000 deep: resume",
              "kbench sweep --resume {run}", 2, r"^error: .*rows\.jsonl: line 2 is not valid JSON \(nested too deeply\)",
              _deep_journal_line),
    Situation("workload-deep-json", 6, "a recommend --workload line nested 100,000 deep",
              "kbench recommend {run} --engine vllm --workload w.jsonl", 2,
              r"^error: w\.jsonl: line 1: not JSON \(nested too deeply\)$", _deep_workload),
    Situation("workload-long-integer", 6, "a recommend --workload line with a 5,000-digit batch_size",
              "kbench recommend {run} --engine vllm --workload w.jsonl", 2,
              r"^error: w\.jsonl: line 1: batch_size: an integer of 5000 digits, more than the 4,300 kbench reads$",
              _workload_line(f'{{"batch_size": {LONG_INT}, "q_len": 1, "kv_len": 4096, "weight": 1}}')),
    Situation("workload-duplicate-key", 6, "a recommend --workload line with weight twice",
              "kbench recommend {run} --engine vllm --workload w.jsonl", 2,
              r"^error: w\.jsonl: line 1: the key 'weight' appears twice in one object$",
              _workload_line('{"batch_size": 16, "q_len": 1, "kv_len": 4096, "weight": 1, "weight": 0}')),
    Situation("scenario-long-integer", 6, "a scenario file with a 5,000-digit batch_size",
              "kbench sweep -s s.toml --kernels reference --out o", 2,
              r"^error: s\.toml: line 4: batch_size: an integer of 5000 digits, more than the 4,300 kbench reads$",
              _long_int_scenario, _nothing_written("o")),
    Situation("prebuild-manifest-deep-json", 6, "prebuild --load: an archive whose manifest is nested 100,000 deep",
              "kbench prebuild --load aot.tgz", 2,
              r"^error: aot\.tgz: aot/KBENCH_PREBUILD\.json: not valid JSON \(nested too deeply\)$", _aot_deep_manifest,
              _aot_untouched, process=True),
    Situation("prebuild-manifest-huge", 6, "prebuild --load: a 64 MiB manifest member (64 KiB compressed)",
              "kbench prebuild --load aot.tgz", 2,
              r"^error: aot\.tgz: aot/KBENCH_PREBUILD\.json is 64 MiB, more than the 4 MiB kbench reads",
              _aot_huge_manifest, _aot_untouched, process=True),
    Situation("prebuild-member-larger-than-listed", 6, "prebuild --load: a module of 8 MiB its manifest lists as 100 "
              "bytes", "kbench prebuild --load aot.tgz", 2,
              r"^error: aot\.tgz: aot/m1/m1\.so is 8388608 bytes, its manifest says 100", _aot_size_lie, _aot_untouched,
              process=True),
    Situation("server-info-deep-json", 6, "the server's /server_info answer nested 100,000 deep",
              f"kbench server-bench --url {{url}} {SERVER} --out r", 1,
              r"^error: cannot use the server: .*neither /server_info nor /get_server_info answered with server info",
              _server_fault(info_body=DEEP), _nothing_written("r")),
    Situation("sse-deep-json", 6, "one SSE data line of /generate nested 100,000 deep",
              f"kbench server-bench --url {{url}} {SERVER} --out r", 1, r"malformed SSE data \(line \d+\): nested too deeply",
              _server_fault(stream_mode="deep", truncate_after=1), _one_run("complete", 1)),
    Situation("server-info-negative-capacity", 6, "the server reports token_capacity -5 (every case would be skipped)",
              f"kbench server-bench --url {{url}} {SERVER} --out r", 0,
              r"^warning: the server's token_capacity is -5, not a positive integer: treated as not given",
              _server_fault(token_capacity=-5), _rows_ok),
    Situation("recommend-ab-one-run-twice", 5, "recommend --ab with one run as both A and B", AB + " {a} {a}", 2,
              r"^error: --ab .*: one run given as both A and B", _ab_runs()),
    Situation("recommend-ab-other-backend", 5, "recommend --ab with a B run of another backend (vLLM's)",
              AB + " {a} {b}", 2, r"^error: --ab: run B \(.*\) measured vllm, not --engine sglang", _ab_runs("vllm")),
    Situation("huge-batch", 6, "--batch-size 100000000 with tiny heads",
              "kbench sweep --scenario quick -b 100000000 -q 1 -k 16 --heads 1/1/64 --kernels reference --out o", 2,
              r"^error: .*grid\.batch_size: 100000000 requests is more than the 1,048,576"),
    Situation("max-seq-len-below-kv", 6, "--max-seq-len context:1024 with kv_len 4096",
              "kbench sweep --scenario quick -b 1 -q 1 -k 4096 --max-seq-len context:1024 --kernels reference --out o",
              2, r"^error: .*grid\.max_seq_len: context:1024 is below kv_len 4096"),
    Situation("max-seq-len-below-drawn", 6, "--max-seq-len context:1100 below a lognormal request's KV",
              "kbench sweep --scenario quick -b 8 -q 1 -k 1024 --kv-dist lognormal:1.0 --max-seq-len context:1100 "
              "--kernels reference --out o", 2, r"^error: .*context:1100 is below a request's KV length \d+"),
    Situation("max-seq-len-int32", 6, "--max-seq-len context:2147483647 at batch 64 (on a host with < 33 GiB free)",
              "kbench sweep --scenario quick -b 64 -q 1 -k 64 --max-seq-len context:2147483647 --kernels reference "
              "--out o", 0, r"needs [\d.]+ GiB of host memory \(page tables 32\.0 GiB\)", process=True),
    # --- #48 trust-net ---
    Situation("redirect-backslash-other-host", 1, "a redirect to http://OTHER\\@this-host:port/ (urlsplit reads this "
              "server, the HTTP library connects to OTHER)", f"kbench server-bench --url {{url}} --api-key {SECRET_KEY} "
              f"{SERVER} --out r", 1, r"^error: cannot use the server: GET .* redirected \(307\) to another origin, "
              r".*read by the HTTP library as host 127\.0\.0\.1, port \d+", _backslash_redirect,
              _no_request_to_other_nor_key),
    Situation("password-echoed-every-encoding", 1, "a --url password; /generate answers 500 quoting the Basic header "
              "and the password raw, HTML-escaped, percent-encoded, JSON-escaped",
              f"kbench server-bench --url {{echo_url}} {SERVER} --out r", 1,
              r"^error: 1 of 1 case\(s\) failed; first: .* -> 500 .*Authorization \*\*\*; password \*\*\*",
              _echo_auth("/generate", 500), _no_secret_form(ECHO_PW, "bob")),
    Situation("api-key-echoed-401-every-encoding", 1, "an API key; a 401 page quoting it in every encoding",
              f"kbench server-bench --url {{url}} --api-key '{ECHO_KEY}' {SERVER} --out r", 1,
              r"^error: cannot use the server: GET .* -> 401 .*Bearer \*\*\*; password \*\*\*; url-form \*\*\*",
              _echo_auth("/server_info", 401), _no_secret_form(ECHO_KEY)),
    Situation("api-key-not-latin1", 1, "--api-key sk-€uro (an HTTP header carries Latin-1 only)",
              f"kbench server-bench --url {{url}} --api-key sk-€uro {SERVER} --out r", 2,
              r"^error: --api-key: character 4 of the value is outside Latin-1", lambda w: _server(w),
              _no_secret("sk-€uro")),
    Situation("header-not-latin1", 1, "--header 'X-Gw: é€'", f"kbench server-bench --url {{url}} --header 'X-Gw: é€' "
              f"{SERVER} --out r", 2, r"^error: --header X-Gw: character 2 of the value is outside Latin-1",
              lambda w: _server(w), _no_secret("é€")),
    Situation("password-not-latin1", 1, "--url http://bob:p€ss-word@host",
              f"kbench server-bench --url http://bob:p€ss-word@127.0.0.1:9 {SERVER} --out r", 2,
              r"^error: --url's password: character 2 of the value is outside Latin-1", None, _no_secret("p€ss-word")),
    Situation("server-100-continue-forever", 6, "the server sends `100 Continue` interim responses for ever",
              f"kbench server-bench --url {{url}} {SERVER} --request-timeout 3 --out r", 1,
              r"^error: cannot use the server: GET .*: request timeout: no complete answer within 3 s",
              _stall("continue"), _ended_within(40), process=True),
    Situation("server-header-drip", 6, "the server sends its status line, then one header byte each 0.5 s for ever",
              f"kbench server-bench --url {{url}} {SERVER} --request-timeout 3 --out r", 1,
              r"^error: cannot use the server: GET .*: request timeout: no complete answer within 3 s",
              _stall("header-drip"), _ended_within(40), process=True),
    Situation("server-body-drip", 6, "the server sends a 200 and its headers, then one body byte each 0.5 s for ever",
              f"kbench server-bench --url {{url}} {SERVER} --request-timeout 3 --out r", 1,
              r"^error: cannot use the server: GET .*/server_info: request timeout: no complete answer within 3 s",
              _stall("body-drip"), _ended_within(40), process=True),
    Situation("server-headers-then-silence", 6, "the server sends a 200 and its headers, then nothing (the connection "
              "kept open)", f"kbench server-bench --url {{url}} {SERVER} --request-timeout 3 --out r", 1,
              r"^error: cannot use the server: GET http://.*/server_info: read timeout \(nothing for 3 s\)$",
              _stall("headers-silent"), _ended_within(40), process=True),
    Situation("generate-body-drip", 6, "/generate answers 200 and its headers, then one byte each 0.5 s for ever "
              "(every read in time)", f"kbench server-bench --url {{url}} {SERVER} --request-timeout 3 --out r", 1,
              r"^error: 1 of 1 case\(s\) failed; first: bs1-in4-out2: POST http://.*/generate: request timeout: no "
              r"complete answer within 3 s", _stall_on("body-drip", "/generate"),
              _failed_row(r"^POST http://.*/generate: request timeout: no complete answer within 3 s", 40),
              process=True),
    Situation("flush-body-drip", 6, "/flush_cache answers 200 and its headers, then one byte each 0.5 s for ever",
              f"kbench server-bench --url {{url}} {SERVER} --flush-timeout 2 --flush-retries 2 --out r", 1,
              r"^error: 1 of 1 case\(s\) failed; first: .*cache flush failed after 2 attempts: POST /flush_cache"
              r"\?timeout=2 -> request timeout: no complete answer within 12 s",
              _stall_on("body-drip", "/flush_cache"), _failed_row(r"cache flush failed after 2 attempts", 60),
              process=True),
    Situation("metrics-body-drip", 6, "/metrics answers 200 and its headers, then one byte each 0.5 s for ever (its "
              "counters are optional: read for at most the small calls' time, then left out)",
              f"kbench server-bench --url {{url}} {SERVER} --request-timeout 3 --out r", 0,
              r"^rows: ", _stall_on("body-drip", "/metrics"), _ended_within(40), process=True),
    Situation("sweep-resume-line-quoted", 2, "sweep --out 'res dir $(touch PWNED)' stopped by SIGTERM: the resume line",
              f"kbench sweep {TINY} --out '{PWNED}'", 143, r"finish with: kbench sweep --resume '.*res dir \$\(touch",
              None, _pasted_run(), signal_at=("kbench.runs.store:json_safe", "after", signal.SIGTERM)),
    Situation("server-bench-resume-line-quoted", 2, "server-bench --out 'res dir $(touch PWNED)' stopped by SIGTERM",
              f"kbench server-bench --url {{url}} {SERVER} --out '{PWNED}'", 143,
              r"finish with: kbench server-bench --resume '.*res dir \$\(touch", lambda w: _server(w),
              _pasted_run(), signal_at=("kbench.server.bench:append_lines", "before", signal.SIGTERM)),
    Situation("baseline-finish-line-quoted", 2, "baseline of an interrupted run in 'my runs/x $(touch PWNED)'",
              "kbench baseline {qrun} --name b --out bl", 2,
              r"^error: .* is 'interrupted', not complete: finish it \(kbench sweep --resume '.*my runs/x \$\(touch",
              _quoted_interrupted_run, _pasted("run")),
    Situation("gate-refresh-line-quoted", 2, "gate --markdown: the 'refresh the baseline' line for a candidate in "
              "'res dir $(touch PWNED)'", "kbench gate --baseline {base} --candidate {qcand} --markdown g.md", 0,
              r"^PASS", _improved_candidate, lambda w, out: _pasted("cand")(w, w.path("g.md").read_text())),
    Situation("export-try-line-quoted", 2, "export --out 'res dir $(touch PWNED).py': the try: line",
              "kbench export {rep}/policy.json --out {qsel}", 0, r"; try: python 'res dir \$\(touch PWNED\)\.py' "
              r"BATCH_SIZE Q_LEN KV_LEN", _export_named, _pasted("sel")),
    Situation("recommend-set-line-log-sglang", 2, "recommend's set: line in a log of 100 columns (SGLang)",
              f"kbench recommend {ROUTES} --engine sglang --batch-size 8 --q-len 4 --kv-len 4096 --host-overlap sum",
              0, r"^set: python -m sglang\.launch_server", None,
              _set_line_whole("--page-size", "--disable-overlap-schedule"), env={"COLUMNS": "100"}),
    Situation("recommend-set-line-log-vllm", 2, "recommend's set: line in a log of 80 columns (vLLM's JSON config)",
              f"kbench recommend {ROUTES} --engine vllm --batch-size 8 --q-len 4 --kv-len 4096 --host-overlap sum",
              0, r"^set: vllm serve MODEL_PATH --speculative-config", None,
              _set_line_whole("--block-size", "--no-async-scheduling"), env={"COLUMNS": "80"}),
    Situation("recommend-json-tree", 5, "recommend --json with a topk:4 tree workload (trtllm_mha refuses a tree)",
              f"kbench recommend {TREES} --engine sglang --batch-size 8 --q-len 8 --kv-len 4096 --tree topk:4 --json",
              0, r'"engine"', None, _json_answer),
    Situation("report-stale-kb-new", 2, "report over a report whose last writer was killed (kill -9) mid-write, "
              "beside a live writer's folder", "kbench report {new} --out {rep}", 0, r"^wrote \d+ files",
              _killed_report_leftovers, _stale_removed_live_kept, process=True),
    Situation("ab-sigterm-keeps-rounds", 4, "an interleaved A/B stopped by SIGTERM after 3 of 7 rounds",
              f"kbench server-bench {AB_SERVERS}", 143, r"^error: stopped by SIGTERM; the finished rounds are kept in both "
              r"halves \(3 round", _ab_servers, _ab_rounds_kept(3, "interrupted"),
              signal_at=("kbench.server.interleave:_round_finished#3", "after", signal.SIGTERM)),
    Situation("ab-ctrl-c-keeps-rounds", 4, "an interleaved A/B stopped by Ctrl-C after 2 of 7 rounds",
              f"kbench server-bench {AB_SERVERS}", 130, r"^error: stopped by SIGINT; the finished rounds are kept in both "
              r"halves \(2 round.*gate them: kbench gate --baseline", _ab_servers, _ab_rounds_kept(2, "interrupted"),
              signal_at=("kbench.server.interleave:_round_finished#2", "after", signal.SIGINT)),
    Situation("ab-kill9-keeps-rounds", 4, "an interleaved A/B killed (kill -9) after 3 of 7 rounds",
              f"kbench server-bench {AB_SERVERS}", -9, r"^round 3/7 bs1-in4-out2: ", _ab_servers,
              _ab_rounds_kept(3, "running"), signal_at=("kbench.server.interleave:_round_finished#3", "after",
                                                          signal.SIGKILL), at_pause=_kill9_at_pause),
    Situation("baseline-pools-ab-halves", 5, "a server baseline of the A and the B half of one interleaved A/B",
              "kbench baseline {run0} {run1} --name srv --out {bl}", 2,
              r"^error: refusing to pool .*: they are side A and side B of one interleaved A/B \(two settings\)",
              _ab_halves_runs, _no_baseline),
    Situation("baseline-pools-two-settings", 5, "a server baseline of a flashinfer run and an fa3 run",
              "kbench baseline {run0} {run1} --name srv --out {bl}", 2,
              r"^error: refusing to pool .*: the server ran another setting \(attention_backend 'flashinfer' vs "
              r"'fa3'\)", _two_settings_runs, _no_baseline),
    *TRUST_FILES,
    *ROUND6,
    *OWN_AND_ELF,
]
BY_ID = {s.id: s for s in SITUATIONS}


# ---- running one -----------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    code: int
    output: str
    line: str  # the line that matched, or the first line


def render(s: Situation, w: Workspace) -> str:
    return s.command.format(**w.vars)


def run_situation(s: Situation, w: Workspace, in_process: bool) -> Outcome:
    w.shared.reset_servers()
    if s.setup:
        s.setup(w)
    cmd = render(s, w)
    args = shlex.split(cmd)[1:]
    env = {"COLUMNS": "250", "GITHUB_STEP_SUMMARY": "", **s.env, **w.env}
    if s.signal_at:
        code, out = _run_signalled(s, w, args, env)
    elif s.stdout or cmd.startswith("python "):
        argv = [sys.executable, *args] if cmd.startswith("python ") else [sys.executable, "-m", "kbench.cli.main", *args]
        shell = STDOUT[s.stdout] if s.stdout else '"$@"'
        p = subprocess.run(["bash", "-c", shell, "bash", *argv], cwd=w.root, stdout=subprocess.PIPE if not s.stdout
                           else None, stderr=subprocess.PIPE, text=True, timeout=120, env={**os.environ, **env})
        code, out = p.returncode, (p.stdout or "") + p.stderr
    elif in_process and not s.process:
        code, out = _run_in_process(args, env, w.root)
    else:
        p = subprocess.run([sys.executable, "-m", "kbench.cli.main", *args], cwd=w.root, capture_output=True,
                           text=True, timeout=120, env={**os.environ, **env})
        code, out = p.returncode, p.stdout + p.stderr
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    hit = next((ln for ln in lines if re.search(s.line, ln)), None)
    return Outcome(code, out, hit if hit is not None else (lines[-1] if lines else ""))


def _run_in_process(args, env, cwd) -> tuple[int, str]:
    from click.testing import CliRunner

    from kbench.cli.main import cli

    old = os.getcwd()
    os.chdir(cwd)
    try:
        r = CliRunner().invoke(cli, args, env=env, catch_exceptions=True)
    finally:
        os.chdir(old)
    out = r.output
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        import traceback

        out += "\nTraceback (in-process):\n" + "".join(traceback.format_exception(r.exception))
    return r.exit_code, out


def _run_signalled(s: Situation, w: Workspace, args, env) -> tuple[int, str]:
    target, when, signum = s.signal_at
    marker = str(w.path(".pause-marker"))
    p = subprocess.Popen([sys.executable, str(HERE / "pause_at.py"), target, when, marker, "--", *args], cwd=w.root,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **env})
    t0 = time.monotonic()
    while not os.path.exists(marker):
        if p.poll() is not None or time.monotonic() - t0 > 120:
            out = p.communicate()[0] if p.poll() is not None else ""
            p.kill()
            raise AssertionError(f"never reached {target} ({when}): {out[-2000:]}")
        time.sleep(0.05)
    if s.at_pause:
        s.at_pause(w)
    else:
        p.send_signal(signum)
    time.sleep(0.5)
    Path(marker + ".go").write_text("go\n")  # a signal kbench holds (the swap) goes on now
    out = p.communicate(timeout=120)[0]
    os.unlink(marker)
    os.unlink(marker + ".go")
    return p.returncode, out


def verdict(s: Situation, o: Outcome, w: Workspace) -> str | None:
    """None when kbench did what the table says, else what went wrong."""
    if "Traceback" in o.output:
        return "traceback"
    if o.code != s.code:
        return f"exit {o.code}, wanted {s.code}"
    if not re.search(s.line, o.line):
        return f"no line matching {s.line!r}"
    if s.code == 2:
        lines = [ln for ln in o.output.splitlines() if ln.strip()]
        if len(lines) != 1 or not lines[0].startswith("error: "):
            return f"{len(lines)} lines, wanted one error line"
    if s.check:
        try:
            s.check(w, o.output)
        except AssertionError as e:
            return f"check: {e}"
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", help="also write the table here")
    ap.add_argument("--only", help="comma-separated situation ids")
    a = ap.parse_args()
    todo = [BY_ID[i] for i in a.only.split(",")] if a.only else SITUATIONS
    root = Path(tempfile.mkdtemp(prefix="kbench-trust-"))
    shared = Shared(root / "shared")
    rows, bad = [], 0
    try:
        for i, s in enumerate(todo):
            w = Workspace(root / f"{i:02d}-{s.id}", shared)
            w.root.mkdir()
            o = run_situation(s, w, in_process=False)
            v = verdict(s, o, w)
            bad += v is not None
            line = re.sub(r"/tmp/kbench-trust-[^/ ]+/\d\d-[^/ ]+/", "", o.line)[:170].replace("|", "\\|")
            rows.append(f"| {s.family} | {s.what} | `{render(s, w).replace(str(w.root) + '/', '')[:110]}` | "
                        f"{o.code} | {line} | {'ok' if v is None else 'UNEXPECTED: ' + v} |")
            print(rows[-1], flush=True)
    finally:
        shared.close()
        shutil.rmtree(root, ignore_errors=True)
    text = "\n".join(["| family | situation | command | exit | the line kbench printed | verdict |",
                      "|---|---|---|---|---|---|", *rows])
    if a.markdown:
        Path(a.markdown).write_text(text + "\n")
    print(f"\n{len(todo) - bad} of {len(todo)} as the table says")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
