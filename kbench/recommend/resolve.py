"""What a server runs: the user's own command line (or a `kbench server-bench` run's server info) resolved as the
engine release resolves it: the attention backend of each step, the page size, the speculative config (topk,
draft steps, draft tokens), the cap on running requests, whether the host work overlaps the GPU, TP, DP attention,
the KV dtype and CUDA graphs. Every value says which rule set it (the released source's file:line).

    from kbench.recommend.resolve import resolve_line
    r = resolve_line("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct "
                     "--speculative-algorithm EAGLE --speculative-draft-model-path yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
                     family="sm90")
    r.fields["attention_backend"], r.fields["page_size"], r.spec, r.cap, r.why["attention_backend"]

The rules are data, one file per engine release (kbench/recommend/rules/sglang-0.5.23.toml, vllm-0.34.0.toml,
read by kbench.recommend.rules): the flags and the parser's choices, the defaults, then the rules in the engine's
own pipeline order (SGLang: arg_groups/pipeline.py; the backend default before the page-size and speculative
defaults). This module parses a line by the file's flags, gives the rules the model's facts (its config.json) and
reads the result; tests/test_resolve_parity.py runs SGLang's own resolve_once over 922 generated lines and
requires the same fields, or the same refusal. `kbench resolve` prints it; `recommend --current` prices it.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from kbench import files
from kbench.errors import BadInput
from kbench.recommend.rules import Refused  # noqa: F401  (the engine refuses the line: its reason and cite)


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
    model_heads: tuple[int, int] | None = None  # (q heads, KV heads) of the whole model (config.json or preset)

    @property
    def attention_tp(self) -> int:
        """Ranks one attention layer's heads are split over: TP, divided by the DP attention groups."""
        return max(1, self.tp_size // max(1, self.dp_attention))

    @property
    def heads_per_rank(self) -> tuple[int, int] | None:
        """(q heads, KV heads) one rank runs (MLA: one latent KV head); None when the model's heads are unknown."""
        if self.model_heads is None:
            return None
        q, kv = self.model_heads
        t = self.attention_tp
        return (max(1, q // t), 1 if self.attention == "mla" else max(1, kv // t))

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


# ---- the rules -------------------------------------------------------------------------------------------------
# The engine releases' rules are data: kbench/recommend/rules/<engine>-<version>.toml, read by kbench.recommend.rules.
# This module parses the line by the file's flags, gives the rules the model's facts and reads the result.
def rules_for(engine: str, version: str | None = None):
    from kbench.recommend.rules import load_rules

    return load_rules(engine, version)


def parse_flags(rs, argv: list[str]) -> tuple[dict, dict[str, str], list[str]]:
    """(fields the line gives, {field: the flag that gave it}, the inert flags set aside) by the rules file's flags:
    Refused where the engine's parser refuses (a value not among its choices, a flag it no longer has, an ambiguous
    prefix), BadInput where kbench's rules do not model a flag or value."""
    from kbench.files import JSONProblem, loads

    label = f"{rs.engine} {rs.version}"
    given: dict = {}
    by: dict[str, str] = {}
    ignored = []
    i = 0
    while i < len(argv):
        a = argv[i]
        name, eq, val = a.partition("=")
        if not a.startswith("-"):
            raise BadInput(f"--current: {a!r} is not a flag (after {argv[i - 1] if i else 'the command'}); quote a "
                           "value with spaces")
        spec = rs.flags.get(name)
        shown_name = name
        while spec is not None and "alias" in spec:
            name = spec["alias"]
            spec = rs.flags.get(name)
        if spec is not None and "same_as" in spec:
            spec = {**rs.flags[spec["same_as"]], **{k: v for k, v in spec.items() if k != "same_as"}}
        kind = spec.get("type", "str") if spec is not None else None
        inert = rs.inert.get(name)
        if spec is None and inert is None:
            raise BadInput(f"--current: {name} is a flag kbench's rules of {label} do not model "
                           f"({rs.path}): it may change the attention steps, so nothing is resolved (drop it from "
                           "the line to resolve the rest)")
        if spec is not None and "refuse" in spec:
            cite = rs.cite(spec["cite"])
            raise Refused(f"--current: {label} refuses {shown_name}: \"{spec['refuse']}\" ({cite})", spec["refuse"],
                          cite, shown_name)
        if (kind == "bool") if spec is not None else (inert == "bool"):
            if eq:
                raise BadInput(f"--current: {name} takes no value (got {a!r})")
            value = spec.get("value", True) if spec is not None else True
            i += 1
        elif eq:
            value = val
            i += 1
        else:
            if i + 1 >= len(argv) or (argv[i + 1].startswith("--") and argv[i + 1] != "--"):
                raise BadInput(f"--current: {name} needs a value")
            value = argv[i + 1]
            i += 2
        if spec is None:
            ignored.append(name)
            continue
        cite = rs.cite(spec.get("cite", ""))
        if kind == "int":
            try:
                value = int(str(value))
            except ValueError:
                says = f"argument {name}: invalid int value: {value!r}"
                raise Refused(f"--current: {label} refuses it: \"{says}\" ({cite})", says, cite, name) from None
        elif kind == "json":
            try:
                obj = loads(str(value))
            except JSONProblem:
                raise BadInput(f"--current: {shown_name} is not JSON") from None
            if not isinstance(obj, dict):
                raise BadInput(f"--current: {shown_name} is not a JSON object")
            extra = sorted(set(obj) - set(spec["keys"]))
            if extra:
                raise BadInput(f"--current: {shown_name} key {extra[0]!r} is not modelled by kbench's rules of "
                               f"{label} (they read {', '.join(spec['keys'])})")
            for k, f in spec["keys"].items():
                if k in obj:
                    given[f], by[f] = obj[k], f"{shown_name} {k}"
            continue
        elif kind == "str":
            value = str(value)
            seen = value.upper() if spec.get("upper") else value
            if spec.get("choices") and seen not in spec["choices"]:
                says = (f"argument {name}: invalid choice: {value!r} (choose from "
                        f"{', '.join(repr(c) for c in spec['choices'])})")
                raise Refused(f"--current: {label} refuses it: \"{says}\" ({cite})", says, cite, name)
            if spec.get("models") and seen not in spec["models"]:
                raise BadInput(f"--current: {name} {value}: {label} takes it, but kbench's rules ({rs.path}) do not "
                               f"model it (they model {', '.join(spec['models'])})")
            value = seen
        given[spec["field"]], by[spec["field"]] = value, shown_name
    return given, by, ignored


# ---- the model's architecture ----------------------------------------------------------------------------
# kbench's model presets (kbench.cases.models) and the architecture each stands for
PRESET_ARCH = {"llama3-8b": "LlamaForCausalLM", "llama3-70b-tp8": "LlamaForCausalLM",
               "llama3.2-1b": "LlamaForCausalLM", "qwen3-30b-a3b": "Qwen3MoeForCausalLM",
               "qwen2.5-7b": "Qwen2ForCausalLM", "gemma2-9b": "Gemma2ForCausalLM", "gpt-oss": "GptOssForCausalLM",
               "deepseek-v3": "DeepseekV3ForCausalLM", "deepseek-v3-tp8": "DeepseekV3ForCausalLM",
               "kimi-k2": "DeepseekV3ForCausalLM", "kimi-k2-tp8": "DeepseekV3ForCausalLM"}
# a hub name's architecture, by the name (a local folder's config.json wins); the first match counts
NAME_ARCH = ((r"llama", "LlamaForCausalLM"), (r"deepseek-v3\.2", "DeepseekV32ForCausalLM"),
             (r"deepseek-(v3|r1)", "DeepseekV3ForCausalLM"), (r"deepseek-v2", "DeepseekV2ForCausalLM"),
             (r"kimi-k2", "DeepseekV3ForCausalLM"), (r"qwen3-.*a\d+b", "Qwen3MoeForCausalLM"),
             (r"qwen3-", "Qwen3ForCausalLM"), (r"qwen2\.5", "Qwen2ForCausalLM"), (r"gpt-oss", "GptOssForCausalLM"),
             (r"gemma-?2", "Gemma2ForCausalLM"))


def model_config(model: str) -> dict | None:
    """A local model folder's config.json (None: `model` is no local folder); BadInput for a folder without a
    readable one."""
    folder = Path(model)
    if not model or not folder.is_dir():
        return None
    cfg = folder / "config.json"
    if not cfg.exists() and not cfg.is_symlink():
        raise BadInput(f"--current: the model folder {model} has no config.json (the engine reads the architecture "
                       "there)")
    text = files.read_text(cfg, f"--current: {cfg}")  # bounded: a FIFO, a device, a huge file is one line
    try:
        data = files.loads(text)
    except files.JSONProblem:
        raise BadInput(f"--current: {cfg} is not a readable model config") from None
    if not isinstance(data, dict):
        raise BadInput(f"--current: {cfg} is not a readable model config (not a JSON object)")
    return data


def model_arch(model: str, preset: str | None = None) -> str | None:
    """The architecture of the served model: a local folder's config.json, else by its name, else the preset."""
    cfg = model_config(model)
    if cfg is not None:
        archs = cfg.get("architectures") or []
        if not isinstance(archs, list) or not archs:
            raise BadInput(f"--current: {Path(model) / 'config.json'} names no architectures")
        return str(archs[0])
    low = model.lower()
    for pattern, arch in NAME_ARCH:  # the line's own model name says more than a preset (a run's model)
        if re.search(pattern, low):
            return arch
    return PRESET_ARCH.get(preset) if preset else None


def is_mla(arch: str | None) -> bool:
    return arch in rules_for("sglang").models.get("mla", ())


# ---- SGLang's page and slots -------------------------------------------------------------------------------------
SLOTS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend",
         "speculative_draft_attention_backend")


def sglang_page(slots_named: list[str | None], page: int | None, *, gpu: str = "sm90", mla: bool = False,
                topk: int | None = None) -> tuple[int, str]:
    """(page, why) SGLang runs at, from the page the line gives (None: none) and the backends of its four slots
    (attention, prefill, decode, speculative draft): the page rules of the release's rules file (the `page_*`
    rules: the pages each backend forces per slot, then the default, 1). The one rule for a user's line and for a
    setting kbench prices."""
    rs = rules_for("sglang")
    state = dict(zip(SLOTS, slots_named))
    state["page_size"] = page
    facts = {"gpu": gpu, "mla": mla, "speculative_eagle_topk": topk}
    out = rs.apply_only(state, facts, prefix="page_")
    return int(out.fields["page_size"]), out.why.get("page_size", "given")


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


# ---- the entry points ------------------------------------------------------------------------------------
def resolve_fields(engine: str, argv: list[str], family: str, *, arch: str | None, config: dict | None = None,
                   version: str | None = None):
    """The engine release's fields for a line's arguments (argv after the launcher) on a GPU family: (fields, why,
    the rules that fired, the inert flags set aside, the rules file). Refused where the engine refuses the line,
    BadInput where kbench's rules cannot resolve it (a flag or an architecture they do not know)."""
    rs = rules_for(engine, version)
    given, by, ignored = parse_flags(rs, argv)
    if not rs.known(arch):
        raise BadInput(f"--current: the architecture {arch} is not one kbench's rules of {rs.engine} {rs.version} "
                       f"know ({rs.path}: {', '.join(rs.models.get('known', ()))}); kbench never guesses a backend")
    fields = {f: None for f in rs.field_names()}
    why = {}
    for k, v in rs.defaults.items():
        fields[k] = v
        why[k] = f"default ({rs.cite(rs.defaults_cite[k])})" if k in rs.defaults_cite else "default"
    for k, v in given.items():
        fields[k] = v
        why[k] = f"given ({by[k]})"
    out = rs.apply(fields, {"gpu": family, **rs.facts(arch, config)}, why)
    return out.fields, out.why, out.fired, ignored, rs


def resolve_line(text: str, family: str, *, engine_table=None, preset: str | None = None,
                 source: str = "--current") -> Resolved:
    """A server command line resolved for a GPU family (sm80, sm90, sm100, sm120) by its engine release's rules."""
    from kbench.recommend.settings import load_table

    engine, env, argv = split_line(text)
    eng = engine_table if engine_table is not None else load_table().engine(engine)
    if eng.engine != engine:
        raise BadInput(f"--current is a {engine} command and --engine is {eng.engine}: give one engine")
    rs = rules_for(engine)
    given, _, _ = parse_flags(rs, argv)
    model = str(given.get("model_path", given.get("model")) or "")
    if not model:
        raise BadInput(f"--current: no model ({'--model-path' if engine == 'sglang' else 'vllm serve MODEL'})")
    config = model_config(model)
    arch = model_arch(model, preset)
    if arch is None:
        raise BadInput(f"--current: kbench cannot tell the architecture of {model!r} (the engine's defaults depend "
                       "on it): give a local model folder with its config.json, or --model PRESET")
    if engine == "sglang" and given.get("speculative_algorithm") is None:
        raise BadInput("--current: no --speculative-algorithm: the server does not speculate, and kbench prices "
                       "speculative steps (target verify, draft extend)")
    fields, why, _, ignored, rs = resolve_fields(engine, argv, family, arch=arch, config=config)
    mla = rs.facts(arch, config)["mla"]
    if engine == "sglang":
        if fields["speculative_num_draft_tokens"] < 2:
            raise BadInput("--current: one draft token per step verifies nothing kbench prices (give more steps)")
        backends = sglang_slots(fields)
        cap, cap_given = fields["max_running_requests"], "max_running_requests" in given
        overlap = "sum" if fields["disable_overlap_schedule"] else "max"
        tp, dp, graphs = fields["tp_size"], fields["attn_dp_size"], not fields["disable_cuda_graph"]
        fi_version = None
    else:
        method = fields.get("method")
        if method is None:
            raise BadInput("--current: no speculative method (--speculative-config or --spec-method): the server "
                           "does not speculate, and kbench prices speculative steps")
        if str(method).lower() not in ("eagle", "eagle3", "mtp"):
            raise BadInput(f"--current: speculative method {method!r}: kbench's table models eagle, eagle3 and mtp")
        fields["method"] = str(method).lower()
        n = fields.get("num_speculative_tokens")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise BadInput(f"--current: num_speculative_tokens {n!r}: an integer >= 1 "
                           f"({rs.cite('config/speculative.py:455, 1375-1379')})")
        backends = {"verify": fields["attention_backend"], "draft_extend": fields["attention_backend"]}
        cap, cap_given = fields["max_num_seqs"], "max_num_seqs" in given
        overlap = "max" if fields["async_scheduling"] else "sum"
        tp, dp, graphs = fields["tensor_parallel_size"], 1, not fields["enforce_eager"]
        fi_version = installed_flashinfer()
    shown_fields = {k: fields[k] for k in rs.report if k in fields}
    return Resolved(engine, rs.version, family, argv, env, model, arch, "mla" if mla else "gqa", shown_fields,
                    {k: why.get(k, "") for k in shown_fields}, backends, cap, cap_given, overlap, ignored, source,
                    tp_size=int(tp), dp_attention=int(dp), kv_cache_dtype=str(fields["kv_cache_dtype"]),
                    cuda_graph=bool(graphs), model_heads=model_heads(config, preset, model, arch),
                    flashinfer_version=fi_version)


def installed_flashinfer() -> str | None:
    """The FlashInfer installed beside vLLM in the environment kbench runs in (the server's, when kbench runs on the
    serving host), None when either is missing: what a vLLM line's FLASHINFER backend runs there."""
    from importlib import metadata

    try:
        metadata.version("vllm")
        return metadata.version("flashinfer-python")
    except metadata.PackageNotFoundError:
        return None


# a hub name whose heads one kbench preset gives whatever its size (DeepSeek-V3/R1: 128 q heads; gpt-oss-20b and
# -120b: 64 q and 8 KV heads; Kimi K2: 64): a Llama or Qwen name is not enough (8B and 70B differ)
NAME_HEADS = ((r"deepseek-(v3|r1)", "deepseek-v3"), (r"gpt-oss", "gpt-oss"), (r"kimi-k2", "kimi-k2"))


def model_heads(config: dict | None, preset: str | None = None, model: str = "",
                arch: str | None = None) -> tuple[int, int] | None:
    """(q heads, KV heads) of the whole model: its config.json, else what its name says, else a one-rank kbench
    preset of the same architecture."""
    from kbench.cases.models import MODELS

    if config is not None:
        q = config.get("num_attention_heads")
        kv = config.get("num_key_value_heads", q)
        if isinstance(q, int) and isinstance(kv, int) and q > 0 and kv > 0:
            return q, kv
        return None
    name = next((p for pattern, p in NAME_HEADS if re.search(pattern, model.lower())), None)
    if name is None and preset and "-tp" not in preset and (arch is None or PRESET_ARCH.get(preset) == arch):
        name = preset
    h = MODELS.get(name) if name else None
    return (h.num_qo_heads, h.num_kv_heads) if h is not None else None



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
    if arch is None and "use_mla_backend" not in info:
        try:
            arch = model_arch(model)  # the served model's folder, when it is on this machine
        except BadInput:
            arch = None  # a folder without a readable config: the server info says what it ran
    mla = bool(info.get("use_mla_backend")) if "use_mla_backend" in info else is_mla(arch)
    argv = _argv_of(fields, model)
    return Resolved("sglang", eng.version, family, argv, {}, model, arch, "mla" if mla else "gqa", fields,
                    {k: f"the server's /server_info ({run_dir})" for k in fields}, sglang_slots(fields),
                    fields["max_running_requests"], True, "sum" if fields["disable_overlap_schedule"] else "max",
                    [], str(run_dir), tp_size=_int_of(info.get("tp_size"), 1),
                    dp_attention=_int_of(info.get("attn_dp_size"), 1) if "attn_dp_size" in info else
                    (_int_of(info.get("dp_size"), 1) if info.get("enable_dp_attention") else 1),
                    kv_cache_dtype=str(info.get("kv_cache_dtype") or "auto"),
                    cuda_graph=not info.get("disable_cuda_graph"))


def _int_of(v, default: int) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


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
                "qwen2.5-7b": (28, 1), "gemma2-9b": (42, 1), "gpt-oss": (36, 1),  # gpt-oss-120b (model_dims)
                "deepseek-v3": (61, 1), "deepseek-v3-tp8": (61, 1),
                "kimi-k2": (61, 1), "kimi-k2-tp8": (61, 1)}
CAP_FLAG = {"sglang": "--max-running-requests", "vllm": "--max-num-seqs"}
DEFAULT_CAP = {"sglang": rules_for("sglang").rule("eagle_cap").set["max_running_requests"],
               "vllm": rules_for("vllm").defaults["max_num_seqs"]}  # each engine's cap with speculation
BACKEND_FLAGS = {"sglang": ("--attention-backend", "--prefill-attention-backend", "--decode-attention-backend",
                            "--speculative-draft-attention-backend", "--speculative-attention-mode"),
                 "vllm": ("--attention-backend", "-ac", "--attention-config")}


def check_cap(engine: str, current: Resolved | None, max_batch: int) -> int | None:
    """The cap flag's value when the priced batch exceeds the engine's resolved cap (None: it does not); BadInput
    when the user gave the cap and the workload is above it. Under SGLang's DP attention the cap is split over the
    ranks (each admits cap // dp: kbench.recommend.ranks.DP_CAP_CITE), so the server runs dp x (cap // dp) at once
    and the flag printed is the smallest cap that runs the batch, dp x ceil(batch / dp)."""
    from kbench.recommend.ranks import DP_CAP_CITE, dp_cap_for, dp_rank_cap, dp_server_cap

    cap = current.cap if current is not None else DEFAULT_CAP[engine]
    dp = max(1, int(getattr(current, "dp_attention", 1) or 1)) if current is not None else 1
    runs = dp_server_cap(cap, dp) if dp > 1 else cap
    if max_batch <= runs:
        return None
    if current is not None and current.cap_given:
        split = (f" (DP attention over {dp}: each rank admits {dp_rank_cap(cap, dp)}, {runs} in all: "
                 f"{DP_CAP_CITE.split(' (')[0]})" if dp > 1 else "")
        raise BadInput(f"the workload's batch of {max_batch} is above the {CAP_FLAG[engine]} {cap} your server "
                       f"runs with{split}: it never runs that batch (price batches up to the cap, or raise it"
                       + (f" to {dp_cap_for(max_batch, dp)})" if dp > 1 else ")"))
    return dp_cap_for(max_batch, dp) if dp > 1 else max_batch


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
