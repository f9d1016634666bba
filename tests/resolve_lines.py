"""The generated launch lines of the parity test (tests/test_resolve_parity.py): every flag kbench's resolution
models, with its values, on seven model folders (config.json only, written by the test), on SM90 and SM100. Each
line is (gpu, model, flags); the test runs SGLang 0.5.23's own resolve_once over all of them in one subprocess and
requires kbench's fields to be the engine's, or a refusal wherever the engine refuses."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
         "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
         "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
         "torch_dtype": "bfloat16", "head_dim": 128, "hidden_act": "silu", "tie_word_embeddings": False}
QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288,
         "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 36, "head_dim": 128,
         "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_theta": 1000000,
         "torch_dtype": "bfloat16", "hidden_act": "silu", "tie_word_embeddings": False}
QWEN3_MOE = {**QWEN3, "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
             "num_attention_heads": 32, "num_key_value_heads": 4, "num_hidden_layers": 48, "num_experts": 128,
             "num_experts_per_tok": 8, "moe_intermediate_size": 768, "decoder_sparse_step": 1,
             "norm_topk_prob": True, "mlp_only_layers": []}
GPT_OSS = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
           "intermediate_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
           "num_hidden_layers": 24, "num_local_experts": 32, "num_experts_per_tok": 4, "sliding_window": 128,
           "layer_types": ["sliding_attention", "full_attention"] * 12, "vocab_size": 201088,
           "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 150000,
           "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                            "truncate": False, "original_max_position_embeddings": 4096},
           "torch_dtype": "bfloat16", "hidden_act": "silu", "tie_word_embeddings": False}
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
               "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_attention_heads": 128,
               "num_key_value_heads": 128, "num_hidden_layers": 61, "num_nextn_predict_layers": 1,
               "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
               "v_head_dim": 128, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
               "first_k_dense_replace": 3, "moe_layer_freq": 1, "n_group": 8, "topk_group": 4,
               "routed_scaling_factor": 2.5, "norm_topk_prob": True, "scoring_func": "sigmoid",
               "topk_method": "noaux_tc", "vocab_size": 129280, "max_position_embeddings": 163840,
               "rms_norm_eps": 1e-06, "rope_theta": 10000, "torch_dtype": "bfloat16", "hidden_act": "silu",
               "tie_word_embeddings": False,
               "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                                "original_max_position_embeddings": 4096, "type": "yarn"}}
DEEPSEEK_V2 = {**DEEPSEEK_V3, "architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
               "hidden_size": 5120, "num_hidden_layers": 60, "n_routed_experts": 160, "n_shared_experts": 2,
               "num_experts_per_tok": 6, "first_k_dense_replace": 1, "topk_method": "group_limited_greedy",
               "scoring_func": "softmax", "routed_scaling_factor": 16.0, "n_group": 8, "topk_group": 3,
               "num_nextn_predict_layers": 0, "vocab_size": 102400}
DEEPSEEK_V32 = {**DEEPSEEK_V3, "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32",
                "index_topk": 2048, "index_head_dim": 128, "index_n_heads": 64}
CONFIGS = {"llama": LLAMA, "qwen3": QWEN3, "qwen3-moe": QWEN3_MOE, "gpt-oss": GPT_OSS, "deepseek-v2": DEEPSEEK_V2,
           "deepseek-v3": DEEPSEEK_V3, "deepseek-v3.2": DEEPSEEK_V32}
MLA = ("deepseek-v2", "deepseek-v3", "deepseek-v3.2")
# the algorithm each model is usually served with (DeepSeek V3/V3.2: MTP, SGLang's NEXTN; the rest: an EAGLE head)
ALGORITHM = {"llama": "EAGLE", "qwen3": "EAGLE3", "qwen3-moe": "EAGLE", "gpt-oss": "EAGLE3", "deepseek-v2": "EAGLE",
             "deepseek-v3": "NEXTN", "deepseek-v3.2": "NEXTN"}
SPECS = {"unset": [], "topk1": ["--speculative-eagle-topk", "1", "--speculative-num-steps", "3",
                                "--speculative-num-draft-tokens", "4"],
         "topk4": ["--speculative-eagle-topk", "4", "--speculative-num-steps", "5",
                   "--speculative-num-draft-tokens", "8"]}
MHA_BACKENDS = (None, "fa3", "flashinfer", "triton", "trtllm_mha", "fa4")
MLA_BACKENDS = (None, "fa3", "flashinfer", "triton", "flashmla", "trtllm_mla", "cutlass_mla", "cutedsl_mla",
                "tokenspeed_mla", "dsa")


def write_folders(root: Path) -> dict[str, Path]:
    """One folder per model holding only its config.json (nothing is downloaded)."""
    out = {}
    for name, cfg in CONFIGS.items():
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(cfg))
        out[name] = d
    return out


# the backends each model's grid runs through (llama stands for the plain MHA models, whose rules are the same;
# Qwen3 and Qwen3-MoE run their defaults)
GRID = {"llama": MHA_BACKENDS, "qwen3": (None,), "qwen3-moe": (None,), "gpt-oss": MHA_BACKENDS,
        "deepseek-v2": (None, "fa3", "flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla"),
        "deepseek-v3": MLA_BACKENDS, "deepseek-v3.2": MLA_BACKENDS}
EXTRAS = (["--tp-size", "8"], ["--tp", "2"], ["--tp-size", "8", "--enable-dp-attention", "--dp-size", "8"],
          ["--tp-size", "4", "--enable-dp-attention", "--dp-size", "2"], ["--enable-dp-attention"],
          ["--tp-size", "8", "--attn-dp-size", "8"], ["--enable-dp-attention", "--dp-size", "8"],
          ["--kv-cache-dtype", "fp8_e4m3"],
          ["--kv-cache-dtype", "fp8_e5m2"], ["--kv-cache-dtype", "bf16"], ["--kv-cache-dtype", "bfloat16"],
          ["--kv-cache-dtype", "auto"],
          ["--disable-cuda-graph"], ["--cuda-graph-max-bs", "64"], ["--max-running-requests", "128"],
          ["--disable-overlap-schedule"], ["--page-size", "16"], ["--page-size", "32"], ["--page-size", "128"],
          ["--dtype", "bfloat16"], ["--dtype", "bf16"], ["--attention-backend", "hpc_ops"])


def lines() -> list[tuple[str, str, list[str]]]:
    """(gpu, model, flags after the model and draft paths)."""
    out = []
    # 1. the grid: model x GPU x spec x page x backend
    for model, gpu, spec, page in itertools.product(CONFIGS, ("sm90", "sm100"), SPECS, (None, 64)):
        for backend in GRID[model]:
            flags = ["--speculative-algorithm", ALGORITHM[model], *SPECS[spec]]
            flags += ["--attention-backend", backend] if backend else []
            flags += ["--page-size", str(page)] if page else []
            out.append((gpu, model, flags))
    # 2. every algorithm on every model (EAGLE/EAGLE3/NEXTN/STANDALONE/NGRAM); chains given on two of them
    for model, gpu, algo in itertools.product(CONFIGS, ("sm90", "sm100"),
                                              ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")):
        out.append((gpu, model, ["--speculative-algorithm", algo]))
        if model in ("llama", "deepseek-v3"):
            out.append((gpu, model, ["--speculative-algorithm", algo, *SPECS["topk1"]]))
    # 3. spreading the model (TP, DP attention), the KV dtype, eager, the cap, other pages, the dtype
    for model, gpu, extra in itertools.product(("llama", "gpt-oss", "deepseek-v3", "deepseek-v3.2"),
                                               ("sm90", "sm100"), EXTRAS):
        out.append((gpu, model, ["--speculative-algorithm", ALGORITHM[model], *extra]))
    # 4. fp8 KV with each backend
    for model, gpu, kv in itertools.product(("llama", "gpt-oss", "deepseek-v3"), ("sm90", "sm100"),
                                            ("fp8_e4m3", "fp8_e5m2")):
        for backend in GRID[model][1:]:
            out.append((gpu, model, ["--speculative-algorithm", ALGORITHM[model], *SPECS["topk1"],
                                     "--attention-backend", backend, "--kv-cache-dtype", kv]))
    # 5. splits, the draft's own backend, the attention mode
    for model, gpu in itertools.product(("llama", "deepseek-v3"), ("sm90", "sm100")):
        names = GRID[model][1:6]
        for p, d in itertools.product(names, names):
            if p != d:
                out.append((gpu, model, ["--speculative-algorithm", ALGORITHM[model], *SPECS["topk1"],
                                         "--prefill-attention-backend", p, "--decode-attention-backend", d,
                                         "--speculative-attention-mode", "decode"]))
        for draft in names:
            out.append((gpu, model, ["--speculative-algorithm", ALGORITHM[model], *SPECS["topk1"],
                                     "--speculative-draft-attention-backend", draft]))
    # 6. the lines of the first table (issue 52's 64, formerly tests/test_recommend_resolve.py) the sections above
    # do not make: page 1, a cap of 64, spec flags given in part, a split of one backend, a draft backend beside the
    # target's, overlap off at page 64, EAGLE on DeepSeek, SM100 at page 32
    for model, page, spec, cap in itertools.product(("llama", "deepseek-v3"), (None, 1, 64), SPECS, (None, 64)):
        if page == 1 or cap:
            out.append(("sm90", model, ["--speculative-algorithm", ALGORITHM[model], *SPECS[spec],
                                        *(["--page-size", str(page)] if page else []),
                                        *(["--max-running-requests", str(cap)] if cap else [])]))
    eagle = ["--speculative-algorithm", "EAGLE"]
    out += [
        ("sm90", "llama", [*eagle, *SPECS["topk1"], "--prefill-attention-backend", "fa3",
                           "--decode-attention-backend", "fa3"]),
        ("sm90", "llama", [*eagle, *SPECS["topk1"], "--attention-backend", "flashinfer",
                           "--speculative-draft-attention-backend", "trtllm_mha"]),
        ("sm90", "llama", [*eagle, *SPECS["topk1"], "--page-size", "64", "--disable-overlap-schedule"]),
        ("sm90", "llama", [*eagle, "--speculative-num-steps", "3", "--speculative-eagle-topk", "1"]),
        ("sm90", "llama", [*eagle, "--speculative-eagle-topk", "1"]),
        ("sm90", "deepseek-v3", [*eagle, "--attention-backend", "flashmla", *SPECS["topk1"]]),
        ("sm100", "llama", [*eagle, *SPECS["topk1"], "--page-size", "32"]),
    ]
    return out


def argv(model: str, flags: list[str], folders: dict[str, Path]) -> list[str]:
    """The whole argument list: the model folder, a draft folder where the algorithm takes one (EAGLE/EAGLE3/
    STANDALONE heads are stood in by a folder of the same family), then the flags."""
    algo = flags[flags.index("--speculative-algorithm") + 1] if "--speculative-algorithm" in flags else None
    draft = (["--speculative-draft-model-path", str(folders[model])]
             if algo in ("EAGLE", "EAGLE3", "STANDALONE") and model not in ("deepseek-v3", "deepseek-v3.2") else [])
    return ["--model-path", str(folders[model]), *draft, *flags]
