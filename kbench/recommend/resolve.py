"""What a server runs: the user's own command line (or a `kbench server-bench` run's server info) resolved as the
engine release resolves it: the attention backend of each step, the page size, the speculative config (topk,
draft steps, draft tokens), the cap on running requests and whether the host work overlaps the GPU. Every value
says which rule set it (the released source's file:line).

    from kbench.recommend.resolve import resolve_line
    r = resolve_line("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct "
                     "--speculative-algorithm EAGLE --speculative-draft-model-path yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
                     family="sm90")
    r.fields["attention_backend"], r.fields["page_size"], r.spec, r.cap, r.why["attention_backend"]

SGLang 0.5.23 resolves in the order of its pipeline (python/sglang/srt/arg_groups/pipeline.py): the attention
backend default at line 242 (after the model's own overrides, before the page size and the speculative
defaults), the page-size default at line 256, the speculative defaults at line 306. So the backend default sees
topk only as the user gave it: with no --speculative-eagle-topk, a Llama target gets fa3 on Hopper and then the
(5, 4, 8) tree. kbench follows that order; tests/test_recommend_resolve.py runs SGLang's own resolution on the
CPU over a table of command lines and requires the same fields.

vLLM 0.34.0: the backend from --attention-backend or -ac/--attention-config, else the GPU's default (the settings
table's default_on, platforms/cuda.py); the block size, max_num_seqs and async scheduling as its configs default
them. What kbench could check against vLLM itself (a CPU build of 0.32.0) is in docs/recommend.md.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from kbench import files
from kbench.errors import BadInput

SGLANG = "python/sglang/srt/"
VLLM = "vllm/"

# ---- the flags a command line may carry ------------------------------------------------------------------
# modelled: read by the resolution (name -> kind: value | bool); inert: cannot change the attention steps kbench
# prices (a server's address, logging, memory headroom, the tokenizer): read and set aside (said in the answer)
SGLANG_MODELLED = {
    "--model-path": "value", "--model": "value", "--attention-backend": "value",
    "--prefill-attention-backend": "value", "--decode-attention-backend": "value",
    "--speculative-draft-attention-backend": "value", "--speculative-attention-mode": "value",
    "--speculative-algorithm": "value", "--speculative-eagle-topk": "value", "--speculative-num-steps": "value",
    "--speculative-num-draft-tokens": "value", "--speculative-draft-model-path": "value",
    "--speculative-draft-model": "value", "--page-size": "value", "--max-running-requests": "value",
    "--disable-overlap-schedule": "bool", "--kv-cache-dtype": "value", "--tp-size": "value", "--tp": "value",
    "--dtype": "value",
}
SGLANG_INERT = {
    "--host": "value", "--port": "value", "--log-level": "value", "--log-requests": "bool",
    "--trust-remote-code": "bool", "--mem-fraction-static": "value", "--served-model-name": "value",
    "--api-key": "value", "--tokenizer-path": "value", "--tokenizer-mode": "value", "--context-length": "value",
    "--chunked-prefill-size": "value", "--enable-metrics": "bool", "--random-seed": "value",
    "--revision": "value", "--speculative-draft-model-revision": "value", "--download-dir": "value",
    "--skip-server-warmup": "bool", "--show-time-cost": "bool", "--enable-cache-report": "bool",
    "--max-prefill-tokens": "value", "--schedule-policy": "value", "--load-format": "value",
    "--watchdog-timeout": "value", "--cuda-graph-max-bs": "value", "--disable-radix-cache": "bool",
    "--speculative-accept-threshold-single": "value", "--speculative-accept-threshold-acc": "value",
}
VLLM_MODELLED = {
    "--model": "value", "--attention-backend": "value", "-ac": "value", "--attention-config": "value",
    "--speculative-config": "value", "-sc": "value", "--block-size": "value", "--max-num-seqs": "value",
    "--async-scheduling": "bool", "--no-async-scheduling": "bool", "--kv-cache-dtype": "value",
    "--tensor-parallel-size": "value", "-tp": "value", "--dtype": "value",
}
VLLM_INERT = {
    "--host": "value", "--port": "value", "--api-key": "value", "--served-model-name": "value",
    "--trust-remote-code": "bool", "--gpu-memory-utilization": "value", "--max-model-len": "value",
    "--tokenizer": "value", "--seed": "value", "--disable-log-requests": "bool", "--disable-log-stats": "bool",
    "--uvicorn-log-level": "value", "--download-dir": "value", "--revision": "value",
    "--max-num-batched-tokens": "value", "--enable-prefix-caching": "bool", "--no-enable-prefix-caching": "bool",
}
# a modelled flag whose other values change attention in a way the table does not price
ONLY_VALUES = {
    "--kv-cache-dtype": ("auto", "bfloat16", "bf16"),  # an fp8 KV cache runs other kernels (and SGLang's fa3 may fall back)
    "--tp-size": ("1",), "--tp": ("1",), "--tensor-parallel-size": ("1",), "-tp": ("1",),  # heads per GPU change
    "--dtype": ("auto", "bfloat16", "float16", "half", "bf16", "fp16"),
}

# ---- SGLang 0.5.23's rules (data: each with its source) ----------------------------------------------------
SGLANG_CITES = {
    "order": f"{SGLANG}arg_groups/pipeline.py:242, 256, 306",
    "split": f"{SGLANG}arg_groups/overrides.py:1127-1131",
    "default_backend": f"{SGLANG}arg_groups/overrides.py:1132-1140",
    "mha_hopper": f"{SGLANG}arg_groups/model_override_base.py:305-311; {SGLANG}utils/common.py:3960-3966",
    "mha_sm100": f"{SGLANG}arg_groups/model_override_base.py:312-325",
    "mha_other": f"{SGLANG}arg_groups/model_override_base.py:326-333",
    "mla_hopper": f"{SGLANG}arg_groups/model_override_base.py:335-338",
    "mla_sm100": f"{SGLANG}arg_groups/model_overrides/deepseek_v2.py:178-188",
    "mla_other": f"{SGLANG}arg_groups/model_override_base.py:339-351",
    "page_forced": f"{SGLANG}arg_groups/overrides.py:1144-1200",
    "page_default": f"{SGLANG}arg_groups/overrides.py:1341-1363",
    "algorithm": f"{SGLANG}arg_groups/speculative_hook.py:81-118, 134-140",
    "cap": f"{SGLANG}arg_groups/speculative_hook.py:1086-1094",
    "overlap": f"{SGLANG}arg_groups/fields/schedule.py:193-199; {SGLANG}arg_groups/speculative_hook.py:1096-1102",
    "auto_spec": f"{SGLANG}arg_groups/speculative_hook.py:1159-1174, 1430-1460",
    "spec_together": f"{SGLANG}arg_groups/speculative_hook.py:1159-1163",
    "trtllm_topk": f"{SGLANG}arg_groups/speculative_hook.py:1176-1180",
    "chain_tokens": f"{SGLANG}arg_groups/speculative_hook.py:1254-1265",
    "tree_pages": f"{SGLANG}arg_groups/speculative_hook.py:1267-1282",
    "mode": f"{SGLANG}arg_groups/fields/spec.py (speculative_attention_mode: prefill by default)",
    "slots": f"{SGLANG}layers/attention/hybrid_attn_backend.py:64-88; {SGLANG}speculative/draft_utils.py:55-61, 145-149",
    "draft_path": f"{SGLANG}arg_groups/speculative_hook.py:1120-1148",
}
# (steps, topk, draft tokens) when --speculative-num-steps is not given (speculative_hook.py:1430-1460)
SGLANG_AUTO_SPEC = {"LlamaForCausalLM": (5, 4, 8), "Grok1ForCausalLM": (5, 4, 8), "Grok1VForCausalLM": (5, 4, 8)}
SGLANG_AUTO_SPEC_OTHER = (3, 1, 4)  # DeepSeek V2/V3/V3.2, GLM-4 MoE, ... and every other architecture
SGLANG_DRAFT_IS_TARGET = ("DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM")  # MTP: the draft path is the target's
SGLANG_CAP = 48  # max_running_requests with EAGLE when --max-running-requests is not given
SGLANG_TREE_PAGE_BACKENDS = ("flashinfer", "fa3", "triton")
SGLANG_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN")  # NEXTN is EAGLE (speculative_hook.py:109-116)
SGLANG_MLA_ARCHS = ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM",
                    "KimiK2ForCausalLM")
# page sizes a backend forces (overrides.py:1144-1200): backend -> (the pages it takes, the page it sets)
SGLANG_PAGE_FORCE = {"flashmla": ((64,), 64), "trtllm_mla": ((32, 64), 64), "cutedsl_mla": ((32, 64), 64),
                     "trtllm_mha": ((16, 32, 64, 128), 64)}

# ---- vLLM 0.34.0's rules ---------------------------------------------------------------------------------
VLLM_CITES = {
    "backend": f"{VLLM}platforms/cuda.py:157-178 (GQA), 93-152 (MLA); {VLLM}engine/arg_utils.py:1129",
    "mla_fp8": f"{VLLM}v1/attention/backends/mla/flashattn_mla.py:40-46",
    "block": f"{VLLM}config/cache.py:185, 482-491",
    "spec": f"{VLLM}config/speculative.py:455, 1375-1379",
    "cap": f"{VLLM}engine/arg_utils.py:3010-3044 (max_num_seqs: 1024 on a GPU of 70 GiB or more, A100 and GB10 "
           "excepted; 256 below)",
    "overlap": f"{VLLM}config/vllm.py:1610-1637; {VLLM}config/scheduler.py:246-249",
}
VLLM_BLOCK = 64  # config/cache.py:185
VLLM_MAX_NUM_SEQS = 1024  # the OpenAI server's default on an H100/H200/B200-class GPU (engine/arg_utils.py:3010-3044;
# 256 on a GPU below 70 GiB or an A100: kbench assumes the large one)


@dataclass
class Resolved:
    """A server's configuration as the engine resolves it."""
    engine: str  # sglang | vllm
    version: str
    family: str  # the GPU family it was resolved for (sm90, ...)
    argv: list[str]  # the user's arguments after the launcher (the model path too), as given
    env: dict[str, str]  # environment variables the line sets (VAR=value before the command)
    model: str
    arch: str | None
    attention: str  # gqa | mla
    fields: dict  # the engine's own field names -> resolved values (SGLang: ServerArgs fields)
    why: dict[str, str]  # field -> "given" or the rule that set it (with its source)
    backends: dict[str, str]  # step (verify, draft_extend) -> the engine backend that runs it
    cap: int | None  # most requests the server runs at once
    cap_given: bool
    overlap: str  # max (host work overlaps the GPU) | sum
    ignored: list[str] = field(default_factory=list)  # inert flags set aside
    source: str = "--current"  # where it came from
    # How the line spreads the model and what each rank runs (issue 52: priced as it runs)
    tp_size: int = 1  # tensor parallel ranks: each runs heads / tp_size of the attention (MLA: see pricing)
    dp_attention: int = 1  # DP attention ranks (SGLang --enable-dp-attention --dp-size N): all heads, batch / N each
    kv_cache_dtype: str = "auto"  # the engine's own value as resolved (auto, fp8_e4m3, fp8_e5m2, ...)
    cuda_graph: bool = True  # False under --disable-cuda-graph (SGLang) / --enforce-eager (vLLM): eager routes
    flashinfer_version: str | None = None  # vLLM: the FlashInfer the user's environment or line runs, if known

    @property
    def page_size(self) -> int:
        return int(self.fields["page_size"])

    @property
    def spec(self):
        from kbench.recommend.flags import SpecConfig

        f = self.fields
        if self.engine == "sglang":
            return SpecConfig(q_len=int(f["speculative_num_draft_tokens"]), topk=int(f["speculative_eagle_topk"]),
                              steps=int(f["speculative_num_steps"]))
        return SpecConfig.chain(int(f["num_speculative_tokens"]) + 1)

    @property
    def tree(self) -> str:
        """kbench's `tree` axis value for the draft: chain, or topk:K."""
        return "chain" if self.spec.topk == 1 else f"topk:{self.spec.topk}"

    def rows(self) -> list[tuple[str, str, str]]:
        """(field, value, why) for printing."""
        return [(k, str(v), self.why.get(k, "")) for k, v in self.fields.items()]


