"""`kbench server-bench`: options -> kbench.server.run_server_bench, a progress bar per case, a final table."""
from __future__ import annotations

import math
import sys

import click
from rich.markup import escape
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kbench import shell
from kbench.cli.console import make_console
from kbench.cli.options import OutputPath
from kbench.errors import BadInput, KbenchError
from kbench.values import ascii_digits, parse_float
from kbench.server import Listener, ServerBenchConfig, ServerBenchInterrupted, run_server_bench


# SGLang's list options take values space-separated (argparse nargs="+"): `--batch-size 1 4 16`
LIST_OPTIONS = ("--batch-size", "--input-len", "--output-len")


def join_space_lists(args: list[str]) -> list[str]:
    """`--batch-size 1 4 --input-len 600` -> `--batch-size 1,4 --input-len 600` (server-bench has no
    positional argument, so every bare word after a list option is one more value of it)."""
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        name, eq, first = a.partition("=")
        if name in LIST_OPTIONS and (eq or i + 1 < len(args)):
            vals = [first] if eq else [args[i + 1]]
            j = i + (1 if eq else 2)
            while j < len(args) and not args[j].startswith("-"):
                vals.append(args[j])
                j += 1
            out += [name, ",".join(vals)]
            i = j
            continue
        out.append(a)
        i += 1
    return out


class SpaceListCommand(click.Command):
    def parse_args(self, ctx, args):
        return super().parse_args(ctx, join_space_lists(list(args)))


def _int_list(name: str, values: tuple[str, ...]) -> tuple[int, ...]:
    """Lists as sweep takes them (`1,4`, `1..16`, `1..64*2`, `8..32:8`) or space-separated as SGLang takes
    them; order kept, repeats dropped, every value >= 1."""
    from kbench.cases.axes import parse_int_axis

    out = []
    for v in values:
        for part in str(v).split(","):
            if not part.strip():
                continue
            for n in parse_int_axis(part.strip(), name, "server-bench"):
                if n < 1:
                    raise BadInput(f"{name}: {n} must be at least 1")
                out.append(n)
    if not out:
        raise BadInput(f"{name}: give at least one value")
    return tuple(dict.fromkeys(out))  # keep order, drop repeats


def _num(name: str, v: str, kind=float):
    try:
        if kind is int and not ascii_digits(str(v).lstrip("+-")):  # int() takes '١٢', '６４' and '1_000'
            raise ValueError(v)
        x = int(v) if kind is int else parse_float(v)
    except (TypeError, ValueError):
        raise BadInput(f"{name} {v!r}: not {'an integer' if kind is int else 'a number'}") from None
    if kind is float and not math.isfinite(x):
        raise BadInput(f"{name} {v!r}: not a finite number")
    return x


class _RichListener(Listener):
    def __init__(self, console: Console):
        self.console = console
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("tokens"), TimeElapsedColumn(), console=console, transient=False)
        self.task = None

    def run_started(self, run_dir, backend, facts, cases):
        self.console.print(f"server-bench: {len(cases)} case(s) against {backend} "
                           f"{facts.model or ''} -> {run_dir}", highlight=False)
        self.progress.start()

    def case_started(self, case, warmup):
        label = f"{'warm-up ' if warmup else ''}{case.case_id}"
        self.task = self.progress.add_task(label, total=case.batch_size * case.output_len)

    def tokens(self, case, done, total):
        if self.task is not None:
            self.progress.update(self.task, completed=done)

    def flush_retry(self, case, attempt, message, wait):
        self.progress.console.print(f"  flush attempt {attempt} for {case.case_id}: {message}; "
                                    f"retrying in {wait:g} s", style="yellow", highlight=False)

    def case_finished(self, case, row, warmup):
        if self.task is not None:
            desc = self.progress.tasks[-1].description
            mark = {"ok": "[green]ok[/]", "failed": "[red]failed[/]", "skipped": "[yellow]skipped[/]"}[row.status]
            self.progress.update(self.task, description=f"{desc} {mark}")
            self.task = None
        if row.status != "ok":
            # one clear line per case that did not run (flush failure names endpoint, status and body)
            self.progress.console.print(f"  {'warm-up ' if warmup else ''}{case.case_id} {row.status}: "
                                        f"{row.reason}", highlight=False, markup=False)

    def warning(self, message):
        self.progress.console.print(f"warning: {message}", style="yellow", highlight=False, markup=False)

    def stop(self):
        self.progress.stop()


