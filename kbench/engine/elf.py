"""Is this file a shared library this Python can load? The ELF header and program header table, read with the
standard library (struct), compared field by field with this interpreter's own executable.

A library passes when it is what the dynamic loader of this machine takes:
- an ELF file (the magic bytes), of this interpreter's class (32/64-bit) and byte order;
- ELF version 1 (EV_CURRENT), in e_ident and in e_version;
- an OS ABI this loader takes: the interpreter's own, and on Linux both System V (0) and GNU/Linux (3), as
  glibc's loader does (C++ libraries with GNU-unique symbols, libc itself, torch's, are marked GNU/Linux while
  python is marked System V);
- of type ET_DYN (a shared object; an executable that is not position-independent, ET_EXEC, is not loadable
  with dlopen; neither is an object file, ET_REL, or a core dump);
- not a position-independent executable: a PIE is ET_DYN too, and glibc's loader (2.30 on) refuses to dlopen one
  ("cannot dynamically load position-independent executable"); it tells one by its dynamic section's DT_FLAGS_1
  holding DF_1_PIE, and so does this check. A PT_INTERP segment alone does not make a file unloadable (libc.so.6
  has one and is loaded by every program), so it is not refused; a PIE linked before DF_1_PIE existed (binutils
  before 2.26) carries no mark, and the loader takes it, as this check does;
- for this interpreter's machine (e_machine);
- whole: the header, program header and section header tables have ELF's sizes and lie inside the file, it
  has a loadable segment, and every loadable segment's bytes lie inside the file (a copy cut short fails here).

`problem(read, size)` says, in a few words naming the field that differs, why a file is not such a library, or
None. It reads the header, the program header table where it lies in the first HEAD_MAX bytes, and the dynamic
section's entries (at most DYNAMIC_MAX bytes of them, reached by reading on and discarding, since ``read`` goes
on in order: an archive member is a compressed stream), so an archive's members are checked before any is written.
"""
from __future__ import annotations

import struct
import sys
from dataclasses import dataclass
from typing import Callable

MAGIC = b"\x7fELF"
EV_CURRENT = 1
ET_DYN = 3
PT_LOAD = 1
PT_DYNAMIC = 2
DT_NULL = 0
DT_FLAGS_1 = 0x6FFFFFFB
DF_1_PIE = 0x08000000
DYNAMIC_MAX = 1 << 20  # bytes of dynamic section entries read (a real one holds tens of 16-byte entries)
PN_XNUM = 0xFFFF
HEAD_MAX = 64 << 10  # the program header table is read when it lies within the first 64 KiB (it follows the header)
CLASSES = {1: "32-bit", 2: "64-bit"}
ORDERS = {1: "little-endian", 2: "big-endian"}
TYPES = {0: ("a file of no type", "ET_NONE"), 1: ("an object file", "ET_REL"),
         2: ("an executable that is not position-independent", "ET_EXEC"), 3: ("a shared object", "ET_DYN"),
         4: ("a core dump", "ET_CORE")}
MACHINES = {2: "SPARC", 3: "x86", 8: "MIPS", 20: "PowerPC", 21: "PowerPC64", 22: "S390", 40: "ARM",
            43: "SPARC V9", 62: "x86-64", 183: "AArch64", 243: "RISC-V", 258: "LoongArch"}
OS_ABIS = {0: "System V", 1: "HP-UX", 2: "NetBSD", 3: "GNU/Linux", 6: "Solaris", 9: "FreeBSD", 12: "OpenBSD",
           97: "ARM", 255: "standalone"}
LINUX_ABIS = (0, 3)  # glibc's loader takes both (VALID_ELF_OSABI)
# (header, program header, section header) sizes per class
SIZES = {1: (52, 32, 40), 2: (64, 56, 64)}
LAYOUT = {1: "HHIIIIIHHHHHH", 2: "HHIQQQIHHHHHH"}
PHDR = {1: ("IIIIIIII", 0, 1, 4), 2: ("IIQQQQQQ", 0, 2, 5)}  # format, index of p_type, p_offset, p_filesz
DYN = {1: "iI", 2: "qQ"}  # a dynamic section entry: d_tag, d_val