# ---- reading a command line ------------------------------------------------------------------------------
def read_current(text: str) -> str:
    """`--current` is the line itself, or @FILE: the file's text, bounded (kbench.recommend.line)."""
    from kbench.recommend import line

    return line.read_current(text)


def split_line(text: str) -> tuple[str, dict[str, str], list[str]]:
    """(engine, env, argv) of a server command line, its words as bash passes them (kbench.recommend.line)."""
    from kbench.recommend import line

    return line.split_line(text)


def parse_flags(engine: str, argv: list[str]) -> tuple[dict[str, str | bool], list[str]]:
    """({flag: value or True}, the inert flags set aside); BadInput naming a flag that does not parse or that the
    table does not model."""
    modelled, inert = (SGLANG_MODELLED, SGLANG_INERT) if engine == "sglang" else (VLLM_MODELLED, VLLM_INERT)
    given: dict[str, str | bool] = {}
    ignored = []
    i = 0
    while i < len(argv):
        a = argv[i]
        name, eq, val = a.partition("=")
        kind = modelled.get(name) or inert.get(name)
        if not a.startswith("-"):
            raise BadInput(f"--current: {a!r} is not a flag (after {argv[i - 1] if i else 'the command'}); quote a "
                           "value with spaces")
        if kind is None:
            raise BadInput(f"--current: {name} is a flag kbench's table of {engine} does not model: it may change "
                           "the attention steps, so nothing is priced (drop it from the line to price the rest)")
        if kind == "bool":
            if eq:
                raise BadInput(f"--current: {name} takes no value (got {a!r})")
            value: str | bool = True
            i += 1
        elif eq:
            value = val
            i += 1
        else:
            if i + 1 >= len(argv) or (argv[i + 1].startswith("--") and argv[i + 1] != "--"):
                raise BadInput(f"--current: {name} needs a value")
            value = argv[i + 1]
            i += 2
        if name in inert:
            ignored.append(name)
            continue
        ok = ONLY_VALUES.get(name)
        if ok and str(value).lower() not in ok:
            raise BadInput(f"--current: {name} {value}: kbench prices {name} {' or '.join(ok)} only (another value "
                           "changes the attention kernels or the heads per GPU)")
        given[name] = value
    return given, ignored


