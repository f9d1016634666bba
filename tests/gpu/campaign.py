"""The GPU campaign driver: named steps, each a function with its own time limit, run in the order given.

    python3 tests/gpu/campaign.py [--deadline-s S] [--limit STEP=S ...] [--fresh] STEP|GROUP|'shell command' ...
    python3 tests/gpu/campaign.py --list

tests/gpu/h200.sh sets the lent machine up (FlashInfer bundle, wheels, JIT cache, kbench) and runs this.
A step runs its commands as subprocesses (output appended to RES/logs/STEP.txt) and checks what they did:
  PASS     every command exited as expected and every figure was inside its bound
  FAILED   a command exited otherwise, a figure was outside its bound, or something it needs is missing
  TIMEOUT  still running at its time limit (stopped with SIGTERM, then SIGKILL); a sweep it ran is resumed
           by the next call that runs the same step (its run folder comes back in results.tgz)
  NOT RUN  the call's deadline left less time than the step's limit; run it in the next call
A sweep is resumed when its run folder exists and is not complete, reused when complete, started otherwise
(--fresh: always started). The call's deadline (--deadline-s, default CALL_LIMIT - 30 s, CALL_LIMIT default
600, counted from CAMPAIGN_T0 = the shell script's start) stops starting steps that cannot finish; a
resumable step gets the time that is left. After every step RES (logs and run folders) is packed into OUT;
the summary table (step, status, seconds, figures) is printed last and written to OUT/summary.txt.
Exit 0 when every step passed, 1 otherwise, 2 on bad input (an unknown step name, a bad --limit).

Adding a step (in a module of tests/gpu/campaign_steps/):
    @step("tree", limit=300, help="EAGLE draft trees (#26)")
    def tree(ctx):
        ctx.script("tests/gpu/tree_check.py", "--out", ctx.res / "tree")
Only the standard library here (and in campaign_runs, campaign_out, campaign_aot): the driver must run and
report even when kbench, torch or FlashInfer do not import.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

if __name__ == "__main__":  # one module object for the driver and its step modules (one registry)
    sys.modules.setdefault("campaign", sys.modules["__main__"])

from campaign_runs import Run, plan, run_folders  # noqa: E402

PASS, FAILED, TIMEOUT, NOT_RUN = "PASS", "FAILED", "TIMEOUT", "NOT RUN"
GRACE_S = 10  # SIGTERM, then this long for kbench to finalize its run folder, then SIGKILL
MIN_START_S = 60  # a resumable step starts only with this much of the call left
MARGIN_S = 30  # the default deadline leaves this much of the call for the last stop and the packing


class Failed(Exception):
    """A check failed: the message is the reason shown in the summary."""


class TimedOut(Exception):
    """A command was still running at the step's time limit."""


@dataclass
class Step:
    name: str
    fn: Callable[["Ctx"], None]
    limit: float  # seconds
    resumable: bool = False  # its work survives a stop (sweeps resumed by the next call): starts with less time
    help: str = ""


STEPS: dict[str, Step] = {}
GROUPS: dict[str, tuple[list[str], str]] = {}


def step(name: str, limit: float, resumable: bool = False, help: str = ""):
    """Register fn(ctx) as the step `name` with a time limit in seconds."""
    def deco(fn):
        if name in STEPS or name in GROUPS:
            raise ValueError(f"step {name!r} registered twice")
        STEPS[name] = Step(name, fn, float(limit), resumable, help or (fn.__doc__ or "").strip().split("\n")[0])
        return fn
    return deco


def group(name: str, steps: list[str], help: str = "") -> None:
    """A word that stands for several steps (run in this order; a step named twice runs once)."""
    if name in STEPS or name in GROUPS:
        raise ValueError(f"step {name!r} registered twice")
    GROUPS[name] = (list(steps), help)


