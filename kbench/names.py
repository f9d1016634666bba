"""Names this kbench knows, for readers that must not import what they name: the kernels (kbench.kernels'
registry imports torch and FlashInfer, which `kbench select` never needs). tests/test_trust.py checks that the
registry registers exactly these."""
from __future__ import annotations

KERNEL_NAMES = ("trtllm-decode", "trtllm-decode-ragged", "decode-wrapper", "trtllm-context", "trtllm-fmha-v2",
                "fa2-prefill", "fa3-prefill", "vllm-fa3", "vllm-fa3-sgl-call", "flashmla", "trtllm-gen-mla",
                "flashinfer-mla-fa3", "flashinfer-mla-fa2", "vllm-fa3-mla", "vllm-fa3-mla-sgl-call",
                "sglang-fi-verify", "sglang-fi-extend", "sglang-trtllm-mha", "sglang-fa3", "sglang-flashmla",
                "sglang-fi-mla", "sglang-fi-mla-extend", "sglang-fa3-mla", "sglang-fi-verify-hostplan",
                "sglang-fa3-tree", "vllm-fi-decode", "vllm-fi-prefill", "vllm-fi-prefill-fa3", "vllm-flash-attn",
                "vllm-flashmla", "vllm-flash-attn-mla", "sglang-fi-draft-decode", "sglang-trtllm-mha-draft",
                "sglang-fa3-draft", "reference", "test-oob-write")

# an engine's route (kbench.kernels.routes) -> (the kernel it calls, the engine): a route is one engine's way of
# calling a kernel, so `kbench select` answers with the kernel and names the route beside it; the registry's own
# `runs` of each route is checked against this map by tests/test_recommend_answer.py
ROUTE_KERNEL = {"sglang-fi-verify": ("fa2-prefill", "sglang"), "sglang-fi-extend": ("fa2-prefill", "sglang"),
                "sglang-trtllm-mha": ("trtllm-decode", "sglang"), "sglang-fa3": ("vllm-fa3-sgl-call", "sglang"),
                "sglang-flashmla": ("flashmla", "sglang"), "sglang-fi-mla": ("flashinfer-mla-fa3", "sglang"),
                "sglang-fi-mla-extend": ("flashinfer-mla-fa3", "sglang"),
                "sglang-fa3-mla": ("vllm-fa3-mla-sgl-call", "sglang"),
                "sglang-fi-verify-hostplan": ("fa2-prefill", "sglang"),
                "sglang-fa3-tree": ("vllm-fa3-sgl-call", "sglang"), "vllm-fi-decode": ("trtllm-decode", "vllm"),
                "vllm-fi-prefill": ("fa2-prefill", "vllm"), "vllm-fi-prefill-fa3": ("fa3-prefill", "vllm"),
                "vllm-flash-attn": ("vllm-fa3", "vllm"), "vllm-flashmla": ("flashmla", "vllm"),
                "vllm-flash-attn-mla": ("vllm-fa3-mla", "vllm"),
                "sglang-fi-draft-decode": ("decode-wrapper", "sglang"),
                "sglang-trtllm-mha-draft": ("trtllm-decode", "sglang"),
                "sglang-fa3-draft": ("vllm-fa3-sgl-call", "sglang")}


# each route's eager twin (kbench.kernels.routes.eager: the engines without CUDA graphs), after the kernels above in
# the registry's order; SGLang's capture-only fast verify plan has none
EAGER_ROUTES = tuple(r + "-eager" for r in ROUTE_KERNEL if r != "sglang-fi-verify-hostplan")
_REGISTRY_ROUTES = tuple(n for n in KERNEL_NAMES if n in ROUTE_KERNEL)
KERNEL_NAMES = (KERNEL_NAMES[:KERNEL_NAMES.index("reference")]
                + tuple(r + "-eager" for r in _REGISTRY_ROUTES if r + "-eager" in EAGER_ROUTES)
                + KERNEL_NAMES[KERNEL_NAMES.index("reference"):])
ROUTE_KERNEL.update({r + "-eager": ROUTE_KERNEL[r] for r in _REGISTRY_ROUTES if r + "-eager" in EAGER_ROUTES})


def kernel_of(name: str) -> str:
    """The kernel a kernel or route name runs ('vllm-flashmla' -> 'flashmla'; a kernel is its own)."""
    return ROUTE_KERNEL.get(name, (name, ""))[0]


# a kernel's name as kbench's registry spells them (trtllm-decode, fa2-prefill): the pattern every kernel name of a
# run's rows (kbench.runs.store.check_rows) and of a policy (kbench.report.policy_schema) matches; it is printed,
# written in markdown and exported as code
KERNEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$"


def unknown_kernel_note(kernel: str) -> str | None:
    """The one line `kbench select` warns with when the policy's answer is a kernel this kbench does not have (a
    policy from a newer kbench may name one); None for a known one."""
    return unknown_kernels_note([kernel], "answered as the policy says")


def unknown_kernels_note(kernels, then: str) -> str | None:
    """One line naming every kernel of ``kernels`` this kbench does not have, and what the reader does with them
    (``then``); None when it knows them all."""
    unknown = sorted({k for k in kernels if k not in KERNEL_NAMES})
    if not unknown:
        return None
    return (f"warning: the policy names kernel{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}, "
            f"which this kbench does not know (a policy from a newer kbench?); {then}")


def policy_kernels(policy: dict) -> set[str]:
    """Every kernel a (checked) policy names: the rules' and cells' picks and the kernels timed in its cells."""
    out: set[str] = set()
    for g in policy.get("groups") or ():
        for r in g.get("rules") or ():
            out.add(r.get("kernel"))
        for c in g.get("cells") or ():
            out.add(c.get("kernel"))
            out.update(c.get("kernels_us") or ())
    out.discard(None)
    return out
