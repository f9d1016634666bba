"""One row per server-bench case, and the JSON line SGLang's bench_one_batch_server writes for it.

The row goes into the run folder (kbench.runs.store, kind "server-bench", registered here on import); the JSON
line keeps SGLang's field names and rounding so the two tools' result files can be read side by side.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from kbench.runs.store import register_row_kind

ROW_KIND = "server-bench"


def case_id(batch_size: int, input_len: int, output_len: int) -> str:
    return f"bs{batch_size}-in{input_len}-out{output_len}"


@dataclass
class ServerBenchRow:
    case_id: str
    run_name: str
    backend: str  # sglang | vllm
    url: str
    model: str
    batch_size: int
    input_len: int
    output_len: int
    status: str  # ok | failed | skipped
    reason: str = ""
    temperature: float = 0.0
    seed: int = 0
    # cache flush before the case: attempts made (1 = first try worked), seconds spent incl. waits
    flush_attempts: int = 0
    flush_seconds: float | None = None
    # SGLang's metrics (seconds, tokens/s)
    latency: float | None = None
    last_ttft: float | None = None
    input_throughput: float | None = None
    output_throughput: float | None = None
    overall_throughput: float | None = None
    itl_ms: float | None = None
    last_gen_throughput: float = -1.0
    acc_length: float = -1.0
    # what the stream said
    num_chunks: int = 0
    completion_tokens: int = 0  # over the batch
    # prefix-cache hits the server reported: SGLang per request (summed); vLLM only in its closing usage,
    # which for a prompt list carries one request's count (vLLM overwrites it per request), not the sum
    cached_tokens: int | None = None
    # the server's own counters (/metrics) over the timed batch (kbench.server.counters): the prefix-cache hit
    # rate as SGLang measures it, and vLLM's speculative-decoding drafts (acc_length = 1 + accepted / drafts)
    cache_hit_rate: float | None = None
    spec_drafts: float | None = None
    spec_draft_tokens: float | None = None
    spec_accepted_tokens: float | None = None
    acceptance_rate: float | None = None  # accepted / draft tokens
    prompt_pattern: str = "random"
    # --repeat N: the metrics above are the medians of N timed batches; each one's values here (the gate's
    # noise test reads them)
    repeats: int = 1
    latency_samples: list[float] = field(default_factory=list)
    last_ttft_samples: list[float] = field(default_factory=list)
    input_throughput_samples: list[float] = field(default_factory=list)
    output_throughput_samples: list[float] = field(default_factory=list)
    overall_throughput_samples: list[float] = field(default_factory=list)
    # an interleaved A/B: the round of each batch above (the gate pairs the rounds both halves hold)
    sample_rounds: list[float] = field(default_factory=list)
    # per request of the batch (index order), seconds from sending the batch
    req_ttft_s: list[float] = field(default_factory=list)
    req_latency_s: list[float] = field(default_factory=list)  # arrival of the request's last chunk
    req_output_tokens: list[float] = field(default_factory=list)
    profile: bool = False
    measured_at: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def result_line(self) -> dict:
        """The JSON line bench_one_batch_server appends to its --result-filename (BenchOneCaseResult.dump_to_jsonl:
        same names, same order, same rounding; cache_hit_rate null when the server exports no counters)."""
        return {
            "run_name": self.run_name,
            "batch_size": self.batch_size,
            "input_len": self.input_len,
            "output_len": self.output_len,
            "latency": _round(self.latency, 4),
            "input_throughput": _round(self.input_throughput, 2),
            "output_throughput": _round(self.output_throughput, 2),
            "overall_throughput": _round(self.overall_throughput, 2),
            "last_ttft": _round(self.last_ttft, 4),
            "last_gen_throughput": _round(self.last_gen_throughput, 2),
            "acc_length": _round(self.acc_length, 2),
            "cache_hit_rate": _round(self.cache_hit_rate, 4),
        }


def _round(v, nd):
    return None if v is None else round(float(v), nd)


COLUMNS = [f.name for f in fields(ServerBenchRow)]
SAMPLED = ("latency", "last_ttft", "input_throughput", "output_throughput", "overall_throughput")
LIST_COLUMNS = ("req_ttft_s", "req_latency_s", "req_output_tokens",
                *(f"{m}_samples" for m in SAMPLED), "sample_rounds")  # registered below with kbench.runs.store

register_row_kind(ROW_KIND, COLUMNS, LIST_COLUMNS)
