"""The case loop of `kbench server-bench`: flush, (warm up), (warm the prefix cache), snapshot the server's
counters, send one batch, time its stream, snapshot again, write the row; ``repeat`` times per case.

Usable without click::

    from kbench.server import ServerBenchConfig, run_server_bench
    result = run_server_bench(ServerBenchConfig(url="http://127.0.0.1:30000", batch_sizes=(1, 8)))

A case that fails is a row (status failed, reason) and the run goes on unless fail_fast. The run folder's life
(new or resumed, lock, journal, manifest, how it ends) is a kbench.runs.session.RunSession, as a sweep's: a Ctrl-C
(or SIGTERM under kbench.runs.signals.terminate_as_interrupt) finalizes it as "interrupted" with every row measured
so far, then ServerBenchInterrupted is raised.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import random
import re
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

import requests

from kbench import __version__, files, redact, shell
from kbench.runs.atomic import write_text
from kbench.errors import BadInput, KbenchError
from kbench.values import INT32_MAX, SEED_MAX, int_in
from kbench.runs.outputs import given_path, writable_dir
from kbench.server import counters as ctr
from kbench.server.auth import API_KEY_ENV, HIDDEN, Credentials, origin, redact_url, split_url
from kbench.server.backends import BACKENDS, FALLBACK_VOCAB, Backend, ServerFacts, detect_backend
from kbench.server.client import ServerClient, ServerError, StreamError
from kbench.server.metrics import BatchTrace, metrics_from_trace
from kbench.server.prompts import PromptPattern, parse_prompt_pattern
from kbench.server.rows import ROW_KIND, SAMPLED, ServerBenchRow, case_id
from kbench.server.workload import write_workload
from kbench.runs.manifest import Manifest
from kbench.runs.session import RunSession
from kbench.runs.store import check_run_folder, now_iso

RESULT_JSONL = "result.jsonl"  # SGLang-style lines, always written inside the run folder too
WARMUP_INPUT_LEN, WARMUP_OUTPUT_LEN = 1024, 16  # SGLang's warm-up case


@dataclass(frozen=True)
class ServerCase:
    batch_size: int
    input_len: int
    output_len: int

    @property
    def case_id(self) -> str:
        return case_id(self.batch_size, self.input_len, self.output_len)


@dataclass
class ServerBenchConfig:
    url: str
    backend: str = "auto"  # sglang | vllm | auto
    batch_sizes: tuple[int, ...] = (1,)
    input_lens: tuple[int, ...] = (1024,)
    output_lens: tuple[int, ...] = (16,)
    run_name: str = "default"
    temperature: float = 0.0
    skip_warmup: bool = False
    flush_retries: int = 3  # total flush attempts per case (SGLang: 3 tries)
    flush_retry_wait: float = 2.0  # seconds between attempts (SGLang: 2)
    flush_timeout: float = 30.0  # ?timeout= for servers that wait for idle themselves
    request_timeout: float = 600.0  # the whole streamed batch, from sending to [DONE]
    profile: bool = False
    model: str | None = None
    seed: int = 1
    out_dir: str | Path = "results"
    result_filename: str | Path | None = None
    fail_fast: bool = False
    vocab_size: int | None = None  # token ids are drawn from [0, vocab_size); found from the server if None
    command: list[str] | None = None  # for the manifest
    resume: str | Path | None = None  # a run folder to finish: cases with a row in its journal are not re-run
    # SGLang's options that change what is measured (same meaning as in bench_one_batch_server)
    cache_hit_rate: float = 0.0  # warm the prefix cache with this fraction of each prompt before the batch
    return_logprob: bool = False
    client_stream_interval: int = 1  # SGLang's sampling_params.stream_interval (vLLM: a server flag)
    input_len_step_percentage: float = 0.0  # accepted and recorded; SGLang's tool does not use it either
    # kbench's own
    prompt_pattern: str = "random"  # random | repeat:N (kbench.server.prompts)
    repeat: int = 1  # timed batches per case (flush before each); the row holds their medians and samples
    # an interleaved A/B (kbench.server.interleave): B's URL (two servers), or a command that switches the one
    # server between A and B ({side} in it, and $KBENCH_AB_SIDE, say which), waited for up to switch_timeout s
    url_b: str | None = None
    switch_command: str | None = None
    switch_timeout: float = 600.0
    # rounds of an interleaved A/B (kbench.server.interleave): batches per side per round (their median is the
    # round's value: one burst on a busy machine does not decide a round), and --repeat auto: rounds are added
    # until the gate's rule decides every case or budget seconds pass (kbench.gate.sequential), with the gate's
    # threshold, alpha and power
    batches_per_round: int = 1
    repeat_auto: bool = False
    budget: float = 300.0
    threshold: float = 0.05
    alpha: float = 0.01
    power: float = 0.8
    show_report: bool = False  # print SGLang's markdown report at the end
    append_to_github_summary: bool = True  # ... and append it to $GITHUB_STEP_SUMMARY when that is set
    # API key, headers, the URL's password (kbench.server.auth): sent, never recorded or printed
    credentials: Credentials = field(default_factory=Credentials, repr=False, compare=False)

    def __post_init__(self):
        """The one place a URL enters kbench: its password moves into the credentials, and what is kept (the
        manifest's url and config, the rows' url column, messages) is the URL with *** in its place."""
        if self.credentials is None:
            self.credentials = Credentials()
        if isinstance(self.url, str):
            public, basic = split_url(self.url)
            if basic:
                c = self.credentials or Credentials()
                if c.api_key or any(n.lower() == "authorization" for n, _ in c.headers):
                    raise BadInput("a password in --url and an API key or Authorization header: give one (both are "
                                   "the Authorization header)")
                self.credentials = Credentials(c.api_key, c.headers, basic)
                self.url = public
        if isinstance(self.url_b, str) and split_url(self.url_b)[1]:
            raise BadInput("--url-b: a password in B's URL is not supported; both sides are sent the credentials "
                           "of --url (--api-key-file, --header)")

    def recorded(self) -> dict:
        """What a run's manifest keeps of this configuration: no credential value (auth names what was sent)."""
        cfg = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()
               if k not in ("command", "resume", "credentials")}
        cfg["auth"] = self.credentials.describe()
        if cfg.get("switch_command") is not None:  # a command line of its own: --api-key sk-... in it is hidden
            cfg["switch_command"] = redact.line(str(cfg["switch_command"]))
        if isinstance(cfg.get("url_b"), str):
            cfg["url_b"] = redact.userinfo(cfg["url_b"])
        return {"command": redact.argv(list(self.command if self.command is not None else sys.argv)),
                "url": self.url, "config": cfg}

    def cases(self) -> list[ServerCase]:
        return [ServerCase(b, i, o) for b, i, o in itertools.product(self.batch_sizes, self.input_lens,
                                                                       self.output_lens)]

    def validate(self) -> None:
        if not isinstance(self.url, str):
            raise BadInput(f"--url {self.url!r}: expected the server's base URL, e.g. http://127.0.0.1:30000")
        for name, vals in (("--batch-size", self.batch_sizes), ("--input-len", self.input_lens),
                           ("--output-len", self.output_lens)):
            if not isinstance(vals, (list, tuple)):
                raise BadInput(f"{name} {vals!r}: a list of integers (batch_sizes=(1, 16))")
        shown = redact_url(str(self.url))  # never a password in a message
        try:
            u = urlparse(self.url)
            port_ok = u.port is None or u.port > 0  # a port that is no number raises ValueError here
        except ValueError:
            port_ok = False
        if not port_ok or u.scheme not in ("http", "https") or not u.hostname:
            raise BadInput(f"--url {shown!r}: expected http://HOST:PORT or https://HOST:PORT")
        if origin(self.url) is None:
            raise BadInput(f"--url {shown!r}: Python's URL parser and the HTTP library's read two different servers "
                           f"in it (a backslash or an @ in the host part); give the server's URL plainly")
        if u.query or u.fragment:
            raise BadInput(f"--url {shown!r}: a base URL has no query or fragment (kbench adds the endpoint paths "
                           f"to it)")
        if self.backend not in ("auto", *BACKENDS):
            raise BadInput(f"--backend {self.backend!r}: expected sglang, vllm or auto")
        for name, vals in (("--batch-size", self.batch_sizes), ("--input-len", self.input_lens),
                           ("--output-len", self.output_lens)):
            if not vals:
                raise BadInput(f"{name}: give at least one value")
            for v in vals:
                if not int_in(v, 1):
                    raise BadInput(f"{name}: {v!r} is not a positive integer")
        if not int_in(self.seed, 0, SEED_MAX):
            raise BadInput(f"--seed {self.seed!r}: expected an integer in 0..2**63-1")
        if self.vocab_size is not None and not int_in(self.vocab_size, 2, INT32_MAX):
            raise BadInput(f"--vocab-size {self.vocab_size!r}: must be an integer in 2..{INT32_MAX}")
        if not int_in(self.flush_retries, 1):
            raise BadInput(f"--flush-retries {self.flush_retries!r}: must be at least 1 (it counts attempts)")
        for name, v, lo in (("--flush-retry-wait", self.flush_retry_wait, 0.0),
                            ("--flush-timeout", self.flush_timeout, 0.0),
                            ("--request-timeout", self.request_timeout, None), ("--temperature", self.temperature, 0.0)):
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (lo is None and v <= 0):
                raise BadInput(f"{name} {v!r}: must be a finite number {'> 0' if lo is None else '>= 0'}")
        if not isinstance(self.cache_hit_rate, (int, float)) or not 0.0 <= self.cache_hit_rate < 1.0:
            raise BadInput(f"--cache-hit-rate {self.cache_hit_rate!r}: must be a fraction in [0, 1)")
        if not int_in(self.batches_per_round, 1, 100):
            raise BadInput(f"--batches-per-round {self.batches_per_round!r}: must be an integer in 1..100")
        if self.repeat_auto:
            if not isinstance(self.budget, (int, float)) or not math.isfinite(self.budget) or self.budget <= 0:
                raise BadInput(f"--budget {self.budget!r}: must be a number of seconds > 0")
        for name, v, lo, hi in (("--threshold", self.threshold, 0.0, 1.0), ("--alpha", self.alpha, 0.0, 1.0),
                                ("--power", self.power, 0.5, 1.0)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo <= v < hi) or (name == "--alpha"
                                                                                                and v <= 0):
                raise BadInput(f"{name} {v!r}: must be a number in [{lo:g}, {hi:g})")
        for name, v in (("--client-stream-interval", self.client_stream_interval), ("--repeat", self.repeat)):
            if not int_in(v, 1):
                raise BadInput(f"{name} {v!r}: must be an integer >= 1")
        if not isinstance(self.input_len_step_percentage, (int, float)) or not math.isfinite(
                self.input_len_step_percentage) or self.input_len_step_percentage < 0:
            raise BadInput(f"--input-len-step-percentage {self.input_len_step_percentage!r}: must be a number >= 0")
        parse_prompt_pattern(self.prompt_pattern)
        if self.result_filename is not None:
            p = given_path(self.result_filename, "--result-filename", "result.jsonl", "file")
            if p.is_dir():
                raise BadInput(f"--result-filename {p}: is a folder")
            if not p.parent.is_dir():
                raise BadInput(f"--result-filename {p}: folder {p.parent} does not exist")


