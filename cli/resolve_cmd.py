"""`kbench resolve`: what a launch line runs, resolved by the engine release's rules (kbench/recommend/rules/),
each field with the rule that set it and its source line. No run needed; `recommend --current` uses the same
resolver (kbench.recommend.resolve)."""
from __future__ import annotations

import json

import click

from kbench.cli.console import echo
from kbench.cli.errors import one_line_errors
from kbench.cli.options import examples
from kbench.errors import BadInput

# GPU names a user types, by family (the rules speak of families: sm90, sm100, ...)
GPU_NAMES = {"sm90": ("h100", "h200", "h20", "h800", "gh200", "hopper"), "sm100": ("b200", "b300", "gb200", "gb300",
                                                                                  "blackwell"),
             "sm80": ("a100", "a800", "a10", "a30", "ampere"), "sm120": ("rtx 5090", "rtx pro 6000", "5090")}


def gpu_of(text: str) -> str:
    """A GPU family from --gpu: sm90 / SM100 / 90 / 103 / H200 / B200 ...; BadInput otherwise."""
    from kbench.recommend.settings import gpu_family

    w = str(text).strip().lower()
    sm = w.removeprefix("sm")
    if sm.isdigit() and gpu_family(int(sm)):
        return gpu_family(int(sm))
    for fam, names in GPU_NAMES.items():
        if any(n in w for n in names):
            return fam
    raise BadInput(f"--gpu {text!r}: an SM version (sm90, sm100, sm120, sm80) or a GPU name (H100, H200, B200)")


def _heads(r) -> str:
    h = r.heads_per_rank
    if h is None:
        return "unknown (give the model folder, or --model PRESET)"
    q, kv = r.model_heads
    spread = (f"TP {r.tp_size}" + (f" with DP attention over {r.dp_attention} (attention TP {r.attention_tp})"
                                   if r.dp_attention > 1 else ""))
    kind = "1 latent KV head" if r.attention == "mla" else f"{h[1]} KV heads"
    return f"{h[0]} q heads, {kind} per rank ({q} q heads / attention TP {r.attention_tp}; {spread})"


def _rows(r) -> list[tuple[str, str, str]]:
    """(what, value, rule and cite) for printing: the steps, what each rank runs, then the engine's own fields."""
    why = r.why
    page_field = "page_size"
    rows = [("verify runs", r.backends["verify"], _step_why(r, "verify")),
            ("draft extend runs", r.backends["draft_extend"], _step_why(r, "draft_extend"))]
    spec = r.spec
    rows.append(("draft", f"topk {spec.topk}, {spec.steps} steps, {spec.q_len} tokens verified per step",
                 why.get("speculative_num_draft_tokens") or why.get("num_speculative_tokens", "")))
    rows.append(("page", str(r.page_size), why.get(page_field, "")))
    rows.append(("cap", f"{r.cap} running requests", why.get("max_running_requests") or why.get("max_num_seqs", "")))
    rows.append(("overlap", "host work overlaps the GPU" if r.overlap == "max" else "host work, then the GPU",
                 why.get("disable_overlap_schedule") or why.get("async_scheduling", "")))
    rows.append(("heads per rank", _heads(r), "the model's num_attention_heads (config.json, its name or the "
                                              "preset) / (tp_size / attn_dp_size)"))
    if r.engine == "vllm":
        rows.append(("FlashInfer", r.flashinfer_version or "unknown (not installed here beside vllm)",
                     "the flashinfer-python installed beside vllm where kbench runs" if r.flashinfer_version else ""))
    rows.append(("KV dtype", r.kv_cache_dtype, why.get("kv_cache_dtype", "")))
    tp_why = why.get("tp_size") or why.get("tensor_parallel_size", "")
    rows.append(("TP / DP attention", f"{r.tp_size} / {r.dp_attention}",
                 f"{tp_why}; {why['attn_dp_size']}" if r.dp_attention > 1 and why.get("attn_dp_size") else tp_why))
    rows.append(("graphs", "CUDA graphs" if r.cuda_graph else "eager (no CUDA graphs)",
                 why.get("disable_cuda_graph") or why.get("enforce_eager", "")))
    return rows


def _step_why(r, step: str) -> str:
    if r.engine != "sglang":
        return r.why.get("attention_backend", "")
    f = r.fields
    if step == "draft_extend" and f.get("speculative_draft_attention_backend"):
        return r.why.get("speculative_draft_attention_backend", "")
    if f.get("prefill_attention_backend") and f.get("prefill_attention_backend") != f.get("decode_attention_backend"):
        return (f"the {f.get('speculative_attention_mode')} slot (speculative_attention_mode: "
                f"{r.why.get('speculative_attention_mode', '')})")
    return r.why.get("attention_backend", "")


