"""kbench.engine.elf: a module is a shared library this Python can load, or one line naming the field that differs.
Real libraries of this machine pass; each header field edited on one of them is refused by name (issue #55)."""
from __future__ import annotations

import io
import struct

import pytest
from elf_samples import byte_swapped, edited, gnu_abi_library, real_library

from kbench.engine import elf


def why(data: bytes, own=None):
    return elf.problem(io.BytesIO(data).read, len(data), own)


def test_real_libraries_of_this_machine_pass():
    assert why(real_library(0)) is None and why(real_library(1)) is None
    gnu = gnu_abi_library()  # libc, libstdc++: marked GNU/Linux while python is System V; glibc loads both
    if gnu is None:
        pytest.skip("no library of OS ABI GNU/Linux is loaded here")
    assert gnu[7] == 3 and why(gnu) is None


LIB = real_library()


@pytest.mark.parametrize("data,message", [
    (bytes(64), r"^is not a shared library \(no ELF header\)$"),
    (LIB[:10], r"^is cut short inside its ELF header \(10 bytes\)$"),
    (edited(LIB, {4: 7}), r"^has an ELF class 7 / byte order 1 no loader reads"),
    (edited(LIB, {4: 1}), r"^is a 32-bit library \(ELF class 1\), this Python is 64-bit \(ELF class 2\)$"),
    (byte_swapped(LIB), r"^is big-endian \(ELF data 2\), this Python is little-endian \(ELF data 1\)$"),
    (edited(LIB, {6: 0}), r"^has ELF version 0 \(e_ident\[EI_VERSION\]\), the loader reads version 1"),
    (edited(LIB, e_version=2), r"^has ELF version 2 \(e_version\), the loader reads version 1"),
    (edited(LIB, {7: 9}), r"^is built for OS ABI FreeBSD \(9\) \(e_ident\[EI_OSABI\]\), this Python's loader takes "
                          r"System V \(0\) or GNU/Linux \(3\)$"),
    (edited(LIB, {7: 97}), r"^is built for OS ABI ARM \(97\)"),
    (edited(LIB, e_type=1), r"^is an object file \(ET_REL, e_type 1\), not a shared object \(ET_DYN\)"),
    (edited(LIB, e_type=2), r"^is an executable that is not position-independent \(ET_EXEC, e_type 2\)"),
    (edited(LIB, e_type=4), r"^is a core dump \(ET_CORE, e_type 4\)"),
    (edited(LIB, e_type=0xfe00), r"^is an ELF file of an unknown type \(\?, e_type 65024\)"),
    (edited(LIB, e_machine=183), r"^is a 64-bit library for AArch64 \(ELF machine 183\), this machine runs 64-bit "
                                 r"x86-64 \(ELF machine 62\)$"),
    (edited(LIB, e_machine=9999), r"^is a 64-bit library for ELF machine 9999, this machine runs"),
    (edited(LIB, e_ehsize=40), r"^has an ELF header of 40 bytes \(e_ehsize\), a 64-bit one has 64: damaged$"),
    (edited(LIB, e_phnum=0), r"^has no program header table \(e_phnum 0\)"),
    (edited(LIB, e_phentsize=32), r"^has program headers of 32 bytes \(e_phentsize\), a 64-bit one has 56"),
    (edited(LIB, e_shentsize=40), r"^has section headers of 40 bytes \(e_shentsize\), a 64-bit one has 64"),
    (edited(LIB, e_shoff=len(LIB)), rf"^is cut short: its section header table ends at byte [\d,]+, the file has "
                                    rf"{len(LIB):,} bytes \(a truncated copy\)$"),
    (edited(LIB, e_phoff=len(LIB) - 8), r"^is cut short: its program header table ends at byte"),
    (LIB[:len(LIB) - 1], r"^is cut short: its section header table ends at byte"),
])
def test_each_field_that_differs_is_named(data, message):
    import re

    if LIB[4] != 2 or LIB[5] != 1 or struct.unpack_from("<H", LIB, 18)[0] != 62:
        pytest.skip("the messages here are a little-endian x86-64 Python's")
    got = why(data)
    assert got is not None and re.search(message, got), got


