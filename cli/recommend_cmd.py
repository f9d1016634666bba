"""`kbench recommend` and `kbench export`: thin click wrappers over kbench.recommend, rendered with rich; the A/B
check composes kbench.gate (the two server runs) with kbench.recommend.check (the prediction)."""
from __future__ import annotations

import json

import click
from rich.markup import escape
from rich.table import Table

from kbench.cli.console import echo, make_console, print_command
from kbench.cli.errors import one_line_errors
from kbench.cli.options import FLOAT, INT, IntRange, OutputPath, examples
from kbench.errors import BadInput
from kbench.names import policy_kernels, unknown_kernels_note


def _table(title: str, headers: list[str], rows: list[list[str]], first_bold: bool = False,
           compact: bool = False) -> Table:
    from rich import box

    t = Table(title=escape(title) if title else None, title_justify="left", header_style="bold",
              **({"box": box.SIMPLE_HEAD, "pad_edge": False, "show_edge": False} if compact else {}))
    for h in headers:
        t.add_column(escape(h), overflow="fold")
    for i, r in enumerate(rows):
        t.add_row(*map(escape, r), style="bold green" if first_bold and i == 0 else None)
    return t


def _group_filters(f):
    """The group filters `kbench select` takes (heads, dtype, ..., and one per realistic axis and the timing
    state, from kbench.cases.axes), each taking a weighted list here."""
    from kbench.cases import axes
    from kbench.report.policy import CLASSIC_FILTERS, GROUP_FILTERS

    helps = {"heads": "QO/KV/DIM heads, e.g. 32/8/128", "dtype": "query/output dtype", "kv_dtype": "KV-cache dtype",
             "page_size": "KV page size", "kv_layout": "KV layout, HND or NHD"}
    for name in reversed(GROUP_FILTERS):
        a = axes.AXIS.get(name)
        flag = a.flag if a is not None and name not in CLASSIC_FILTERS else "--" + name.replace("_", "-")
        what = helps.get(name) or (a.help if a is not None else name)
        f = click.option(flag, name, default=None, metavar="V[@W],...",
                         help=f"Group filter: {what} (as in kbench select; a weighted list spreads the workload "
                              "over groups).")(f)
    return f


@click.command("recommend", epilog=examples(
    "kbench recommend results/baselines/h100-engine-routes-kv4096 --engine sglang "
    "--batch-size 1@3,4@2,16@1 --q-len 4 --kv-len 4096 --verify-layers 32   # a run with routes: priced",
    "kbench recommend report/policy.json --engine vllm --workload RUN/workload.jsonl --json   # server-bench's batches",
    "kbench recommend results/baselines/h100-engine-routes-page1-64-kv4096-r2 --engine sglang --batch-size 16 "
    "--kv-len 4096 --model llama3-8b --current \"python -m sglang.launch_server --model-path MODEL_PATH "
    "--speculative-algorithm EAGLE --speculative-draft-model-path DRAFT_MODEL_PATH\"   # what you run, priced"))
@click.argument("sources", nargs=-1, metavar="RUN_OR_POLICY")
@click.option("--engine", default=None, help="sglang or vllm (the engines in kbench's table).")
@click.option("--engine-version", default=None, help="A release in the table [default: the newest].")
@click.option("--batch-size", default=None, metavar="V[@W],...", help="Requests per batch: a weighted list, e.g. 1@4,2@3,4@2 or 16,64 or 1..8.")
@click.option("--q-len", default=None, metavar="V[@W],...", help="Query tokens per request of a verify/draft-extend step (draft tokens, or steps + 1).")
@click.option("--kv-len", default=None, metavar="V[@W],...",
              help="KV tokens per request (with the step's own); lognormal:MEDIAN:SIGMA[:BINS] spreads it over batches.")
@_group_filters
@click.option("--workload", "workload_file", default=None, type=click.Path(dir_okay=False),
              help="JSON Lines of batches instead of the shape options (schemas/workload.schema.json; "
                   "kbench server-bench writes RUN/workload.jsonl).")
