"""One worker process per GPU over a deterministic partition of the cases, then one merged run.

`kbench sweep --devices 0,1` starts one worker process per listed GPU (each GPU once, and only GPUs that
exist), each running the sweep's shard i/N on its device, waits, and merges the shard runs. From Python,
run_on_devices takes any list (the CPU tests run two workers on "device 0"). A worker gets the same
`kbench.engine.measure.Payload` as an isolated worker (the scenario as data and the options), written to a JSON
file beside its log, plus its shard, device and output folder. On a cluster,
run the `--shard i/N` slices yourself (a Slurm array, a Kubernetes indexed job) and `kbench merge` them.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from kbench import files
from kbench.errors import BadInput, KbenchError
from kbench.engine.measure import Payload
from kbench.runs.merge import merge_runs


@dataclass
class Worker:
    shard: int
    device: int
    proc: subprocess.Popen
    out: Path
    log: Path

    def rows_done(self) -> int:
        journals = list(self.out.glob("*/rows.jsonl"))
        return sum(j.read_text(errors="replace").count("\n") for j in journals)


def run_on_devices(payload: Payload, devices: list[int], out_dir: str | Path, name: str,
                   on_poll=None, poll_s: float = 1.0) -> Path:
    """Run the sweep of `payload` (kbench.engine.sweep.sweep_payload) sharded over `devices`; returns the merged
    run folder."""
    import torch

    if torch.cuda.is_available():
        n_gpu = torch.cuda.device_count()
        bad = [d for d in devices if d >= n_gpu]
        if bad:
            raise BadInput(f"--devices: GPU {bad[0]} does not exist (this machine has {n_gpu})")
    work = Path(out_dir) / f".shards-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    work.mkdir(parents=True, exist_ok=True)
    n = len(devices)
    workers = []
    for i, d in enumerate(devices):
        out = work / f"shard-{i}"
        out.mkdir()
        log = work / f"shard-{i}.log"
        job = work / f"shard-{i}.json"
        mine = replace(payload, options={**payload.options, "shard": [i, n], "device_index": d, "out_dir": str(out),
                                         "run_name": f"{name}-shard{i}", "resume": None})
        job.write_text(json.dumps(mine.to_dict()), encoding="utf-8")
        cmd = [sys.executable, "-m", "kbench.engine.devices", str(job)]
        with open(log, "w") as lf:
            proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT)
        workers.append(Worker(i, d, proc, out, log))
    try:
        while any(w.proc.poll() is None for w in workers):
            if on_poll:
                on_poll(workers)
            time.sleep(poll_s)
    except KeyboardInterrupt:
        for w in workers:
            w.proc.terminate()
        raise
    if on_poll:
        on_poll(workers)
    failed = [w for w in workers if w.proc.returncode not in (0, 1)]  # 1: a kernel was wrong (rows kept)
    runs = [p for w in workers for p in w.out.iterdir() if (p / "manifest.json").exists()]
    if failed or len(runs) != n:
        w = failed[0] if failed else workers[0]
        tail = w.log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        raise KbenchError(f"worker for shard {w.shard} on GPU {w.device} exited {w.proc.returncode}: {tail[0]} "
                          f"(log: {w.log}; finish it with kbench sweep --resume and kbench merge)")
    return merge_runs(sorted(runs), out_dir, name, min_runs=1)


def worker_main(job: str) -> int:
    """One device's worker: the sweep of the payload in `job`. Exit 0 when done, 2 with one line on error."""
    from kbench.errors import first_line
    from kbench.engine.sweep import Sweep, SweepOptions
    from kbench.runs.signals import terminate_as_interrupt

    try:
        payload = Payload(**files.read_json(job, f"worker job {job}"))
        opts = {k: v for k, v in payload.options.items() if k in SweepOptions.__dataclass_fields__}
        opts["shard"] = tuple(opts["shard"]) if opts.get("shard") else None
        with terminate_as_interrupt():  # the parent's terminate(): the run ends interrupted, its build stopped
            result = Sweep(payload.scenario_obj(), SweepOptions(**opts)).run()
    except Exception as e:  # the parent shows this line
        print(f"error: {first_line(e)}", flush=True)
        return 2
    print(f"rows: {len(result.rows)}; run: {result.run_dir}", flush=True)
    if result.error:  # a fault stopped an in-process sweep: rows kept, as `kbench sweep` exits
        print(f"stopped: {result.error}", flush=True)
        return 1
    return 130 if result.status == "interrupted" else 0


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1]))