def _int_flag(given: dict, name: str, lo: int = 1) -> int | None:
    v = given.get(name)
    if v is None:
        return None
    try:
        n = int(str(v))
    except ValueError:
        raise BadInput(f"--current: {name} {v!r} is not an integer") from None
    if n < lo:
        raise BadInput(f"--current: {name} {n}: must be >= {lo}")
    return n


# ---- the model's architecture ----------------------------------------------------------------------------
# kbench's model presets (kbench.cases.models) and the architecture each stands for
PRESET_ARCH = {"llama3-8b": "LlamaForCausalLM", "llama3-70b-tp8": "LlamaForCausalLM",
               "llama3.2-1b": "LlamaForCausalLM", "qwen3-30b-a3b": "Qwen3MoeForCausalLM",
               "qwen2.5-7b": "Qwen2ForCausalLM", "gemma2-9b": "Gemma2ForCausalLM", "gpt-oss": "GptOssForCausalLM",
               "deepseek-v3": "DeepseekV3ForCausalLM", "deepseek-v3-tp8": "DeepseekV3ForCausalLM",
               "kimi-k2": "DeepseekV3ForCausalLM", "kimi-k2-tp8": "DeepseekV3ForCausalLM"}
# a hub name's architecture, by the name (a local folder's config.json wins)
NAME_ARCH = ((r"llama", "LlamaForCausalLM"), (r"deepseek-(v3|r1)", "DeepseekV3ForCausalLM"),
             (r"kimi-k2", "DeepseekV3ForCausalLM"), (r"qwen3-.*a\d+b", "Qwen3MoeForCausalLM"),
             (r"qwen2\.5", "Qwen2ForCausalLM"), (r"gpt-oss", "GptOssForCausalLM"), (r"gemma-?2", "Gemma2ForCausalLM"))


def model_arch(model: str, preset: str | None = None) -> str | None:
    """The architecture of the served model: a local folder's config.json, else --model's preset, else by name."""
    cfg = Path(model) / "config.json"
    if cfg.is_file():
        try:
            archs = files.loads(cfg.read_text()).get("architectures") or []
        except (OSError, ValueError, AttributeError):
            raise BadInput(f"--current: {cfg} is not a readable model config") from None
        if archs:
            return str(archs[0])
    if preset:
        return PRESET_ARCH.get(preset)
    low = model.lower()
    for pattern, arch in NAME_ARCH:
        if re.search(pattern, low):
            return arch
    return None


