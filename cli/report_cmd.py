"""`kbench report` and `kbench select`: thin click wrappers over kbench.report, rendered with rich."""
from __future__ import annotations

import json

import click
from rich.markup import escape
from rich.table import Table

from kbench.cases import axes
from kbench.cli.answer import write_answer
from kbench.cli.console import echo, make_console
from kbench.cli.options import FLOAT, INT, AliasOption, IntRange, OutputPath, examples
from kbench.errors import BadInput
from kbench.names import unknown_kernel_note
from kbench.values import SEED_MAX
from kbench.report import build_report, lookup
from kbench.report.policy import policy_from
from kbench.report.build import PLOT_GROUPS
from kbench.report import crossovers as xo
from kbench.report.document import case_table, regret_table, verdict_summary


def _table(title: str, headers: list[str], rows: list[list[str]], highlight: str | None = None) -> Table:
    t = Table(title=title, title_justify="left", header_style="bold")
    for h in headers:
        t.add_column(h, overflow="fold")
    for r in rows:
        # result strings are data, not rich markup ("[...]" in a reason must print as is)
        style = "yellow" if highlight and any(highlight in c for c in r) else None
        t.add_row(*map(escape, r), style=style)
    return t


@click.command("report", epilog=examples(
    "kbench report results/baselines/h200-draft-extend-kv4096 --out /tmp/report",
    "kbench report RUN1 RUN2 --holdout 0.2 --out report   # the rows merged, the policy's regret on a held-out 20%",
    "kbench report RUN --plot-batch 16 --plot-kv 4096   # also plot time vs q_len at bs 16, kv 4096"))
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@click.option("--out", "out_dir", type=OutputPath("report", file_okay=False), default=None,
              help="Output folder, replaced whole; one holding anything a report does not write is refused "
                   "[default: FIRST_RUN/report].")
@click.option("--holdout", type=FLOAT, default=None, metavar="FRACTION",
              help="Also build a policy without this random fraction of the cases and report its regret on them.")
@click.option("--seed", type=IntRange(0, SEED_MAX), default=0, show_default=True, help="Seed of the holdout draw.")
@click.option("--plot-batch", type=INT, multiple=True, help="Batch size of a time-vs-q_len plot (pairs with --plot-kv).")
@click.option("--plot-kv", type=INT, multiple=True, help="kv_len of a time-vs-q_len plot (pairs with --plot-batch).")
@click.option("--max-rows", type=INT, default=40, show_default=True,
              help="Rows of each listing shown on screen: per case, crossovers, timing-state flips (negative: all; "
                   "all are in cases.csv, crossovers.csv, power.csv and the reports).")
@click.option("--plot-groups", type=INT, default=PLOT_GROUPS, show_default=True, metavar="N",
              help="Draw the speedup heatmap and time-vs-q_len plots for at most N groups, the idealised batch "
                   "first (negative: every group; a full grid over the realistic axes has a group per combination).")
@click.option("--power", default=None, metavar="STATE",
              help="Build the report and policy for one timing state: unthrottled or sustained [default: every "
                   "state in the runs, one policy group each]. The two states side by side are listed either way.")
