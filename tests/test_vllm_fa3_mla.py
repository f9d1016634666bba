"""FlashAttention-3 absorbed MLA (kernels/vllm_fa3_mla.py) and its routes on the CPU: the engines' calls built
against a stand-in torch.ops._vllm_fa3_C whose fwd computes attention with a second query half (q . k + q_v . v,
then softmax . v) from exactly the arguments it is given, so a wrong split of the packed query or cache, page table,
seq_lens, cu_seqlens_q or scale fails the MLA reference check; what each refuses, with the reason; a sweep that
names one where it cannot run at all (exit 2); and SGLang's own FlashInfer MLA verify planner as the route's host
work."""
from __future__ import annotations

import math
import sys
import types

import pytest
import torch
from fa3_fake import FakeMlaFa3Ops
from helpers import worst_error_vs_reference

from kbench.cases.case import Case
from kbench.cases.models import HeadConfig
from kbench.device import DeviceInfo
from kbench.engine.measure import kernel_reason
from kbench.errors import BadInput
from kbench.kernels import vllm_fa3
from kbench.kernels.inputs import build_inputs
from kbench.kernels.registry import get_kernel, kernel_names, select

H200 = DeviceInfo(cuda=True, name="fake H200", sm=90)
B200 = DeviceInfo(cuda=True, name="fake B200", sm=100)
CPU = DeviceInfo(cuda=False, name="cpu", sm=0)
NAMES = ("vllm-fa3-mla", "vllm-fa3-mla-sgl-call")
ROUTES = {"vllm-flash-attn-mla": "vllm-fa3-mla", "sglang-fa3-mla": "vllm-fa3-mla-sgl-call"}


def dsv3(bs=2, q=3, kv=150, heads=128, **kw) -> Case:
    return Case(bs, q, kv, **HeadConfig.mla(heads).case_fields(), **kw)


@pytest.fixture
def fake_ops(monkeypatch):
    fake = FakeMlaFa3Ops()
    monkeypatch.setattr(vllm_fa3, "load_fa3", lambda: (fake, "fake"))
    monkeypatch.setattr(vllm_fa3, "_registered", lambda: fake)
    return fake


def _latent_rows(inputs, i, out):
    assert out.shape == (inputs.q.shape[0], inputs.case.num_qo_heads, inputs.case.kv_lora_rank)


def _check(name: str, case: Case, copies: int = 2) -> float:
    return worst_error_vs_reference(name, case, copies, expect=_latent_rows)


CASES = [dsv3(), dsv3(heads=16, bs=4, q=4, kv_dist="lognormal:1.0"), dsv3(q_dist="accept:0.5", bs=5),
         dsv3(page_size=16, heads=8, q=1), dsv3(dtype="fp16", kv_dtype="fp16", q=2)]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.case_id)
def test_both_calls_compute_the_mla_reference_from_the_engines_arguments(fake_ops, name, case):
    assert get_kernel(name).supports(H200, case) is None
    assert _check(name, case) < 1e-2
    a = fake_ops.fwds[-1]
    inputs = build_inputs(case)
    rank = case.kv_lora_rank
    # q is the RoPE half, q_v the absorbed half, k the RoPE cache, v the latent: views of the packed tensors
    assert (a["q"].shape[-1], a["q_v"].shape[-1], a["k"].shape[-1], a["v"].shape[-1]) == (64, rank, 64, rank)
    assert a["is_causal"] is True and (a["window_size_left"], a["window_size_right"]) == (-1, -1)
    assert a["softmax_scale"] == pytest.approx(1 / math.sqrt(case.qk_nope_head_dim + case.qk_rope_head_dim))
    assert a["max_seqlen_q"] == inputs.max_q and torch.equal(a["seqused_k"], inputs.seq_lens)
    assert torch.equal(a["cu_seqlens_q"], inputs.qo_indptr) and torch.equal(a["page_table"], inputs.block_tables)
    assert a["k_new"] is None and a["s_aux"] is None and a["q_descale"] is None and a["cp_world_size"] == 1
    if name == "vllm-fa3-mla":  # vLLM: max_seqlen_k, the MLA schedule made once, 32 splits in its CUDA graphs
        assert a["max_seqlen_k"] == max(inputs.lengths.kv) and a["scheduler_metadata"] is not None
        assert a["num_splits"] == 32 and a["cu_seqlens_k_new"] is None
        m = fake_ops.metas[-1]
        assert (m["num_heads"], m["num_heads_k"], m["headdim"], m["headdim_v"]) == (case.num_qo_heads, 1, 64, rank)
        assert (m["batch_size"], m["max_seqlen_q"], m["max_seqlen_k"], m["page_size"]) == \
            (case.batch_size, inputs.max_q, max(inputs.lengths.kv), case.page_size)
        assert m["is_causal"] is True and m["num_splits"] == 32 and m["qkv_dtype"] == a["k"].dtype
    else:  # SGLang: no max_seqlen_k, no schedule, num_splits 0, cu_seqlens_k_new = the KV token offsets
        assert a["max_seqlen_k"] is None and a["scheduler_metadata"] is None and a["num_splits"] == 0
        assert torch.equal(a["cu_seqlens_k_new"], inputs.cum_seq_lens_kv) and not fake_ops.metas


