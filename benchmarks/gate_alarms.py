"""False-alarm and miss rates of the server gate on a real (CPU) vLLM server: how often `kbench gate` fails an A/A
pair (nothing changed), quiet and with a competing CPU load during one side, and how often it catches a real
slowdown of 10% and 25%, for the plain procedure (two server-bench runs, one after the other) and the interleaved
one (one server-bench run alternating A and B in ABBA order, gated as paired samples); procedure baseline3 gates
one run of B against a baseline of three runs of A (kbench baseline: the run-to-run spread widens the band).

    python benchmarks/gate_alarms.py [--pairs 20] [--procedures plain,interleaved,baseline3] [--out DIR]
        [--url URL]                      # a running vLLM server (default: start the tests' CPU server)
        [--pythonpath DIR]               # import kbench from DIR (e.g. a checkout of the commit before)

Both sides always go through a proxy of this script's own (so A and B pay the same proxy cost); for a slowdown
the B proxy holds each completion response back by ``effect x`` A's median latency of that case (measured at the
start, per case), a fixed delay per response, so latency grows by about the effect and TTFT by more. The load
is one process spinning on one core: during run B of a plain pair (the second half of the pair in time), and
during the second half of an interleaved run (started when half of its batches are done), the same moment of the
measurement a CI neighbour would hit. The gate is kbench's own (run_gate with its defaults); an alarm is a
failing gate (exit 1). Cases are tiny (batch 1 and 2, input 64, output 16): on the 2-core machine at load average
10 to 24 (shared with other work), the 80 pairs of one procedure took 9 minutes (plain), 12 (baseline3, 61 pairs)
and 17 (interleaved, 10 rounds); 40 rounds take about 35 s a pair (docs/gate.md has the figures). Each pair is one JSON line in OUT/pairs.jsonl (the verdict line kept); the
table at the end is procedure x condition: alarms / pairs, as docs/gate.md shows it.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
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
CONDITIONS = ("aa-quiet", "aa-load", "slow-10%", "slow-25%")
EFFECTS = {"slow-10%": 0.10, "slow-25%": 0.25}


class DelayProxy:
    """An HTTP proxy in front of the server; ``delays`` maps (prompts in the batch, max_tokens) of a completion
    request to the seconds its response is held back before it is forwarded."""

    def __init__(self, upstream: str):
        self.upstream = urlparse(upstream)
        self.delays: dict[tuple[int, int], float] = {}
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one request per connection: the end of the stream is the close

            def log_message(self, *a):
                pass

            def _forward(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                if body and self.path.startswith("/v1/completions"):
                    try:
                        req = json.loads(body)
                        d = proxy.delays.get((len(req.get("prompt") or []), int(req.get("max_tokens") or 0)), 0.0)
                    except (ValueError, TypeError):
                        d = 0.0
                    if d > 0:
                        time.sleep(d)
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=600)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "content-length", "connection"):
                        self.send_header(k, v)
                self.send_header("Connection", "close")
                self.end_headers()
                while True:
                    chunk = resp.read1(65536)
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    self.wfile.flush()
                conn.close()

            do_GET = do_POST = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


class Load:
    """One process spinning on one core (a CI neighbour), started and stopped by pid."""

    def __init__(self):
        self.proc = None

    def start(self):
        if self.proc is None:
            self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])

    def stop(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def config(url, name, out, repeat, **kw):
    from kbench.server import ServerBenchConfig

    return ServerBenchConfig(url=url, backend="vllm", batch_sizes=(1, 2), input_lens=(64,), output_lens=(16,),
                             repeat=repeat, run_name=name, out_dir=out, skip_warmup=True, seed=7, **kw)


def verdict(res) -> str:
    """The gate's last line, as `kbench gate` prints it (the one verdict)."""
    try:
        from kbench.gate.ab import verdict_line

        return verdict_line(res)
    except ImportError:  # the code before issue #46: the summary line
        return res.summary_line()


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


def interleaved_pair(pa, pb, out: Path, load: Load | None, repeat: int, est_s: float) -> tuple:
    from kbench.gate import run_gate
    from kbench.server.interleave import run_interleaved

    t0 = time.monotonic()
    timer = threading.Timer(est_s / 2, load.start) if load else None
    if timer:
        timer.start()
    try:
        ab = run_interleaved(config(pa.url, "ab", out, repeat, url_b=pb.url))
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