@dataclass
class Config:
    repo: Path
    res: Path  # run folders and logs (packed into OUT)
    out: Path  # what comes back from the machine
    site: Path  # the unpacked FlashInfer bundle (flashinfer/data/aot lives there)
    deadline: float  # epoch seconds: no step may run past it
    fresh: bool = False
    limits: dict[str, float] = field(default_factory=dict)
    python: str = sys.executable
    kbench: list[str] = field(default_factory=list)

    @staticmethod
    def from_env(deadline_s: float | None = None, fresh: bool = False, limits: dict | None = None) -> "Config":
        t0 = float(os.environ.get("CAMPAIGN_T0") or time.time())
        if deadline_s is None:
            deadline_s = float(os.environ.get("CALL_LIMIT") or 600) - MARGIN_S
        exe = shutil.which("kbench")
        return Config(repo=Path.cwd(), res=Path(os.environ.get("RES", "/tmp/res")),
                      out=Path(os.environ.get("OUT", "/tmp/out")), site=Path(os.environ.get("SITE", "/tmp/site")),
                      deadline=t0 + deadline_s, fresh=fresh, limits=dict(limits or {}),
                      kbench=[exe] if exe else [sys.executable, "-m", "kbench.cli.main"])


@dataclass
class Done:
    rc: int
    text: str  # what the command printed (stdout and stderr)


@dataclass
class Outcome:
    step: str
    status: str
    seconds: float
    figures: str = ""
    reason: str = ""
    report: str = ""  # a step's table (power states, adaptive regret...): in summary.txt after the table

    def line(self) -> str:
        return "; ".join(x for x in (self.reason, self.figures) if x)


