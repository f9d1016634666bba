"""The FlashInfer modules of a list of sweeps, built ahead as an AOT archive: a thin call of `kbench prebuild`.

    python tests/gpu/prebuild.py --out .fi-cache/aot.tgz \\
        "--scenario draft-extend --kv-len 4096 --batch-size 16,64" "--scenario gpt-oss --q-len 4"
runs
    kbench prebuild --grid "<grid>"... --archive .fi-cache/aot.tgz [--arch 9.0a without a GPU] [--parallel N]

Each quoted argument is a `kbench sweep` grid (its grid options only). Without a GPU the modules are built for
--arch (default 9.0a, the H200) with nvcc (CUDA 13, as on the H200 machine), linked against a stub libcuda where no
driver is installed; fmha-v2 and fa3 need the cuBLAS and cuRAND headers (--include DIR: nvidia/cu13/include
unzipped from the nvidia-cublas and nvidia-curand wheels). tests/gpu/h200.sh unpacks the archive into the
bundle's flashinfer/data/ (the layout `kbench prebuild --load` installs); on the H200 itself the same command
builds, in the background, what the carried modules lack (they are reported as aot and packed as they are).
"""
from __future__ import annotations

import argparse
import sys


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("grids", nargs="+", help="kbench sweep grid options, one quoted string per grid")
    p.add_argument("--out", default=".fi-cache/aot.tgz", help="the archive")
    p.add_argument("--arch", help="the CUDA architecture (default: 9.0a without a GPU, the GPU's with one)")
    p.add_argument("--parallel", type=int, help="modules built at once")
    p.add_argument("--list", action="store_true", help="list the modules and stop")
    p.add_argument("--pack-only", action="store_true", help="pack the modules already built, build nothing")
    p.add_argument("--include", action="append", default=[], help="an extra header folder (cublasLt.h, curand_kernel.h)")
    p.add_argument("--stub", action="store_true", help="(kept for old command lines: kbench makes the stub itself)")
    a = p.parse_args()
    import torch

    from kbench.cli.main import cli

    args = ["prebuild", *[x for g in a.grids for x in ("--grid", g)]]
    arch = a.arch or (None if torch.cuda.is_available() else "9.0a")
    args += ["--arch", arch] if arch else []
    args += ["--list"] if a.list else ["--archive", a.out] + (["--no-build"] if a.pack_only else [])
    args += ["--parallel", str(a.parallel)] if a.parallel else []
    args += [x for d in a.include for x in ("--include", d)]
    return cli.main(args=args, prog_name="kbench")  # exits with the command's code


if __name__ == "__main__":
    sys.exit(main())
