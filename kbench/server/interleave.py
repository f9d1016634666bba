"""Interleaved A/B of a server setting: one measurement that alternates A and B, so that whatever else the machine
does (a CI neighbour, clocks, a warming cache) hits both sides alike; the gate reads the two sides as paired
samples (kbench.gate.paired).

    from kbench.server import ServerBenchConfig
    from kbench.server.interleave import run_interleaved
    ab = run_interleaved(ServerBenchConfig(url=A_URL, url_b=B_URL, batch_sizes=(1, 8), repeat=8, run_name="ab"))
    ab.a.run_dir, ab.b.run_dir   # kbench gate --baseline A_RUN --candidate B_RUN: paired, one verdict

Two ways to have A and B:

- two servers (``url`` and ``url_b``): for each round and each case, one batch on A and one on B, adjacent in
  time, A first in one round and B first in the next (ABBA per case), and the other way round for every second
  case;
- one server and a command that switches it (``switch_command``, e.g. a script that restarts the server with
  the setting of side {side}): rounds of A's cases then B's, then B's then A's (A B | B A | A B ...: one
  switch per round); the command gets the side as ``{side}`` in its text and as $KBENCH_AB_SIDE (``a`` or
  ``b``), runs before the first phase too, must exit 0, and kbench then waits (up to ``switch_timeout`` s) until
  the server answers again, warms it up (unless skip_warmup) and checks that it serves the same model.

``repeat`` is the number of rounds: each case gets that many batches on each side, a flush before each. The
rounds' pairs are what the gate tests (one-sided Wilcoxon signed-rank on the per-round ratios), so at least
7 of them are needed to reach alpha 0.01 (kbench.gate.paired.min_rounds); more find smaller changes. Each
side is an ordinary server-bench run folder (``server-bench-NAME-a-TIME``, ``...-b-TIME``) whose manifest's
``interleave`` entry names the pair (id, side, order, rounds, mode); its ``<metric>_samples`` are in round
order. A and B must serve the same model (else
BadInput); a batch that fails fails its case on both sides (the pair is incomplete). An interleaved run is not
resumed: run it again.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import time
import uuid
from statistics import median
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import requests

from kbench.text import recorded
from kbench import redact, shell
from kbench.errors import BadInput, KbenchError
from kbench.runs.session import RunSession
from kbench.server.group_guard import GroupGuard, end_groups
from kbench.server.bench import (RESULT_JSONL, Listener, ServerBenchConfig, ServerBenchInterrupted,
                                 ServerBenchResult, ServerCase, append_lines, Runner, check_outputs, run_manifest)
from kbench.server import counters as ctr
from kbench.server.rows import ServerBenchRow
from kbench.server.workload import write_workload

SIDES = ("a", "b")
ORDER = "ABBA"
SIDE_ENV = "KBENCH_AB_SIDE"


@dataclass
class InterleavedResult:
    a: ServerBenchResult
    b: ServerBenchResult
    mode: str  # two-servers | switch
    rounds: int  # rounds run
    switches: int = 0
    ended: dict | None = None  # how the rounds ended (the manifests' interleave entry: stopped, looks, ...)

    @property
    def exit_code(self) -> int:
        return max(self.a.exit_code, self.b.exit_code)


class InterleavedInterrupted(ServerBenchInterrupted):
    """Ctrl-C or SIGTERM during an interleaved A/B: both halves keep every finished round (their journals) and end
    interrupted. It is not resumed (a second run's rounds would pair with another moment's): the gate pairs the
    rounds both halves hold, or the A/B is run again."""

    def __init__(self, a: ServerBenchResult, b: ServerBenchResult, signum: int | None = None):
        import signal as _signal

        super().__init__(a, signum)
        self.b = b
        n = _rounds_kept(a.run_dir, b.run_dir)
        gate = shell.kbench("gate", "--baseline", a.run_dir, "--candidate", b.run_dir)
        self.args = (f"stopped by {_signal.Signals(self.signum).name}; the finished rounds are kept in both halves "
                     f"({n} round(s) of every case both hold; status interrupted); gate them: {gate}; an "
                     f"interleaved A/B is not resumed: run it again for more rounds",)


def _rounds_kept(a_dir, b_dir) -> int:
    """The fewest rounds of a case both halves hold (from their journals)."""
    from kbench.runs.store import JOURNAL, read_journal
    from kbench.server.rows import ROW_KIND

    held = []
    for d in (a_dir, b_dir):
        try:
            rows = read_journal(Path(d) / JOURNAL, ROW_KIND)
        except (KbenchError, OSError):
            return 0
        held.append({c: set(r) for c, r in zip(rows.get("case_id", []), rows.get("sample_rounds", []))
                     if r is not None})
    common = [len(held[0][c] & held[1].get(c, set())) for c in held[0]]
    return min(common) if common else 0


def schedule(n_cases: int, rounds: int, mode: str) -> list[tuple[int, int, str]]:
    """(round, case index, side) in the order they run (module docstring)."""
    out = []
    for r in range(rounds):
        if mode == "switch":
            for side in (SIDES if r % 2 == 0 else SIDES[::-1]):
                out += [(r, c, side) for c in range(n_cases)]
        else:
            for c in range(n_cases):
                out += [(r, c, side) for side in (SIDES if (r + c) % 2 == 0 else SIDES[::-1])]
    return out


def check_config(config: ServerBenchConfig) -> str:
    """The mode (two-servers | switch) of a valid interleaved configuration, else BadInput."""
    if config.url_b and config.switch_command:
        raise BadInput("--url-b and --switch-command: give one (two servers, or one server switched between A and B)")
    if not config.url_b and not config.switch_command:
        raise BadInput("an interleaved A/B needs --url-b (B's server) or --switch-command (one server switched)")
    if config.resume:
        raise BadInput("an interleaved A/B is not resumed: run it again")
    if not isinstance(config.switch_timeout, (int, float)) or not config.switch_timeout > 0:
        raise BadInput(f"--switch-timeout {config.switch_timeout!r}: must be a number of seconds > 0")
    if config.switch_command is not None:
        switch_argv(config.switch_command, "a")  # a line that does not split is bad input before anything runs
    if config.url_b:
        replace(config, url=config.url_b, url_b=None).validate()  # B's URL checked as --url is (messages say --url)
    from kbench.gate.paired import min_rounds

    need = min_rounds(config.alpha)
    if not config.repeat_auto and config.repeat < need:
        raise BadInput(f"--repeat {config.repeat}: an interleaved A/B needs at least {need} rounds (with fewer the "
                       f"gate's paired test cannot reach alpha {config.alpha:g}: it could never find a difference); "
                       f"give --repeat {need} or more, or --repeat auto")
    return "two-servers" if config.url_b else "switch"


def switch_argv(line: str, side: str) -> list[str]:
    """--switch-command's words for a side: the line split as a shell splits it ({side} replaced in each word),
    run without a shell, so no value of it is ever read as shell code."""
    try:
        words = shlex.split(line)
    except ValueError as e:
        raise BadInput(f"--switch-command {line!r}: {e} (it is split as a shell line; shell syntax: bash -c '...')")
    if not words:
        raise BadInput("--switch-command is empty")
    return [w.replace("{side}", side) for w in words]


class _Switcher:
    """Runs the switch command for a side, then waits until the server answers with the same model. Each command
    runs in a process group of its own (a session), so what it leaves running (the server it started in the
    background) is ended with kbench: close() (the end of the run, an error, Ctrl-C, SIGTERM) sends the groups
    SIGTERM, then SIGKILL to what is left after group_guard.GRACE_S; a kill -9 of kbench, which no handler sees, is
    covered by a guard process (kbench.server.group_guard) that ends the groups when kbench dies. The command is
    shown and recorded redacted (kbench.redact.line: an --api-key in it is ***)."""

    def __init__(self, config: ServerBenchConfig, ls: Listener, sleep: Callable[[float], None]):
        self.config, self.ls, self.sleep = config, ls, sleep
        self.side: str | None = None
        self.count = 0
        self.groups: list[int] = []
        self.guard = GroupGuard()

    def to(self, side: str, runner: Runner) -> None:
        if side == self.side:
            return
        argv = switch_argv(self.config.switch_command, side)
        cmd = shell.command_line(redact.argv(argv))
        self.ls.ab_switch(side, cmd)
        try:  # no shell: the line is split as a shell splits it (shell syntax: write bash -c '...')
            p = subprocess.Popen(argv, env={**os.environ, SIDE_ENV: side}, start_new_session=True)
        except OSError as e:
            raise KbenchError(f"--switch-command for side {side.upper()} cannot run {redact.text(argv[0])!r}: "
                              f"{e.strerror or e}") from None
        self.groups.append(p.pid)
        self.guard.add(p.pid)
        try:
            p.wait(timeout=self.config.switch_timeout)
        except subprocess.TimeoutExpired:
            raise KbenchError(f"--switch-command for side {side.upper()} did not finish within "
                              f"{self.config.switch_timeout:g} s") from None
        finally:
            if p.returncode is None:
                self.close()
        if p.returncode != 0:
            raise KbenchError(f"--switch-command for side {side.upper()} exited {p.returncode}: {cmd}")
        deadline = time.monotonic() + self.config.switch_timeout
        while True:
            try:
                runner.connect()
                break
            except KbenchError as e:
                if time.monotonic() > deadline:
                    raise KbenchError(f"the server did not answer within {self.config.switch_timeout:g} s of the "
                                      f"switch to {side.upper()}: {e}") from None
                self.sleep(1.0)
        self.side = side
        self.count += 1

    def close(self) -> None:
        """End every process the switch commands started (their process groups): SIGTERM, then SIGKILL."""
        groups, self.groups = self.groups, []
        end_groups(groups)
        for g in groups:
            self.guard.forget(g)


def _same_model(a: str | None, b: str | None, where: str) -> None:
    if (a or "") != (b or ""):
        raise BadInput(f"A and B serve different models ({recorded(a)} vs {recorded(b)}{where}): an A/B compares one model with "
                       f"one setting changed; give both sides the same --model")


def run_interleaved(config: ServerBenchConfig, listener: Listener | None = None, *,
                    sleep: Callable[[float], None] = time.sleep,
                    session: requests.Session | None = None) -> InterleavedResult:
    """Run every case of ``config`` on A and B interleaved (module docstring); two run folders under
    ``config.out_dir``. Raises BadInput for a bad config or sides that serve different models, KbenchError when a
    server cannot be used, ServerBenchInterrupted (its result: A's side) on Ctrl-C. What a --switch-command left
    running is ended when this returns or raises (_Switcher.close)."""
    switchers: list[_Switcher] = []
    try:
        return _interleaved(config, listener, sleep, session, switchers)
    finally:
        for sw in switchers:
            sw.close()


def _interleaved(config: ServerBenchConfig, listener: Listener | None, sleep: Callable[[float], None],
                 session: requests.Session | None, switchers: list) -> InterleavedResult:
    config.validate()
    began = time.monotonic()  # --budget is the run's wall clock from here: connecting and the warm-up count
    mode = check_config(config)
    check_outputs(config)
    ls = listener or Listener()
    cfg = {"a": replace(config, url_b=None), "b": replace(config, url=config.url_b or config.url, url_b=None)}
    runners = {s: Runner(cfg[s], ls, sleep, session) for s in SIDES}
    switcher = _Switcher(config, ls, sleep) if mode == "switch" else None
    if switcher:
        switchers.append(switcher)
        switcher.to("a", runners["a"])
        backend, facts_a = runners["a"].backend.name, runners["a"].backend.facts
        facts = {"a": facts_a}
    else:
        facts = {}
        for s in SIDES:
            try:
                backend, facts[s] = runners[s].connect()
            except KbenchError as e:  # which side: the user gave two URLs
                if s == "a":
                    raise
                raise BadInput(f"B (--url-b {cfg['b'].recorded()['url']}) does not answer: "
                               f"{str(e).removeprefix('cannot use the server: ')}") from None
        _same_model(facts["a"].model, facts["b"].model, "")
        if runners["a"].backend.name != runners["b"].backend.name:
            raise BadInput(f"A is a {runners['a'].backend.name} server and B a {runners['b'].backend.name} one: an "
                           f"A/B compares one setting of one engine")
    cases = config.cases()
    rounds = config.repeat
    pair_id = uuid.uuid4().hex[:12]
    sessions, results = {}, {}
    for s in SIDES:
        f = facts.get(s, facts["a"])
        m = run_manifest(cfg[s], runners[s].backend.name if runners[s].backend else backend, f)
        m["interleave"] = {"id": pair_id, "side": s, "order": ORDER, "rounds": rounds, "mode": mode,
                           "batches_per_round": config.batches_per_round,
                           **({"repeat": "auto", "rule": "alpha spending over the planned rounds (kbench.gate.sequential)",
                               "threshold": config.threshold, "alpha": config.alpha, "power": config.power,
                               "budget_s": config.budget} if config.repeat_auto else {}),
                           "url_a": cfg["a"].recorded()["url"], "url_b": cfg["b"].recorded()["url"],
                           **({"switch_command": redact.line(config.switch_command)} if switcher else {})}
        sessions[s] = RunSession.new(config.out_dir, f"server-bench-{config.run_name}-{s}", m)
        results[s] = ServerBenchResult(sessions[s].dir, "running", backend, f)
    try:
        with sessions["a"] as run_a, sessions["b"] as run_b:
            for s in SIDES:
                results[s].run_dir = sessions[s].dir
            runs = {"a": run_a, "b": run_b}
            for s in SIDES:
                runs[s].update_manifest(interleave={**runs[s].manifest.get("interleave"),
                                                    "other": sessions["b" if s == "a" else "a"].dir.name})
            ended = _run(config, mode, cases, rounds, runners, switcher, ls, runs, results, began)
            for s in SIDES:
                runs[s].update_manifest(interleave={**runs[s].manifest.get("interleave"), **ended})
    except KeyboardInterrupt as e:
        for r in results.values():
            r.status = "interrupted"
        raise InterleavedInterrupted(results["a"], results["b"], getattr(e, "signum", None)) from None
    for s in SIDES:
        results[s].status = sessions[s].status
        write_workload(sessions[s].dir, results[s].facts.info, backend, results[s].facts.model)
    return InterleavedResult(results["a"], results["b"], mode, ended["rounds_run"], switcher.count if switcher else 0,
                             ended)


def _warm(runners: dict, sides, cases: list[ServerCase], config: ServerBenchConfig, ls: Listener,
          results: dict) -> None:
    if config.skip_warmup:
        return
    for s in sides:
        for bs in dict.fromkeys(c.batch_size for c in cases):
            wc = runners[s].warmup_case(bs)
            if wc is not None:
                row, _ = runners[s].run_case(wc, warmup=True)
                results[s].warmups.append(row)
                if row.status != "ok":
                    ls.warning(f"warm-up of {s.upper()} bs={bs} failed: {row.reason}")


def _run(config: ServerBenchConfig, mode: str, cases: list[ServerCase], rounds: int, runners: dict, switcher,
         ls: Listener, runs: dict, results: dict, began: float) -> dict:
    """The rounds. After each round of a case (its batches on both sides), both halves' rows of that case are
    written again with every finished round (the journal's last row of a case is its row: kbench.runs.store), so
    a kill keeps every finished round. With ``repeat_auto``, the rounds go on until the gate's rule decides every
    case (kbench.gate.sequential) or the next round would not fit in the budget, which counts from ``began`` (the
    run's start: connecting and the warm-up spend it too, so a --budget of 300 ends the run within about 300 s).
    Returns what the manifest's interleave entry records of how it ended."""
    from kbench.gate import sequential

    line_files = {s: [runs[s].dir / RESULT_JSONL] + ([Path(config.result_filename)] if config.result_filename
                                                       else []) for s in SIDES}
    be = runners["a"].backend
    live = []
    for c in cases:
        skip = be.skip_reason(c.batch_size, c.input_len, c.output_len)
        if skip:
            for s in SIDES:
                row = runners[s].row(c, "skipped", skip)
                runs[s].append(row.to_dict())
                results[s].rows.append(row)
        else:
            live.append(c)
    ls.run_started(runs["a"].dir, be.name, results["a"].facts, live)
    ids = {(c.case_id, 0): runners["a"].case_ids(c) for c in live}  # the same prompts on both sides
    done: dict[tuple[str, str], list[dict]] = {(c.case_id, s): [] for c in live for s in SIDES}
    batches: dict[tuple[str, str], list[dict]] = {}  # this round's batches of a case on a side
    rounds_of: dict[str, list[int]] = {c.case_id: [] for c in live}
    latest: dict[tuple[str, str], ServerBenchRow] = {}
    failed: dict[str, tuple[str, dict]] = {}
    decided: dict[str, str] = {}
    out_of_reach: dict[str, int] = {}  # case -> the rounds at which the plan could not decide it (sequential)
    case_alpha: dict[str, float] = {}
    k = config.batches_per_round

    def settled(case_id: str) -> bool:  # no longer measured: failed, decided, or out of the plan's reach
        return case_id in failed or case_id in decided or case_id in out_of_reach

    _warm(runners, SIDES if mode == "two-servers" else ("a",), live, config, ls, results)  # (switch: A is on)
    distinct = mode == "two-servers" and _distinct_servers(runners)
    read_per_round = k > 1 and distinct  # counters once a round
    flushes = _Flushes(config, mode, distinct)
    opened: dict[tuple[str, str], dict | None] = {}  # (case, side) -> the /metrics snapshot before its batches
    auto = config.repeat_auto
    look, look_at, alpha_spent, plan, first_plan = 0, sequential.first_look(config.alpha), None, None, None
    stop, before_rounds = "rounds", time.monotonic() - began  # connecting and the warm-up
    round_times: list[float] = []
    for r in range(rounds):
        t0 = time.monotonic()
        for ci, side in _round_order(len(live), r, mode, k):
            case = live[ci]
            if switcher and switcher.side != side:
                switcher.to(side, runners[side])
                _same_model(results["a"].facts.model, runners[side].backend.facts.model, " after the switch")
                _warm(runners, (side,), live, config, ls, results)
            if settled(case.case_id):
                continue
            if read_per_round and not batches.get((case.case_id, side)):
                opened[(case.case_id, side)] = runners[side].snapshot()
            j = len(batches.get((case.case_id, side), [])) if flushes.skipping else 0  # the side's j-th batch
            if (case.case_id, j) not in ids:  # its own prompts, the same on both sides
                ids[(case.case_id, j)] = runners["a"].case_ids(case, variant=j)
            one = runners[side].timed_batch(case, ids[(case.case_id, j)], False, profiling=False,
                                            counters=not read_per_round,
                                            flush=flushes.needed(side, case.case_id, j))
            if one.get("reason"):
                failed[case.case_id] = (side, one)
                _write_failed(case, runners, runs, results, latest, failed)
                ls.ab_batch(case, side, r, rounds, None, one["reason"])
                continue
            batches.setdefault((case.case_id, side), []).append(one)
            if read_per_round and len(batches[(case.case_id, side)]) == k:  # its K batches: the counters over them all
                one["counters"] = _round_counters(runners[side], opened.pop((case.case_id, side), None),
                                                  k * case.batch_size)
            ls.ab_batch(case, side, r, rounds, one["m"]["latency"], "")
            if all(len(batches.get((case.case_id, s), [])) >= k for s in SIDES):  # the case's round is done
                for s in SIDES:
                    done[(case.case_id, s)].append(_round_value(batches.pop((case.case_id, s))))
                rounds_of[case.case_id].append(r)
                for s in SIDES:
                    row = runners[s].case_row(case, done[(case.case_id, s)], rounds=rounds_of[case.case_id])
                    runs[s].append(row.to_dict())
                    latest[(case.case_id, s)] = row
        round_times.append(time.monotonic() - t0)
        n = r + 1
        _round_finished(runs, n)
        if auto and n == 1 and before_rounds + round_times[0] * look_at > config.budget:
            raise BadInput(f"--budget {config.budget:g} s cannot reach the {look_at} rounds the first look needs: a "
                           f"round took {round_times[0]:.1f} s here (about {round_times[0] * look_at:.0f} s for "
                           f"{look_at}, after {before_rounds:.1f} s of connecting and warm-up); give a larger "
                           f"--budget, fewer cases or --batches-per-round 1")
        per_round = median(round_times[-5:])
        out_of_time = auto and time.monotonic() - began + per_round > config.budget
        if auto and (n == look_at or (out_of_time and plan is not None) or n == rounds):
            # the rounds the budget fits at the pace so far: the first look's plan, which later looks extend
            fits = sequential.planned_rounds(config.budget - (time.monotonic() - began), round_times, rounds)
            if plan is None:  # (kbench.gate.sequential)
                plan, first_plan = sequential.Plan(config.alpha, fits), fits
            else:
                plan.extend(fits)
            look += 1
            alpha_spent = plan.test_alpha(n, last=out_of_time or n == rounds)
            for c in live:
                if settled(c.case_id):
                    continue
                ra, rb = latest.get((c.case_id, "a")), latest.get((c.case_id, "b"))
                if ra is not None and rb is not None and plan.can_decide(n, alpha_spent):
                    v = sequential.decide_case(ra.to_dict(), rb.to_dict(), config.threshold, alpha_spent,
                                               config.power, plan=plan)
                    if v == "out-of-reach":
                        out_of_reach[c.case_id] = n
                    elif v != "open":
                        decided[c.case_id] = v
                    if v != "open":
                        case_alpha[c.case_id] = alpha_spent  # its rows stop here: the gate tests them at this
            ls.ab_look(look, n, alpha_spent, {**decided, **{c: "out-of-reach" for c in out_of_reach}}, len(live))
            look_at = plan.next_look(n)
            if all(settled(c.case_id) for c in live):
                stop = "out-of-reach" if out_of_reach else "decided"
                break
            if plan.is_last(n):
                stop = "planned-rounds"
                break
        if out_of_time:
            stop = "budget"
            break
    else:
        stop = "max-rounds" if auto else "rounds"
    for c in live:
        for s in SIDES:
            row = latest.get((c.case_id, s))
            if row is None:
                continue
            results[s].rows.append(row)
            if row.status == "ok":
                append_lines(line_files[s], row.result_line())
            ls.case_finished(c, row, False)
    out = {"rounds_run": max((len(v) for v in rounds_of.values()), default=0), "stopped": stop,
           "two_processes_one_host": bool(distinct and _one_host(config.url, config.url_b))}
    if auto:
        out.update(looks=look, alpha_spent=alpha_spent, rule=sequential.RULE, threshold=config.threshold,
                   planned_rounds=plan.planned if plan else None, first_plan=first_plan,
                   alpha=config.alpha, power=config.power, budget_s=config.budget,
                   before_rounds_s=round(before_rounds, 2),
                   decided={c: v for c, v in decided.items()}, out_of_reach=dict(out_of_reach),
                   case_alpha={c.case_id: case_alpha.get(c.case_id, alpha_spent) for c in live
                               if alpha_spent is not None})
    return out


class _Flushes:
    """Which batches of the rounds need a flush. A flush empties the server's prefix cache so that a batch's
    prompts are prefilled, not served from the cache; it is needed only before prompts the server has seen since
    its last flush. With --batches-per-round K > 1 each of a side's K batches of a case in a round gets its own
    prompts (the same on both sides: Runner.case_ids' variant), so a server needs one flush a round, before the
    first of its batches that repeats a prompt set, instead of one before every batch (on the 2-core CPU
    machine a flush took about 49 ms, 12 of them a quarter of a round's wall; docs/gate.md). Two server
    processes (told apart by /metrics) are tracked apart; one server behind both URLs, or one that cannot be told
    apart, is one server (B's batch after A's same prompts is flushed). Each batch is flushed as before with K = 1,
    with --cache-hit-rate (its own warming), and when a switch command changes the server."""

    def __init__(self, config: ServerBenchConfig, mode: str, distinct: bool):
        self.skipping = config.batches_per_round > 1 and not config.cache_hit_rate and mode != "switch"
        self.distinct = distinct
        self.seen: dict[str, set | None] = {}  # server -> the (case, prompt set) it prefilled since its flush

    def needed(self, side: str, case_id: str, j: int) -> bool:
        """Whether the side's batch of prompt set ``j`` of the case needs a flush first; records its prompts as
        what that server has seen (since the flush, when there is one)."""
        if not self.skipping:
            return True
        server = side if self.distinct else "one"
        seen = self.seen.get(server)  # None: not flushed yet in the rounds (the warm-up's prompts are there)
        flush = seen is None or (case_id, j) in seen
        if flush:
            seen = self.seen[server] = set()
        seen.add((case_id, j))
        return flush


def _one_host(url_a: str, url_b: str | None) -> bool:
    """Whether both URLs name one machine (the same host, or both loopback): two server processes there share its
    cores, and their own offset can be as large as a change (docs/gate.md); the gate says so. The host is the one
    a request goes to (kbench.server.auth.origin); a URL without one is not taken for any host."""
    import ipaddress
    import socket
    import threading

    from kbench.server.auth import origin

    def resolve(host: str, timeout: float = 2.0) -> str | None:
        """The host's address, or None when the resolver fails or takes longer than ``timeout`` (a daemon
        thread: a hung resolver never holds the run's end)."""
        found: list[str] = []
        t = threading.Thread(target=lambda: found.append(socket.gethostbyname(host)), daemon=True)
        t.start()
        t.join(timeout)
        return found[0] if found else None

    def where(host: str) -> str:
        if host == "localhost":
            return "loopback"
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            try:
                ip = ipaddress.ip_address(resolve(host) or "")
            except ValueError:
                return host
        return "loopback" if ip.is_loopback else str(ip)

    a, b = origin(url_a), origin(url_b) if url_b else None
    return bool(a and b) and where(a[1]) == where(b[1])


def _distinct_servers(runners: dict) -> bool:
    """A and B are two server processes, so that A's /metrics counts only A's batches: both export
    process_start_time_seconds and the two differ. Otherwise (one server behind two URLs, no such metric, no
    /metrics) the counters are read around each batch, where nothing else runs on either server."""
    starts = []
    for s in SIDES:
        snap = ctr.snapshot(runners[s].client)
        starts.append(snap.get("process_start_time_seconds") if snap else None)
    return None not in starts and starts[0] != starts[1]


def _round_counters(runner, before: dict | None, requests: int):
    """The server's counters over a side's K batches of a case in one round: the snapshot before the first, and one
    after the last once the server counted its ``requests`` (two /metrics reads a round instead of 2 K: on a busy
    2-core machine vLLM took about 50 ms to answer each, a third of a round's wall; docs/gate.md)."""
    after = runner.settled_snapshot(before, requests) if before else None
    return ctr.case_counters(runner.backend.name, before, after)


def _round_finished(runs: dict, n: int) -> None:
    """Both manifests say how many rounds are done (each case's row is in the journals already): a run killed with
    kill -9 still says, beside its status "running", how far it got."""
    for s in SIDES:
        runs[s].update_manifest(interleave={**runs[s].manifest.get("interleave"), "rounds_done": n})


def _round_order(n_cases: int, r: int, mode: str, k: int = 1) -> list[tuple[int, str]]:
    """(case index, side) of each batch of round r, in the order they run: two servers, per case k adjacent A/B
    pairs, the pair's order flipping with the round, the case and the pair (ABBA ...); one switched server, A's
    cases then B's (B's then A's in odd rounds: one switch per round), each case's k batches in a row."""
    out = []
    if mode == "switch":
        for side in (SIDES if r % 2 == 0 else SIDES[::-1]):
            out += [(c, side) for c in range(n_cases) for _ in range(k)]
        return out
    for c in range(n_cases):
        for j in range(k):
            out += [(c, side) for side in (SIDES if (r + c + j) % 2 == 0 else SIDES[::-1])]
    return out


def _round_value(batches: list[dict]) -> dict:
    """A round's batches on one side as one: each metric the median of its batches (one burst on a busy machine
    does not decide the round), the server's counters (drafts, accepted tokens, cached and prompt tokens) summed
    over all of them (each batch's are its own: kbench.server.counters), and so are the flushes before them; the
    rest the last batch's; one batch is itself."""
    if len(batches) == 1:
        return batches[0]
    out = dict(batches[-1])
    out["m"] = {}
    for key in batches[-1]["m"]:
        vals = [b["m"][key] for b in batches if b["m"][key] is not None]
        out["m"][key] = median(vals) if vals else None
    counted = [b["counters"] for b in batches if b.get("counters") is not None]
    if counted:
        out["counters"] = ctr.CaseCounters.total(counted)
    fkws = [b["fkw"] for b in batches if b.get("fkw")]
    if fkws:  # the round's flushes
        out["fkw"] = {"flush_attempts": sum(f["flush_attempts"] for f in fkws),
                      "flush_seconds": round(sum(f["flush_seconds"] or 0.0 for f in fkws), 4)}
    return out


def _write_failed(case, runners, runs, results, latest, failed) -> None:
    """A batch that fails fails its case on both sides (no half pair): both rows written now."""
    fs, one = failed[case.case_id]
    for s in SIDES:
        if fs == s:
            row = runners[s].failed_row(case, one)
        else:
            row = runners[s].row(case, "failed", f"the paired batch on {fs.upper()} failed: {one['reason']}")
        runs[s].append(row.to_dict())
        latest[(case.case_id, s)] = row