class Ctx:
    """What a step function gets: run commands and sweeps, check figures, note what it found."""

    def __init__(self, st: Step, cfg: Config, limit: float, state: dict):
        self.step, self.cfg, self.state = st, cfg, state
        self.res, self.out, self.repo = cfg.res, cfg.out, cfg.repo
        self.started = time.time()
        self.deadline = min(self.started + limit, cfg.deadline if st.resumable else float("inf"))
        self.figures: list[str] = []
        self.problems: list[str] = []
        self.reports: list[str] = []
        self.log = cfg.res / "logs" / f"{st.name}.txt"
        self.log.parent.mkdir(parents=True, exist_ok=True)

    # --- what a step records
    def figure(self, text: str) -> None:
        self.figures.append(text)
        self.note(text)

    def check(self, ok: bool, problem: str) -> None:
        """A failed check fails the step (at its end, so every check of it is still made and shown)."""
        if not ok:
            self.problems.append(problem)
            self.note("CHECK FAILED: " + problem)

    def bound(self, label: str, value: float | None, hi: float | None = None, lo: float | None = None,
              unit: str = "", fmt: str = ".2f") -> None:
        """Record `label value`; fail the step when it is missing or outside [lo, hi]."""
        if value is None:
            self.figure(f"{label} n/a")
            self.check(False, f"{label}: no figure")
            return
        self.figure(f"{label} {value:{fmt}}{unit}")
        if hi is not None:
            self.check(value <= hi, f"{label} {value:{fmt}}{unit} > {hi:{fmt}}{unit}")
        if lo is not None:
            self.check(value >= lo, f"{label} {value:{fmt}}{unit} < {lo:{fmt}}{unit}")

    def report(self, text: str) -> None:
        """A table for the reader: printed when the step ends and written to summary.txt after the table."""
        self.reports.append(text.rstrip())

    def note(self, text: str) -> None:
        with open(self.log, "a", encoding="utf-8") as f:
            f.write(f"# {text}\n")

    def left(self) -> float:
        return self.deadline - time.time()

    # --- what a step runs
    def run(self, cmd: list | str, ok: tuple[int, ...] | None = (0,), env: dict | None = None) -> Done:
        """Run cmd (a list, or a string for bash) in its own process group, output appended to the step's log.
        Failed when its exit code is not in `ok` (None: any), TimedOut at the step's limit."""
        left = self.left()
        shown = cmd if isinstance(cmd, str) else shlex.join(str(c) for c in cmd)
        # in a reason: the program's name, not its path (kbench, python3 tests/gpu/...)
        brief = cmd if isinstance(cmd, str) else shlex.join([Path(str(cmd[0])).name, *map(str, cmd[1:])])
        if left <= 0:
            raise TimedOut(f"no time left for `{_short(brief)}`")
        args = ["bash", "-c", cmd] if isinstance(cmd, str) else [str(c) for c in cmd]
        with open(self.log, "ab") as lf:
            lf.write(f"\n$ {shown}    [{_now()}, {left:.0f} s left]\n".encode())
            lf.flush()
            start = lf.tell()
            try:
                p = subprocess.Popen(args, stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=self.repo, start_new_session=True,
                                     env={**os.environ, **{k: str(v) for k, v in (env or {}).items()}})
            except OSError as e:
                raise Failed(f"{args[0]}: cannot run ({e.strerror or e})") from None
            try:
                rc = p.wait(timeout=left)
            except subprocess.TimeoutExpired:
                rc = None
            finally:
                if p.poll() is None:
                    stop(p)
        text = self.log.read_bytes()[start:].decode(errors="replace")
        if rc is None:
            raise TimedOut(f"`{_short(brief)}` still running at the step's limit")
        if ok is not None and rc not in ok:
            raise Failed(f"`{_short(brief)}` exited {rc}: {last_line(text)}")
        return Done(rc, text)

    def kbench(self, *args, ok: tuple[int, ...] | None = (0,), env: dict | None = None) -> Done:
        return self.run([*self.cfg.kbench, *map(str, args)], ok=ok, env=env)

    def script(self, path: str, *args, ok: tuple[int, ...] | None = (0,), env: dict | None = None) -> Done:
        """Run a Python script of the repo; a script that is not there fails the step with that reason."""
        if not (self.repo / path).is_file():
            raise Failed(f"{path} is missing")
        return self.run([self.cfg.python, path, *map(str, args)], ok=ok, env=env)

    def sweep(self, name: str, args: list[str], out: Path | None = None, ok: tuple[int, ...] | None = (0,),
              env: dict | None = None, complete: bool = True) -> Run:
        """`kbench sweep ARGS --out OUT --name NAME`, resumable across calls (campaign_runs.plan): a complete run
        of NAME is reused, one cut short resumed. Failed unless the run ends complete (complete=False: any)."""
        out = Path(out or self.res)
        made = self.state.setdefault("sweeps_made", set())
        p = plan(out, name, fresh=self.cfg.fresh and (out, name) not in made)
        self.note(f"{name}: {p}")
        if p.action == "done":
            self.figures.append(f"{name}: reused")
            return Run(p.path, "done")
        made.add((out, name))
        if p.shards:
            for s in p.shards:
                if not Run(s).complete:
                    self._sweep_cmd(["sweep", "--resume", s], ok, env, s)
            done = self.kbench("merge", *p.shards, "--out", out, "--name", name)
        elif p.action == "resume":
            done = self._sweep_cmd(["sweep", "--resume", p.path], ok, env, p.path)
        else:
            done = self._sweep_cmd(["sweep", *args, "--out", out, "--name", name], ok, env, None, out, name)
        if p.action == "resume" and f"{name}: resumed" not in self.figures:
            self.figures.append(f"{name}: resumed")
        found = run_folders(out, name)
        if not found:
            raise Failed(f"kbench sweep wrote no run folder {out}/{name}-*")
        run = Run(found[-1], p.action, done.rc)
        if complete and not run.complete:
            raise Failed(f"{run.path.name} is {run.status or 'unreadable'}: {run.manifest.get('stopped_by', '')}")
        return run

    def _sweep_cmd(self, args: list, ok, env, run_dir: Path | None, out: Path | None = None,
                   name: str = "") -> Done:
        """A kbench sweep command (of run_dir, or writing OUT/NAME-...); an exit code not in `ok` fails with the
        rows that say why (wrong, failed)."""
        done = self.kbench(*args, ok=None, env=env)
        if ok is None or done.rc in ok:
            return done
        if run_dir is None:
            found = run_folders(out, name)
            run_dir = found[-1] if found else None
        bad = [r for r in Run(run_dir).measured() if r.get("status") in ("wrong", "failed")] if run_dir else []
        why = ", ".join(f"{r.get('kernel')} {r.get('case_id')} {r.get('status')}" for r in bad[:3])
        raise Failed(f"kbench sweep exited {done.rc}: " + (f"{len(bad)} wrong/failed row(s): {why}" if bad
                                                           else last_line(done.text)))

    def background(self, name: str, cmd: list) -> subprocess.Popen:
        """Start cmd and return at once; its output goes to RES/logs/NAME.txt. Stopped at the end of the call
        unless a step waits for it (wait_background)."""
        log = open(self.res / "logs" / f"{name}.txt", "ab")
        log.write(f"\n$ {shlex.join(map(str, cmd))}    [{_now()}]\n".encode())
        log.flush()
        try:
            p = subprocess.Popen([str(c) for c in cmd], stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, cwd=self.repo, start_new_session=True)
        except OSError as e:
            raise Failed(f"{cmd[0]}: cannot run ({e.strerror or e})") from None
        finally:
            log.close()
        self.state.setdefault("background", {})[name] = p
        return p

    def wait_background(self, name: str) -> int:
        """The exit code of the background process `name` once it ends; TimedOut at the step's limit (it goes on
        running until the call ends). Failed when no step of this call started it."""
        p = self.state.get("background", {}).get(name)
        if p is None:
            raise Failed(f"{name} was not started in this call")
        try:
            return p.wait(timeout=max(self.left(), 0.1))
        except subprocess.TimeoutExpired:
            raise TimedOut(f"{name} still running at the step's limit") from None