class Listener:
    """What the loop reports as it goes (the CLI draws progress bars from it). All methods are optional."""

    def run_started(self, run_dir: Path, backend: str, facts: ServerFacts, cases: list[ServerCase]) -> None: ...

    def case_started(self, case: ServerCase, warmup: bool) -> None: ...

    def tokens(self, case: ServerCase, done: int, total: int) -> None: ...

    def flush_retry(self, case: ServerCase, attempt: int, message: str, wait: float) -> None: ...

    def case_finished(self, case: ServerCase, row: ServerBenchRow, warmup: bool) -> None: ...

    def warning(self, message: str) -> None: ...

    def ab_batch(self, case: ServerCase, side: str, round_: int, rounds: int, latency: float | None,
                 reason: str) -> None:
        """One batch of an interleaved A/B done (kbench.server.interleave): its latency, or why it failed."""

    def ab_switch(self, side: str, command: str) -> None:
        """An interleaved A/B of one server runs its switch command to side ``side`` (a or b)."""

    def ab_look(self, look: int, rounds: int, alpha: float, decided: dict, cases: int) -> None:
        """--repeat auto looked at its rounds (kbench.gate.sequential): ``decided`` maps case -> pass | fail | out-of-reach (undecided, stopped: the plan cannot decide it)."""


