"""Synthetic sweep runs for the recommend tests: trtllm-decode and fa2-prefill with times from known formulas, so
the tests compute the expected prices independently of kbench's code."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from report_synth import case, row, write_run

DECODE, FA2, FA3 = "trtllm-decode", "fa2-prefill", "fa3-prefill"
BS, QS, KVS = (1, 8), (2, 4, 8), (1024, 4096)
B200 = {"name": "NVIDIA B200", "sm": 100}


def t_decode(bs: int, q: int, kv: int) -> float:
    """The decode kernel: linear in KV read, twice as slow past q 4 (its step)."""
    return bs * kv / 1024 * (1.0 if q <= 4 else 2.0)


def t_fa2(bs: int, q: int, kv: int) -> float:
    """The context kernel: slower at batch 1, faster at batch 8, flat in q."""
    return bs * kv / 1024 * (1.5 if bs == 1 else 0.8)


def t_fa3(bs: int, q: int, kv: int) -> float:
    return 3 * t_fa2(bs, q, kv)


TIMES = {DECODE: t_decode, FA2: t_fa2, FA3: t_fa3}


def known_rows(bss=BS, qs=QS, kvs=KVS, kernels=(DECODE, FA2, FA3), **case_kw):
    return [row(k, case(bs, q, kv, **case_kw), TIMES[k](bs, q, kv), rel=0.001)
            for bs in bss for q in qs for kv in kvs for k in kernels]


def known_run(path: Path, rows=None, device: dict | None = None) -> Path:
    return write_run(path, rows if rows is not None else known_rows(),
                     **({"device": dict(device)} if device else {}))


def recommend_cli(*args):
    from kbench.cli.recommend_cmd import recommend_cmd

    return CliRunner().invoke(recommend_cmd, [str(a) for a in args], env={"COLUMNS": "250"})


def export_cli(*args):
    from kbench.cli.recommend_cmd import export_cmd

    return CliRunner().invoke(export_cmd, [str(a) for a in args])