def test_the_views_are_of_the_copy_called_and_need_no_copy(fake_ops):
    inputs = build_inputs(CASES[0], copies=2)
    get_kernel("vllm-fa3-mla").prepare(inputs)(1)
    a, q, kv = fake_ops.fwds[-1], inputs.copies[1].q, inputs.copies[1].kv_cache
    assert a["q_v"].data_ptr() == q.data_ptr() and a["q"].data_ptr() == q[..., 512:].data_ptr()
    assert a["v"].data_ptr() == kv.data_ptr() and a["k"].data_ptr() == kv[..., 512:].data_ptr()


def test_vllm_call_leaves_the_split_count_to_the_kernel_past_its_cuda_graphs(fake_ops):
    get_kernel("vllm-fa3-mla").prepare(build_inputs(dsv3(bs=130, q=4, kv=40, heads=8)))(0)  # 520 tokens > 512
    assert fake_ops.fwds[-1]["num_splits"] == 0 and fake_ops.metas[-1]["num_splits"] == 0


def test_sglang_call_casts_an_fp8_cache_to_the_query_dtype_inside_the_call(fake_ops):
    case = dsv3(kv_dtype="fp8", q=4)
    assert get_kernel("vllm-fa3-mla-sgl-call").supports(H200, case) is None
    assert _check("vllm-fa3-mla-sgl-call", case) < 2e-2
    a = fake_ops.fwds[-1]
    assert a["k"].dtype == a["v"].dtype == torch.bfloat16 and a["k_descale"] is None  # SGLang passes no descales


REFUSED = [
    ("vllm-fa3-mla", CPU, {}, "needs a CUDA GPU"),
    ("vllm-fa3-mla", B200, {}, "needs SM90 (FlashAttention-3 is Hopper-only)"),
    ("vllm-fa3-mla", H200, dict(kv_dtype="fp8"), "vLLM's FLASH_ATTN_MLA refuses an fp8 KV cache"),
    ("vllm-fa3-mla-sgl-call", H200, dict(kv_dtype="fp8", q_dtype="fp8"), "q_dtype fp8"),
    ("vllm-fa3-mla-sgl-call", H200, dict(dtype="fp16", kv_dtype="bf16"), "KV dtype equal to the query's"),
    ("vllm-fa3-mla", H200, dict(tree="topk:2"), "tree"),
]


@pytest.mark.parametrize("name,device,kw,reason", REFUSED, ids=[r[3][:24] for r in REFUSED])
def test_supports_says_what_it_does_not_take(fake_ops, name, device, kw, reason):
    assert reason in kernel_reason(get_kernel(name), device, dsv3(bs=4, q=4, kv=256, **kw))


def test_the_fp8_refusal_names_the_backend_vllm_falls_back_to(fake_ops):
    why = kernel_reason(get_kernel("vllm-fa3-mla"), H200, dsv3(kv_dtype="fp8"))
    assert "FLASHMLA" in why and "flashattn_mla.py:42-46" in why and "platforms/cuda.py:146-152" in why


def test_geometry_other_than_deepseeks_is_refused(fake_ops):
    case = Case(2, 2, 64, **HeadConfig.mla(16, kv_lora_rank=256).case_fields())
    assert "kv_lora_rank 512" in get_kernel("vllm-fa3-mla").supports(H200, case)


