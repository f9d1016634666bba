"""A stand-in for the `kbench` command on a GPU machine, for the campaign driver's CPU tests (tests/test_campaign.py).

It writes run folders as kbench does (OUT/NAME-YYYYMMDD-HHMMSS/ with manifest.json and rows.jsonl, status
running -> complete or interrupted; --devices through .shards-NAME-.../shard-0/ and a merge), times nothing,
and behaves as the environment says:
  FAKE_LOG       append each command line here (one JSON list a line)
  FAKE_SLEEP     seconds to sleep before each row (a slow sweep, to be stopped by a step's time limit)
  FAKE_WRONG     a kernel whose rows are wrong (exit 1)
  FAKE_SCALE     "NAME=F,...": the medians of run NAME times F (two runs that differ)
  FAKE_JITTER    "NAME=P": run NAME's medians off by +-P% alternately
  FAKE_VALIDATE  JSON rows for validate-timer
FlashInfer's JIT, as far as compile time goes: a sweep "compiles" for 5 s (a module written under
FLASHINFER_WORKSPACE_BASE, default HOME) unless that module is there or $SITE/flashinfer/data/aot holds one (0.2 s).
SIGTERM is handled like kbench: the run is finalized as interrupted and the command exits 143.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import signal
import sys
import time
from pathlib import Path

KERNELS = ["trtllm-decode", "fa2-prefill"]
BASE_US = {"trtllm-decode": 70.0, "fa2-prefill": 80.0, "decode-wrapper": 80.0, "trtllm-fmha-v2": 240.0}


def opt(args: list[str], name: str, default=None):
    return args[args.index(name) + 1] if name in args else default


def new_run_dir(out: Path, name: str) -> Path:
    base = out / f"{name}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    p, n = base, 1
    while p.exists():
        n += 1
        p = Path(f"{base}-{n}")
    return p


def write_manifest(d: Path, m: dict) -> None:
    (d / "manifest.json").write_text(json.dumps(m))


def grid(args: list[str]) -> list[tuple[str, int, int]]:
    kernels = opt(args, "--kernels", ",".join(KERNELS)).split(",")
    qs = [int(q) for q in opt(args, "--q-len", "1,2").split(",")]
    bss = [int(b) for b in opt(args, "--batch-size", "16").split(",")]
    return [(k, b, q) for b in bss for q in qs for k in kernels]


def scale(name: str) -> float:
    for item in filter(None, os.environ.get("FAKE_SCALE", "").split(",")):
        n, _, f = item.partition("=")
        if name.startswith(n):
            return float(f)
    return 1.0


def jitter(name: str, i: int) -> float:
    for item in filter(None, os.environ.get("FAKE_JITTER", "").split(",")):
        n, _, p = item.partition("=")
        if name.startswith(n):
            return 1 + (float(p) / 100) * (1 if i % 2 else -1)
    return 1.0


def compile_s() -> float:
    ws = Path(os.environ.get("FLASHINFER_WORKSPACE_BASE") or os.environ.get("HOME", "/nonexistent"))
    module = ws / ".cache/flashinfer/cached_ops/xqa/xqa.so"
    if module.exists() or list(Path(os.environ.get("SITE", "/nonexistent")).glob("flashinfer/data/aot/*/*.so")):
        return 0.2
    module.parent.mkdir(parents=True, exist_ok=True)
    module.write_bytes(b"module")
    return 5.0


def sweep(run: Path, m: dict) -> int:
    """Measure what the journal lacks; finalize. The exit code kbench would give."""
    args, name = m["fake_args"], m["fake_name"]
    slow = dict(x.split("=") for x in [opt(args, "--slow-kernel")] if x)
    journal = run / "rows.jsonl"
    done = set()
    if journal.exists():
        for line in journal.read_text().splitlines():
            r = json.loads(line)
            done.add((r["kernel"], r["case_id"]))
    m["status"] = "running"
    write_manifest(run, m)
    t0 = time.time()
    compiled = compile_s()
    stopped = {"sig": None}

    def on_term(signum, frame):
        stopped["sig"] = signum
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    rc, status = 0, "complete"
    try:
        with open(journal, "a") as j:
            for i, (k, b, q) in enumerate(grid(args)):
                case = f"bs{b}-q{q}-kv{opt(args, '--kv-len', '4096')}"
                if (k, case) in done:
                    continue
                time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
                row = {"kernel": k, "path": "decode" if "decode" in k else "context", "case_id": case,
                       "batch_size": b, "q_len": q, "status": "ok", "reason": "", "median_us": None,
                       "measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
                if k == "test-oob-write":
                    row.update(status="failed", reason="CUDA error: an illegal memory access was encountered")
                elif k == os.environ.get("FAKE_WRONG"):
                    row.update(status="wrong", reason="rel err 0.5 > tolerance")
                else:
                    row["median_us"] = BASE_US.get(k, 100.0) * q ** 0.1 * scale(name) * jitter(name, i) * \
                        int(slow.get(k, 1))
                j.write(json.dumps(row) + "\n")
                j.flush()
                if row["status"] == "failed":
                    if "--no-isolate" in args:
                        status, rc = "interrupted", 1
                        m["stopped_by"] = "CUDA context lost"
                        break
                    m["worker_restarts"] = m.get("worker_restarts", 0) + 1
                if row["status"] == "wrong":
                    rc = 1
    except KeyboardInterrupt:
        status, rc = "interrupted", 128 + (stopped["sig"] or signal.SIGINT)
        m["stopped_by"] = "stopped by SIGTERM"
    prev = m.get("wall_s")
    if prev:
        m.setdefault("wall_s_earlier", []).append(prev)
    m["wall_s"] = {"compile_s": compiled, "timing_s": round(time.time() - t0, 3),
                   "total_s": round(time.time() - t0 + compiled, 3), "first_ok_row_s": 0.5}
    m["compile"] = {"mode": "stream", "built": 1 if compiled > 1 else 0, "waited_s": 0.1}
    m["status"] = status
    m["isolated"] = "--no-isolate" not in args
    write_manifest(run, m)
    print(f"run: {run}")
    return rc


def main(argv: list[str]) -> int:
    if os.environ.get("FAKE_LOG"):
        with open(os.environ["FAKE_LOG"], "a") as f:
            f.write(json.dumps(argv) + "\n")
    cmd, args = argv[0], argv[1:]
    if cmd == "sweep":
        if "--resume" in args:
            run = Path(opt(args, "--resume"))
            m = json.loads((run / "manifest.json").read_text())
            if m.get("status") == "complete":
                print(f"{run} is complete: nothing to resume (no file touched)")
                return 0
            return sweep(run, m)
        out, name = Path(opt(args, "--out", "results")), opt(args, "--name", "draft-extend")
        if "--devices" in args:
            work = out / f".shards-{name}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
            shard = new_run_dir(work / "shard-0", f"{name}-shard0")
            shard.mkdir(parents=True)
            rc = sweep(shard, {"fake_args": args, "fake_name": name})
            if rc not in (0, 1):
                return rc
            return merge([shard], out, name)
        run = new_run_dir(out, name)
        run.mkdir(parents=True)
        return sweep(run, {"fake_args": args, "fake_name": name, "command_line": "kbench sweep " + " ".join(args)})
    if cmd == "merge":
        return merge([Path(a) for a in args if not a.startswith("--") and a not in (opt(args, "--out"), opt(args, "--name"))],
                     Path(opt(args, "--out", "results")), opt(args, "--name"))
    if cmd == "gate":
        return gate(Path(opt(args, "--baseline")), Path(opt(args, "--candidate")), Path(opt(args, "--json")),
                    "--allow-missing" in args)
    if cmd == "kernels":
        print(json.dumps({"device": {"cuda": True, "name": "NVIDIA H200", "sm": 90, "torch_version": "2.11",
                                     "cuda_version": "13.0", "flashinfer_version": "0.7.4", "flashinfer_error": None},
                          "kernels": [{"kernel": k, "available": True} for k in KERNELS]}))
        return 0
    if cmd == "env":
        print("device: NVIDIA H200 (SM90)")
        return 0
    if cmd == "prebuild" and "--load" in args:  # the line kbench prints; the modules are the carried ones
        print(f"{opt(args, '--load')}: 0 modules installed, 1 already there (FlashInfer 0.7.4, SM90)")
        return 0
    if cmd == "validate-timer":
        rows = json.loads(os.environ.get("FAKE_VALIDATE", "[]"))
        Path(opt(args, "--out")).write_text(json.dumps(rows))
        return 0
    print(f"error: fake kbench: no command {cmd}", file=sys.stderr)
    return 2


def merge(runs: list[Path], out: Path, name: str) -> int:
    d = new_run_dir(out, name)
    d.mkdir(parents=True)
    rows = "".join((r / "rows.jsonl").read_text() for r in runs)
    (d / "rows.jsonl").write_text(rows)
    m = json.loads((runs[0] / "manifest.json").read_text())
    m["status"] = "complete" if all(json.loads((r / "manifest.json").read_text())["status"] == "complete"
                                    for r in runs) else "partial"
    write_manifest(d, m)
    print(f"run: {d}")
    return 0


def gate(base: Path, cand: Path, js: Path, allow_missing: bool) -> int:
    def rows(p):
        return {(r["kernel"], r["case_id"]): r for r in map(json.loads, (p / "rows.jsonl").read_text().splitlines())}

    b, c = rows(base), rows(cand)
    out = []
    for key, rb in b.items():
        rc = c.get(key)
        if rc is None:
            outcome = "missing"
        elif rb["status"] != "ok" or rc["status"] != "ok":
            outcome = "not-compared"
        else:
            outcome = "regression" if rc["median_us"] > rb["median_us"] * 1.05 else "pass"
        out.append({"kernel": key[0], "case_id": key[1], "outcome": outcome,
                    "fails": outcome == "regression" or (outcome == "missing" and not allow_missing)})
    counts: dict[str, int] = {}
    for r in out:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    passed = not any(r["fails"] for r in out)
    js.write_text(json.dumps({"passed": passed, "exit_code": 0 if passed else 1, "counts": counts, "rows": out}))
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
