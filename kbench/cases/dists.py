"""Per-request lengths of a batch: how long each request's KV is (kv_dist) and how many query tokens it
brings (q_dist). Engines do not run batches where every request is alike; these axes say how they differ.

kv_dist (kv_len is the mean where a distribution needs one):
  fixed            every request has kv_len (the idealised batch, the default)
  uniform:LO..HI   integers drawn uniformly from [LO, HI]
  lognormal:SIGMA  log-normal with shape SIGMA, rescaled so the batch holds exactly batch_size * kv_len
                   tokens: the same total KV as the fixed batch, spread unevenly
  zipf[:A]         request r (in a shuffled order) gets a share proportional to 1 / r**A (A = 1 by
                   default), rescaled to the same total as the fixed batch
  file:PATH        the first batch_size values of a CSV or JSON list of lengths (for instance dumped
                   from a server)
q_dist:
  fixed            every request has q_len query tokens (target verify, CUDA-graph draft extend)
  accept:RATE      1 + accepted drafts: each of the q_len - 1 drafts is accepted with probability RATE
                   until the first rejection (eager draft extend and legacy draft extend)
  file:PATH        the first batch_size values of a CSV or JSON list; none may exceed q_len

Lengths are drawn from a numpy generator seeded by the sweep's seed, so a case's batch is reproducible;
the summary (mean, max, min, hash) goes into the row so two runs can tell whether they ran the same batch.
Every KV length is at least its request's q length (seq_lens include the new tokens); generated lengths
are clamped up to q_len, and a file that breaks the rule is refused.
"""
from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kbench.errors import BadInput
from kbench import files
from kbench.values import INT32_MAX  # noqa: F401 - re-exported: the bound every length is checked against
from kbench.values import parse_float

KV_KINDS = ("fixed", "uniform", "lognormal", "zipf", "file")
Q_KINDS = ("fixed", "accept", "file")
MAX_FILE_LENGTHS = 1_000_000
_UNIFORM = re.compile(r"^\s*([0-9]+)\s*\.\.\s*([0-9]+)\s*$")  # ASCII digits: int() takes '١٢' too


@dataclass(frozen=True)
class DistSpec:
    """A parsed distribution string: its kind and its one parameter (a number, a range or a path)."""

    field: str  # kv_dist | q_dist
    kind: str
    arg: object = None

    @property
    def text(self) -> str:
        """The canonical spelling (what scenarios, rows and case_ids hold)."""
        if self.kind == "fixed":
            return "fixed"
        if self.kind == "uniform":
            return f"uniform:{self.arg[0]}..{self.arg[1]}"
        if self.kind == "file":
            return f"file:{self.arg}"
        return f"{self.kind}:{_num(self.arg)}"

    @property
    def id_part(self) -> str:
        """The case_id fragment: no colons, and a file by its name only."""
        if self.kind == "file":
            return "file-" + Path(self.arg).name
        return self.text.replace(":", "")


def _num(x: float) -> str:
    return f"{x:g}" if x != int(x) or abs(x) >= 1e6 else f"{float(x):.1f}"


def parse_dist(text, field: str, where: str = "scenario") -> DistSpec:
    """Parse a kv_dist / q_dist string; a bad one raises BadInput naming the field."""
    try:
        return _parse(text, field)
    except ValueError as e:
        raise BadInput(f"{where}: {field}: {e}") from None


def canonical(field: str):
    """The axis table's spec check for kv_dist / q_dist: item -> canonical spelling, ValueError if bad."""
    return lambda item: _parse(item, field).text