def test_gqa_cases_are_skipped_with_the_kind_and_mla_kernels_are_listed():
    why = kernel_reason(get_kernel("vllm-fa3-mla"), H200, Case(2, 2, 64, 8, 2, 128, 16))
    assert why.startswith("a GQA case")
    assert "vllm-fa3-mla" in kernel_reason(get_kernel("vllm-fa3"), H200, dsv3())


def test_registered_in_all_and_routed():
    names = kernel_names()
    assert names.index("flashinfer-mla-fa2") < names.index("vllm-fa3-mla") < names.index("vllm-fa3-mla-sgl-call")
    assert set(NAMES) <= {k.name for k in select(["all"])}
    assert set(ROUTES) <= {k.name for k in select(["routes"])} and not set(ROUTES) & {k.name for k in select(["all"])}
    for route, kernel in ROUTES.items():
        r = get_kernel(route)
        assert r.runs == kernel and r.attentions == ("mla",) and r.path == "decode"
        assert r.steps == ("verify", "draft_extend") and not r.host_waits_for_gpu
    # both take an fp8 case to supports(), which says why vLLM's refuses it (kbench.engine.measure.kernel_reason)
    assert all("fp8" in get_kernel(n).kv_dtypes for n in (*NAMES, *ROUTES))


def test_the_vllm_route_redoes_the_copies_and_the_mla_schedule_every_step(fake_ops, monkeypatch):
    import kbench.kernels.routes.base as base

    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *a, **k: self)  # no CUDA here
    inputs = build_inputs(dsv3(bs=4, q=4, kv=200, heads=16))
    route = get_kernel("vllm-flash-attn-mla")
    route.prepare(inputs)
    n = len(fake_ops.metas)
    step = route.host_step(inputs)
    step()
    step()
    assert len(fake_ops.metas) == n + 2  # one schedule per step, for the MLA shape
    m = fake_ops.metas[-1]
    assert (m["num_heads_k"], m["headdim"], m["headdim_v"]) == (1, 64, 512)
    assert base  # the copies are base.host_to_gpu_copies (kbench.kernels.routes.vllm)


@pytest.fixture
def no_library(monkeypatch):
    vllm_fa3.load_fa3.cache_clear()
    monkeypatch.setattr(vllm_fa3, "_registered", lambda: None)
    monkeypatch.setattr(vllm_fa3, "find_library", lambda: (None, ""))
    yield
    vllm_fa3.load_fa3.cache_clear()


def test_absent_library_is_a_skipped_row_reason_with_the_way_to_install_it(no_library):
    why = kernel_reason(get_kernel("sglang-fa3-mla"), H200, dsv3())
    assert why.startswith("vLLM's FlashAttention-3 library is not installed") and "tools/build_fa3.py" in why


def _measurer(tmp_path, **over):
    from kbench.cases.scenario import apply_overrides, load_scenario
    from kbench.engine.measure import CaseMeasurer

    sc = apply_overrides(load_scenario("deepseek-mtp"), batch_size="1", q_len="2", kv_len="512", **over)
    return CaseMeasurer(sc)


@pytest.mark.parametrize("kernels", ["vllm-fa3-mla", "sglang-fa3-mla,flashmla", "vllm-flash-attn-mla"])
def test_naming_one_where_the_library_is_absent_is_refused_with_how_to_install(no_library, tmp_path, kernels):
    with pytest.raises(BadInput, match=r"kernels: (vllm|sglang)[-a-z0-9]+: vLLM's FlashAttention-3 library is not "
                                       r"installed: python3 tools/build_fa3.py"):
        _measurer(tmp_path, kernels=kernels)


def test_through_a_group_the_absent_library_is_a_skipped_row_not_an_error(no_library, tmp_path):
    _measurer(tmp_path, kernels="routes")
    _measurer(tmp_path, kernels="all")


def test_naming_vllms_fa3_mla_on_an_fp8_only_sweep_says_vllm_runs_flashmla(fake_ops, tmp_path):
    with pytest.raises(BadInput, match="vllm-flash-attn-mla: an fp8 KV cache: vLLM's FLASH_ATTN_MLA refuses .*"
                                       "FLASHMLA.*measure vllm-flashmla"):
        _measurer(tmp_path, kernels="vllm-flash-attn-mla", kv_dtype="fp8")
    _measurer(tmp_path, kernels="sglang-fa3-mla", kv_dtype="fp8")  # SGLang runs fa3 with fp8_e4m3: fine
    _measurer(tmp_path, kernels="vllm-flash-attn-mla", kv_dtype="bf16,fp8")  # fp8 cases: skipped rows