def is_mla(arch: str | None) -> bool:
    return arch in SGLANG_MLA_ARCHS


# ---- SGLang ----------------------------------------------------------------------------------------------
def _sglang_default_backend(family: str, mla: bool, topk: int | None, page: int | None, algorithm) -> tuple[str, str]:
    """(backend, why) of SGLang 0.5.23's get_default_attn_backend at its pipeline slot: topk and page size only as
    the user gave them (the speculative defaults come later)."""
    topk_one = topk is None or (topk == 1 and page in (None, 1))  # is_no_spec_infer_or_topk_one
    if mla:
        if family == "sm90":
            return "fa3", f"MLA on Hopper: fa3 ({SGLANG_CITES['mla_hopper']})"
        if family == "sm100":
            return "trtllm_mla", f"DeepSeek on SM100: trtllm_mla ({SGLANG_CITES['mla_sm100']})"
        return "triton", f"MLA off Hopper and SM100: triton ({SGLANG_CITES['mla_other']})"
    if family == "sm90" and topk_one:
        return "fa3", (f"Hopper, MHA, topk {'unset' if topk is None else topk} at page "
                       f"{'unset' if page is None else page}: fa3 ({SGLANG_CITES['mha_hopper']})")
    if family == "sm100" and topk_one and (algorithm is None or topk is not None):
        return "trtllm_mha", f"SM100, MHA, topk given as 1 (or no speculation): trtllm_mha ({SGLANG_CITES['mha_sm100']})"
    why = ("topk " + ("unset (SGLang's own (5, 4, 8) comes later)" if topk is None else str(topk))
           + (f" at page {page}" if page else ""))
    return "flashinfer", f"{why}: flashinfer ({SGLANG_CITES['mha_other']})"


def sglang_page(slots_named: list[str | None], page: int | None) -> tuple[int, str]:
    """(page, why) SGLang 0.5.23 runs at, from the page the line gives (None: none) and the backends of its four
    slots (attention, prefill, decode, speculative draft): the pages a backend forces (overrides.py:1144-1200),
    then the default, 1 (1341-1363). The one rule for a user's line and for a setting kbench prices."""
    p, why = page, "given"
    for backend, (takes, sets) in SGLANG_PAGE_FORCE.items():
        slots = slots_named if backend == "trtllm_mha" else slots_named[:3]
        if backend in slots and (p not in takes or backend == "flashmla"):
            if p != sets:
                why = f"{backend} runs pages {'/'.join(map(str, takes))} only: {sets} ({SGLANG_CITES['page_forced']})"
            p = sets
    if p is None:
        return 1, f"not given: 1 ({SGLANG_CITES['page_default']})"
    return p, why


def setting_page(engine: str, flags: str, page: int | None) -> tuple[int | None, str]:
    """(page, why) the engine runs a setting's backend flags at when the line gives `page` (None: not given). SGLang
    moves the page for some backends (sglang_page); vLLM keeps the block size given (kbench.recommend.flags
    refuses one its backend does not take)."""
    if engine != "sglang":
        return page, "given"
    from kbench.recommend.flags import sglang_backends

    slots = sglang_backends(flags)
    return sglang_page([slots.get(n) for n in ("--attention-backend", "--prefill-attention-backend",
                                               "--decode-attention-backend", "--speculative-draft-attention-backend")],
                       page)


def given_page(current: Resolved) -> int | None:
    """The page size the user's line gives (None: it gives none, the engine resolves one)."""
    flag = "--page-size" if current.engine == "sglang" else "--block-size"
    v = dict(_flag_pairs(current.argv)).get(flag)
    return int(v) if v is not None else None


def sglang_slots(fields: dict) -> dict[str, str]:
    """The backend of each step: target verify on the prefill or decode backend by the mode when they differ, else
    the attention backend; draft extend on the draft's own backend, else the mode's backend."""
    base = fields["attention_backend"]
    prefill = fields.get("prefill_attention_backend") or base
    decode = fields.get("decode_attention_backend") or base
    mode = fields.get("speculative_attention_mode") or "prefill"
    verify = (decode if mode == "decode" else prefill) if prefill != decode else base
    draft = fields.get("speculative_draft_attention_backend") or (decode if mode == "decode" else prefill)
    return {"verify": verify, "draft_extend": draft}