def stop(p: subprocess.Popen) -> None:
    """SIGTERM to the command (kbench finalizes its run folder and stops its workers), SIGKILL to its process
    group GRACE_S later: nothing it started outlives the step."""
    try:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    except ProcessLookupError:
        pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    p.wait()


def last_line(text: str) -> str:
    """The last line that says something (an `error:` line when there is one), for a failure's reason."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.lower().startswith("error") or "Error:" in ln]
    return _short((errors or lines or ["(no output)"])[-1], 200)


def _short(s: str, n: int = 90) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[: n - 3] + "..."


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%H:%M:%S")


def expand(words: list[str]) -> list[str]:
    """Step names in order, groups expanded, each step once; a word with a space is a shell command
    (sh1, sh2, ...). ValueError naming an unknown word."""
    out: list[str] = []
    for w in words:
        if " " in w.strip():
            out.append(w)
            continue
        names = GROUPS[w][0] if w in GROUPS else [w] if w in STEPS else None
        if names is None:
            raise ValueError(f"unknown step {w!r} (steps: {', '.join(sorted([*STEPS, *GROUPS]))}; "
                             f"a shell command needs a space)")
        out.extend(n for n in names if n not in out)
    return out


def shell_step(command: str, n: int) -> Step:
    def fn(ctx: Ctx) -> None:
        ctx.figure(last_line(ctx.run(command).text))
    return Step(f"sh{n}", fn, 300.0, False, command)


def run_steps(words: list[str], cfg: Config, after_each: Callable[[list[Outcome]], None] | None = None,
              echo: Callable[[str], None] = print) -> list[Outcome]:
    """Run the steps in order; an Outcome for each (none raises). after_each(outcomes so far) after each."""
    state: dict = {}
    outcomes = []
    n_sh = 0
    try:
        for w in words:
            if w in STEPS:
                st = STEPS[w]
            else:
                n_sh += 1
                st = shell_step(w, n_sh)
            outcomes.append(run_one(st, cfg, state, echo))
            if after_each:
                after_each(outcomes)
    finally:
        for name, proc in state.get("background", {}).items():  # e.g. prebuild-bg: nothing outlives the call
            if proc.poll() is None:
                echo(f"{_now()} {name}: still running at the end of the call: stopped")
                stop(proc)
    return outcomes


def run_one(st: Step, cfg: Config, state: dict, echo=print) -> Outcome:
    # a shell step: its own --limit shN=S, else the one for every shell step, sh=S
    limit = cfg.limits.get(st.name, st.limit if st.name in STEPS else cfg.limits.get("sh", st.limit))
    left = cfg.deadline - time.time()
    if st.resumable and left < min(MIN_START_S, limit):
        return _skip(st, f"{left:.0f} s left in the call, a start needs {min(MIN_START_S, limit):.0f} s", echo)
    if not st.resumable and limit > left:
        return _skip(st, f"needs up to {limit:.0f} s, {left:.0f} s left in the call", echo)
    ctx = Ctx(st, cfg, limit, state)
    cut = ctx.deadline < ctx.started + limit  # a resumable step given the rest of the call, not its limit
    echo(f"{_now()} {st.name}: start (limit {ctx.deadline - ctx.started:.0f} s"
         f"{', the rest of the call' if cut else ''})")
    ctx.note(f"=== {st.name} at {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}, "
             f"limit {ctx.deadline - ctx.started:.0f} s")
    status, reason = PASS, ""
    try:
        st.fn(ctx)
        if ctx.problems:
            status, reason = FAILED, "; ".join(ctx.problems)
    except Failed as e:
        status, reason = FAILED, "; ".join([str(e), *ctx.problems])
    except TimedOut as e:
        status = TIMEOUT
        reason = str(e) + ("; stopped at the call's deadline" if cut else "") + \
            ("; the next call resumes it" if st.resumable else "")
    except Exception as e:  # a bug in a step or an unreadable file: that step fails, the campaign goes on
        with open(ctx.log, "a", encoding="utf-8") as f:
            traceback.print_exc(file=f)
        status, reason = FAILED, f"{type(e).__name__}: {_short(str(e), 160)} (traceback in logs/{st.name}.txt)"
    o = Outcome(st.name, status, round(time.time() - ctx.started, 1), "; ".join(ctx.figures), reason,
                "\n".join(ctx.reports))
    ctx.note(f"=== {st.name} {status} in {o.seconds:.0f} s: {o.line()}")
    echo(f"{_now()} {st.name}: {status} in {o.seconds:.0f} s  {_short(o.line(), 300)}")
    if o.report:
        echo(o.report)
    if status != PASS:
        tail = [ln for ln in ctx.log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()][-12:]
        echo("    " + "\n    ".join(tail))
    return o


def _skip(st: Step, why: str, echo) -> Outcome:
    echo(f"{_now()} {st.name}: {NOT_RUN} ({why})")
    return Outcome(st.name, NOT_RUN, 0.0, "", why)


def table(outcomes: list[Outcome], width: int = 200) -> str:
    w = max([len("step"), *(len(o.step) for o in outcomes)])
    lines = [f"{'step':<{w}}  {'status':<7}  {'seconds':>7}  figures"]
    for o in outcomes:
        lines.append(f"{o.step:<{w}}  {o.status:<7}  {o.seconds:>7.0f}  {_short(o.line(), width)}")
    return "\n".join(lines)


def summary(outcomes: list[Outcome], reports: bool = True) -> str:
    """The steps' reports (when asked), then the table, the counts and the exit code, then the reasons in full."""
    counts = {s: sum(o.status == s for o in outcomes) for s in (PASS, FAILED, TIMEOUT, NOT_RUN)}
    head = (f"campaign: {len(outcomes)} step(s): " + ", ".join(f"{v} {k}" for k, v in counts.items() if v)
            + f"; exit {exit_code(outcomes)}")
    long = [f"  {o.step} {o.status}: {o.line()}" for o in outcomes if len(o.line()) > 200 or o.status != PASS]
    rep = [f"--- {o.step}\n{o.report}" for o in outcomes if o.report and reports]
    return "\n".join(rep + [table(outcomes), head] + (["details:", *long] if long else []))


