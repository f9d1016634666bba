"""Real shared libraries of this machine for the prebuild archive tests (standard library only): the smallest
extension module of this Python's lib-dynload (OS ABI System V, as python itself), a library this process has
loaded that is marked GNU/Linux (libc, libstdc++: what C++ modules such as FlashInfer's are), and header edits."""
from __future__ import annotations

import struct
import sysconfig
from pathlib import Path


def real_libraries() -> list[Path]:
    """This Python's extension modules (lib-dynload), smallest first."""
    folder = Path(sysconfig.get_config_var("DESTSHARED"))
    libs = sorted(folder.glob("*.so"), key=lambda p: (p.stat().st_size, p.name))
    assert libs, f"no extension module in {folder}"
    return libs


def real_library(i: int = 0) -> bytes:
    return real_libraries()[i].read_bytes()


def gnu_abi_library() -> bytes | None:
    """The smallest library this process has mapped whose e_ident[EI_OSABI] is 3 (GNU/Linux); None: none."""
    found = set()
    try:
        for line in Path("/proc/self/maps").read_text().splitlines():
            p = line.split()[-1]
            if p.startswith("/") and ".so" in p:
                found.add(p)
    except OSError:
        return None
    for p in sorted(found, key=lambda f: Path(f).stat().st_size if Path(f).exists() else 1 << 62):
        try:
            with open(p, "rb") as f:
                head = f.read(16)
        except OSError:
            continue
        if head[:4] == b"\x7fELF" and head[7] == 3:
            return Path(p).read_bytes()
    return None


# the ELF header's fields after e_ident, per class: (name, struct code)
_FIELDS = {1: "HHIIIIIHHHHHH", 2: "HHIQQQIHHHHHH"}
NAMES = ("e_type", "e_machine", "e_version", "e_entry", "e_phoff", "e_shoff", "e_flags", "e_ehsize", "e_phentsize",
         "e_phnum", "e_shentsize", "e_shnum", "e_shstrndx")


def edited(lib: bytes, ident: dict[int, int] | None = None, **fields) -> bytes:
    """``lib`` with e_ident bytes (index -> value) and header fields (e_type=2, ...) changed."""
    b = bytearray(lib)
    order = "<" if b[5] == 1 else ">"
    fmt = order + _FIELDS[b[4]]
    vals = dict(zip(NAMES, struct.unpack_from(fmt, b, 16)))
    vals.update(fields)
    struct.pack_into(fmt, b, 16, *(vals[n] for n in NAMES))
    for i, v in (ident or {}).items():
        b[i] = v
    return bytes(b)


def byte_swapped(lib: bytes) -> bytes:
    """``lib``'s ELF header written in the other byte order (e_ident[EI_DATA] and every field): the same library
    as a machine of the other byte order would read it."""
    b = bytearray(lib)
    mine, other = ("<", ">") if b[5] == 1 else (">", "<")
    fmt = _FIELDS[b[4]]
    vals = struct.unpack_from(mine + fmt, b, 16)
    struct.pack_into(other + fmt, b, 16, *vals)
    b[5] = 2 if b[5] == 1 else 1
    return bytes(b)


def pie_executable() -> bytes | None:
    """This Python's own executable when it is a position-independent executable (ELF type ET_DYN and DT_FLAGS_1
    with DF_1_PIE, as Debian's and pyenv's are); None otherwise."""
    import os
    import sys

    data = Path(os.path.realpath(sys.executable)).read_bytes()
    if data[:4] != b"\x7fELF" or struct.unpack_from("<H" if data[5] == 1 else ">H", data, 16)[0] != 3:
        return None
    at = flags_1_at(data)
    return data if at is not None and struct.unpack_from("<Q", data, at)[0] & 0x08000000 else None


def flags_1_at(data: bytes) -> int | None:
    """Where DT_FLAGS_1's value lies in a 64-bit little-endian ELF file (None: it has none), found independently
    of kbench.engine.elf."""
    if data[4] != 2 or data[5] != 1:
        return None
    phoff, = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    for i in range(phnum):
        typ, _, off, _, _, filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if typ == 2:  # PT_DYNAMIC
            for at in range(off, off + filesz, 16):
                tag, = struct.unpack_from("<q", data, at)
                if tag == 0:
                    return None
                if tag == 0x6FFFFFFB:
                    return at + 8
    return None