def _fmt(v, nd=2):
    return "-" if v is None else f"{v:.{nd}f}"


def render_table(result, console: Console) -> None:
    t = Table(title=f"server-bench {result.backend} ({result.run_dir.name})")
    for c in ("case", "status", "flush", "latency s", "ttft s", "in tok/s", "out tok/s", "overall tok/s",
              "ITL ms", "acc len", "accept", "cache hit", "reason"):
        t.add_column(c, justify="left" if c in ("case", "status", "reason") else "right",
                     overflow="fold", max_width=60 if c == "reason" else None)
    for r in result.rows:
        t.add_row(r.case_id, r.status, str(r.flush_attempts), _fmt(r.latency, 4), _fmt(r.last_ttft, 4),
                  _fmt(r.input_throughput), _fmt(r.output_throughput), _fmt(r.overall_throughput),
                  _fmt(r.itl_ms, 3), _fmt(r.acc_length if r.acc_length and r.acc_length > 0 else None),
                  "-" if r.acceptance_rate is None else f"{r.acceptance_rate:.0%}",
                  "-" if r.cache_hit_rate is None else f"{r.cache_hit_rate:.2f}", r.reason)
    console.print(t)


HELP = """One-batch benchmark of a live SGLang or vLLM server, comparable with SGLang's bench_one_batch_server.

For each case (batch size x input length x output length): flush the server's cache (retrying while it
is busy), send the batch as one streaming request, and record latency, TTFT, input, output and overall
throughput, ITL, the prefix-cache hit rate and the speculative acceptance length (vLLM: from /metrics).
SGLang's own command line runs as is: lists space-separated (--batch-size 1 4 16) or as sweep takes them
(1,4 or 1..16 or 1..64*2), --base-url, --result-filename (SGLang's JSON lines, same fields and rounding),
--run-name, --cache-hit-rate, --show-report. Exit 1 when a case failed; 130 on Ctrl-C and 143 on SIGTERM
(rows kept, the run marked interrupted, --resume finishes it).

\b
A/B of a server setting, on a shared machine: A and B interleaved in one run, round by round (ABBA),
  kbench server-bench --url A_URL --url-b B_URL ... --repeat auto --batches-per-round 3 --run-name ab
  (one server: --switch-command 'bash switch.sh {side}' switches it between the rounds; --repeat
  auto, the default of an A/B, adds rounds until the gate's rule decides every case or --budget
  ends), then the command it prints,
  kbench gate --baseline RUN_A --candidate RUN_B
which compares the rounds as pairs: PASS, FAIL or INCONCLUSIVE (exit 0, 1, 3), e.g. FAIL: B is
slower in 1 of the 2 decode-heavy cases (bs1-in64-out16: latency +12.0%, ...).
"""

EPILOG = """\b
Examples:
  kbench server-bench --base-url http://127.0.0.1:30000 --batch-size 1 16 64 --input-len 1024 --output-len 8
  kbench server-bench --url http://127.0.0.1:30000 --url-b http://127.0.0.1:30001 --api-key-file key.txt --batch-size 1..8*2 --repeat 20 --run-name ab
  kbench server-bench --resume results/server-bench-default-20250101-120000 --url http://127.0.0.1:8000
"""

# options a resumed run takes from its own manifest: giving them again would be silently ignored, so refuse
# (credentials are never kept: they are given again)
_RESUME_OK = {"url", "resume", "api_key", "api_key_file", "header", "header_file"}


@click.command("server-bench", cls=SpaceListCommand, help=HELP, epilog=EPILOG)
@click.option("--url", "--base-url", "url", default=None, metavar="URL",
              help="Base URL of the running server, e.g. http://127.0.0.1:30000 (required unless --resume; "
                   "--base-url is SGLang's spelling).")
@click.option("--url-b", "url_b", default=None, metavar="URL",
              help="Interleaved A/B: B's server (--url is A's). Each case's batches alternate A and B, round by round "
                   "in ABBA order (--repeat rounds: 7 or more, more on a busy machine); two run folders, ...-a-TIME and ...-b-TIME, which "
                   "kbench gate reads as paired samples. The way to run an A/B on a shared machine.")
