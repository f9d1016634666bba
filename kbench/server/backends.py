"""What differs between an SGLang and a vLLM server: endpoints, the batch request, the stream's chunks.

Each backend turns its server's chunks into TokenEvents (which request of the batch, how many tokens it has
now, whether it finished) so that the case loop and the metrics never look at a protocol again.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from kbench import files
from kbench.errors import BadInput
from kbench.server.client import ServerClient, ServerError, StreamError

# Ids drawn when the vocabulary size cannot be found: valid in any real tokenizer's vocabulary.
FALLBACK_VOCAB = 1000


@dataclass
class TokenEvent:
    index: int | None  # request of the batch; None: a batch-level usage record
    completion_tokens: int | None  # tokens generated so far for it (None: count one per event)
    finish_reason: str | None  # None while running; "length" when max tokens were produced
    cached_tokens: int | None = None
    prompt_tokens: int | None = None


@dataclass
class ServerFacts:
    """What the server said about itself at the start (for skip guards, the manifest and the ids)."""
    model: str = ""
    vocab_size: int | None = None
    vocab_source: str = ""
    max_running_requests: int | None = None
    dp_size: int = 1
    token_capacity: int | None = None
    max_model_len: int | None = None
    info: dict = field(default_factory=dict)  # a small JSON-safe summary for the manifest
    ignored: list = field(default_factory=list)  # a line per value the server gave that is not one (warned)

    def count(self, value, name: str) -> int | None:
        """A size the server reports (token_capacity, max_running_requests, dp_size, ...): a positive integer, or
        None. A value there that is not one (-5, 0, 1.5, NaN, text) is treated as absent, and said: a guard built
        on it would skip every case or none."""
        if value is None:
            return None
        ok = (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and math.isfinite(value) and value == int(value))
        if ok and value >= 1:
            return int(value)
        self.ignored.append(f"the server's {name} is {value!r}, not a positive integer: treated as not given")
        return None


def _finish_type(fr) -> str | None:
    if fr is None:
        return None
    if isinstance(fr, dict):
        return str(fr.get("type"))
    return str(fr)


def _vocab_from_local_config(path: str | None) -> int | None:
    """The vocab size from the model folder's config.json, when the server's model path is readable here."""
    if not path:
        return None
    try:  # the path comes from the server: read as any untrusted file (a FIFO or a device there must not hang)
        cfg = files.read_json(Path(path) / "config.json", max_bytes=files.MANIFEST_MAX)
    except (BadInput, OSError, ValueError):
        return None
    if not isinstance(cfg, dict):
        return None
    v = cfg.get("vocab_size") or (cfg.get("text_config") or {}).get("vocab_size")
    return int(v) if isinstance(v, int) and v > 0 else None


def _vocab_from_paths(paths) -> tuple[int | None, str]:
    """The first readable model folder's vocab size, and where it came from."""
    for p in paths:
        v = _vocab_from_local_config(p)
        if v:
            return v, f"{p}/config.json"
    return None, ""


def _int(v) -> int | None:
    """A count in a streamed chunk, or None (a bool, text, NaN or infinity is none)."""
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


class Backend:
    name = ""
    flush_path = ""

    def __init__(self, client: ServerClient):
        self.client = client
        self.facts = ServerFacts()

    def flush_params(self, flush_timeout: float) -> dict | None:
        return None

    def discover(self, model: str | None, vocab_size: int | None) -> ServerFacts:
        raise NotImplementedError

    def skip_reason(self, bs: int, input_len: int, output_len: int) -> str | None:
        return None

    def batch_request(self, ids: list[list[int]], output_len: int, temperature: float,
                      seed: int | None, return_logprob: bool = False, stream_interval: int = 1) -> tuple[str, dict]:
        raise NotImplementedError

    def events(self, chunk: dict) -> list[TokenEvent]:
        raise NotImplementedError

    def after_case(self) -> tuple[float, float]:
        """(last_gen_throughput, acc_length) as SGLang reads them after a case; -1 when not exposed."""
        return -1.0, -1.0


