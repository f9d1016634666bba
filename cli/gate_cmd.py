"""`kbench gate` and `kbench baseline`: thin click commands over kbench.gate and kbench.gate.baselines."""
from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kbench.cli.console import echo, make_console
from kbench.cli.errors import one_line_errors
from kbench.cli.options import FLOAT, INT, AliasOption, OutputPath, examples

GATE_HELP = """Compare a candidate run with a baseline: PASS, FAIL or INCONCLUSIVE (exit 0, 1, 3).

\b
Rows match on kernel, case, dtype and layout (server-bench runs: on case). The first and the last
line are the verdict (at most 120 characters; also the markdown's title), the details above the
last one (server-bench runs: the rows read per case, e.g. B is slower in 1 of the 2 decode-heavy
cases ...) and which noise was tested. Every compared row gets the smallest change its own noise
lets the test see at --alpha with --power (detectable). PASS only where every row's change is
inside its band and detectable <= band; FAIL where a change beyond the band is significant (or a
row fails otherwise); INCONCLUSIVE otherwise, naming the measured change, the detectable change and
the rounds (samples) that would decide it. Per row, with
worse = (cand - base) / base for times and (base - cand) / base for throughputs, and
  band       = max(threshold, K * run_noise, run_spread)   K: --run-spread-k (default 3)
  run_noise  = max(median run_spread of the baseline's ok rows of the same kernel and batch
               size, --noise-floor)
  run_spread = (max - min) / median of the row's per-run medians, recorded by a baseline built
               from several runs: kbench baseline RUN1 RUN2 ... --name NAME
  A single-run baseline has no run_spread: band = max(threshold, K * --noise-floor), which is the
  threshold by default, and the gate warns that run-to-run noise is unknown.
\b
  regression   worse > band AND beyond within-run noise: one-sided Mann-Whitney p < alpha when
               both rows kept samples, else the spread intervals median*(1 +- rel_spread) (or
               p25..p75) do not overlap, else the band alone
  improvement  faster by more than the band and beyond noise: passes, listed
  within-noise beyond the threshold but within the band, detectable <= band: passes
  inconclusive the change or the noise leaves it open (detectable > band, or a change beyond the
               band that is not significant): the verdict is INCONCLUSIVE, exit 3
\b
Server-bench runs: the two halves of one interleaved run (kbench server-bench --url A --url-b B) are
compared round by round: change = the rounds' median B/A ratio - 1, beyond noise when a one-sided
Wilcoxon signed-rank test finds the ratios beyond 1 + threshold (p < alpha; 7 rounds or more). A
baseline of several server runs (kbench baseline RUN1 RUN2 RUN3) gives each case and metric its
run spread (band as above, run_noise: that metric's median spread). Two single runs: only each
run's repeats (warned). A case is decode-heavy when output_len * 256 >= batch_size * input_len.
\b
Also fails: an ok row whose time is absent, NaN, infinite, zero or negative (invalid); a
baseline-ok row now wrong or failed; now skipped or absent from the candidate (unless
--allow-missing); a case whose decode-vs-context winner changed (unless --ignore-winner-change). A
side whose best decode and best context times are within their spreads, or within
max(K * run_noise, run_spread) of either best row of each other, has no winner: a flip there is
listed as a tie and passes.
Refuses (exit 2) runs from different GPU models, SM versions or result schema versions unless --force.
Exit codes: 0 PASS, 1 FAIL (a regression or failure), 2 bad input, 3 INCONCLUSIVE.
"""


def export_options(f):
    """One `--NAME FILE` option per gate output format (kbench.gate.export)."""
    from kbench.gate.export import formats

    for ex in reversed(formats()):
        example = {"markdown": "gate.md", "junit": "gate.xml"}.get(ex.name, f"gate.{ex.name}")
        f = click.option(f"--{ex.name}", f"{ex.name}_file", type=OutputPath(example, dir_okay=False),
                         help=ex.help)(f)
    return f


_STYLE = {"regression": "bold red", "invalid": "bold red", "wrong": "bold red", "failed": "bold red", "skipped": "red",
          "missing": "red", "improvement": "green", "within-noise": "yellow", "new": "cyan",
          "not-compared": "dim", "pass": "", "inconclusive": "yellow"}


def _bounded(items: list, max_rows: int | None, first=None) -> list:
    """At most max_rows of items (None or negative: all), those for which first(item) holds chosen first, in
    their own order (so a failing row is never left out for a row that passes)."""
    if max_rows is None or max_rows < 0 or len(items) <= max_rows:
        return items
    ranked = sorted(range(len(items)), key=lambda i: not first(items[i])) if first else range(len(items))
    keep = set(list(ranked)[:max_rows])
    return [x for i, x in enumerate(items) if i in keep]