@click.option("--switch-command", default=None, metavar="CMD",
              help="Interleaved A/B of one server: CMD switches it to side {side} (a or b; also $KBENCH_AB_SIDE), "
                   "e.g. a script that restarts it with B's setting; run before each phase (A B | B A | ...: one "
                   "switch per round), then kbench waits for the server to answer. Must exit 0. Run without a shell "
                   "(split as a shell line; shell syntax: bash -c '...').")
@click.option("--switch-timeout", default="600", metavar="SECONDS", show_default=True,
              help="Seconds the switch command, and then the server's answer, may take.")
@click.option("--api-key", default=None, metavar="KEY",
              help="Sent as 'Authorization: Bearer KEY' (SGLang's and vLLM's --api-key servers). Visible to other "
                   "users in the process list: prefer --api-key-file or $KBENCH_API_KEY. Never stored or printed.")
@click.option("--api-key-file", default=None, metavar="FILE", help="Read the API key from FILE (one line).")
@click.option("--header", "header", multiple=True, metavar="'NAME: VALUE'",
              help="An extra request header (repeatable), e.g. for a gateway's auth; also --header-file FILE or "
                   "$KBENCH_HEADERS, one header a line. Values are never stored or printed.")
@click.option("--header-file", default=None, metavar="FILE", help="Extra headers from FILE, one 'Name: value' a line.")
@click.option("--backend", default="auto", show_default=True, metavar="sglang|vllm|auto",
              help="Server protocol; auto probes /v1/models and /server_info.")
@click.option("--batch-size", "batch_size", multiple=True, default=("1",), show_default=True, metavar="N [N..]",
              help="Batch sizes: space-separated (SGLang), comma list, range 1..16, 1..64*2 or 8..32:8.")
@click.option("--input-len", multiple=True, default=("1024",), show_default=True, metavar="N [N..]",
              help="Input lengths in tokens (same list forms as --batch-size).")
@click.option("--output-len", multiple=True, default=("16",), show_default=True, metavar="N [N..]",
              help="Output lengths in tokens, generated with ignore_eos (same list forms).")
@click.option("--run-name", default=None, metavar="NAME",
              help="run_name in the JSON lines and the run folder's name  [default: default]")
@click.option("--name", "old_name", default=None, hidden=True)  # kbench's other commands' spelling
@click.option("--temperature", default="0", metavar="T", show_default=True,
              help="Sampling temperature (0 = greedy, as SGLang's tool).")
@click.option("--seed", default="1", metavar="N", show_default=True,
              help="Seed of the prompts' token ids (and the request's sampling seed on vLLM).")
@click.option("--skip-warmup", is_flag=True, help="No warm-up batch (input 1024, output 16) per batch size.")
@click.option("--cache-hit-rate", default="0", metavar="F", show_default=True,
              help="SGLang's: before each timed batch, send the first F of each prompt (1 output token) so a "
                   "fraction F of the batch's prompt tokens can hit the prefix cache; the hit rate the server "
                   "measured is reported (cache_hit_rate).")
@click.option("--return-logprob", is_flag=True, help="Ask for the sampled tokens' logprobs (SGLang: return_logprob; "
                                                      "vLLM: logprobs=1), as SGLang's option.")
@click.option("--client-stream-interval", default="1", metavar="N", show_default=True,
              help="SGLang's sampling_params.stream_interval: a chunk every N tokens (vLLM: a server flag; warned).")
@click.option("--input-len-step-percentage", default="0", metavar="F", show_default=True,
              help="Accepted and recorded for SGLang command lines; SGLang's tool does not use it either.")
@click.option("--prompt-pattern", default="random", metavar="random|repeat:N", show_default=True,
              help="random: uniform random ids (SGLang's): raw speed; an n-gram drafter finds nothing in the "
                   "prompt. repeat:N: each prompt repeats its own random N-token pattern, so n-gram speculative "
                   "drafts are proposed and accepted from the first step.")
@click.option("--repeat", "repeat", default="1", metavar="N|auto", show_default=True,
              help="Timed batches per case (a flush before each): the row holds the medians and every value, "
                   "which the gate's noise test uses. Interleaved A/B: the rounds (7 or more); auto: rounds are "
                   "added until the gate's rule decides every case (PASS or FAIL) or --budget ends (then the gate "
                   "says INCONCLUSIVE), tested with O'Brien-Fleming alpha spending over the rounds the budget fits; "
                   "a case the budget cannot decide stops early, INCONCLUSIVE (docs/gate.md).")