def resolve_sglang(given: dict, family: str, arch: str | None, model: str) -> tuple[dict, dict]:
    """SGLang 0.5.23's resolution of the fields kbench prices, in its pipeline's order."""
    f: dict = {}
    why: dict[str, str] = {}
    mla = is_mla(arch)

    def put(name, value, reason):
        f[name] = value
        why[name] = reason

    algo = given.get("--speculative-algorithm")
    if algo is None:
        raise BadInput("--current: no --speculative-algorithm: the server does not speculate, and kbench prices "
                       "speculative steps (target verify, draft extend)")
    if str(algo).upper() not in SGLANG_ALGORITHMS:
        raise BadInput(f"--current: --speculative-algorithm {algo}: kbench's table models "
                       f"{', '.join(SGLANG_ALGORITHMS)} (NEXTN is EAGLE)")
    for name in ("attention_backend", "prefill_attention_backend", "decode_attention_backend",
                 "speculative_draft_attention_backend"):
        v = given.get("--" + name.replace("_", "-"))
        put(name, v, "given" if v is not None else "not given")
    mode = given.get("--speculative-attention-mode")
    if mode is not None and mode not in ("prefill", "decode"):
        raise BadInput(f"--current: --speculative-attention-mode {mode}: prefill or decode")
    put("speculative_attention_mode", mode or "prefill", "given" if mode else f"default ({SGLANG_CITES['mode']})")
    topk = _int_flag(given, "--speculative-eagle-topk")
    steps = _int_flag(given, "--speculative-num-steps", 0)
    tokens = _int_flag(given, "--speculative-num-draft-tokens")
    page = _int_flag(given, "--page-size")
    # 1. the backend (pipeline.py:242): a split whose two halves agree becomes the attention backend
    if f["prefill_attention_backend"] is not None and f["prefill_attention_backend"] == f["decode_attention_backend"]:
        put("attention_backend", f["prefill_attention_backend"],
            f"--prefill- and --decode-attention-backend agree ({SGLANG_CITES['split']})")
    elif f["attention_backend"] is None:
        b, reason = _sglang_default_backend(family, mla, topk, page, algo)
        put("attention_backend", b, f"not given: {reason}; chosen before the page-size and speculative defaults "
                                    f"({SGLANG_CITES['order']})")
    # 2. pages a backend forces (overrides.py:1144-1200), then the default (1341-1363)
    slots_named = [f["attention_backend"], f["prefill_attention_backend"], f["decode_attention_backend"],
                   f["speculative_draft_attention_backend"]]
    f["page_size"], why["page_size"] = sglang_page(slots_named, page)
    # 3. the speculative defaults (pipeline.py:306)
    put("speculative_algorithm", "EAGLE" if str(algo).upper() == "NEXTN" else str(algo).upper(),
        "given" + (f" (NEXTN is EAGLE: {SGLANG_CITES['algorithm']})" if str(algo).upper() == "NEXTN" else ""))
    cap = _int_flag(given, "--max-running-requests")
    put("max_running_requests", cap if cap is not None else SGLANG_CAP,
        "given" if cap is not None else f"not given: {SGLANG_CAP} with speculative decoding ({SGLANG_CITES['cap']})")
    put("disable_overlap_schedule", bool(given.get("--disable-overlap-schedule")),
        "given" if given.get("--disable-overlap-schedule") else f"overlap scheduler on ({SGLANG_CITES['overlap']})")
    if steps is None:
        if topk is not None or tokens is not None:
            raise BadInput("--current: --speculative-eagle-topk or --speculative-num-draft-tokens without "
                           "--speculative-num-steps: SGLang refuses it (an assertion at "
                           f"{SGLANG_CITES['spec_together']}); give all three")
        steps, topk, tokens = SGLANG_AUTO_SPEC.get(arch or "", SGLANG_AUTO_SPEC_OTHER)
        reason = f"not given: ({steps}, {topk}, {tokens}) for {arch or 'this architecture'} ({SGLANG_CITES['auto_spec']})"
        put("speculative_num_steps", steps, reason)
        put("speculative_eagle_topk", topk, reason)
        put("speculative_num_draft_tokens", tokens, reason)
    else:
        if topk is None:
            raise BadInput("--current: --speculative-num-steps without --speculative-eagle-topk: SGLang 0.5.23 "
                           f"fails on it (compares topk None at {SGLANG_CITES['tree_pages']}); give "
                           "--speculative-eagle-topk")
        put("speculative_num_steps", steps, "given")
        put("speculative_eagle_topk", topk, "given")
        if tokens is None and topk != 1:
            raise BadInput("--current: a topk > 1 tree without --speculative-num-draft-tokens: give it")
        put("speculative_num_draft_tokens", tokens, "given")
    if "trtllm_mha" in (f["attention_backend"], f["prefill_attention_backend"] or f["attention_backend"],
                        f["decode_attention_backend"] or f["attention_backend"]) and f["speculative_eagle_topk"] > 1:
        raise BadInput(f"--current: trtllm_mha with topk {f['speculative_eagle_topk']}: SGLang refuses it "
                       f"({SGLANG_CITES['trtllm_topk']})")
    if f["speculative_eagle_topk"] == 1 and f["speculative_num_draft_tokens"] != f["speculative_num_steps"] + 1:
        put("speculative_num_draft_tokens", f["speculative_num_steps"] + 1,
            f"topk 1: steps + 1 ({SGLANG_CITES['chain_tokens']})")
    if (f["speculative_eagle_topk"] > 1 and f["page_size"] > 1
            and f["attention_backend"] not in SGLANG_TREE_PAGE_BACKENDS):
        raise BadInput(f"--current: topk {f['speculative_eagle_topk']} at page {f['page_size']} on "
                       f"{f['attention_backend']}: SGLang refuses it ({SGLANG_CITES['tree_pages']})")
    if f["speculative_num_draft_tokens"] < 2:
        raise BadInput("--current: one draft token per step verifies nothing kbench prices (give more steps)")
    return f, why


