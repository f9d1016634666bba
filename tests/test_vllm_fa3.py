"""vLLM's FlashAttention-3 kernels (kernels/vllm_fa3.py) on the CPU: their reasons, the engines' calls built against a
stand-in torch.ops._vllm_fa3_C whose fwd computes paged attention from exactly the arguments it is given (so a
wrong view of the cache, page table, seq_lens or cu_seqlens_q fails the reference check), and the skipped row when
the library is absent or does not load."""
from __future__ import annotations

import math
import types

import pytest
import torch
from fa3_fake import FakeGqaFa3Ops
from helpers import worst_error_vs_reference

from kbench.cases.case import Case
from kbench.device import DeviceInfo
from kbench.engine.measure import kernel_reason
from kbench.kernels import vllm_fa3
from kbench.kernels.inputs import build_inputs
from kbench.kernels.registry import get_kernel, kernel_names, select

H200 = DeviceInfo(cuda=True, name="fake H200", sm=90)
B200 = DeviceInfo(cuda=True, name="fake B200", sm=100)
CPU = DeviceInfo(cuda=False, name="cpu", sm=0)
NAMES = ("vllm-fa3", "vllm-fa3-sgl-call")


@pytest.fixture
def fake_ops(monkeypatch):
    fake = FakeGqaFa3Ops()
    monkeypatch.setattr(vllm_fa3, "load_fa3", lambda: (fake, "fake"))
    return fake


def _same_shape_and_dtype_as_q(inputs, i, out):
    assert out.shape == inputs.copies[i].q.shape and out.dtype == inputs.copies[i].q.dtype


def _check(name: str, case: Case, copies: int = 2) -> float:
    return worst_error_vs_reference(name, case, copies, expect=_same_shape_and_dtype_as_q)


CASES = [Case(3, 4, 100, 8, 2, 128, 16), Case(2, 8, 70, 8, 2, 128, 1),  # SGLang's default page 1
         Case(3, 4, 100, 8, 2, 64, 16, kv_layout="NHD"), Case(5, 4, 90, 8, 1, 128, 64, q_dist="accept:0.5"),
         Case(4, 3, 130, 4, 4, 64, 32, kv_dist="lognormal:1.0", dtype="fp16", kv_dtype="fp16")]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.case_id)
def test_both_calls_compute_the_reference_from_the_engines_arguments(fake_ops, name, case):
    assert get_kernel(name).supports(H200, case) is None
    assert _check(name, case) < 1e-2
    a = fake_ops.fwds[-1]
    inputs = build_inputs(case)
    assert a["is_causal"] is True and (a["window_size_left"], a["window_size_right"]) == (-1, -1)
    assert a["softmax_scale"] == pytest.approx(1 / math.sqrt(case.head_dim)) and a["softcap"] == 0.0
    assert a["max_seqlen_q"] == inputs.max_q and torch.equal(a["seqused_k"], inputs.seq_lens)
    assert torch.equal(a["cu_seqlens_q"], inputs.qo_indptr) and torch.equal(a["page_table"], inputs.block_tables)
    assert a["k_new"] is None and a["s_aux"] is None and a["pack_gqa"] is None and a["cp_world_size"] == 1
    if name == "vllm-fa3":  # vLLM: max_seqlen_k given, the schedule made once by get_scheduler_metadata
        assert a["max_seqlen_k"] == max(inputs.lengths.kv) and a["scheduler_metadata"] is not None
        assert a["num_splits"] == 32 and a["cu_seqlens_k_new"] is None  # a CUDA-graph-sized batch: 32 splits
        m = fake_ops.metas[-1]
        assert (m["batch_size"], m["max_seqlen_q"], m["max_seqlen_k"]) == (case.batch_size, inputs.max_q, max(inputs.lengths.kv))
        assert (m["num_heads"], m["num_heads_k"], m["headdim"], m["page_size"]) == \
            (case.num_qo_heads, case.num_kv_heads, case.head_dim, case.page_size)
        assert m["is_causal"] is True and m["num_splits"] == 32 and m["qkv_dtype"] == a["q"].dtype
        assert a["q_descale"].shape == (case.batch_size, case.num_kv_heads) and a["q_descale"].eq(1).all()
    else:  # SGLang: no max_seqlen_k, no schedule, num_splits 0, cu_seqlens_k_new = the KV token offsets
        assert a["max_seqlen_k"] is None and a["scheduler_metadata"] is None and a["num_splits"] == 0
        assert torch.equal(a["cu_seqlens_k_new"], inputs.cum_seq_lens_kv) and a["q_descale"] is None
        assert not fake_ops.metas