def calibrate(pa, out: Path) -> dict:
    """A's median latency per case (the delays of a slowdown are fractions of it)."""
    from kbench.server import run_server_bench

    r = run_server_bench(config(pa.url, "calibrate", out, 5))
    return {(row.batch_size, row.output_len): row.latency for row in r.rows if row.status == "ok"}


def table(results: list[dict], procedures) -> str:
    lines = ["| procedure | " + " | ".join(CONDITIONS) + " |", "|---|" + "---|" * len(CONDITIONS)]
    for p in procedures:
        cells = []
        for c in CONDITIONS:
            rs = [r for r in results if r["procedure"] == p and r["condition"] == c]
            alarms = sum(not r["passed"] for r in rs)
            cells.append(f"{alarms} / {len(rs)}" if rs else "-")
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--procedures", default="plain,interleaved")
    ap.add_argument("--conditions", default=",".join(CONDITIONS))
    ap.add_argument("--repeat-plain", type=int, default=5, help="repeats per run of the plain procedure")
    ap.add_argument("--repeat-interleaved", type=int, default=40, help="ABBA rounds of the interleaved procedure")
    ap.add_argument("--url", default=None, help="a running vLLM server (default: start the tests' CPU server)")
    ap.add_argument("--out", default="/tmp/kbench-gate-alarms")
    ap.add_argument("--pythonpath", default=None, help="import kbench from this folder")
    a = ap.parse_args(argv)
    if a.pythonpath:
        sys.path.insert(0, a.pythonpath)
    import kbench

    procedures = a.procedures.split(",")
    conditions = [c for c in a.conditions.split(",") if c]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "pairs.jsonl", "a")
    srv = None
    if a.url is None:
        sys.path.insert(0, str(ROOT / "tests" / "servers"))
        import vllm_cpu

        srv = vllm_cpu.start_server()
        url = srv.url
    else:
        url = a.url
    pa, pb = DelayProxy(url), DelayProxy(url)
    load = Load()
    results = []
    t_start = time.monotonic()
    uptime = os.getloadavg()
    print(f"kbench from {Path(kbench.__file__).parent}; server {url}; load average {uptime[0]:.1f}", flush=True)
    try:
        work = Path(tempfile.mkdtemp(prefix="runs-", dir=out))
        lat = calibrate(pa, work)
        print(f"A's latency per (batch, output): {json.dumps({str(k): round(v, 4) for k, v in lat.items()})}",
              flush=True)
        est = {}
        for cond in conditions:
            for proc in procedures:
                effect = EFFECTS.get(cond, 0.0)
                pb.delays = {(bs, out_len): effect * v for (bs, out_len), v in lat.items()}
                for i in range(a.pairs):
                    d = Path(tempfile.mkdtemp(prefix=f"{proc}-{cond}-", dir=work))
                    ld = load if cond == "aa-load" else None
                    if proc == "plain":
                        res, secs = plain_pair(pa, pb, d, ld, a.repeat_plain)
                    elif proc == "baseline3":
                        res, secs = baseline3_pair(pa, pb, d, ld, a.repeat_plain)
                    else:
                        res, secs = interleaved_pair(pa, pb, d, ld, a.repeat_interleaved,
                                                     est.get("interleaved", 30.0))
                    if cond == "aa-quiet" or proc not in est:
                        est[proc] = secs if proc not in est else 0.8 * est[proc] + 0.2 * secs
                    rec = {"procedure": proc, "condition": cond, "pair": i, "passed": res.passed,
                           "verdict": verdict(res), "seconds": round(secs, 1), "load_avg": round(os.getloadavg()[0], 2),
                           "regressions": [f"{r.case_id} {r.metric} {r.change:+.1%} ({r.note})"
                                           for r in res.rows if r.outcome == "regression"],
                           "samples": samples(res)}
                    results.append(rec)
                    log.write(json.dumps(rec) + "\n")
                    log.flush()
                    print(f"{proc:11s} {cond:9s} {i + 1:2d}/{a.pairs} {'PASS' if res.passed else 'FAIL'} "
                          f"{secs:5.1f} s  {rec['verdict'][:150]}", flush=True)
                    shutil.rmtree(d, ignore_errors=True)
    finally:
        load.stop()
        pa.close()
        pb.close()
        if srv is not None:
            srv.stop()
    print(f"\n{len(results)} pairs in {(time.monotonic() - t_start) / 60:.1f} min; alarms / pairs:\n")
    print(table(results, procedures))
    (out / "table.md").write_text(table(results, procedures) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
