"""The MLA kernels on the CPU (issue #27): what each supports() takes and refuses, a missing or broken FlashMLA
install as a reason, and each prepare() driving a stand-in of its library that computes attention from the
arguments as that library's documented contract reads them (FlashInfer's CSR metadata, FlashMLA's block table
and s_q, trtllm-gen's q_len per request or cum_seq_lens_q): the output must equal the reference, so a wrong
view, table, scale or padding fails here before the GPU run."""
from __future__ import annotations

import sys
import types

import pytest
import torch
from helpers import worst_error_vs_reference

from kbench.cases.case import Case
from kbench.cases.models import MODELS, HeadConfig
from kbench.device import DeviceInfo
from kbench.engine.measure import kernel_reason
from kbench.kernels import flashmla
from kbench.kernels.inputs import build_inputs
from kbench.kernels.registry import all_kernels, get_kernel

H200 = DeviceInfo(cuda=True, name="fake H200", sm=90)
B200 = DeviceInfo(cuda=True, name="fake B200", sm=100)
A100 = DeviceInfo(cuda=True, name="fake A100", sm=80)
MLA_KERNELS = ("flashmla", "trtllm-gen-mla", "flashinfer-mla-fa3", "flashinfer-mla-fa2")


def dsv3(bs=2, q=3, kv=150, heads=128, **kw) -> Case:
    return Case(bs, q, kv, **HeadConfig.mla(heads).case_fields(), **kw)


def _attend(q: torch.Tensor, latent: torch.Tensor, scale: float, rank: int) -> torch.Tensor:
    """q [n, H, rank + rope] (the request's last n query tokens), latent [kv, rank + rope] -> [n, H, rank]."""
    n, kv = q.shape[0], latent.shape[0]
    s = torch.einsum("nhd,kd->hnk", q.float(), latent.float()) * scale
    s = s.masked_fill(~torch.ones(n, kv, dtype=torch.bool).tril(kv - n), float("-inf"))
    return torch.einsum("hnk,kd->nhd", torch.softmax(s, -1), latent.float()[:, :rank])


def _rows(pool: torch.Tensor, pages: torch.Tensor, kv: int) -> torch.Tensor:
    return pool[pages.long()].reshape(-1, pool.shape[-1])[:kv]


