"""Where FlashInfer keeps compiled modules, and which of them are there (`kbench env`, `kbench prebuild --list`).

FlashInfer 0.7.4 (flashinfer/jit/env.py) compiles a module on first use into its JIT cache,
FLASHINFER_WORKSPACE_BASE (default: the home folder) / .cache/flashinfer/<version>/<arch>/cached_ops/<module>/,
and loads without compiling the AOT modules in its package, flashinfer/data/aot/<module>/<module>.so, or in
an installed flashinfer-jit-cache wheel (get_aot_artifacts). flashinfer-cubin holds the trtllm-gen cubins
that would otherwise be downloaded. Nothing here imports FlashInfer (env stays quick); module_state does,
through the JitSpec it is given.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kbench.errors import BadInput

PACKAGES = ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache")
WORKSPACE_VAR = "FLASHINFER_WORKSPACE_BASE"


def workspace_base() -> tuple[Path, str]:
    """(the folder FlashInfer's cache lives under, where that choice came from)."""
    base = os.environ.get(WORKSPACE_VAR)
    return (Path(base), WORKSPACE_VAR) if base else (Path.home(), "default: the home folder")


def use_jit_cache(folder: str | Path, option: str = "--jit-cache", create: bool = True) -> str:
    """Make `folder` the base of FlashInfer's JIT cache (DIR/.cache/flashinfer/VERSION/ARCH) for this process and
    the workers it starts (FLASHINFER_WORKSPACE_BASE; `kbench sweep --jit-cache`, `kbench prebuild --jit-cache`);
    returns its absolute path ('~' read as a shell reads it). FlashInfer reads the variable once, when
    flashinfer.jit.env is imported: later, another folder would be silently ignored, so that is refused
    (BadInput), as is a folder that cannot be made or written (create=False: checked, not made; FlashInfer makes
    it when it first writes there)."""
    import sys

    from kbench.runs.outputs import writable_dir

    if not isinstance(folder, (str, os.PathLike)):
        raise BadInput(f"{option} {folder!r}: give a folder")
    folder = Path(folder).expanduser() if str(folder).strip() else folder
    path = os.path.abspath(writable_dir(folder, option, create=False))  # checked; made only if it is to be used
    env = sys.modules.get("flashinfer.jit.env")
    if env is not None and Path(getattr(env, "FLASHINFER_BASE_DIR", path)).resolve() != Path(path).resolve():
        raise BadInput(f"{option} {folder}: FlashInfer is already loaded with its JIT cache under "
                       f"{env.FLASHINFER_BASE_DIR}; set the cache before FlashInfer is imported")
    if create:
        writable_dir(path, option)
    os.environ[WORKSPACE_VAR] = path
    return path


def cache_dir() -> Path:
    return workspace_base()[0] / ".cache" / "flashinfer"


def aot_dir() -> Path | None:
    """flashinfer/data/aot of the installed FlashInfer (found without importing it), None without FlashInfer."""
    spec = importlib.util.find_spec("flashinfer")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "data" / "aot"


def tree_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:  # removed while walking (another process cleaning its tmp)
                pass
    return total


def modules_in(folder: Path) -> list[str]:
    """Module names with a built library: <folder>/<module>/<module>.so."""
    if not folder.is_dir():
        return []
    return sorted(d.name for d in folder.iterdir() if (d / f"{d.name}.so").is_file())


@dataclass
class CacheInfo:
    workspace_base: str
    workspace_from: str
    cache_dir: str
    cache_bytes: int
    # "<flashinfer version>/<arch>" -> number of built modules in its cached_ops
    builds: dict[str, int] = field(default_factory=dict)
    aot_dir: str | None = None
    aot_modules: int = 0
    packages: dict[str, str | None] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def cache_info() -> CacheInfo:
    base, origin = workspace_base()
    cache = cache_dir()
    builds = {}
    if cache.is_dir():
        for version in sorted(p for p in cache.iterdir() if p.is_dir() and p.name != "cubins"):
            for arch in sorted(p for p in version.iterdir() if p.is_dir()):
                builds[f"{version.name}/{arch.name}"] = len(modules_in(arch / "cached_ops"))
    aot = aot_dir()
    return CacheInfo(workspace_base=str(base), workspace_from=origin, cache_dir=str(cache),
                     cache_bytes=tree_bytes(cache) if cache.is_dir() else 0, builds=builds,
                     aot_dir=str(aot) if aot else None, aot_modules=len(modules_in(aot)) if aot else 0,
                     packages={p: package_version(p) for p in PACKAGES})


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def module_state(spec) -> str:
    """'aot' (FlashInfer loads it without compiling), 'cached' (built in the JIT cache: FlashInfer's ninja finds
    it up to date) or 'missing' (the first use compiles it)."""
    if spec.is_aot:
        return "aot"
    return "cached" if spec.jit_library_path.is_file() else "missing"


def module_file(spec) -> Path | None:
    """The library FlashInfer would load for this module, None when it is missing."""
    state = module_state(spec)
    return spec.aot_path if state == "aot" else spec.jit_library_path if state == "cached" else None
