"""SGLang's own argument parser on the CPU for kbench's tests: a small venv with the sglang 0.5.23 wheel (no
dependencies) and the few packages `sglang.srt.server_args` imports, so a command line kbench writes can be read by
`prepare_server_args`, the function `python -m sglang.launch_server` parses its argv with.

    bash tests/servers/setup_sglang_args.sh          # build the venv (cached, idempotent)
    VENV/bin/python tests/servers/sglang_args.py parse --model-path M [flags...]   # print the parsed fields

Why not the whole wheel: sglang 0.5.23 pins torch==2.14.1, sglang-kernel, flashinfer and CUDA packages. Its
server_args import chain needs only torch (any recent one: the CPU build of kbench's 2.13.0 is used), triton
(imported at the top of sglang/srt/utils/common.py; it imports without a GPU) and light pure-Python packages.
Parsing runs no resolution: ServerArgs.__post_init__ leaves that to resolve_once (server_args.py:241-242), which
needs the model's config and a GPU platform, so SGLang's own checks of the values (topk with trtllm_mha, the page
size it forces) are not run here; kbench.recommend.flags applies them, citing where SGLang does.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

SGLANG_PIN = "sglang==0.5.23"
READY = ".kbench-ready"
FIELDS = ("model_path", "attention_backend", "prefill_attention_backend", "decode_attention_backend",
          "speculative_draft_attention_backend", "speculative_attention_mode", "speculative_algorithm",
          "speculative_eagle_topk", "speculative_num_steps", "speculative_num_draft_tokens",
          "speculative_draft_model_path", "page_size", "disable_overlap_schedule")


def venv_dir() -> Path:
    return Path(os.environ.get("KBENCH_SGLANG_ARGS_VENV")
                or Path.home() / ".cache/kbench/sglang-args-venv").expanduser()


def venv_python(venv: Path | None = None) -> Path:
    return (venv or venv_dir()) / "bin" / "python"


def venv_ready(venv: Path | None = None) -> bool:
    venv = venv or venv_dir()
    marker = venv / READY
    return marker.is_file() and marker.read_text().strip() == SGLANG_PIN and venv_python(venv).exists()


def parse(argv: list[str]) -> dict:
    """Inside the venv: parse argv as `python -m sglang.launch_server` does and return the speculative and
    attention fields (the values as given: no resolution)."""
    import sglang
    from sglang.srt.server_args import prepare_server_args

    args = prepare_server_args(argv)
    return {"version": getattr(sglang, "__version__", None), **{f: getattr(args, f) for f in FIELDS}}


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "parse":
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    print(json.dumps(parse(sys.argv[2:])))