def _float(text: str, what: str) -> float:
    try:
        v = parse_float(text)
    except ValueError:
        raise ValueError(f"{what} must be a number, got {text!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"{what} must be finite, got {text!r}")
    return v


def _parse(text, field: str) -> DistSpec:
    kinds = KV_KINDS if field == "kv_dist" else Q_KINDS
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"expected one of {', '.join(kinds)} (as a string), got {text!r}")
    kind, sep, arg = text.strip().partition(":")
    kind = kind.strip().lower()
    arg = arg.strip()
    if kind not in kinds:
        raise ValueError(f"unknown distribution {kind!r} (use {', '.join(kinds)})")
    if kind == "fixed":
        if sep:
            raise ValueError(f"'fixed' takes no parameter, got {text!r}")
        return DistSpec(field, "fixed")
    if kind == "file":
        if not arg:
            raise ValueError("file: needs a path (file:PATH)")
        return DistSpec(field, "file", arg)
    if kind == "uniform":
        m = _UNIFORM.match(arg)
        if not m:
            raise ValueError(f"expected uniform:LO..HI with integers, got {text!r}")
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo < 1 or hi < lo:
            raise ValueError(f"uniform:{lo}..{hi} needs 1 <= LO <= HI")
        if hi > INT32_MAX:
            raise ValueError(f"uniform:{lo}..{hi}: HI {hi} overflows the int32 indices kernels take (at most "
                             f"{INT32_MAX})")
        return DistSpec(field, "uniform", (lo, hi))
    if kind == "zipf" and not sep:
        return DistSpec(field, "zipf", 1.0)
    if not arg:
        raise ValueError(f"{kind} needs a parameter ({kind}:VALUE)")
    v = _float(arg, {"lognormal": "SIGMA", "zipf": "A", "accept": "RATE"}[kind])
    if kind == "lognormal" and not 0 < v <= 4:
        raise ValueError(f"lognormal SIGMA must be in (0, 4], got {arg}")
    if kind == "zipf" and not 0 < v <= 4:
        raise ValueError(f"zipf A must be in (0, 4], got {arg}")
    if kind == "accept" and not 0 <= v <= 1:
        raise ValueError(f"accept RATE must be in [0, 1], got {arg}")
    return DistSpec(field, kind, v)


def max_kv_len(text: str) -> int | None:
    """The longest KV length a kv_dist spec itself allows a request (uniform: HI), None where the spec carries
    no length (fixed, lognormal and zipf spread kv_len; a file's lengths are read when the batch is drawn)."""
    spec = parse_dist(text, "kv_dist")
    return spec.arg[1] if spec.kind == "uniform" else None


def parse_skip_softmax(text) -> str:
    """`off` or a positive threshold scale factor (FlashInfer's skip_softmax_threshold_scale_factor; the
    threshold is the factor divided by the context length); ValueError otherwise."""
    t = text.strip().lower() if isinstance(text, str) else None
    if t == "off":
        return "off"
    try:
        v = parse_float(t) if t is not None else float("nan")
    except ValueError:
        raise ValueError(f"expected 'off' or a positive number, got {text!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"expected 'off' or a positive number, got {text!r}")
    return f"{v:g}"


def parse_max_seq_len(text) -> str:
    """`tight` (the batch's longest sequence) or `context:N` (what SGLang passes: the model's context
    length); ValueError otherwise."""
    t = text.strip().lower() if isinstance(text, str) else None
    if t == "tight":
        return "tight"
    if t is not None and t.startswith("context:") and re.fullmatch(r"[0-9]+", t[8:].strip()) and 0 < int(t[8:]) <= INT32_MAX:
        return f"context:{int(t[8:])}"
    raise ValueError(f"expected 'tight' or 'context:N' (N a positive int32), got {text!r}")


def read_lengths_file(path: str, field: str, where: str = "scenario") -> list[int]:
    """A CSV (any commas/newlines) or JSON list of positive integers."""
    text = files.read_text(Path(path).expanduser(), f"{where}: {field}: cannot read {path}", files.LENGTHS_MAX)
    if text.lstrip()[:1] in ("[", "{"):
        try:
            values = files.loads(text)
        except files.JSONProblem as e:
            raise BadInput(f"{where}: {field}: {path} is not a JSON list: {e}") from None
        if not isinstance(values, list):
            raise BadInput(f"{where}: {field}: {path} is not a JSON list")
    else:
        values = [t for t in re.split(r"[,\s]+", text.strip()) if t]
    if not values:
        raise BadInput(f"{where}: {field}: {path} holds no lengths")
    if len(values) > MAX_FILE_LENGTHS:
        raise BadInput(f"{where}: {field}: {path} holds more than {MAX_FILE_LENGTHS} lengths")
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, str) and re.fullmatch(r"-?[0-9]+", v))):
            raise BadInput(f"{where}: {field}: {path}: value {i + 1} is not an integer: {v!r}")
        n = int(v)
        if n < 1:
            raise BadInput(f"{where}: {field}: {path}: value {i + 1} is {n}; lengths must be >= 1")
        if n > INT32_MAX:
            raise BadInput(f"{where}: {field}: {path}: value {i + 1} is {n}; beyond int32")
        out.append(n)
    return out


def _from_file(spec: DistSpec, bs: int, where: str) -> list[int]:
    vals = read_lengths_file(spec.arg, spec.field, where)
    if len(vals) < bs:
        raise BadInput(f"{where}: {spec.field}: {spec.arg} holds {len(vals)} lengths; batch_size {bs} needs {bs}")
    return vals[:bs]


