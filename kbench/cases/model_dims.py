"""The dimensions of each model preset beyond its attention heads: what the model's other layers (projections, MLP
or experts, norms, LM head) and its speculative draft cost a step (kbench.kernels.model_layers builds that work).

Per tensor-parallel rank, as the heads in kbench.cases.models are: a TP preset's MLP width, expert width and
vocabulary are the rank's shard (the all-reduces between ranks are not in a layer's time: said in the rows).
Values are the models' published config.json fields; `draft` is the speculative draft one step runs (EAGLE: one
decoder layer of the target's width with its fc over [embedding, hidden], and its own LM head; DeepSeek/Kimi MTP:
one decoder layer of the target's kind, MoE included, with eh_proj). A draft whose width its checkpoint does not
fix in kbench's sources is marked `assumed` and the rows say so.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from kbench.cases.models import MODELS
from kbench.errors import BadInput


@dataclass(frozen=True)
class MoE:
    experts: int  # routed experts (per rank: all of them, each sharded by TP)
    per_token: int  # experts each token is routed to
    intermediate: int  # one expert's MLP width (per rank)
    shared: int = 0  # shared experts (each of the routed width)
    dense_layers: int = 0  # the first layers that are dense MLPs (DeepSeek-V3: 3) instead of experts


@dataclass(frozen=True)
class ModelDims:
    hidden: int
    intermediate: int  # the dense MLP's width (per rank); MoE models: their dense layers' width
    vocab: int  # the LM head's rows (per rank: vocabulary-parallel under TP)
    layers: int  # decoder layers of the target
    tp: int = 1
    moe: MoE | None = None
    mla: tuple[int, int] | None = None  # (q_lora_rank, v_head_dim) of an MLA model (its widths: kbench.cases.mla)
    draft: str = "eagle"  # eagle | mtp
    draft_intermediate: int | None = None  # the draft layer's MLP width (None: the target's, or its MoE for MTP)
    draft_vocab: int | None = None  # the draft's LM head rows (None: the target's)
    assumed: str = ""  # what of the draft is assumed, not read from a checkpoint
    source: str = ""

    @property
    def is_moe(self) -> bool:
        return self.moe is not None


# the dimension fields a preset must give for its other layers to be priced (BadInput names those missing)
REQUIRED = ("hidden", "intermediate", "vocab", "layers")

DIMS: dict[str, ModelDims] = {
    "llama3-8b": ModelDims(4096, 14336, 128256, 32, source="meta-llama/Llama-3.1-8B config.json; EAGLE draft: "
                           "yuhuili/EAGLE-LLaMA3.1-Instruct-8B (one layer, full vocabulary)"),
    "llama3-70b-tp8": ModelDims(8192, 28672 // 8, 128256 // 8, 80, tp=8, source="meta-llama/Llama-3.1-70B "
                                "config.json, sharded over 8 ranks; EAGLE draft of the target's width"),
    "llama3.2-1b": ModelDims(2048, 8192, 128256, 16, source="meta-llama/Llama-3.2-1B config.json"),
    "qwen2.5-7b": ModelDims(3584, 18944, 152064, 28, source="Qwen/Qwen2.5-7B config.json"),
    "gemma2-9b": ModelDims(3584, 14336, 256000, 42, source="google/gemma-2-9b config.json"),
    # the EAGLE3 draft's width: sgl-project/SpecForge configs/qwen3-30B-eagle3.json (commit d1be954: one llama layer,
    # hidden 2048, intermediate 6144, 32/4 heads, draft_vocab_size 32000), the recipe SGLang's EAGLE3 drafts train by
    "qwen3-30b-a3b": ModelDims(2048, 6144, 151936, 48, moe=MoE(128, 8, 768), draft_intermediate=6144,
                               assumed="the draft's LM head over the full 151,936-token vocabulary and EAGLE's fc "
                                       "over 2 hidden states (SpecForge's EAGLE3 draft: a 32,000-token draft "
                                       "vocabulary, fc over 3): the committed rows price that, an upper bound",
                               source="Qwen/Qwen3-30B-A3B config.json; draft MLP width from sgl-project/SpecForge "
                                      "configs/qwen3-30B-eagle3.json"),
    # gpt-oss-120b (the preset's heads are both sizes'; 120b's depth and experts). Its EAGLE3 draft's width is not
    # settled by what kbench could read: SpecForge's gpt-oss-20B-eagle3.json (sgl-project) and a mirror of its
    # gpt-oss-120B-eagle3.json give intermediate 17280, a fork's (yilian49/SpecForge) 16384; the published
    # checkpoints' (nvidia/gpt-oss-120b-Eagle3*, lmsys) config.json were not found in the sources searched
    "gpt-oss": ModelDims(2880, 2880, 201088, 36, moe=MoE(128, 4, 2880), draft_intermediate=2880 * 4,
                         assumed="gpt-oss-120b's depth and experts (20b: 24 layers, 32 experts); the EAGLE draft's "
                                 "dense MLP width (11520; SpecForge's configs say 16384 or 17280, with a 32,000-token "
                                 "draft vocabulary)",
                         source="openai/gpt-oss-120b config.json"),
    "deepseek-v3": ModelDims(7168, 18432, 129280, 61, moe=MoE(256, 8, 2048, shared=1, dense_layers=3),
                             mla=(1536, 128), draft="mtp", source="deepseek-ai/DeepSeek-V3 config.json (MTP: one "
                             "MoE layer, num_nextn_predict_layers 1)"),
    "deepseek-v3-tp8": ModelDims(7168, 18432 // 8, 129280 // 8, 61, tp=8,
                                 moe=MoE(256, 8, 2048 // 8, shared=1, dense_layers=3), mla=(1536, 128), draft="mtp",
                                 source="deepseek-ai/DeepSeek-V3 config.json, TP8 (experts sharded by TP)"),
    "kimi-k2": ModelDims(7168, 18432, 163840, 61, moe=MoE(384, 8, 2048, shared=1, dense_layers=1), mla=(1536, 128),
                         draft="mtp", source="moonshotai/Kimi-K2-Instruct config.json"),
    "kimi-k2-tp8": ModelDims(7168, 18432 // 8, 163840 // 8, 61, tp=8,
                             moe=MoE(384, 8, 2048 // 8, shared=1, dense_layers=1), mla=(1536, 128), draft="mtp",
                             source="moonshotai/Kimi-K2-Instruct config.json, TP8"),
}


def model_dims(preset: str) -> ModelDims:
    """The preset's dimensions; BadInput (one line, naming what is missing) for a preset without them."""
    if preset not in MODELS:
        raise BadInput(f"--model {preset!r}: one of {', '.join(MODELS)}")
    d = DIMS.get(preset)
    if d is None:
        h = MODELS[preset]
        raise BadInput(f"model preset {preset!r} has heads {h.text()} but not the dimensions its other layers need: "
                       f"{', '.join(REQUIRED)} (kbench.cases.model_dims.DIMS)")
    missing = [f.name for f in fields(d) if f.name in REQUIRED and not getattr(d, f.name)]
    if missing:
        raise BadInput(f"model preset {preset!r} lacks {', '.join(missing)}: its other layers cannot be priced")
    return d


def experts_touched(experts: int, per_token: int, tokens: int) -> float:
    """Expected distinct experts a batch of `tokens` tokens routes to, each token to `per_token` of `experts`
    uniformly at random: E x (1 - (1 - k/E)^T). The MoE estimate's count (real routers are skewed: fewer)."""
    if tokens <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - per_token / experts) ** tokens)