# what a run keeps of SGLang's /server_info (every resolved server argument is there): the fields kbench recommend
# --current RUN reads back as what the server ran (kbench.recommend.resolve.resolve_server_info)
SGLANG_INFO_KEYS = ("model_path", "tokenizer_path", "tp_size", "dp_size", "version", "max_running_requests",
                    "speculative_algorithm", "page_size", "speculative_num_draft_tokens", "speculative_num_steps",
                    "speculative_eagle_topk", "attention_backend", "prefill_attention_backend",
                    "decode_attention_backend", "speculative_draft_attention_backend", "speculative_attention_mode",
                    "disable_overlap_schedule", "kv_cache_dtype", "cuda_graph_max_bs", "attn_dp_size",
                    "enable_dp_attention", "disable_cuda_graph")


class SGLangBackend(Backend):
    name = "sglang"
    flush_path = "/flush_cache"
    info_paths = ("/server_info", "/get_server_info")  # the old name logs a deprecation on newer servers

    def __init__(self, client: ServerClient):
        super().__init__(client)
        self._info_path: str | None = None

    def flush_params(self, flush_timeout: float) -> dict | None:
        # newer servers wait for idle themselves up to this long; older ones ignore it
        return {"timeout": f"{flush_timeout:g}"}

    def server_info(self) -> dict | None:
        paths = [self._info_path] if self._info_path else list(self.info_paths)
        for p in paths:
            info = self.client.get_json(p)
            if isinstance(info, dict):
                self._info_path = p
                return info
        return None

    def discover(self, model, vocab_size):
        f = self.facts
        info = self.server_info()
        if info is None:
            raise ServerError(f"{self.client.base_url}: neither {' nor '.join(self.info_paths)} answered "
                              "with server info (is this an SGLang server?)")
        state = (info.get("internal_states") or [{}])[0] or {}
        if not isinstance(state, dict):
            state = {}
        memory = state.get("memory_usage") if isinstance(state.get("memory_usage"), dict) else {}
        f.max_running_requests = f.count(state.get("effective_max_running_requests_per_dp"),
                                         "effective_max_running_requests_per_dp") or \
            f.count(info.get("max_running_requests"), "max_running_requests")
        f.dp_size = f.count(info.get("dp_size"), "dp_size") or 1
        f.token_capacity = f.count(memory.get("token_capacity"), "token_capacity")
        f.model = model or str(info.get("served_model_name") or info.get("model_path") or "")
        f.info = {k: info.get(k) for k in SGLANG_INFO_KEYS if k in info}
        f.info.update(info_path=self._info_path, token_capacity=f.token_capacity,
                      effective_max_running_requests_per_dp=f.max_running_requests)
        if vocab_size:
            f.vocab_size, f.vocab_source = vocab_size, "--vocab-size"
        else:
            for key in ("vocab_size",):
                if f.count(info.get(key), key):
                    f.vocab_size, f.vocab_source = int(info[key]), f"server info {key}"
            if f.vocab_size is None:
                mi = self.client.get_json("/get_model_info") or {}
                f.vocab_size, f.vocab_source = _vocab_from_paths((mi.get("model_path"), info.get("model_path")))
        return f

    def skip_reason(self, bs, input_len, output_len):
        f = self.facts
        if f.max_running_requests and bs > f.max_running_requests * f.dp_size:
            return (f"batch size {bs} > max_running_requests {f.max_running_requests} x dp_size {f.dp_size}")
        if f.token_capacity and bs * (input_len + output_len) > f.token_capacity:
            return (f"bs*(input+output) = {bs * (input_len + output_len)} > token_capacity {f.token_capacity}")
        return None

    def batch_request(self, ids, output_len, temperature, seed, return_logprob=False, stream_interval=1):
        return "/generate", {
            "input_ids": ids,
            "sampling_params": {"temperature": temperature, "max_new_tokens": output_len, "ignore_eos": True,
                                "stream_interval": stream_interval},
            "return_logprob": bool(return_logprob),
            "stream": True,
        }

    def events(self, chunk):
        meta = chunk.get("meta_info")
        if not isinstance(meta, dict):
            raise StreamError(f"chunk without meta_info: {json.dumps(chunk)[:120]}")
        return [TokenEvent(index=_int(chunk.get("index")) or 0,
                           completion_tokens=_int(meta.get("completion_tokens")),
                           finish_reason=_finish_type(meta.get("finish_reason")),
                           cached_tokens=_int(meta.get("cached_tokens")),
                           prompt_tokens=_int(meta.get("prompt_tokens")))]

    def after_case(self):
        try:
            info = self.server_info() or {}
        except ServerError:
            return -1.0, -1.0
        state = (info.get("internal_states") or [{}])[0] or {}
        # SGLang: `x or -1` (a 0 or a missing value both read as "not available")
        gen = state.get("last_gen_throughput") or -1
        acc = state.get("avg_spec_accept_length") or -1
        return float(gen), float(acc)