# ---- vLLM ------------------------------------------------------------------------------------------------
def resolve_vllm(given: dict, family: str, arch: str | None, engine_table) -> tuple[dict, dict]:
    from kbench.files import JSONProblem, loads

    f: dict = {}
    why: dict[str, str] = {}
    mla = is_mla(arch)
    raw = given.get("--speculative-config", given.get("-sc"))
    if raw is None:
        raise BadInput("--current: no --speculative-config: the server does not speculate, and kbench prices "
                       "speculative steps")
    try:
        sc = loads(str(raw))
    except JSONProblem:
        raise BadInput("--current: --speculative-config is not JSON") from None
    if not isinstance(sc, dict):
        raise BadInput("--current: --speculative-config is not a JSON object")
    method = str(sc.get("method", "")).lower()
    if method == "deepseek_mtp":
        method = "mtp"
    if method not in ("eagle", "eagle3", "mtp"):
        raise BadInput(f"--current: speculative method {sc.get('method')!r}: kbench's table models eagle, eagle3 and "
                       "mtp")
    n = sc.get("num_speculative_tokens")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise BadInput(f"--current: num_speculative_tokens {n!r}: an integer >= 1 ({VLLM_CITES['spec']})")
    extra = sorted(set(sc) - {"method", "model", "num_speculative_tokens"})
    if extra:
        raise BadInput(f"--current: speculative config key {extra[0]!r} is not modelled by kbench's table")
    f["method"], why["method"] = method, "given"
    f["num_speculative_tokens"], why["num_speculative_tokens"] = n, "given"
    backend = given.get("--attention-backend")
    trtllm = None
    rawac = given.get("--attention-config", given.get("-ac"))
    if rawac is not None:
        try:
            ac = loads(str(rawac))
        except JSONProblem:
            raise BadInput("--current: --attention-config is not JSON") from None
        if not isinstance(ac, dict) or set(ac) - {"backend", "use_trtllm_attention"}:
            raise BadInput("--current: --attention-config: kbench models its backend and use_trtllm_attention only")
        backend = ac.get("backend", backend)
        trtllm = ac.get("use_trtllm_attention")
    if backend is not None:
        f["attention_backend"], why["attention_backend"] = str(backend).upper(), "given"
    else:
        att = "mla" if mla else "gqa"
        default = next((s for s in engine_table.valid_on(family, att) if family in s.default_on), None)
        if default is None:
            raise BadInput(f"--current: {engine_table.label} has no default {att.upper()} backend on {family} in "
                           "kbench's table")
        f["attention_backend"] = default.flags.split()[-1].strip("'\"").upper()
        why["attention_backend"] = f"not given: the {family} default ({VLLM_CITES['backend']})"
    f["use_trtllm_attention"], why["use_trtllm_attention"] = trtllm, "given" if trtllm is not None else "not given (auto)"
    block = _int_flag(given, "--block-size")
    f["block_size"], why["block_size"] = (block, "given") if block else (VLLM_BLOCK, f"not given ({VLLM_CITES['block']})")
    cap = _int_flag(given, "--max-num-seqs")
    f["max_num_seqs"], why["max_num_seqs"] = ((cap, "given") if cap else
                                              (VLLM_MAX_NUM_SEQS, f"not given ({VLLM_CITES['cap']})"))
    off = bool(given.get("--no-async-scheduling"))
    f["async_scheduling"], why["async_scheduling"] = (not off, "given" if off or given.get("--async-scheduling")
                                                      else f"not given: on ({VLLM_CITES['overlap']})")
    f["page_size"] = f["block_size"]
    return f, why


# ---- the entry points ------------------------------------------------------------------------------------
def resolve_line(text: str, family: str, *, engine_table=None, preset: str | None = None,
                 source: str = "--current") -> Resolved:
    """A server command line resolved for a GPU family (sm80, sm90, sm100, sm120)."""
    from kbench.recommend.settings import load_table

    engine, env, argv = split_line(text)
    given, ignored = parse_flags(engine, argv)
    eng = engine_table if engine_table is not None else load_table().engine(engine)
    if eng.engine != engine:
        raise BadInput(f"--current is a {engine} command and --engine is {eng.engine}: give one engine")
    model = str(given.get("--model-path", given.get("--model")) or "")
    if not model:
        raise BadInput(f"--current: no model ({'--model-path' if engine == 'sglang' else 'vllm serve MODEL'})")
    arch = model_arch(model, preset)
    if engine == "sglang":
        if arch is None:
            raise BadInput(f"--current: kbench cannot tell the architecture of {model!r} (SGLang's defaults depend "
                           "on it): give a local model folder with its config.json, or --model PRESET")
        fields, why = resolve_sglang(given, family, arch, model)
        backends = sglang_slots(fields)
        cap, cap_given = fields["max_running_requests"], "--max-running-requests" in given
        overlap = "sum" if fields["disable_overlap_schedule"] else "max"
    else:
        fields, why = resolve_vllm(given, family, arch, eng)
        backends = {"verify": fields["attention_backend"], "draft_extend": fields["attention_backend"]}
        cap, cap_given = fields["max_num_seqs"], "--max-num-seqs" in given
        overlap = "max" if fields["async_scheduling"] else "sum"
    return Resolved(engine, eng.version, family, argv, env, model, arch, "mla" if is_mla(arch) else "gqa", fields,
                    why, backends, cap, cap_given, overlap, ignored, source)


def resolve_server_info(run_dir: str | Path, family: str, *, engine_table=None) -> Resolved:
    """A `kbench server-bench` run's server: SGLang's /server_info holds every resolved argument (the run keeps
    what kbench reads of it in its manifest's `server`, kbench.server.backends.SGLANG_INFO_KEYS); nothing is
    re-resolved, only read."""
    from kbench.runs.store import read_manifest

    man = read_manifest(Path(run_dir))
    if man.get("kind") != "server-bench":
        raise BadInput(f"--current {run_dir}: a {man.get('kind')!r} run, not a kbench server-bench run")
    backend = str(man.get("backend") or "")
    from kbench.recommend.serverinfo import typed

    info = typed(man.get("server"), f"--current {run_dir}")  # each field of its one type, else one line
    if backend != "sglang":
        raise BadInput(f"--current {run_dir}: a {backend or 'unknown'} server; kbench reads SGLang's /server_info "
                       "(for vLLM give its command line)")
    need = ("attention_backend", "page_size", "speculative_eagle_topk", "speculative_num_steps",
            "speculative_num_draft_tokens", "max_running_requests")
    missing = [k for k in need if info.get(k) is None]
    if missing:
        raise BadInput(f"--current {run_dir}: its server info has no {missing[0]} (a run from before kbench kept "
                       "every resolved argument, or a server without speculation): give the command line instead")
    from kbench.recommend.settings import load_table

    eng = engine_table if engine_table is not None else load_table().engine("sglang")
    fields = {k: info.get(k) for k in ("attention_backend", "prefill_attention_backend", "decode_attention_backend",
                                       "speculative_draft_attention_backend")}
    fields["speculative_attention_mode"] = info.get("speculative_attention_mode") or "prefill"
    for k in need[1:]:
        fields[k] = int(info[k])
    fields["speculative_algorithm"] = info.get("speculative_algorithm")
    fields["disable_overlap_schedule"] = bool(info.get("disable_overlap_schedule"))
    arch = info.get("architectures", [None])[0] if isinstance(info.get("architectures"), list) else None
    model = str(info.get("model_path") or "")
    mla = bool(info.get("use_mla_backend")) if "use_mla_backend" in info else is_mla(arch or model_arch(model))
    argv = _argv_of(fields, model)
    return Resolved("sglang", eng.version, family, argv, {}, model, arch, "mla" if mla else "gqa", fields,
                    {k: f"the server's /server_info ({run_dir})" for k in fields}, sglang_slots(fields),
                    fields["max_running_requests"], True, "sum" if fields["disable_overlap_schedule"] else "max",
                    [], str(run_dir))


