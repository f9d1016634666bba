"""`kbench layers`: a model preset's work outside attention (projections, MLP or experts, norms, LM head; its draft's
layer and LM head) timed on the GPU per part of a speculative step, into a run folder of kind "layers"
(kbench.engine.layers); `kbench recommend --layers RUN` prices the whole step with it."""
from __future__ import annotations

import sys

import click

from kbench.cli.console import echo
from kbench.cli.errors import one_line_errors
from kbench.cli.options import FLOAT, INT, OutputPath, examples
from kbench.errors import BadInput


def _ints(text: str, flag: str) -> list[int]:
    out = []
    for part in str(text).split(","):
        p = part.strip()
        if not p.isdigit() or not p.isascii() or len(p) > 6:
            raise BadInput(f"{flag} {text!r}: comma-separated positive integers, e.g. 1,16,64")
        out.append(int(p))
    return out


@click.command("layers", epilog=examples(
    "kbench layers --model llama3-8b --batch-size 1,16,64 --q-len 4,8 --out results   # on a GPU",
    "kbench layers --model qwen3-30b-a3b --batch-size 16 --q-len 4 --topk 1   # MoE: a labelled estimate"))
@click.option("--model", "preset", default=None, metavar="PRESET", help="A kbench model preset (llama3-8b, ...).")
@click.option("--batch-size", default="1,16,64", show_default=True, help="Requests per batch (comma-separated).")
@click.option("--q-len", default="4,8", show_default=True, help="Tokens verified per request (draft tokens).")
@click.option("--topk", type=INT, default=1, show_default=True, help="The draft's branches per request and pass.")
@click.option("--out", "out_dir", default="results", show_default=True, type=OutputPath("results", "folder", file_okay=False),
              help="Where the run folder is made.")
@click.option("--name", default=None, help="The run folder's name [default: layers-PRESET].")
@click.option("--budget-s", type=FLOAT, default=1.0, show_default=True, help="Timing budget per row (seconds).")
@click.option("--device-index", type=INT, default=0, show_default=True, help="The CUDA device.")
@click.option("--resume", "resume", default=None, type=OutputPath("results/RUN", "run folder", file_okay=False),
              help="Finish a layers run cut short (Ctrl-C, SIGTERM): its model and shapes, the missing rows.")
@one_line_errors
def layers_cmd(preset, batch_size, q_len, topk, out_dir, name, budget_s, device_index, resume):
    """Time a model's other layers (all but attention) per part of a speculative step on this GPU: the target's
    decoder layer and LM head at batch x q tokens, the draft's layer and LM head at its token counts. Dense models
    as the engines' GEMMs run them (torch bf16 matmuls under a CUDA graph); MoE experts as a labelled estimate (the
    experts a batch touches under uniform routing). Exit 2: a preset without the dimensions (named), no CUDA GPU."""
    from kbench.engine.layers import check_plan, manifest_for, measure_layers, resumed_plan

    if resume:
        if preset is not None:
            raise BadInput("--resume takes the model and shapes from the run: give no --model")
        plan = resumed_plan(resume)
    else:
        if preset is None:
            raise BadInput("--model: give a model preset (llama3-8b, ...), or --resume RUN")
        plan = check_plan(preset, _ints(batch_size, "--batch-size"), _ints(q_len, "--q-len"), topk)
    if not budget_s > 0:
        raise BadInput(f"--budget-s {budget_s}: a positive number of seconds")
    from kbench.timing.probe import probe_device

    device = probe_device(device_index, with_flashinfer=False)
    if not device.cuda:
        raise BadInput("kbench layers needs a CUDA GPU (none here): a CPU's matmul times say nothing of a GPU's step")
    from kbench.runs.layer_rows import ROW_KIND
    from kbench.runs.session import RunSession
    from kbench.shell import kbench as kbench_line
    from kbench.timing.timer import GraphTimer, StopRule

    timer = GraphTimer(StopRule(budget_s=budget_s))
    session = (RunSession.resume(resume, kind=ROW_KIND) if resume else
               RunSession.new(out_dir, name or f"layers-{plan.preset}", manifest_for(plan, device, sys.argv)))
    kept = []
    try:
        with session as run:
            echo(f"{run.dir}: {len(plan.cases())} parts of {plan.preset} on {device.name}"
                 + (f" ({len(run.done)} already measured)" if run.done else ""))

            kept.extend(run.done)

            def show(row):
                kept.append(row.case_id)
                t = "-" if row.median_us is None else f"{row.median_us:,.1f} us"
                echo(f"  {row.part:20} {row.tokens:6d} tokens  {t:>12}  {row.status} {row.reason}")

            measure_layers(plan, run, device, timer, show)
    except KeyboardInterrupt as e:
        if not session.opened:
            raise
        import signal

        signum = getattr(e, "signum", signal.SIGINT)
        click.echo(f"error: stopped by {signal.Signals(signum).name}; {len(kept)} row(s) kept in {session.dir}; finish "
                   f"with: {kbench_line('layers', '--resume', session.dir)}", err=True)
        sys.exit(128 + signum)
    echo(f"wrote {session.dir}")