@dataclass(frozen=True)
class Header:
    cls: int
    order: int
    ident_version: int
    os_abi: int
    type: int
    machine: int
    version: int
    phoff: int
    shoff: int
    ehsize: int
    phentsize: int
    phnum: int
    shentsize: int
    shnum: int

    @property
    def endian(self) -> str:
        return "<" if self.order == 1 else ">"


def header(head: bytes) -> Header | None:
    """The ELF header of a file's first bytes; None when they are not an ELF header of a known class and byte
    order (or too short for one)."""
    if len(head) < 16 or head[:4] != MAGIC or head[4] not in SIZES or head[5] not in ORDERS:
        return None
    cls, order = head[4], head[5]
    fmt = ("<" if order == 1 else ">") + LAYOUT[cls]
    if len(head) < 16 + struct.calcsize(fmt):
        return None
    (typ, machine, version, _entry, phoff, shoff, _flags, ehsize, phentsize, phnum, shentsize, shnum,
     _shstrndx) = struct.unpack_from(fmt, head, 16)
    return Header(cls, order, head[6], head[7], typ, machine, version, phoff, shoff, ehsize, phentsize, phnum,
                  shentsize, shnum)


_OWN: list = []


def interpreter() -> Header | None:
    """This Python's own executable's header (read once): what a library it loads must match. None where it is
    no ELF file (another OS): then only what makes an ELF file loadable at all is checked."""
    if not _OWN:
        try:
            with open(sys.executable, "rb") as f:
                _OWN.append(header(f.read(64)))
        except OSError:
            _OWN.append(None)
    return _OWN[0]


def machine_name(m: int) -> str:
    return f"{MACHINES[m]} (ELF machine {m})" if m in MACHINES else f"ELF machine {m}"


def os_abi_name(a: int) -> str:
    return f"{OS_ABIS.get(a, 'unknown')} ({a})"


def accepted_os_abis(own: Header | None) -> tuple[int, ...]:
    if own is None:
        return LINUX_ABIS
    return LINUX_ABIS if own.os_abi in LINUX_ABIS else (own.os_abi,)


def problem(read: Callable[[int], bytes], size: int, own: Header | None = None) -> str | None:
    """Why the file of ``size`` bytes whose first bytes ``read(n)`` returns (n at most HEAD_MAX; each call goes on
    where the last one ended) is not a shared library this Python can load, naming the field: e.g. "is
    big-endian (ELF data 2), this Python is little-endian"; None when it is one. ``own``: the header to compare
    with (default: this interpreter's)."""
    own = interpreter() if own is None else own
    head = read(64)
    h = header(head)
    if h is None:
        if head[:4] != MAGIC:
            return "is not a shared library (no ELF header)"
        if len(head) >= 6 and (head[4] not in SIZES or head[5] not in ORDERS):
            return (f"has an ELF class {head[4]} / byte order {head[5]} no loader reads (class 1 or 2, data 1 or "
                    f"2): not a shared library")
        return f"is cut short inside its ELF header ({len(head)} bytes)"
    if own is not None and h.cls != own.cls:
        return (f"is a {CLASSES[h.cls]} library (ELF class {h.cls}), this Python is {CLASSES[own.cls]} (ELF class "
                f"{own.cls})")
    if own is not None and h.order != own.order:
        return (f"is {ORDERS[h.order]} (ELF data {h.order}), this Python is {ORDERS[own.order]} (ELF data "
                f"{own.order})")
    for field, v in (("e_ident[EI_VERSION]", h.ident_version), ("e_version", h.version)):
        if v != EV_CURRENT:
            return f"has ELF version {v} ({field}), the loader reads version {EV_CURRENT} (the only one defined)"
    abis = accepted_os_abis(own)
    if h.os_abi not in abis:
        return (f"is built for OS ABI {os_abi_name(h.os_abi)} (e_ident[EI_OSABI]), this Python's loader takes "
                + " or ".join(os_abi_name(a) for a in abis))
    if h.type != ET_DYN:
        what, tag = TYPES.get(h.type, ("an ELF file of an unknown type", "?"))
        return f"is {what} ({tag}, e_type {h.type}), not a shared object (ET_DYN) that a program loads"
    if own is not None and h.machine != own.machine:
        return (f"is a {CLASSES[h.cls]} library for {machine_name(h.machine)}, this machine runs "
                f"{CLASSES[own.cls]} {machine_name(own.machine)}")
    return _whole(h, head, read, size)