def _argv_of(fields: dict, model: str) -> list[str]:
    """The SGLang flags that reproduce resolved fields (a server-bench run has no command line of its own)."""
    argv = ["--model-path", model or "MODEL_PATH"]
    for k in ("attention_backend", "prefill_attention_backend", "decode_attention_backend",
              "speculative_draft_attention_backend"):
        if fields.get(k):
            argv += ["--" + k.replace("_", "-"), str(fields[k])]
    argv += ["--speculative-algorithm", str(fields.get("speculative_algorithm") or "EAGLE"),
             "--speculative-eagle-topk", str(fields["speculative_eagle_topk"]),
             "--speculative-num-steps", str(fields["speculative_num_steps"]),
             "--speculative-num-draft-tokens", str(fields["speculative_num_draft_tokens"]),
             "--page-size", str(fields["page_size"]), "--max-running-requests", str(fields["max_running_requests"])]
    if fields.get("disable_overlap_schedule"):
        argv.append("--disable-overlap-schedule")
    return argv


def resolve_current(text: str, family: str, *, engine_table=None, preset: str | None = None) -> Resolved:
    """`--current`: a server-bench run folder, @FILE, or the line itself."""
    if not text.startswith("@") and Path(text).is_dir():
        return resolve_server_info(text, family, engine_table=engine_table)
    return resolve_line(read_current(text), family, engine_table=engine_table, preset=preset,
                        source=text if text.startswith("@") else "--current")


# ---- from a resolved configuration to the settings table -------------------------------------------------
def setting_for(eng, resolved: Resolved):
    """The setting of the table (kbench.recommend.settings) that runs what the server resolved to: the same
    backend at each step and the environment the setting needs; among those, the one whose own flags say what the
    user's line says (its slots, vLLM's use_trtllm_attention), then the one that needs the most of the line's
    environment. None when no setting is that configuration."""
    from kbench.recommend.flags import sglang_backends

    tree = resolved.spec.topk > 1
    trtllm = resolved.fields.get("use_trtllm_attention")
    cands = [s for s in eng.valid_on(resolved.family, resolved.attention)
             if not (s.chains_only and tree) and all(resolved.env.get(k) == v for k, v in s.env)
             and _backends_of_setting(eng.engine, s) == resolved.backends
             and (resolved.engine != "vllm" or _vllm_trtllm(s) in (None, trtllm))]

    def says(s) -> tuple[bool, int]:
        if resolved.engine == "vllm":
            return _vllm_trtllm(s) == trtllm, len(s.env)
        slots = sglang_backends(s.flags)
        same = all(slots.get(f"--{k.replace('_', '-')}") == resolved.fields.get(k)
                   for k in ("prefill_attention_backend", "decode_attention_backend",
                             "speculative_draft_attention_backend"))
        return same, len(s.env)

    return max(cands, key=says) if cands else None


def _vllm_trtllm(s):
    from kbench.recommend.flags import vllm_backend

    return vllm_backend(s.flags)[1]


def _backends_of_setting(engine: str, s) -> dict[str, str]:
    from kbench.recommend.flags import sglang_backends, vllm_backend

    if engine == "sglang":
        slots = sglang_backends(s.flags)
        fields = {k.lstrip("-").replace("-", "_"): v for k, v in slots.items()}
        mode = next((a.partition("=")[2] or b for a, b in zip(s.flags.split(), s.flags.split()[1:] + [""])
                     if a.startswith("--speculative-attention-mode")), None)
        fields["speculative_attention_mode"] = mode or "prefill"
        if fields.get("attention_backend") is None:
            p, d = fields.get("prefill_attention_backend"), fields.get("decode_attention_backend")
            fields["attention_backend"] = p if p == d else None
        return sglang_slots(fields)
    backend, _ = vllm_backend(s.flags)
    return {"verify": backend, "draft_extend": backend}


def engine_default(eng, family: str, attention: str, spec, page: int, argv: list[str] | None = None,
                   env: dict | None = None, model: str | None = None):
    """(setting, Resolved) the engine runs when no backend is given: the user's own line without its backend flags
    (argv), or the command kbench prints for this spec config and page size; (None, resolved) when that backend is
    no setting of the table."""
    from kbench.recommend.flags import command_line, server_flags

    if argv is None:
        algo = "mtp" if attention == "mla" else "eagle"
        argv = ["--model-path" if eng.engine == "sglang" else "--model", "MODEL_PATH",
                *server_flags(eng.engine, "", spec, page, algorithm=algo)]
    drop = {"--attention-backend", "--prefill-attention-backend", "--decode-attention-backend",
            "--speculative-draft-attention-backend", "--speculative-attention-mode", "-ac", "--attention-config"}
    kept, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        name, eq, _ = a.partition("=")
        if name in drop:
            skip = not eq
            continue
        kept.append(a)
    line = command_line(eng.engine, kept[2:], model=kept[1]) if kept[:1] in (["--model-path"], ["--model"]) \
        else command_line(eng.engine, kept)
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    r = resolve_line((prefix + " " if prefix else "") + line, family, engine_table=eng,
                     preset=model or ("deepseek-v3" if attention == "mla" else "llama3-8b"))
    return setting_for(eng, r), r