def report_cmd(runs, out_dir, holdout, seed, plot_batch, plot_kv, max_rows, plot_groups, power):
    """Winners per case, crossovers along q_len, a selection policy, regret and plots from sweep RUNs.

    With several RUNs the rows are merged; a (kernel, case) measured in more than one run takes the row of
    the run that started last.
    """
    if len(plot_batch) != len(plot_kv):
        raise BadInput("--plot-batch and --plot-kv must be given the same number of times (they pair up)")
    res = build_report(list(runs), out_dir, holdout=holdout, seed=seed,
                       plot_points=list(zip(plot_batch, plot_kv)) or None, power=power, plot_groups=plot_groups)
    for w in res.runset.warnings:  # on stderr, as every warning: stdout is the report's listing
        echo(w, err=True)
    con = make_console()
    if res.power:
        con.print(f"timing state: {res.power} (report and policy for this state only)", markup=False)
    headers, rows = case_table(res.cases)
    shown = _first(rows, max_rows)
    con.print(_table(f"Per case ({len(rows)} cases; ties marked)", headers, shown, highlight="tie"))
    _more(con, rows, shown, "cases", res.out_dir / "cases.csv")
    con.print(verdict_summary(res.cases), markup=False)
    headers, rows = xo.table(res.crossovers)
    shown = _first(rows, max_rows)
    con.print(_table("Crossovers: q_len ranges per path", headers, shown))
    _more(con, rows, shown, "crossover rows", res.out_dir / "crossovers.csv")
    if rows:
        con.print("policy switches: how often the path the policy serves changes along q_len (a tie is served by "
                  "its faster median); flips beyond ties: only the changes beyond the measured spread", markup=False)
    con.print(_table("Regret of the policy", *regret_table(res.regrets)))
    pairs = res.power_pairs
    if pairs is not None and not pairs.empty:
        from kbench.report.power_states import flip_lines, flips

        lines, real = flip_lines(pairs), len(flips(pairs, real_only=True))
        con.print(f"timing states: {len(pairs)} cases measured both unthrottled and sustained; "
                  f"{len(lines)} decision(s) flip between them, {real} beyond the spread in both states "
                  f"(power.csv has them side by side)", markup=False)
        shown = _first(lines, max_rows)
        for line in shown:
            con.print("  flip: " + line, markup=False)
        _more(con, lines, shown, "flips", res.out_dir / "power.csv")
    if res.plot_groups:
        con.print("plots for {} of the {} groups (--plot-groups N draws more)".format(*res.plot_groups), markup=False)
    con.print(wrote_line(res.files, res.out_dir), markup=False)


def _first(rows: list, max_rows: int) -> list:
    """The first max_rows of a listing (negative: all of it)."""
    return rows[:max_rows] if max_rows >= 0 else rows


def _more(con, rows: list, shown: list, what: str, where) -> None:
    """The line that says how much of a listing --max-rows left out, and where the rest is."""
    if len(shown) < len(rows):
        con.print(f"... {len(rows) - len(shown)} more {what} in {where}", markup=False)


def wrote_line(files, out_dir) -> str:
    """'wrote N files to DIR: ...' naming every one of the N (the plots counted, not named)."""
    named = [p.name for p in files if p.suffix != ".png"]
    plots = sum(p.suffix == ".png" for p in files)
    parts = named + ([f"{plots} plot{'s' if plots != 1 else ''}"] if plots else [])
    return f"wrote {len(files)} files to {out_dir}: {', '.join(parts)}"


def _fmt_point(p: dict) -> str:
    return f"bs {p['batch_size']} q {p['q_len']} kv {p['kv_len']}"


def _realistic_filters(f):
    """One filter flag per realistic-batch axis of kbench.cases.axes.AXES (a policy group holds one value of each)."""
    from kbench.report.policy import FILTER_AXES

    for a in reversed([axes.AXIS[n] for n in FILTER_AXES]):
        many = f"; {', '.join(a.aliases)} names several, which a filter refuses" if getattr(a, "aliases", None) else ""
        f = click.option(a.flag, a.name, default=None,
                         help=f"Group filter, one value: {a.help} (default: any; needed when groups differ in "
                              f"it{many}).")(f)
    return f


@click.command("select", epilog=examples(
    "kbench select --policy report/policy.json --batch-size 16 --q-len 4 --kv-len 4096",
    "kbench select --policy report/policy.json --batch-size 16 --q-len 4 --kv-len 4096 --heads 32/8/128 --kv-layout HND --json",
    "kbench select --policy report/policy.json --batch-size 512 --q-len 4 --kv-len 65536 --extrapolate"))
@click.option("--policy", "policy_file", required=True, type=click.Path(),
              help="policy.json from `kbench report`, the report's folder, or a sweep run folder (its policy built as "
                   "kbench report builds it).")
@click.option("--batch-size", type=IntRange(min=1), required=True, help="Requests in the batch.")
@click.option("--q-len", type=IntRange(min=1), required=True,
              help="Query tokens per request (draft tokens + 1); at most --kv-len.")