@dataclass
class ServerBenchResult:
    run_dir: Path
    status: str  # complete | stopped (fail-fast) | interrupted
    backend: str
    facts: ServerFacts
    rows: list[ServerBenchRow] = field(default_factory=list)
    traces: dict[str, BatchTrace] = field(default_factory=dict)  # case_id -> the timed stream
    warmups: list[ServerBenchRow] = field(default_factory=list)
    report: str = ""  # SGLang's markdown report (show_report, or $GITHUB_STEP_SUMMARY set)

    @property
    def failed(self) -> list[ServerBenchRow]:
        return [r for r in self.rows if r.status == "failed"]

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0


class ServerBenchInterrupted(KbenchError):
    """Ctrl-C or SIGTERM: the rows measured so far are kept (the run folder is finalized as interrupted).
    exit_code is 128 + the signal: 130 for Ctrl-C, 143 for SIGTERM."""

    exit_code = 130

    def __init__(self, result: ServerBenchResult, signum: int | None = None):
        import signal as _signal

        self.signum = signum or _signal.SIGINT
        self.exit_code = 128 + int(self.signum)
        super().__init__(f"stopped by {_signal.Signals(self.signum).name}; {len(result.rows)} row(s) kept in "
                         f"{result.run_dir}; finish with: {shell.kbench('server-bench', '--resume', result.run_dir)}")
        self.result = result