def _rescale(weights: np.ndarray, total: int, floor: int) -> list[int]:
    """Integers >= floor proportional to weights summing to exactly `total` (largest remainders)."""
    n = len(weights)
    spare = total - floor * n
    if spare <= 0:
        return [floor] * n
    share = weights / weights.sum() * spare
    base = np.floor(share).astype(np.int64)
    rest = int(spare - base.sum())
    order = np.argsort(-(share - base), kind="stable")
    base[order[:rest]] += 1
    return [int(floor + b) for b in base]


def kv_lengths(spec: DistSpec, batch_size: int, kv_len: int, q_len: int, seed: int = 0,
               where: str = "scenario") -> list[int]:
    """Each request's KV length (seq_lens, including its new tokens)."""
    rng = np.random.default_rng([seed, 0x6B76])
    if spec.kind == "fixed":
        return [kv_len] * batch_size
    if spec.kind == "file":
        return _from_file(spec, batch_size, where)
    if spec.kind == "uniform":
        lo, hi = spec.arg
        return [max(q_len, int(x)) for x in rng.integers(lo, hi + 1, size=batch_size)]
    total = batch_size * kv_len
    if spec.kind == "lognormal":
        sigma = float(spec.arg)
        weights = rng.lognormal(mean=0.0, sigma=sigma, size=batch_size)
    else:  # zipf: rank r gets 1 / r**A, ranks shuffled over the batch
        weights = 1.0 / np.arange(1, batch_size + 1, dtype=np.float64) ** float(spec.arg)
        rng.shuffle(weights)
    return _rescale(weights, total, floor=q_len)


def q_lengths(spec: DistSpec, batch_size: int, q_len: int, seed: int = 0, where: str = "scenario") -> list[int]:
    """Each request's number of query tokens (1 .. q_len)."""
    rng = np.random.default_rng([seed, 0x7164])
    if spec.kind == "fixed":
        return [q_len] * batch_size
    if spec.kind == "file":
        vals = _from_file(spec, batch_size, where)
        worst = max(vals)
        if worst > q_len:
            raise BadInput(f"{where}: q_dist: {spec.arg} has a q length of {worst} above q_len {q_len}")
        return vals
    # accept:RATE: draft k+1 is only looked at when drafts 1..k were accepted
    accepted = rng.random((batch_size, max(q_len - 1, 0))) < float(spec.arg)
    run = np.cumprod(accepted, axis=1).sum(axis=1) if q_len > 1 else np.zeros(batch_size, dtype=np.int64)
    return [int(1 + a) for a in run]


@dataclass(frozen=True)
class BatchLengths:
    """One batch's per-request lengths; kv includes each request's q tokens, as engines pass seq_lens."""

    kv: tuple[int, ...]
    q: tuple[int, ...]

    def __post_init__(self):
        if len(self.kv) != len(self.q):
            raise ValueError("kv and q lengths differ in batch size")

    @property
    def uniform_q(self) -> bool:
        return len(set(self.q)) <= 1

    @property
    def total_q(self) -> int:
        return sum(self.q)

    @property
    def total_kv(self) -> int:
        return sum(self.kv)

    @property
    def max_q(self) -> int:
        return max(self.q)

    def padded_kv(self) -> tuple[int, ...]:
        """seq_lens when every request is padded to max_q tokens (the padding is appended after a
        request's real tokens and has KV slots, as in a CUDA-graph engine's verify batch)."""
        m = self.max_q
        return tuple(k + m - q for k, q in zip(self.kv, self.q))

    def summary(self) -> dict:
        return {**length_summary("kv", self.kv), **length_summary("q", self.q)}


def length_summary(prefix: str, lengths) -> dict:
    vals = [int(x) for x in lengths]
    digest = hashlib.sha1(",".join(map(str, vals)).encode()).hexdigest()[:12]
    return {f"{prefix}_mean": float(np.mean(vals)), f"{prefix}_max": max(vals), f"{prefix}_min": min(vals),
            f"{prefix}_hash": digest}


def batch_lengths(kv_dist: str, q_dist: str, batch_size: int, kv_len: int, q_len: int, seed: int = 0,
                  where: str = "scenario") -> BatchLengths:
    """Draw one batch; refuses a request whose q length exceeds its KV length."""
    kv_spec, q_spec = parse_dist(kv_dist, "kv_dist", where), parse_dist(q_dist, "q_dist", where)
    q = q_lengths(q_spec, batch_size, q_len, seed, where)
    kv = kv_lengths(kv_spec, batch_size, kv_len, q_len, seed, where)
    for i, (k, n) in enumerate(zip(kv, q)):
        if n > k:
            raise BadInput(f"{where}: q_dist: request {i} has {n} query tokens but a KV length of {k} "
                           f"(kv_dist {kv_spec.text}): seq_lens include the new tokens")
    return BatchLengths(tuple(kv), tuple(q))