@click.option("--kv-len", type=IntRange(min=1), required=True, help="KV tokens per request (the context so far).")
@click.option("--heads", default=None, help="QO/KV/DIM heads, e.g. 32/8/128, or mla:QO/KV_LORA_RANK/ROPE/NOPE for "
              "latent attention, e.g. mla:128/512/64/128 (needed when the policy has several; a GQA group never "
              "answers MLA heads).")
@click.option("--dtype", default=None, help="Query/output dtype: bf16, fp16 (needed when the policy has several).")
@click.option("--kv-dtype", default=None, help="KV-cache dtype: bf16, fp16, fp8 (needed when the policy has several).")
@click.option("--page-size", type=INT, default=None, help="KV page size in tokens (needed when the policy has several).")
@click.option("--kv-layout", "--layout", "kv_layout", cls=AliasOption, hidden_aliases=("--layout",), default=None,
              help="KV layout: HND or NHD, as in kbench sweep (needed when the policy has several).")
@click.option("--extrapolate", is_flag=True, help="Answer outside the measured range (clamped to its edge).")
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
@_realistic_filters
def select_cmd(policy_file, batch_size, q_len, kv_len, heads, dtype, kv_dtype, page_size, kv_layout, extrapolate,
               as_json, **realistic):
    """The kernel to use for one shape, from a policy file. Between grid points it uses the nearest measured
    neighbour (and says so); outside the measured range it refuses (exit 2) unless --extrapolate."""
    ans = lookup(policy_from([policy_file])[0], batch_size, q_len, kv_len, extrapolate=extrapolate, heads=heads,
                 dtype=dtype, kv_dtype=kv_dtype, page_size=page_size, kv_layout=kv_layout, **realistic)
    note = unknown_kernel_note(ans["kernel"])
    if note:
        echo(note, err=True)
    write_answer(json.dumps(ans, indent=2) if as_json else "\n".join(_answer_lines(ans)))


def _answer_lines(ans: dict) -> list[str]:
    from kbench.names import ROUTE_KERNEL, kernel_of

    sp = ans["expected_speedup"]
    route = ROUTE_KERNEL.get(ans["kernel"])
    how = f"; fastest as {route[1]}'s route {ans['kernel']}" if route else ""
    out = [f"{kernel_of(ans['kernel'])} ({ans['path']} path{how}) for {_fmt_point(ans['query'])}, {ans['group']}",
           f"timing state: {ans['power']} (" + ("measured at the power cap under continuous load: a busy server"
                                                 if ans["power"] == "sustained" else
                                                 "duty-cycled, off the power cap: latency at low load") + ")",
           "expected decode speedup over the best context kernel: "
           + (f"{sp:.2f}x" if sp is not None else "unknown (one path not measured)")
           + (" (decode and context tie here)" if ans["tie"] else "")]
    if ans["extrapolated"]:
        out.append(f"EXTRAPOLATED: outside the measured range, clamped ({'; '.join(ans['clamped'])})")
    if ans["interpolated"]:
        how = ("its nearest measured neighbour" if ans["method"] == "nearest" else
               "the nearest measured case overall (none on the nearest batch/KV line)")
        out.append(f"interpolated: not measured at {_fmt_point(ans['query'])}: the answer, speedup included, is the "
                   f"one measured at {_fmt_point(ans['used'])}, {how}")
        if ans["grid_point"] and not ans["extrapolated"]:
            out.append("not measured: the policy's grid has this shape but no result for it (an adaptive run did "
                       "not measure it, or no kernel passed its check there)")
        agree = len({kernel_of(n["kernel"]) for n in ans["neighbours"]}) <= 1  # two routes of a kernel agree
        out.append("neighbours: " + "; ".join(f"{_fmt_point(n)} -> {kernel_of(n['kernel'])}"
                                              + (f" (as {n['kernel']})" if n["kernel"] in ROUTE_KERNEL else "")
                                              for n in ans["neighbours"])
                   + ("" if agree else "  (they disagree: measure this shape)"))
    else:
        out.append("measured: this exact shape is in the policy")
    return out
