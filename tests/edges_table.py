"""Issue #17's hostile and ordinary situations, run for real on this machine (no GPU needed), as a table:
the command, its exit code, the line kbench printed, and what was kept. Each case is also a test (named in
the last column); this script shows them together, as a new user would meet them.

    python tests/edges_table.py [--markdown FILE]

Needs a Linux machine where this user can mount a tmpfs (root in a container) for the full and read-only
file system cases; without that those rows say "skipped: cannot mount".
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KB = str(Path(sys.executable).with_name("kbench"))
BASELINE = ROOT / "results" / "baselines" / "h200-draft-extend-kv4096"
TINY = "--scenario quick -b 1 -q 2 -k 64 --kernels reference"


def sh(cmd: str, cwd: Path, env: dict | None = None, timeout: int = 300) -> tuple[int, str]:
    e = {**os.environ, "COLUMNS": "250", **(env or {})}
    p = subprocess.run(["bash", "-c", cmd.replace("kbench ", KB + " ")], cwd=cwd, env=e, capture_output=True,
                       text=True, timeout=timeout)
    return p.returncode, (p.stdout + p.stderr)


def line_of(out: str, want: str = "") -> str:
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    if want:
        hit = [ln for ln in lines if want in ln]
        if hit:
            return hit[0]
    errs = [ln for ln in lines if ln.startswith("error:")]
    return (errs or lines or [""])[0]


def digest(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:12]


def mount_tmpfs(path: Path, size: str, ro: bool = False) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    opts = f"size={size}" + (",ro" if ro else "")
    return subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True).returncode == 0


def umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def traceback_free(out: str) -> bool:
    return "Traceback" not in out


class Table:
    def __init__(self):
        self.rows: list[list[str]] = []

    def add(self, case: str, cmd: str, rc: int, line: str, kept: str, test: str, want_rc: int, out: str):
        ok = rc == want_rc and traceback_free(out)
        self.rows.append([case, f"`{cmd}`", str(rc), line[:150].replace("|", "\\|"), kept, test,
                          "ok" if ok else f"UNEXPECTED (wanted {want_rc}{'' if traceback_free(out) else ', traceback'})"])

    def markdown(self) -> str:
        head = ["case", "command", "exit", "what kbench printed", "kept", "test", "verdict"]
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(r) + " |" for r in self.rows]
        return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", help="also write the table here")
    a = ap.parse_args()
    t = Table()
    w = Path(tempfile.mkdtemp(prefix="kbench-edges-"))
    (w / "runs").mkdir()
    every = "--scenario quick -b 1 -q 2 -k 64"  # every kernel: on a CPU the FlashInfer ones are skipped rows
    rc, out = sh(f"kbench sweep {every} --out runs --name cpu", w)
    cpu_run = next((w / "runs").glob("cpu-*"))
    rc, out = sh(f"kbench sweep {every} --out runs --name cpu2", w)
    cpu_run2 = next((w / "runs").glob("cpu2-*"))
    shutil.copytree(BASELINE, w / "baseline")

    # ---- outputs that cannot be written
    (w / "afile").write_text("x")
    for case, cmd, test in [
        ("sweep --out is a file", f"kbench sweep {TINY} --out afile", "test_sweep_out_unwritable_is_one_line_before_anything_runs"),
        ("sweep --out under /proc", f"kbench sweep {TINY} --out /proc/kbench", "test_sweep_out_unwritable_is_one_line_before_anything_runs"),
        ("sweep --out \"\"", f"kbench sweep {TINY} --out ''", "test_real_process_hostile_inputs_one_line"),
        ("report --out is a file", f"kbench report baseline --out afile", "test_jit_cache_report_merge_baseline_outputs_unwritable"),
        ("merge --out is a file", f"kbench merge {cpu_run} {cpu_run2} --out afile", "test_jit_cache_report_merge_baseline_outputs_unwritable"),
        ("baseline --out is a file", f"kbench baseline {cpu_run} --name b --out afile", "test_jit_cache_report_merge_baseline_outputs_unwritable"),
        ("sweep --jit-cache is a file", f"kbench sweep {TINY} --out runs --jit-cache afile", "test_jit_cache_report_merge_baseline_outputs_unwritable"),
        ("server-bench --out is a file", "kbench server-bench --url http://127.0.0.1:9 --out afile", "test_outputs.py::test_unwritable_out_is_one_line_before_anything_runs"),
    ]:
        rc, out = sh(cmd, w)
        t.add(case, cmd, rc, line_of(out), f"afile unchanged: {(w / 'afile').read_text() == 'x'}", test, 2, out)

    full, ro = w / "full", w / "ro"
    if mount_tmpfs(ro, "1m", ro=True):
        cmd = f"kbench sweep {TINY} --out {ro}"
        rc, out = sh(cmd, w)
        t.add("sweep --out on a read-only mount", cmd, rc, line_of(out), "nothing written", "test_sweep_out_unwritable_is_one_line_before_anything_runs", 2, out)
        umount(ro)
    if mount_tmpfs(full, "48k"):
        cmd = f"kbench sweep -b 1,2,3,4 -q 1..8 -k 64 --kernels reference --budget 0.01 --out {full} --name f"
        rc, out = sh(cmd, w)
        runs = list(full.glob("f-*"))
        man = json.loads((runs[0] / "manifest.json").read_text()) if runs and (runs[0] / "manifest.json").exists() else {}
        tmps = list(full.rglob("*.tmp"))
        t.add("sweep on a full 48 KiB tmpfs", cmd, rc, line_of(out, "error"),
              f"manifest status {man.get('status')!r}; *.tmp left: {len(tmps)}", "test_full_disk_mid_sweep_keeps_complete_rows_and_marks_interrupted", 2, out)
        umount(full)
    if mount_tmpfs(full, "200k"):  # gate --json on a full disk keeps the valid file
        gj = full / "gate.json"
        rc0, out0 = sh(f"kbench gate --baseline baseline --candidate baseline --json {gj}", w)
        if not gj.exists():
            t.rows.append(["gate --json on a full disk", "-", str(rc0), "setup failed: " + line_of(out0), "-", "-", "UNEXPECTED"])
        else:
            before = gj.read_bytes()
            filler = full / "filler"
            subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1k", "count=400"], capture_output=True)
            cmd = f"kbench gate --baseline baseline --candidate baseline --json {gj}"
            rc, out = sh(cmd, w)
            t.add("gate --json on a full disk", cmd, rc, line_of(out, "error"),
                  f"gate.json unchanged and valid: {gj.read_bytes() == before and bool(json.loads(before))}",
                  "test_gate_json_on_a_full_disk_keeps_the_valid_file", 2, out)
        umount(full)
    else:
        t.rows.append(["full / read-only file systems", "-", "-", "skipped: cannot mount a tmpfs here", "-", "-", "-"])

    # ---- resume
    d0 = digest(w / "baseline")
    cmd = "kbench sweep --resume baseline"
    rc, out = sh(cmd, w)
    t.add("resume the committed H200 baseline on a CPU", cmd, rc, line_of(out), f"baseline unchanged: {digest(w / 'baseline') == d0}",
          "test_resume_of_a_baseline_is_refused_and_touches_nothing", 2, out)
    d1 = digest(cpu_run)
    cmd = f"kbench sweep --resume {cpu_run}"
    rc, out = sh(cmd, w)
    t.add("resume a complete run", cmd, rc, line_of(out), f"run unchanged: {digest(cpu_run) == d1}",
          "test_resume_of_a_complete_run_says_so_and_touches_nothing", 0, out)
    for opt in ("--scenario draft-extend", "--out elsewhere", "--name other", "--shard 1/2"):
        cmd = f"kbench sweep --resume {cpu_run} {opt}"
        rc, out = sh(cmd, w)
        t.add(f"resume with {opt.split()[0]}", cmd, rc, line_of(out), f"run unchanged: {digest(cpu_run) == d1}",
              "test_resume_refuses_options_it_cannot_honour", 2, out)
    # a second writer while the first still runs
    p = subprocess.Popen([KB, "sweep", "--scenario", "quick", "-b", "1,2,4,8", "-q", "1,2,3,4", "-k", "256",
                          "--kernels", "reference", "--out", "runs", "--name", "busy"], cwd=w,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "COLUMNS": "250"})
    busy = None
    for _ in range(1200):  # up to 2 min: on a loaded 2-core machine the sweep's start alone takes tens of seconds
        busy = next((w / "runs").glob("busy-*/rows.jsonl"), None)
        if busy:
            break
        time.sleep(0.1)
    if busy:
        cmd = f"kbench sweep --resume {busy.parent}"
        rc, out = sh(cmd, w)
        t.add("resume while the sweep still writes", cmd, rc, line_of(out), "the first sweep goes on",
              "test_resume_while_the_sweep_still_writes_is_refused_naming_the_pid", 2, out)
        # SIGTERM: the run is finalized as interrupted, exit 143
        p.send_signal(signal.SIGTERM)
        pout, _ = p.communicate(timeout=120)
        man = json.loads((busy.parent / "manifest.json").read_text())
        t.add("SIGTERM during a sweep", "kill -TERM <kbench sweep>", p.returncode, line_of(pout, "interrupted") or line_of(pout, "resume"),
              f"manifest {man.get('status')!r}, rows.parquet: {(busy.parent / 'rows.parquet').exists()}",
              "test_sigterm_ends_a_sweep_like_ctrl_c", 143, pout)
    else:  # said, not silently left out of the table
        p.kill()
        for case, test, want in (("resume while the sweep still writes",
                                  "test_resume_while_the_sweep_still_writes_is_refused_naming_the_pid", 2),
                                 ("SIGTERM during a sweep", "test_sigterm_ends_a_sweep_like_ctrl_c", 143)):
            t.add(case, "(not staged)", -1, "the first sweep wrote no row within 2 min", "-", test, want, "")

    # ---- baselines
    empty = w / "runs" / "empty"
    shutil.copytree(cpu_run, empty)
    for f in ("rows.jsonl", "rows.csv", "rows.parquet"):
        (empty / f).unlink(missing_ok=True)
    (empty / "rows.jsonl").write_text("")
    for case, cmd, test, want in [
        ("baseline from a run with no ok row", f"kbench baseline {empty} --name e --out bl", "test_baseline_refuses_a_run_without_ok_rows", 2),
        ("baseline over an existing one", "kbench baseline baseline --name h200-draft-extend-kv4096 --out results_copy", "test_baseline_never_replaced_without_force", 2),
    ]:
        if "results_copy" in cmd:
            shutil.copytree(BASELINE, w / "results_copy" / "h200-draft-extend-kv4096")
            d2 = digest(w / "results_copy")
        rc, out = sh(cmd, w)
        kept = f"existing baseline unchanged: {digest(w / 'results_copy') == d2}" if "results_copy" in cmd else f"nothing written: {not (w / 'bl' / 'e').exists()}"
        t.add(case, cmd, rc, line_of(out), kept, test, want, out)

    # ---- the gate must not pass vacuously
    cmd = f"kbench gate --baseline {cpu_run} --candidate {cpu_run2}"
    rc, out = sh(cmd, w)
    t.add("gate of two CPU runs", cmd, rc, line_of(out, "FAIL"), "-", "test_gate_of_two_cpu_runs_fails_nothing_compared", 1, out)

    # ---- devices
    for dv in ("0", "5", "0,0"):
        cmd = f"kbench sweep {TINY} --out runs --devices {dv}"
        rc, out = sh(cmd, w)
        t.add(f"--devices {dv} without a GPU", cmd, rc, line_of(out), "no run folder", "test_devices_validated", 2, out)
    cmd = "kbench sweep --scenario quick -b 256 -q 16 -k 32768 --kernels reference --out runs --name big"
    rc, out = sh(cmd, w)
    t.add("a case too big for host memory", cmd, rc, line_of(out, "of host memory").strip("│ ") or line_of(out, "skipped"),
          "skipped before allocating", "test_cpu_case_too_big_for_host_memory_is_skipped_before_allocating", 0, out)

    # ---- a CPU path that tells the truth, CI logs and pipes
    cmd = f"kbench report {cpu_run} --out rep"
    rc, out = sh(cmd, w)
    t.add("report of a CPU run", cmd, rc, line_of(out, "reference"), "-", "test_report_of_a_cpu_run_says_why_and_points_to_the_baseline", 2, out)
    cmd = "kbench report baseline --out rep2 | head -2"
    rc, out = sh("set -o pipefail; " + cmd, w)
    t.add("report piped to head -2", cmd, rc, line_of(out), "-", "test_closed_pipe_is_quiet_and_exit_0", 0, out)

    # ---- smaller ones
    (w / "bom.toml").write_bytes(b"\xef\xbb\xbf" + (ROOT / "scenarios" / "quick.toml").read_bytes())
    for case, cmd, test, want in [
        ("-s /tmp (a folder)", f"kbench sweep -s /tmp --out runs", "test_scenario_that_is_a_folder_or_a_device_says_what_it_is", 2),
        ("-s /dev/null", f"kbench sweep -s /dev/null --out runs", "test_scenario_that_is_a_folder_or_a_device_says_what_it_is", 2),
        ("a UTF-8 BOM scenario", f"kbench sweep -s bom.toml -b 1 -q 2 -k 64 --kernels reference --out runs --name bom", "test_utf8_bom_scenario_loads", 0),
        ("--heads with --model", f"kbench sweep {TINY} --model llama3-8b --heads 32/8/128 --out runs", "test_heads_with_model_is_refused", 2),
        ("non-ASCII --name", f"kbench sweep {TINY} --out runs --name 'тест🚀 run'", "test_non_ascii_name_is_said_not_silently_changed", 0),
        ("select --extrapolate, q_len > kv_len", "kbench report baseline --out rep3 >/dev/null; kbench select --policy rep3/policy.json --batch-size 16 --q-len 9 --kv-len 8 --extrapolate", "test_select_extrapolate_refuses_q_len_above_kv_len", 2),
        ("a click usage error", "kbench sweep --no-such-option", "test_click_usage_errors_are_one_kbench_line", 2),
    ]:
        rc, out = sh(cmd, w)
        t.add(case, cmd, rc, line_of(out, "error") if want else line_of(out, "name") or line_of(out, "run:"), "-", test, want, out)

    text = t.markdown()
    print(text)
    if a.markdown:
        Path(a.markdown).write_text(text + "\n")
    shutil.rmtree(w, ignore_errors=True)
    bad = [r for r in t.rows if r[-1].startswith("UNEXPECTED")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
