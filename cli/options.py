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


class OutputPath(click.Path):
    """click.Path for a file or folder a command writes (--out, --markdown, --junit, --json FILE, --archive,
    --jit-cache, --result-filename, --resume): an empty value ('' or blanks) is refused with one line naming the
    option (exit 2) before anything runs. An empty path was skipped as if the option were not given, or read as the
    current folder. ``example`` is what the line suggests instead (e.g. gate.md), ``what`` what it names (default:
    file or folder, from dir_okay/file_okay)."""

    def __init__(self, example: str, what: str | None = None, **kwargs):
        kwargs.setdefault("readable", False)  # an output: kbench writes it (what it may replace is its writer's check)
        super().__init__(**kwargs)
        self.example = example
        self.what = what or ("folder" if not self.file_okay else "file" if not self.dir_okay else "path")

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            opt = param.opts[0] if param is not None and param.opts else "the path"
            raise click.UsageError(f"{opt}: an empty path; give a {self.what} (e.g. {opt} {self.example})", ctx)
        return super().convert(value, param, ctx)


class _AsciiNumber:
    """A number option written in ASCII: click's int and float types (Python's int() and float()) take '١٢',
    '６４' and '1_000' as 12, 64 and 1000; kbench refuses them everywhere else (values.ascii_digits, parse_float),
    so its options do too."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and (not value.isascii() or "_" in value):
            self.fail(f"{value!r} is not a number written in ASCII (digits 0-9, no '_')", param, ctx)
        return super().convert(value, param, ctx)


class _Int(_AsciiNumber, click.types.IntParamType):
    pass


class _Float(_AsciiNumber, click.types.FloatParamType):
    pass


class IntRange(_AsciiNumber, click.IntRange):
    """click.IntRange, ASCII digits only."""


class FloatRange(_AsciiNumber, click.FloatRange):
    """click.FloatRange, ASCII digits only and finite (click's takes inf where no maximum is set: a manifest
    would then hold JSON's non-standard Infinity)."""

    def convert(self, value, param, ctx):
        v = super().convert(value, param, ctx)
        if v != v or v in (float("inf"), float("-inf")):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return v


INT = _Int()      # type=INT where click would take type=int
FLOAT = _Float()  # type=FLOAT where click would take type=float
