"""Where an interleaved A/B's wall time goes, and how noisy its rounds are: one `--repeat auto` pair on real vLLM
CPU server(s), B behind the stretch proxy of benchmarks/gate_alarms.py, every step of every batch timed.

    python benchmarks/gate_round_time.py [--servers two|one] [--condition stretch-25%] [--budget 120]
        [--batches-per-round 3] [--url URL [--url-b URL]] [--out DIR]

Prints, per round, the wall time against the batches' own streaming time; the time per batch of each step
(cache flush, /metrics before, the streamed batch, /metrics after until the server counted the batch, the journal
and manifest writes); the rounds reached; and per case and metric the SD (plain and robust) of the per-round log
B/A ratio, with the rounds a one-sided paired test needs to see the condition's change beyond the 5% threshold at
alpha 0.01 (fixed sample), under the earlier rule (Bonferroni split 6 alpha / (pi^2 k^2): the look whose rounds
reach its alpha) and under the run's rule (O'Brien-Fleming spending: the fewest planned rounds whose last look
reaches it). The figures are
quoted in docs/gate.md with the machine's load.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics as st
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


class Timers:
    def __init__(self):
        self.t = defaultdict(float)
        self.n = defaultdict(int)

    def wrap(self, owner, name, label):
        orig = getattr(owner, name)

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return orig(*a, **k)
            finally:
                self.t[label] += time.perf_counter() - t0
                self.n[label] += 1

        setattr(owner, name, timed)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", choices=("one", "two"), default="two")
    ap.add_argument("--condition", default="stretch-25%")
    ap.add_argument("--budget", type=float, default=120)
    ap.add_argument("--batches-per-round", type=int, default=3)
    ap.add_argument("--url", default=None)
    ap.add_argument("--url-b", default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    import gate_alarms as ga
    from kbench.gate import sequential
    from kbench.gate.power import robust_scale
    from kbench.runs.session import RunSession
    from kbench.server import bench, counters, client
    from kbench.server.interleave import run_interleaved

    tm = Timers()
    tm.wrap(bench.Runner, "timed_batch", "batch (all)")
    tm.wrap(bench.Runner, "_stream", "stream")
    tm.wrap(client.ServerClient, "flush_with_retry", "flush")
    tm.wrap(counters, "snapshot", "metrics GETs")
    tm.wrap(counters, "settled_snapshot", "metrics after (settled)")
    tm.wrap(RunSession, "append", "journal append")
    tm.wrap(RunSession, "update_manifest", "manifest update")
    tm.wrap(sequential, "decide_case", "looks (decide_case)")

    started, urls = [], [a.url, a.url_b]
    n_srv = 2 if a.servers == "two" else 1
    if None in urls[:n_srv]:
        sys.path.insert(0, str(ROOT / "tests" / "servers"))
        import vllm_cpu

        for i in range(n_srv):
            if urls[i] is None:
                started.append(vllm_cpu.start_server())
                urls[i] = started[-1].url
    pa, pb = ga.Proxy(urls[0]), ga.Proxy(urls[1] if n_srv == 2 else urls[0])
    out = Path(a.out or tempfile.mkdtemp(prefix="kbench-round-time-"))
    try:
        lat = ga.calibrate(pa, out)
        pb.set(a.condition, lat)
        tm.t.clear(), tm.n.clear()
        load0 = os.getloadavg()
        t0 = time.monotonic()
        ab = run_interleaved(ga.config(pa.url, "rt", out, 400, url_b=pb.url, repeat_auto=True, budget=a.budget,
                                       batches_per_round=a.batches_per_round))
        wall = time.monotonic() - t0
        load1 = os.getloadavg()
    finally:
        pa.close(), pb.close()
        for s in started:
            s.stop()
    from kbench.runs.store import load_run

    rounds = ab.rounds
    print(f"servers {a.servers}, {a.condition}, K={a.batches_per_round}, budget {a.budget:g} s: {rounds} rounds in "
          f"{wall:.1f} s ({wall / max(rounds, 1):.2f} s a round), stopped: {ab.ended.get('stopped')}; load average "
          f"{load0[0]:.1f} -> {load1[0]:.1f}")
    nb = tm.n["batch (all)"] or 1
    print(f"{nb} batches; per round: batch streams {tm.t['stream'] / max(rounds, 1):.2f} s of "
          f"{wall / max(rounds, 1):.2f} s wall")
    for label in tm.t:
        print(f"  {label:26s} {tm.t[label]:7.1f} s total, {1000 * tm.t[label] / nb:6.1f} ms a batch "
              f"({tm.n[label]} calls)")
    rest = wall - tm.t["batch (all)"] - tm.t["journal append"] - tm.t["manifest update"] - tm.t["looks (decide_case)"]
    print(f"  {'other (loop, warm-up)':26s} {rest:7.1f} s")
    rows = {s: {r["case_id"]: r for r in load_run(d).rows.to_dict("records")}
            for s, d in (("a", ab.a.run_dir), ("b", ab.b.run_dir))}
    kind, eff = ga.effect_of(a.condition)
    target = math.log1p(eff) - math.log1p(0.05) if eff else None
    from statistics import NormalDist

    z = NormalDist().inv_cdf
    report = {"servers": a.servers, "condition": a.condition, "rounds": rounds, "wall_s": round(wall, 1),
              "load": [round(load0[0], 2), round(load1[0], 2)], "steps_s": {k: round(v, 2) for k, v in tm.t.items()},
              "batches": nb, "cases": {}}
    print("per-round log(B/A): case, metric, rounds, median change, SD, robust SD, rounds needed (fixed alpha 0.01; "
          "the earlier Bonferroni split; O'Brien-Fleming spending over a plan of that many rounds)")
    for cid, ra in rows["a"].items():
        rb = rows["b"].get(cid)
        for m in ("latency", "last_ttft", "output_throughput", "input_throughput"):
            xa, xb = ra.get(f"{m}_samples"), rb.get(f"{m}_samples") if rb else None
            if xa is None or xb is None or len(xa) != len(xb) or len(xa) < 3:
                continue
            d = [math.log(y / x) for x, y in zip(xa, xb) if x > 0 and y > 0]
            sd, rsd = st.stdev(d), robust_scale(d)
            need = seq = plan_n = None
            if target:
                def rounds_at(al):  # the paired test's rounds for the target at alpha al, power 0.8
                    return (math.pi / 3) * ((z(1 - al) + z(0.8)) * rsd / target) ** 2

                need = math.ceil(rounds_at(0.01))
                look = 1  # the earlier rule: the look whose rounds reach what its alpha needs
                n = sequential.first_look(0.01)
                while True:
                    if rounds_at(sequential.alpha_at(look, 0.01)) <= n or look > 60:
                        break
                    look, n = look + 1, sequential.next_look(n)
                seq = n
                for n_plan in range(8, 5000):  # the run's rule: the plan whose last look's alpha reaches it
                    plan = sequential.Plan(0.01, n_plan)
                    steps = [plan.test_alpha(x) for x in plan.schedule()]
                    if rounds_at(steps[-1]) <= n_plan:
                        plan_n = n_plan
                        break
            print(f"  {cid:16s} {m:18s} {len(d):4d} {math.expm1(st.median(d)):+7.1%} {sd:6.3f} {rsd:6.3f} "
                  f"{need} {seq} {plan_n}")
            report["cases"][f"{cid} {m}"] = {"n": len(d), "change": math.expm1(st.median(d)), "sd": sd,
                                             "robust_sd": rsd, "rounds_fixed": need, "rounds_bonferroni": seq,
                                             "rounds_obrien_fleming": plan_n}
    (out / "round_time.json").write_text(json.dumps(report, indent=1))
    print(f"written {out / 'round_time.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
