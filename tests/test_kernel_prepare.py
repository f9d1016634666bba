"""Each kernel module's prepare() on the CPU, with a stand-in flashinfer that records its calls: the shared
Kernel.launch (kernels/base.py) gives every kernel its own zeroed workspace, one NaN-poisoned output in the
case's dtype shaped like the (padded) query, and run(i) on input copy i; an fp8 query (q_dtype fp8) reaches
the kernels that take one (trtllm-gen decode, trtllm context, fmha-v2) and the others say why not."""
from __future__ import annotations

import sys
import types

import pytest
import torch

from kbench.cases.case import Case
from kbench.errors import BadInput
from kbench.device import DeviceInfo
from kbench.kernels.inputs import build_inputs
from kbench.kernels.reference import reference_attention, visible
from kbench.kernels.registry import get_kernel

H200 = DeviceInfo(cuda=True, name="fake H200", sm=90)
B200 = DeviceInfo(cuda=True, name="fake B200", sm=100)
RTX = DeviceInfo(cuda=True, name="fake RTX PRO 6000", sm=120)


class FakeFlashInfer:
    """flashinfer, flashinfer.decode and flashinfer.prefill as modules whose kernels record each call."""

    def __init__(self):
        self.calls: list[tuple[str, dict]] = []
        self.plans: list[dict] = []
        self.workspaces: list[torch.Tensor] = []
        fi, dec, pre = (types.ModuleType(n) for n in ("flashinfer", "flashinfer.decode", "flashinfer.prefill"))
        fi.decode, fi.prefill = dec, pre
        fake = self

        class Wrapper:
            def __init__(self, ws, layout, **kw):
                fake.workspaces.append(ws)

            def plan(self, *args, **kw):
                fake.plans.append(kw)

            def run(self, q, kv, out):
                return fake._record("wrapper.run", {"query": q, "kv_cache": kv, "out": out})

        fi.BatchDecodeWithPagedKVCacheWrapper = fi.BatchPrefillWithPagedKVCacheWrapper = Wrapper
        dec.trtllm_batch_decode_with_kv_cache = lambda **kw: self._record("trtllm_decode", kw)
        dec.xqa_batch_decode_with_kv_cache = lambda **kw: self._record("xqa_decode", kw)
        pre.trtllm_batch_context_with_kv_cache = lambda **kw: self._record("trtllm_context", kw)

        def fmha_v2(qkv, layout, ws, *args, **kw):
            return self._record("fmha_v2", {"query": qkv[0], "kv_cache": qkv[1], "workspace_buffer": ws, **kw})

        pre.trtllm_fmha_v2_prefill = fmha_v2
        self.modules = {"flashinfer": fi, "flashinfer.decode": dec, "flashinfer.prefill": pre}

    def _record(self, name: str, kw: dict):
        self.calls.append((name, kw))
        return kw["out"]


@pytest.fixture
def fake_fi(monkeypatch):
    fake = FakeFlashInfer()
    for name, mod in fake.modules.items():
        monkeypatch.setitem(sys.modules, name, mod)
    return fake


def _sm(monkeypatch, sm: int):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: divmod(sm, 10))


CASE = Case(3, 4, 64, 8, 2, 64, 16)
RAGGED = Case(3, 4, 64, 8, 2, 64, 16, q_dist="accept:0.5")
FP8Q = Case(3, 4, 64, 8, 2, 64, 16, kv_dtype="fp8", q_dtype="fp8")

# kernel, case, SM for trtllm-decode's backend, the call expected, whether the query is the padded one
PREPARED = [
    ("trtllm-decode", CASE, 90, "trtllm_decode", True),
    ("trtllm-decode", RAGGED, 90, "trtllm_decode", True),
    ("trtllm-decode-ragged", RAGGED, 90, "xqa_decode", False),
    ("trtllm-decode-ragged", RAGGED, 100, "trtllm_decode", False),
    ("decode-wrapper", RAGGED, 90, "wrapper.run", True),
    ("fa2-prefill", RAGGED, 90, "wrapper.run", False),
    ("fa3-prefill", CASE, 90, "wrapper.run", False),
    ("trtllm-context", RAGGED, 100, "trtllm_context", False),
    ("trtllm-fmha-v2", RAGGED, 90, "fmha_v2", False),
]


def _workspace(fake: FakeFlashInfer, name: str, kw: dict) -> torch.Tensor:
    return fake.workspaces[-1] if name == "wrapper.run" else kw["workspace_buffer"]