def random_ids(rng: random.Random, batch_size: int, input_len: int, vocab: int) -> list[list[int]]:
    return PromptPattern().ids(rng, batch_size, input_len, vocab)


class Runner:
    """One server's side of a run: its client, its cases' prompts, warm-ups and timed batches (run_case for a
    plain run's case, timed_batch for one batch of an interleaved round), and the rows they make."""

    def __init__(self, cfg: ServerBenchConfig, listener: Listener, sleep: Callable[[float], None],
                 session: requests.Session | None):
        self.cfg = cfg
        self.ls = listener
        self.sleep = sleep
        self.metrics_unread: str | None = None  # the first /metrics read that failed (said once: _unread)
        self.client = ServerClient(cfg.url, timeout=min(30.0, cfg.request_timeout), session=session,
                                   credentials=cfg.credentials)
        self.backend: Backend | None = None
        self.vocab = FALLBACK_VOCAB

    def connect(self) -> tuple[str, ServerFacts]:
        cfg = self.cfg
        try:
            name = detect_backend(self.client) if cfg.backend == "auto" else cfg.backend
            self.backend = BACKENDS[name](self.client)
            facts = self.backend.discover(cfg.model, cfg.vocab_size)
        except ServerError as e:
            raise KbenchError(f"cannot use the server: {e}") from None
        for line in facts.ignored:
            self.ls.warning(line)
        if facts.vocab_size:
            self.vocab = facts.vocab_size
        else:
            self.ls.warning(f"vocabulary size not found (pass --vocab-size); drawing token ids from "
                            f"[0, {FALLBACK_VOCAB})")
            facts.vocab_size, facts.vocab_source = FALLBACK_VOCAB, "fallback"
        return name, facts

    def row(self, case: ServerCase, status: str, reason: str = "", **kw) -> ServerBenchRow:
        """The case's row with this run's fields (name, backend, URL, model, sampling) and ``status``/``reason``; kw:
        the measured columns. The one maker of a server-bench row: run_case here, an interleaved A/B's rounds
        (kbench.server.interleave) too."""
        warmup = kw.pop("warmup", False)
        return ServerBenchRow(case_id=case.case_id, run_name=self.cfg.run_name, backend=self.backend.name,
                              url=self.cfg.url, model=self.backend.facts.model, batch_size=case.batch_size,
                              input_len=case.input_len, output_len=case.output_len, status=status, reason=reason,
                              temperature=float(self.cfg.temperature), seed=self.cfg.seed,
                              profile=self.cfg.profile and not warmup,
                              measured_at=now_iso(), **kw)

    def run_case(self, case: ServerCase, warmup: bool = False) -> tuple[ServerBenchRow, BatchTrace | None]:
        """The case's timed batch(es): ``cfg.repeat`` of them (one for a warm-up), each after a flush. The row
        holds the median of each metric and, with repeats, every batch's value (``<metric>_samples``)."""
        cfg = self.cfg
        self.ls.case_started(case, warmup)
        ids = self.case_ids(case, warmup)
        reps = 1 if warmup else cfg.repeat
        done: list[dict] = []
        for rep in range(reps):
            one = self.timed_batch(case, ids, warmup, profiling=cfg.profile and not warmup and rep == 0)
            if one.get("reason"):
                return self.failed_row(case, one, warmup), one.get("trace")
            done.append(one)
        return self.case_row(case, done, warmup), done[-1]["trace"]

    def case_ids(self, case: ServerCase, warmup: bool = False, variant: int = 0) -> list[list[int]]:
        """The case's prompts (the same for every repeat, and for both sides of an interleaved A/B). variant > 0:
        another set of prompts of the same shape (an interleaved round's k-th batch of a side: prompts its server
        has not seen since its last flush, so that batch needs no flush of its own; kbench.server.interleave)."""
        pattern = parse_prompt_pattern(self.cfg.prompt_pattern)
        seed_key = f"{self.cfg.seed}-{'warmup-' if warmup else ''}{case.case_id}" + (
            f"-v{variant}" if variant else "")
        return pattern.ids(random.Random(seed_key), case.batch_size, case.input_len, self.vocab)

    def failed_row(self, case: ServerCase, one: dict, warmup: bool = False) -> ServerBenchRow:
        """The row of a case whose batch ``one`` (a timed_batch result) failed."""
        return self.row(case, "failed", one["reason"], warmup=warmup,
                        prompt_pattern=str(parse_prompt_pattern(self.cfg.prompt_pattern)),
                        **one["fkw"], **one.get("per_req", {}))

    def case_row(self, case: ServerCase, done: list[dict], warmup: bool = False,
                 rounds: list[int] | None = None) -> ServerBenchRow:
        """The ok row of a case from its timed batches (timed_batch results, in the order they ran): each metric's
        median and, with more than one batch, every batch's value. rounds: an interleaved A/B's round of each."""
        pattern = parse_prompt_pattern(self.cfg.prompt_pattern)
        reps = len(done)
        last = done[-1]
        vals = {k: [d["m"][k] for d in done if d["m"][k] is not None] for k in SAMPLED}  # None: a zero interval
        med = {k: statistics.median(v) if v else None for k, v in vals.items()}
        out_tp = med["output_throughput"]
        samples = {f"{k}_samples": v for k, v in vals.items()} if reps > 1 or rounds is not None else {}
        rates = [d["counters"].cache_hit_rate for d in done if d["counters"].cache_hit_rate is not None]
        tot = ctr.CaseCounters.total(d["counters"] for d in done)
        row = self.row(case, "ok", warmup=warmup, prompt_pattern=str(pattern), repeats=reps,
                       latency=med["latency"], last_ttft=med["last_ttft"],
                       input_throughput=med["input_throughput"], output_throughput=out_tp,
                       overall_throughput=med["overall_throughput"],
                       itl_ms=(1000.0 * case.batch_size / out_tp) if out_tp else None,
                       last_gen_throughput=last["gen"], acc_length=last["acc"],
                       cache_hit_rate=statistics.median(rates) if rates else None,
                       spec_drafts=tot.spec_drafts, spec_draft_tokens=tot.spec_draft_tokens,
                       spec_accepted_tokens=tot.spec_accepted_tokens,
                       **samples, **last["fkw"], **last["per_req"],
                       **({"sample_rounds": [float(r) for r in rounds]} if rounds is not None else {}))
        if tot.spec_drafts and tot.spec_accepted_tokens is not None:  # over all the case's batches
            row.acc_length, row.acceptance_rate = tot.acc_length, tot.acceptance_rate
        return row

    def timed_batch(self, case: ServerCase, ids: list[list[int]], warmup: bool, profiling: bool,
                    counters: bool = True, flush: bool = True) -> dict:
        """Flush, warm the prefix cache (--cache-hit-rate), snapshot /metrics, stream one batch, snapshot again.
        counters=False: no snapshots (the caller reads the counters around several batches: kbench.server.interleave),
        the batch's counters all None. flush=False: no flush (the caller knows the server has not seen these
        prompts since its last one: kbench.server.interleave); the row's flush_attempts say 0."""
        cfg, be = self.cfg, self.backend
        fkw = dict(flush_attempts=0, flush_seconds=0.0)
        if flush:
            done = self.client.flush_with_retry(
                be.flush_path, attempts=cfg.flush_retries, wait=cfg.flush_retry_wait,
                params=be.flush_params(cfg.flush_timeout), timeout=cfg.flush_timeout + 10.0, sleep=self.sleep,
                on_retry=lambda a, m, w: self.ls.flush_retry(case, a, m, w))
            fkw = dict(flush_attempts=done.attempts, flush_seconds=round(done.seconds, 4))
            if not done.ok:
                return {"reason": done.message, "fkw": fkw}
        if cfg.cache_hit_rate > 0 and not warmup:
            reason = self._warm_prefix(case, ids)
            if reason:
                return {"reason": reason, "fkw": fkw}
        if profiling:
            status, body = self._post_quiet("/start_profile")
            if status != 200:
                return {"reason": f"POST /start_profile -> {status} {body!r}", "fkw": fkw}
        before = self.snapshot() if not warmup and counters else None
        path, body = be.batch_request(ids, case.output_len, cfg.temperature, cfg.seed, cfg.return_logprob,
                                      cfg.client_stream_interval)
        trace = BatchTrace.empty(case.batch_size)
        reason = self._stream(case, path, body, trace)
        if profiling:
            status, pbody = self._post_quiet("/stop_profile")
            if status != 200 and not reason:
                reason = f"POST /stop_profile -> {status} {pbody!r}"
        per_req = dict(num_chunks=trace.num_chunks, completion_tokens=sum(r.completion_tokens for r in trace.requests),
                       cached_tokens=trace.cached_tokens,
                       req_ttft_s=[r.first_token_s for r in trace.requests if r.first_token_s is not None],
                       req_latency_s=[r.chunk_times[-1] for r in trace.requests if r.chunk_times],
                       req_output_tokens=[float(r.completion_tokens) for r in trace.requests])
        if reason:
            return {"reason": reason, "fkw": fkw, "per_req": per_req, "trace": trace}
        m = metrics_from_trace(trace, case.input_len, case.output_len)
        after = self.settled_snapshot(before, case.batch_size) if before else None
        gen, acc = be.after_case() if not warmup else (-1.0, -1.0)
        return {"m": {k: getattr(m, k) for k in SAMPLED}, "gen": gen, "acc": acc, "fkw": fkw, "per_req": per_req,
                "trace": trace, "counters": ctr.case_counters(be.name, before, after)}

    def snapshot(self) -> dict | None:
        """The server's counters now (kbench.server.counters.snapshot); a /metrics that does not answer is said
        once per run (the rows then lack the counters: acceptance, cache hits), not dropped silently."""
        unread: list[str] = []
        snap = ctr.snapshot(self.client, unread)
        self._unread(unread)
        return snap

    def settled_snapshot(self, before: dict | None, requests: int) -> dict | None:
        unread: list[str] = []
        snap = ctr.settled_snapshot(self.client, self.backend.name, before, requests, self.sleep, unread=unread)
        self._unread(unread)
        return snap

    def _unread(self, unread: list[str]) -> None:
        if unread and not self.metrics_unread:
            self.metrics_unread = unread[0]
            self.ls.warning(f"{self.cfg.url}/metrics did not answer ({unread[0]}): the server's counters of that "
                            f"batch (acceptance, cache hits) are not recorded; later misses are not repeated")

    def _stream(self, case: ServerCase, path: str, body: dict, trace: BatchTrace,
                 output_len: int | None = None) -> str:
        """Streams one batch into ``trace``; returns "" or the reason it failed."""
        output_len = case.output_len if output_len is None else output_len
        total = case.batch_size * output_len
        done = 0
        tic = time.perf_counter()
        try:
            for t, chunk in self.client.stream_events(path, body, timeout=self.cfg.request_timeout):
                if chunk is None:
                    trace.end_s = t - tic
                    break
                trace.num_chunks += 1
                for ev in self.backend.events(chunk):
                    trace.add(t - tic, ev)
                new_done = sum(r.completion_tokens for r in trace.requests)
                if new_done != done:
                    done = new_done
                    self.ls.tokens(case, min(done, total), total)
            trace.check(output_len)
        except StreamError as e:
            return str(e)
        return ""

    def _warm_prefix(self, case: ServerCase, ids: list[list[int]]) -> str:
        """SGLang's _warmup_cache: send the first int(input_len * rate) tokens of each prompt, 1 output token."""
        n = int(case.input_len * self.cfg.cache_hit_rate)
        if n <= 0:
            return ""
        path, body = self.backend.batch_request([x[:n] for x in ids], 1, 0.0, self.cfg.seed)
        trace = BatchTrace.empty(case.batch_size)
        reason = self._stream(case, path, body, trace, output_len=1)
        if reason:
            return f"prefix-cache warm-up ({n} tokens per prompt) failed: {reason}"
        return ""

    def _post_quiet(self, path: str) -> tuple[int | str, str]:
        try:
            status, body = self.client.post(path, json_body={})
            return status, body[:200]
        except ServerError as e:
            return "no reply", str(e)

    def warmup_case(self, bs: int) -> ServerCase | None:
        """SGLang's warm-up (input 1024, output 16) for this batch size, or the smallest case of it that the
        server takes when 1024 would be skipped; None when every case of this batch size is skipped."""
        first = ServerCase(bs, WARMUP_INPUT_LEN, WARMUP_OUTPUT_LEN)
        if self.backend.skip_reason(bs, first.input_len, first.output_len) is None:
            return first
        fits = [c for c in self.cfg.cases() if c.batch_size == bs
                and self.backend.skip_reason(bs, c.input_len, c.output_len) is None]
        return min(fits, key=lambda c: (c.input_len + c.output_len)) if fits else None