GPT_OSS = [Case(3, 4, 300, 16, 2, 64, 16, window_left=128, sinks="on"), Case(2, 4, 90, 16, 2, 64, 1, sinks="on"),
           Case(2, 8, 200, 8, 2, 64, 64, window_left=32)]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("case", GPT_OSS, ids=lambda c: c.case_id)
def test_gpt_oss_sinks_and_window_reach_fa3_as_the_engines_pass_them(fake_ops, name, case):
    """gpt-oss: FA3 gets the window as (window_left, 0) and the sinks as bf16 s_aux (vLLM and SGLang both pass
    them); the fake applies FA3's semantics, so the output matches kbench's reference with sinks and window."""
    assert get_kernel(name).supports(H200, case) is None
    assert _check(name, case) < 1e-2
    a = fake_ops.fwds[-1]
    want = (case.window_left, 0) if case.window_left >= 0 else (-1, -1)
    assert (a["window_size_left"], a["window_size_right"]) == want
    assert (a["s_aux"] is not None) == (case.sinks == "on")
    if a["s_aux"] is not None:
        assert a["s_aux"].dtype == torch.bfloat16 and a["s_aux"].shape == (case.num_qo_heads,)
    if name == "vllm-fa3":  # the schedule is made for the same window
        m = fake_ops.metas[-1]
        assert (m["window_size_left"], m["window_size_right"]) == want


def test_a_window_or_sinks_left_out_fails_the_check(fake_ops, monkeypatch):
    """The check can tell: FA3 called without them misses kbench's reference with sinks and window."""
    case = GPT_OSS[0]
    real = fake_ops.fwd

    def without(*args):
        a = list(args)
        a[vllm_fa3_args().index("window_size_left")] = -1
        a[vllm_fa3_args().index("s_aux")] = None
        return real(*a)

    monkeypatch.setattr(fake_ops, "fwd", without)
    with pytest.raises(AssertionError, match="copy"):
        _check("vllm-fa3-sgl-call", case)


def vllm_fa3_args():
    from fa3_fake import FWD_ARGS

    return FWD_ARGS


def test_vllm_call_leaves_the_split_count_to_the_kernel_past_its_cuda_graphs(fake_ops):
    case = Case(65, 8, 40, 8, 2, 64, 16)  # 520 tokens > 512: vLLM runs it eagerly, num_splits 0
    get_kernel("vllm-fa3").prepare(build_inputs(case))(0)
    assert fake_ops.fwds[-1]["num_splits"] == 0 and fake_ops.metas[-1]["num_splits"] == 0


def test_output_starts_poisoned_and_each_copy_is_used(fake_ops):
    inputs = build_inputs(CASES[0], copies=2)
    fn = get_kernel("vllm-fa3").prepare(inputs)
    fn(1)
    a = fake_ops.fwds[-1]
    assert a["q"] is inputs.copies[1].q
    assert a["k"].data_ptr() == inputs.copies[1].kv_cache[:, 0].data_ptr()
    assert a["v"].data_ptr() == inputs.copies[1].kv_cache[:, 1].data_ptr()


REFUSED = [
    (CPU, {}, "needs a CUDA GPU"),
    (B200, {}, "needs SM90"),
    (H200, dict(tree="topk:2"), "tree: FA3's fwd takes causal and windows only"),
    (H200, dict(kv_dtype="fp8"), "KV dtype fp8 not supported"),
    (H200, dict(dtype="fp16", kv_dtype="fp16", sinks="on"), "FA3 takes bf16 sinks"),
    (H200, dict(dtype="fp16", kv_dtype="bf16"), "KV dtype equal to the query's"),
]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("device,kw,reason", REFUSED, ids=[r[2][:20] for r in REFUSED])
def test_supports_says_what_it_does_not_take(fake_ops, name, device, kw, reason):
    case = Case(4, 4, 256, 32, 8, 128, 64, **kw)
    assert reason in kernel_reason(get_kernel(name), device, case)