# ---- stand-ins ---------------------------------------------------------------------------------------------
class FakeFlashInferMla:
    """flashinfer.mla: the wrapper (CSR metadata) and the trtllm-gen decode function, computing attention."""

    def __init__(self):
        self.plans, self.runs, self.decodes = [], [], []
        fake = self
        mod = types.ModuleType("flashinfer.mla")

        class MLAPlanMetadata:
            @classmethod
            def csr(cls, qo_indptr, kv_indptr, kv_indices, kv_len_arr):
                m = cls()
                m.qo_indptr, m.kv_indptr, m.kv_indices, m.kv_len_arr = qo_indptr, kv_indptr, kv_indices, kv_len_arr
                return m

        class Wrapper:
            def __init__(self, ws, backend="auto"):
                self.ws, self.backend = ws, backend

            def plan(self, **kw):
                assert set(kw) >= {"metadata", "num_heads", "head_dim_ckv", "head_dim_kpe", "page_size", "causal",
                                   "sm_scale", "q_data_type", "kv_data_type"}, "the canonical keyword form"
                self.p = kw
                fake.plans.append(dict(kw, backend=self.backend, ws=self.ws))

            def run(self, *, query, kv_cache, out, **scales):
                p, m = self.p, self.p["metadata"]
                assert query.dtype == p["q_data_type"] and kv_cache.dtype == p["kv_data_type"] and p["causal"]
                fake.runs.append(dict(query=query, kv_cache=kv_cache, out=out, **scales))
                qo, kvp, idx, lens = (t.tolist() for t in (m.qo_indptr, m.kv_indptr, m.kv_indices, m.kv_len_arr))
                for r, kv in enumerate(lens):
                    lat = _rows(kv_cache, torch.tensor(idx[kvp[r]:kvp[r + 1]]), kv)
                    out[qo[r]:qo[r + 1]] = _attend(query[qo[r]:qo[r + 1]], lat, p["sm_scale"], p["head_dim_ckv"]).to(out.dtype)
                return out

        def trtllm_decode(*, query, kv_cache, out, block_tables, seq_lens, bmm1_scale, kv_lora_rank, backend,
                          cum_seq_lens_q=None, max_q_len=None, **kw):
            assert backend == "trtllm-gen" and out.dtype == torch.bfloat16
            self.decodes.append(dict(query=query, kv_cache=kv_cache, out=out, cum=cum_seq_lens_q, max_q=max_q_len,
                                     **kw))
            for r, kv in enumerate(seq_lens.tolist()):
                pages = block_tables[r, : -(-kv // kv_cache.shape[1])]
                lat = _rows(kv_cache, pages, kv)
                if cum_seq_lens_q is None:  # [bs, q_len, H, d]: q_len per request
                    out[r] = _attend(query[r], lat, bmm1_scale, kv_lora_rank).to(out.dtype)
                else:
                    a, b = cum_seq_lens_q[r].item(), cum_seq_lens_q[r + 1].item()
                    out[a:b] = _attend(query[a:b], lat, bmm1_scale, kv_lora_rank).to(out.dtype)
            return out

        mod.BatchMLAPagedAttentionWrapper, mod.MLAPlanMetadata = Wrapper, MLAPlanMetadata
        mod.trtllm_batch_decode_with_kv_cache_mla = trtllm_decode
        self.module = mod


class FakeFlashMla:
    """flash_mla: flash_mla_with_kvcache over a block table with one s_q per request, as its docstring reads."""

    def __init__(self, legacy=True):
        self.calls, self.schedules = [], []
        mod = types.ModuleType("flash_mla")
        fake = self

        class Meta:
            tile_scheduler_metadata = num_splits = None

        def get_mla_decoding_metadata(seqlens_k, num_q_tokens_per_head_k, h_k, h_q=None, is_fp8_kvcache=False,
                                      topk=None, use_legacy=False):
            fake.schedules.append(dict(per_head_k=num_q_tokens_per_head_k, h_k=h_k, h_q=h_q, fp8=is_fp8_kvcache,
                                       legacy=use_legacy))
            return torch.zeros(4, 8, dtype=torch.int32), torch.zeros(len(seqlens_k) + 1, dtype=torch.int32)

        def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v, meta, num_splits=None,
                                   softmax_scale=None, causal=False, is_fp8_kvcache=None, use_legacy=False,
                                   descale_q=None, descale_k=None, **kw):
            assert use_legacy and causal and num_splits is None and isinstance(meta, Meta)
            assert q.dim() == 4 and k_cache.dim() == 4 and k_cache.shape[1:3] == (64, 1)
            assert block_table.dtype == torch.int32 and cache_seqlens.dtype == torch.int32
            if is_fp8_kvcache:  # the dense fp8 path: e4m3 query, schedule made beforehand, descales given
                assert q.dtype == torch.float8_e4m3fn and meta.tile_scheduler_metadata is not None
                assert descale_q is not None and descale_k is not None
            fake.calls.append(dict(q=q, fp8=is_fp8_kvcache))
            cache = k_cache[:, :, 0]
            out = torch.empty(q.shape[:3] + (head_dim_v,), dtype=torch.bfloat16)
            for r, kv in enumerate(cache_seqlens.tolist()):
                lat = _rows(cache, block_table[r, : -(-kv // 64)], kv)
                out[r] = _attend(q[r], lat, softmax_scale, head_dim_v).to(out.dtype)
            return out, None

        mod.get_mla_metadata = lambda *a, **k: (Meta(), None)
        mod.get_mla_decoding_metadata = get_mla_decoding_metadata
        mod.flash_mla_with_kvcache = flash_mla_with_kvcache
        mod.has_legacy = lambda: legacy
        self.module = mod


@pytest.fixture
def fake_fi(monkeypatch):
    fake = FakeFlashInferMla()
    monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))
    monkeypatch.setitem(sys.modules, "flashinfer.mla", fake.module)
    return fake


@pytest.fixture
def fake_flash_mla(monkeypatch):
    fake = FakeFlashMla()
    monkeypatch.setitem(sys.modules, "flash_mla", fake.module)
    flashmla.load_flash_mla.cache_clear()
    yield fake
    flashmla.load_flash_mla.cache_clear()


def _check(kernel: str, case: Case, copies: int = 2) -> float:
    """prepare() on inputs of `copies` copies; each copy's output checked against that copy's reference."""
    return worst_error_vs_reference(kernel, case, copies)


FI_CASES = [dsv3(), dsv3(q_dist="accept:0.5", bs=5), dsv3(heads=16, kv_dist="lognormal:1.0", bs=3),
            dsv3(kv_dtype="fp8"), dsv3(page_size=16, heads=8), dsv3(dtype="fp16", kv_dtype="fp16")]


@pytest.mark.parametrize("backend", ["fa3", "fa2"])
@pytest.mark.parametrize("case", FI_CASES, ids=lambda c: c.case_id)
def test_flashinfer_mla_plans_csr_and_computes_the_reference(fake_fi, backend, case):
    name = f"flashinfer-mla-{backend}"
    assert get_kernel(name).supports(H200, case) is None
    assert _check(name, case) < 1e-2
    p = fake_fi.plans[-1]
    assert p["backend"] == backend and p["causal"] is True and p["num_heads"] == case.num_qo_heads
    assert (p["head_dim_ckv"], p["head_dim_kpe"], p["page_size"]) == (512, 64, case.page_size)
    assert p["sm_scale"] == pytest.approx(case.softmax_scale)
    assert p["metadata"].qo_indptr.device.type == "cpu"  # host metadata for plan()
    run = fake_fi.runs[-1]
    assert run["query"].shape[-1] == 576 and run["kv_cache"].dim() == 3  # packed query and cache
    assert torch.isnan(run["out"]).sum() == 0
    assert ({"ckv_scale", "kpe_scale"} <= set(run)) == (case.kv_dtype == "fp8")  # fp8: per-tensor scales 1.0


def test_flashinfer_mla_output_starts_poisoned(fake_fi):
    case = dsv3()
    k = get_kernel("flashinfer-mla-fa3")
    inputs = build_inputs(case)
    launch = k.launch(inputs)
    assert launch.out.shape == (6, 128, 512) and torch.isnan(launch.out).all() and launch.out.dtype == torch.bfloat16


FLASHMLA_CASES = [dsv3(), dsv3(q=1), dsv3(q=4, heads=64), dsv3(q_dist="accept:0.5", bs=6), dsv3(kv_dtype="fp8"),
                  dsv3(kv_dtype="fp8", q_dtype="fp8")]


@pytest.mark.parametrize("case", FLASHMLA_CASES, ids=lambda c: c.case_id)
def test_flashmla_pads_and_computes_the_reference(fake_flash_mla, case):
    assert get_kernel("flashmla").supports(H200, case) is None
    assert _check("flashmla", case) < 1e-2
    call = fake_flash_mla.calls[-1]
    b = build_inputs(case).padded
    assert call["q"].shape == (case.batch_size, b.q_len, case.num_qo_heads, 576)
    if case.kv_dtype == "fp8":  # the schedule made up front, for s_q x Hq query rows per KV head
        assert fake_flash_mla.schedules[-1] == dict(per_head_k=b.q_len * case.num_qo_heads, h_k=1,
                                                    h_q=case.num_qo_heads, fp8=True, legacy=True)
    else:
        assert not fake_flash_mla.schedules  # bf16: the first call fills the schedule itself


@pytest.mark.parametrize("case", [dsv3(), dsv3(q_dist="accept:0.5", bs=5), dsv3(kv_dtype="fp8"),
                                  dsv3(page_size=32, heads=16)], ids=lambda c: c.case_id)
def test_trtllm_gen_mla_takes_q_len_per_request_or_cum_seq_lens(fake_fi, monkeypatch, case):
    monkeypatch.delenv("FLASHINFER_CUBIN_DIR", raising=False)
    monkeypatch.delenv("FLASHINFER_NO_DOWNLOAD", raising=False)
    assert get_kernel("trtllm-gen-mla").supports(B200, case) is None
    assert _check("trtllm-gen-mla", case) < 1e-2
    d = fake_fi.decodes[-1]
    if case.q_dist == "fixed":
        assert d["query"].shape == (case.batch_size, case.q_len, case.num_qo_heads, 576) and d["cum"] is None
    else:
        assert d["query"].dim() == 3 and d["max_q"] == max(case.lengths().q)
    assert (d["query"].dtype == torch.float8_e4m3fn) == (case.kv_dtype == "fp8")  # SGLang's cast for fp8 KV


# ---- what each kernel takes ----------------------------------------------------------------------------------
def test_gqa_kernels_skip_mla_cases_and_mla_kernels_skip_gqa_cases():
    mla, gqa = dsv3(), Case(2, 3, 150, 32, 8, 128)
    for k in all_kernels():
        on_mla, on_gqa = kernel_reason(k, H200, mla), kernel_reason(k, H200, gqa)
        if k.name == "reference":
            assert on_mla is None and on_gqa is None
        elif k.name in MLA_KERNELS or k.attentions == ("mla",):  # an MLA kernel, or an engine's route of one
            assert on_gqa.startswith("a GQA case") and k.name in on_gqa
        else:
            assert on_mla.startswith("an MLA case") and "flashmla" in on_mla


REFUSALS = [
    ("flashmla", H200, dict(heads=16), "64 or 128 q heads"),
    ("flashmla", H200, dict(page_size=32), "pages of 64"),
    ("flashmla", B200, dict(), "needs SM90"),
    ("flashmla", H200, dict(dtype="fp16", kv_dtype="fp8"), "bf16"),
    ("flashinfer-mla-fa3", B200, dict(), "needs SM90"),
    ("flashinfer-mla-fa2", A100, dict(kv_dtype="fp8"), "SM90 only"),
    ("flashinfer-mla-fa2", H200, dict(kv_dtype="fp8", q_dtype="fp8"), "bf16/fp16 query only"),
    ("flashinfer-mla-fa2", H200, dict(heads=96), "divide 128"),
    ("flashinfer-mla-fa2", H200, dict(dtype="fp16", kv_dtype="fp8"), "bf16 query only"),
    ("trtllm-gen-mla", H200, dict(), "XQA MLA requires SM120a"),
    ("trtllm-gen-mla", B200, dict(heads=96), "64 < q heads < 128"),
    ("trtllm-gen-mla", B200, dict(page_size=16), "32 or 64"),
    ("trtllm-gen-mla", B200, dict(dtype="fp16", kv_dtype="fp16"), "bf16 output only"),
]


@pytest.mark.parametrize("kernel,device,kw,reason", REFUSALS, ids=[f"{k}-{r}" for k, _, _, r in REFUSALS])
def test_supports_says_what_a_kernel_does_not_take(fake_flash_mla, kernel, device, kw, reason):
    got = get_kernel(kernel).supports(device, dsv3(**kw))
    assert got is not None and reason in got, got


def test_a_kimi_k2_geometry_other_than_512_64_is_refused_by_the_fixed_width_kernels(fake_flash_mla):
    odd = Case(2, 3, 150, **HeadConfig.mla(64, 256, 64, 128).case_fields())
    assert "kv_lora_rank 512" in get_kernel("flashmla").supports(H200, odd)
    assert get_kernel("flashinfer-mla-fa3").supports(H200, odd) is None  # fa3 takes 128/256/512
    assert "multiple of 128" in get_kernel("flashinfer-mla-fa2").supports(
        H200, Case(2, 3, 150, **HeadConfig.mla(64, 320, 64, 128).case_fields()))


def test_each_kernel_is_compiled_once_per_module():
    fa3, fa2 = get_kernel("flashinfer-mla-fa3"), get_kernel("flashinfer-mla-fa2")
    a, b = dsv3(bs=1, q=1, kv=512), dsv3(bs=64, q=4, kv=32768)
    assert fa3.jit_key(a) == fa3.jit_key(b) != fa2.jit_key(a)  # one module per dtypes and widths, not per shape
    assert fa3.jit_key(a) != fa3.jit_key(dsv3(kv_dtype="fp8"))
    assert get_kernel("flashmla").jit_key(a) is None  # prebuilt in the wheel


# ---- a missing or broken FlashMLA --------------------------------------------------------------------------
def test_flashmla_not_installed_is_a_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "flash_mla", None)  # an import of it fails as for a missing package
    flashmla.load_flash_mla.cache_clear()
    try:
        reason = get_kernel("flashmla").supports(H200, dsv3())
    finally:
        flashmla.load_flash_mla.cache_clear()
    assert "not installed" in reason and "kbench[mla]" in reason and "\n" not in reason


def test_flashmla_that_does_not_load_is_a_reason(monkeypatch, tmp_path):
    pkg = tmp_path / "flash_mla"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise OSError('libcudart.so.13: cannot open shared object file')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "flash_mla", raising=False)
    flashmla.load_flash_mla.cache_clear()
    try:
        reason = get_kernel("flashmla").supports(H200, dsv3())
    finally:
        flashmla.load_flash_mla.cache_clear()
        sys.modules.pop("flash_mla", None)
    assert reason.startswith("FlashMLA is installed but does not load: OSError: libcudart.so.13")


