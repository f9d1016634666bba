"""The stream of one batch as arrival times per request, and SGLang's metrics computed from it.

Definitions (SGLang's bench_one_batch_server, kept so the numbers compare):
    latency            = from sending the batch to the end of the stream ([DONE])
    last_ttft          = until the LAST request of the batch got its first token
    input_throughput   = bs * input_len / last_ttft
    output_throughput  = bs * output_len / (latency - last_ttft)
    overall_throughput = bs * (input_len + output_len) / latency
    itl_ms             = 1000 * bs / output_throughput   (= 1000 * (latency - last_ttft) / output_len)

except that output_throughput (and itl_ms) of a batch is not a measurement (None) when fewer than half of its
decode tokens, bs x (output_len - 1), arrived after last_ttft: the window then holds a fraction of the decode
that the formula credits with all of it. A server whose frontend is starved (vLLM on a busy CPU) sends a
request's tokens in one late chunk, and the formula read up to 37x high (issue #54: an A/A gate failed on it).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from kbench.server.backends import TokenEvent
from kbench.server.client import StreamError


@dataclass
class RequestTrace:
    index: int
    chunk_times: list[float] = field(default_factory=list)  # seconds since the batch was sent, per chunk
    tokens_at: list[int] = field(default_factory=list)  # completion tokens after each chunk
    completion_tokens: int = 0
    first_token_s: float | None = None
    finish_reason: str | None = None
    cached_tokens: int | None = None
    prompt_tokens: int | None = None


@dataclass
class BatchTrace:
    """Everything timed about one streamed batch (kept for tests and for recomputing the metrics)."""
    batch_size: int
    requests: list[RequestTrace]
    end_s: float | None = None  # [DONE] arrival, seconds since the batch was sent
    num_chunks: int = 0
    batch_cached_tokens: int | None = None  # from a closing usage chunk (vLLM), when the server sends one

    @classmethod
    def empty(cls, batch_size: int) -> "BatchTrace":
        return cls(batch_size, [RequestTrace(i) for i in range(batch_size)])

    def add(self, t_rel: float, ev: TokenEvent) -> None:
        if ev.index is None:
            self.batch_cached_tokens = ev.cached_tokens
            return
        if not 0 <= ev.index < self.batch_size:
            raise StreamError(f"chunk for request index {ev.index}, but the batch has {self.batch_size}")
        r = self.requests[ev.index]
        if r.finish_reason is not None and ev.completion_tokens in (None, r.completion_tokens):
            return  # a trailing usage/finish echo that adds no token
        r.completion_tokens = ev.completion_tokens if ev.completion_tokens is not None else r.completion_tokens + 1
        r.chunk_times.append(t_rel)
        r.tokens_at.append(r.completion_tokens)
        # SGLang takes the chunk with completion_tokens == 1; ">= 1" is the same with stream_interval 1 and
        # still right if a server folds the first tokens into one chunk
        if r.first_token_s is None and r.completion_tokens >= 1:
            r.first_token_s = t_rel
        if ev.finish_reason is not None:
            r.finish_reason = ev.finish_reason
        if ev.cached_tokens is not None:
            r.cached_tokens = ev.cached_tokens
        if ev.prompt_tokens is not None:
            r.prompt_tokens = ev.prompt_tokens

    def check(self, output_len: int) -> None:
        """The batch did what was asked: every request ran to output_len tokens and finished by length."""
        for r in self.requests:
            if r.first_token_s is None:
                raise StreamError(f"request {r.index} of the batch got no token before [DONE]")
            if r.finish_reason not in (None, "length"):
                raise StreamError(f"request {r.index} finished with {r.finish_reason!r} after "
                                  f"{r.completion_tokens} tokens (expected 'length' at {output_len}; ignore_eos?)")
            if r.completion_tokens != output_len:
                raise StreamError(f"request {r.index} produced {r.completion_tokens} tokens, expected {output_len}")

    @property
    def cached_tokens(self) -> int | None:
        vals = [r.cached_tokens for r in self.requests if r.cached_tokens is not None]
        return sum(vals) if vals else self.batch_cached_tokens


@dataclass
class Metrics:
    latency: float
    last_ttft: float
    input_throughput: float | None
    output_throughput: float | None
    overall_throughput: float | None
    itl_ms: float | None


def _div(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def compute_metrics(batch_size: int, input_len: int, output_len: int, latency: float, last_ttft: float) -> Metrics:
    out_tp = _div(batch_size * output_len, latency - last_ttft)
    return Metrics(
        latency=latency,
        last_ttft=last_ttft,
        input_throughput=_div(batch_size * input_len, last_ttft),
        output_throughput=out_tp,
        overall_throughput=_div(batch_size * (input_len + output_len), latency),
        itl_ms=(1000.0 * batch_size / out_tp) if out_tp else None,
    )


def metrics_from_trace(trace: BatchTrace, input_len: int, output_len: int) -> Metrics:
    if trace.end_s is None:
        raise StreamError("stream did not end with [DONE]")
    last_ttft = max(r.first_token_s for r in trace.requests)
    m = compute_metrics(trace.batch_size, input_len, output_len, trace.end_s, last_ttft)
    if 2 * tokens_after(trace, last_ttft) < trace.batch_size * (output_len - 1):
        m.output_throughput = m.itl_ms = None  # the window misses most of the decode (module docstring)
    return m


def tokens_after(trace: BatchTrace, t: float) -> int:
    """The batch's completion tokens that arrived after ``t`` (seconds since the batch was sent)."""
    n = 0
    for r in trace.requests:
        before = max((k for ct, k in zip(r.chunk_times, r.tokens_at) if ct <= t), default=0)
        n += r.completion_tokens - before
    return n
