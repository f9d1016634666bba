"""`kbench prebuild`: build the FlashInfer modules a grid needs before the sweep, here or for another machine.

The plan is the sweep's own: the grid's cases, each (kernel, jit_key) the sweep would compile on the target
device (kbench.engine.jit.compile_targets), each kernel's modules (Kernel.jit_specs), deduplicated by the name
FlashInfer gives them. On a GPU host the modules are built for that GPU into FlashInfer's JIT cache, where the
sweep finds them. On a host without a GPU they are built for a named architecture (FLASHINFER_CUDA_ARCH_LIST,
FlashInfer's AOT route) and packed as an archive that `kbench prebuild --load` installs on the GPU host as AOT
modules, loaded without compiling. A JIT-cache library alone does not travel: FlashInfer's ninja would rebuild it
(its objects and absolute source paths belong to the machine that built it), while an AOT module is loaded as it
is (flashinfer/jit/core.py try_load, jit/env.py get_aot_artifacts).

The archive (a .tar.gz; tests/gpu/h200.sh unpacks the same layout into a bundle's flashinfer/data/):
    aot/KBENCH_PREBUILD.json     what it holds: FlashInfer version, architecture, modules with size and sha256
    aot/FLASHINFER_VERSION       the FlashInfer version alone
    aot/<module>/<module>.so     one library per module
"""
from __future__ import annotations

import atexit
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from kbench.cases.case import Case
from kbench.device import DeviceInfo
from kbench.engine import aot_archive
from kbench.engine.aot_archive import FORMAT, MANIFEST, read_manifest
from kbench.errors import BadInput, first_line
from kbench.values import int_in

STAMP = "aot/FLASHINFER_VERSION"
ARCH_RE = re.compile(r"^(\d+)\.(\d+)([af]?)$", re.ASCII)  # \d: 0-9 only (not '９')


# --- the target --------------------------------------------------------------------------------------------
def parse_arch(arch: str) -> int:
    """The SM number of a FlashInfer architecture name ('9.0a' -> 90): one architecture per prebuild."""
    m = ARCH_RE.match(arch.strip())
    if not m:
        raise BadInput(f"--arch: expected one CUDA architecture as FlashInfer names it (e.g. 9.0a for H100/H200, "
                       f"10.0a for B200), got {arch!r}")
    return int(m.group(1)) * 10 + int(m.group(2))


def target_device(arch: str | None, device_index: int = 0) -> DeviceInfo:
    """The device the plan filters kernels for, FlashInfer pointed at it before it is imported: --arch sets
    FLASHINFER_CUDA_ARCH_LIST (a host without a GPU, or another GPU than this one), else this machine's GPU."""
    os.environ.setdefault("FLASHINFER_LOGGING_LEVEL", "warning")  # its per-module INFO lines would cut the bar
    if arch is not None:
        sm = parse_arch(arch)
        os.environ["FLASHINFER_CUDA_ARCH_LIST"] = arch.strip()
        _check_not_imported(arch)
        return DeviceInfo(cuda=True, name=f"SM{sm} (--arch {arch.strip()})", sm=sm)
    from kbench.timing.probe import probe_device

    dev = probe_device(device_index, with_flashinfer=False)
    if not dev.cuda:
        raise BadInput("no GPU here: name the architecture to build for with --arch (e.g. 9.0a for H100/H200), "
                       "and --archive FILE to carry the modules to that machine")
    return dev


def _check_not_imported(arch: str) -> None:
    """FlashInfer reads the target into its JIT folder's name when it is imported: too late to change it then."""
    env = sys.modules.get("flashinfer.jit.env")
    if env is not None and env.FLASHINFER_WORKSPACE_DIR.name != arch.strip().replace(".", ""):
        raise BadInput(f"--arch {arch}: FlashInfer was imported for {env.FLASHINFER_WORKSPACE_DIR.name} already "
                       "(run the prebuild in its own process)")


def arch_name(device: DeviceInfo) -> str:
    """The architecture FlashInfer builds for on this GPU, as --arch names it ('9.0a'): the SM with the suffix of
    FlashInfer's JIT folder name ('90a'), which its CompilationContext derives from the GPU."""
    from flashinfer.jit import env

    tag = env.FLASHINFER_WORKSPACE_DIR.name
    return f"{device.sm // 10}.{device.sm % 10}{tag[-1] if tag[-1:].isalpha() else ''}"