@click.option("--steps", default="verify,draft_extend", show_default=True,
              help="The steps each batch of the shape options runs: verify, draft_extend or both.")
@click.option("--current", default=None, metavar="LINE|@FILE|RUN",
              help="What your server runs: its command line (python -m sglang.launch_server ... / vllm serve ...), "
                   "@FILE holding it, or a kbench server-bench run folder (SGLang's resolved server info). Resolved "
                   "as the engine does and priced as 'you run'; the answer is the flags to change on your line.")
@click.option("--model", "model_preset", default=None, metavar="PRESET",
              help="The model (a kbench preset: llama3-8b, deepseek-v3, ...): its layers weight the steps "
                   "[default: the run's scenario model].")
@click.option("--verify-layers", type=INT, default=None,
              help="Attention layers of the target model: verify steps count this many calls (0..1000; 0: not "
                   "priced) [default: the model preset's; none known: 1, a price per layer].")
@click.option("--draft-layers", type=INT, default=None,
              help="Attention layers of the draft model: draft-extend steps count this many calls (0..1000) "
                   "[default: the model preset's, 1 for EAGLE and MTP].")
@click.option("--layers", "layers_run", default=None, metavar="RUN",
              help="A kbench layers run of the model (its other layers and draft timed on this GPU): the headline "
                   "gives the whole step (attention, other layers, draft passes, host work), the saving as its share "
                   "and tokens/s; without it a saving is attention's share only.")
@click.option("--accept-length", default=None, metavar="N|RUN",
              help="Accepted tokens per step (1 .. steps + 1), or a kbench server-bench run folder of this server "
                   "(its measured acceptance): with --layers, tokens per second.")
@click.option("--spec-runs", default=None, metavar="RUN,RUN,...",
              help="kbench server-bench runs of one server, one per speculative config: rank the configs by measured "
                   "output tokens/s per batch size and print the best one's flags at each, and a choice that varies "
                   "with the batch size in the engine's own form (vLLM: num_speculative_tokens_per_batch_size in "
                   "--speculative-config; SGLang: --speculative-adaptive-config) (no RUN_OR_POLICY needed).")
@click.option("--setting", "setting_ids", multiple=True, help="Price only this setting (an id from --settings; repeat).")
@click.option("--flashinfer", default=None, metavar="VERSION", help="FlashInfer the engine runs with [default: its pin].")
@click.option("--gpu", default=None, help="The GPU the recommendation is for (SM90, sm100, H200): refused unless the run is from it.")
@click.option("--host-overlap", default="engine", show_default=True, metavar="engine|max|sum",
              help="How a step's host work (plan, masks, metadata) meets the GPU work: max = overlapped with the "
                   "previous step's GPU work (host work that waits for the GPU still adds), sum = one after the "
                   "other; engine = what the engine does by default (its source cited in the settings table).")
@click.option("--max-extrapolation", type=FLOAT, default=2.0, show_default=True, metavar="FACTOR",
              help="Refuse shapes more than FACTOR beyond the measured range (closer ones are priced at its edge, and said so; 1: none beyond it; inf: no limit).")
@click.option("--top", type=IntRange(min=0), default=5, show_default=True, help="Shapes listed as driving the gap.")
@click.option("--all", "show_all", is_flag=True,
              help="Print every setting (its flags, routes and why it is not priced) and every note; without it the "
                   "answer fits a screen: the headline, the priced settings, one line per reason the rest are not.")
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
@click.option("--markdown", "markdown_file", default=None, type=OutputPath("recommend.md", dir_okay=False),
              help="Also write the answer as markdown (a PR comment) to this file ('-': print it instead of the "
                   "tables): the screen's short answer, with --all every setting and note.")
@click.option("--settings", "show_settings", is_flag=True,
              help="Print the table of engine settings (kernel per step and GPU, with the source lines) and exit.")