def to_json(r, rules_path: str) -> dict:
    from kbench.recommend.resolve import shown

    argv, env, _ = shown(r)
    return {"engine": r.engine, "version": r.version, "gpu": r.family, "rules": rules_path, "source": r.source,
            "model": r.model, "architecture": r.arch, "attention": r.attention, "argv": argv, "env": env,
            "fields": r.fields, "why": r.why, "steps": r.backends,
            "heads_per_rank": list(r.heads_per_rank) if r.heads_per_rank else None,
            "tp_size": r.tp_size, "attn_dp_size": r.dp_attention, "kv_cache_dtype": r.kv_cache_dtype,
            "cuda_graph": r.cuda_graph, "flashinfer_version": r.flashinfer_version, "ignored": r.ignored,
            "not_priced_by_recommend": not_priced(r)}


def not_priced(r) -> str | None:
    """What `recommend --current` refuses to price of this line whatever the run (eager layers, sinks, dsa, ...):
    the pricing's own rule (kbench.recommend.ranks.rank_plan), asked here rather than said twice."""
    from kbench.errors import BadInput
    from kbench.recommend.ranks import rank_plan

    try:
        rank_plan(r, None)
    except BadInput as e:
        return str(e).removeprefix("--current: ")
    return None


@click.command("resolve", epilog=examples(
    "kbench resolve 'python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp-size 8 "
    "--speculative-algorithm NEXTN' --gpu sm90",
    "kbench resolve 'python -m sglang.launch_server --model-path openai/gpt-oss-120b --speculative-algorithm "
    "EAGLE3 --speculative-draft-model-path D' --gpu B200",
    "kbench resolve @serve.sh --gpu sm100 --json",
))
@click.argument("line", metavar="LINE|@FILE|RUN")
@click.option("--gpu", default="sm90", show_default=True,
              help="The GPU the line runs on: an SM version (sm90, sm100) or a name (H100, H200, B200).")
@click.option("--model", "model_preset", default=None, metavar="PRESET",
              help="The model's kbench preset (llama3-8b, deepseek-v3, gpt-oss, ...) when the line names a hub model "
                   "kbench cannot read [default: the model folder's config.json, else the model's name].")
@click.option("--json", "as_json", is_flag=True, help="Print the resolution as JSON, with the engine's own field names.")
@one_line_errors
def resolve_cmd(line, gpu, model_preset, as_json):
    """What a launch line runs, as the engine release resolves it: the backend of each speculative step, the page,
    topk / steps / draft tokens, the cap on running requests, whether host work overlaps the GPU, heads per rank,
    the KV dtype, TP and DP attention, CUDA graphs or eager. Each field names the rule that set it and the file:line
    of the released source (SGLang 0.5.23, vLLM 0.34.0: kbench/recommend/rules/).

    LINE is `python -m sglang.launch_server ...`, `sglang serve ...` or `vllm serve MODEL ...` (quote it), @FILE
    holding one, or a `kbench server-bench` run folder (SGLang's resolved server info, read back, not re-resolved).
    A line the engine refuses, a model folder without a readable config.json, or an architecture the rules do not
    know: one line, exit 2 (the engine's own reason quoted)."""
    from kbench.recommend.resolve import resolve_current, rules_for

    if model_preset is not None:
        from kbench.recommend.resolve import PRESET_ARCH

        if model_preset not in PRESET_ARCH:
            raise BadInput(f"--model {model_preset!r}: one of {', '.join(PRESET_ARCH)}")
    family = gpu_of(gpu)
    try:
        r = resolve_current(line, family, preset=model_preset)
    except BadInput as e:  # the resolver speaks of --current (recommend's option): here it is the argument
        msg = str(e)
        if msg.startswith("--current"):
            e.args = ("resolve" + msg[len("--current"):],)
        raise
    rules_path = rules_for(r.engine, r.version).path
    if as_json:
        click.echo(json.dumps(to_json(r, rules_path), indent=1))
        return
    echo(f"{r.engine} {r.version} on {r.family}: {r.model} ({r.arch or 'architecture unknown'}, "
         f"{r.attention.upper()}); rules: {rules_path}")
    for what, value, why in _rows(r):
        echo(f"  {what}: {value}" + (f"  [{why}]" if why else ""))
    echo("  the engine's fields: " + ", ".join(f"{k}={v}" for k, v in r.fields.items() if v is not None))
    if r.ignored:
        echo(f"  set aside (cannot change the attention steps): {', '.join(r.ignored)}")