def append_lines(paths: list[Path], line: dict) -> None:
    """Adds one JSON line to each file, atomically: the file is rewritten whole (temporary file + rename), so a
    full disk or a kill leaves the old file, never a truncated line. The first path is the run's own file (never
    through a link); the others were named by the user (--result-filename, a regular file: check_outputs): a link
    is followed, its file rewritten and the link kept."""
    text = json.dumps(line) + "\n"
    for i, p in enumerate(paths):
        named = i > 0
        old = files.read_text(p, str(p), files.ROWS_MAX) if p.exists() else ""
        if old and not old.endswith("\n"):
            old += "\n"
        write_text(p, old + text, named=named)


def _run_cases(config: ServerBenchConfig, runner: Runner, ls: Listener, run: RunSession, cases: list[ServerCase],
               result: ServerBenchResult) -> None:
    """Each case not yet in the run (and, before the first case of a batch size, its warm-up), a row each."""
    line_files = [run.dir / RESULT_JSONL] + ([Path(config.result_filename)] if config.result_filename else [])
    ls.run_started(run.dir, result.backend, result.facts, cases)
    warmed: set[int] = set()
    for case in cases:
        skip = runner.backend.skip_reason(case.batch_size, case.input_len, case.output_len)
        if skip:
            row, trace = runner.row(case, "skipped", skip), None
        else:
            if not config.skip_warmup and case.batch_size not in warmed:
                warmed.add(case.batch_size)
                wc = runner.warmup_case(case.batch_size)
                if wc is not None:
                    wrow, _ = runner.run_case(wc, warmup=True)
                    result.warmups.append(wrow)
                    ls.case_finished(wc, wrow, True)
                    if wrow.status != "ok":
                        ls.warning(f"warm-up bs={case.batch_size} failed: {wrow.reason}")
            row, trace = runner.run_case(case)
        run.append(row.to_dict())
        result.rows.append(row)
        if trace is not None:
            result.traces[case.case_id] = trace
        if row.status == "ok":
            append_lines(line_files, row.result_line())
        ls.case_finished(case, row, False)
        if row.status == "failed" and config.fail_fast:
            run.status = "stopped"
            break