def test_flashmla_without_its_legacy_kernels_is_a_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "flash_mla", FakeFlashMla(legacy=False).module)
    flashmla.load_flash_mla.cache_clear()
    try:
        reason = get_kernel("flashmla").supports(H200, dsv3())
    finally:
        flashmla.load_flash_mla.cache_clear()
    assert "no legacy kernels" in reason


def test_an_mla_sweep_without_flashmla_skips_each_kernel_with_a_reason_and_runs_on(tmp_path, monkeypatch):
    """With FlashMLA not importable, an MLA sweep runs: on this CPU every MLA kernel is a skipped row with its
    reason (a GPU's reason for flashmla is the install's, tested above) and the oracle is measured."""
    from click.testing import CliRunner

    from kbench.cli.main import cli
    from kbench.runs.store import load_run

    monkeypatch.setitem(sys.modules, "flash_mla", None)
    flashmla.load_flash_mla.cache_clear()
    res = CliRunner().invoke(cli, ["sweep", "-s", "deepseek-mtp-tp8", "--batch-size", "2", "--q-len", "1,2",
                                   "--kv-len", "128", "--kv-dtype", "bf16", "--budget", "0.05", "--min-time", "0",
                                   "--out", str(tmp_path)])
    flashmla.load_flash_mla.cache_clear()
    assert res.exit_code == 0, res.output
    (run,) = tmp_path.iterdir()
    rows = load_run(run).rows
    assert set(rows.loc[rows.kernel == "reference", "status"]) == {"ok"}
    mla_rows = rows[rows.kernel.isin(MLA_KERNELS)]
    assert len(mla_rows) == 2 * len(MLA_KERNELS) and set(mla_rows.status) == {"skipped"}
    assert set(rows.attention) == {"mla"} and set(rows.num_qo_heads) == {16} and set(rows.kv_lora_rank) == {512}