def exit_code(outcomes: list[Outcome]) -> int:
    return 0 if outcomes and all(o.status == PASS for o in outcomes) else 1


def parse_limits(items: list[str]) -> dict[str, float]:
    out = {}
    for it in items:
        name, _, secs = it.partition("=")
        try:
            out[name] = float(secs)
        except ValueError:
            raise ValueError(f"--limit {it!r}: expected STEP=SECONDS") from None
        if out[name] <= 0 or name not in STEPS and not re.fullmatch(r"sh\d*", name):
            raise ValueError(f"--limit {it!r}: expected a known STEP (or sh for every shell command, shN for the "
                             f"Nth) and seconds > 0")
    return out


def listing() -> str:
    lines = ["steps (limit s; r = resumable):"]
    for s in STEPS.values():
        lines.append(f"  {s.name:<16} {s.limit:>5.0f} {'r' if s.resumable else ' '}  {s.help}")
    lines.append("groups:")
    for g, (names, h) in GROUPS.items():
        lines.append(f"  {g:<16} {' '.join(names)}" + (f"  ({h})" if h else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import campaign_steps  # noqa: F401 - registers the steps
    from campaign_aot import restore_hidden
    from campaign_out import pack

    ap = argparse.ArgumentParser(prog="campaign.py", description=__doc__.split("\n")[0])
    ap.add_argument("words", nargs="*", help="steps, groups or shell commands, in order")
    ap.add_argument("--deadline-s", type=float, help="seconds from the call's start (CAMPAIGN_T0) by which every "
                    "step must end (default CALL_LIMIT - 30, CALL_LIMIT default 600)")
    ap.add_argument("--limit", action="append", default=[], metavar="STEP=S",
                    help="another time limit for a step (sh: every shell command; sh1, sh2, ...: one of them)")
    ap.add_argument("--fresh", action="store_true", help="start every sweep anew (no resume, no reuse)")
    ap.add_argument("--list", action="store_true", help="print the steps and groups and stop")
    ap.add_argument("--check", action="store_true", help="check the arguments and stop (h200.sh, before its setup)")
    a = ap.parse_args(argv)
    if a.list:
        print(listing())
        return 0
    try:
        words = expand(a.words)
        cfg = Config.from_env(a.deadline_s, a.fresh, parse_limits(a.limit))
        if not words:
            raise ValueError("no step given (--list prints them)")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.check:
        return 0
    cfg.out.mkdir(parents=True, exist_ok=True)
    (cfg.res / "logs").mkdir(parents=True, exist_ok=True)
    restore_hidden(cfg.site)  # a call cut short inside tta-cold left the AOT modules aside
    if "aot" not in words and any((cfg.site / "flashinfer" / "data" / "aot").glob("*/*.so")):
        words.insert(0, "aot")  # carried AOT modules are checked before any step loads them
    print(f"{_now()} campaign: {' '.join(words)} ({cfg.deadline - time.time():.0f} s left in the call)", flush=True)

    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S")

    def after_each(outcomes: list[Outcome]) -> None:
        """The summary so far and RES packed into OUT: a call cut short still brings back what ran."""
        (cfg.res / "logs" / f"summary-{stamp}.json").write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
        (cfg.out / "summary.txt").write_text(summary(outcomes) + "\n", encoding="utf-8")
        packed, problems = pack(cfg.res, cfg.out)
        for line in problems:
            print("    WARNING: " + line, flush=True)
        tail = ["packed: " + "; ".join(packed), *(f"WARNING: {p}" for p in problems)]
        (cfg.out / "summary.txt").write_text("\n".join([summary(outcomes), *tail]) + "\n", encoding="utf-8")

    outcomes = run_steps(words, cfg, after_each, echo=_echo)
    print(summary(outcomes, reports=False), flush=True)  # the reports were printed as their steps ended
    return exit_code(outcomes)


def _echo(text: str) -> None:
    print(text, flush=True)


if __name__ == "__main__":
    sys.exit(main())
