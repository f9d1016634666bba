"""Speculative configurations of one server ranked by measured tokens per second per batch size (issue 53, Do 4).

Input: `kbench server-bench` runs of the same model on the same engine, each with another speculative config (topk,
steps, draft tokens). Each run's config is read from what it recorded: SGLang's resolved server info
(speculative_eagle_topk, speculative_num_steps, speculative_num_draft_tokens), vLLM's speculative counters (draft
tokens per draft = num_speculative_tokens). Per batch size, the configs are ranked by the measured output throughput
(tokens/s, the mean over the run's cases at that batch size); two configs whose difference is inside the measured
noise (each case's repeats: the half-IQRs added) tie, and a difference with no repeats to judge it by is called only
above NO_NOISE_PCT.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from kbench.errors import BadInput

NO_NOISE_PCT = 5.0  # without repeats, differences under this are not called


@dataclass
class SpecRun:
    path: str
    engine: str
    model: str
    topk: int | None
    steps: int | None
    draft_tokens: int | None
    by_batch: dict[int, tuple[float, float | None]] = field(default_factory=dict)  # bs -> (tokens/s, half-IQR)
    accept: dict[int, float] = field(default_factory=dict)  # bs -> acceptance length

    @property
    def label(self) -> str:
        if self.engine == "vllm":
            return f"num_speculative_tokens {self.draft_tokens}"
        return f"topk {self.topk}, {self.steps} steps, {self.draft_tokens} draft tokens"

    def flags(self) -> str:
        if self.engine == "vllm":
            return f"--speculative-config '{{\"num_speculative_tokens\": {self.draft_tokens}}}'"
        return (f"--speculative-eagle-topk {self.topk} --speculative-num-steps {self.steps} "
                f"--speculative-num-draft-tokens {self.draft_tokens}")


def _int(v) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 else None


def read_spec_run(path: str | Path, engine: str) -> SpecRun:
    from kbench.runs.store import load_run

    run = load_run(path)
    if run.kind != "server-bench":
        raise BadInput(f"--spec-runs {path}: a kbench server-bench run, not a {run.kind} run")
    m = run.manifest
    backend = str(m.get("backend") or "")
    if backend != engine:
        raise BadInput(f"--spec-runs {path}: a {backend or 'unknown'} server's run; --engine is {engine}")
    rows = [r for r in run.rows.to_dict("records") if r.get("status") == "ok"]
    if not rows:
        raise BadInput(f"--spec-runs {path}: no case of the run succeeded")
    info = m.get("server") if isinstance(m.get("server"), dict) else {}
    if engine == "sglang":
        topk, steps, drafts = (_int(info.get(k)) for k in ("speculative_eagle_topk", "speculative_num_steps",
                                                            "speculative_num_draft_tokens"))
        if not (topk and steps and drafts):
            raise BadInput(f"--spec-runs {path}: its server info records no speculative config (speculative_eagle_topk, "
                           "speculative_num_steps, speculative_num_draft_tokens): a server without speculative "
                           "decoding, or a run from before kbench kept them")
    else:
        d = sum(float(r.get("spec_drafts") or 0) for r in rows)
        t = sum(float(r.get("spec_draft_tokens") or 0) for r in rows)
        if not d or not t:
            raise BadInput(f"--spec-runs {path}: the server's counters show no speculative drafts (vllm:spec_decode_*"
                           "): a server without speculative decoding")
        topk, steps, drafts = 1, None, round(t / d)
    sr = SpecRun(str(path), engine, str(m.get("model") or ""), topk, steps, drafts)
    per: dict[int, list[dict]] = {}
    for r in rows:
        per.setdefault(int(r["batch_size"]), []).append(r)
    for bs, rs in per.items():
        tps = [float(r["output_throughput"]) for r in rs if r.get("output_throughput")]
        if not tps:
            continue
        halves = []
        for r in rs:
            s = [float(x) for x in (r.get("output_throughput_samples") or [])]
            if len(s) >= 3:
                q = statistics.quantiles(s, n=4)
                halves.append((q[2] - q[0]) / 2)
        sr.by_batch[bs] = (sum(tps) / len(tps), max(halves) if len(halves) == len(rs) else None)
        acc = [float(r["acc_length"]) for r in rs if r.get("acc_length") and float(r["acc_length"]) > 0]
        if acc:
            sr.accept[bs] = sum(acc) / len(acc)
    return sr


@dataclass
class Ranked:
    batch_size: int
    order: list[tuple[SpecRun, float]]  # fastest first
    tied: list[SpecRun]  # those within the noise of the fastest (the fastest included)
    called_by: str  # "noise" (repeats) | f"no repeats: >= {NO_NOISE_PCT}%"


def rank(paths: list[str], engine: str) -> tuple[list[SpecRun], list[Ranked]]:
    runs = [read_spec_run(p, engine) for p in paths]
    if len(runs) < 2:
        raise BadInput("--spec-runs: two or more server-bench runs of the same server, one per speculative config")
    models = {r.model.rstrip("/").split("/")[-1] for r in runs}
    if len(models) > 1:
        raise BadInput(f"--spec-runs: runs of different models ({', '.join(sorted(models))}): rank configs of one "
                       "server")
    out = []
    for bs in sorted({b for r in runs for b in r.by_batch}):
        have = sorted(((r, r.by_batch[bs][0]) for r in runs if bs in r.by_batch), key=lambda x: -x[1])
        lead, top = have[0]
        noisy = all(r.by_batch[bs][1] is not None for r, _ in have)
        tied = []
        for r, v in have:
            if noisy:
                near = top - v <= (lead.by_batch[bs][1] or 0) + (r.by_batch[bs][1] or 0)
            else:
                near = (top - v) / top * 100 < NO_NOISE_PCT
            if near:
                tied.append(r)
        out.append(Ranked(bs, have, tied, "noise" if noisy else f"no repeats: >= {NO_NOISE_PCT:g}%"))
    return runs, out


def lines(runs: list[SpecRun], ranked: list[Ranked]) -> list[str]:
    out = [f"speculative configs of {runs[0].model} ({runs[0].engine}) by measured output tokens/s per batch size:"]
    for rk in ranked:
        lead = rk.order[0][0]
        row = "; ".join(f"{r.label}: {v:,.0f}" + (f" (acc {r.accept[rk.batch_size]:.2f})"
                                                   if rk.batch_size in r.accept else "") for r, v in rk.order)
        tie = (f" (tied with {', '.join(r.label for r in rk.tied if r is not lead)}: within "
               + ("the measured noise" if rk.called_by == "noise" else f"{NO_NOISE_PCT:g}%, no repeats") + ")"
               if len(rk.tied) > 1 else "")
        out.append(f"  bs {rk.batch_size}: best {lead.label}{tie}; {row}")
        out.append(f"    flags: {lead.flags()}")
    bests = {rk.order[0][0].label for rk in ranked}
    if len(bests) > 1:
        note = ("no one config is best at every batch size: SGLang runs one per server (or chooses adaptively, "
                "--speculative-adaptive)" if runs[0].engine == "sglang" else
                "no one num_speculative_tokens is best at every batch size: vLLM 0.34 takes a choice per batch size "
                "(num_speculative_tokens_per_batch_size in --speculative-config, config/speculative.py:570-575); "
                "kbench has not read that release's source, so it prints the mapping rather than the flag: "
                + ", ".join(f"bs {rk.batch_size} -> {rk.order[0][0].draft_tokens}" for rk in ranked))
        out.append("  " + note)
    return out
