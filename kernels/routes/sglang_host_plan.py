"""SGLang 0.5.23's sync-free EAGLE verify plan (SGLANG_OPT_FLASHINFER_VERIFY_HOST_PLAN=1, default off:
srt/environ.py:1566), ported so that kbench can run it without SGLang (the GPU host has no sglang).

SGLang installs `fast_prefill_plan` (layers/attention/flashinfer_backend.py:180-316) as the verify wrapper's
begin_forward at capture when the variable is set, the spec is EAGLE with topk 1, seq_lens_cpu is known, the
backend is fa2 over one full-attention wrapper and the KV dtype is bf16/fp16/fp8 (888-902). Every replay then
builds the host offsets from seq_lens_cpu (2366-2392) and calls it: the CUDA-graph buffers refreshed
device-to-device, the draft mask packed on the GPU by a Triton kernel into the wrapper's mask buffer with offsets
known on the host (`pack_verify_mask_into`, sglang/kernels/ops/speculative/pack_verify_mask.py; page size 1 only,
flashinfer_backend.py:264-266), and FlashInfer's planner called directly with host tensors: no device-to-host
read, so no wait for the GPU. `fast_prefill_plan` below is SGLang's function with its multi-item arguments left
out (None in verify); tests/test_routes.py runs SGLang's own source of it (read from the wheel) beside this one on
a recording wrapper and requires the same calls.
"""
from __future__ import annotations

import functools
from typing import Callable


