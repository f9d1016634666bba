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
        out += engine_form_lines(runs, ranked)
    return out


# the engines' own per-batch-size forms (read from the released sources)
VLLM_FORM_CITE = ("vLLM 0.34.0 num_speculative_tokens_per_batch_size, config/speculative.py:570-575: "
                  "[start, end, tokens] inclusive ranges from 1, checked by v1/spec_decode/dynamic/utils.py:7-74")
VLLM_DP_CITE = "config/vllm.py:1031-1048"
SGLANG_FORM_CITE = ("SGLang 0.5.23 --speculative-adaptive: one candidate step count per batch-size slot, a batch takes "
                    "the slot at or below it (speculative/adaptive_spec_params.py:103-139, 342-358)")
SGLANG_TOPK_CITE = "speculative/adaptive_spec_params.py:75-79"


def schedule(ranked: list[Ranked]) -> list[tuple[int, int, int]]:
    """vLLM's num_speculative_tokens_per_batch_size from the best config at each measured batch size: each measured
    size's choice holds up to the next one measured (the first range starts at 1, as vLLM requires; past the last
    range vLLM carries its value on); adjacent ranges of one value merged."""
    pts = [(rk.batch_size, int(rk.order[0][0].draft_tokens or 0)) for rk in ranked]
    out: list[list[int]] = []
    for i, (bs, k) in enumerate(pts):
        start = 1 if i == 0 else bs
        end = pts[i + 1][0] - 1 if i + 1 < len(pts) else bs
        if out and out[-1][2] == k:
            out[-1][1] = end
        else:
            out.append([start, end, k])
    return [tuple(x) for x in out]


def vllm_config(ranked: list[Ranked]) -> dict:
    """The --speculative-config keys that choose the draft tokens per batch size (num_speculative_tokens is the
    largest: vLLM caps each range's value at it, v1/spec_decode/dynamic/utils.py:77-148)."""
    sched = schedule(ranked)
    return {"num_speculative_tokens": max(k for *_, k in sched),
            "num_speculative_tokens_per_batch_size": [list(x) for x in sched]}


def sglang_adaptive(ranked: list[Ranked]) -> dict[str, dict] | None:
    """SGLang's --speculative-adaptive-config JSON pinning the best chain's steps at each measured batch size (one
    candidate per slot: the acceptance EMA has nothing to move to); None unless every ranked config is a chain
    (SGLang's adaptive takes topk 1 only)."""
    if any((r.topk or 0) != 1 for rk in ranked for r, _ in rk.order):
        return None
    cfg: dict[str, dict] = {}
    last = None
    for rk in ranked:
        steps = int(rk.order[0][0].steps or 0)
        if steps != last:
            cfg[str(rk.batch_size)] = {"candidate_steps": [steps]}
            last = steps
    first = ranked[0].batch_size
    if str(first) in cfg and first != 1:  # a smaller batch takes the smallest slot anyway; said from 1
        cfg = {("1" if k == str(first) else k): v for k, v in cfg.items()}
    return cfg


def engine_form(runs: list[SpecRun], ranked: list[Ranked]) -> dict | None:
    """The per-batch-size choice as the engine takes it: {"engine", "flags", "config", "cite"} (SGLang adds the
    file's JSON), or {"refused": why} where the engine has no form for it; None when one config wins everywhere."""
    import json

    if len({rk.order[0][0].label for rk in ranked}) < 2:
        return None
    if runs[0].engine == "vllm":
        cfg = vllm_config(ranked)
        return {"engine": "vllm", "config": cfg, "cite": VLLM_FORM_CITE,
                "flags": f"--speculative-config '{json.dumps(cfg)}'"}
    cfg = sglang_adaptive(ranked)
    if cfg is None:
        return {"engine": "sglang", "refused": f"SGLang's --speculative-adaptive takes topk 1 only "
                f"({SGLANG_TOPK_CITE}) and a server runs one tree: no per-batch-size form for these configs"}
    first = next(iter(cfg.values()))["candidate_steps"][0]
    return {"engine": "sglang", "config": cfg, "cite": SGLANG_FORM_CITE,
            "flags": f"--speculative-adaptive --speculative-adaptive-config ADAPTIVE.json --speculative-eagle-topk 1 "
                     f"--speculative-num-steps {first}"}


def engine_form_lines(runs: list[SpecRun], ranked: list[Ranked]) -> list[str]:
    import json

    form = engine_form(runs, ranked)
    if form is None:
        return []
    if "refused" in form:
        return [f"  no one config is best at every batch size; {form['refused']}"]
    if form["engine"] == "vllm":
        return [f"  no one num_speculative_tokens is best at every batch size: set it per batch size ({form['cite']}; "
                "each measured size's choice holds up to the next one measured):",
                f"    flags: {form['flags']}",
                f"    (put your method and model in the same JSON; vLLM drops the schedule under data parallelism, "
                f"{VLLM_DP_CITE})"]
    return [f"  no one config is best at every batch size: set the steps per batch size ({form['cite']}; not "
            "with DP attention):",
            f"    ADAPTIVE.json: {json.dumps(form['config'])}",
            f"    flags: {form['flags']}"]
