"""What a FlashInfer module needs from the toolchain beyond the compiler, checked before anything compiles.

A CUDA toolkit installed for building (nvcc, the runtime headers) need not hold the headers of the CUDA math
libraries, which ship apart (the nvidia-cublas and nvidia-curand wheels, a distribution's libcublas-dev): fmha-v2
and fa3 include cuBLAS and cuRAND headers, and without them their builds fail minutes in. The check reads the
module's own compile commands (JitSpec.get_compile_commands: its sources and -I/-isystem folders), follows each
source's #include lines through the files those folders hold, and names the library headers that none of the
folders, the toolkit nor --include holds; and each `-lNAME` of the module's link flags that no library folder holds.
The includes are read as text (a header behind an #if counts as needed): only the CUDA libraries' own headers are
judged, not the C++ or system ones, so a header the compiler finds in its own folders is never reported.
"""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)
# headers of the CUDA libraries that ship apart from the compiler: file-name prefix -> (library, where to get it)
LIBRARY_HEADERS = {
    "cublas": ("cuBLAS", "nvidia-cublas"), "curand": ("cuRAND", "nvidia-curand"),
    "cusparse": ("cuSPARSE", "nvidia-cusparse"), "cufft": ("cuFFT", "nvidia-cufft"),
    "cusolver": ("cuSOLVER", "nvidia-cusolver"), "nccl": ("NCCL", "nvidia-nccl"), "cudnn": ("cuDNN", "nvidia-cudnn"),
    "nvshmem": ("NVSHMEM", "nvidia-nvshmem"),
}
SYSTEM_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib64",
                   "/lib")


def library_of(header: str) -> tuple[str, str] | None:
    """(library, package) of a CUDA library header ('cublasLt.h' -> cuBLAS), None for any other header."""
    name = Path(header).name.lower()
    return next((v for k, v in LIBRARY_HEADERS.items() if name.startswith(k)), None)


@dataclass
class Needs:
    """What one module lacks: library headers (name -> library) and link libraries (-lNAME)."""
    module: str
    headers: dict[str, str] = field(default_factory=dict)
    libraries: list[str] = field(default_factory=list)


def include_dirs(command: str) -> list[Path]:
    """The -I and -isystem folders of one compile command, in order."""
    words, out = command.split(), []  # FlashInfer joins its commands with spaces, unquoted
    for i, w in enumerate(words):
        if w in ("-I", "-isystem") and i + 1 < len(words):
            out.append(Path(words[i + 1]))
        elif w.startswith("-I") and len(w) > 2:
            out.append(Path(w[2:]))
        elif w.startswith("-isystem") and len(w) > len("-isystem"):
            out.append(Path(w[len("-isystem"):]))
    return out


class Scanner:
    """The #include lines of files, each file read once across modules."""

    def __init__(self):
        self._includes: dict[Path, list[tuple[bool, str]]] = {}
        self._found: dict[tuple, dict[str, str | None]] = {}  # folders -> an <include>'s file there, or None
        self._missing: dict[tuple, dict[str, str]] = {}  # (sources, folders) -> what missing() answered

    def includes(self, path: Path) -> list[tuple[bool, str]]:
        """(quoted, name) of each #include of the file; none for a file that cannot be read."""
        if path not in self._includes:
            try:
                text = path.read_bytes()
            except OSError:
                text = b""
            self._includes[path] = [(q == b'"', n.decode("utf-8", "replace").strip()) for q, n in INCLUDE.findall(text)]
        return self._includes[path]

    def missing(self, sources: list[Path], dirs: list[Path], extra: list[Path]) -> dict[str, str]:
        """Library headers the sources include (through every file the folders hold) that no folder holds."""
        search = [str(d) for d in [*dirs, *extra]]
        key = (tuple(sorted(map(str, sources))), tuple(search))
        if key in self._missing:
            return self._missing[key]
        found = self._found.setdefault(tuple(search), {})  # an <include>'s file in the folders, looked up once

        def lookup(folders, name):
            return next((p for d in folders if os.path.isfile(p := os.path.normpath(os.path.join(d, name)))), None)

        seen: set[str] = set()
        todo = [os.path.normpath(str(s)) for s in sources]
        out: dict[str, str] = {}
        while todo:
            f = todo.pop()
            if f in seen:
                continue
            seen.add(f)
            for quoted, name in self.includes(Path(f)):
                hit = lookup([os.path.dirname(f)], name) if quoted else None
                if hit is None:
                    if name not in found:
                        found[name] = lookup(search, name)
                    hit = found[name]
                if hit is not None:
                    todo.append(hit)
                elif (lib := library_of(name)) is not None:
                    out[name] = lib[0]
        self._missing[key] = out
        return out


def _library_dirs(ldflags: list[str], cuda: Path | None) -> list[Path]:
    dirs = [Path(w[2:]) for w in ldflags if w.startswith("-L") and len(w) > 2]
    dirs += [Path(d) for d in os.environ.get("LIBRARY_PATH", "").split(os.pathsep) if d]
    if cuda is not None:
        dirs += [cuda / "lib64", cuda / "lib64" / "stubs", cuda / "lib", cuda / "targets"]
    return dirs + [Path(d) for d in SYSTEM_LIB_DIRS]


def module_needs(spec, extra: list[Path], cuda: Path | None, scanner: Scanner | None = None) -> Needs:
    """What the toolchain lacks for one module (a flashinfer JitSpec): its compile commands' sources and folders,
    `extra` (--include) searched too; its link flags' -lNAME against the library folders."""
    scanner = scanner or Scanner()
    needs = Needs(spec.name)
    commands = spec.get_compile_commands()
    by_dirs: dict[tuple, list[Path]] = {}
    for c in commands:
        by_dirs.setdefault(tuple(include_dirs(c["command"])), []).append(Path(c["file"]))
    for dirs, sources in by_dirs.items():
        needs.headers.update(scanner.missing(sources, list(dirs), extra))
    ldflags = [w for f in (spec.extra_ldflags or []) for w in shlex.split(f)]
    lib_dirs = _library_dirs(ldflags, cuda)
    for w in ldflags:
        if w.startswith("-l") and len(w) > 2:
            name = w[2:]
            if not any((d / f"lib{name}.so").exists() or (d / f"lib{name}.a").exists() for d in lib_dirs):
                needs.libraries.append(name)
    return needs