def render(res, console: Console, show_all: bool, max_rows: int | None = None) -> None:
    """max_rows: rows of each listing shown (failing rows first; None or negative: all); --show-all lists
    every row of the table."""
    from kbench.gate.markdown import fmt_change, fmt_value

    notable = res.rows if show_all else [r for r in res.rows if r.outcome not in ("pass", "not-compared")]
    rows = notable if show_all else _bounded(notable, max_rows, lambda r: r.fails)
    table = Table(title=escape(f"kbench gate: {res.baseline} -> {res.candidate}"), show_lines=False)
    for col, kw in (("kernel", {}), ("case", {}), ("metric", {}), ("baseline", {"justify": "right"}),
                    ("candidate", {"justify": "right"}), ("change", {"justify": "right"}), ("outcome", {}),
                    ("why", {})):
        table.add_column(col, **kw)
    for r in rows:
        style = _STYLE.get(r.outcome, "")
        table.add_row(escape(r.kernel or "-"), escape(r.case_id), r.metric or "-", fmt_value(r.base_value),
                      fmt_value(r.cand_value), fmt_change(r),
                      f"[{style}]{r.outcome}[/]" if style else r.outcome, escape(r.note))
    if rows:
        console.print(table)
    if len(rows) < len(notable):
        console.print(escape(f"... {len(notable) - len(rows)} more row(s) of the table not shown (--max-rows; "
                             f"--json, --markdown and --junit have every row)"))
    passed = sum(r.outcome == "pass" for r in res.rows) if not show_all else 0
    if passed:
        console.print(f"[dim]{passed} row(s) passed within the threshold (--show-all lists them)[/]")
    skipped = [r for r in res.rows if r.outcome == "not-compared"] if not show_all else []
    if skipped:
        why: dict[str, int] = {}
        for r in skipped:
            k = f"{r.kernel}: {r.note}" if r.kernel else r.note
            why[k] = why.get(k, 0) + 1
        top = "; ".join(f"{n} {k}" for k, n in sorted(why.items(), key=lambda kv: -kv[1])[:4])
        console.print(escape(f"{len(skipped)} row(s) not compared ({top}{'; ...' if len(why) > 4 else ''}); "
                             f"--show-all lists them"), style="dim")
    changes = _bounded(res.winner_changes, max_rows, lambda w: w.fails)
    for w in changes:
        tag = "[bold red]winner change[/]" if w.fails else "[yellow]winner change (allowed)[/]"
        console.print(f"{tag} " + escape(f"{w.case_id}: {w.base_path} ({w.base_winner}) -> {w.cand_path} "
                                         f"({w.cand_winner})"))
    if len(changes) < len(res.winner_changes):
        console.print(escape(f"... {len(res.winner_changes) - len(changes)} more winner change(s) (--max-rows; "
                             f"--json and --markdown have them all)"))
    for w in res.warnings:
        console.print("[yellow]warning:[/] " + escape(w))
    if res.winner_ties:
        ties = _bounded(res.winner_ties, max_rows)
        more = f", ... {len(res.winner_ties) - len(ties)} more" if len(ties) < len(res.winner_ties) else ""
        console.print(escape(f"{len(res.winner_ties)} winner flip(s) within the run-to-run spread, counted as "
                             f"ties: {', '.join(ties)}{more}"), style="dim")
    console.print(escape(f"{res.baseline_hw} vs {res.candidate_hw}; {res.noise_used}"))
    console.print(escape(res.details()), highlight=False, soft_wrap=True)
    print_verdict(console, res)


VERDICT_STYLE = {"PASS": "bold green", "FAIL": "bold red", "INCONCLUSIVE": "bold yellow"}


def print_verdict(console: Console, res) -> None:
    """The verdict line (at most 120 characters: one line of a CI log), never wrapped."""
    console.print(escape(res.summary_line()), style=VERDICT_STYLE[res.verdict], soft_wrap=True, highlight=False)


@click.command("gate", help=GATE_HELP, epilog=examples(
    "kbench gate --baseline results/baselines/h200-draft-extend-kv4096 --candidate results/draft-extend-20261203-101500",
    "kbench gate --baseline results/baselines/h200-draft-extend-kv4096 --candidate RUN --threshold 3% --markdown gate.md --junit gate.xml --json gate.json",
    "kbench gate --baseline results/baselines/h200-draft-extend-kv4096 --candidate RUN --ignore-winner-change --show-all"))
@click.option("--baseline", "baseline", required=True, metavar="BASELINE",
              help="Baseline folder (results/baselines/NAME) or any run folder.")
@click.option("--candidate", "candidate", required=True, metavar="RUN", help="The run to judge.")
@click.option("--threshold", default="5%", show_default=True, help="Relative change that counts: 5% or 0.05.")
@click.option("--alpha", type=FLOAT, default=0.01, show_default=True,
              help="Significance level of the one-sided Mann-Whitney test.")
@click.option("--power", "power", type=FLOAT, default=0.8, show_default=True,
              help="A PASS needs every row to detect a change of the band's size with at least this probability "
                   "(at --alpha, from its own noise); a row that cannot is INCONCLUSIVE (exit 3).")
@click.option("--run-spread-k", type=FLOAT, default=3.0, show_default=True,
              help="K in band = max(threshold, K * run_noise, run_spread): how many pooled run-to-run spreads a change must exceed.")
@click.option("--noise-floor", default="0%", show_default=True,
              help="Smallest run-to-run noise assumed for every row (e.g. 2%), also for single-run baselines.")