@click.option("--ab", nargs=2, default=None, metavar="RUN_A RUN_B",
              help="Two server-bench runs of two settings: put the gate's A/B answer beside the prediction.")
@click.option("--ab-settings", default=None, metavar="A,B", help="The setting ids of the --ab runs, A first.")
@click.option("--threshold", default="5%", show_default=True,
              help="With --ab: the gate's threshold (5% or 0.05, below 100%), also what counts as no change.")
@one_line_errors
def recommend_cmd(sources, engine, engine_version, batch_size, q_len, kv_len, workload_file, steps, current,
                  model_preset, verify_layers, draft_layers, layers_run, accept_length, spec_runs, setting_ids, flashinfer, gpu, host_overlap, max_extrapolation, top, show_all, as_json, markdown_file,
                  show_settings, ab, ab_settings, threshold, **filters):
    """The engine flags to set for a workload, from a run's measurements: each engine setting's price per step (the
    host work its routes redo every step + layers x their kernel time), the best one as a command line that
    reproduces what was priced, its gap to per-shape routing and the shapes behind that gap.

    \b
    RUN_OR_POLICY: sweep run folder(s) (merged as kbench report does) or a policy.json from kbench report.
    The workload: --batch-size/--q-len/--kv-len (+ group filters), weighted lists, or --workload FILE.
    Each (batch, step) is priced at the measured cell kbench select answers the shape with (nearest
    neighbour; clamped beyond the measured range, up to --max-extrapolation, and said so).
    A setting is priced only where the run measured its routes (kbench sweep -s engine-routes); otherwise it
    is listed with a lower bound from the plain kernels and never named best.
    --current LINE: your server's line, resolved as SGLang 0.5.23 / vLLM 0.34.0 resolve it, priced per GPU: heads
    per GPU under TP (--tp-size), all heads on batch / dp under DP attention, fp8 rows for an fp8 KV cache (e4m3;
    fp8_e5m2 is not priced), target verify only for STANDALONE and NGRAM. Refused with the reason (exit 2): eager
    layers (--disable-cuda-graph, --enforce-eager), gpt-oss (sinks and window), DeepSeek-V3.2 (dsa), and heads,
    trees or KV dtypes the run has no rows of (naming a run beside it that has them).
    Exit codes: 0 ok, 2 bad input (an unknown engine or setting, a setting not valid on the run's GPU or refused
    by the engine for the workload's spec config, a q_len no chain of the engine makes, an overlap mode the
    engine lacks, a workload that does not parse or lies too far outside the run, measurements from another GPU).
    """
    from kbench.recommend.settings import FAMILY_NAME, load_table

    from kbench.gate import parse_threshold

    thr = parse_threshold(threshold)  # checked as the gate checks it, also when --ab is not given
    table = load_table()
    if not engine:
        raise BadInput(f"--engine: give one of {', '.join(table.names())}")
    eng = table.engine(engine, engine_version)
    if show_settings:
        _print_settings(eng, as_json, markdown_file)
        return
    if spec_runs is not None:
        _rank_spec_runs(spec_runs, eng.engine, as_json)
        return
    if not sources:
        raise BadInput("give a run folder or a policy file (RUN_OR_POLICY)")
    from kbench.recommend.price import load_source, recommend
    from kbench.recommend.render import (caveats, driver_rows, headline, screen_caveats, screen_rows, setting_rows,
                                         to_json, to_markdown)
    from kbench.recommend.settings import STEPS
    from kbench.recommend.workload import from_options, read_workload

    step_list = tuple(s.strip().replace("-", "_") for s in steps.split(",") if s.strip())
    if not step_list or not set(step_list) <= set(STEPS):
        raise BadInput(f"--steps {steps!r}: verify, draft_extend or both (comma-separated)")
    from kbench.recommend.resolve import MODEL_LAYERS, resolve_current

    if model_preset is not None and model_preset not in MODEL_LAYERS:
        raise BadInput(f"--model {model_preset!r}: one of {', '.join(MODEL_LAYERS)}")
    src = None
    resolved = None
    if current is not None:
        if workload_file:
            raise BadInput("--current and --workload: the server's spec config comes from --current; give the shape "
                           "as --batch-size and --kv-len")
        from kbench.recommend.line import scrubbed
        from kbench.recommend.price import check_gpu

        src = load_source(list(sources))
        with scrubbed(current):  # a message about the line never shows a secret of it
            resolved = resolve_current(current, check_gpu(src, gpu), engine_table=eng,
                                       preset=model_preset or src.model)
        if q_len is None:
            q_len = str(resolved.spec.q_len)
        trees = sorted({str(g.get("tree", "chain")) for g in src.policy.get("groups", [])})
        if resolved.tree == "chain" and len(trees) > 1 and filters.get("tree") is None:
            filters["tree"] = "chain"  # the run has trees too: price the chain the server drafts
        if resolved.tree != "chain" and filters.get("tree") is None:
            if resolved.tree not in trees:
                raise BadInput(f"--current: your server verifies a tree of {resolved.spec.q_len} tokens "
                               f"({resolved.tree}, on {resolved.backends['verify']}, page {resolved.page_size}); "
                               f"{src.label} has no rows of that tree (it has: {', '.join(trees)}): measure it "
                               f"(kbench sweep -s engine-routes --kernels routes --tree {resolved.tree} "
                               f"-q {resolved.spec.q_len}, on the GPU)" + _runs_with(src, resolved.tree))
            filters["tree"] = resolved.tree
            if steps == "verify,draft_extend" and "chain" not in trees:
                step_list = ("verify",)  # the draft extend after a tree is priced on chain rows: none here
                echo(f"note: your server's draft extend after its {resolved.tree} tree runs the shape of a chain of "
                     f"{resolved.spec.q_len} tokens; {src.label} has no chain rows: verify priced only", err=True)
        pages = {g.get("page_size") for g in src.policy.get("groups", [])}
        if resolved.page_size in pages and len(pages) > 1 and filters.get("page_size") is None:
            filters["page_size"] = str(resolved.page_size)
    shape = {"batch_size": batch_size, "q_len": q_len, "kv_len": kv_len}
    given = [f"--{k.replace('_', '-')}" for k, v in {**shape, **filters}.items() if v is not None]
    if workload_file:
        if given:
            raise BadInput(f"--workload and {given[0]}: give the workload one way (a file's lines name their shapes)")
        wl = read_workload(workload_file)
    else:
        wl = from_options(shape, filters, tuple(s for s in STEPS if s in step_list))
    from kbench.runs.outputs import distinct_outputs

    distinct_outputs({"--markdown": markdown_file}, [*sources, workload_file, *(ab or ())])
    if as_json and markdown_file == "-":
        raise BadInput("--json prints to stdout, and so does --markdown -: give --markdown a file")
    src = src or load_source(list(sources))
    note = unknown_kernels_note(policy_kernels(src.policy), "no engine setting runs them: not priced")
    if note:
        echo(note, err=True)
    preset = model_preset or src.model
    known = MODEL_LAYERS.get(preset) if preset else None
    layers = {"verify": verify_layers if verify_layers is not None else (known[0] if known else 1),
              "draft_extend": draft_layers if draft_layers is not None else (known[1] if known else 1)}
    layers_known = verify_layers is not None or known is not None
    if flashinfer is None and resolved is not None and getattr(resolved, "flashinfer_version", None):
        flashinfer = resolved.flashinfer_version  # the FlashInfer the user's environment or line runs
    kw = dict(flashinfer=flashinfer, layers=layers, max_extrapolation=max_extrapolation, gpu=gpu, overlap=host_overlap)
    ab_ids = _ab_args(ab, ab_settings, eng) if ab or ab_settings else None
    if resolved is not None and host_overlap in (None, "", "engine"):
        kw["overlap"] = resolved.overlap  # what the server runs
    rec = recommend(src, wl, eng, settings=list(setting_ids) or None, top=top, current=resolved,
                    layers_known=layers_known, preset=preset, **kw)
    chk = _ab_check(src, wl, eng, ab, ab_ids, thr, kw) if ab_ids else None
    whole = _whole_step(rec, layers_run, accept_length, resolved, preset)

    if markdown_file:
        from kbench.runs import atomic

        text = to_markdown(rec, whole, show_all) + ("\n" + _check_markdown(chk) if chk else "")
        if markdown_file == "-":
            click.echo(text, nl=False)
            return
        atomic.write_text(markdown_file, text, named=True)
    if as_json:
        out = to_json(rec)
        if chk is not None:
            out["ab_check"] = _check_json(chk)
        if whole is not None:
            from kbench.recommend.step import to_json as step_json

            out["whole_step"] = step_json(whole, rec)
        click.echo(json.dumps(out, indent=2))
        return
    con = make_console()
    head = headline(rec, whole)
    for line in head[2:]:  # the answer first: what you run, the line to set, what it saves, the flags
        if line.startswith(("set:", "flags:")):
            print_command(con, line, style="bold")  # whole on one line: it is pasted
        else:
            con.print(escape(line), style="bold" if line.startswith(("  ->", "you run:", "  saves")) else None)
    con.print(escape(head[0]), style="dim")
    if show_all:
        con.print(escape(head[1]), style="dim")
        con.print(_table(f"{rec.engine.label} settings valid on {FAMILY_NAME[rec.family]}, fastest first",
                         *setting_rows(rec), first_bold=True))
    else:
        headers, rows, rest = screen_rows(rec)
        if rows:
            con.print(_table("", headers, rows, first_bold=True, compact=True))
        for line in rest:
            con.print(escape(line))
    if whole is not None:
        from kbench.recommend.step import lines as step_lines

        for line in step_lines(whole, rec):
            con.print(escape(line))
    if rec.drivers and (show_all or rec.gap_pct() is not None and rec.gap_pct() > 0.05):
        con.print(_table("Where per-shape routing wins (the shapes that drive the gap)", *driver_rows(rec),
                         compact=not show_all))
    for c in (caveats(rec) if show_all else screen_caveats(rec)):
        con.print(escape("note: " + c), style="yellow")
    if chk is not None:
        from kbench.recommend.check import check_rows

        con.print(escape(f"A/B (kbench gate on {ab[0]} -> {ab[1]}): {chk.answer}"))
        con.print(_table(f"Check against the engine: A = {chk.setting_a}, B = {chk.setting_b}", *check_rows(chk)))
    if markdown_file:
        con.print(escape(f"wrote {markdown_file}"))