def _segments(lib: bytes):
    """(index, p_type, offset of p_offset, offset of p_filesz) of each program header of a 64-bit LE library."""
    h = elf.header(lib)
    for i in range(h.phnum):
        at = h.phoff + i * h.phentsize
        yield i, struct.unpack_from("<I", lib, at)[0], at + 8, at + 32


def test_loadable_segments_lie_inside_the_file():
    if LIB[4] != 2 or LIB[5] != 1:
        pytest.skip("a 64-bit little-endian Python's layout")
    b = bytearray(LIB)
    last = [s for s in _segments(LIB) if s[1] == elf.PT_LOAD][-1]
    struct.pack_into("<Q", b, last[3], len(LIB))  # its bytes run past the end of the file
    assert "is cut short: its loadable segment" in why(bytes(b))
    b = bytearray(LIB)
    for i, typ, _, _ in _segments(LIB):
        if typ == elf.PT_LOAD:
            struct.pack_into("<I", b, elf.header(LIB).phoff + i * 56, 6)  # PT_PHDR: nothing to map
    assert why(bytes(b)).startswith("has no loadable segment (PT_LOAD)")


def test_a_python_of_another_os_abi_takes_only_its_own():
    own = elf.header(edited(LIB, {7: 9}))  # a FreeBSD Python
    assert why(edited(LIB, {7: 9}), own) is None
    assert "this Python's loader takes FreeBSD (9)" in why(LIB, own)


def test_a_position_independent_executable_is_refused_by_its_dt_flags_1():
    """A PIE is ET_DYN like a shared object; glibc (2.30 on) refuses to dlopen it by DT_FLAGS_1's DF_1_PIE, and
    so does the check, reaching the dynamic section by reading on (as from an archive's compressed stream)."""
    import ctypes
    import os
    import sys
    import tempfile

    from elf_samples import flags_1_at, pie_executable

    exe = pie_executable()
    if exe is None:
        pytest.skip("this Python's executable is not a position-independent executable with DF_1_PIE")
    assert elf.header(exe).type == elf.ET_DYN  # what the e_type check alone let through
    got = why(exe)
    assert got == ("is a position-independent executable (DT_FLAGS_1 has DF_1_PIE), not a shared object a "
                   "program loads: the loader refuses to dlopen it"), got
    reads = []
    stream = io.BytesIO(exe)

    def small_reads(n):  # the check never asks for more than it needs in one read
        reads.append(n)
        return stream.read(min(n, 4096))
    assert elf.problem(small_reads, len(exe)) == got and max(reads) <= elf.HEAD_MAX
    with pytest.raises(OSError, match="position-independent executable"):  # the loader agrees
        ctypes.CDLL(os.path.realpath(sys.executable))
    # the same bytes without the mark (a PIE linked before DF_1_PIE existed): the loader takes it, so does the check
    b = bytearray(exe)
    at = flags_1_at(exe)
    struct.pack_into("<Q", b, at, struct.unpack_from("<Q", exe, at)[0] & ~elf.DF_1_PIE)
    assert why(bytes(b)) is None
    with tempfile.NamedTemporaryFile(suffix=".so") as f:
        f.write(bytes(b))
        f.flush()
        ctypes.CDLL(f.name)


def test_a_library_with_an_interpreter_segment_loads_and_passes():
    """libc.so.6 has PT_INTERP (it runs as a program too) and every program loads it: PT_INTERP alone is no PIE."""
    import ctypes.util
    import os

    name = ctypes.util.find_library("c")
    path = next((p for p in ("/lib/x86_64-linux-gnu/" + str(name), "/usr/lib/x86_64-linux-gnu/" + str(name))
                 if os.path.isfile(p)), None)
    if path is None:
        pytest.skip("no libc.so.6 found at a Debian path")
    data = open(path, "rb").read()
    h = elf.header(data)
    interp = [i for i in range(h.phnum) if struct.unpack_from("<I", data, h.phoff + i * h.phentsize)[0] == 3]
    assert interp, "libc has no PT_INTERP here"
    assert why(data) is None
