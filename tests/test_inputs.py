"""The paged input builder and the reference, checked against an independently computed dense attention."""
import math

import pytest
import torch

from kbench.cases.case import Case
from kbench.kernels.inputs import build_inputs, xqa_draft_mask
from kbench.kernels.reference import reference_attention


def dense_attention_by_hand(inputs):
    """Independent: walk the page table token by token, build dense K/V, and use SDPA with a boolean mask."""
    c = inputs.case
    outs = []
    kv = inputs.kv_cache.float()
    for b in range(c.batch_size):
        ks, vs = [], []
        for t in range(c.kv_len):
            page = int(inputs.block_tables[b, t // c.page_size])
            slot = t % c.page_size
            if c.kv_layout == "HND":
                ks.append(kv[page, 0, :, slot, :])
                vs.append(kv[page, 1, :, slot, :])
            else:
                ks.append(kv[page, 0, slot, :, :])
                vs.append(kv[page, 1, slot, :, :])
        k = torch.stack(ks, 1)  # [Hkv, kv, d]
        v = torch.stack(vs, 1)
        q = inputs.q[b * c.q_len:(b + 1) * c.q_len].float().transpose(0, 1)  # [Hq, q, d]
        k = k.repeat_interleave(c.group, 0)
        v = v.repeat_interleave(c.group, 0)
        mask = torch.zeros(c.q_len, c.kv_len, dtype=torch.bool)
        for i in range(c.q_len):
            mask[i, : c.kv_len - c.q_len + i + 1] = True
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1 / math.sqrt(c.head_dim))
        outs.append(o.transpose(0, 1))
    return torch.cat(outs, 0)


@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize("page", [1, 16, 32, 64, 128])
def test_reference_matches_independent_dense_attention(layout, page):
    case = Case(batch_size=3, q_len=5, kv_len=150, num_qo_heads=8, num_kv_heads=2, head_dim=64, page_size=page,
                kv_layout=layout)
    inp = build_inputs(case, seed=page)
    ref = reference_attention(inp)
    hand = dense_attention_by_hand(inp)
    assert ref.shape == (15, 8, 64)
    torch.testing.assert_close(ref, hand, rtol=1e-4, atol=1e-5)


def test_reference_detects_a_kernel_that_ignores_the_page_table():
    case = Case(2, 4, 200, 8, 2, 64, 16)
    inp = build_inputs(case)
    ref = reference_attention(inp)
    bt = inp.block_tables.clone()
    inp.block_tables = torch.arange(bt.numel(), dtype=torch.int32).view_as(bt)  # pages in order: wrong data
    wrong = reference_attention(inp)
    assert (wrong - ref).norm() / ref.norm() > 0.1


def test_builder_layout_like_engines():
    case = Case(4, 3, 100, 8, 2, 64, 16)
    inp = build_inputs(case)
    assert inp.seq_lens.tolist() == [100] * 4  # includes the draft tokens
    assert inp.qo_indptr.tolist() == [0, 3, 6, 9, 12]
    assert inp.block_tables.shape == (4, 7) and inp.block_tables.dtype == torch.int32
    assert inp.last_page_len.tolist() == [100 - 6 * 16] * 4
    assert inp.kv_indptr.tolist() == [0, 7, 14, 21, 28]
    assert inp.cum_seq_lens_kv.tolist() == [0, 100, 200, 300, 400]
    flat = inp.block_tables.flatten()
    assert sorted(flat.tolist()) == list(range(28))  # each page used once
    assert flat.tolist() != list(range(28))  # scattered, not in order
    assert inp.q.shape == (12, 8, 64) and inp.q.dtype == torch.bfloat16
    assert inp.kv_cache.shape == (28, 2, 2, 16, 64)
    assert (inp.q != 0).float().mean() > 0.99 and (inp.kv_cache != 0).float().mean() > 0.99
    assert torch.isfinite(inp.kv_cache.float()).all()


def test_copies_are_independent_and_fp8_kv_dequantizes():
    case = Case(2, 2, 64, 8, 2, 64, 16, kv_dtype="fp8")
    inp = build_inputs(case, copies=3)
    assert len(inp.copies) == 3
    assert inp.kv_cache.dtype == torch.float8_e4m3fn
    assert not torch.equal(inp.copies[0].q, inp.copies[1].q)
    r0, r1 = reference_attention(inp, 0), reference_attention(inp, 1)
    assert torch.isfinite(r0).all() and not torch.allclose(r0, r1)


def hand_mask(q):
    """Bit j of row i set when draft token i sees draft token j (j <= i), packed by hand into uint16 pairs."""
    words = (q + 31) // 32
    rows = []
    for i in range(q):
        bits = 0
        for j in range(i + 1):
            bits |= 1 << j
        row = []
        for w in range(words):
            word = (bits >> (32 * w)) & 0xFFFFFFFF
            row += [word & 0xFFFF, word >> 16]
        rows.append(row)
    return rows


@pytest.mark.parametrize("q", [2, 3, 8, 15, 16, 17, 31, 32, 33, 64])
def test_draft_mask_bit_exact(q):
    m = xqa_draft_mask(3, q)
    assert m.dtype == torch.uint16 and m.shape == (3, q, ((q + 31) // 32) * 2)
    expected = hand_mask(q)
    for b in range(3):
        assert m[b].to(torch.int32).tolist() == expected
    assert xqa_draft_mask(3, 1) is None
