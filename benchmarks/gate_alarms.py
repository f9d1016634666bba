"""False alarms, misses and undecided answers of the server gate on a real (CPU) vLLM server, per procedure:
A/A pairs (nothing changed, quiet or with a CPU neighbour during the second half), and B slowed by 10% and 25%
two ways: a **uniform stretch** of B's whole response timeline (every chunk is forwarded at ``factor x`` the time
it arrived from the server since the request: TTFT, every token gap and the latency grow alike) and a **fixed
delay** before each of B's requests (``effect x`` A's median latency of that case: TTFT grows, the rest not).
A and B are either one server behind two proxies of this script (``--servers one``) or two separate server
processes (``--servers two``), each behind its own proxy.

    python benchmarks/gate_alarms.py [--pairs 20] [--procedures interleaved-40,auto] [--servers one|two]
        [--conditions aa-quiet,aa-load,stretch-10%,stretch-25%,delay-10%,delay-25%] [--out DIR]
        [--neighbour none|spin|bursty]   # a CPU neighbour through every pair (a CI machine's other job)
        [--url URL [--url-b URL]]        # running vLLM servers (default: start the tests' CPU server(s))
        [--pythonpath DIR]               # import kbench from DIR (e.g. a checkout of the commit before)

The neighbour runs from the first pair to the last: ``spin`` one process busy on one core, ``bursty`` one process
busy for 0.3 to 1.2 s, then idle for 0.3 to 1.2 s, again and again (the bursts of issue #54; seeded), ``none``
nothing (the aa-load condition still adds its own spinner to the second half of its pairs).

Procedures: ``interleaved-N`` (one run, N ABBA rounds, one batch per side a round), ``auto`` (``--repeat auto``:
rounds until the gate decides every case or ``--budget`` s, ``--batches-per-round`` K), ``plain`` (two runs one
after the other) and ``baseline3`` (three runs of A pooled, then B). The gate is kbench's own (run_gate, defaults:
threshold 5%, alpha 0.01, power 0.8). Per procedure the table gives: A/A false alarms (FAIL), P(FAIL | 10% and
25% slower), P(PASS | 25% slower), the INCONCLUSIVE rate, the wall time per pair and the load average, and, for the
interleaved procedures, the spread of the per-round B/A latency ratio (10th to 90th percentile over A/A pairs).
Each pair is one JSON line in OUT/pairs.jsonl; the table goes to OUT/table.md. The measured figures, the machine
and its load are in docs/gate.md, which is the one place they are stated.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
CONDITIONS = ("aa-quiet", "aa-load", "stretch-10%", "stretch-25%", "delay-10%", "delay-25%")


def effect_of(condition: str) -> tuple[str, float]:
    """("stretch" | "delay" | "none", fraction)."""
    if condition.startswith(("stretch-", "delay-")):
        kind, pct = condition.split("-")
        return kind, float(pct.rstrip("%")) / 100
    return "none", 0.0


class Proxy:
    """An HTTP proxy in front of a server. ``delays`` maps (prompts in the batch, max_tokens) of a completion
    request to seconds it is held back before it is forwarded; ``stretch`` > 1 forwards each chunk of a completion's
    response at ``stretch x`` the time it came from the server since the request arrived (the whole timeline
    stretched: TTFT, each token gap and the latency alike)."""

    def __init__(self, upstream: str):
        self.upstream = urlparse(upstream)
        self.delays: dict[tuple[int, int], float] = {}
        self.stretch = 1.0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one request per connection: the end of the stream is the close

            def log_message(self, *a):
                pass

            def _forward(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                completion = bool(body) and self.path.startswith("/v1/completions")
                if completion:
                    try:
                        req = json.loads(body)
                        d = proxy.delays.get((len(req.get("prompt") or []), int(req.get("max_tokens") or 0)), 0.0)
                    except (ValueError, TypeError):
                        d = 0.0
                    if d > 0:
                        time.sleep(d)
                stretch = proxy.stretch if completion else 1.0
                t1 = time.monotonic()
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=600)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                chunks: queue.Queue = queue.Queue()

                def read():  # upstream as it comes: each chunk with the moment it arrived
                    while True:
                        c = resp.read1(65536)
                        chunks.put((time.monotonic(), c))
                        if not c:
                            return

                threading.Thread(target=read, daemon=True).start()
                first = True
                while True:
                    arrived, chunk = chunks.get()
                    if stretch != 1.0:  # forwarded at its own moment, stretched (never its forwarding's)
                        wait = t1 + stretch * (arrived - t1) - time.monotonic()
                        if wait > 0:
                            time.sleep(wait)
                    if first:
                        self.send_response(resp.status)
                        for k, v in resp.getheaders():
                            if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                                self.send_header(k, v)
                        self.send_header("Connection", "close")
                        self.end_headers()
                        first = False
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    self.wfile.flush()
                conn.close()

            def _forward_quietly(self):
                try:
                    self._forward()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went away (a run stopped mid-batch): nothing to forward to

            do_GET = do_POST = _forward_quietly

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def set(self, condition: str, lat: dict) -> None:
        kind, eff = effect_of(condition)
        self.delays = {k: eff * v for k, v in lat.items()} if kind == "delay" else {}
        self.stretch = 1.0 + eff if kind == "stretch" else 1.0

    def close(self):
        self.server.shutdown()


DelayProxy = Proxy  # the name the earlier benchmark used


BURSTY = """
import random, time
rng = random.Random(54)
while True:
    end = time.monotonic() + rng.uniform(0.3, 1.2)
    while time.monotonic() < end:
        pass
    time.sleep(rng.uniform(0.3, 1.2))