@click.option("--budget", "budget", default="300", metavar="SECONDS", show_default=True,
              help="--repeat auto: wall-clock seconds of the whole run, connecting and warm-up included (a round that "
                   "would not fit is not started).")
@click.option("--batches-per-round", "batches_per_round", default="1", metavar="K", show_default=True,
              help="Interleaved A/B: K adjacent A/B batch pairs per case and round; the round's value on each side "
                   "is the median of its K batches, so one burst of a busy machine does not decide a round (3 on "
                   "a shared CI runner).")
@click.option("--threshold", "threshold", default="5%", show_default=True,
              help="--repeat auto: the gate's --threshold the rounds must decide (a change of at most this passes).")
@click.option("--alpha", "alpha", default="0.01", show_default=True,
              help="--repeat auto: the gate's --alpha (false-alarm rate over all the looks).")
@click.option("--power", "power", default="0.8", show_default=True,
              help="--repeat auto: the gate's --power (a PASS must have been able to see a change of the threshold).")
@click.option("--show-report", is_flag=True, help="Print SGLang's markdown report table at the end.")
@click.option("--no-append-to-github-summary", "append_summary", is_flag=True, flag_value=False, default=True,
              help="Do not append that report to $GITHUB_STEP_SUMMARY (appended when the variable is set).")
@click.option("--flush-retries", default="3", metavar="N", show_default=True,
              help="Cache-flush attempts per case in all (SGLang: 3 tries).")
@click.option("--flush-retry-wait", default="2", metavar="SECONDS", show_default=True, help="Seconds between flush attempts.")
@click.option("--flush-timeout", default="30", metavar="SECONDS", show_default=True,
              help="Seconds an SGLang server may wait for idle (/flush_cache?timeout=).")
@click.option("--request-timeout", default="600", metavar="SECONDS", show_default=True, help="Seconds for one whole batch.")
@click.option("--profile", is_flag=True, help="POST /start_profile before and /stop_profile after each case.")
@click.option("--model", default=None, metavar="NAME",
              help="Model name (vLLM; default: the first one served). SGLang's `--model None` means the same.")
@click.option("--vocab-size", default=None, metavar="N", help="Draw token ids from [0, N) (default: from the server's model).")
@click.option("--out", "out_dir", default="results", metavar="DIR", show_default=True,
              type=OutputPath("results", "folder"),
              help="Folder for the run folder (checked writable before anything runs).")
@click.option("--result-filename", default=None, metavar="FILE", type=OutputPath("result.jsonl", "file"),
              help="Also append SGLang's JSON lines to this file (rewritten atomically per line).")
@click.option("--fail-fast", is_flag=True, help="Stop at the first failed case.")
@click.option("--resume", default=None, metavar="RUN", type=OutputPath("results/RUN", "run folder"),
              help="Finish an interrupted run with its own settings (only --url may change); cases with a row "
                   "are not re-run.")