# --- the plan ----------------------------------------------------------------------------------------------
@dataclass
class Module:
    name: str
    spec: object  # flashinfer.jit.core.JitSpec
    kernels: list[str] = field(default_factory=list)  # the kbench kernels that load it

    @property
    def state(self) -> str:
        from kbench.engine.jit_cache import module_state

        return module_state(self.spec)


def plan(kernels, cases: list[Case], device: DeviceInfo, joined: list[Module] | None = None, skip=None,
         needs: dict | None = None) -> list[Module]:
    """The modules the sweep of these cases compiles on this device, each once, in the order first needed;
    joined: the plan of other grids, which this one extends. skip(kernel, case) as compile_targets takes it;
    needs: filled with (kernel name, jit_key) -> the names of the modules it loads (the streamed sweep waits
    for them, kbench.engine.stream)."""
    from kbench.engine.jit import compile_targets

    by_name = {k.name: k for k in kernels}
    modules: dict[str, Module] = {m.name: m for m in joined or []}
    for key, job in compile_targets(kernels, cases, device, skip=skip).items():
        specs = by_name[job.kernel].jit_specs(device, job.case)
        if needs is not None:
            needs[key] = [s.name for s in specs]
        for spec in specs:
            m = modules.setdefault(spec.name, Module(spec.name, spec))
            if job.kernel not in m.kernels:
                m.kernels.append(job.kernel)
    return list(modules.values())


@dataclass
class PrebuildPlan:
    """What a prebuild builds: the target device, the modules of every grid (each once), what planning took, and
    the toolchain's notes for the user (a stub libcuda)."""
    device: DeviceInfo
    modules: list[Module]
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def scenario_list(scenarios) -> list:
    """One Scenario or several, as a list (BadInput for anything else)."""
    from kbench.cases.scenario import Scenario

    out = [scenarios] if isinstance(scenarios, Scenario) else list(scenarios) \
        if isinstance(scenarios, (list, tuple)) else None
    if not out or not all(isinstance(sc, Scenario) for sc in out):
        raise BadInput("give one or more scenarios (load_scenario(NAME), apply_overrides(...))")
    return out


def plan_prebuild(scenarios, arch: str | None = None, include: list[str] | tuple = (),
                  for_build: bool = True) -> PrebuildPlan:
    """The modules a sweep of each scenario compiles (`kbench prebuild`, one scenario per grid, joined each once),
    on this GPU or for `arch` ('9.0a') with or without a GPU here. The kernels are chosen first (an unknown name is
    refused before any work), then the target (FlashInfer pointed at it before it is imported), then, when the plan
    is for building, the toolchain (a module's spec may write its ninja file as it is planned)."""
    from kbench.kernels.registry import select

    chosen = [(sc, select(sc.kernels, sc.source)) for sc in scenario_list(scenarios)]
    if arch is not None and not isinstance(arch, str):
        raise BadInput(f"--arch {arch!r}: give the architecture as FlashInfer names it, a string such as '9.0a'")
    include = [include] if isinstance(include, (str, Path)) else list(include or ()) \
        if isinstance(include, (list, tuple)) or include is None else None
    if include is None or not all(isinstance(d, (str, os.PathLike)) for d in include):
        raise BadInput("--include: one folder or a list of folders")
    for d in include:
        if not Path(d).is_dir():
            raise BadInput(f"--include {d}: not a folder")
    device = target_device(arch)
    notes = toolchain(list(include)) if for_build else []
    t0 = time.perf_counter()
    modules: list[Module] = []
    for sc, kernels in chosen:
        modules = plan(kernels, sc.cases(), device, modules)
    if for_build:
        check_toolchain(modules, include)
    return PrebuildPlan(device, modules, time.perf_counter() - t0, notes)


