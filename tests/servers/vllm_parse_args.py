"""Parse a `vllm serve` command line with vLLM's own parser and print what it set, as JSON (run by the vLLM venv's
python, not kbench's: tests/test_recommend_flags.py).

    VENV/bin/python tests/servers/vllm_parse_args.py MODEL [vllm serve flags...]
    VENV/bin/python tests/servers/vllm_parse_args.py --batch < argvs.json   # a JSON list of argv lists: one
                                                                             # import of vLLM for all (it takes ~20 s)

The parser is the one `vllm serve` builds: FlexibleArgumentParser + make_arg_parser, imported from
vllm.entrypoints.cli.serve (vllm/entrypoints/launchers/cli_args.py in 0.32.0, vllm/entrypoints/common/cli_args.py
in 0.34.0), then validate_parsed_serve_args, then AsyncEngineArgs.from_cli_args (its __post_init__ turns the
attention config into vLLM's AttentionConfig, so a backend name vLLM does not know fails here). The speculative
config's keys are checked against SpeculativeConfig's fields (it forbids unknown ones) and its method against
SpeculativeMethod; building it needs the model, so it is not built.

Prints {"ok": true, "version", "model", "speculative_config", "block_size", "attention_backend",
"backend" (after the merge create_engine_config does), "attention_config": {"backend", "use_trtllm_attention"},
"async_scheduling", "tensor_parallel_size", "enforce_eager", "kv_cache_dtype", "problems": [...],
"dynamic_sd_lookup": the draft tokens per batch size vLLM's scheduler takes from num_speculative_tokens_per_batch_size}; a parser error
exits 2 with argparse's message on stderr, as `vllm serve` does. --batch prints one JSON list, an entry
{"ok": false, "error": ...} for a command vLLM refuses.
"""
from __future__ import annotations

import dataclasses
import enum
import json
import sys
import typing


def _name(v):
    if isinstance(v, enum.Enum):
        return v.name
    return v


def _literal_values(tp) -> set:
    out = set()
    for a in typing.get_args(tp):
        if isinstance(a, str):
            out.add(a)
        else:
            out |= _literal_values(a)
    return out


def parse(argv: list[str]) -> dict:
    import vllm
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.cli import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = serve.make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    args = parser.parse_args(argv)
    if getattr(args, "model_tag", None) is not None:  # what `vllm serve` does with its positional model
        args.model = args.model_tag
    if hasattr(serve, "validate_parsed_serve_args"):
        serve.validate_parsed_serve_args(args)
    problems = []
    spec = args.speculative_config
    if spec is not None:
        from vllm.config import speculative as sp

        fields = {f.name for f in dataclasses.fields(sp.SpeculativeConfig)}
        problems += [f"speculative_config: unknown key {k!r}" for k in spec if k.replace("-", "_") not in fields]
        methods = _literal_values(sp.SpeculativeMethod)
        if spec.get("method") is not None and spec["method"] not in methods:
            problems.append(f"speculative_config: method {spec['method']!r} not in {sorted(methods)}")
    engine_args = AsyncEngineArgs.from_cli_args(args)
    dynamic = None
    if spec is not None and spec.get("num_speculative_tokens_per_batch_size") is not None:
        # the per-batch-size schedule as vLLM reads it: the field's own type (pydantic, as SpeculativeConfig
        # validates it), then the scheduler's dense lookup (v1/spec_decode/dynamic/utils.py, the same file in 0.32.0
        # and 0.34.0), index = the batch size, up to --max-num-seqs
        import pydantic
        from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

        hint = typing.get_type_hints(sp.SpeculativeConfig)["num_speculative_tokens_per_batch_size"]
        try:
            typed = pydantic.TypeAdapter(hint).validate_python(spec["num_speculative_tokens_per_batch_size"])
            dynamic = build_dynamic_sd_schedule_lookup([list(x) for x in typed], engine_args.max_num_seqs or 256,
                                                       int(spec["num_speculative_tokens"]))
        except (ValueError, pydantic.ValidationError) as e:
            problems.append(f"num_speculative_tokens_per_batch_size: {e}")
    ac = engine_args.attention_config
    backend = getattr(ac, "backend", None)
    if engine_args.attention_backend is not None:
        # as create_engine_config merges them (it needs the model to run): --attention-backend and -ac's backend
        # exclude each other, and the name must be one of AttentionBackendEnum's (an error otherwise)
        from vllm.config.attention import AttentionConfig

        if backend is not None:
            problems.append("attention_backend and attention_config.backend are mutually exclusive")
        try:
            backend = AttentionConfig.validate_backend_before(engine_args.attention_backend)
        except (KeyError, ValueError):  # 0.32.0 raises ValueError('Unknown attention backend ...')
            problems.append(f"attention_backend {engine_args.attention_backend!r} is no AttentionBackendEnum")
            backend = None
    out = {
        "ok": True,
        "version": vllm.__version__,
        "model": engine_args.model,
        "speculative_config": spec,
        "block_size": engine_args.block_size,
        "attention_backend": _name(engine_args.attention_backend),
        "backend": _name(backend),  # the one the engine config ends with
        "attention_config": {"backend": _name(getattr(ac, "backend", None)),
                             "use_trtllm_attention": getattr(ac, "use_trtllm_attention", None)},
        "async_scheduling": engine_args.async_scheduling,
        "tensor_parallel_size": engine_args.tensor_parallel_size,
        "enforce_eager": engine_args.enforce_eager,
        "kv_cache_dtype": engine_args.kv_cache_dtype,
        "problems": problems,
        "dynamic_sd_lookup": dynamic,  # [unused, K at batch size 1, 2, ...] (None without a schedule)
    }
    return out


def main(argv: list[str]) -> int:
    if argv == ["--batch"]:
        out = []
        for one in json.load(sys.stdin):
            try:
                out.append(parse(one))
            except SystemExit as e:  # argparse refused it (its message went to stderr)
                out.append({"ok": False, "error": f"argparse exit {e.code}"})
            except Exception as e:
                out.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
        print(json.dumps(out))
        return 0
    print(json.dumps(parse(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
