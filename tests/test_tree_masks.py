"""Draft-tree masks and the reference (issue #26): the reference applies a tree exactly (checked against an
independent computation for a chain, a star and random trees from a file, ragged and per-request KV too); the
xqa bits and FA2's custom mask say what the parent lists say; each kernel runs a tree or says why not."""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch
from helpers import ancestors

from kbench.cases.case import Case
from kbench.cases.trees import chain
from kbench.device import DeviceInfo
from kbench.kernels.inputs import build_inputs, xqa_draft_mask, xqa_ragged_mask
from kbench.kernels.reference import reference_attention
from kbench.kernels.registry import get_kernel
from kbench.kernels.tree_masks import (TREE_SKIPS, fa2_mask, pack_fa2, parents_tensor, step_masks, visibility,
                                       xqa_mask)

H200 = DeviceInfo(cuda=True, name="fake H200", sm=90)
B200 = DeviceInfo(cuda=True, name="fake B200", sm=100)


def independent_tree_attention(inputs, trees):
    """One request and one query token at a time: the keys a token sees listed by hand (the prefix, then
    the draft slots of its ancestors and itself, a window by KV slot), K/V read token by token through the
    page table, softmax(q.k * scale) @ v in float64."""
    c = inputs.case
    pool = inputs.kv_cache.double()
    starts = inputs.qo_indptr.tolist()
    out = torch.empty(inputs.q.shape, dtype=torch.float64)
    for r, kv_len in enumerate(inputs.seq_lens.tolist()):
        q_len = starts[r + 1] - starts[r]
        parents = trees[r]
        assert len(parents) == q_len

        def kv_at(t, which):
            page, slot = int(inputs.block_tables[r, t // c.page_size]), t % c.page_size
            return pool[page, which, :, slot, :] if c.kv_layout == "HND" else pool[page, which, slot, :, :]

        for i in range(q_len):
            pos = kv_len - q_len + i
            keys = list(range(kv_len - q_len)) + sorted(kv_len - q_len + j for j in ancestors(parents, i))
            if c.window_left >= 0:
                keys = [t for t in keys if t >= pos - c.window_left]
            k = torch.stack([kv_at(t, 0) for t in keys], 1).repeat_interleave(c.group, 0)  # [Hq, n, d]
            v = torch.stack([kv_at(t, 1) for t in keys], 1).repeat_interleave(c.group, 0)
            q = inputs.q[starts[r] + i].double()  # [Hq, d]
            p = torch.softmax(torch.einsum("hd,hnd->hn", q, k) / math.sqrt(c.head_dim), -1)
            out[starts[r] + i] = torch.einsum("hn,hnd->hd", p, v)
    return out.float()


STAR = (-1,) + (0,) * 7
RANDOM = ["-1 0 0 1 1 2 4 4", "-1 0 1 2 2 0 5 3", "-1 0 0 0 3 3 1 6"]


@pytest.mark.parametrize("name", ["chain", "star", "file", "topk", "ragged", "per-request-kv", "window", "nhd"])
def test_reference_applies_the_tree_exactly(tmp_path, name):
    f = tmp_path / "trees.txt"
    f.write_text({"star": " ".join(map(str, STAR)) + "\n"}.get(name, "\n".join(RANDOM) + "\n"))
    extra = {"chain": dict(tree="chain"), "star": dict(tree=f"file:{f}"), "file": dict(tree=f"file:{f}"),
             "topk": dict(tree="topk:3"), "ragged": dict(tree=f"file:{f}", q_dist="accept:0.6"),
             "per-request-kv": dict(tree="topk:2", kv_dist="lognormal:1.0"),
             "window": dict(tree=f"file:{f}", window_left=20), "nhd": dict(tree=f"file:{f}", kv_layout="NHD")}[name]
    case = Case(5, 8, 90, 4, 2, 32, 16, **extra)
    inp = build_inputs(case, seed=3)
    trees = inp.tree.parents if inp.tree is not None else [chain(n) for n in inp.lengths.q]
    if name == "file":
        assert [list(p) for p in trees] == [list(map(int, RANDOM[r % 3].split())) for r in range(5)]
    if name == "star":
        assert all(p == STAR for p in trees)
    torch.testing.assert_close(reference_attention(inp), independent_tree_attention(inp, trees), rtol=1e-4, atol=1e-5)


def test_a_chain_is_the_causal_case_and_a_tree_changes_the_answer(tmp_path):
    f = tmp_path / "chain8.txt"
    f.write_text("-1 0 1 2 3 4 5 6\n")
    causal = build_inputs(Case(4, 8, 100, 4, 2, 32, 16), seed=5)
    as_file = build_inputs(Case(4, 8, 100, 4, 2, 32, 16, tree=f"file:{f}"), seed=5)
    topk = build_inputs(Case(4, 8, 100, 4, 2, 32, 16, tree="topk:4"), seed=5)
    assert causal.tree is None and torch.equal(as_file.tree.xqa_padded, causal.draft_mask)
    torch.testing.assert_close(reference_attention(as_file), reference_attention(causal), rtol=0, atol=0)
    # the same q and KV seen through a tree: the drafts off the root's first branch see fewer keys
    diff = (reference_attention(topk) - reference_attention(causal)).norm() / reference_attention(causal).norm()
    assert diff > 0.01


def decode_bits(mask_rows: torch.Tensor, n: int) -> list[list[int]]:
    """Row i's visible tokens, read back from xqa's uint16 pairs (low half first) by shifting bits."""
    rows = mask_rows.view(torch.int16).to(torch.int64) & 0xFFFF
    out = []
    for row in rows.tolist():
        words = [row[2 * w] | (row[2 * w + 1] << 16) for w in range(len(row) // 2)]
        out.append([j for j in range(n) if (words[j // 32] >> (j % 32)) & 1])
    return out


@pytest.mark.parametrize("n", [3, 8, 31, 32, 33, 64])
def test_xqa_bits_are_the_ancestor_sets(n):
    rng = np.random.default_rng(n)
    trees = [tuple([-1] + [int(rng.integers(0, i)) for i in range(1, n)]) for _ in range(3)]
    m = xqa_mask(visibility(parents_tensor(trees, n)))
    assert m.dtype == torch.uint16 and m.shape == (3, n, ((n + 31) // 32) * 2)
    for r, p in enumerate(trees):
        assert decode_bits(m[r], n) == [sorted(ancestors(p, i)) for i in range(n)]
    # a chain's bits are the causal mask kbench gave xqa before trees
    assert torch.equal(xqa_mask(visibility(parents_tensor([chain(n)] * 2, n))), xqa_draft_mask(2, n))


def test_ragged_xqa_rows_are_packed_by_the_q_offsets():
    trees = [(-1, 0, 0), (-1,), (-1, 0, 1, 1, 0)]
    q = [3, 1, 5]
    m = xqa_mask(visibility(parents_tensor(trees, 5)), q)
    assert m.shape == (9, 2)
    got, offsets = decode_bits(m, 5), [0, 3, 4]
    for r, p in enumerate(trees):
        assert got[offsets[r]:offsets[r] + q[r]] == [sorted(ancestors(p, i)) for i in range(q[r])]
    chains = [chain(n) for n in q]
    assert torch.equal(xqa_mask(visibility(parents_tensor(chains, 5)), q), xqa_ragged_mask(q, 5))
    # padded view: a padding token (beyond a request's own) sees itself only
    padded = decode_bits(xqa_mask(visibility(parents_tensor(trees, 5))).reshape(15, 2), 5)
    assert padded[3] == [3] and padded[4] == [4]  # request 0's padding
    assert padded[5:10] == [[0], [1], [2], [3], [4]]  # request 1: the root, then padding


class CudaUint16Ops(torch.utils._python_dispatch.TorchDispatchMode):
    """Refuses what CUDA's torch (2.11, the H200's) lacks for uint16 tensors and the CPU build has: indexing
    ('"index_cuda" not implemented for 'UInt16'', every ragged tree row on the H200 until December 2026)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten.index.Tensor, torch.ops.aten.index_select.default, torch.ops.aten.gather.default):
            if any(isinstance(a, torch.Tensor) and a.dtype == torch.uint16 for a in args[:1]):
                raise NotImplementedError('"index_cuda" not implemented for \'UInt16\'')
        return func(*args, **(kwargs or {}))


@pytest.mark.skipif(not hasattr(torch, "uint16"), reason="no torch.uint16")
def test_ragged_rows_are_picked_without_indexing_a_uint16_tensor():
    trees, q = [(-1, 0, 0), (-1,), (-1, 0, 1, 1, 0)], [3, 1, 5]
    want = xqa_mask(visibility(parents_tensor(trees, 5)), q)
    with CudaUint16Ops():
        got = xqa_mask(visibility(parents_tensor(trees, 5)), q)
        with pytest.raises(NotImplementedError):  # the mode does refuse it
            want[torch.tensor([0, 2])]
    assert got.dtype == torch.uint16 and torch.equal(got, want)


def test_fa2_mask_is_each_requests_block_flattened_and_concatenated():
    trees, q, kv = [(-1, 0, 0), (-1, 0)], [3, 2], [7, 4]
    m = fa2_mask(visibility(parents_tensor(trees, 3)), q, kv)
    assert m.dtype == torch.bool and m.numel() == 3 * 7 + 2 * 4
    first, second = m[:21].view(3, 7), m[21:].view(2, 4)
    for block, p, n, k in ((first, trees[0], 3, 7), (second, trees[1], 2, 4)):
        for i in range(n):
            want = [True] * (k - n) + [j in ancestors(p, i) for j in range(n)]
            assert block[i].tolist() == want
    # packed as plan(custom_mask=) packs it: each request on its own bytes, little bit order
    packed, offsets = pack_fa2(m, q, kv)
    assert offsets.tolist() == [0, 3, 4]
    assert np.array_equal(np.unpackbits(packed[:3].numpy(), bitorder="little")[:21], first.reshape(-1).numpy())
    assert np.array_equal(np.unpackbits(packed[3:].numpy(), bitorder="little")[:8], second.reshape(-1).numpy())


def test_inputs_carry_the_tree_masks_for_each_view():
    case = Case(6, 8, 200, 4, 2, 32, 16, tree="topk:4", q_dist="accept:0.7", kv_dist="uniform:50..300")
    inp = build_inputs(case, seed=1)
    b = inp.lengths
    assert not b.uniform_q
    assert inp.padded.draft_mask.shape == (6, b.max_q, 2) and inp.draft_mask.shape == (b.total_q, 2)
    assert inp.tree.fa2.numel() == sum(q * k for q, k in zip(b.q, b.kv))
    steps = step_masks(parents_tensor(inp.tree.parents, b.max_q), b.q, b.kv, ragged=True)
    assert torch.equal(steps.xqa, inp.draft_mask) and torch.equal(steps.fa2, inp.tree.fa2)


def test_step_masks_cpu_time_is_small():
    """The engine's per-step work on a CPU (bs 64, 64-token trees, kv 4096) stays small (a loaded CI machine too)."""
    import time

    trees = [tuple([-1] + list(range(0, 63))) for _ in range(64)]
    p = parents_tensor(trees, 64)
    t0 = time.perf_counter()
    s = step_masks(p, [64] * 64, [4096] * 64, pack=True)
    assert time.perf_counter() - t0 < 5.0
    assert s.xqa.shape == (64, 64, 4) and s.fa2.numel() == 64 * 64 * 4096
    assert s.fa2_packed[0].numel() == 64 * 64 * 4096 // 8 and s.fa2_packed[1][-1] == 64 * 64 * 4096 // 8
    only = step_masks(p, [64] * 64, [4096] * 64, fa2=False)
    assert only.fa2 is None and only.fa2_packed is None and torch.equal(only.xqa, s.xqa)


# ---- kernels ----------------------------------------------------------------------------------------------
TREE = Case(3, 8, 64, 8, 2, 64, 16, tree="topk:2")


@pytest.mark.parametrize("kernel", sorted(TREE_SKIPS))
def test_kernels_without_a_tree_mask_say_why(kernel):
    why = get_kernel(kernel).supports(H200, TREE)
    assert why == TREE_SKIPS[kernel] and "FlashInfer 0.7.4" in why and why.startswith("tree")
    assert get_kernel(kernel).supports(H200, Case(3, 8, 64, 8, 2, 64, 16)) != why


def test_trtllm_decode_takes_trees_on_xqa_only():
    for name in ("trtllm-decode", "trtllm-decode-ragged"):
        k = get_kernel(name)
        ragged = Case(3, 8, 64, 8, 2, 64, 16, tree="topk:2", q_dist="accept:0.5")
        case = ragged if k.ragged else TREE
        assert k.supports(H200, case) is None
        assert "trtllm-gen masks causally and ignores `mask`" in k.supports(B200, case)
        assert "sliding window" in k.supports(H200, Case(3, 8, 64, 8, 2, 64, 16, tree="topk:2", window_left=32,
                                                          q_dist=case.q_dist))
    assert get_kernel("fa2-prefill").supports(H200, TREE) is None


@pytest.fixture
def fake_fi(monkeypatch):
    from test_kernel_prepare import FakeFlashInfer

    fake = FakeFlashInfer()
    for name, mod in fake.modules.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    return fake


def test_xqa_gets_the_tree_mask(fake_fi):
    inp = build_inputs(TREE, seed=2)
    get_kernel("trtllm-decode").prepare(inp)(0)
    (name, kw), = fake_fi.calls
    assert name == "trtllm_decode" and kw["q_len_per_req"] == 8 and torch.equal(kw["mask"], inp.tree.xqa_padded)
    assert not torch.equal(kw["mask"], xqa_draft_mask(3, 8))


def test_ragged_xqa_gets_the_packed_tree_rows(fake_fi):
    inp = build_inputs(Case(4, 8, 64, 8, 2, 64, 16, tree="topk:2", q_dist="accept:0.6"), seed=2)
    get_kernel("trtllm-decode-ragged").prepare(inp)(0)
    (name, kw), = fake_fi.calls
    assert name == "xqa_decode" and torch.equal(kw["mask"], inp.tree.xqa_ragged)
    assert torch.equal(kw["q_cu_seq_lens"], inp.qo_indptr)


def test_fa2_plans_the_custom_mask_and_chains_stay_causal(fake_fi):
    inp = build_inputs(TREE, seed=2)
    get_kernel("fa2-prefill").prepare(inp)(0)
    assert torch.equal(fake_fi.plans[-1]["custom_mask"], inp.tree.fa2)
    get_kernel("fa2-prefill").prepare(build_inputs(Case(3, 8, 64, 8, 2, 64, 16), seed=2))(0)
    assert "custom_mask" not in fake_fi.plans[-1] and fake_fi.plans[-1]["causal"] is True


def test_jit_keys_with_a_tree():
    """xqa's module does not depend on the mask; fa2's tree needs FlashInfer's packbits module beside its
    prefill module, so its key marks a tree (kbench.kernels.tree_masks); any two trees share it."""
    chain_case = Case(3, 8, 64, 8, 2, 64, 16)
    assert get_kernel("trtllm-decode").jit_key(TREE) == get_kernel("trtllm-decode").jit_key(chain_case)
    fa2 = get_kernel("fa2-prefill")
    assert fa2.jit_key(TREE) != fa2.jit_key(chain_case)
    assert fa2.jit_key(TREE) == fa2.jit_key(Case(3, 8, 64, 8, 2, 64, 16, tree="topk:8"))
