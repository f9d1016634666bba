"""What one GPU of a server runs, and which rows of a run can price it (issue 52).

A launch line spreads the model over GPUs: under tensor parallelism (SGLang `--tp-size T`, vLLM
`--tensor-parallel-size T`) each rank runs heads / T of every attention layer (a GQA model's KV heads too, at least
one each); under SGLang's DP attention (`--enable-dp-attention --dp-size D`) the attention runs at TP T / D, so with
D = T every rank runs all heads on its share of the batch (batch / D). The KV-cache dtype picks the rows (fp8 rows
for an fp8 cache: kbench's fp8 rows are e4m3), `--disable-cuda-graph` / `--enforce-eager` runs the layers eagerly
(priced on the eager routes' rows: kbench.kernels.routes.eager), and the speculative algorithm says which steps
have a draft model of the target's heads (EAGLE, EAGLE3, NEXTN/MTP: both steps; STANDALONE drafts with its own
model and NGRAM with none: verify only). gpt-oss (sinks on every layer, a 128-token window on every other one) is
priced on rows with sinks and window, half its layers on each (`layer_mix`), verify only.

    plan = rank_plan(resolved, preset="deepseek-v3")        # heads per rank, batch divisor, kv rows, steps
    plan.heads, plan.batch_divisor, plan.kv_rows, plan.steps
    kbench.recommend.price.runs_that_answer(source, {"heads": plan.heads, "kv_dtype": "bf16"})  # runs beside it

The rows of a TP preset's run (`deepseek-v3-tp8`: 16 heads per GPU) answer only a line of that many heads per GPU;
a line of another spread is refused, naming the run beside it that has its heads.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from kbench.errors import BadInput

TP_PRESET = re.compile(r"-tp(\d+)$")
# the engine's KV-cache dtype -> kbench's rows (kv_dtype axis) and the key the settings table refuses it by
KV_ROWS = {"fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8_e5m2", "auto": None, "bfloat16": "bf16", "bf16": "bf16",
           "float16": "fp16", "half": "fp16", "fp16": "fp16"}
DRAFT_OWN_HEADS = ("STANDALONE", "NGRAM")  # verify only: the draft is another model's attention, or none
SGLANG_E5M2 = ("python/sglang/srt/arg_groups/overrides.py:1263-1270: with --kv-cache-dtype fp8_e5m2 SGLang runs "
               "fa3 as triton (MHA and MLA)")
# gpt-oss (issue 52): its layers alternate a 128-token sliding window and full attention, every one with learned
# sinks (config.json layer_types; model_overrides/gpt_oss.py:24-45 picks fa3 on SM90, trtllm_mha on SM100): its
# target verify is priced on rows of both groups (window_left -1 and 128, sinks on), half of its layers each
GPT_OSS_LAYERS = (((("window_left", -1), ("sinks", "on")), 0.5, "full layers"),
                  ((("window_left", 128), ("sinks", "on")), 0.5, "sliding layers, window 128"))
GPT_OSS_ROUTED = {"fa3", "trtllm_mha"}  # the backends whose routes take sinks and a window (gpt-oss-routes)
GPT_OSS_NOTE = ("gpt-oss: its target verify is priced as half full and half sliding (window 128) layers, each with "
                "its learned sinks, on rows with sinks and window (scenario gpt-oss-routes); its EAGLE3 draft (a "
                "model of its own) is not priced")
# why a gpt-oss line is not priced on a backend kbench has no sinks/window route of
GPT_OSS_REFUSAL = (
    "--current: gpt-oss runs learned attention sinks on every layer and a 128-token window on alternating ones, on "
    "{backends} (model_overrides/gpt_oss.py:24-45). kbench's routes of those backends take both (sglang-fa3: FA3 "
    "with window_size and bf16 s_aux; sglang-trtllm-mha: xqa with window_left and sinks; scenario gpt-oss-routes, "
    "checked against the float32 reference with sinks and window: results/baselines/h100-gpt-oss-routes-kv4096); "
    "kbench has no such route of {backends}, and another backend's price would not be this server's: not priced")
DSA_CITE = ("python/sglang/srt/arg_groups/model_overrides/deepseek_v2.py:98-103; "
            "python/sglang/srt/configs/model_config.py:191-211")


def preset_tp(preset: str | None) -> int:
    """The TP degree a kbench model preset's heads are per rank of ('deepseek-v3-tp8' -> 8; 1 otherwise)."""
    m = TP_PRESET.search(preset or "")
    return int(m.group(1)) if m else 1


def preset_heads(preset: str | None):
    """The HeadConfig of a preset (per rank of its TP), None for no or an unknown preset."""
    from kbench.cases.models import MODELS

    return MODELS.get(preset or "")


