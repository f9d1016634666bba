"""Names this kbench knows, for readers that must not import what they name: the kernels (kbench.kernels'
registry imports torch and FlashInfer, which `kbench select` never needs). tests/test_trust.py checks that the
registry registers exactly these."""
from __future__ import annotations

KERNEL_NAMES = ("trtllm-decode", "trtllm-decode-ragged", "decode-wrapper", "trtllm-context", "trtllm-fmha-v2",
                "fa2-prefill", "fa3-prefill", "vllm-fa3", "vllm-fa3-sgl-call", "flashmla", "trtllm-gen-mla",
                "flashinfer-mla-fa3", "flashinfer-mla-fa2", "sglang-fi-verify", "sglang-fi-extend",
                "sglang-trtllm-mha", "sglang-fa3", "sglang-flashmla", "sglang-fi-mla", "vllm-fi-decode",
                "vllm-fi-prefill", "vllm-flash-attn", "vllm-flashmla", "reference", "test-oob-write")


def unknown_kernel_note(kernel: str) -> str | None:
    """The one line a reader of a policy warns with when the policy names a kernel this kbench does not have (a
    policy from a newer kbench may); None for a known one."""
    if kernel in KERNEL_NAMES:
        return None
    return (f"warning: the policy names kernel {kernel!r}, which this kbench does not know (a policy from a newer "
            f"kbench?); answered as the policy says")