@functools.lru_cache(maxsize=1)
def _pack_kernel():
    """SGLang's Triton kernel (pack_verify_mask.py, Apache-2.0), made on first use (Triton is on the GPU host)."""
    import triton
    import triton.language as tl

    @triton.jit
    def _pack_verify_mask_kernel(mask, kv_indptr, packed_indptr, output, Q: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        byte = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        bit = tl.arange(0, 8)
        kv_start = tl.load(kv_indptr + row)
        kv_end = tl.load(kv_indptr + row + 1)
        count = (kv_end - kv_start) * Q
        offsets = byte[:, None] * 8 + bit[None, :]
        values = tl.load(mask + kv_start * Q + offsets, offsets < count, other=0)
        packed = tl.sum(values.to(tl.uint32) << bit[None, :], axis=1)
        start = tl.load(packed_indptr + row)
        tl.store(output + start + byte, packed.to(tl.uint8), byte < tl.cdiv(count, 8))

    return _pack_verify_mask_kernel, triton.cdiv


def pack_verify_mask_into(mask, kv_indptr, packed_indptr, output, *, batch_size, query_width, max_kv_len):
    kernel, cdiv = _pack_kernel()
    kernel[(batch_size, cdiv(query_width * max_kv_len, 8 * 256))](
        mask.contiguous().view(-1), kv_indptr, packed_indptr, output, Q=query_width, BLOCK=256)


def fast_prefill_plan(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads,
                      num_kv_heads, head_dim_qk, page_size, head_dim_vo=None, custom_mask=None, causal=False,
                      window_left=-1, q_data_type="float16", kv_data_type=None, o_data_type=None, non_blocking=True,
                      fixed_split_size=None, *, qo_indptr_host, kv_indptr_host, kv_lens_host, max_q_len, max_kv_len,
                      uniform_verify_width=None, pack=None, planner_tail: tuple = ()) -> None:
    """flashinfer_backend.py:180-316 (`self` is FlashInfer's BatchPrefillWithPagedKVCacheWrapper); `pack` is the
    mask packer (SGLang's Triton kernel; the CPU test hands a torch one); `planner_tail`: the planner's arguments
    after SGLang's 20 in a newer FlashInfer (`planner_tail()`)."""
    import torch

    assert self.is_cuda_graph_enabled, "fast_prefill_plan is cuda-graph only"
    assert getattr(self, "_backend", None) == "fa2", "fast_prefill_plan supports the fa2 backend only"
    assert getattr(self, "_cached_module", None) is not None, "fast_prefill_plan needs a prior real plan()"
    if head_dim_vo is None:
        head_dim_vo = head_dim_qk
    batch_size = len(paged_kv_last_page_len)
    total_num_rows = int(qo_indptr_host[-1])
    self._qo_indptr_last = total_num_rows
    self._max_q_len = max_q_len
    self._max_kv_len = max_kv_len
    if self._max_total_num_rows is None:
        self._max_total_num_rows = total_num_rows
    self._batch_size = batch_size
    self._num_qo_heads = num_qo_heads
    self._num_kv_heads = num_kv_heads
    self._prefix_len_ptr = None
    self._token_pos_in_items_ptr = None
    self._token_pos_in_items_len = 0
    self._max_item_len_ptr = None
    # the CUDA-graph input buffers refreshed (device to device, non-blocking)
    self._qo_indptr_buf.copy_(qo_indptr, non_blocking=non_blocking)
    self._paged_kv_indptr_buf.copy_(paged_kv_indptr, non_blocking=non_blocking)
    self._paged_kv_last_page_len_buf.copy_(paged_kv_last_page_len, non_blocking=non_blocking)
    self._paged_kv_indices_buf[: len(paged_kv_indices)].copy_(
        paged_kv_indices, non_blocking=(paged_kv_indices.device == self.device) and non_blocking)
    if custom_mask is not None:
        assert uniform_verify_width is not None and page_size == 1
        packed_lengths = (kv_lens_host * uniform_verify_width + 7) // 8
        packed_indptr = torch.zeros(batch_size + 1, dtype=torch.int32, device="cpu")
        packed_indptr[1:] = torch.cumsum(packed_lengths, dim=0)
        assert int(packed_indptr[-1]) <= self._custom_mask_buf.numel()
        self._mask_indptr_buf.copy_(packed_indptr, non_blocking=non_blocking)
        (pack or pack_verify_mask_into)(custom_mask, paged_kv_indptr, self._mask_indptr_buf, self._custom_mask_buf, batch_size=batch_size,
             query_width=uniform_verify_width, max_kv_len=max_kv_len)
    self._cached_q_data_type = q_data_type
    self._cached_kv_data_type = kv_data_type if kv_data_type is not None else q_data_type
    self._cached_o_data_type = o_data_type
    self._block_tables = None
    args = [self._float_workspace_buffer, self._int_workspace_buffer, self._pin_memory_int_workspace_buffer,
            qo_indptr_host, kv_indptr_host, kv_lens_host, self._max_total_num_rows or total_num_rows, batch_size,
            num_qo_heads, num_kv_heads, page_size, self.is_cuda_graph_enabled, head_dim_qk, head_dim_vo, causal,
            window_left, fixed_split_size if fixed_split_size is not None else -1, False, 0, 0, *planner_tail]
    self._plan_info = self._cached_module.plan(*args)


def planner_tail() -> tuple:
    """SGLang 0.5.23 pins FlashInfer 0.7.2, whose fa2 planner takes the 20 arguments fast_prefill_plan passes;
    0.7.4's takes a 21st, fixed_uniform_q_len, which its own plan() passes as False (prefill.py:4337-4338)."""
    import flashinfer
    from packaging.version import Version

    return (False,) if Version(flashinfer.__version__) >= Version("0.7.4") else ()


def host_plan_kwargs(seq_lens_cpu, num_tokens_per_req: int) -> dict:
    """What SGLang's call_begin_forward builds on the host for an EAGLE verify replay (flashinfer_backend.py:
    2366-2392): seq_lens_cpu is the committed prefix; the KV layout adds the whole candidate window after it."""
    import torch

    bs = len(seq_lens_cpu)
    seq_lens_cpu_i32 = seq_lens_cpu.to(torch.int32) + num_tokens_per_req
    qo_indptr_host = torch.arange(0, (bs + 1) * num_tokens_per_req, step=num_tokens_per_req, dtype=torch.int32,
                                  device="cpu")
    kv_indptr_host = torch.zeros(bs + 1, dtype=torch.int32, device="cpu")
    kv_indptr_host[1:] = torch.cumsum(seq_lens_cpu_i32, dim=0)
    return dict(qo_indptr_host=qo_indptr_host, kv_indptr_host=kv_indptr_host, kv_lens_host=seq_lens_cpu_i32,
                max_q_len=num_tokens_per_req, max_kv_len=int(seq_lens_cpu_i32.max()),
                uniform_verify_width=num_tokens_per_req)


def verify_host_plan(wrapper, args: tuple, kw: dict, seq_lens_cpu, num_tokens_per_req: int,
                     pack=None) -> Callable[[], None]:
    """One replay's host work: the host offsets built, then fast_prefill_plan (args, kw: plan()'s, page size 1)."""
    kw = {k: v for k, v in kw.items() if k != "sm_scale"}  # set by the first plan(); SGLang's replay passes none
    tail = planner_tail()

    def step():
        fast_prefill_plan(wrapper, *args, **kw, **host_plan_kwargs(seq_lens_cpu, num_tokens_per_req), pack=pack,
                          planner_tail=tail)

    return step
