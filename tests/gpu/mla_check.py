"""MLA on the GPU (issue #27): every MLA kernel checked against the float32 absorbed reference, and FlashMLA
(decode-style) against FlashInfer's MLA wrapper (fa3, fa2: prefill-style) at DeepSeek-V3's 128 heads per GPU
and at TP8's 16, bf16 and fp8 KV.

On the H200 (FlashMLA from the sgl-flash-mla wheel: pip install --no-deps --target /tmp/site, PYTHONPATH=/tmp/site):
    PYTHONPATH=/tmp/site python3 tests/gpu/mla_check.py --out /tmp/out/mla
Runs four `kbench sweep`s (each kernel checked against the reference by the sweep before it is timed):
  1. -s deepseek-mtp     (128 heads) at bs 16/64/256, q 1/2/4, kv 4096/32768, bf16 and fp8 KV, --budget 0.5;
  2. -s deepseek-mtp-tp8 (16 heads), the same grid;
  3./4. the correctness extras at both head counts (the same scenarios), hardly timed: bs 3, q_len 4, kv 1000
     (a partial last page), ragged q (accept:0.6) and per-request KV (lognormal:1.0), bf16 and fp8 KV.
Then `kbench report` over all four (its MLA section: OUT/report/report.md).
Prints: each kernel's relative error against the reference (max over its cases); a table per head count and
KV dtype: FlashMLA vs fa3 vs fa2 (us, fraction of the read ceiling), the winner and its margin; the report's
decode-vs-prefill trend along q_len. Writes the table and a JSON summary to OUT; the run folders are in OUT/runs.
Exit 1 when a check fails: a kernel wrong or failed anywhere, or a kernel that must run on this GPU skipped
(FlashMLA at 128 heads and fa3/fa2 everywhere on SM90: a missing FlashMLA install fails the check, with its reason).
`--runs RUN...` prints the tables and checks from finished runs instead (no GPU). Run again after a call cut
short, it reuses the complete sweeps in OUT/runs and resumes an interrupted one. The last line is the verdict
with its figures (pairs checked, worst error per KV dtype, winners per head count).
About 3-5 minutes on an H200 with an empty JIT cache (the four FlashInfer MLA modules compile in parallel).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd

MLA_KERNELS = ("flashmla", "flashinfer-mla-fa3", "flashinfer-mla-fa2", "trtllm-gen-mla")
COMPARED = ("flashmla", "flashinfer-mla-fa3", "flashinfer-mla-fa2")
SHORT = {"flashmla": "flashmla", "flashinfer-mla-fa3": "fa3", "flashinfer-mla-fa2": "fa2"}
GRID = ["--batch-size", "16,64,256", "--q-len", "1,2,4", "--kv-len", "4096,32768", "--kv-dtype", "bf16,fp8",
        "--budget", "0.5", "--kernels", "all,routes"]  # the engines' MLA routes too: kbench recommend prices them
EXTRAS = ["--batch-size", "3", "--q-len", "4", "--kv-len", "1000", "--q-dist", "fixed,accept:0.6",
          "--kv-dist", "fixed,lognormal:1.0", "--kv-dtype", "bf16,fp8", "--budget", "0.05", "--min-time", "0",
          "--kernels", ",".join(MLA_KERNELS)]
SWEEPS = [("mla-h128", ["-s", "deepseek-mtp", *GRID]), ("mla-h16", ["-s", "deepseek-mtp-tp8", *GRID]),
          ("mla-h128-extras", ["-s", "deepseek-mtp", *EXTRAS]), ("mla-h16-extras", ["-s", "deepseek-mtp-tp8", *EXTRAS])]


def must_run(kernel: str, heads: int, sm: int) -> bool:
    """Kernels whose skipped row fails the check on this GPU: on SM90 FlashMLA at 64/128 heads, fa3 and fa2."""
    if sm != 90:
        return kernel == "flashinfer-mla-fa2"
    return kernel in ("flashinfer-mla-fa3", "flashinfer-mla-fa2") or (kernel == "flashmla" and heads in (64, 128))


def fmt_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths))  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows])


def error_table(rows: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Per MLA kernel, heads and KV dtype: cases checked ok / wrong / failed / skipped and the max relative error."""
    headers = ["kernel", "heads", "kv", "ok", "wrong", "failed", "skipped", "max rel err", "median rel err", "note"]
    out = []
    k = rows[rows["kernel"].isin(MLA_KERNELS)]
    for (kernel, heads, kv), g in k.groupby(["kernel", "num_qo_heads", "kv_dtype"], sort=True):
        st = g["status"].value_counts().to_dict()
        err = pd.to_numeric(g["rel_err"], errors="coerce").dropna()
        note = "" if st.get("skipped", 0) == 0 else str(g.loc[g["status"] == "skipped", "reason"].iloc[0])[:110]
        bad = g[g["status"].isin(["wrong", "failed"])]
        if len(bad):
            note = f"{bad['status'].iloc[0]}: {str(bad['reason'].iloc[0])[:100]}"
        out.append([kernel, str(int(heads)), kv, str(st.get("ok", 0)), str(st.get("wrong", 0)), str(st.get("failed", 0)),
                    str(st.get("skipped", 0)), f"{err.max():.4f}" if len(err) else "-",
                    f"{err.median():.4f}" if len(err) else "-", note])
    return headers, out