@click.option("--ignore-winner-change", is_flag=True, help="A changed decode-vs-context winner does not fail.")
@click.option("--allow-missing", is_flag=True, help="Baseline rows absent (or now skipped) in the candidate do not fail.")
@click.option("--force", is_flag=True, help="Compare across GPU models, SM versions or result schema versions.")
@export_options
@click.option("--show-all", is_flag=True, help="List every row in the terminal table, not only the notable ones.")
@click.option("--max-rows", type=INT, default=40, show_default=True,
              help="Rows of each listing shown on screen: the table (failing rows first), winner changes and ties "
                   "(negative: all; --show-all lists every row; the --json/--markdown/--junit files have them all).")
@one_line_errors
def gate(baseline, candidate, threshold, alpha, power, run_spread_k, noise_floor, ignore_winner_change, allow_missing,
         force, show_all, max_rows, **files):
    from kbench.gate import parse_threshold, run_gate
    from kbench.gate.export import check_paths, export
    from kbench.runs.outputs import distinct_outputs

    outputs = {name.removesuffix("_file"): path for name, path in files.items()}
    distinct_outputs({f"--{name}": path for name, path in outputs.items()}, [baseline, candidate])
    check_paths(outputs)  # every report writable before the gate judges: none written when one cannot be
    res = run_gate(baseline, candidate, threshold=parse_threshold(threshold), alpha=alpha,
                   ignore_winner_change=ignore_winner_change, allow_missing=allow_missing, force=force,
                   run_spread_k=run_spread_k, noise_floor=parse_threshold(noise_floor, "--noise-floor"), power=power)
    console = make_console()
    print_verdict(console, res)  # first: what a CI log's reader sees (and again as the last line)
    render(res, console, show_all, max_rows)
    export(res, outputs)  # markdown: $GITHUB_STEP_SUMMARY too
    sys.exit(res.exit_code)


@click.command("baseline", epilog=examples(
    "kbench baseline results/draft-extend-20261203-101500 --name h200-draft-extend",
    "kbench baseline RUN1 RUN2 RUN3 --name h200-draft-extend --force   # pool three runs, replace the old one",
    "kbench baseline RUN --name try --out /tmp/baselines"))
@click.argument("runs", metavar="RUN [RUN ...]", nargs=-1, required=True)
@click.option("--name", required=True, help="Baseline name: OUT/NAME, by default results/baselines/NAME (one folder name).")
@click.option("--out", "--root", "root", cls=AliasOption, hidden_aliases=("--root",), default="results/baselines",
              show_default=True, type=OutputPath("results/baselines", file_okay=False),
              help="Folder that holds the baselines (--root, its old spelling, still works).")
@click.option("--force", is_flag=True, help="Replace an existing baseline of the same name, as a whole (refused without it; a README or "
                   "report/ kept in its folder is carried over).")
@click.option("--allow-partial", is_flag=True, help="Accept runs that are not complete (interrupted, still running).")
@one_line_errors
def baseline(runs, name, root, force, allow_partial):
    """Write or refresh the baseline NAME from RUN (rows and manifest), meant to be committed.

    \b
    With several runs of the same scenario (name, model, heads), GPU, timer and --slow-kernel (refused
    otherwise, exit 2; their grids may differ: a row some runs lack is kept with a warning, its runs column
    saying how many measured it), each row keeps
    median_us = the median of the per-run medians, run_medians_us, runs (how many runs measured it ok),
    run_spread = (max - min) / median of the per-run medians, and the runs' samples pooled. The gate
    widens its band by run_spread: band = max(threshold, K * run_noise, run_spread), see kbench gate --help.
    """
    from kbench.gate.baselines import baseline_dir, write_multi_baseline
    from kbench.runs.outputs import writable_dir
    from kbench.runs.store import load_run, name_note

    baseline_dir(name, root)  # a bad name is refused before the root is created
    writable_dir(root, "--out", create=False)
    note = name_note(name)
    if note:
        echo(note, err=True)
    loaded = [load_run(r) for r in runs]
    for run, r in zip(runs, loaded):
        if r.manifest.get("status") not in (None, "complete") and allow_partial:
            echo(f"warning: {run} has status {r.manifest.get('status')!r}; the baseline holds only the rows "
                 "it measured", err=True)
    dest, rows, warnings = write_multi_baseline(loaded, name, root, force, allow_partial)
    for w in warnings:
        echo(f"warning: {w}", err=True)
    counts = rows["status"].value_counts().to_dict() if "status" in rows else {}
    detail = ", ".join(f"{v} {k}" for k, v in counts.items())
    src = loaded[0].path if len(loaded) == 1 else f"{len(loaded)} runs"
    spread = ""
    if len(loaded) > 1 and "run_spread" in rows:
        rs = rows["run_spread"].dropna().astype(float)
        if len(rs):
            spread = (f"; run_spread median {rs.median():.1%}, p95 {rs.quantile(0.95):.1%}, "
                      f"max {rs.max():.1%}")
    echo(f"baseline {dest} written from {src} ({len(rows)} rows{': ' + detail if detail else ''}{spread}); "
         f"commit it: git add {dest}")