@pytest.mark.parametrize("kernel,case,sm,call,padded", PREPARED, ids=[f"{p[0]}-{p[3]}-{p[1].q_dist}" for p in PREPARED])
def test_prepare_runs_each_copy_into_a_nan_output_with_a_zeroed_workspace(fake_fi, monkeypatch, kernel, case, sm,
                                                                        call, padded):
    _sm(monkeypatch, sm)
    k = get_kernel(kernel)
    inputs = build_inputs(case, copies=2)
    fn = k.prepare(inputs)
    for i in (1, 0):
        out = fn(i)
        name, kw = fake_fi.calls[-1]
        assert name == call
        q = inputs.q_padded(i) if padded else inputs.copies[i].q
        assert kw["query"] is q and kw["kv_cache"] is inputs.copies[i].kv_cache  # copy i, nothing else
        assert out is kw["out"] and out.dtype == torch.bfloat16 and out.shape == q.shape
        assert torch.isnan(out).all()  # poisoned: a row the kernel leaves unwritten fails the check
    ws = _workspace(fake_fi, *fake_fi.calls[-1])
    assert ws.dtype == torch.uint8 and not ws.any()
    ws.fill_(7)  # another case's leftovers (xqa's semaphores): the next prepare zeroes them again
    k.prepare(inputs)(0)
    again = _workspace(fake_fi, *fake_fi.calls[-1])
    assert again.data_ptr() == ws.data_ptr() and not again.any()


def test_fault_kernel_runs_on_the_copy_it_is_given(monkeypatch):
    from kbench.kernels import fault

    hit = []
    monkeypatch.setattr(fault, "launch_oob_write", lambda q: hit.append(q))
    inputs = build_inputs(CASE, copies=2)
    get_kernel("test-oob-write").prepare(inputs)(1)
    assert hit == [inputs.copies[1].q]


# ---- fp8 query (q_dtype fp8) -------------------------------------------------------------------------------
def test_q_dtype_axis_keeps_old_case_ids_and_names_fp8():
    assert Case(16, 4, 4096, 32, 8, 128).q_dtype == "dtype"
    assert Case(16, 4, 4096, 32, 8, 128, kv_dtype="fp8").case_id == "bs16-q4-kv4096-h32.8.128-p64-HND-bf16-kvfp8"
    assert FP8Q.case_id == "bs3-q4-kv64-h8.2.64-p16-HND-bf16-kvfp8-qfp8"


def test_q_dtype_fp8_needs_fp8_kv_in_the_scenario():
    from kbench.cases.scenario import scenario_from_dict

    base = {"name": "t", "model": "llama3-8b", "grid": {"batch_size": [1], "q_len": [4], "kv_len": [64]}}
    ok = scenario_from_dict({**base, "grid": {**base["grid"], "kv_dtype": "fp8", "q_dtype": "dtype,fp8"}}, "t.toml")
    assert sorted(c.q_dtype for c in ok.cases()) == ["dtype", "fp8"]
    with pytest.raises(BadInput, match=r"grid.q_dtype: fp8 needs kv_dtype fp8 .*got kv_dtype bf16, fp8"):
        scenario_from_dict({**base, "grid": {**base["grid"], "kv_dtype": "bf16,fp8", "q_dtype": "fp8"}}, "t.toml")
    with pytest.raises(BadInput, match=r"grid.q_dtype: 'fp16' is not one of dtype, fp8"):
        scenario_from_dict({**base, "grid": {**base["grid"], "q_dtype": "fp16"}}, "t.toml")


