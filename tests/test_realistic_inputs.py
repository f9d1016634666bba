"""Realistic batches: per-request inputs (ragged q, per-request page tables, padded view, xqa's ragged mask)
and the reference (window, sinks, ragged q, per-request lengths) against an independent computation."""
import math
from dataclasses import replace

import pytest
import torch

from kbench.cases.case import Case
from kbench.cases.dists import BatchLengths
from kbench.kernels.inputs import build_inputs, xqa_draft_mask, xqa_ragged_mask
from kbench.kernels.reference import reference_attention


def independent_attention(inputs):
    """Independent of kbench's reference: one request at a time, K/V gathered token by token through the
    page table, the window and causal rule written as explicit loops, and the sink as an extra key of
    zeros (score 0) whose float mask bias is the sink logit, with a zero value, through torch's SDPA."""
    c = inputs.case
    kv_pool = inputs.kv_cache.float()
    starts = inputs.qo_indptr.tolist()
    outs = []
    for r, (kv_len, q_len) in enumerate(zip(inputs.seq_lens.tolist(), (inputs.qo_indptr[1:] - inputs.qo_indptr[:-1]).tolist())):
        ks, vs = [], []
        for t in range(kv_len):
            page, slot = int(inputs.block_tables[r, t // c.page_size]), t % c.page_size
            if c.kv_layout == "HND":
                ks.append(kv_pool[page, 0, :, slot, :]), vs.append(kv_pool[page, 1, :, slot, :])
            else:
                ks.append(kv_pool[page, 0, slot, :, :]), vs.append(kv_pool[page, 1, slot, :, :])
        k = torch.stack(ks, 1).repeat_interleave(c.group, 0)  # [Hq, kv, d]
        v = torch.stack(vs, 1).repeat_interleave(c.group, 0)
        bias = torch.full((q_len, kv_len), float("-inf"))
        for i in range(q_len):
            pos = kv_len - q_len + i
            lo = 0 if c.window_left < 0 else max(0, pos - c.window_left)
            for j in range(lo, pos + 1):
                bias[i, j] = 0.0
        bias = bias.unsqueeze(0).expand(c.num_qo_heads, -1, -1)
        if inputs.sinks is not None:
            k = torch.cat([k, torch.zeros_like(k[:, :1])], 1)
            v = torch.cat([v, torch.zeros_like(v[:, :1])], 1)
            sink = inputs.sinks.float().view(-1, 1, 1).expand(-1, q_len, 1)
            bias = torch.cat([bias, sink], -1)
        q = inputs.q[starts[r]:starts[r + 1]].float().transpose(0, 1)  # [Hq, q, d]
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=1 / math.sqrt(c.head_dim))
        outs.append(o.transpose(0, 1))
    return torch.cat(outs, 0)


CASES = {
    "ragged-q": dict(q_dist="accept:0.5"),
    "per-request-kv": dict(kv_dist="lognormal:1.0"),
    "window": dict(window_left=20),
    "window-smaller-than-q": dict(window_left=2),
    "sinks": dict(sinks="on"),
    "gpt-oss-sliding": dict(window_left=128, sinks="on", kv_dist="uniform:100..300"),  # its window, bf16 sinks
    "all": dict(kv_dist="uniform:40..300", q_dist="accept:0.7", window_left=33, sinks="on",
                max_seq_len="context:1024"),
}


@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize("name", list(CASES))
def test_reference_matches_independent_attention(name, layout):
    case = Case(6, 5, 150, 8, 2, 64, 16, kv_layout=layout, **CASES[name])
    inp = build_inputs(case, seed=11)
    ref = reference_attention(inp)
    assert ref.shape == (inp.lengths.total_q, 8, 64)
    torch.testing.assert_close(ref, independent_attention(inp), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axis", ["window", "sinks", "per-request-kv"])
def test_each_axis_changes_the_answer(axis):
    """A kernel that ignored the axis would fail the check: the reference moves well beyond tolerance."""
    case = Case(4, 4, 300, 8, 2, 64, 16, **CASES[axis])
    inp = build_inputs(case, seed=2)
    plain = build_inputs(replace(case, **{k: Case.__dataclass_fields__[k].default for k in CASES[axis]}), seed=2)
    if axis == "per-request-kv":  # same tensors, the kernel reading kv_len for every request
        inp_fixed = build_inputs(case, seed=2)
        inp_fixed.lengths = BatchLengths(tuple([300] * 4), inp.lengths.q)
        inp_fixed.seq_lens = torch.full((4,), 300, dtype=torch.int32)
        a, b = reference_attention(inp), reference_attention(inp_fixed)
    else:
        a, b = reference_attention(inp), reference_attention(plain)
    assert (a - b).norm() / a.norm() > 0.1


def test_ragged_inputs_are_packed_and_sized_per_request():
    case = Case(5, 4, 100, 8, 2, 64, 16, kv_dist="uniform:20..200", q_dist="accept:0.6")
    inp = build_inputs(case, seed=4)
    b = inp.lengths
    assert inp.qo_indptr.tolist() == [0] + [sum(b.q[: i + 1]) for i in range(5)]
    assert inp.seq_lens.tolist() == list(b.kv) and inp.cum_seq_lens_kv[-1] == sum(b.kv)
    assert inp.q.shape[0] == b.total_q
    assert inp.block_tables.shape == (5, -(-max(b.kv) // 16))
    counts = (inp.kv_indptr[1:] - inp.kv_indptr[:-1]).tolist()
    assert counts == [-(-k // 16) for k in b.kv]
    assert inp.last_page_len.tolist() == [k - (n - 1) * 16 for k, n in zip(b.kv, counts)]
    # every request's pages are its own: no page is shared between requests
    pages = inp.kv_indices.tolist()
    assert len(pages) == len(set(pages))
    for r in range(5):
        assert inp.kv_indices[inp.kv_indptr[r]:inp.kv_indptr[r + 1]].tolist() == inp.block_tables[r, :counts[r]].tolist()


def test_padded_view_keeps_the_real_tokens_where_they_were():
    """Reference on the padded batch (every request max_q tokens, padding after the real ones) restricted
    to the real rows equals the reference on the ragged batch: the padding changes nothing real."""
    case = Case(6, 4, 90, 8, 2, 64, 16, kv_dist="uniform:10..120", q_dist="accept:0.5", window_left=7, sinks="on")
    inp = build_inputs(case, seed=9)
    pb, b = inp.padded, inp.lengths
    assert not b.uniform_q and pb.q_len == b.max_q
    assert inp.q_padded().shape[0] == 6 * b.max_q
    torch.testing.assert_close(inp.q_padded()[pb.valid_rows], inp.q)
    assert pb.seq_lens.tolist() == [k + b.max_q - q for k, q in zip(b.kv, b.q)]
    as_padded = build_inputs(case, seed=9)
    as_padded.lengths = BatchLengths(tuple(pb.seq_lens.tolist()), (b.max_q,) * 6)
    as_padded.block_tables, as_padded.seq_lens = pb.block_tables, pb.seq_lens
    as_padded.qo_indptr = torch.arange(0, 7 * b.max_q, b.max_q, dtype=torch.int32)
    as_padded.extra.clear()
    as_padded.copies[0].q = inp.q_padded()
    torch.testing.assert_close(pb.unpad(reference_attention(as_padded)), reference_attention(inp))


def test_uniform_case_inputs_are_unchanged_by_the_new_axes():
    """The idealised batch builds exactly what it built before the realistic axes existed."""
    case = Case(3, 4, 200, 8, 2, 64, 16)
    inp = build_inputs(case, seed=5)
    gen = torch.Generator().manual_seed(5)
    perm = torch.randperm(3 * 13, generator=gen).to(torch.int32)
    assert torch.equal(inp.block_tables, perm.view(3, 13))
    assert inp.padded.valid_rows is None and inp.q_padded() is inp.q and inp.sinks is None
    assert torch.equal(inp.draft_mask, xqa_draft_mask(3, 4))


def test_xqa_ragged_mask_rows_follow_the_query_offsets():
    m = xqa_ragged_mask([1, 3, 2], 3)
    full = xqa_draft_mask(1, 3)[0]
    assert m.shape == (6, 2)
    assert torch.equal(m, torch.cat([full[:1], full[:3], full[:2]]))
    bits = [int(m[i, 0]) for i in range(6)]
    assert bits == [0b1, 0b1, 0b11, 0b111, 0b1, 0b11]


def test_context_max_seq_len_widens_the_page_table_only():
    tight = build_inputs(Case(2, 2, 100, 8, 2, 64, 16), seed=1)
    wide = build_inputs(Case(2, 2, 100, 8, 2, 64, 16, max_seq_len="context:4096"), seed=1)
    assert tight.max_seq_len == 100 and wide.max_seq_len == 4096
    assert wide.block_tables.shape == (2, 256) and torch.equal(wide.block_tables[:, :7], tight.block_tables)
    torch.testing.assert_close(reference_attention(wide), reference_attention(tight))


def test_sinks_are_seeded_float32_per_q_head():
    a = build_inputs(Case(1, 1, 64, 8, 2, 64, 16, sinks="on"), seed=3).sinks
    b = build_inputs(Case(1, 1, 64, 8, 2, 64, 16, sinks="on"), seed=3).sinks
    c = build_inputs(Case(1, 1, 64, 8, 2, 64, 16, sinks="on"), seed=4).sinks
    assert a.dtype == torch.float32 and a.shape == (8,) and torch.equal(a, b) and not torch.equal(a, c)


# --- which kernel takes which realistic axis (supports() reasons; checked without a GPU) ----------------
from kbench.device import DeviceInfo  # noqa: E402
from kbench.kernels.registry import get_kernel  # noqa: E402

H200 = DeviceInfo(cuda=True, name="fake H200", sm=90)
B200 = DeviceInfo(cuda=True, name="fake B200", sm=100)


def _reason(kernel, dev=H200, **axes):
    return get_kernel(kernel).supports(dev, Case(16, 4, 4096, 32, 8, 128, **axes))


@pytest.mark.parametrize("kernel", ["fa2-prefill", "fa3-prefill", "decode-wrapper"])
def test_sinks_refused_with_the_reason_where_flashinfer_drops_them(kernel):
    assert "sinks" in _reason(kernel, sinks="on") and "0.7.2.post1" in _reason(kernel, sinks="on")
    assert _reason(kernel, window_left=128) is None  # the window is a plan() argument they all take


@pytest.mark.parametrize("kernel", ["trtllm-decode", "trtllm-fmha-v2"])
def test_trtllm_kernels_take_window_and_sinks(kernel):
    assert _reason(kernel, window_left=128, sinks="on", q_dist="accept:0.7", kv_dist="lognormal:1.0") is None


def test_ragged_decode_runs_only_ragged_batches_on_both_backends():
    assert "q_dist fixed" in _reason("trtllm-decode-ragged")
    assert _reason("trtllm-decode-ragged", q_dist="accept:0.7") is None
    assert _reason("trtllm-decode-ragged", B200, q_dist="accept:0.7") is None
    assert get_kernel("trtllm-decode-ragged").backend(H200) == "xqa"
    assert get_kernel("trtllm-decode-ragged").backend(B200) == "trtllm-gen"


def test_padded_kernels_check_only_the_real_rows():
    inp = build_inputs(Case(4, 4, 64, 8, 2, 64, 16, q_dist="accept:0.5"), seed=1)
    padded_out = torch.randn(inp.q_padded().shape)
    for name in ("trtllm-decode", "decode-wrapper"):
        got = get_kernel(name).checked_output(inp, padded_out)
        assert torch.equal(got, padded_out[inp.padded.valid_rows]) and got.shape[0] == inp.lengths.total_q
    assert get_kernel("trtllm-decode-ragged").checked_output(inp, inp.q) is inp.q
    assert get_kernel("fa2-prefill").checked_output(inp, inp.q) is inp.q


def test_skip_softmax_goes_only_where_flashinfer_applies_it():
    assert "xqa does not take it" in _reason("trtllm-decode", skip_softmax="1000")
    assert "xqa does not take it" in _reason("trtllm-decode-ragged", q_dist="accept:0.7", skip_softmax="1000")
    assert _reason("trtllm-decode", B200, skip_softmax="1000") is None  # trtllm-gen takes it
    assert _reason("trtllm-fmha-v2", skip_softmax="1000") is None
    for k in ("fa2-prefill", "decode-wrapper"):
        assert "skip-softmax" in _reason(k, skip_softmax="1000") and "0.7.2.post1" in _reason(k, skip_softmax="1000")


def test_skip_softmax_is_judged_by_its_own_tolerance_and_is_its_own_case():
    from kbench.timing.check import SKIP_SOFTMAX_TOLERANCE, tolerance_for

    assert tolerance_for("bf16", "bf16", "1000") == SKIP_SOFTMAX_TOLERANCE > tolerance_for("bf16", "fp8")
    assert tolerance_for("bf16", "bf16") == 2e-2
    c = Case(16, 4, 4096, 32, 8, 128, skip_softmax="1000")
    assert c.case_id == Case(16, 4, 4096, 32, 8, 128).case_id + "-ss1000" and c.realistic
