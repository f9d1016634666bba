"""Carried AOT modules (flashinfer/data/aot/<module>/<module>.so: FlashInfer loads them without compiling).

tests/gpu/h200.sh unpacks .fi-cache/aot.tgz (made by tests/gpu/prebuild.py without a GPU, or by the
aot-pack step from an H200 run's JIT cache) into the bundle; the `aot` step then runs this file on the
machine, which removes what must not be loaded there, so the JIT builds it instead:
  - every module, when the archive's FLASHINFER_VERSION stamp names another FlashInfer (same module names,
    other sources: never load them);
  - a module whose .so does not load (built against another CUDA or tvm-ffi).
    python3 tests/gpu/campaign_aot.py AOT_DIR     # prints one JSON line: what was kept and removed
"""
from __future__ import annotations

import contextlib
import json
import shutil
import sys
from pathlib import Path
from typing import Callable

STAMP = "FLASHINFER_VERSION"


def aot_dir(site: Path) -> Path:
    return site / "flashinfer" / "data" / "aot"


def check(aot: Path, version: str, load: Callable[[Path], object]) -> dict:
    """Remove the modules of `aot` that must not be loaded by FlashInfer `version`; load(path) raises for a
    module that does not load. {built_for, version, kept, removed: [[module, why]...]}"""
    stamp = aot / STAMP
    built_for = stamp.read_text().strip() if stamp.exists() else version  # an unstamped archive: assumed ours
    removed = []
    if built_for != version:
        for d in sorted(p for p in aot.iterdir() if p.is_dir()):
            shutil.rmtree(d)
            removed.append([d.name, f"built for FlashInfer {built_for}"])
        stamp.unlink()
    for so in sorted(aot.glob("*/*.so")):
        try:
            load(so)
        except Exception as e:  # noqa: BLE001 - any failure to load: the JIT builds it instead
            shutil.rmtree(so.parent)
            removed.append([so.parent.name, (str(e).strip().splitlines() or [type(e).__name__])[0][:160]])
    kept = sorted(so.parent.name for so in aot.glob("*/*.so"))
    return {"built_for": built_for, "version": version, "kept": kept, "removed": removed}


def hidden(site: Path) -> Path:
    return aot_dir(site).with_name("aot.hidden")


@contextlib.contextmanager
def without_aot(site: Path):
    """Within the block FlashInfer sees no AOT module (the folder is moved aside, and back after)."""
    aot, away = aot_dir(site), hidden(site)
    moved = aot.is_dir()
    if moved:
        aot.rename(away)
    try:
        yield
    finally:
        if moved:
            restore_hidden(site)


def restore_hidden(site: Path) -> None:
    """Put back an AOT folder moved aside by a process that was killed inside without_aot."""
    aot, away = aot_dir(site), hidden(site)
    if away.is_dir():
        if aot.exists():  # unpacked again meanwhile (a second h200.sh on a warm machine): that one is current
            shutil.rmtree(away)
        else:
            away.rename(aot)


def main(argv: list[str]) -> int:
    import flashinfer
    import tvm_ffi

    print(json.dumps(check(Path(argv[0]), flashinfer.__version__, lambda so: tvm_ffi.load_module(str(so)))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