def test_equal_jit_keys_mean_equal_modules_for_the_mla_kernels(tmp_path):
    """The sweep's compile plan asks each (kernel, jit_key) once: over MLA cases (heads, dtypes, q, page, ragged
    q) equal keys must name the same FlashInfer modules, and the wrapper's module is gen_batch_mla_module's."""
    import json
    import os
    import subprocess

    code = r"""
import json, sys
from kbench.cases.scenario import apply_overrides, load_scenario
from kbench.device import DeviceInfo
from kbench.engine.measure import kernel_reason
from kbench.kernels.registry import get_kernel
dev = DeviceInfo(cuda=True, name="t", sm=int(sys.argv[1]))
cases = [c for model in ("deepseek-v3", "deepseek-v3-tp8", "kimi-k2")
         for c in apply_overrides(load_scenario("deepseek-mtp"), model=model, batch_size="2,64", q_len="1,4",
                                  kv_len="256", kv_dtype="bf16,fp8", q_dist="fixed,accept:0.7", page_size="32,64").cases()]
out = {}
for name in ("flashinfer-mla-fa3", "flashinfer-mla-fa2", "flashmla", "trtllm-gen-mla"):
    k, seen, bad, n = get_kernel(name), {}, [], 0
    for c in cases:
        if kernel_reason(k, dev, c) or k.jit_key(c) is None:
            continue
        names = sorted(s.name for s in k.jit_specs(dev, c))
        n += 1
        if seen.setdefault(k.jit_key(c), names) != names:
            bad.append(c.case_id)
    out[name] = {"n": n, "bad": bad, "modules": sorted({m for v in seen.values() for m in v})}
print(json.dumps(out))
"""
    r = subprocess.run([sys.executable, "-c", code, "90"], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "FLASHINFER_CUDA_ARCH_LIST": "9.0a", "FLASHINFER_WORKSPACE_BASE": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for name in ("flashinfer-mla-fa3", "flashinfer-mla-fa2"):
        assert out[name]["n"] > 10 and out[name]["bad"] == [], out[name]
        mods = out[name]["modules"]  # one per KV dtype, whatever the heads, q, page or ragged q
        assert len(mods) == 2 and all(m.startswith("batch_mla_attention_dtype_q_bf16") for m in mods), mods
        assert any("dtype_kv_e4m3" in m for m in mods) and all("head_dim_ckv_512_head_dim_kpe_64" in m for m in mods)
    assert out["flashmla"]["n"] == 0  # prebuilt in the wheel: no key, nothing to compile
