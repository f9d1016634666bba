"""The recommendation as JSON (for machines), markdown (a PR comment) and plain rows (the CLI's rich table); the
table of engine settings with its citations."""
from __future__ import annotations

from kbench.recommend.price import OVERLAP_RULE, Recommendation, SettingResult, describe_beyond
from kbench.report.markdown import table as md_table
from kbench.text import markdown as md
from kbench.recommend.settings import FAMILY_NAME, STEP_LABEL, STEPS, Engine


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}" if v >= 10 else f"{v:.2f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"+{v:.1f}%" if v > 0.05 else "0.0%" if v > -0.05 else f"{v:.1f}%"


def _layers(rec: Recommendation) -> str:
    asked = {s for b in rec.workload.batches for s in b.steps}
    return " + ".join(f"{STEP_LABEL[s]}" + (f" x {rec.layers[s]} layers" if rec.layers[s] != 1 else "")
                      for s in STEPS if rec.layers[s] and s in asked)


def _per_step(rec: Recommendation, total: float | None) -> float | None:
    return None if total is None else total / rec.workload.total_weight


def command(rec: Recommendation, r: SettingResult | None = None) -> str | None:
    """The server command line that reproduces what was priced for setting r (the best by default): the backend
    flags, the speculative config of the workload, the page size measured and the overlap mode priced."""
    from kbench.recommend.flags import command_line, server_flags

    r = r or rec.best
    if r is None or rec.spec is None or rec.page_size is None:
        return None
    if rec.current is not None:  # the user's own line, with this setting's backend flags (theirs kept if it is theirs)
        from kbench.recommend.resolve import edited_line

        return edited_line(rec.current, None if r is rec.you_run else r.setting, rec.cap_flag,
                           page=_moved_page(rec, r))[0]
    argv = server_flags(rec.engine.engine, r.setting.flags, rec.spec, _moved_page(rec, r) or rec.page_size,
                        overlap=rec.overlap,
                        algorithm="mtp" if r.setting.attention == "mla" else "eagle")
    if rec.cap_flag is not None:
        from kbench.recommend.resolve import CAP_FLAG

        argv += [CAP_FLAG[rec.engine.engine], str(rec.cap_flag)]
    argv += spread_flags(rec)
    line = command_line(rec.engine.engine, argv)
    return (r.setting.env_text + " " + line) if r.setting.env else line


# the flags that say what the rows priced are of: the KV-cache dtype, and the TP a preset's heads are per rank of
KV_FLAG = {"sglang": {"fp8": "fp8_e4m3"}, "vllm": {"fp8": "fp8"}}
TP_FLAG = {"sglang": "--tp-size", "vllm": "--tensor-parallel-size"}


def spread_flags(rec: Recommendation) -> list[str]:
    """The flags kbench's own line needs to run what its rows measured (no --current): `--kv-cache-dtype` for fp8
    rows (SGLang fp8_e4m3, vLLM fp8: kbench's fp8 rows are e4m3), `--tp-size N` / `--tensor-parallel-size N` for the
    rows of a TP preset (deepseek-v3-tp8: 16 heads per GPU, the model at TP8)."""
    from kbench.recommend.ranks import preset_tp

    out = []
    kv = KV_FLAG[rec.engine.engine].get(rec.kv_dtype or "")
    if kv:
        out += ["--kv-cache-dtype", kv]
    tp = preset_tp(rec.source.model)
    if tp > 1:
        out += [TP_FLAG[rec.engine.engine], str(tp)]
    return out


def _moved_page(rec: Recommendation, r: SettingResult) -> int | None:
    """The page the engine moves setting r to (None: it runs at the page of the user's line, or of kbench's)."""
    mine = rec.current.page_size if rec.current is not None else rec.page_size
    return r.runs_at if r.runs_at is not None and r.runs_at != mine else None


def command_or_refusal(rec: Recommendation, r: SettingResult) -> tuple[str | None, str | None]:
    """(the command line for setting r, None), or (None, why the engine would refuse it for this workload: a
    trtllm_mha setting for a draft tree): each setting of --json's list, not only the best, which is valid."""
    from kbench.errors import BadInput

    try:
        return command(rec, r), None
    except BadInput as e:
        return None, str(e).replace("'(given)'", repr(r.setting.id))


def headline(rec: Recommendation, whole=None) -> list[str]:
    """The answer in a few lines (the same words in every format). whole: the whole step
    (kbench.recommend.step.StepAnswer, from --layers): the step, its saving and tokens per second are said here;
    without it, a saving is said to be attention's share only."""
    best = rec.best
    from kbench.recommend.ranks import preset_tp, run_heads_words

    tp_words = run_heads_words(rec.source)
    lines = [f"{rec.engine.label} on {rec.source.device_label}, {FAMILY_NAME[rec.family]}: "
             f"{len(rec.workload.batches)} batch kind(s) from {rec.workload.source}, priced from {rec.source.label}"
             + (f" ({tp_words}: the line runs TP{preset_tp(rec.source.model)}, and a line on fewer GPUs is priced on "
                "rows of its own heads per GPU)" if tp_words else ""),
             f"per step: host work once + {_layers(rec)}; host work and GPU {OVERLAP_WORDS[rec.overlap]} "
             f"({rec.overlap_from})" + (f"; host work timed on {rec.host_cpus} CPUs ({rec.host_cpu})"
                                        if rec.host_cpus else "")]
    eo = _per_step(rec, rec.engine_oracle_us)
    unit = "" if rec.layers_known else " (per attention layer: no model preset known; give --model or --verify-layers)"
    mine = rec.you_run
    if rec.current is not None:
        from kbench.recommend.resolve import edited_line

        cur = rec.current
        desc = (f"{cur.backends['verify']} verify / {cur.backends['draft_extend']} draft extend, page "
                f"{cur.page_size}, topk {cur.spec.topk}, {cur.spec.steps} steps, {cur.spec.q_len} draft tokens"
                + _rank_words(rec) + f", cap {cur.cap}, host work "
                + ("overlapped" if cur.overlap == "max" and not getattr(rec.plan, "eager", False) else "not overlapped")
                + (f"; eager ({rec.plan.eager_flag}): no CUDA graphs, priced on eager routes"
                   if getattr(rec.plan, "eager", False) else ""))
        if mine is None:
            lines.append(f"you run: {desc}: no setting of kbench's table is that configuration, so it is not priced")
        elif mine.total_us is None:
            lines.append(f"you run: {mine.setting.id} ({desc}): not priced: {mine.unpriced}")
        else:
            lines.append(f"you run: {mine.setting.id} ({desc}): {_us(mine.per_step_us)} us of attention per step"
                         f"{unit}" + _step_words(whole, mine) + _page_words(rec, mine))
    if best is None:
        bound = next((r for r in rec.results if r.bound_us is not None), None)
        routes_here = any(c.get("kernels_host_us") for g in rec.source.policy.get("groups", []) for c in g["cells"])
        why = ("the engines' routes have no rows here (measure them: kbench sweep -s engine-routes, or --kernels "
               "routes)" if not routes_here else
               "each is refused or unmeasured for this configuration (below: why)")
        lines.append(f"no setting of this engine can be priced from these measurements: {why}"
                     + (f"; lower bounds from the plain kernels: {bound.setting.id} >= "
                        f"{_us(bound.bound_us / rec.workload.total_weight)} us per step, no host work counted"
                        if bound else ""))
        return lines
    if rec.current is not None:
        if mine is best and rec.cap_flag is None:
            lines.append("what you run is the best setting here: nothing to change")
            return lines + _accept_words(whole) + _routing_line(rec, eo)
        if mine is best:  # its backends stay; only the cap keeps the priced batch from being cut to the engine's
            from kbench.recommend.resolve import CAP_FLAG

            line, diff = edited_line(cur, None, rec.cap_flag)
            lines.append(f"what you run is the best setting here: keep its backends; it runs the workload's batch of "
                         f"{rec.cap_flag} only with {CAP_FLAG[rec.engine.engine]} {rec.cap_flag} (it resolves to "
                         f"{cur.cap})")
            lines.append(f"set: {line}")
            lines.append("flags: " + "; ".join(f"{k} {', '.join(v)}" for k, v in diff.items() if v))
            return lines + _accept_words(whole) + _routing_line(rec, eo)
    lines.append(f"set: {command(rec) or best.setting.flags}")
    lines.append(f"  -> {_us(best.per_step_us)} us of attention per step{unit} (GPU {_us(_per_step(rec, best.gpu_us))}, "
                 f"host {_us(_per_step(rec, best.host_us))})" + _step_words(whole, best) + _page_words(rec, best)
                 + (f"; tied within the measured noise with {', '.join(best.tied_with)}: the engine's default, then "
                    "the fewest flags, wins a tie" if best.tied_with else ""))
    if rec.current is not None and mine is not None and mine.total_us is not None:
        save = mine.per_step_us - best.per_step_us
        lines.append(_saving_words(whole, rec) or f"  saves {_us(save)} us per step over what you run, "
                     f"{save / mine.per_step_us:.1%} of attention alone" + NOT_THE_STEP)
    if rec.current is not None:
        _, diff = edited_line(rec.current, best.setting, rec.cap_flag, page=_moved_page(rec, best))
        lines.append("flags: " + "; ".join(f"{k} {', '.join(v)}" for k, v in diff.items() if v))
    default = rec.default
    dwhy = rec.default_why
    if default is best and rec.current is not None:  # the user runs another setting: the line above switches
        lines.append(f"the best setting is the engine's default ({best.setting.id}): your line without its backend "
                     "flags runs it too")
    elif default is best:
        lines.append(f"the default ({best.setting.id}) is the best setting here: nothing to switch (the command "
                     "spells out the configuration priced)")
    elif default is not None and default is not mine:
        if default.total_us is not None:
            save = default.per_step_us - best.per_step_us
            other = _page_one_default(rec)  # the default moves with the page: say which page's was priced
            at = f" at page {rec.page_size}" if other else ""
            lines.append(f"the default{at} ({default.setting.id}) costs {_us(default.per_step_us)} us per step: "
                         f"switching saves {_us(save)} us per step, {save / default.per_step_us:.1%}"
                         + (" of attention alone" + NOT_THE_STEP if whole is None else ""))
            said = None if mine is not None and mine.total_us is not None else _saving_words(whole, rec)
            if said:  # the default's step against the best's (what you run is not priced)
                lines.append(said)
            lines += other
        else:
            lines.append(f"the default ({default.setting.id}) is not priced: {default.unpriced}")
    if default is not None and dwhy:
        lines.append(f"  the default is what {rec.engine.engine} resolves with no backend flag at page {rec.page_size}, "
                     f"topk {rec.spec.topk}: {dwhy}")
    lines += switch_lines(rec)
    return lines + _accept_words(whole) + _routing_line(rec, eo)


NOT_THE_STEP = " (whole step: --layers RUN)"  # without --layers a saving is attention's share only: said so


def _step_words(whole, r: SettingResult) -> str:
    """'; the whole step 17,855.6 us, 2,688 tokens/s' for setting r when --layers priced its step; '' otherwise."""
    s = whole.of(r.setting.id) if whole is not None else None
    if s is None:
        return ""
    tps = s.tokens_per_s(whole.batch_size, whole.accept)
    return (f"; the whole step {_us(s.total_us)} us" + (" without its draft passes' attention" if s.missing else "")
            + (f", {tps:,.0f} tokens/s" if tps is not None else ""))


def _saving_words(whole, rec: Recommendation) -> str | None:
    """'  saves 5,656.2 us of a 17,397.2 us step: 32.5% of the whole step (attention alone: 64.2%), 1.48x tokens/s'
    (switching from what you run, or the default, to the best), when --layers priced both steps."""
    if whole is None:
        return None
    from kbench.recommend.step import compared, switch

    sw = switch(whole, rec)
    if sw is None:
        return None
    a, b = sw
    ta, tb, left = compared(a, b)
    save = ta - tb
    return (f"  saves {_us(save)} us of a {_us(ta)} us step: {save / ta:.1%} of the whole step (attention alone: "
            f"{(a.attention_us - b.attention_us) / a.attention_us:.1%}), {ta / tb:.2f}x tokens/s"
            + (" (draft passes' attention left out of both)" if left else ""))


def _accept_words(whole) -> list[str]:
    if whole is None or whole.accept is not None:
        return []
    return ["  tokens/s needs the acceptance: --accept-length N, or a server-bench run of this server"]


def _rank_words(rec: Recommendation) -> str:
    """', TP8: 16 heads per GPU' / ', DP attention over 8: 128 heads per GPU, batch / 8 each' (the --current line's
    spread, kbench.recommend.ranks); '' for one GPU."""
    plan = rec.plan
    if plan is None or (plan.tp == 1 and plan.dp == 1):
        return ""
    heads = plan.heads.split(":")[-1].split("/")[0] if plan.heads else "?"
    if plan.dp > 1:
        return f", TP{plan.tp} with DP attention over {plan.dp}: {heads} heads per GPU, batch / {plan.dp} each"
    return f", TP{plan.tp}: {heads} heads per GPU"


def _page_words(rec: Recommendation, r: SettingResult) -> str:
    """'; priced on page-64 rows: the run has none at page 1, where it runs' when a setting is priced at a page it
    does not run at (issue 52: never silently); '' otherwise."""
    runs = r.runs_at if r.runs_at is not None else (rec.current.page_size if rec.current is not None else None)
    if runs is None or r.page_size is None or runs == r.page_size:
        return ""
    return (f"; priced at page {r.page_size}, not at page {runs} where it runs: the run has no page-{runs} rows "
            f"(measure them: kbench sweep -s engine-routes --page-size {runs})")


def _page_one_default(rec: Recommendation) -> list[str]:
    """SGLang without --page-size runs page 1, where its default may be another backend than at the page priced
    (Hopper MHA: fa3 at page 1, flashinfer at page 64 with topk 1): said, so a saving over the page-P default is
    not read as one over the line most users start from."""
    if rec.current is not None or rec.engine.engine != "sglang" or rec.page_size in (None, 1) or rec.spec is None:
        return []
    from kbench.recommend.resolve import engine_default

    try:
        s1, _ = engine_default(rec.engine, rec.family, rec.default.setting.attention, rec.spec, 1)
    except Exception:  # noqa: BLE001 - a remark, never the answer
        return []
    if s1 is None or s1.id == rec.default.setting.id:
        return []
    best = " (the best setting here)" if rec.best is not None and s1.id == rec.best.setting.id else ""
    return [f"  that is SGLang's default with --page-size {rec.page_size}; a line without --page-size runs page 1, "
            f"where the default is {s1.id}{best}: not priced here (the run has no page-1 rows)"
            if not any(g.get("page_size") == 1 for g in rec.source.policy.get("groups", [])) else
            f"  that is SGLang's default with --page-size {rec.page_size}; a line without --page-size runs page 1, "
            f"where the default is {s1.id}{best}"]


def _routing_line(rec: Recommendation, eo) -> list[str]:
    lines = []
    gap = rec.gap_pct()
    if gap is not None:
        lines.append(f"per-shape routing among {rec.engine.engine}'s routes: {_us(eo)} us per step; the best single "
                     f"setting is {_pct(gap)} above it"
                     + (f" (any kbench kernel per shape, GPU time alone: "
                        f"{_us(_per_step(rec, rec.kbench_oracle_us))} us)" if rec.kbench_oracle_us else ""))
    return lines


def vs_default(rec: Recommendation, r: SettingResult) -> tuple[float, float] | None:
    """(us per step, share of the default's step) that switching from the engine's default to setting r saves
    (negative) or costs (positive); None when either is not priced or r is the default."""
    d = next((x for x in rec.results if x.default), None)
    if d is None or d is r or d.per_step_us is None or r.per_step_us is None:
        return None
    delta = r.per_step_us - d.per_step_us
    return delta, delta / d.per_step_us


def switch_lines(rec: Recommendation) -> list[str]:
    """On an MLA run: what switching from the default to each other priced setting saves or costs, per step and as
    a share of the default's step (issue 45: a DeepSeek user's question is whether to leave fa3 / FLASH_ATTN_MLA)."""
    d = next((x for x in rec.results if x.default), None)
    if d is None or d.per_step_us is None or d.setting.attention != "mla":
        return []
    out = []
    for r in rec.results:
        v = vs_default(rec, r)
        if v is None:
            continue
        delta, share = v
        out.append(f"  switching from {d.setting.id} to {r.setting.id}: {'saves' if delta < 0 else 'costs'} "
                   f"{_us(abs(delta))} us per step, {abs(share):.1%} of the default's attention")
    return out


OVERLAP_WORDS = {"max": "overlap (a step costs max(host, GPU); host work that waits for the GPU adds)",
                 "sum": "add (host + GPU)"}


def setting_rows(rec: Recommendation) -> tuple[list[str], list[list[str]]]:
    best = rec.best
    headers = ["setting", "flags", "verify", "draft extend", "host us/step", "GPU us/step", "us per step", "vs best",
               "vs per-shape routing"]
    rows = []
    for r in rec.results:
        vs = None if best is None or r.total_us is None else (r.total_us / best.total_us - 1) * 100
        if r.total_us is not None:
            price = _us(r.per_step_us) + (" (tie)" if r.tied_with else "")  # within noise of the best
        else:
            price = "not priced: " + r.unpriced + (
                f" (>= {_us(r.bound_us / rec.workload.total_weight)} us, GPU alone)" if r.bound_us is not None else "")
        rows.append([r.setting.id + (" (default)" if r.default else "") + (" (you run)" if r.you_run else ""),
                     (r.setting.env_text + " " if r.setting.env else "") + r.setting.flags,
                     r.kernels["verify"] or "not measured", r.kernels["draft_extend"] or "not measured",
                     _us(_per_step(rec, r.host_us)), _us(_per_step(rec, r.gpu_us)), price,
                     _pct(vs), _pct(rec.gap_pct(r)) if r.total_us is not None else "-"])
    return headers, rows


SCREEN_ROWS = 6  # priced settings the screen's table shows before `--all`


def screen_rows(rec: Recommendation) -> tuple[list[str], list[list[str]], list[str]]:
    """The answer's table on a screen: the priced settings only (fastest first, at most SCREEN_ROWS), in narrow
    columns (the flags are in the printed line and in `--all`), and the lines that stand for the rest: the
    settings not priced for the same reason as one line each, and the slower priced ones past SCREEN_ROWS."""
    best = rec.best
    headers = ["setting", "verify / draft extend", "host us", "GPU us", "us per step", "vs best"]
    priced = [r for r in rec.results if r.total_us is not None]
    rows = []
    for r in priced[:SCREEN_ROWS]:
        routes = r.kernels["verify"] if r.kernels["verify"] == r.kernels["draft_extend"] else \
            f"{r.kernels['verify']} / {r.kernels['draft_extend']}"
        rows.append([r.setting.id + (" (default)" if r.default else "") + (" (you run)" if r.you_run else ""),
                     routes, _us(_per_step(rec, r.host_us)), _us(_per_step(rec, r.gpu_us)),
                     _us(r.per_step_us) + (" (tie)" if r.tied_with else ""),
                     _pct((r.total_us / best.total_us - 1) * 100) if best is not None else "-"])
    rest = []
    more = priced[SCREEN_ROWS:]
    if more:
        rest.append(f"{_n(len(more), 'slower setting')} ({_pct((more[0].total_us / best.total_us - 1) * 100)} and "
                    f"more above the best): {_names([r.setting.id for r in more])}")
    by_reason: dict[str, list[SettingResult]] = {}
    for r in rec.results:
        if r.total_us is None:
            by_reason.setdefault(r.reason or r.unpriced, []).append(r)
    for why, rs in by_reason.items():
        tag = [r.setting.id + (" (you run)" if r.you_run else "") + (" (default)" if r.default else "") for r in rs]
        rest.append(f"{_n(len(rs), 'setting')} not priced, {why}: {_names(tag)}")
    return headers, rows, rest


def _n(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _names(ids: list[str], most: int = 3) -> str:
    """'a, b, c, ...; `--all` lists them' (the first few names of a collapsed list)."""
    if len(ids) <= most:
        return ", ".join(ids)
    return ", ".join(ids[:most]) + ", ...; `--all` lists them"


def screen_caveats(rec: Recommendation) -> list[str]:
    """The caveats a screen shows: those about what you run, the best and the default setting, and every caveat
    that is not about one setting; the count of the others (`--all` prints them all)."""
    shown = {r.setting.id for r in (rec.best, rec.you_run, rec.default) if r is not None}
    others = {r.setting.id for r in rec.results} - shown
    out, hidden = [], 0
    for c in caveats(rec):
        head = c.partition(": ")[0]
        ids = {i.strip() for i in head.replace(" is priced low", "").split(", ")}
        if ids and ids <= others:
            hidden += 1
            continue
        if ids & others and ids & shown:  # a note shared with other settings: name only those on screen
            c = ", ".join(i for i in head.split(", ") if i.strip() in shown) + ": " + c.partition(": ")[2]
        out.append(c)
    if hidden:
        out.append(f"{hidden} more note(s) on other settings: `--all` prints them")
    return out


def driver_rows(rec: Recommendation) -> tuple[list[str], list[list[str]]]:
    headers = ["shape", "step", "weight", "best setting's kernel (us)", "per-shape kernel (us)", "share of the gap"]
    rows = [[d.batch.describe(), STEP_LABEL[d.step], f"{d.weight_share:.1%}", f"{d.setting_kernel} ({_us(d.setting_us)})",
             f"{d.oracle_kernel} ({_us(d.oracle_us)})", f"{d.share:.0%}"] for d in rec.drivers]
    return headers, rows


def caveats(rec: Recommendation) -> list[str]:
    out = []
    if rec.extrapolated:
        w = sum(p.batch.weight for p in rec.extrapolated) / rec.workload.total_weight
        out.append(f"extrapolated: {len(rec.extrapolated)} batch kind(s), {w:.1%} of the weight, lie outside the "
                   "measured range and are priced at its edge: "
                   + "; ".join(f"{p.batch.describe()}: {describe_beyond(p)}" for p in rec.extrapolated[:4])
                   + ("; ..." if len(rec.extrapolated) > 4 else ""))
    if rec.interpolated_weight:
        out.append(f"interpolated: {rec.interpolated_weight:.1%} of the weight is priced at the nearest measured "
                   "neighbour (kbench select's rule), not at a measured point")
    for r in rec.results:
        if r.missing:
            out.append(f"{r.setting.id}: not priced, no time for " + "; ".join(r.missing[:3])
                       + ("; ..." if len(r.missing) > 3 else ""))
    best = rec.best
    if best is not None and best.priced_low:
        steps = " and ".join(STEP_LABEL[s] for s in best.priced_low)
        out.append(f"{best.setting.id} is priced low: the engine runs its {steps} on a costlier path than kbench "
                   "timed (see below): measure both on the server (--ab)")
    by_note: dict[str, list[str]] = {}
    for r in rec.results:
        for n in r.notes:
            by_note.setdefault(n, []).append(r.setting.id)
    for n, ids in by_note.items():
        out.append(f"{', '.join(ids)}: {n}")
    if rec.flashinfer and any(rt.flashinfer_below or rt.flashinfer_from for r in rec.results
                              for rt in r.setting.routes):
        given = getattr(rec.current, "flashinfer_version", None) if rec.current is not None else None
        out.append(f"FlashInfer {rec.flashinfer} assumed: "
                   + (f"{rec.engine.label}'s pin (give --flashinfer VERSION for the one your server runs)"
                      if rec.flashinfer == rec.engine.flashinfer and not given else
                      "your line's" if given == rec.flashinfer else "--flashinfer")
                   + "; the routes that depend on its version are taken for it")
    out += rec.notes
    if rec.current is not None:
        from kbench.recommend.resolve import shown

        hidden = shown(rec.current)[2]
        if hidden:
            out.append(f"the secrets of your line ({', '.join(hidden)}) are printed as ***: kbench never echoes "
                       "one; put yours back when you paste the line")
    if rec.cap_flag is not None:
        from kbench.recommend.resolve import CAP_FLAG, DEFAULT_CAP

        cap = rec.current.cap if rec.current is not None else DEFAULT_CAP[rec.engine.engine]
        dp = rec.plan.dp if rec.plan is not None else 1
        what = f"the workload's largest batch ({rec.cap_flag})"
        if dp > 1:  # the cap is the server's, split over the DP ranks (kbench.recommend.ranks.DP_CAP_CITE)
            from kbench.recommend.ranks import DP_CAP_CITE, dp_server_cap

            what = f"the workload's largest batch ({rec.cap_flag // dp} on the busiest of {dp} DP-attention ranks)"
            cap = f"{dp_server_cap(cap, dp)} ({dp} ranks x {cap} // {dp}: {DP_CAP_CITE.split(' (')[0]})"
        out.append(f"{what} is above the {cap} running requests {rec.engine.engine} resolves to: "
                   + (f"the command sets {CAP_FLAG[rec.engine.engine]} {rec.cap_flag}" if rec.best is not None else
                      f"a server runs it only with {CAP_FLAG[rec.engine.engine]} {rec.cap_flag}"))
    best = rec.best  # advised fa3 (not what you run) at a page > 1: the line printed runs it there
    page = None if best is None else (best.runs_at if best.runs_at is not None else
                                      rec.current.page_size if rec.current is not None else rec.page_size)
    if (best is not None and best is not rec.you_run and "fa3" in _slots(rec, best) and rec.engine.engine == "sglang"
            and rec.spec is not None and rec.spec.topk == 1 and (page or 1) > 1):
        out.append("SGLang's own TODO: FA3 speculative decoding with topk 1 and page size > 1 has a lower acceptance "
                   "rate (python/sglang/srt/utils/common.py:3959): measure acceptance before switching at page "
                   f"{page}")
    if not rec.layers_known:
        out.append("prices are per attention layer: the run names no model preset kbench knows the depth of; "
                   "give --model PRESET or --verify-layers/--draft-layers")
    return out


def _slots(rec: Recommendation, r: SettingResult) -> set[str]:
    from kbench.recommend.resolve import _backends_of_setting

    return set(_backends_of_setting(rec.engine.engine, r.setting).values())


def to_json(rec: Recommendation) -> dict:
    best = rec.best
    tw = rec.workload.total_weight

    def setting(r: SettingResult) -> dict:
        cmd, refused = command_or_refusal(rec, r)
        return {"id": r.setting.id, "flags": r.setting.flags, "default": r.default, "command": cmd,
                "command_refused": refused,
                "routes": r.kernels, "kernels": r.kernels, "total_us": r.total_us, "per_step_us": r.per_step_us,
                "host_per_step_us": _per_step(rec, r.host_us), "gpu_per_step_us": _per_step(rec, r.gpu_us),
                "noise_us": r.noise_us, "tied_with": r.tied_with,
                "bound_per_step_us": _per_step(rec, r.bound_us),
                "vs_best_pct": None if best is None or r.total_us is None else (r.total_us / best.total_us - 1) * 100,
                "vs_per_shape_routing_pct": rec.gap_pct(r) if r.total_us is not None else None,
                "vs_default_per_step_us": (vs_default(rec, r) or (None,))[0],
                "vs_default_pct": None if vs_default(rec, r) is None else vs_default(rec, r)[1] * 100,
                "unpriced": r.unpriced or None, "missing": r.missing, "notes": r.notes, "same_kernels_as": r.same_as,
                "page_size": r.page_size, "runs_at_page": r.runs_at}

    return {
        "engine": {"name": rec.engine.engine, "version": rec.engine.version, "read_from": rec.engine.read_from,
                   "flashinfer": rec.flashinfer},
        "gpu": {"family": rec.family, "device": rec.source.device.get("name"), "sm": rec.source.device.get("sm")},
        "measurements": {"kind": rec.source.kind, "from": rec.source.label},
        "workload": {"from": rec.workload.source, "batch_kinds": len(rec.workload.batches), "total_weight": tw,
                     "layers": rec.layers, "header": rec.workload.header or None},
        "overlap": {"mode": rec.overlap, "from": rec.overlap_from, "rule": OVERLAP_RULE[rec.overlap]},
        "host": {"cpus": rec.host_cpus, "cpu": rec.host_cpu or None},
        "spec": None if rec.spec is None else {"q_len": rec.spec.q_len, "topk": rec.spec.topk,
                                               "steps": rec.spec.steps},
        "page_size": rec.page_size,
        "kv_dtype": rec.kv_dtype,
        "per_gpu": None if rec.plan is None else {
            "heads": rec.plan.heads, "tp_size": rec.plan.tp, "attention_tp": rec.plan.attn_tp,
            "dp_attention": rec.plan.dp, "kv_cache_dtype": rec.plan.kv_engine, "steps": list(rec.plan.steps)},
        "best": None if best is None else {"id": best.setting.id, "flags": best.setting.flags,
                                          "command": command(rec), "per_step_us": best.per_step_us,
                                          "host_per_step_us": _per_step(rec, best.host_us),
                                          "gpu_per_step_us": _per_step(rec, best.gpu_us), "total_us": best.total_us},
        "per_shape_routing": {
            "engine_total_us": rec.engine_oracle_us, "engine_per_step_us": _per_step(rec, rec.engine_oracle_us),
            "kbench_total_us": rec.kbench_oracle_us, "kbench_per_step_us": _per_step(rec, rec.kbench_oracle_us),
            "best_gap_pct": rec.gap_pct(), "best_gap_to_kbench_pct":
                rec.gap_pct(best, rec.kbench_oracle_us) if best and rec.kbench_oracle_us else None,
            "engine_kernels_by_step": rec.engine_oracle_kernels},
        "settings": [setting(r) for r in rec.results],
        "drivers": [{"shape": d.batch.describe(), "batch": {**d.batch.shape, **dict(d.batch.group)}, "step": d.step,
                     "weight_share": d.weight_share, "setting_kernel": d.setting_kernel, "setting_us": d.setting_us,
                     "per_shape_kernel": d.oracle_kernel, "per_shape_us": d.oracle_us, "gap_share": d.share}
                    for d in rec.drivers],
        "extrapolated": [{"shape": p.batch.describe(), "clamped": p.clamped, "beyond": p.beyond,
                          "weight_share": p.batch.weight / tw} for p in rec.extrapolated],
        "interpolated_weight_share": rec.interpolated_weight,
        "caveats": caveats(rec),
    }


def to_markdown(rec: Recommendation, whole=None, show_all: bool = False) -> str:
    """The answer as a PR comment, in the screen's short form: the headline (the line to set as a code block), the
    priced settings, one line per reason the rest are not priced, the whole step (with --layers), the notes about
    what you run, the best and the default. show_all (--all): every setting with its flags and reason, every note."""
    lines = [f"### kbench recommend: {md(rec.engine.label)} on {md(rec.source.device_label)}", ""]
    head = headline(rec, whole)
    for line in head[2:]:
        if line.startswith("set: "):
            lines += ["**Set:**", "```sh", line[len("set: "):], "```"]
        elif line.startswith("flags: "):
            lines.append(f"**Flags:** `{line[len('flags: '):]}`  ")
        else:
            lines.append(md(line.strip()) + "  ")
    lines += ["", md(head[0]) + ("  \n" + md(head[1]) if show_all else ""), ""]
    if show_all:
        lines += md_table(*setting_rows(rec)) + [""]
    else:
        headers, rows, rest = screen_rows(rec)
        if rows:
            lines += md_table(headers, rows) + [""]
        lines += [f"- {md(x)}" for x in rest] + ([""] if rest else [])
    if whole is not None:
        from kbench.recommend.step import lines as step_lines

        block = step_lines(whole, rec)
        lines += [f"**{md(block[0].rstrip(':'))}**", ""] + [f"- {md(x.strip())}" for x in block[1:]] + [""]
    if rec.drivers and (show_all or rec.gap_pct() is not None and rec.gap_pct() > 0.05):
        lines += ["**Where per-shape routing wins** (the shapes that drive the gap):", ""]
        lines += md_table(*driver_rows(rec)) + [""]
    cav = caveats(rec) if show_all else screen_caveats(rec)
    if cav:
        lines += ["**Caveats**", ""] + [f"- {md(c)}" for c in cav] + [""]
    lines.append(f"Kernels per setting: {rec.engine.read_from}; `kbench recommend --settings --engine "
                 f"{rec.engine.engine}` lists each route's source lines"
                 + ("." if show_all else "; `--all` lists every setting, its flags and every note."))
    return "\n".join(lines) + "\n"


# ---- the table of engine settings -------------------------------------------------------------------------
def _routes(engine: Engine, family: str | None, flashinfer: str | None):
    """(setting, route, GPU families shown, kernel text) for every route (on one family when given)."""
    fi = flashinfer or engine.flashinfer
    for s in engine.settings:
        for r in s.routes:
            fams = [g for g in r.gpus if family is None or g == family]
            if not fams or (family is not None and not r.holds(family, fi)):
                continue
            kernel = r.kernel or f"not measured: {r.unmeasured}"
            if r.ragged_kernel:
                kernel += f" (ragged q: {r.ragged_kernel})"
            if r.flashinfer_below:
                kernel += f" [FlashInfer < {r.flashinfer_below}]"
            if r.flashinfer_from:
                kernel += f" [FlashInfer >= {r.flashinfer_from}]"
            yield s, r, fams, kernel


def settings_rows(engine: Engine, family: str | None = None, flashinfer: str | None = None) -> tuple[list[str], list[list[str]]]:
    headers = ["setting", "flags", "GPU", "step", "kbench kernel", "source (" + engine.label + ")"]
    rows = [[s.id, s.flags, ",".join(fams), STEP_LABEL[r.step], kernel,
             ", ".join(c.label() for c in r.cites)]
            for s, r, fams, kernel in _routes(engine, family, flashinfer)]
    return headers, rows


def settings_markdown(engine: Engine, known_kernels: list[str], family: str | None = None,
                      flashinfer: str | None = None) -> str:
    lines = [f"### Engine settings: {engine.label}", "", f"Read from {engine.read_from}. FlashInfer pin: "
             f"{engine.flashinfer or 'none'}.", "",
             "| setting | GPU | step | kbench kernel | cited source |", "|---|---|---|---|---|"]
    for s, r, fams, kernel in _routes(engine, family, flashinfer):
        cites = "<br>".join(f"[{c.label()}]({c.url(engine.cite_url)}): {c.says}" for c in r.cites)
        note = f"<br>{r.note}" if r.note else ""
        lines.append(f"| `{s.flags}` | {','.join(fams)} | {STEP_LABEL[r.step]} | {kernel}{note} | {cites} |")
    lines += ["", "Kernels no setting reaches:", ""]
    for k, why, cites in engine.unreached_kernels(known_kernels):
        src = "; ".join(f"[{c.label()}]({c.url(engine.cite_url)})" for c in cites)
        lines.append(f"- `{k}`: {why}" + (f" ({src})" if src else ""))
    if engine.notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in engine.notes]
    return "\n".join(lines) + "\n"
