"""The server's own counters on /metrics (Prometheus text), snapshotted before and after a timed batch.

From the difference of two snapshots server-bench reports what the server measured over that one batch:

- prefix-cache hit rate (SGLang's bench_one_batch_server definition): cached prompt tokens / prompt tokens,
  SGLang ``sglang:cached_tokens_total / sglang:prompt_tokens_total``, vLLM
  ``vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total`` (both in tokens);
- vLLM speculative decoding: ``acc_length = 1 + accepted / drafts`` (the mean number of tokens a
  verification step emits: the accepted draft tokens plus the one the target model adds) and
  ``acceptance_rate = accepted / draft tokens`` from ``vllm:spec_decode_num_drafts_total``,
  ``..._num_draft_tokens_total`` and ``..._num_accepted_tokens_total``. (SGLang's acc_length stays
  ``avg_spec_accept_length`` from /server_info, as SGLang's tool reads it.)

A counter summed over all its label sets (engines, models, finish reasons) is one number per name.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields

from kbench.server.client import ServerClient, ServerError

# name{labels} value [timestamp]; label values may hold spaces, braces and escaped quotes
_SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?\s+(\S+)')

PREFIX_CACHE = {
    "sglang": ("sglang:cached_tokens_total", "sglang:prompt_tokens_total"),
    "vllm": ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
}
SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
# finished requests: the after-snapshot is re-read until the batch's requests are all counted
FINISHED = {"vllm": "vllm:request_success_total"}


def parse_counters(text: str) -> dict[str, float]:
    """Every sample of a Prometheus text exposition, summed per metric name (labels dropped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            v = float(m.group(3))
        except ValueError:
            continue
        if math.isfinite(v):
            out[m.group(1)] = out.get(m.group(1), 0.0) + v
    return out


def snapshot(client: ServerClient, unread: list | None = None) -> dict[str, float] | None:
    """The counters now, or None: the server exports none (404, as SGLang without --enable-metrics, or a page
    without counters), or its /metrics did not answer; then why is appended to ``unread`` (a timeout, a refused
    connection, a 5xx), so the caller can say that the counters it shows are missing, not absent."""
    try:
        status, text = client.request("GET", "/metrics")
    except ServerError as e:
        if unread is not None:
            unread.append(str(e))
        return None
    if status != 200:
        if unread is not None and status != 404:
            unread.append(f"GET /metrics -> {status}")
        return None
    counters = parse_counters(text)
    return counters or None


@dataclass
class CaseCounters:
    """What the server counted between two snapshots (None: not exported by this server)."""
    cached_tokens: float | None = None
    prompt_tokens: float | None = None
    spec_drafts: float | None = None
    spec_draft_tokens: float | None = None
    spec_accepted_tokens: float | None = None

    @property
    def cache_hit_rate(self) -> float | None:
        if self.cached_tokens is None or not self.prompt_tokens:
            return None
        return self.cached_tokens / self.prompt_tokens

    @property
    def acc_length(self) -> float | None:
        if not self.spec_drafts or self.spec_accepted_tokens is None:
            return None
        return 1.0 + self.spec_accepted_tokens / self.spec_drafts

    @property
    def acceptance_rate(self) -> float | None:
        if not self.spec_draft_tokens or self.spec_accepted_tokens is None:
            return None
        return self.spec_accepted_tokens / self.spec_draft_tokens

    @classmethod
    def total(cls, counted) -> "CaseCounters":
        """What several batches' counters add up to: each count summed over the batches that reported it (None
        where none did)."""
        counted = list(counted)
        out = cls()
        for f in fields(cls):
            known = [v for v in (getattr(c, f.name) for c in counted) if v is not None]
            setattr(out, f.name, float(sum(known)) if known else None)
        return out


def _delta(before: dict | None, after: dict | None, name: str) -> float | None:
    if before is None or after is None or name not in after:
        return None
    return after[name] - before.get(name, 0.0)


def case_counters(backend: str, before: dict | None, after: dict | None) -> CaseCounters:
    cached, prompt = PREFIX_CACHE.get(backend, (None, None))
    c = CaseCounters()
    if cached:
        c.cached_tokens, c.prompt_tokens = _delta(before, after, cached), _delta(before, after, prompt)
    if backend == "vllm":
        c.spec_drafts = _delta(before, after, SPEC_DRAFTS)
        c.spec_draft_tokens = _delta(before, after, SPEC_DRAFT_TOKENS)
        c.spec_accepted_tokens = _delta(before, after, SPEC_ACCEPTED)
    return c


def settled_snapshot(client: ServerClient, backend: str, before: dict | None, requests: int,
                     sleep, tries: int = 20, wait: float = 0.1, unread: list | None = None) -> dict | None:
    """The after-snapshot, re-read (up to ``tries`` x ``wait`` s) until the server counted the batch's
    ``requests`` finished requests, so a counter update racing the stream's end is not lost."""
    after = snapshot(client, unread)
    name = FINISHED.get(backend)
    if before is None or after is None or name is None or name not in after:
        return after
    for _ in range(tries):
        if after.get(name, 0.0) - before.get(name, 0.0) >= requests:
            break
        sleep(wait)
        after = snapshot(client) or after
    return after