class VllmBackend(Backend):
    name = "vllm"
    flush_path = "/reset_prefix_cache"  # only with VLLM_SERVER_DEV_MODE=1

    def discover(self, model, vocab_size):
        f = self.facts
        models = self.client.get_json("/v1/models")
        data = models.get("data") if isinstance(models, dict) else None
        if not data:
            raise ServerError(f"{self.client.base_url}/v1/models listed no model (is this a vLLM server?)")
        entry = next((m for m in data if m.get("id") == model), None) if model else data[0]
        if entry is None:
            raise ServerError(f"model {model!r} is not served at {self.client.base_url} "
                              f"(served: {', '.join(str(m.get('id')) for m in data)})")
        f.model = str(entry.get("id"))
        f.max_model_len = f.count(entry.get("max_model_len"), "max_model_len")
        f.info = {"model": f.model, "root": entry.get("root"), "max_model_len": f.max_model_len,
                  "owned_by": entry.get("owned_by")}
        if vocab_size:
            f.vocab_size, f.vocab_source = vocab_size, "--vocab-size"
        else:
            f.vocab_size, f.vocab_source = _vocab_from_paths((entry.get("root"), f.model))
        return f

    def skip_reason(self, bs, input_len, output_len):
        m = self.facts.max_model_len
        if m and input_len + output_len > m:
            return f"input+output = {input_len + output_len} > max_model_len {m}"
        return None

    def batch_request(self, ids, output_len, temperature, seed, return_logprob=False, stream_interval=1):
        # stream_interval: vLLM has no per-request one (a server flag); the case loop warns once
        body = {"model": self.facts.model, "prompt": ids, "max_tokens": output_len, "temperature": temperature,
                "ignore_eos": True, "stream": True,
                # per-chunk usage gives each request's completion_tokens, like SGLang's meta_info
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
        if seed is not None:
            body["seed"] = seed
        if return_logprob:
            body["logprobs"] = 1  # the sampled token's logprob, like SGLang's return_logprob
        return "/v1/completions", body

    def events(self, chunk):
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            raise StreamError(f"chunk without choices: {json.dumps(chunk)[:120]}")
        usage = chunk.get("usage") if isinstance(chunk.get("usage"), dict) else None
        if not choices and usage:  # the closing usage chunk: totals over the batch
            details = usage.get("prompt_tokens_details")
            cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else None
            return [TokenEvent(index=None, completion_tokens=None, finish_reason=None, cached_tokens=cached,
                               prompt_tokens=_int(usage.get("prompt_tokens")))]
        out = []
        for c in choices:
            per_request = usage if (usage and len(choices) == 1) else None
            cached = None
            if per_request and isinstance(per_request.get("prompt_tokens_details"), dict):
                cached = _int(per_request["prompt_tokens_details"].get("cached_tokens"))
            out.append(TokenEvent(index=_int(c.get("index")) or 0,
                                  completion_tokens=_int(per_request.get("completion_tokens")) if per_request else None,
                                  finish_reason=_finish_type(c.get("finish_reason")),
                                  cached_tokens=cached,
                                  prompt_tokens=_int(per_request.get("prompt_tokens")) if per_request else None))
        return out


BACKENDS = {"sglang": SGLangBackend, "vllm": VllmBackend}


def detect_backend(client: ServerClient) -> str:
    """sglang or vllm, from what the server answers. SGLang also serves /v1/models and vLLM (dev mode)
    also serves /server_info, so the answers' contents decide, not just which endpoint exists."""
    models = client.get_json("/v1/models")
    owners = {str(m.get("owned_by")) for m in (models or {}).get("data", []) if isinstance(m, dict)} \
        if isinstance(models, dict) else set()
    if "vllm" in owners:
        return "vllm"
    for p in SGLangBackend.info_paths:
        info = client.get_json(p)
        if isinstance(info, dict) and ("internal_states" in info or "model_path" in info):
            return "sglang"
    if "sglang" in owners:
        return "sglang"
    if owners:
        return "vllm"  # an OpenAI-style server that is not SGLang
    raise ServerError(f"{client.base_url}: no /server_info, /get_server_info or /v1/models answer; "
                      "is the server up? (or pass --backend)")