def _runs_with(src, tree: str) -> str:
    """'; RUN has them: price it there' for the committed runs beside src with engine-route rows of the tree."""
    from kbench.recommend.price import runs_that_answer

    runs = runs_that_answer(src, {"tree": tree})
    return f"; {' and '.join(runs)} {'has' if len(runs) == 1 else 'have'} them: price it there" if runs else ""


def _rank_spec_runs(spec_runs: str, engine: str, as_json: bool) -> None:
    from kbench.recommend.spec_rank import engine_form, lines, rank

    paths = [p.strip() for p in spec_runs.split(",") if p.strip()]
    runs, ranked = rank(paths, engine)
    if as_json:
        click.echo(json.dumps({"engine": engine, "model": runs[0].model, "per_batch_size": engine_form(runs, ranked),
                               "by_batch_size": [
            {"batch_size": rk.batch_size, "best": rk.order[0][0].label, "flags": rk.order[0][0].flags(),
             "tied": [r.label for r in rk.tied], "called_by": rk.called_by,
             "configs": [{"run": r.path, "config": r.label, "topk": r.topk, "steps": r.steps,
                          "draft_tokens": r.draft_tokens, "tokens_per_s": v,
                          "accept_length": r.accept.get(rk.batch_size)} for r, v in rk.order]}
            for rk in ranked]}, indent=2))
        return
    for line in lines(runs, ranked):
        echo(line)


