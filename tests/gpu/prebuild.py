"""Build, on a machine without a GPU, the FlashInfer modules that H200 sweeps will need, as AOT artifacts.

The lent H200 costs device time by the second and its first-use JIT compiles take minutes (about 210 s
for a draft-extend grid on 16 cores). FlashInfer builds for the architectures in FLASHINFER_CUDA_ARCH_LIST
when it is set (its AOT path for hosts without a GPU), so this script builds every module a list of sweeps
needs here with nvcc (CUDA 13, as on the H200 machine), and packs them as `flashinfer/data/aot/<module>/
<module>.so`, which `tests/gpu/h200.sh` unpacks into the bundle (FlashInfer loads AOT modules without
compiling). It asks FlashInfer's own module generators, with the arguments FlashInfer's entry points pass
for each kbench kernel (flashinfer 0.7.4, SM90), so module names match what the H200 run looks up.

    python tests/gpu/prebuild.py --out .fi-cache/aot.tgz \\
        "--scenario draft-extend --kv-len 4096 --batch-size 16,64" "--scenario gpt-oss --q-len 4"

Each quoted argument is a `kbench sweep` grid (the axis options only). Needs: nvcc on PATH and CUDA_HOME,
FlashInfer of the bundle's version importable (a Python 3.11 venv with flashinfer-python==0.7.4),
a libcuda.so to link against (a stub with soname libcuda.so.1 where no driver is installed; --stub makes
one), and for fmha-v2 and fa3 the cuBLAS and cuRAND headers (a CUDA toolkit without them: unzip
nvidia/cu13/include from the nvidia-cublas and nvidia-curand wheels and pass that folder as --include).
A module that fails to build is reported and left to the H200's JIT. On the H200 itself the same command
builds, in the background, what the carried AOT modules lack (they are skipped).
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

H200 = dict(cuda=True, name="NVIDIA H200", sm=90, total_memory=143 << 30, l2_bytes=60 << 20, multiprocessors=132)


def cases_of(arg: str):
    """The scenario and cases of one `kbench sweep` grid given as its options, parsed by the sweep command's own
    option parser (its flags, short ones and `--opt=value` included; a bad flag: one line, exit 2)."""
    from kbench.cases.axes import GRID, axes_with
    from kbench.cli.sweep_cmd import sweep
    from kbench.cases.scenario import apply_overrides, load_scenario

    import click

    from kbench.errors import BadInput

    try:
        params = sweep.make_context("sweep", shlex.split(arg)).params  # parses only: the command does not run
        names = [a.name for a in axes_with(GRID)] + ["model", "heads", "kernels"]
        sc = apply_overrides(load_scenario(params["scenario"]), **{k: params.get(k) for k in names})
        return sc, sc.cases()
    except (click.ClickException, BadInput) as e:  # kbench's bad-input convention: one line, exit 2
        msg = e.format_message() if isinstance(e, click.ClickException) else str(e)
        print(f"error: prebuild: {arg!r}: {msg}", file=sys.stderr)
        raise SystemExit(2) from None


def specs_for(kernel: str, case):
    """FlashInfer JitSpecs the kernel's call builds for this case on SM90 (flashinfer 0.7.4)."""
    import torch
    from flashinfer.jit.attention import gen_batch_prefill_module, gen_fmha_v2_module
    from flashinfer.jit.xqa import gen_xqa_module, ragged_q_changes_build
    from flashinfer.prefill import _gen_batch_prefill_primary_module

    from kbench.kernels.inputs import torch_dtype

    dt, kv = torch_dtype(case.dtype), torch_dtype(case.kv_dtype)
    qd = torch.float8_e4m3fn if case.q_dtype == "fp8" else dt
    window = case.window_left >= 0
    if kernel in ("trtllm-decode", "trtllm-decode-ragged"):
        xqa = lambda q, ragged: gen_xqa_module(dt, kv, case.page_size, case.head_dim, case.group, window, dt, q,
                                               ragged and ragged_q_changes_build(q, case.group))
        if kernel == "trtllm-decode":  # padded to the batch's longest draft: any of 1..q_len when q is ragged
            return [xqa(m, False) for m in ([case.q_len] if case.q_dist == "fixed" else range(1, case.q_len + 1))]
        # the batch's longest draft is any of 1..q_len (q_cu_seq_lens needs > 1; all 1 runs plain decode)
        return [xqa(1, False)] + [xqa(m, True) for m in range(2, case.q_len + 1)]
    if kernel in ("fa2-prefill", "decode-wrapper"):
        args = (dt, kv, dt, torch.int32, case.head_dim, case.head_dim, 0, window, False, False)
        # fa2 loads its paged_kv_stride_independent module only when K and V strides differ (prefill.py,
        # get_batch_prefill_module's paged_run); kbench's K and V are halves of one tensor, equal strides
        mods = [_gen_batch_prefill_primary_module("fa2", *args)]
        if kernel == "fa2-prefill" and case.tree != "chain":  # plan(custom_mask=) packs it: segment_packbits
            from flashinfer.jit.quantization import gen_quantization_module

            mods.append(gen_quantization_module())
        return mods
    if kernel == "fa3-prefill":
        return [gen_batch_prefill_module("fa3", dt, kv, dt, torch.int32, case.head_dim, case.head_dim, 0, window,
                                         False, False)]
    if kernel == "trtllm-fmha-v2":
        return [gen_fmha_v2_module(f"Q_PAGED_KV_{case.kv_layout}", qd, dt if qd == torch.float8_e4m3fn else None)]
    return []