@click.pass_context
def server_bench(ctx, url, url_b, switch_command, switch_timeout, api_key, api_key_file, header, header_file, backend, batch_size, input_len, output_len,
                 run_name, old_name, temperature, seed, skip_warmup, cache_hit_rate, return_logprob,
                 client_stream_interval, input_len_step_percentage, prompt_pattern, repeat, budget, batches_per_round,
                 threshold, alpha, power, show_report, append_summary, flush_retries, flush_retry_wait,
                 flush_timeout, request_timeout, profile, model, vocab_size, out_dir, result_filename, fail_fast,
                 resume):
    from click.core import ParameterSource
    from kbench import redact
    from kbench.server.auth import load_credentials

    given = [p for p in ctx.params if ctx.get_parameter_source(p) == ParameterSource.COMMANDLINE]
    creds = load_credentials(api_key, api_key_file, header, header_file)
    command = ["kbench", *redact.argv(sys.argv[1:])]  # no secret in the recorded command line
    if resume:
        from kbench.server.bench import config_of_run

        refused = [p for p in given if p not in _RESUME_OK]
        if refused:
            flags = ", ".join("--" + ("name" if p == "old_name" else "out" if p == "out_dir" else
                                      "no-append-to-github-summary" if p == "append_summary" else
                                      p.replace("_", "-")) for p in refused)
            raise BadInput(f"--resume {resume}: {flags} cannot be changed on resume (the run keeps the settings "
                           f"it was started with; only --url may change); drop {'it' if len(refused) == 1 else 'them'}"
                           f" or start a new run")
        cfg = config_of_run(resume, url, creds)
        cfg.command = command
        return _run(cfg, cfg.result_filename)
    if not url:
        raise BadInput("--url: required (the server's base URL, e.g. http://127.0.0.1:30000)")
    if run_name and old_name and run_name != old_name:
        raise BadInput(f"--run-name {run_name!r} and --name {old_name!r}: give one")
    if model is not None and model.strip().lower() == "none":
        model = None  # SGLang: --model None = "use the server at --base-url"
    from kbench.server.prompts import parse_prompt_pattern
    from kbench.gate.compare import parse_threshold

    auto = str(repeat).strip().lower() == "auto" or ("repeat" not in given and bool(url_b or switch_command))
    ab_only = [f"--{p.replace('_', '-')}" for p in ("budget", "batches_per_round", "threshold", "alpha", "power")
               if p in given]
    if auto and not (url_b or switch_command):
        raise BadInput("--repeat auto adds interleaved rounds until the gate can decide: it needs --url-b or "
                       "--switch-command")
    if ab_only and not (url_b or switch_command):
        raise BadInput(f"{', '.join(ab_only)}: options of an interleaved A/B (--url-b or --switch-command)")
    if [p for p in ("threshold", "alpha", "power", "budget") if p in given] and not auto:
        raise BadInput("--budget, --threshold, --alpha and --power decide when --repeat auto stops: give --repeat auto")
    cfg = ServerBenchConfig(
        url=url, backend=backend.lower(), batch_sizes=_int_list("--batch-size", batch_size),
        input_lens=_int_list("--input-len", input_len), output_lens=_int_list("--output-len", output_len),
        run_name=run_name or old_name or "default", temperature=_num("--temperature", temperature),
        skip_warmup=skip_warmup, flush_retries=_num("--flush-retries", flush_retries, int),
        flush_retry_wait=_num("--flush-retry-wait", flush_retry_wait),
        flush_timeout=_num("--flush-timeout", flush_timeout), request_timeout=_num("--request-timeout", request_timeout),
        profile=profile, model=model, vocab_size=_num("--vocab-size", vocab_size, int) if vocab_size is not None else None,
        seed=_num("--seed", seed, int), out_dir=out_dir, result_filename=result_filename, fail_fast=fail_fast,
        cache_hit_rate=_num("--cache-hit-rate", cache_hit_rate), return_logprob=return_logprob,
        client_stream_interval=_num("--client-stream-interval", client_stream_interval, int),
        input_len_step_percentage=_num("--input-len-step-percentage", input_len_step_percentage),
        prompt_pattern=str(parse_prompt_pattern(prompt_pattern)),
        repeat=MAX_AUTO_ROUNDS if auto else _num("--repeat", repeat, int), repeat_auto=auto,
        budget=_num("--budget", budget), batches_per_round=_num("--batches-per-round", batches_per_round, int),
        threshold=parse_threshold(threshold), alpha=_num("--alpha", alpha), power=_num("--power", power),
        show_report=show_report, append_to_github_summary=append_summary,
        url_b=url_b, switch_command=switch_command, switch_timeout=_num("--switch-timeout", switch_timeout),
        command=command, credentials=creds)
    if url_b or switch_command:
        return _run_ab(cfg, result_filename)
    return _run(cfg, result_filename)


MAX_AUTO_ROUNDS = 400  # --repeat auto: the budget ends it long before


class _ABListener(Listener):
    """An interleaved A/B's progress: a line per round of each case (A's and B's latency)."""

    def __init__(self, console: Console):
        self.console, self.line = console, {}

    def run_started(self, run_dir, backend, facts, cases):
        self.console.print(f"server-bench A/B: {len(cases)} case(s) against {backend} {facts.model or ''}, A and B "
                           f"interleaved -> {run_dir.parent}", highlight=False)

    def ab_batch(self, case, side, round_, rounds, latency, reason):
        key = (case.case_id, round_)
        self.line[key] = self.line.get(key, "") + f" {side.upper()} " + (f"{latency:.4f} s" if latency else "failed")
        if self.line[key].count(" s") + self.line[key].count("failed") == 2:
            self.console.print(f"  round {round_ + 1}/{rounds} {case.case_id}:{self.line.pop(key)}", highlight=False)
        if reason:
            self.console.print(f"  {case.case_id} {side.upper()} failed: {reason}", highlight=False, markup=False)

    def ab_look(self, look, rounds, alpha, decided, cases):
        fails = sum(v == "fail" for v in decided.values())
        gone = sum(v == "out-of-reach" for v in decided.values())
        self.console.print(f"  look {look} after {rounds} rounds (alpha {alpha:.2g}): {len(decided) - gone} of {cases} "
                           f"case(s) decided ({len(decided) - fails - gone} pass, {fails} fail)"
                           + (f", {gone} out of the budget's reach (INCONCLUSIVE)" if gone else ""), highlight=False)

    def ab_switch(self, side, command):
        self.console.print(f"  switching the server to {side.upper()}: {command}", highlight=False, markup=False)

    def warning(self, message):
        self.console.print(f"warning: {message}", style="yellow", highlight=False, markup=False)


