"""`kbench` entry point: one click group; each command lives in its own module under cli/."""
from __future__ import annotations

import importlib

import click

from kbench import __version__
from kbench.cli.errors import one_line_errors

# module -> click command objects it defines (each module keeps its command next to its rendering)
COMMAND_MODULES = {
    "kbench.cli.sweep_cmd": ["sweep", "merge"],
    "kbench.cli.info_cmd": ["kernels_cmd", "env_cmd"],
    "kbench.cli.validate_cmd": ["validate_timer_cmd"],
    "kbench.cli.server_bench_cmd": ["server_bench"],
    "kbench.cli.gate_cmd": ["gate", "baseline"],
    "kbench.cli.report_cmd": ["report_cmd", "select_cmd"],
}


class KbenchGroup(click.Group):
    """Turns kbench's own errors into one line and their exit code (2 for bad input), never a traceback."""

    def invoke(self, ctx):
        return one_line_errors(super().invoke)(ctx)


@click.group(cls=KbenchGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kbench")
def cli():
    """Which attention kernel should serve speculative decoding's short-query extend batches?

    Sweep decode and context kernels over draft-extend shapes, check each against a reference,
    time them, and turn the results into a kernel-selection policy, a CI gate and a server benchmark.
    Exit codes: 0 ok, 1 gate failed or a kernel was wrong, 2 bad input.
    """


for _mod, _names in COMMAND_MODULES.items():
    _m = importlib.import_module(_mod)
    for _n in _names:
        cli.add_command(getattr(_m, _n))


def main() -> None:
    cli(prog_name="kbench")


if __name__ == "__main__":
    main()
