"""Print a run's rows in brief (kernel, case, status, median, reason) and its isolation record: used by h200.sh."""
import sys

from kbench.runs.store import load_run

for path in sys.argv[1:]:
    run = load_run(path)
    m = run.manifest
    print(f"## {path}: status {m.get('status')}, isolated {m.get('isolated')}, worker restarts "
          f"{m.get('worker_restarts')}, context losses {len(m.get('cuda_context_losses') or [])}, "
          f"stopped_by {m.get('stopped_by', '')[:120]!r}")
    for r in run.rows.itertuples():
        med = "" if r.median_us != r.median_us else f"{r.median_us:.1f}"
        print(f"  {r.kernel:15s} {r.case_id[:60]:60s} {r.status:8s} {med:>8s} {str(r.reason or '')[:110]}")