def check_toolchain(modules: list[Module], include: list | tuple = ()) -> None:
    """Before any compile: every module still to build finds the CUDA library headers its sources include and the
    libraries it links (kbench.engine.headers), in the toolkit, the folders FlashInfer passes, --include or
    LIBRARY_PATH; BadInput in one line naming what is missing, for which kernels, and where to get it."""
    from kbench.engine import headers

    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    scanner, extra = headers.Scanner(), [Path(d) for d in include or ()]
    todo = [m for m in modules if m.state == "missing"]
    lacking = [(m, n) for m in todo for n in [headers.module_needs(m.spec, extra, Path(home) if home else None, scanner)]
               if n.headers or n.libraries]
    if not lacking:
        return
    libs: dict[str, list[str]] = {}  # library -> its missing headers, then kernels
    kernels: dict[str, list[str]] = {}
    for m, n in lacking:
        for h, lib in n.headers.items():
            libs.setdefault(lib, [])
            if h not in libs[lib]:
                libs[lib].append(h)
            kernels.setdefault(lib, [])
            kernels[lib] += [k for k in m.kernels if k not in kernels[lib]]
    parts = [f"{', '.join(sorted(hs))} ({lib}, for {', '.join(kernels[lib])})" for lib, hs in libs.items()]
    packages = sorted({headers.LIBRARY_HEADERS[p][1] for p in headers.LIBRARY_HEADERS
                       if headers.LIBRARY_HEADERS[p][0] in libs})
    linked = sorted({f"lib{name}.so ({', '.join(m.kernels)})" for m, n in lacking for name in n.libraries})
    fix = []
    if parts:
        fix.append(f"unpack the include folder of the {' and '.join(packages)} wheel{'s' if len(packages) > 1 else ''} "
                   f"(nvidia/cu13/include) or install the toolkit's {' and '.join(libs)} headers, and pass --include "
                   f"that folder")
    if linked:
        fix.append("put the libraries' folder on LIBRARY_PATH")
    raise BadInput(f"{len(lacking)} of the {len(todo)} modules to build need what this toolchain lacks: "
                   f"{'; '.join(parts + [f'no {x}' for x in linked])}. Nothing was built: {'; '.join(fix)}, "
                   f"or leave those kernels out with --kernels")


# --- building ----------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    module: str
    status: str  # built | cached | aot | failed
    seconds: float = 0.0
    reason: str = ""


def cuda_home_of(nvcc: str | None) -> Path | None:
    """The toolkit folder (the one with include/cuda.h) of the nvcc on PATH: nvcc's grandparent, or, for an nvcc
    that is a wrapper script elsewhere (/usr/local/bin/nvcc exec-ing /usr/local/cuda-13.0/bin/nvcc), the toolkit
    the script names; else /usr/local/cuda."""
    candidates = []
    if nvcc:
        candidates.append(Path(nvcc).resolve().parent.parent)
        try:
            head = Path(nvcc).read_bytes()[:4096]
        except OSError:
            head = b""
        if head.startswith(b"#!"):
            import re

            candidates += [Path(m.decode()).parent.parent for m in re.findall(rb"(/[^\s\"']+/bin/nvcc)", head)]
    candidates.append(Path("/usr/local/cuda"))
    return next((c for c in candidates if (c / "include" / "cuda.h").is_file() and (c / "bin" / "nvcc").exists()),
                None)


def toolchain(include: list[str] | None = None) -> list[str]:
    """Make the compiler side ready; returns notes for the user. CUDA_HOME from nvcc when unset; the extra header
    folders on nvcc's and c++'s paths; without a driver (no libcuda.so to link -lcuda against) a stub library
    with the driver's soname, which the driver replaces where the modules load."""
    notes = []
    if not os.environ.get("CUDA_HOME") and not os.environ.get("CUDA_PATH"):
        home = cuda_home_of(shutil.which("nvcc"))
        if home is None:
            raise BadInput("nvcc not found: install the CUDA toolkit (the version the GPU host's FlashInfer builds "
                           "with) and put it on PATH or set CUDA_HOME")
        os.environ["CUDA_HOME"] = str(home)
    for d in include or []:
        if not Path(d).is_dir():
            raise BadInput(f"--include {d}: not a folder")
        os.environ["NVCC_APPEND_FLAGS"] = f"{os.environ.get('NVCC_APPEND_FLAGS', '')} -I{Path(d).resolve()}".strip()
        os.environ["CPATH"] = f"{Path(d).resolve()}{os.pathsep}{os.environ.get('CPATH', '')}".rstrip(os.pathsep)
    cuda = Path(os.environ.get("CUDA_HOME") or os.environ["CUDA_PATH"])
    if not _has_libcuda(cuda):
        stub = Path(tempfile.mkdtemp(prefix="kbench-cudastub-"))
        atexit.register(shutil.rmtree, stub, True)
        cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("c++")
        if cc is None:
            raise BadInput("no libcuda.so to link against and no C compiler to make a stub of it")
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(stub / "libcuda.so"), "-Wl,-soname,libcuda.so.1", "-x", "c",
                        "-"], input=b"void kbench_cuda_stub(void){}\n", check=True, capture_output=True)
        os.environ["LIBRARY_PATH"] = f"{stub}{os.pathsep}{os.environ.get('LIBRARY_PATH', '')}".rstrip(os.pathsep)
        notes.append("no libcuda.so where the linker looks (no driver here, or its runtime package only): linking "
                     "against a stub; the driver's libcuda.so.1 is what loads on the GPU host")
    return notes