def test_fp8_query_is_the_case_query_rounded_and_the_reference_reads_it():
    fp8 = build_inputs(FP8Q, seed=3)
    same_bf16 = build_inputs(Case(3, 4, 64, 8, 2, 64, 16, kv_dtype="fp8"), seed=3)
    assert fp8.q.dtype == torch.float8_e4m3fn and fp8.padded is not None
    assert torch.equal(fp8.q.float(), same_bf16.q.to(torch.float8_e4m3fn).float())
    assert torch.equal(fp8.kv_cache.float(), same_bf16.kv_cache.float())
    ref = reference_attention(fp8)
    # an independent computation from the fp8-rounded query: dense K/V per request, plain softmax
    c = FP8Q
    q = fp8.q.float().view(c.batch_size, c.q_len, c.num_qo_heads, c.head_dim)
    k_pool, v_pool = fp8.k_v()
    mask = visible(c.q_len, c.kv_len, -1)
    for r in range(c.batch_size):
        pages = fp8.block_tables[r, : c.pages_per_request].long()
        k = k_pool[pages].float().permute(0, 2, 1, 3).reshape(-1, c.num_kv_heads, c.head_dim)[: c.kv_len]
        v = v_pool[pages].float().permute(0, 2, 1, 3).reshape(-1, c.num_kv_heads, c.head_dim)[: c.kv_len]
        for h in range(c.num_qo_heads):
            s = (q[r, :, h] @ k[:, h // c.group].T) * fp8.sm_scale
            p = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)
            want = p @ v[:, h // c.group]
            got = ref[r * c.q_len:(r + 1) * c.q_len, h]
            assert torch.allclose(got, want, atol=1e-5)
    # and the rounding matters: the bf16 query's reference is measurably elsewhere
    rel = (reference_attention(same_bf16) - ref).norm() / ref.norm()
    assert rel > 1e-3


def test_fp8_query_tolerance_is_stated_apart():
    from kbench.timing.check import FP8_KV_TOLERANCE, FP8_Q_TOLERANCE, tolerance_for

    assert tolerance_for("bf16", "fp8", "off", "fp8") == FP8_Q_TOLERANCE == 6e-2
    assert tolerance_for("bf16", "fp8") == FP8_KV_TOLERANCE
    assert tolerance_for("bf16", "bf16", "1000", "fp8") == tolerance_for("bf16", "bf16", "1000")


@pytest.mark.parametrize("kernel,device,want", [
    ("trtllm-decode", B200, None),
    ("trtllm-decode-ragged", B200, "q_dist fixed"),
    ("trtllm-decode", H200, "xqa takes a bf16/fp16 query only"),
    ("trtllm-context", B200, None),
    ("trtllm-fmha-v2", H200, None),
    ("trtllm-fmha-v2", RTX, "e4m3 on SM90 only"),
    ("decode-wrapper", H200, "q_dtype fp8: kbench gives an fp8 query only"),
    ("fa2-prefill", H200, "q_dtype fp8"),
    ("fa3-prefill", H200, "KV dtype fp8 not supported"),
])
def test_which_kernels_take_an_fp8_query(kernel, device, want, monkeypatch):
    from kbench.kernels import trtllm_context
    from kbench.engine.measure import kernel_reason

    monkeypatch.setattr(trtllm_context, "cubin_problem", lambda: None)
    reason = kernel_reason(get_kernel(kernel), device, FP8Q)
    assert reason is None if want is None else want in reason


def test_fp8_kv_with_a_bf16_query_is_still_refused_by_the_one_dtype_kernels(monkeypatch):
    from kbench.kernels import trtllm_context
    from kbench.engine.measure import kernel_reason

    monkeypatch.setattr(trtllm_context, "cubin_problem", lambda: None)
    bf16q = Case(3, 4, 64, 8, 2, 64, 16, kv_dtype="fp8")
    assert "takes fp8 KV with an fp8 query only" in kernel_reason(get_kernel("trtllm-fmha-v2"), H200, bf16q)
    assert "takes fp8 KV with an fp8 query only" in kernel_reason(get_kernel("trtllm-context"), B200, bf16q)
    assert kernel_reason(get_kernel("trtllm-decode"), H200, bf16q) is None  # xqa: bf16 q, fp8 KV, as before


@pytest.mark.parametrize("kernel,sm,call,padded", [
    ("trtllm-decode", 100, "trtllm_decode", True),
    ("trtllm-decode-ragged", 100, "trtllm_decode", False),
    ("trtllm-context", 100, "trtllm_context", False),
    ("trtllm-fmha-v2", 90, "fmha_v2", False),
])
def test_fp8_query_reaches_the_kernels_that_take_it(fake_fi, monkeypatch, kernel, sm, call, padded):
    _sm(monkeypatch, sm)
    case = Case(3, 4, 64, 8, 2, 64, 16, kv_dtype="fp8", q_dtype="fp8", q_dist="accept:0.5")
    inputs = build_inputs(case)
    out = get_kernel(kernel).prepare(inputs)(0)
    name, kw = fake_fi.calls[-1]
    assert name == call
    assert kw["query"].dtype == torch.float8_e4m3fn and kw["kv_cache"].dtype == torch.float8_e4m3fn
    assert out.dtype == torch.bfloat16  # the output stays in the case's dtype
    assert kw["query"] is (inputs.q_padded() if padded else inputs.q)


def test_probe_is_the_engines():
    import kbench.device as kernel_device
    from kbench.timing.probe import probe_device

    dev = probe_device(with_flashinfer=False)
    assert isinstance(dev, DeviceInfo) and dev.cuda == torch.cuda.is_available()
    assert not hasattr(kernel_device, "probe_device")  # kernels hold the data class only


def test_a_sliding_window_is_its_own_compile_job_for_every_kernel_that_builds_one():
    # FlashInfer builds separate modules for a window (xqa SLIDING_WINDOW, fa2/fa3 use_swa): the sweep's
    # compile phase must build both, or the windowed module compiles inside the timing phase
    full, windowed = CASE, Case(3, 4, 64, 8, 2, 64, 16, window_left=32)
    for name in ("trtllm-decode", "fa2-prefill", "fa3-prefill", "decode-wrapper"):
        k = get_kernel(name)
        assert k.jit_key(full) != k.jit_key(windowed), name
    # fmha-v2 takes the window as a runtime mask mode: one module
    assert get_kernel("trtllm-fmha-v2").jit_key(full) == get_kernel("trtllm-fmha-v2").jit_key(windowed)