def run_server_bench(config: ServerBenchConfig, listener: Listener | None = None, *,
                     sleep: Callable[[float], None] = time.sleep,
                     session: requests.Session | None = None) -> ServerBenchResult:
    """Run every case of ``config`` against the server and write a run folder under ``config.out_dir``.

    ``sleep`` is what waits between flush attempts (tests pass a recorder). Raises BadInput for a bad
    config, KbenchError when the server cannot be used at all, ServerBenchInterrupted on Ctrl-C.
    """
    config.validate()
    check_outputs(config)
    ls = listener or Listener()
    runner = Runner(config, ls, sleep, session)
    backend, facts = runner.connect()
    if config.client_stream_interval != 1 and backend == "vllm":
        ls.warning("--client-stream-interval: vLLM has no per-request stream interval (it is the server's "
                   "--stream-interval); the stream's own interval is measured")
    if config.input_len_step_percentage:
        ls.warning("--input-len-step-percentage: recorded but, as in SGLang's bench_one_batch_server, every "
                   "prompt of a batch has the case's input length")
    cases = config.cases()
    if config.resume:
        run_session = RunSession.resume(config.resume, kind=ROW_KIND)
    else:
        run_session = RunSession.new(config.out_dir, f"server-bench-{config.run_name}",
                                     run_manifest(config, backend, facts))
    result = ServerBenchResult(run_session.dir, "running", backend, facts)
    try:
        with run_session as run:
            cases = [c for c in cases if (c.case_id,) not in run.done]
            _run_cases(config, runner, ls, run, cases, result)
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM under kbench.runs.signals.terminate_as_interrupt
        result.status = "interrupted"  # the session ended the run interrupted, every row so far kept
        raise ServerBenchInterrupted(result, getattr(e, "signum", None)) from None
    result.status = run_session.status
    write_workload(run_session.dir, facts.info, backend, facts.model)  # RUN/workload.jsonl for kbench recommend
    if config.show_report or (config.append_to_github_summary and os.environ.get("GITHUB_STEP_SUMMARY")):
        from kbench.server.summary import append_github_step_summary, report_summary

        result.report = report_summary(result.rows, config.input_lens, config.output_lens, config.cache_hit_rate,
                                       _int_or_1(facts.info.get("tp_size")), config.profile)
        if config.append_to_github_summary:
            append_github_step_summary(result.report)
    return result