def _has_libcuda(cuda: Path) -> bool:
    """A libcuda.so for `-lcuda`: FlashInfer links with -L$CUDA_HOME/lib64 and lib64/stubs, ld adds its own paths."""
    dirs = os.environ.get("LIBRARY_PATH", "").split(os.pathsep) + [
        str(cuda / "lib64"), str(cuda / "lib64" / "stubs"), "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64", "/usr/lib"]
    return any(d and (Path(d) / "libcuda.so").exists() for d in dirs)


def failure_reason(e: BaseException) -> str:
    """The line of a failed build that says why (a compiler error), not ninja's banner."""
    text = str(e)
    for line in text.splitlines():
        if re.search(r"\berror\b", line, re.IGNORECASE) and "ninja" not in line.lower():
            return line.strip()[:300]
    return first_line(e)[:300]


def build(modules: list[Module], parallel: int = 1, on_done=None) -> list[Outcome]:
    """Build the missing modules, `parallel` at a time (each runs ninja with MAX_JOBS compile jobs); a module
    that is there is reported as cached or aot. on_done(outcome) as each finishes."""
    outcomes = []

    def report(o: Outcome) -> None:
        outcomes.append(o)
        if on_done:
            on_done(o)

    todo = []
    for m in modules:
        state = m.state
        if state == "missing":
            todo.append(m)
        else:
            report(Outcome(m.name, state))

    def one(m: Module) -> Outcome:
        t0 = time.perf_counter()
        try:
            m.spec.build(need_lock=True)  # FlashInfer's lock: a sweep building the same module waits for it
            return Outcome(m.name, "built", time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001 - reported; the sweep's JIT tries it again where it runs
            return Outcome(m.name, "failed", time.perf_counter() - t0, failure_reason(e))

    if todo:
        with ThreadPoolExecutor(max(1, parallel)) as ex:
            for fut in as_completed([ex.submit(one, m) for m in todo]):
                report(fut.result())
    return outcomes


def default_parallel() -> int:
    """Modules built at once by default: a quarter of the cores, at least 1 (each runs ninja with several jobs)."""
    return max(1, (os.cpu_count() or 1) // 4)


def _check_counts(parallel, jobs) -> None:
    for name, v, top in (("--parallel", parallel, 64), ("--jobs", jobs, 256)):
        if v is not None and not int_in(v, 1, top):
            raise BadInput(f"{name} {v!r}: expected an integer in 1..{top}")


def build_plan(pp: PrebuildPlan, parallel: int | None = None, jobs: int | None = None, on_done=None) -> list[Outcome]:
    """Build the plan's missing modules, `parallel` at a time (default_parallel()), each with `jobs` compile jobs
    (MAX_JOBS; default: the cores over `parallel`, unless MAX_JOBS is set already)."""
    _check_counts(parallel, jobs)
    parallel = parallel or default_parallel()
    if jobs or "MAX_JOBS" not in os.environ:
        os.environ["MAX_JOBS"] = str(jobs or max(1, (os.cpu_count() or 1) // parallel))
    return build(pp.modules, parallel, on_done)


@dataclass
class PrebuildResult:
    plan: PrebuildPlan
    outcomes: list[Outcome] = field(default_factory=list)
    archive: Path | None = None
    archived: int = 0  # modules in the archive

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "failed"]


def check_archive_path(archive: str | Path, scenarios=()) -> None:
    """Before minutes of building: the archive must be a file that can be written, and not one the scenarios are
    read from (a scenario file, a lengths or tree file)."""
    from kbench.runs.outputs import distinct_outputs, given_path, writable_dir

    if not isinstance(archive, (str, os.PathLike)):
        raise BadInput(f"--archive {archive!r}: give the archive's file name (e.g. aot.tgz)")
    path = given_path(archive, "--archive", "aot.tgz", "file")
    distinct_outputs({"--archive": path}, [f for sc in (scenario_list(scenarios) if scenarios else [])
                                           for f in sc.input_files()])
    if path.is_dir():
        raise BadInput(f"--archive {archive}: a folder; give the archive's file name (e.g. aot.tgz)")
    writable_dir(path.parent, "--archive", create=False)  # made when the archive is written, not before


def prebuild(scenarios, arch: str | None = None, *, build_modules: bool = True, archive: str | Path | None = None,
             parallel: int | None = None, jobs: int | None = None, include: list[str] | tuple = (),
             on_done=None) -> PrebuildResult:
    """`kbench prebuild` from Python: plan the scenarios' modules (plan_prebuild), build the missing ones
    (build_plan; build_modules=False packs what is built), and with `archive` pack them for `load_archive` on the
    GPU host. The archive must not be one of the scenarios' own files; one already there is replaced whole."""
    scenarios = scenario_list(scenarios)
    _check_counts(parallel, jobs)
    if archive is not None:
        check_archive_path(archive, scenarios)
    pp = plan_prebuild(scenarios, arch, include, for_build=build_modules)
    result = PrebuildResult(pp)
    if build_modules:
        result.outcomes = build_plan(pp, parallel, jobs, on_done)
    if archive is not None:
        result.archive, result.archived = write_archive(archive, pp.modules, arch or arch_name(pp.device))
    return result


# --- the archive -------------------------------------------------------------------------------------------
def write_archive(out: str | Path, modules: list[Module], arch: str) -> tuple[Path, int]:
    """Pack every built module of the plan; returns (the archive, the number of modules in it). A temporary file
    renamed into place: an archive already there is replaced whole or not at all."""
    import flashinfer

    from kbench import __version__
    from kbench.engine.jit_cache import module_file
    from kbench.runs import atomic

    files = {m.name: module_file(m.spec) for m in modules}
    files = {name: f for name, f in files.items() if f is not None}
    if not files:  # an archive of nothing would load "fine" on the GPU host and the sweep would compile anyway
        raise BadInput(f"--archive {out}: none of the grid's {len(modules)} modules is built, so there is nothing to "
                       f"pack (build them first: drop --no-build)")
    manifest = {"format": FORMAT, "flashinfer": flashinfer.__version__, "arch": arch, "kbench": __version__,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "modules": {n: {"bytes": f.stat().st_size, "sha256": aot_archive.sha256_of(f)} for n, f in sorted(files.items())}}

    def add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
        tar.addfile(info, io.BytesIO(data))

    def pack(tmp: Path) -> None:
        with tarfile.open(tmp, "w:gz") as tar:
            add_bytes(tar, MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())
            add_bytes(tar, STAMP, (flashinfer.__version__ + "\n").encode())
            for name, f in sorted(files.items()):
                tar.add(f, arcname=f"aot/{name}/{name}.so", recursive=False)

    from kbench.runs.outputs import writable_dir

    writable_dir(Path(out).parent, "--archive")  # its folder, made now (checked, not made, before the build)
    return atomic.write_with(out, pack, named=True), len(files)


@dataclass
class Loaded:
    installed: list[str]
    present: list[str]  # the same library was there already
    into: Path


def load_archive(archive: str | Path, into: Path | None = None, device: DeviceInfo | None = None) -> Loaded:
    """Install the archive's modules as FlashInfer AOT modules (into flashinfer/data/aot of the installed
    FlashInfer, or `into`), after checking that they were built for this FlashInfer and, with a GPU here, for
    its architecture. Only aot/<module>/<module>.so members listed in the manifest are written, each through a
    temporary file renamed into place."""
    from kbench.engine.jit_cache import aot_dir
    from kbench.runs.outputs import writable_dir

    m = read_manifest(archive)
    try:
        import flashinfer

        version = flashinfer.__version__
    except Exception as e:  # noqa: BLE001
        raise BadInput(f"--load: FlashInfer is not importable here ({first_line(e)})") from None
    if m.get("flashinfer") != version:
        raise BadInput(f"{archive}: built for FlashInfer {m.get('flashinfer')}, this is {version} (module names stay, "
                       "their code changes: build the archive again with this FlashInfer)")
    if device is not None and device.cuda:
        built_sm = parse_arch(str(m.get("arch", "")).split()[0]) if m.get("arch") else None
        if built_sm is not None and built_sm != device.sm:
            raise BadInput(f"{archive}: built for {m['arch']} (SM{built_sm}), this GPU is SM{device.sm}")
    dest = Path(into) if into is not None else aot_dir()
    if dest is None:
        raise BadInput("--load: FlashInfer is not installed here")
    dest = Path(writable_dir(dest, "FlashInfer's AOT folder"))
    installed, present = [], []
    with aot_archive.opened(archive) as tar:
        arc = aot_archive.Archive(tar, archive)  # every member checked against the manifest before one is read
        arc.check_room(dest)
        for name in sorted(arc.manifest["modules"]):
            if arc.present(name, dest):
                present.append(name)
            else:
                arc.install(name, dest)
                installed.append(name)
    return Loaded(installed, present, dest)
