"""What comes back from the lent machine: $OUT holds at most 8 files, 16 MiB each, 64 MiB together, two folders
deep. RES (logs and run folders) is packed as results.tgz, the adaptive benchmark's runs (RES/adaptive) as
adaptive.tgz; each archive's members start with RES's own name (res/...), so `tar xzf results.tgz -C /tmp`
puts them back (tests/gpu/h200.sh does, from .gpu-carry/). An archive over the limit is packed again without
the rows.csv/rows.parquet that a rows.jsonl beside them makes redundant (kbench reads the journal first), and
if still over, split in 15 MiB parts NAME.part-aa, -ab... (`cat NAME.part-* | tar xz` joins them).
"""
from __future__ import annotations

import itertools
import os
import string
import tarfile
from pathlib import Path

MIB = 1 << 20
FILE_LIMIT = 16 * MIB
TOTAL_LIMIT = 64 * MIB
MAX_FILES = 8
PART = 15 * MIB
REDUNDANT = ("rows.csv", "rows.parquet")  # rebuilt from rows.jsonl by kbench


def part_names(name: str):
    """NAME.part-aa, NAME.part-ab, ... as `split` names them."""
    for a, b in itertools.product(string.ascii_lowercase, repeat=2):
        yield f"{name}.part-{a}{b}"


def split(src: Path, out: Path, name: str, part: int = PART) -> list[Path]:
    """src cut in `part`-byte pieces out/NAME.part-aa... (earlier parts of NAME removed first)."""
    remove(out, name)
    made = []
    with open(src, "rb") as f:
        for pname in part_names(name):
            chunk = f.read(part)
            if not chunk:
                break
            (out / pname).write_bytes(chunk)
            made.append(out / pname)
    return made


def remove(out: Path, name: str) -> None:
    for p in [out / name, *out.glob(f"{name}.part-*")]:
        p.unlink(missing_ok=True)


def _tar(dest: Path, root: Path, members: list[Path], slim: bool) -> None:
    def keep(info: tarfile.TarInfo):
        p = root.parent / info.name
        if slim and p.name in REDUNDANT and (p.parent / "rows.jsonl").exists():
            return None
        return info

    with tarfile.open(dest, "w:gz", compresslevel=6) as tar:
        for m in members:
            tar.add(m, arcname=str(m.relative_to(root.parent)), filter=keep)


def pack_one(root: Path, members: list[Path], out: Path, name: str, limit: int = FILE_LIMIT,
             part: int = PART) -> str:
    """members (under root) as out/NAME; slimmed, then split when over `limit`. One line saying what was done."""
    tmp = out / f".{name}.tmp"
    for slim in (False, True):
        _tar(tmp, root, members, slim)
        size = tmp.stat().st_size
        if size <= limit:
            remove(out, name)
            os.replace(tmp, out / name)
            return f"{name}: {size / MIB:.1f} MiB" + (" (rows.csv/rows.parquet left out: rows.jsonl kept)" if slim else "")
    parts = split(tmp, out, name, part)
    tmp.unlink()
    return f"{name}: {size / MIB:.1f} MiB even without rows.csv/rows.parquet: split in {len(parts)} parts"


def pack(res: Path, out: Path, limit: int = FILE_LIMIT, part: int = PART) -> tuple[list[str], list[str]]:
    """RES into out/results.tgz (all but RES/adaptive) and out/adaptive.tgz: (what was packed, problems: $OUT
    no longer fits what comes back)."""
    out.mkdir(parents=True, exist_ok=True)
    if not res.is_dir():
        return [], [f"nothing to pack: {res} does not exist"]
    main = [p for p in sorted(res.iterdir()) if p.name != "adaptive"]
    lines = [pack_one(res, main, out, "results.tgz", limit, part)]
    if (res / "adaptive").is_dir():
        lines.append(pack_one(res, [res / "adaptive"], out, "adaptive.tgz", limit, part))
    return lines, fits(out)


def files(out: Path) -> list[Path]:
    """The files that come back from out (two folders deep at most)."""
    return sorted(p for p in out.rglob("*") if p.is_file() and len(p.relative_to(out).parts) <= 3
                  and not p.name.endswith(".tmp"))


def fits(out: Path) -> list[str]:
    """Problems with out's files against the limits of what comes back; [] if none."""
    return fits_sizes([p.stat().st_size for p in files(out)])


def pack_jit_cache(cache: Path, out: Path, tmp: Path, part: int = PART) -> tuple[list[Path], str | None]:
    """FlashInfer's JIT cache folder (~/.cache/flashinfer) as out/jit-cache.tgz.part-aa... (members flashinfer/...,
    restored with `cat .fi-cache/jit-cache.tgz.part-* | tar xz -C ~/.cache`). Nothing is written when the
    parts would not come back with what out already holds: ([], the reason)."""
    if not cache.is_dir():
        return [], f"no JIT cache at {cache}"
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(cache, arcname=cache.name)
    size = tmp.stat().st_size
    n = -(-size // part)
    others = [p for p in files(out) if not p.name.startswith("jit-cache.tgz")]
    problems = fits_sizes([p.stat().st_size for p in others] + [part] * (n - 1) + [size - part * (n - 1)])
    if problems:
        tmp.unlink()
        return [], f"JIT cache {size / MIB:.1f} MiB in {n} part(s): " + "; ".join(problems)
    parts = split(tmp, out, "jit-cache.tgz", part)
    tmp.unlink()
    return parts, None


def fits_sizes(sizes: list[int]) -> list[str]:
    problems = []
    if len(sizes) > MAX_FILES:
        problems.append(f"$OUT would hold {len(sizes)} files: only {MAX_FILES} come back")
    big = sum(s > FILE_LIMIT for s in sizes)
    if big:
        problems.append(f"{big} file(s) over {FILE_LIMIT // MIB} MiB do not come back")
    if sum(sizes) > TOTAL_LIMIT:
        problems.append(f"$OUT would hold {sum(sizes) / MIB:.0f} MiB: only {TOTAL_LIMIT // MIB} MiB come back")
    return problems