def run_manifest(config: ServerBenchConfig, backend: str, facts: ServerFacts) -> Manifest:
    """A new server-bench run's manifest (no credential in it: kbench.server.auth)."""
    kept = config.recorded()
    return Manifest(kind=ROW_KIND, command=kept["command"], kbench_version=__version__, url=kept["url"],
                    backend=backend, model=facts.model, server=facts.info, vocab_size=facts.vocab_size,
                    vocab_source=facts.vocab_source, config=kept["config"], cases=[c.case_id for c in config.cases()])


def _int_or_1(v) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else 1


def check_outputs(config: ServerBenchConfig) -> None:
    """After config.validate(), before anything runs: the run folder can be written (--out, or the resumed run) and so can
    --result-filename; else BadInput (one `error:` line, exit 2)."""
    if config.resume:
        try:
            check_run_folder(config.resume)
        except BadInput as e:
            raise BadInput(f"--resume {e}") from None
        writable_dir(config.resume, "--resume")
    else:
        writable_dir(config.out_dir, "--out", create=False)  # made with the run folder, once the server answers
    if config.result_filename is not None:
        p = Path(config.result_filename)  # a folder or a missing parent: refused by config.validate()
        try:
            writable_dir(p.parent, "--result-filename's folder")
        except BadInput:
            fs = _kernel_file_system(p.parent)
            if fs is None:
                raise
            # the probe's own error misleads there: procfs answers "No such file or directory" for a folder it shows
            raise BadInput(f"--result-filename {p}: {p.parent} is on a {fs} file system (the kernel's own entries), "
                           f"where no file can be created; give a path on a disk") from None
        if p.exists() and not p.is_file():
            raise BadInput(f"--result-filename {p}: {files.kind_of(p.stat().st_mode)}, not a regular file")
        if p.exists() and not os.access(p, os.R_OK | os.W_OK):
            raise BadInput(f"--result-filename {p}: cannot write there (permission denied)")