def test_cli_exit_2_one_line(no_library, tmp_path):
    from click.testing import CliRunner

    from kbench.cli.main import cli

    r = CliRunner().invoke(cli, ["sweep", "-s", "deepseek-mtp", "--kernels", "vllm-fa3-mla", "--batch-size", "1",
                                  "--q-len", "1", "--kv-len", "512", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1 and "pip install" in r.output
    assert not any(tmp_path.iterdir())  # nothing written


# ---- SGLang's FlashInfer MLA verify planner (route sglang-fi-mla) ------------------------------------------------
class FakeModule:
    def __init__(self):
        self.plans = []

    def plan(self, *args):
        self.plans.append(args)


class FakeWrapper:
    """The attributes SGLang's fast_mla_prefill_plan touches on FlashInfer 0.7.4's BatchMLAPagedAttentionWrapper."""

    def __init__(self, inputs):
        self._cached_module = FakeModule()
        self._float_workspace_buffer, self._int_workspace_buffer = torch.zeros(4), torch.zeros(4, dtype=torch.uint8)
        self._pin_memory_int_workspace_buffer = torch.zeros(4, dtype=torch.uint8)
        self._qo_indptr_buf = torch.zeros_like(inputs.qo_indptr)
        self._kv_indptr_buf = torch.zeros_like(inputs.kv_indptr)
        self._kv_indices_buf = torch.zeros(inputs.kv_indices.numel() + 5, dtype=inputs.kv_indices.dtype)
        self._kv_len_arr_buf = torch.zeros_like(inputs.seq_lens)


def test_sglang_fi_mla_times_sglangs_own_planner_not_the_public_plan():
    from kbench.kernels.routes.sglang import FLASHINFER_MLA, FLASHINFER_MLA_EXTEND, fast_mla_prefill_plan

    assert FLASHINFER_MLA.metadata is fast_mla_prefill_plan and FLASHINFER_MLA.steps == ("verify",)
    assert FLASHINFER_MLA_EXTEND.steps == ("draft_extend",) and "public plan()" in FLASHINFER_MLA_EXTEND.host_work
    case = dsv3(bs=3, q=4, kv=300, heads=16)
    inputs = build_inputs(case)
    kernel = types.SimpleNamespace(wrapper=FakeWrapper(inputs))
    w = kernel.wrapper
    fast_mla_prefill_plan(inputs, kernel)()
    (args,) = w._cached_module.plans
    assert args[:3] == (w._float_workspace_buffer, w._int_workspace_buffer, w._pin_memory_int_workspace_buffer)
    qo, kvp, lens, heads, ckv, causal = args[3:]
    assert qo.device.type == kvp.device.type == lens.device.type == "cpu"  # host offsets: no read-back
    assert torch.equal(qo, inputs.host("qo_indptr")) and torch.equal(kvp, inputs.host("kv_indptr"))
    assert torch.equal(lens, inputs.host("seq_lens")) and (heads, ckv, causal) == (16, 512, True)
    assert torch.equal(w._qo_indptr_buf, inputs.qo_indptr) and torch.equal(w._kv_len_arr_buf, inputs.seq_lens)
    n = inputs.kv_indices.numel()
    assert torch.equal(w._kv_indices_buf[:n], inputs.kv_indices) and not w._kv_indices_buf[n:].any()
    assert (w._causal, w._page_size, w._sm_scale) == (True, case.page_size, inputs.sm_scale)


def test_the_flashinfer_mla_kernel_keeps_its_planned_wrapper_for_the_route(monkeypatch):
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from test_mla_kernels import FakeFlashInferMla

    fake = FakeFlashInferMla()
    monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))
    monkeypatch.setitem(sys.modules, "flashinfer.mla", fake.module)
    k = get_kernel("sglang-fi-mla")
    k.prepare(build_inputs(dsv3()))
    assert k._kernel.wrapper.p["causal"] is True and k._kernel.wrapper.backend == "fa3"