def plan(grids: list[str]) -> dict:
    """{module name: spec} over every supported (kernel, case) of the grids, as the sweep would filter them."""
    from kbench.device import DeviceInfo
    from kbench.kernels.registry import select
    from kbench.engine.measure import kernel_reason

    dev = DeviceInfo(**H200)
    specs, seen = {}, set()  # generating a spec writes its sources (fmha-v2: seconds): once per jit_key
    for g in grids:
        sc, cases = cases_of(g)
        for case in cases:
            for k in select(sc.kernels):  # 'all' as the sweep expands it
                if k.path == "reference" or kernel_reason(k, dev, case) or (k.name, k.jit_key(case)) in seen:
                    continue
                seen.add((k.name, k.jit_key(case)))
                for s in specs_for(k.name, case):
                    specs.setdefault(s.name, s)
    return specs


def build(spec) -> tuple[str, float, str | None]:
    t0 = time.perf_counter()
    try:
        spec.build()
        return spec.name, time.perf_counter() - t0, None
    except Exception as e:  # noqa: BLE001 - reported, left to the H200's JIT
        return spec.name, time.perf_counter() - t0, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("grids", nargs="+", help="kbench sweep axis options, one quoted string per grid")
    p.add_argument("--out", default=".fi-cache/aot.tgz")
    p.add_argument("--arch", help="FLASHINFER_CUDA_ARCH_LIST (default: 9.0a without a GPU, the device's with one)")
    p.add_argument("--parallel", type=int, default=1, help="modules built at once (each uses MAX_JOBS nvcc jobs)")
    p.add_argument("--list", action="store_true", help="print the modules and stop")
    p.add_argument("--pack-only", action="store_true", help="pack the modules already built, build nothing")
    p.add_argument("--stub", action="store_true", help="make a libcuda.so stub to link against (no driver here)")
    p.add_argument("--include", help="an extra header folder for nvcc and c++ (cublasLt.h, curand_kernel.h)")
    a = p.parse_args()
    from kbench.errors import BadInput
    from kbench.runs.outputs import writable_dir

    try:  # before minutes of building: the archive must be writable
        if Path(a.out).is_dir():
            raise BadInput(f"--out {a.out}: a folder; give the archive's file name (e.g. .fi-cache/aot.tgz)")
        writable_dir(Path(a.out).parent, "--out")
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import torch

    if a.arch or not torch.cuda.is_available():  # on the GPU itself FlashInfer reads the device's arch
        os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", a.arch or "9.0a")
    if "CUDA_HOME" not in os.environ and Path("/usr/local/cuda/bin/nvcc").exists():
        os.environ["CUDA_HOME"] = "/usr/local/cuda"
    if a.stub:
        stub = Path(tempfile.mkdtemp(prefix="cudastub-"))
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(stub / "libcuda.so"), "-Wl,-soname,libcuda.so.1",
                        "-x", "c", "-"], input=b"void kbench_cuda_stub(void){}\n", check=True)
        os.environ["LIBRARY_PATH"] = f"{stub}:{os.environ.get('LIBRARY_PATH', '')}"
    if a.include:
        os.environ["NVCC_APPEND_FLAGS"] = f"{os.environ.get('NVCC_APPEND_FLAGS', '')} -I{a.include}".strip()
        os.environ["CPATH"] = f"{a.include}:{os.environ.get('CPATH', '')}"
    specs = plan(a.grids)
    todo = [s for s in specs.values() if not s.jit_library_path.exists() and not s.is_aot]
    print(f"{len(specs)} modules, {len(specs) - len(todo)} already built", flush=True)
    if a.list:
        for s in specs.values():
            print(("  built " if s.jit_library_path.exists() else "  todo  ") + s.name)
        return 0
    failed = []
    if a.pack_only:
        todo = []
    with ThreadPoolExecutor(a.parallel) as ex:  # a line as each module finishes, not in submission order
        for i, fut in enumerate(as_completed([ex.submit(build, s) for s in todo]), 1):
            name, secs, err = fut.result()
            print(f"[{i}/{len(todo)}] {secs:6.0f} s {'FAILED ' + err if err else 'ok'}  {name}", flush=True)
            if err:
                failed.append(name)
    import io

    import flashinfer

    from kbench.runs import atomic
    built = [s for s in specs.values() if s.jit_library_path.exists()]
    stamp = (flashinfer.__version__ + "\n").encode()  # h200.sh drops modules built for another FlashInfer

    def pack(tmp: Path) -> None:
        with tarfile.open(tmp, "w:gz") as tar:
            info = tarfile.TarInfo("aot/FLASHINFER_VERSION")
            info.size = len(stamp)
            tar.addfile(info, io.BytesIO(stamp))
            for s in built:
                tar.add(s.jit_library_path, arcname=f"aot/{s.name}/{s.jit_library_path.name}")

    out = atomic.write_with(a.out, pack)  # a temporary file renamed: an old archive is never half replaced
    n = len(built)
    print(f"wrote {out} ({out.stat().st_size / 2**20:.1f} MiB, {n} modules); {len(failed)} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