# file systems of the kernel's own entries, where no file can be created (procfs answers ENOENT, sysfs EACCES)
_KERNEL_FILE_SYSTEMS = frozenset({"proc", "sysfs", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs",
                                  "configfs", "pstore", "bpf"})


def _kernel_file_system(folder: Path) -> str | None:
    """The type of the file system holding ``folder`` when it is one of the kernel's own (/proc, /sys), from
    /proc/self/mountinfo (the deepest mount point above the folder); None otherwise or where that is unknown."""
    real, best, fstype = os.path.realpath(folder), "", None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                left, sep, right = line.partition(" - ")
                fields = left.split()
                if not sep or len(fields) < 5 or not right.split():
                    continue
                mount = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])  # \040: a space
                inside = real == mount or real.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best):  # the deepest; the same point mounted again: the later one
                    best, fstype = mount, right.split()[0]
    except OSError:
        return None
    return fstype if fstype in _KERNEL_FILE_SYSTEMS else None


def config_of_run(run_dir: str | Path, url: str | None = None,
                  credentials: Credentials | None = None) -> ServerBenchConfig:
    """The configuration a server-bench run was started with, set to resume it (optionally on a new URL). The
    run kept no credential: those it sent (config.auth) must be given again, or the resume is refused."""
    from kbench.runs.store import read_manifest

    m = read_manifest(Path(run_dir))
    if m.get("kind") != ROW_KIND or not isinstance(m.get("config"), dict):
        raise BadInput(f"{run_dir}: not a server-bench run")
    if isinstance(m.get("interleave"), dict):
        raise BadInput(f"--resume {run_dir}: one side of an interleaved A/B, which is not resumed (its pairs are "
                       f"measured together): run the A/B again")
    known = {f for f in ServerBenchConfig.__dataclass_fields__}
    cfg = {k: v for k, v in m["config"].items() if k in known}
    for k in ("batch_sizes", "input_lens", "output_lens"):
        if not isinstance(cfg.get(k), list):
            raise BadInput(f"{run_dir}: the manifest's config.{k} is not a list")
        cfg[k] = tuple(cfg[k])
    try:
        out = ServerBenchConfig(**cfg)
    except TypeError as e:
        raise BadInput(f"{run_dir}: the manifest's config is incomplete ({e})") from None
    out.resume = str(run_dir)
    creds = credentials or Credentials()
    if url:
        out.url, basic = split_url(url)
        if basic:
            creds = Credentials(creds.api_key, creds.headers, basic)
    sent = m["config"].get("auth") if isinstance(m["config"].get("auth"), list) else []
    missing = [a for a in sent if isinstance(a, str) and (
        ("API key" in a and not creds.api_key) or ("HTTP Basic" in a and not creds.basic)
        or (a.endswith(": ***") and a.split(":")[0].lower() not in {n.lower() for n, _ in creds.headers}))]
    if not missing and f":{HIDDEN}@" in out.url and not creds.basic:
        missing = ["the password of its --url"]
    if missing:
        raise BadInput(f"--resume {run_dir}: the run sent {'; '.join(missing)}, which kbench does not keep: give "
                       f"{'it' if len(missing) == 1 else 'them'} again (--api-key-file or ${API_KEY_ENV}, "
                       f"--header, --url with the password)")
    out.credentials = creds
    return out