"""


class Load:
    """One process on one core (a CI neighbour), started and stopped by pid: spinning, or in bursts (BURSTY)."""

    def __init__(self, kind: str = "spin"):
        self.proc = None
        self.code = BURSTY if kind == "bursty" else "while True: pass"

    def start(self):
        if self.proc is None:
            self.proc = subprocess.Popen([sys.executable, "-c", self.code])

    def stop(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def config(url, name, out, repeat, **kw):
    from kbench.server import ServerBenchConfig

    return ServerBenchConfig(url=url, backend="vllm", batch_sizes=(1, 2), input_lens=(64,), output_lens=(16,),
                             repeat=repeat, run_name=name, out_dir=out, skip_warmup=True, seed=7, **kw)


def verdict_word(res) -> str:
    v = getattr(res, "verdict", None)  # kbench before #54: PASS or FAIL only
    return v if isinstance(v, str) else ("PASS" if res.passed else "FAIL")


def plain_pair(pa, pb, out: Path, load: Load | None, repeat: int) -> tuple:
    from kbench.gate import run_gate
    from kbench.server import run_server_bench

    t0 = time.monotonic()
    a = run_server_bench(config(pa.url, "a", out, repeat))
    if load:
        load.start()
    try:
        b = run_server_bench(config(pb.url, "b", out, repeat))
    finally:
        if load:
            load.stop()
    res = run_gate(a.run_dir, b.run_dir)
    res.sides = (a.run_dir, b.run_dir)
    return res, time.monotonic() - t0


def baseline3_pair(pa, pb, out: Path, load: Load | None, repeat: int) -> tuple:
    """Three runs of A pooled into a baseline (kbench baseline), then one run of B gated against it."""
    from kbench.gate import run_gate, write_multi_baseline
    from kbench.server import run_server_bench

    t0 = time.monotonic()
    runs = [run_server_bench(config(pa.url, f"a{i}", out, repeat)).run_dir for i in range(3)]
    base, _, _ = write_multi_baseline(runs, "a3", out / "baselines")
    if load:
        load.start()
    try:
        b = run_server_bench(config(pb.url, "b", out, repeat))
    finally:
        if load:
            load.stop()
    return run_gate(base, b.run_dir), time.monotonic() - t0


def interleaved_pair(pa, pb, out: Path, load: Load | None, repeat: int, est_s: float, **kw) -> tuple:
    """One interleaved run (kw: repeat_auto, budget, batches_per_round of kbench after #54), gated paired."""
    from kbench.gate import run_gate
    from kbench.server.interleave import run_interleaved

    t0 = time.monotonic()
    timer = threading.Timer(est_s / 2, load.start) if load else None
    if timer:
        timer.start()
    try:
        ab = run_interleaved(config(pa.url, "ab", out, repeat, url_b=pb.url, **kw))
    finally:
        if timer:
            timer.cancel()
            load.stop()
    res = run_gate(ab.a.run_dir, ab.b.run_dir)
    res.sides = (ab.a.run_dir, ab.b.run_dir)
    return res, time.monotonic() - t0


def samples(res) -> dict:
    """Each case's latency and TTFT samples on A and on B (kept in pairs.jsonl, to study the rule offline)."""
    from kbench.runs.store import load_run

    if not getattr(res, "sides", None):
        return {}
    out = {}
    for side, d in zip("ab", res.sides):
        for rec in load_run(d).rows.to_dict("records"):
            for m in ("latency", "last_ttft", "output_throughput"):
                out.setdefault(rec["case_id"], {}).setdefault(m, {})[side] = [round(float(x), 6) for x in
                                                                            (rec.get(f"{m}_samples") or [])]
    return out


def case_ratios(m: dict) -> list[float]:
    """One case's per-round B/A latency ratios (samples() of a pair; none when the sides' rounds differ)."""
    a, b = m.get("latency", {}).get("a", []), m.get("latency", {}).get("b", [])
    return [y / x for x, y in zip(a, b) if x > 0] if len(a) == len(b) else []


def ratio_spread(samples_: dict) -> list[float]:
    """The per-round B/A latency ratios of a pair (every case), for the spread the table reports."""
    return [x for m in samples_.values() for x in case_ratios(m)]


def calibrate(pa, out: Path) -> dict:
    """A's median latency per case (the delays of a slowdown are fractions of it)."""
    from kbench.server import run_server_bench

    r = run_server_bench(config(pa.url, "calibrate", out, 5))
    return {(row.batch_size, row.output_len): row.latency for row in r.rows if row.status == "ok"}


def _rate(rs: list[dict], word: str) -> str:
    return f"{sum(r['verdict_word'] == word for r in rs)} / {len(rs)}" if rs else "-"


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def table(results: list[dict], procedures) -> str:
    """Per procedure and slowdown kind: pairs, A/A alarms, P(FAIL | 10%), P(FAIL | 25%), P(PASS | 25%),
    INCONCLUSIVE (all pairs), wall per pair (median, max), load average (min to max), B/A ratio spread (A/A)."""
    head = ("| procedure | servers | neighbour | slowdown | pairs | A/A alarms | P(FAIL \\| 10%) | P(FAIL \\| 25%) | P(PASS \\| 25%) "
            "| INCONCLUSIVE | wall per pair (A/A / slowed, median) | load | A/A B/A ratio p10-p90 |")
    lines = [head, "|" + "---|" * 13]
    for p in procedures:
        for servers, nb in sorted({(r["servers"], r.get("neighbour", "-")) for r in results
                                   if r["procedure"] == p}):
            mine = [r for r in results if r["procedure"] == p and r["servers"] == servers
                    and r.get("neighbour", "-") == nb]
            aa = [r for r in mine if r["condition"].startswith("aa-")]
            for kind in ("stretch", "delay"):
                slow = [r for r in mine if r["condition"].startswith(kind)]
                if not slow and kind == "delay":
                    continue
                rows = aa + slow
                s10 = [r for r in slow if r["condition"].endswith("-10%")]
                s25 = [r for r in slow if r["condition"].endswith("-25%")]
                loads = [x for r in rows for x in (r.get("load_start", r["load_avg"]), r["load_avg"])]
                ratios = [x for r in aa for x in r.get("ratios", [])]
                spread = f"{_pct(ratios, 0.1):.2f} to {_pct(ratios, 0.9):.2f}" if ratios else "-"
                lines.append(
                    f"| {p} | {servers} | {nb} | {kind} | {len(rows)} | {_rate(aa, 'FAIL')} | {_rate(s10, 'FAIL')} | "
                    f"{_rate(s25, 'FAIL')} | {_rate(s25, 'PASS')} | {_rate(rows, 'INCONCLUSIVE')} | "
                    + " / ".join(f"{statistics.median(x):.0f} s" if x else "-" for x in
                                 ([r["seconds"] for r in aa], [r["seconds"] for r in slow])) + " | "
                    + (f"{min(loads):.1f} to {max(loads):.1f}" if loads else "-") + f" | {spread} |")
    return "\n".join(lines)


def pair_ratios(r: dict) -> list[float]:
    """A pair's median B/A latency ratio of each case (its rounds' per-round ratios, their median)."""
    out = []
    for m in (r.get("samples") or {}).values():
        ratios = [x for x in case_ratios(m) if x > 0]
        if ratios:
            out.append(statistics.median(ratios))
    return out


def offsets(results: list[dict]) -> str:
    """Where a pair's answer comes from, per servers and condition: each pair's median B/A latency ratio of each
    case over all its rounds. On A/A pairs that is the two sides' own offset (0 for one server behind two
    proxies; two server processes differ), which no count of rounds within a pair averages away; on slowed pairs
    it is the slowdown as measured, offset included. A/A case medians beyond the gate's 5% are counted."""
    lines = ["| servers | condition | pairs | median B/A latency per pair and case: p10 to p90 (min to max) "
             "| A/A beyond +-5% |", "|---|---|---|---|---|"]
    for servers, cond in sorted({(r.get("servers", "one"), r["condition"]) for r in results}):
        mine = [r for r in results if r.get("servers", "one") == servers and r["condition"] == cond]
        xs = [x for r in mine for x in pair_ratios(r)]
        if not xs:
            continue
        beyond = f"{sum(abs(x - 1) > 0.05 for x in xs)} of {len(xs)}" if cond.startswith("aa-") else "-"
        lines.append(f"| {servers} | {cond} | {len(mine)} | {_pct(xs, 0.1):.2f} to {_pct(xs, 0.9):.2f} "
                     f"({min(xs):.2f} to {max(xs):.2f}) | {beyond} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--procedures", default="interleaved-40,auto")
    ap.add_argument("--conditions", default=",".join(CONDITIONS))
    ap.add_argument("--servers", choices=("one", "two"), default="one",
                    help="one server behind two proxies, or two server processes")
    ap.add_argument("--repeat-plain", type=int, default=5, help="repeats per run of the plain procedure")
    ap.add_argument("--budget", type=float, default=300,
                    help="auto: server-bench --budget, the run's wall-clock seconds per pair")
    ap.add_argument("--batches-per-round", type=int, default=3, help="auto: batches per side per round")
    ap.add_argument("--neighbour", choices=("none", "spin", "bursty"), default="none",
                    help="a CPU neighbour through every pair")
    ap.add_argument("--url", default=None, help="a running vLLM server (default: start the tests' CPU server)")
    ap.add_argument("--url-b", default=None, help="--servers two: B's running server")
    ap.add_argument("--out", default="/tmp/kbench-gate-alarms")
    ap.add_argument("--pythonpath", default=None, help="import kbench from this folder")
    ap.add_argument("--keep-first", action="store_true", help="keep the first pair's run folders of each")
    a = ap.parse_args(argv)
    import signal

    # SIGTERM (a time limit) ends the run as Ctrl-C does: the servers it started are stopped, the table is kept
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if a.pythonpath:
        sys.path.insert(0, a.pythonpath)
    import kbench

    procedures = a.procedures.split(",")
    conditions = [c for c in a.conditions.split(",") if c]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "pairs.jsonl", "a")
    started = []
    urls = [a.url, a.url_b if a.servers == "two" else None]
    if None in urls[: 2 if a.servers == "two" else 1]:
        sys.path.insert(0, str(ROOT / "tests" / "servers"))
        import vllm_cpu

        for i in range(2 if a.servers == "two" else 1):
            if urls[i] is None:
                started.append(vllm_cpu.start_server())
                urls[i] = started[-1].url
    pa = Proxy(urls[0])
    pb = Proxy(urls[1] if a.servers == "two" else urls[0])
    load = Load()
    neighbour = Load(a.neighbour) if a.neighbour != "none" else None
    results = []
    t_start = time.monotonic()
    print(f"kbench from {Path(kbench.__file__).parent}; servers {urls}; load average {os.getloadavg()[0]:.1f}",
          flush=True)
    try:
        if neighbour:
            neighbour.start()
        work = Path(tempfile.mkdtemp(prefix="runs-", dir=out))
        lat = calibrate(pa, work)
        print(f"A's latency per (batch, output): {json.dumps({str(k): round(v, 4) for k, v in lat.items()})}",
              flush=True)
        est: dict[str, float] = {}
        for i in range(a.pairs):  # conditions and procedures take turns: each sees the same hours of the machine
            for cond in conditions:
                for proc in procedures:
                    pb.set(cond, lat)
                    load_start = os.getloadavg()[0]  # `uptime`'s 1-minute figure, at the start and the end
                    d = Path(tempfile.mkdtemp(prefix=f"{proc}-{cond}-", dir=work))
                    ld = load if cond == "aa-load" else None
                    if proc == "plain":
                        res, secs = plain_pair(pa, pb, d, ld, a.repeat_plain)
                    elif proc == "baseline3":
                        res, secs = baseline3_pair(pa, pb, d, ld, a.repeat_plain)
                    elif proc == "auto":
                        res, secs = interleaved_pair(pa, pb, d, ld, 400, est.get(proc, a.budget / 2),
                                                     repeat_auto=True, budget=a.budget,
                                                     batches_per_round=a.batches_per_round)
                    else:
                        res, secs = interleaved_pair(pa, pb, d, ld, int(proc.split("-")[1]), est.get(proc, 60.0))
                    est[proc] = secs if proc not in est else 0.7 * est[proc] + 0.3 * secs
                    smp = samples(res)
                    rec = {"procedure": proc, "servers": a.servers, "neighbour": a.neighbour, "condition": cond,
                           "pair": i,
                           "verdict_word": verdict_word(res), "passed": res.passed, "verdict": res.summary_line(),
                           "seconds": round(secs, 1), "load_avg": round(os.getloadavg()[0], 2),
                           "load_start": round(load_start, 2),
                           "stopped": (res.paired or {}).get("stopped") if getattr(res, "paired", None) else None,
                           "planned_rounds": ((res.paired or {}).get("planned_rounds")
                                              if getattr(res, "paired", None) else None),
                           "rounds": (res.paired or {}).get("rounds_run") if getattr(res, "paired", None) else None,
                           "regressions": [f"{r.case_id} {r.metric} {r.change:+.1%} ({r.note})"
                                           for r in res.rows if r.outcome == "regression"],
                           "ratios": [round(x, 4) for x in ratio_spread(smp)], "samples": smp}
                    results.append(rec)
                    log.write(json.dumps(rec) + "\n")
                    log.flush()
                    (out / "table.md").write_text(table(results, procedures) + "\n")  # a run cut short keeps it
                    print(f"{proc:14s} {cond:11s} {i + 1:2d}/{a.pairs} {rec['verdict_word']:12s} {secs:5.1f} s "
                          f"{rec['rounds']} rounds, load {load_start:.1f} -> {rec['load_avg']:.1f}  "
                          f"{rec['verdict'][:120]}", flush=True)
                    if i > 0 or not a.keep_first:
                        shutil.rmtree(d, ignore_errors=True)  # (the first pair's run folders: --keep-first)
    finally:
        load.stop()
        if neighbour:
            neighbour.stop()
        pa.close()
        pb.close()
        for srv in started:
            srv.stop()
    print(f"\n{len(results)} pairs in {(time.monotonic() - t_start) / 60:.1f} min:\n")
    tables = table(results, procedures) + "\n\n" + offsets(results)
    print(tables)
    (out / "table.md").write_text(tables + "\n")
    return 0


def load_pairs(path: str) -> list[dict]:
    """The pairs of a pairs.jsonl (several runs of this script appended to one), older records given today's
    fields."""
    results = [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
    for r in results:
        r.setdefault("servers", "one")
        r.setdefault("verdict_word", "PASS" if r.get("passed") else "FAIL")
    return results


if __name__ == "__main__":
    if sys.argv[1:2] == ["--table"]:
        pairs = load_pairs(sys.argv[2])
        print(table(pairs, list(dict.fromkeys(r["procedure"] for r in pairs))) + "\n\n" + offsets(pairs))
        sys.exit(0)
    sys.exit(main())
