"""SGLang 0.5.23's own argument resolution on the CPU, for kbench's tests: `ServerArgs.resolve_once()` (the
pipeline `python -m sglang.launch_server` runs before it starts) on a model folder holding only a config.json,
with the GPU facts said through SGLang's own `override_platform` (its test hook; Hopper or SM100).

    bash tests/servers/setup_sglang_resolve.sh            # the venv (cached): sglang-args-venv + transformers
    VENV/bin/python tests/servers/sglang_resolve.py < cases.json   # [{"argv": [...], "gpu": "sm90"}, ...]

prints one JSON object per case: the resolved fields kbench prices, or {"error": "..."} where SGLang refuses.
Only imports that play no part in argument resolution are stood in for (kernel libraries and vision
preprocessing: tvm_ffi, torchvision, xgrammar, zstandard, xxhash); `get_device` answers "cuda" as on a GPU host and
`torch.cuda.get_device_capability` the GPU's (9, 0) or (10, 0). Where SGLang's parser refuses a flag, the result
is argparse's own message.
"""
from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import io
import json
import logging
import sys
import types

STUB = ("torchvision", "tvm_ffi", "xgrammar", "zstandard", "xxhash")
FIELDS = ("attention_backend", "prefill_attention_backend", "decode_attention_backend",
          "speculative_draft_attention_backend", "speculative_attention_mode", "page_size",
          "speculative_algorithm", "speculative_eagle_topk", "speculative_num_steps",
          "speculative_num_draft_tokens", "max_running_requests", "disable_overlap_schedule", "tp_size", "dp_size",
          "attn_dp_size", "enable_dp_attention", "kv_cache_dtype", "disable_cuda_graph")
GPUS = {
    "sm90": dict(is_sm90=True, is_sm100=False, is_hopper_with_cuda_12_3=True, device_sm=90, device_capability=(9, 0)),
    "sm100": dict(is_sm90=False, is_sm100=True, is_hopper_with_cuda_12_3=False, device_sm=100,
                  device_capability=(10, 0)),
}


class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stub


class _Stub(metaclass=_Meta):
    """Stands for any name of a library the resolution never calls: subclassable, callable, a decorator."""
    def __init__(self, *a, **k):
        pass

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stub()

    def __call__(self, *a, **k):
        return a[0] if len(a) == 1 and callable(a[0]) and not k else _Stub()

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stub


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in STUB:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _StubModule(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        pass


def _setup() -> None:
    import transformers.utils.import_utils as iu

    iu.is_torchvision_available = lambda: False  # transformers would ask the stand-in for its version
    iu.is_torchvision_greater_or_equal = lambda *a, **k: False
    sys.meta_path.insert(0, _Finder())
    import sglang.srt.utils.common as common

    common.get_device = lambda *a, **k: "cuda"
    logging.disable(logging.WARNING)


def resolve(argv: list[str], gpu: str) -> dict:
    from sglang.srt.arg_groups.model_override_base import resolved_view
    from sglang.srt.runtime_context import override_platform
    from sglang.srt.server_args import prepare_server_args

    facts = dict(is_cuda=True, is_hip=False, is_npu=False, is_xpu=False, is_musa=False, is_mps=False,
                 is_sm100_or_sm110=GPUS[gpu]["is_sm100"], is_sm110=False, is_sm120=False,
                 is_blackwell=GPUS[gpu]["is_sm100"], has_amx=False, has_flashinfer=True, **GPUS[gpu])
    import torch

    # the DSA path asks torch for the GPU's compute capability (arg_groups/model_hook.py:341): the GPU's own
    torch.cuda.get_device_capability = lambda *a, **k: GPUS[gpu]["device_capability"]
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):  # argparse says why it refuses on stderr, then exits 2
            args = prepare_server_args(argv)
        with override_platform(**facts):
            args.resolve_once()
    except BaseException as e:  # SGLang refuses the line: what it says
        why = [ln for ln in said.getvalue().splitlines() if "error:" in ln]
        return {"error": why[-1].split("error: ", 1)[1] if why else f"{type(e).__name__}: {e}"}
    view = resolved_view(args)
    return {f: getattr(view, f) for f in FIELDS}


if __name__ == "__main__":
    _setup()
    import sglang

    cases = json.load(sys.stdin)
    out = [resolve(c["argv"], c.get("gpu", "sm90")) for c in cases]
    print(json.dumps({"version": sglang.__version__, "results": out}))