def _whole_step(rec, layers_run, accept_length, resolved, preset):
    """The whole step (kbench.recommend.step) when --layers is given; --accept-length alone is refused."""
    from kbench.recommend.step import acceptance, answer, load_layers

    if layers_run is None:
        if accept_length is not None:
            raise BadInput("--accept-length prices tokens per second of the whole step: give --layers RUN too (a "
                           "kbench layers run of the model)")
        return None
    lt = load_layers(layers_run)
    if not rec.layers_known:
        raise BadInput(f"--layers {layers_run}: the whole step needs the attention priced over the model's layers "
                       f"too: give --model {lt.model} (or --verify-layers)")
    if preset and lt.model != preset:
        raise BadInput(f"--layers {layers_run}: a run of {lt.model}; the attention is priced for {preset}: time the "
                       f"model you price (kbench layers --model {preset})")
    acc = acceptance(accept_length, rec.spec, rec.engine.engine, resolved.model if resolved is not None else None)
    return answer(rec, lt, acc)


def _ab_args(ab, ab_settings, eng) -> list[str]:
    """The --ab options checked before anything is priced: two runs of the engine's backend, two setting ids."""
    if not ab or not ab_settings:
        raise BadInput("--ab RUN_A RUN_B and --ab-settings A,B go together")
    ids = [s.strip() for s in ab_settings.split(",") if s.strip()]
    if len(ids) != 2:
        raise BadInput(f"--ab-settings {ab_settings!r}: two setting ids, A first (e.g. trtllm_mha,flashinfer)")
    from kbench.recommend.check import check_ab_runs

    check_ab_runs(ab[0], ab[1], eng.engine)
    return ids


