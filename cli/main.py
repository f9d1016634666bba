"""`kbench` entry point: one click group; each command lives in its own module under cli/, imported only
when that command runs (torch and pandas load in about 4 s: `kbench --help` must not pay for them)."""
from __future__ import annotations

import importlib
import sys

import click

from kbench import __version__
from kbench.cli.errors import one_line_errors, rich_closed_pipe, stopped
from kbench.text import one_line

# command name -> (module, attribute, the line `kbench --help` shows for it without importing it;
# tests/test_help.py checks each command exists and its own help says the same thing)
COMMANDS = {
    "sweep": ("kbench.cli.sweep_cmd", "sweep", "Sweep batch size x q_len x kv_len over every decode and context kernel."),
    "merge": ("kbench.cli.sweep_cmd", "merge", "Join shard runs (from --shard i/N or --devices) into one run."),
    "prebuild": ("kbench.cli.prebuild_cmd", "prebuild", "Build the FlashInfer modules a sweep of this grid compiles, before the sweep (or for another machine)."),
    "kernels": ("kbench.cli.info_cmd", "kernels_cmd", "List every kernel with its availability on this machine."),
    "env": ("kbench.cli.info_cmd", "env_cmd", "The device, SM, versions, clocks and measured bandwidth ceilings."),
    "validate-timer": ("kbench.cli.validate_cmd", "validate_timer_cmd", "Time every available kernel at 6 shapes with kbench's timer and CUPTI."),
    "server-bench": ("kbench.cli.server_bench_cmd", "server_bench", "One-batch benchmark of a live SGLang or vLLM server."),
    "gate": ("kbench.cli.gate_cmd", "gate", "Compare a candidate run with a baseline; exit 1 on a regression."),
    "baseline": ("kbench.cli.gate_cmd", "baseline", "Write or refresh the baseline NAME from RUN, meant to be committed."),
    "report": ("kbench.cli.report_cmd", "report_cmd", "Winners, crossovers, a selection policy, regret and plots from RUNs."),
    "select": ("kbench.cli.report_cmd", "select_cmd", "The kernel to use for one shape, from a policy file."),
    "layers": ("kbench.cli.layers_cmd", "layers_cmd", "Time a model's other layers (all but attention) per part of a speculative step on this GPU."),
    "recommend": ("kbench.cli.recommend_cmd", "recommend_cmd", "The engine flags to set for a workload, from a run's measurements."),
    "resolve": ("kbench.cli.resolve_cmd", "resolve_cmd", "What a launch line runs, as the engine release resolves it (each field with its rule)."),
    "export": ("kbench.cli.recommend_cmd", "export_cmd", "Write the policy as a standalone Python selector that answers as kbench select."),
}


_NO_ARGS = getattr(click.exceptions, "NoArgsIsHelpError", ())  # click >= 8.2 raises it for a bare group


class KbenchGroup(click.Group):
    """Lazy commands; kbench's own errors, file-system errors and click's usage errors as one line and
    their exit code (2 for bad input), never a traceback."""

    def list_commands(self, ctx):
        return list(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        mod, attr, _ = COMMANDS[name]
        return getattr(importlib.import_module(mod), attr)

    def format_commands(self, ctx, formatter):
        rows = []
        for name, (_, _, short) in COMMANDS.items():
            rows.append((name, short))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx):
        from rich.console import Console

        Console.on_broken_pipe = rich_closed_pipe  # rich would exit 1 on its own
        return one_line_errors(super().invoke)(ctx)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        from kbench.runs.signals import terminate_as_interrupt

        # SIGTERM is Ctrl-C for the whole command (parsing, loading, building, printing), not only in the blocks that
        # write a run or replace a folder (those keep their own handling within this one): exit 143 and one line
        try:
            with terminate_as_interrupt():
                self._standalone(args, prog_name, complete_var, **extra)
        except KeyboardInterrupt as e:  # outside the command's invoke (one_line_errors), e.g. while it exits
            stopped(e)

    def _standalone(self, args, prog_name, complete_var, **extra):
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _NO_ARGS as e:  # a bare `kbench`: the help, as --help prints it (not an error line made of it)
            click.echo(e.ctx.get_help())
            sys.exit(0)
        except click.UsageError as e:  # unknown option, missing argument, bad choice: one line, exit 2
            where = e.ctx.command_path if e.ctx is not None else (prog_name or "kbench")
            click.echo(f"error: {one_line(e.format_message())} (see {where} --help)", err=True)
            sys.exit(2)
        except click.ClickException as e:
            click.echo(f"error: {one_line(e.format_message())}", err=True)
            sys.exit(e.exit_code)
        except click.Abort as e:
            if isinstance(e.__cause__, KeyboardInterrupt):  # Ctrl-C or SIGTERM while click parsed the arguments
                stopped(e.__cause__)
            click.echo("error: aborted", err=True)
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)


@click.group(cls=KbenchGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kbench")
def cli():
    """Which attention kernel should serve speculative decoding's short-query extend batches?

    Sweep decode and context kernels over draft-extend shapes, check each against a reference,
    time them, and turn the results into a kernel-selection policy, a CI gate and a server benchmark.
    Exit codes: 0 ok, 1 gate failed or a kernel was wrong, 2 bad input or an output that cannot be written,
    130 stopped by Ctrl-C, 143 stopped by SIGTERM (outputs left whole; a sweep or server-bench --resume finishes).
    """


def main() -> None:
    """The `kbench` process: SIGTERM raises from here on (raise_on_sigterm; the command's own block, KbenchGroup.main,
    sits within), and is ignored once the command has ended and Python shuts down (its exit code set)."""
    from kbench.runs.signals import ignore_sigterm, raise_on_sigterm

    raise_on_sigterm()
    try:
        cli(prog_name="kbench")
    except KeyboardInterrupt as e:  # between the command's block and here
        stopped(e)
    finally:
        ignore_sigterm()


if __name__ == "__main__":
    main()
