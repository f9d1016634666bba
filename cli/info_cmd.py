"""`kbench kernels` and `kbench env`: what is available here, and why not."""
from __future__ import annotations

import json

import click
from rich.table import Table

from kbench.cli.console import make_console
from kbench.cli.options import examples

from kbench.cases.case import Case
from kbench.timing.probe import probe_device
from kbench.kernels.registry import all_kernels
from kbench.cases.models import MODELS
from kbench.engine.measure import kernel_reason


@click.command("kernels", epilog=examples(
    "kbench kernels", "kbench kernels --models --json", "kbench kernels --test-only"))
@click.option("--models", is_flag=True, help="Also list the named head configurations.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--test-only", "test_only", is_flag=True,
              help="Also list the test-only kernels (fault injection for kbench's own tests, never in 'all'), "
                   "apart and marked test only.")
def kernels_cmd(models, as_json, test_only):
    """List every kernel with its availability on this machine and the reason when it is not.

    Test-only kernels (e.g. test-oob-write, which writes out of bounds on purpose to show crash isolation)
    are left out unless --test-only."""
    dev = probe_device()
    probe = Case(8, 4, 4096, 32, 8, 128, 64, "HND", "bf16", "bf16")
    mla_probe = Case(8, 4, 4096, **MODELS["deepseek-v3"].case_fields())  # MLA kernels: DeepSeek-V3's heads
    data, tests = [], []
    for k in all_kernels():
        if k.test_only and not test_only:
            continue
        reason = kernel_reason(k, dev, probe if "gqa" in k.attentions else mla_probe)
        (tests if k.test_only else data).append(
            {"kernel": k.name, "path": k.path, "backend": k.backend(dev), "available": reason is None,
             "reason": reason or "", "kv_dtypes": list(k.kv_dtypes), "call": k.description,
             **({"test_only": True} if k.test_only else {})})
    if as_json:
        click.echo(json.dumps({"device": dev.to_dict(), "kernels": data,
                               **({"test_only_kernels": tests} if test_only else {})}, indent=2))
        return
    c = make_console()
    t = Table(title=f"kernels on {dev.name} (SM{dev.sm}), checked at a Llama-3-8B bf16 HND shape (MLA kernels: "
                    "DeepSeek-V3, 128 heads, bf16)", header_style="bold")
    for col in ("kernel", "path", "backend", "available", "why not / call"):
        t.add_column(col)
    for d in data:
        t.add_row(d["kernel"], d["path"], d["backend"], "[green]yes[/]" if d["available"] else "[red]no[/]",
                  d["reason"] or f"[dim]{d['call']}[/]")
    c.print(t)
    if tests:
        tt = Table(title="test only (never in 'all'; for kbench's own fault tests, run only when named)",
                   header_style="bold")
        for col in ("kernel", "path", "available", "what it does"):
            tt.add_column(col)
        for d in tests:
            tt.add_row(d["kernel"], d["path"], "[green]yes[/]" if d["available"] else "[red]no[/]",
                       f"{d['call']}" + (f" ({d['reason']})" if d["reason"] else ""))
        c.print(tt)
    if models:
        m = Table(title="models (head config per rank)", header_style="bold")
        for col in ("name", "attention", "q heads", "kv heads", "head_dim", "group"):
            m.add_column(col)
        for name, h in MODELS.items():
            # MLA: one latent KV head; head_dim is the query/cache row, kv_lora_rank + rope (nope sets the scale)
            dim = (f"{h.head_dim} ({h.kv_lora_rank}+{h.qk_rope_head_dim}, nope {h.qk_nope_head_dim})" if h.is_mla
                   else str(h.head_dim))
            m.add_row(name, h.attention, str(h.num_qo_heads), str(h.num_kv_heads), dim, str(h.group))
        c.print(m)


@click.command("env", epilog=examples("kbench env", "kbench env --json", "kbench env --no-bandwidth"))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--no-bandwidth", is_flag=True, help="Skip the copy and read bandwidth measurements.")
def env_cmd(as_json, no_bandwidth):
    """The device, SM, versions, clocks and measured copy and read bandwidth (the read figure is the
    roofline ceiling of sweep's roofline_frac; env measures both on a CPU too, where a sweep records
    neither), and on a GPU the memory's theoretical peak from NVML, with a warning when the read ceiling
    is above it."""
    from kbench.engine.environment import environment
    from kbench.engine.jit_cache import CacheInfo

    info = environment(bandwidth=not no_bandwidth)
    cache = CacheInfo(**info["flashinfer_cache"])
    if as_json:
        click.echo(json.dumps(info, indent=2, default=str))
        return
    t = Table(title="kbench env", show_header=False)
    t.add_column("", style="bold")
    t.add_column("")
    for k, v in info.items():
        if k == "flashinfer_cache":
            continue
        if k == "total_memory" or k == "l2_bytes":
            v = f"{v / 2**20:,.0f} MiB" if v else "-"
        elif k == "copy_bandwidth_gbs" and v:
            v = f"{v:,.0f} GB/s (copy, bytes read + written)"
        elif k == "read_bandwidth_gbs" and v:
            v = f"{v:,.0f} GB/s (the fastest read-only probe over a buffer far above the cache: the roofline ceiling)"
        elif k == "memory_peak_gbs" and v:
            v = f"{v:,.0f} GB/s (theoretical: 2 x max memory clock x bus width, from NVML)"
        elif isinstance(v, dict):
            v = ", ".join(f"{a} {b:.0f}" for a, b in v.items()) or "-"
        t.add_row(k, "-" if v in (None, "") else str(v))
    for k, v in cache_rows(cache):
        t.add_row(k, v)
    make_console().print(t)


def cache_rows(c) -> list[tuple[str, str]]:
    """FlashInfer's compiled modules: the JIT cache (where, why there, size, builds per version/arch), the AOT
    modules installed in its package, and the prebuilt-kernel packages."""
    builds = ", ".join(f"{k}: {n} modules" for k, n in c.builds.items()) or "none"
    return [
        ("jit cache", f"{c.cache_dir} ({c.workspace_from}; {c.cache_bytes / 2**20:,.0f} MiB; {builds})"),
        ("aot modules", f"{c.aot_modules} in {c.aot_dir or '- (no FlashInfer)'} (kbench prebuild --load puts them there)"),
        ("fi packages", ", ".join(f"{p} {v or 'not installed'}" for p, v in c.packages.items())),
        ("grid modules", "kbench prebuild -s SCENARIO (the sweep's grid options) --list (without a GPU: --arch 9.0a): "
                         "which a grid needs, which are built"),
    ]
