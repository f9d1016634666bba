"""Reading values out of rows that came through JSON, Parquet, CSV or a hand edit: one definition each."""
from __future__ import annotations

import math

INT32_MAX = 2**31 - 1  # the index tensors (seq_lens, indptrs, page tables) are int32, as in the engines
SEED_MAX = 2**63 - 1  # a seed: numpy's and torch's generators take 0..2**63-1 (sweep, report, server-bench)


def int_in(v, lo: int | None = None, hi: int | None = None) -> bool:
    """v is an int (a bool is not) in lo..hi, a bound None meaning none. What an option given from Python must be
    where the command's flag is an integer or an integer range."""
    return (isinstance(v, int) and not isinstance(v, bool) and (lo is None or lo <= v)
            and (hi is None or v <= hi))


def max_int_digits() -> int:
    """The most digits int() converts (Python's limit, 4,300 by default): a longer integer is refused by name."""
    import sys

    return (sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 0) or 4300


def long_int(digits: str) -> str | None:
    """Why an integer literal cannot be read (`an integer of 5000 digits, ...`), None when it can."""
    n = sum(c.isdigit() for c in digits)
    return f"an integer of {n} digits, more than the {max_int_digits():,} kbench reads" if n > max_int_digits() \
        else None


def ascii_digits(text: str) -> bool:
    """Digits 0-9 only, blanks around allowed (str.isdecimal and int() take '١٢' and '６４' too)."""
    s = str(text).strip()
    return s.isascii() and s.isdecimal()


def parse_float(text) -> float:
    """A number as kbench's inputs write one: ASCII, without Python's digit separators (float() also takes '١٢',
    '６４' and '1_000'); ValueError otherwise, as float() raises it. nan and inf are the caller's to refuse."""
    s = str(text).strip()
    if not s.isascii() or "_" in s:
        raise ValueError(f"not a number written in ASCII digits: {text!r}")
    return float(s)


def finite(v) -> float | None:
    """v as a finite float, or None (missing, NaN, infinite, not a number)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def number(v) -> float | None:
    """v as a float, or None (missing, NaN, not a number); an infinite value stays infinite."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def status(rec: dict) -> str:
    """A row's status; a row without one (an older or foreign writer) counts as ok."""
    return status_value(rec.get("status"))


def status_value(s) -> str:
    """A status cell's value as status() reads it: missing (None, NaN) is ok."""
    return "ok" if s is None or s != s else str(s)


def json_safe(v):
    """NaN and infinities as None (JSON has neither), through dicts and lists."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, list):
        return [json_safe(x) for x in v]
    return v
