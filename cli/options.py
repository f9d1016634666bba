"""Option helpers shared by the commands: old spellings kept as hidden aliases, and the examples section that
ends every command's --help."""
from __future__ import annotations

import click


class AliasOption(click.Option):
    """An option whose old spellings still work but are not shown in --help (a script may use them):
    ``@click.option("--kv-layout", "--layout", "kv_layout", cls=AliasOption, hidden_aliases=("--layout",))``."""

    def __init__(self, *args, hidden_aliases: tuple[str, ...] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.hidden_aliases = tuple(hidden_aliases)
        unknown = set(self.hidden_aliases) - set(self.opts)
        assert not unknown, f"hidden aliases must be spellings of the option: {unknown}"

    def get_help_record(self, ctx):
        shown = self.opts
        self.opts = [o for o in shown if o not in self.hidden_aliases]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = shown


def examples(*lines: str) -> str:
    """The closing 'Examples:' section of a command's help (kept verbatim by click's \\b marker)."""
    return "\n\n\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)