def whole_model(preset: str | None):
    """(q heads, kv heads, HeadConfig per rank of the preset, its tp) of the whole model a preset stands for."""
    h = preset_heads(preset)
    if h is None:
        return None
    tp = preset_tp(preset)
    return h.num_qo_heads * tp, (h.num_kv_heads * tp if not h.is_mla else 1), h, tp


def heads_per_rank(preset: str | None, attn_tp: int) -> str | None:
    """The `--heads` text one rank runs at attention TP attn_tp, for the whole model the preset stands for."""
    import dataclasses

    w = whole_model(preset)
    if w is None:
        return None
    qo, kv, h, _ = w
    if qo % attn_tp:
        raise BadInput(f"--current: tensor parallel size {attn_tp} does not divide the model's {qo} attention heads "
                       "(the engine refuses it)")
    if h.is_mla:
        from kbench.cases.models import HeadConfig

        return HeadConfig.mla(qo // attn_tp, h.kv_lora_rank, h.qk_rope_head_dim, h.qk_nope_head_dim).text()
    return dataclasses.replace(h, num_qo_heads=qo // attn_tp, num_kv_heads=max(1, kv // attn_tp)).text()


def run_heads_words(source) -> str:
    """'16 heads per GPU (deepseek-v3-tp8: the model at TP8)' for a run of a TP preset; '' otherwise."""
    tp = preset_tp(source.model)
    if tp == 1:
        return ""
    per = sorted({int(g.get("num_qo_heads", 0)) for g in source.policy.get("groups", [])})
    w = whole_model(source.model)
    return (f"its rows have {'/'.join(map(str, per))} attention heads per GPU ({source.model}: "
            f"{w[0] if w else '?'} heads split over TP{tp})")


@dataclass
class RankPlan:
    """What one GPU of the user's server runs, as kbench prices it."""
    heads: str | None  # the --heads text of one rank (None: not known whole; `counts` may still say how many)
    counts: tuple[int, int] | None = None  # (q heads, KV heads) of one rank (None: the model's heads are unknown)
    tp: int = 1
    attn_tp: int = 1  # attention's TP (tp / dp under DP attention)
    dp: int = 1  # DP attention ranks: each runs batch / dp
    kv_engine: str = "auto"
    kv_rows: str | None = None  # the kv_dtype rows that price it (None: the model's dtype)
    steps: tuple[str, ...] = ("verify", "draft_extend")
    notes: list[str] = field(default_factory=list)
    eager: bool = False  # --disable-cuda-graph / --enforce-eager: priced on the eager routes (`<route>-eager` rows)
    eager_flag: str = ""
    layer_mix: tuple = ()  # (group filters, share of the layers, words): a model of several layer kinds (gpt-oss)

    def rank_batch(self, batch_size: int, cap: int | None = None) -> int:
        """The batch one rank runs when the server runs batch_size requests: under DP attention the busiest rank's
        share, ceil(batch / dp), at most what its scheduler admits (dp_rank_cap; DP_CAP_CITE)."""
        b = math.ceil(batch_size / self.dp)
        return b if cap is None or self.dp == 1 else min(b, dp_rank_cap(cap, self.dp))


# SGLang 0.5.23 under DP attention: --max-running-requests is the server's cap; each of the attn_dp_size schedulers
# admits max(1, cap // attn_dp_size) (resolve_max_num_reqs, "per dp worker"), and the DP controller deals requests
# round robin by default, so B running requests put ceil(B / dp) on the busiest rank.
DP_CAP_CITE = ("python/sglang/srt/mem_cache/kv_cache_configurator.py:3119-3130 (each DP rank admits "
               "max(1, --max-running-requests // dp)); arg_groups/serving_hook.py:222-235, "
               "managers/data_parallel_controller.py:880-894 (requests dealt round robin)")


def dp_rank_cap(cap: int, dp: int) -> int:
    """Running requests one DP-attention rank admits under a server cap of `cap` (SGLang 0.5.23, DP_CAP_CITE)."""
    return max(1, int(cap) // max(1, int(dp)))


def dp_server_cap(cap: int, dp: int) -> int:
    """What the server runs at once under DP attention: dp ranks x what each admits (<= cap; 1 per rank at least)."""
    return max(1, int(dp)) * dp_rank_cap(cap, dp)


def dp_cap_for(batch_size: int, dp: int) -> int:
    """The smallest --max-running-requests under which dp ranks run a batch of batch_size (round robin: ceil(B / dp)
    on the busiest, so dp x that)."""
    return max(1, int(dp)) * math.ceil(batch_size / max(1, int(dp)))


def rank_plan(current, preset: str | None) -> RankPlan:
    """The plan of one rank for a resolved line (kbench.recommend.resolve.Resolved); BadInput for what no run of
    kbench can price: an architecture kbench has no route for (gpt-oss's sinks and window, V3.2's dsa),
    a TP spread of a model whose heads kbench does not know."""
    arch = current.arch or ""
    algo = str(current.fields.get("speculative_algorithm") or current.fields.get("method") or "EAGLE").upper()
    backends = set(current.backends.values())
    if "dsa" in backends or arch == "DeepseekV32ForCausalLM":
        raise BadInput(f"--current: DeepSeek-V3.2 runs SGLang's dsa backend (sparse attention over the indexer's "
                       f"top-k tokens, page 64: {DSA_CITE}); kbench has no dsa route, and another backend's price "
                       "would not be this server's: not priced")
    layer_mix: tuple = ()
    if arch == "GptOssForCausalLM":
        if not backends <= GPT_OSS_ROUTED:
            raise BadInput(GPT_OSS_REFUSAL.format(backends="/".join(sorted(backends))))
        layer_mix = GPT_OSS_LAYERS
    eager = not getattr(current, "cuda_graph", True)
    eager_flag = ("--disable-cuda-graph" if current.engine == "sglang" else "--enforce-eager") if eager else ""
    tp = max(1, int(getattr(current, "tp_size", 1) or 1))
    dp = max(1, int(getattr(current, "dp_attention", 1) or 1))
    if tp % dp:
        raise BadInput(f"--current: --dp-size {dp} does not divide --tp-size {tp} (SGLang refuses it)")
    attn_tp = tp // dp
    kv_engine = str(getattr(current, "kv_cache_dtype", "auto") or "auto").lower()
    if kv_engine not in KV_ROWS:
        raise BadInput(f"--current: --kv-cache-dtype {kv_engine}: kbench has rows of bf16, fp16 and fp8 (e4m3) "
                       "KV caches only")
    # the model's heads: the resolver's (its config.json, or a hub name that fixes them), else the preset's
    whole = getattr(current, "model_heads", None)
    w = whole_model(preset)
    same = whole is None or (w is not None and w[0] == whole[0] and (current.attention == "mla" or w[1] == whole[1]))
    heads = heads_per_rank(preset, attn_tp) if w is not None and same else None
    counts = None
    if whole is not None:
        q, kv = whole
        if q % attn_tp:
            raise BadInput(f"--current: tensor parallel size {attn_tp} does not divide the model's {q} attention "
                           "heads (the engine refuses it)")
        counts = (q // attn_tp, 1 if current.attention == "mla" else max(1, kv // attn_tp))
    elif heads is not None:
        from kbench.cases.models import parse_heads

        h = parse_heads(heads)
        counts = (h.num_qo_heads, h.num_kv_heads)
    if counts is None and attn_tp > 1:
        raise BadInput(f"--current: your line splits the attention over {attn_tp} GPUs, and kbench does not know "
                       "the model's heads: give --model PRESET (or a local model folder with its config.json)")
    notes = []
    if eager:
        notes.append(f"your line runs {eager_flag}: no CUDA graphs, every layer's attention launched from Python; "
                     "every setting is priced on its eager routes (`<route>-eager` rows: each layer's call timed as "
                     "launched back to back, so a call whose host work outlasts its kernel costs its host work) plus "
                     "the per-step host work added, not overlapped (the same Python thread issues both); the other "
                     "layers' eager launches are not in the price")
    steps = ("verify", "draft_extend")
    if layer_mix:
        steps = ("verify",)
        notes.append(GPT_OSS_NOTE)
    elif algo in DRAFT_OWN_HEADS:
        steps = ("verify",)
        notes.append(f"{algo} drafts " + ("with its own model (its heads and layers are not the target's)"
                                          if algo == "STANDALONE" else "from n-grams of the context, no model")
                     + ": its target verify is priced (as EAGLE's), its draft is not")
    if attn_tp > 1 or dp > 1:
        notes.append(f"priced per GPU: {heads or '/'.join(map(str, counts or ()))} heads per rank"
                     + (f" (the model's heads over TP{attn_tp})" if attn_tp > 1 else " (all the model's heads)")
                     + (f", DP attention: each of {dp} ranks runs its share of the batch (batch / {dp}, rounded up)"
                        if dp > 1 else ""))
    return RankPlan(heads, counts, tp, attn_tp, dp, kv_engine, KV_ROWS[kv_engine], steps, notes, eager, eager_flag,
                    layer_mix)