def comparison_table(rows: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Per (heads, kv dtype, bs, q, kv) of the uniform grid: each compared kernel's time and fraction of the read
    ceiling, the winner and its margin over the runner-up."""
    headers = ["heads", "kv", "bs", "q", "kv_len", *(f"{SHORT[k]} us (ceil)" for k in COMPARED), "winner", "margin"]
    out = []
    uni = rows[(rows["q_dist"] == "fixed") & (rows["kv_dist"] == "fixed") & rows["kernel"].isin(COMPARED)]
    keys = ["num_qo_heads", "kv_dtype", "batch_size", "q_len", "kv_len"]
    for key, g in uni.groupby(keys, sort=True):
        ok = g[(g["status"] == "ok") & g["median_us"].notna()].sort_values("median_us")
        by = {r.kernel: r for r in g.itertuples()}
        cells = []
        for k in COMPARED:
            r = by.get(k)
            if r is None or r.status != "ok":
                cells.append("-" if r is None else r.status)
            else:
                frac = "" if pd.isna(r.roofline_frac) else f" ({r.roofline_frac:.2f})"
                cells.append(f"{r.median_us:.1f}{frac}")
        winner = margin = "-"
        if len(ok):
            winner = SHORT[ok["kernel"].iloc[0]]
            if len(ok) > 1:
                margin = f"{(ok['median_us'].iloc[1] / ok['median_us'].iloc[0] - 1) * 100:.1f}% over {SHORT[ok['kernel'].iloc[1]]}"
        out.append([str(int(key[0])), key[1], *(str(int(v)) for v in key[2:]), *cells, winner, margin])
    return headers, out


def failures(rows: pd.DataFrame, sm: int) -> list[str]:
    """Why the check fails: wrong or failed MLA rows, and kernels that must run here but were skipped."""
    out = []
    k = rows[rows["kernel"].isin(MLA_KERNELS)]
    for r in k[k["status"].isin(["wrong", "failed"])].itertuples():
        out.append(f"{r.kernel} {r.status} on {r.case_id}: {r.reason}")
    skipped = k[k["status"] == "skipped"]
    for (kernel, heads), g in skipped.groupby(["kernel", "num_qo_heads"], sort=True):
        if must_run(kernel, int(heads), sm):
            out.append(f"{kernel} skipped on {len(g)} case(s) at {int(heads)} heads: {g['reason'].iloc[0]}")
    # a kernel that must run here with no row at all at a case (a sweep that dropped it said complete anyway)
    for case_id, g in rows.groupby("case_id", sort=True):
        heads = int(g["num_qo_heads"].iloc[0])
        lacking = [n for n in MLA_KERNELS if must_run(n, heads, sm) and n not in set(g["kernel"])]
        if lacking:
            out.append(f"no row of {', '.join(lacking)} at {case_id}")
    if not len(k[k["status"] == "ok"]):
        out.append("no MLA kernel row is ok")
    return out


def existing_run(runs_dir: Path, name: str) -> tuple[Path | None, str | None]:
    """The newest run folder NAME-* under runs_dir and its status (a call cut short left it there)."""
    for d in sorted(runs_dir.glob(f"{name}-*"), reverse=True):
        m = d / "manifest.json"
        if d.is_dir() and m.is_file():
            try:
                return d, json.loads(m.read_text()).get("status")
            except (OSError, ValueError):
                continue
    return None, None


def sweep(args: list[str], runs_dir: Path, name: str) -> Path | None:
    """Run one sweep: a complete run of it in runs_dir is reused, an interrupted one resumed."""
    done, status = existing_run(runs_dir, name)
    if done is not None and status == "complete":
        print(f"reusing {done} (complete)", flush=True)
        return done
    exe = shutil.which("kbench")
    cmd = [exe] if exe else [sys.executable, "-m", "kbench.cli.main"]
    full = ["sweep", "--resume", str(done)] if done is not None else \
        ["sweep", *args, "--out", str(runs_dir), "--name", name]
    print("$ kbench " + " ".join(full), flush=True)
    out = subprocess.run([*cmd, *full], capture_output=True, text=True, env={**os.environ, "COLUMNS": "250"})
    with open(runs_dir / f"{name}.log", "a") as log:
        log.write(out.stdout + "\n" + out.stderr)
    tail = [ln for ln in out.stdout.splitlines() if ln.startswith(("wall ", "rows: ", "run: ", "device: "))]
    print("\n".join(tail) or out.stderr[-1500:], flush=True)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("run: ")]
    return Path(line[-1][5:].strip()) if line else done


def ceiling_failures(runs) -> list[str]:
    """A run whose read ceiling is above the memory's theoretical peak (kbench.timing.hardware.ceiling_problem):
    its fractions of the ceiling in the table above are no figures."""
    from kbench.timing.hardware import ceiling_problem

    out = []
    for r in runs:
        why = ceiling_problem(r.manifest.get("read_bandwidth_gbs"), r.manifest.get("memory_peak_gbs"))
        if why:
            out.append(f"{r.name}: {why}")
    return out


def summary_line(rows: pd.DataFrame, bad: list[str]) -> str:
    """The one line a campaign shows: the check, the pairs checked and their worst error, the winners."""
    k = rows[rows["kernel"].isin(MLA_KERNELS)] if len(rows) else rows
    err = {kv: pd.to_numeric(g["rel_err"], errors="coerce").max() for kv, g in k.groupby("kv_dtype")} if len(k) else {}
    checked = int(pd.to_numeric(k["rel_err"], errors="coerce").notna().sum()) if len(k) else 0
    wins = []
    if len(rows):
        for heads, g in pd.DataFrame(comparison_table(rows)[1], columns=comparison_table(rows)[0]).groupby("heads"):
            counts = g["winner"].value_counts().to_dict()
            wins.append(f"{heads} heads " + " ".join(f"{w} {n}" for w, n in sorted(counts.items())))
    errs = ", ".join(f"{kv} {e:.4f}" for kv, e in sorted(err.items()) if pd.notna(e))
    return (f"mla check {'PASSED' if not bad else 'FAILED'}: {checked} kernel/case pairs checked (max rel err "
            f"{errs or '-'}); winners: {'; '.join(wins) or '-'}")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/out/mla"))
    ap.add_argument("--runs", nargs="*", type=Path, help="finished run folders: tables and checks only")
    a = ap.parse_args(argv)
    from kbench.runs.store import load_run

    a.out.mkdir(parents=True, exist_ok=True)
    runs = list(a.runs or [])
    missing = []
    if not runs:
        runs_dir = a.out / "runs"
        runs_dir.mkdir(exist_ok=True)
        for name, args in SWEEPS:
            r = sweep(args, runs_dir, name)
            (runs if r else missing).append(r or name)
    loaded = [load_run(r) for r in runs]
    rows = pd.concat([r.rows for r in loaded], ignore_index=True) if loaded else pd.DataFrame()
    sm = int((loaded[-1].manifest.get("device") or {}).get("sm") or 0) if loaded else 0
    # the long table first; the errors, the answer and the verdict last (a campaign shows the last lines)
    parts = [f"device: {(loaded[-1].manifest.get('device') or {}).get('name') if loaded else '-'} (SM{sm})"]
    if len(rows):
        parts.append("== FlashMLA vs FlashInfer MLA fa3 vs fa2: us per call (fraction of the read ceiling), "
                     "winner and margin\n" + fmt_table(*comparison_table(rows)))
        trtllm = rows[rows["kernel"] == "trtllm-gen-mla"]
        if len(trtllm):
            parts.append(f"trtllm-gen-mla: {trtllm['status'].value_counts().to_dict()}; "
                         f"{str(trtllm['reason'].iloc[0])[:220]}")
        parts.append("== every MLA kernel against the float32 absorbed reference\n" + fmt_table(*error_table(rows)))
    trend_lines = []
    if runs:
        try:
            from kbench.report import build_report
            from kbench.report.mla import trend

            rep = build_report(runs, a.out / "report")
            trend_lines = trend(rep.cases)
            parts.append("== the report's MLA answer (OUT/report/report.md)\n" + "\n".join(trend_lines))
        except Exception as e:  # noqa: BLE001 - the tables above stand; say why the report did not build
            parts.append(f"report not built: {type(e).__name__}: {e}")
    bad = [f"sweep {m} did not finish (its log is in OUT/runs)" for m in missing]
    bad += failures(rows, sm) if len(rows) else ["no rows"]
    bad += ceiling_failures(loaded)
    if bad:
        parts.append("CHECK FAILED:\n  " + "\n  ".join(bad))
    parts.append(summary_line(rows, bad))
    text = "\n\n".join(parts)
    (a.out / "mla_check.txt").write_text(text + "\n")
    (a.out / "summary.json").write_text(json.dumps({
        "runs": [str(r) for r in runs], "sm": sm, "failures": bad, "trend": trend_lines,
        "errors": dict(zip(["headers", "rows"], error_table(rows))) if len(rows) else {},
        "comparison": dict(zip(["headers", "rows"], comparison_table(rows))) if len(rows) else {}}, indent=1))
    print(text)
    return 1 if bad else 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # piped to head: end quietly (set here: tests import this module)
    sys.exit(main(sys.argv[1:]))