# ---- layers of a model preset, the cap flag, and the diff against the user's own line ---------------------------
# attention layers of the target (verify) and of its draft (EAGLE head or MTP layer: one) per kbench model preset
MODEL_LAYERS = {"llama3-8b": (32, 1), "llama3-70b-tp8": (80, 1), "llama3.2-1b": (16, 1), "qwen3-30b-a3b": (48, 1),
                "qwen2.5-7b": (28, 1), "gemma2-9b": (42, 1), "deepseek-v3": (61, 1), "deepseek-v3-tp8": (61, 1),
                "kimi-k2": (61, 1), "kimi-k2-tp8": (61, 1)}
CAP_FLAG = {"sglang": "--max-running-requests", "vllm": "--max-num-seqs"}
DEFAULT_CAP = {"sglang": SGLANG_CAP, "vllm": VLLM_MAX_NUM_SEQS}
BACKEND_FLAGS = {"sglang": ("--attention-backend", "--prefill-attention-backend", "--decode-attention-backend",
                            "--speculative-draft-attention-backend", "--speculative-attention-mode"),
                 "vllm": ("--attention-backend", "-ac", "--attention-config")}


def check_cap(engine: str, current: Resolved | None, max_batch: int) -> int | None:
    """The cap flag's value when the priced batch exceeds the engine's resolved cap (None: it does not); BadInput
    when the user gave the cap and the workload is above it."""
    cap = current.cap if current is not None else DEFAULT_CAP[engine]
    if max_batch <= cap:
        return None
    if current is not None and current.cap_given:
        raise BadInput(f"the workload's batch of {max_batch} is above the {CAP_FLAG[engine]} {cap} your server "
                       "runs with: it never runs that batch (price batches up to the cap, or raise it)")
    return max_batch


def _flag_pairs(argv: list[str]) -> list[tuple[str, str | None]]:
    out, i = [], 0
    while i < len(argv):
        name, eq, val = argv[i].partition("=")
        if eq:
            out.append((name, val))
            i += 1
        elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            out.append((name, argv[i + 1]))
            i += 2
        else:
            out.append((name, None))
            i += 1
    return out


def shown(current: Resolved) -> tuple[list[str], dict[str, str], list[str]]:
    """The user's line as kbench prints it back, (argv, env, what was hidden): every value that can carry a secret
    as *** (kbench.redact, the one redaction), never echoed into a printed line, --json or --markdown."""
    from kbench import redact

    return redact.argv(current.argv), redact.env(current.env), redact.hidden(current.argv, current.env)


def edited_line(current: Resolved, setting=None, cap: int | None = None,
                page: int | None = None) -> tuple[str, dict[str, list[str]]]:
    """The user's own line with a setting's backend flags (and environment) instead of theirs (setting None: their
    backend flags and environment kept), the cap flag when the priced batch needs it, and the page the setting was
    priced at when the engine moves it there (said, not left to the engine): (the command, {"add": [...],
    "change": [...], "drop": [...]})."""
    from kbench.recommend.flags import _option, command_line

    shown_argv, shown_env, _ = shown(current)
    own = BACKEND_FLAGS[current.engine] if setting is not None else ()
    pairs = _flag_pairs(shown_argv)
    theirs = {n: v for n, v in pairs if n in own}
    want = {n: v for n, v in _flag_pairs(shlex.split(setting.flags))} if setting is not None else {}
    if cap is not None:
        want[CAP_FLAG[current.engine]] = str(cap)
    if page is not None and page != given_page(current):
        want["--page-size" if current.engine == "sglang" else "--block-size"] = str(page)
    kept = [(n, v) for n, v in pairs if n not in own and n not in want]
    argv = [x for n, v in kept + list(want.items()) for x in ((n,) if v is None else _option(n, v))]
    model_flag = "--model-path" if current.engine == "sglang" else "--model"
    model = next((v for n, v in kept if n == model_flag), current.model)
    argv2 = [x for n, v in kept + list(want.items()) if n != model_flag
             for x in ((n,) if v is None else _option(n, v))]
    env = dict(shown_env)
    setting_env = setting.env if setting is not None else ()
    for k, v in setting_env:
        env[k] = v
    table_env = {k for k, _ in setting_env}
    dropped_env = [k for k in current.env if k.startswith("SGLANG_OPT_FLASHINFER") and k not in table_env
                   and setting is not None]
    for k in dropped_env:
        env.pop(k)
    line = command_line(current.engine, argv2, model=model)
    if env:
        line = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + line
    diff = {"add": [], "change": [], "drop": []}
    given = dict(pairs)
    for n, v in want.items():
        text = n if v is None else f"{n} {v}"
        if n not in given:
            diff["add"].append(text)
        elif given[n] != v:
            diff["change"].append(f"{n} {given[n]} -> {v}")
    diff["drop"] += [n if v is None else f"{n} {v}" for n, v in theirs.items() if n not in want]
    diff["add"] += [f"{k}={v}" for k, v in setting_env if current.env.get(k) != v]
    diff["drop"] += [f"{k}={current.env[k]}" for k in dropped_env]
    del argv
    return line, diff
