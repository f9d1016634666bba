"""The one reader of a prebuild archive (`kbench prebuild --archive` writes it, `--load` installs it).

An archive comes from another machine: nothing in it is trusted until checked, and the checks come before
anything is read whole or written:
- the manifest member (aot/KBENCH_PREBUILD.json) is a regular member of at most MANIFEST_MAX bytes, read no
  further than that;
- every module it lists has a plain name (letters, digits, `_.+-`; never `.` or `..`), a size of at most
  MODULE_MAX bytes and a sha256 of 64 hex digits;
- every module's member (aot/NAME/NAME.so) is a regular member whose size is the size the manifest gives, and
  is a whole shared library this Python can load (kbench.engine.elf: class, byte order, ELF version, OS ABI,
  type ET_DYN and machine as this interpreter's own, its tables and segments inside the file; its first bytes
  read, in the archive's order, before any module is written);
- the modules together are at most TOTAL_MAX bytes, and fit the target's free space;
- a module is written only inside the target folder (its folder there is a real folder, not a link), through a
  temporary file that is hashed while it is written, stops at the manifest's size and is renamed into place
  only when its sha256 matches.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Iterator

from kbench import files
from kbench.engine import elf
from kbench.errors import BadInput, first_line

MANIFEST = "aot/KBENCH_PREBUILD.json"
FORMAT = 1
MODULE_RE = re.compile(r"^[A-Za-z0-9_.+-]+$")
MANIFEST_MAX = 4 << 20  # ~200 bytes a module: tens of thousands of modules
MODULE_MAX = 2 << 30  # one FlashInfer library (the largest are some hundred MB)
TOTAL_MAX = 16 << 30  # every module of one FlashInfer build together (a full AOT build is a few GiB)
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
CHUNK = 1 << 20


def check_library(read, size: int, name: str, archive) -> None:
    """BadInput unless the module (``read(n)``: its first bytes, in order; ``size``: its length) is a whole shared
    library this Python can load (kbench.engine.elf: class, byte order, ELF version, OS ABI, type, machine, no
    position-independent executable, its tables inside the file), naming the field that differs."""
    why = elf.problem(read, size)
    if why is not None:
        raise BadInput(f"{archive}: {member_name(name)} {why}: nothing installed")


def member_name(module: str) -> str:
    return f"aot/{module}/{module}.so"


def _size(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n} bytes"


@contextlib.contextmanager
def opened(archive: str | os.PathLike) -> Iterator[tarfile.TarFile]:
    """The archive open for reading, or BadInput (no such file, not a file, not a .tar.gz)."""
    if not isinstance(archive, (str, os.PathLike)):
        raise BadInput(f"--load {archive!r}: give the archive's path")
    p = Path(archive)
    if not p.exists():
        raise BadInput(f"{archive}: no such archive")
    if not p.is_file():
        raise BadInput(f"{archive}: not an archive file (a folder or a device); give the .tgz kbench prebuild "
                       f"--archive wrote")
    try:
        tar = tarfile.open(p, "r:gz")
    except (tarfile.TarError, OSError, EOFError) as e:
        raise BadInput(f"{archive}: not a readable .tar.gz archive ({first_line(e)})") from None
    with tar:
        yield tar


def _member(tar: tarfile.TarFile, name: str, archive) -> tarfile.TarInfo | None:
    try:
        info = _named(tar, name)
    except (tarfile.TarError, OSError, EOFError) as e:
        raise BadInput(f"{archive}: not a readable .tar.gz archive ({first_line(e)})") from None
    if info is None:
        return None
    if not info.isreg():
        raise BadInput(f"{archive}: {name} is not a regular file in the archive (a link or a folder)")
    return info


def _named(tar: tarfile.TarFile, name: str) -> tarfile.TarInfo | None:
    """The member ``name``, as kbench writes it or as `tar czf aot.tgz ./aot` does (`./aot/...`); None: neither."""
    for n in (name, f"./{name}"):
        try:
            return tar.getmember(n)
        except KeyError:
            continue
    return None


def _manifest_of(tar: tarfile.TarFile, archive) -> dict:
    info = _member(tar, MANIFEST, archive)
    if info is None:
        raise BadInput(f"{archive}: not a kbench prebuild archive (no {MANIFEST})")
    if info.size > MANIFEST_MAX:
        raise BadInput(f"{archive}: {MANIFEST} is {_size(info.size)}, more than the {_size(MANIFEST_MAX)} kbench "
                       "reads from a prebuild manifest")
    try:
        data = tar.extractfile(info).read(MANIFEST_MAX + 1)
    except (tarfile.TarError, OSError, EOFError) as e:
        raise BadInput(f"{archive}: not a readable .tar.gz archive ({first_line(e)})") from None
    m = files.parse_json(data, f"{archive}: {MANIFEST}", unique_keys=True)
    if not isinstance(m, dict) or m.get("format") != FORMAT or not isinstance(m.get("modules"), dict):
        raise BadInput(f"{archive}: {MANIFEST} is not of format {FORMAT}")
    for name, meta in m["modules"].items():
        if not MODULE_RE.match(name) or name in (".", ".."):
            raise BadInput(f"{archive}: module name {name!r} is not a plain name")
        n = meta.get("bytes") if isinstance(meta, dict) else None
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MODULE_MAX:
            raise BadInput(f"{archive}: module {name}: bytes {n!r} is not a size of at most {_size(MODULE_MAX)}")
        if not isinstance(meta.get("sha256"), str) or not SHA256_RE.match(meta["sha256"]):
            raise BadInput(f"{archive}: module {name}: sha256 {meta.get('sha256')!r} is not 64 hex digits")
    return m


def read_manifest(archive: str | os.PathLike) -> dict:
    """The archive's KBENCH_PREBUILD.json, checked (format, names, sizes, hashes); BadInput (one line) for a file
    that is not such an archive."""
    with opened(archive) as tar:
        return _manifest_of(tar, archive)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


class Archive:
    """An archive checked whole (its manifest, and every listed module's member against it) before any module is
    read; `install` then writes one module inside a target folder."""

    def __init__(self, tar: tarfile.TarFile, archive):
        self.tar, self.label = tar, archive
        self.manifest = _manifest_of(tar, archive)
        self.members: dict[str, tarfile.TarInfo] = {}
        for name, meta in sorted(self.manifest["modules"].items()):
            info = _member(tar, member_name(name), archive)
            if info is None:
                raise BadInput(f"{archive}: lists {name} but does not hold {member_name(name)}")
            if info.size != meta["bytes"]:
                raise BadInput(f"{archive}: {member_name(name)} is {info.size} bytes, its manifest says "
                               f"{meta['bytes']} (a damaged or altered archive)")
            self.members[name] = info
        total = sum(meta["bytes"] for meta in self.manifest["modules"].values())
        if total > TOTAL_MAX:
            raise BadInput(f"{archive}: its modules add up to {_size(total)}, more than the {_size(TOTAL_MAX)} kbench "
                           f"installs (a FlashInfer build is a few GiB): nothing installed")
        self.total = total
        # each module's first bytes, in the archive's order (one pass through a compressed archive)
        for name, info in sorted(self.members.items(), key=lambda kv: kv[1].offset_data):
            try:
                check_library(self.tar.extractfile(info).read, info.size, name, archive)
            except (tarfile.TarError, EOFError, OSError) as e:
                raise BadInput(f"{archive}: cannot read {member_name(name)} ({first_line(e)})") from None

    def check_room(self, dest: Path) -> None:
        """BadInput unless the modules fit the free space where they go (none written half way on a full disk)."""
        need = 0
        for name, meta in self.manifest["modules"].items():
            t = _target(dest, name)
            if not (t.is_file() and t.stat().st_size == meta["bytes"]):  # one installed already takes no more
                need += meta["bytes"]
        free = shutil.disk_usage(dest).free
        if need > free:
            raise BadInput(f"{self.label}: its modules need {_size(need)}, {dest} has {_size(free)} free: nothing "
                           f"installed")

    def present(self, name: str, dest: Path) -> bool:
        """The module is installed in ``dest`` as the archive holds it."""
        meta, target = self.manifest["modules"][name], _target(dest, name)
        return (not target.is_symlink() and target.is_file() and target.stat().st_size == meta["bytes"]
                and sha256_of(target) == meta["sha256"])

    def install(self, name: str, dest: Path) -> None:
        """Write the module as dest/NAME/NAME.so: a temporary file beside it, at most the manifest's size, renamed
        into place when its sha256 matches (else removed, and BadInput)."""
        meta, target = self.manifest["modules"][name], _target(dest, name)
        if target.parent.is_symlink():
            _inside(dest, target.parent, self.label)
        try:
            target.parent.mkdir(exist_ok=True)
        except OSError as e:
            raise BadInput(f"{self.label}: cannot install {name} ({e.strerror or e})") from None
        _inside(dest, target.parent, self.label)
        src = self.tar.extractfile(self.members[name])
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".kb-", suffix=".tmp")
        try:
            h, n = hashlib.sha256(), 0
            with os.fdopen(fd, "wb") as out:
                while chunk := src.read(min(CHUNK, meta["bytes"] + 1 - n)):
                    n += len(chunk)
                    if n > meta["bytes"]:
                        break
                    h.update(chunk)
                    out.write(chunk)
            if n != meta["bytes"] or h.hexdigest() != meta["sha256"]:
                raise BadInput(f"{self.label}: {name} does not match its sha256 (a damaged archive)")
            os.chmod(tmp, 0o755)
            os.replace(tmp, target)
        except (tarfile.TarError, EOFError, OSError) as e:
            raise BadInput(f"{self.label}: cannot install {name} ({first_line(e)})") from None
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


def _target(dest: Path, name: str) -> Path:
    if not MODULE_RE.match(name) or name in (".", ".."):  # checked with the manifest; here too, where it is used
        raise BadInput(f"module name {name!r} is not a plain name")
    return dest / name / f"{name}.so"


def _inside(dest: Path, folder: Path, label) -> None:
    """``folder`` is a real folder directly in ``dest`` (not a link to elsewhere), or BadInput."""
    if folder.is_symlink() or not folder.is_dir() or folder.resolve().parent != dest.resolve():
        raise BadInput(f"{label}: {folder} is not a folder inside {dest} (a link?): nothing is written there")