def test_head_dims_outside_fa3s_instantiations_are_refused(fake_ops):
    assert "head_dim 64/96/128/192/256" in get_kernel("vllm-fa3").supports(H200, Case(4, 4, 256, 8, 8, 80, 64))


@pytest.fixture
def no_library(monkeypatch):
    vllm_fa3.load_fa3.cache_clear()
    monkeypatch.setattr(vllm_fa3, "_registered", lambda: None)
    yield
    vllm_fa3.load_fa3.cache_clear()


def test_absent_library_is_a_reason_with_the_way_to_install_it(no_library, monkeypatch):
    monkeypatch.setattr(vllm_fa3, "find_library", lambda: (None, ""))
    why = kernel_reason(get_kernel("vllm-fa3"), H200, Case(4, 4, 256, 32, 8, 128, 64))  # the sweep's skipped row
    assert why.startswith("vLLM's FlashAttention-3 library is not installed") and "tools/build_fa3.py" in why


def test_a_library_that_does_not_load_is_a_reason(no_library, monkeypatch, tmp_path):
    bad = tmp_path / "_vllm_fa3_C.abi3.so"
    bad.write_bytes(b"not an ELF file")
    monkeypatch.setattr(vllm_fa3, "find_library", lambda: (bad, "kbench_vllm_fa3 (tools/build_fa3.py)"))
    why = get_kernel("vllm-fa3-sgl-call").supports(H200, Case(4, 4, 256, 32, 8, 128, 64))
    assert why.startswith("vLLM's FlashAttention-3 library (kbench_vllm_fa3 (tools/build_fa3.py)) does not load:")


def test_find_library_prefers_kbenchs_repack_then_an_installed_vllm(monkeypatch, tmp_path):
    for pkg in ("kbench_vllm_fa3", "vllm/vllm_flash_attn"):
        (tmp_path / pkg).mkdir(parents=True)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert vllm_fa3.find_library() == (None, "")  # packages there, no library in them
    (tmp_path / "vllm" / "vllm_flash_attn" / vllm_fa3.LIBRARY_NAME).write_bytes(b"")
    assert vllm_fa3.find_library() == (tmp_path / "vllm" / "vllm_flash_attn" / vllm_fa3.LIBRARY_NAME, "vllm")
    (tmp_path / "kbench_vllm_fa3" / vllm_fa3.LIBRARY_NAME).write_bytes(b"")
    lib, origin = vllm_fa3.find_library()
    assert lib == tmp_path / "kbench_vllm_fa3" / vllm_fa3.LIBRARY_NAME and origin.startswith("kbench_vllm_fa3")


def test_registered_and_in_all_after_the_flashinfer_gqa_kernels():
    names = kernel_names()
    assert names.index("fa3-prefill") < names.index("vllm-fa3") < names.index("vllm-fa3-sgl-call") < names.index("flashmla")
    assert {"vllm-fa3", "vllm-fa3-sgl-call"} <= {k.name for k in select(["all"])}
    assert all(get_kernel(n).path == "decode" and get_kernel(n).jit_key(CASES[0]) is None for n in NAMES)


def test_a_cpu_sweep_gives_each_a_skipped_row_with_its_reason(tmp_path):
    from helpers import tiny

    from kbench.engine.sweep import run_sweep
    from kbench.runs.store import load_run

    res = run_sweep(tiny(batch_size=[2], q_len=[4], kernels=["vllm-fa3", "vllm-fa3-sgl-call", "reference"]),
                    out_dir=tmp_path)
    rows = load_run(res.run_dir).rows
    fa3 = rows[rows.kernel.str.startswith("vllm-fa3")]
    assert sorted(fa3.kernel) == sorted(NAMES) and (fa3.status == "skipped").all()
    assert fa3.reason.str.startswith("needs a CUDA GPU").all()