def _whole(h: Header, head: bytes, read: Callable[[int], bytes], size: int) -> str | None:
    """The header's sizes are ELF's and its tables and loadable segments lie inside the file."""
    ehsize, phentsize, shentsize = SIZES[h.cls]
    if h.ehsize != ehsize:
        return f"has an ELF header of {h.ehsize} bytes (e_ehsize), a {CLASSES[h.cls]} one has {ehsize}: damaged"
    if h.phnum == 0 or h.phnum == PN_XNUM:
        return "has no program header table (e_phnum 0): nothing a loader can map"
    if h.phentsize != phentsize:
        return (f"has program headers of {h.phentsize} bytes (e_phentsize), a {CLASSES[h.cls]} one has "
                f"{phentsize}: damaged")
    if h.shnum and h.shentsize != shentsize:
        return (f"has section headers of {h.shentsize} bytes (e_shentsize), a {CLASSES[h.cls]} one has "
                f"{shentsize}: damaged")
    ph_end = h.phoff + h.phnum * h.phentsize
    sh_end = h.shoff + max(h.shnum, 1 if h.shoff else 0) * shentsize  # e_shnum 0 with a table: its count is in it
    for what, end in (("program header table", ph_end), ("section header table", sh_end)):
        if end > size:
            return (f"is cut short: its {what} ends at byte {end:,}, the file has {size:,} bytes (a truncated "
                    f"copy)")
    if ph_end > HEAD_MAX or h.phoff < ehsize:
        return None  # the table is inside the file; its segments are not read here
    table = head + read(ph_end - len(head)) if ph_end > len(head) else head
    if len(table) < ph_end:
        return f"is cut short inside its program header table ({len(table):,} of {ph_end:,} bytes)"
    fmt, t_i, off_i, filesz_i = PHDR[h.cls]
    loads = 0
    dynamic = None  # (offset, size) of the dynamic section (PT_DYNAMIC)
    for i in range(h.phnum):
        ph = struct.unpack_from(h.endian + fmt, table, h.phoff + i * h.phentsize)
        if ph[t_i] == PT_DYNAMIC:
            dynamic = (ph[off_i], ph[filesz_i])
        if ph[t_i] != PT_LOAD:
            continue
        loads += 1
        end = ph[off_i] + ph[filesz_i]
        if end > size:
            return (f"is cut short: its loadable segment {loads} (program header {i}) ends at byte {end:,}, the "
                    f"file has {size:,} bytes (a truncated copy)")
    if not loads:
        return "has no loadable segment (PT_LOAD): nothing a loader can map"
    if dynamic is not None and _flags_1(h, table, read, size, *dynamic) & DF_1_PIE:
        return ("is a position-independent executable (DT_FLAGS_1 has DF_1_PIE), not a shared object a program "
                "loads: the loader refuses to dlopen it")
    return None


def _flags_1(h: Header, seen: bytes, read: Callable[[int], bytes], size: int, offset: int, length: int) -> int:
    """DT_FLAGS_1 of the dynamic section at ``offset`` (0 where it has none, or lies outside the file). ``seen``:
    the file's first bytes, read already; the bytes up to ``offset`` are read on and discarded."""
    length = min(length, DYNAMIC_MAX)
    if offset + length > size or length <= 0:
        return 0
    if offset + length <= len(seen):
        entries = seen[offset:offset + length]
    else:
        pos = len(seen)
        while pos < offset:
            got = read(min(offset - pos, 1 << 20))
            if not got:
                return 0
            pos += len(got)
        entries = seen[offset:] if offset < len(seen) else b""
        while len(entries) < length:
            got = read(length - len(entries))
            if not got:
                break
            entries += got
    fmt = h.endian + DYN[h.cls]
    step = struct.calcsize(fmt)
    for at in range(0, len(entries) - step + 1, step):
        tag, val = struct.unpack_from(fmt, entries, at)
        if tag == DT_NULL:
            break
        if tag == DT_FLAGS_1:
            return val
    return 0