def _ab_check(src, wl, eng, ab, ids: list[str], thr: float, kw):
    """The gate's A/B on the two server-bench runs beside the prediction for the same batches."""
    from kbench.gate import run_gate
    from kbench.gate.ab import ab_answer
    from kbench.recommend.check import Measured, check_ab

    res = run_gate(ab[0], ab[1], threshold=thr, allow_missing=True)
    if res.kind != "server-bench":
        raise BadInput(f"--ab {ab[0]} {ab[1]}: two kbench server-bench runs, not {res.kind} runs")
    measured = [Measured(r.case_id, r.base_value, r.cand_value, r.outcome) for r in res.rows if r.metric == "latency"]
    return check_ab(src, wl, eng, ids[0], ids[1], measured, ab_answer(res.rows), thr * 100, **kw)


def _check_markdown(chk) -> str:
    from kbench.recommend.check import check_markdown

    return check_markdown(chk)


def _check_json(chk) -> dict:
    return {"setting_a": chk.setting_a, "setting_b": chk.setting_b, "gate_answer": chk.answer,
            "threshold_pct": chk.threshold_pct,
            "cases": [{"case": c.case, "latency_a_s": c.measured.latency_a_s if c.measured else None,
                       "latency_b_s": c.measured.latency_b_s if c.measured else None,
                       "gate": c.measured.outcome if c.measured else None,
                       "attention_a_us": c.attention_a_us, "attention_b_us": c.attention_b_us,
                       "predicted_saving_ms": c.predicted_saving_ms,
                       "predicted_pct_of_latency": c.predicted_pct_of_latency,
                       "agrees": c.agrees(chk.threshold_pct)} for c in chk.cases]}