def _run_ab(cfg, result_filename):
    """An interleaved A/B (kbench.server.interleave): both run folders' tables, then the gate command to run."""
    from kbench.server.interleave import run_interleaved
    from kbench.runs.signals import stop_reason, terminate_as_interrupt

    console = make_console()
    try:
        with terminate_as_interrupt():
            ab = run_interleaved(cfg, _ABListener(console))
    except KeyboardInterrupt as e:  # before the run folders existed (connecting, switching)
        err = KbenchError(f"{stop_reason(e)} before any case ran; nothing was written")
        err.exit_code = 128 + getattr(e, "signum", 2)
        raise err from None
    for side in (ab.a, ab.b):
        render_table(side, console)
    gate = shell.kbench("gate", "--baseline", ab.a.run_dir, "--candidate", ab.b.run_dir,
                        *(("--threshold", f"{cfg.threshold:.6g}", "--alpha", f"{cfg.alpha:g}", "--power",
                           f"{cfg.power:g}") if cfg.repeat_auto else ()))
    ended = ab.ended or {}
    gone = ended.get("out_of_reach") or {}
    how = {"decided": "every case decided", "budget": f"the --budget of {cfg.budget:g} s ended",
           "max-rounds": "the most rounds ran", "planned-rounds": "the planned rounds ran",
           "out-of-reach": (f"every case decided or out of the budget's reach ({len(gone)} case(s) stopped "
                            f"undecided: {', '.join(gone)})")}.get(ended.get("stopped"), "")
    console.print(escape(f"A: {ab.a.run_dir}\nB: {ab.b.run_dir}\n{ab.rounds} round(s)"
                         + (f", {ended.get('looks')} look(s): {how}" if cfg.repeat_auto else "")
                         + f"\njudge it (PASS, FAIL or INCONCLUSIVE) with: {gate}"), highlight=False, soft_wrap=True)
    failed = ab.a.failed + ab.b.failed
    if failed:
        raise KbenchError(f"{len(failed)} of {len(ab.a.rows) + len(ab.b.rows)} row(s) failed; first: "
                          f"{failed[0].case_id}: {failed[0].reason}")


def _run(cfg, result_filename):
    from kbench.server.bench import check_outputs
    from kbench.runs.signals import stop_reason, terminate_as_interrupt

    cfg.validate()
    check_outputs(cfg)  # --out / --result-filename writable: exit 2 before anything runs
    console = make_console()  # without a terminal: log width, not 80 columns that wrap every value
    ls = _RichListener(console)
    try:
        with terminate_as_interrupt():  # SIGTERM (Slurm, Kubernetes, CI) ends the run like Ctrl-C
            result = run_server_bench(cfg, ls)
    except ServerBenchInterrupted as e:
        ls.stop()
        render_table(e.result, console)
        raise
    except KeyboardInterrupt as e:  # before the run folder existed (connecting to the server)
        err = KbenchError(f"{stop_reason(e)} before any case ran; nothing was written")
        err.exit_code = 128 + getattr(e, "signum", 2)
        raise err from None
    finally:
        ls.stop()
    render_table(result, console)
    if cfg.show_report and result.report:
        click.echo(result.report)
    console.print(f"rows: {result.run_dir}  JSON lines: {result.run_dir / 'result.jsonl'}"
                  + (f" and {result_filename}" if result_filename else ""), highlight=False)
    if result.failed:
        raise KbenchError(f"{len(result.failed)} of {len(result.rows)} case(s) failed; first: "
                          f"{result.failed[0].case_id}: {result.failed[0].reason}")