def _print_settings(eng, as_json: bool, markdown_file: str | None) -> None:
    from kbench.recommend.render import settings_markdown, settings_rows
    from kbench.recommend.settings import known_kernels

    known = known_kernels()
    if as_json:
        click.echo(json.dumps({
            "engine": eng.engine, "version": eng.version, "read_from": eng.read_from, "flashinfer": eng.flashinfer,
            "settings": [{"id": s.id, "flags": s.flags, "gpus": list(s.gpus), "default_on": list(s.default_on),
                          "routes": [{"step": r.step, "gpus": list(r.gpus), "kernel": r.kernel,
                                      "ragged_kernel": r.ragged_kernel, "unmeasured": r.unmeasured or None,
                                      "flashinfer_below": r.flashinfer_below, "flashinfer_from": r.flashinfer_from,
                                      "note": r.note or None,
                                      "cites": [{"file": c.file, "lines": c.lines, "says": c.says,
                                                 "url": c.url(eng.cite_url)} for c in r.cites]}
                                     for r in s.routes]} for s in eng.settings],
            "unreached": [{"kernel": k, "why": w, "cites": [c.label() for c in cs]}
                          for k, w, cs in eng.unreached_kernels(known)],
            "notes": list(eng.notes)}, indent=2))
        return
    if markdown_file:
        text = settings_markdown(eng, known)
        if markdown_file == "-":
            click.echo(text, nl=False)
            return
        from kbench.runs import atomic

        atomic.write_text(markdown_file, text, named=True)
    con = make_console()
    con.print(escape(f"{eng.label}: read from {eng.read_from}; FlashInfer pin {eng.flashinfer or 'none'}"))
    con.print(_table(f"Engine settings: {eng.label}", *settings_rows(eng)))
    for k, why, cites in eng.unreached_kernels(known):
        con.print(escape(f"unreached: {k}: {why}" + (f" ({'; '.join(c.label() for c in cites)})" if cites else "")))
    for n in eng.notes:
        con.print(escape("note: " + n), style="dim")
    if markdown_file:
        con.print(escape(f"wrote {markdown_file}"))


@click.command("export", epilog=examples(
    "kbench export report/policy.json --format python --out kbench_policy.py   # then: python kbench_policy.py 16 4 4096",
    "kbench export results/baselines/h200-draft-extend-kv4096 --out h200_policy.py   # a run: its policy first"))
@click.argument("source", metavar="POLICY_OR_RUN")
@click.option("--format", "fmt", default="python", show_default=True, help="python (one dependency-free file).")
@click.option("--out", "out", required=True, type=OutputPath("kbench_policy.py", dir_okay=False),
              help="The file to write.")
@one_line_errors
def export_cmd(source, fmt, out):
    """Write the policy as a standalone selector: select(batch_size, q_len, kv_len, ...) returns what kbench select
    returns, lookup(...) what kbench select --json prints, with no kbench (nor anything outside Python's standard
    library) to import; POLICY_OR_RUN: a policy.json from kbench report, or a sweep run folder (its policy is built
    as kbench report builds it)."""
    from kbench.recommend.export import FORMATS, export_policy, summary

    from kbench.runs.outputs import distinct_outputs

    if fmt not in FORMATS:
        raise BadInput(f"--format {fmt!r}: one of {', '.join(FORMATS)}")
    distinct_outputs({"--out": out}, [source])
    from kbench.report.policy import policy_from

    policy = policy_from([source])[0]
    note = unknown_kernels_note(policy_kernels(policy), "exported as the policy says")
    if note:
        echo(note, err=True)
    path = export_policy(policy, str(source), out, fmt)
    from kbench.runs.atomic import named_destination

    if named_destination(path)[1]:  # a device or pipe (/dev/stdout): nothing there to run
        echo(f"wrote {path}: {summary(policy)}", err=True)
        return
    filters = " [--FILTER VALUE ...]" if len(policy["groups"]) > 1 else ""
    from kbench.shell import command_line

    try_it = command_line(["python", path, "BATCH_SIZE", "Q_LEN", "KV_LEN"]) + filters
    echo(f"wrote {path}: {summary(policy)}; try: {try_it} (--help: the filters)")
